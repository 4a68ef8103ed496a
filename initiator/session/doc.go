// Package session keeps the host-side state of nvmeof's connections: one
// daemon process per connected controller holds the association and the
// block-device mappings of its namespaces, and this package is what the
// daemon and the nvmeof commands (list, disconnect, id-ctrl, ...) share.
//
// # Run directory
//
// Everything lives under a run directory (DefaultRunDir, /run/nvmeof):
//
//	nvmeof0.lock       the controller name's lock (created O_EXCL, flock'ed by the daemon)
//	nvmeof0/state.json the daemon's State (pid, addresses, NQNs, controller, namespaces)
//	nvmeof0/ctl.sock   the daemon's control socket (JSON requests, see Request)
//	nvmeof0.log        the daemon's log, appended by every daemon of that name and kept after it exits
//	nvmeof0/n1/fuse    the FUSE mount of namespace 1 when it is mapped by FUSE + loop
//
// Controller names nvmeof0, nvmeof1, ... are allocated by creating the lock
// file with O_EXCL (Allocate). The daemon holds an exclusive flock on it for
// its whole life, so a lock file nobody holds belongs to a daemon that died:
// Scan and Allocate clean such stale entries up (lazy unmount of their FUSE
// mounts, detach of their loop devices, removal of their files).
//
// # Control protocol
//
// A client connects to ctl.sock, writes one Request as a JSON line and reads
// one Response as a JSON line; the daemon then closes the connection.
package session
