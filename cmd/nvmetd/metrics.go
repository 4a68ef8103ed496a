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
	// Hosts create controllers and queues: by default their series are
	// bounded, and per-queue series and host NQNs are left out.
	metricsPerQueueFlag = &cli.BoolFlag{Name: "metrics-per-queue", Usage: "also export per-queue series: the target's queue_size and queue_inflight_commands and the soft RDMA device's per-QP counters (bounded as --metrics-max-controllers says, and 256 QPs per device)"}
	metricsHostNQNFlag  = &cli.BoolFlag{Name: "metrics-hostnqn", Usage: "label controller_info with the host NQN (off: with the CNTLID it is what an I/O queue Connect to that controller needs)"}
	metricsMaxCtrlsFlag = &cli.IntFlag{Name: "metrics-max-controllers", Value: metrics.DefaultMaxControllers, Usage: "export per-controller series for at most `N` controllers (the others are counted in nvmeof_target_controllers_not_exported; 0: none)"}
)

// metricsOptions returns the collectors' options the flags set.
func metricsOptions(c *cli.Context) (metrics.TargetOptions, int) {
	opts := metrics.TargetOptions{
		PerQueue:       c.Bool("metrics-per-queue"),
		HostNQN:        c.Bool("metrics-hostnqn"),
		MaxControllers: c.Int("metrics-max-controllers"),
	}
	if opts.MaxControllers <= 0 {
		opts.MaxControllers = -1 // none
	}
	maxQPs := -1 // no per-QP series
	if opts.PerQueue {
		maxQPs = metrics.DefaultMaxQPs
	}
	return opts, maxQPs
}

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
	opts, maxQPs := metricsOptions(c)
	reg, err := metrics.NewRegistry(
		metrics.NewTargetCollectorWith(srv.Target, opts),
		&metrics.RDMACollector{Devices: srv.Devices, MaxQPs: maxQPs},
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
