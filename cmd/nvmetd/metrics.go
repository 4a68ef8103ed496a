package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/metrics"
	"github.com/nvmeof/nvmeof/target/server"
)

// The flags of the Prometheus endpoint (docs/metrics.md).
var (
	metricsAddressFlag = &cli.StringFlag{Name: "metrics-address", Usage: "serve Prometheus metrics at http://`ADDR`/metrics (HOST:PORT; off when empty); also turns on the I/O latency histograms"}
	pprofFlag          = &cli.BoolFlag{Name: "pprof", Usage: "also serve Go's pprof profiles under /debug/pprof/ on the metrics address"}
)

// startMetrics starts the metrics endpoint when --metrics-address is set;
// the returned function stops it (a no-op without one).
func startMetrics(c *cli.Context, srv *server.Server, log hclog.Logger) (func(), error) {
	addr := c.String("metrics-address")
	if addr == "" {
		if c.Bool("pprof") {
			log.Warn("--pprof needs --metrics-address: no profiles served")
		}
		return func() {}, nil
	}
	srv.Target.EnableLatencyStats(true)
	reg, err := metrics.NewRegistry(
		metrics.NewTargetCollector(srv.Target),
		&metrics.RDMACollector{Devices: srv.Devices},
	)
	if err != nil {
		return nil, err
	}
	ms, err := metrics.Listen(addr, metrics.Handler(reg, c.Bool("pprof")), log.Named("metrics"))
	if err != nil {
		return nil, err
	}
	log.Info("serving metrics", "url", "http://"+ms.Addr().String()+"/metrics", "pprof", c.Bool("pprof"))
	return func() { ms.Close() }, nil
}
