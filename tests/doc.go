// Package tests holds end-to-end tests of the target and initiator over the soft RDMA provider on loopback; tests/interop holds the tests against the Linux kernel under kernel-peer.
package tests
