// Package rdmatest is the provider-conformance suite of the rdma API: the
// same table of tests runs against every provider (rdma/soft on loopback,
// rdma/ibverbs on rxe or a RoCE NIC), so that a consumer such as
// fabrics/rdma sees the same behaviour from both.
//
// A provider's test calls Run with an Opener that returns two devices
// that can reach each other. They may be one and the same device: on a
// real NIC or on rxe, two QPs of one device connect to each other
// through the device's own GID, and the suite is written for that (each
// test creates its own protection domains, completion queues and QPs,
// and the connection-manager tests listen and connect on distinct
// ports).
//
// Each test is one entry of a table and runs as a subtest named after
// it ("Send/MTU+1", "RemoteAccess/WriteBadRKey", "CM/Reject", ...). The
// tests verify every byte they move against position-dependent
// patterns, and wait for completions and connection events with
// deadlines (Options.Timeout), never with fixed sleeps. What a provider
// legitimately cannot do (remappable regions, invalidating plain
// registrations, SQD, a CQ handler, atomics) is probed and skipped with
// the reason, never passed silently.
//
// Where it runs:
//
//	go test -run TestConformance ./rdma/soft      # loopback: 127.77.0.x and ::1, two devices and one
//	NVMEOF_IBVERBS_ADDR=192.0.2.2 NVMEOF_IBVERBS_DEVICE=rxe0 \
//	    go test -tags ibverbs -run TestConformance ./rdma/ibverbs   # any rdma-core device
//	go test -run TestIbverbsConformance ./tests/interop   # rxe in a kernel-peer guest, IPv4 and IPv6 (root)
package rdmatest
