// Package target is the transport-neutral NVMe-oF target: subsystems, namespaces, controllers, ports and hosts; admin and I/O command execution; the discovery controller; keep-alive and asynchronous events.
package target
