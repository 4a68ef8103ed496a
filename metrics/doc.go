// Package metrics exports the counters of the target (target.Stats), of
// the host's connection daemons (initiator.Controller.Stats) and of the
// RDMA devices (the soft provider's counters, rdma-core's sysfs port
// counters) as Prometheus metrics, on an HTTP endpoint with Go's pprof
// profiles optionally beside them. docs/metrics.md lists the metrics.
package metrics
