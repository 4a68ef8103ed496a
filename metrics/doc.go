// Package metrics exports the counters of the target and of the host's
// connection daemons as Prometheus metrics, with the RDMA providers'
// counters, on an HTTP endpoint (with pprof optionally).
package metrics

import (
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/common/expfmt"
)
