package hostcli

import (
	"fmt"
	"net"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/metrics"
	"github.com/nvmeof/nvmeof/rdma"
)

// The flags of the connection daemon's Prometheus endpoint, on connect,
// connect-all and the daemon itself (docs/metrics.md).
var (
	metricsAddressFlag = &cli.StringFlag{Name: "metrics-address",
		Usage: "the connection daemon serves Prometheus metrics at http://`ADDR`/metrics (HOST:PORT; off when empty). " +
			"connect-all gives its Nth daemon (from 0) PORT+N"}
	pprofFlag = &cli.BoolFlag{Name: "pprof", Usage: "the connection daemon also serves Go's pprof profiles under /debug/pprof/ on the metrics address"}
)

// metricsDaemons counts the daemons this command started with a metrics
// address: connect-all's Nth gets the port plus N.
var metricsDaemons int

// daemonMetricsArgs returns the daemon's metrics flags for the next
// daemon connect starts.
func daemonMetricsArgs(c *cli.Context) ([]string, error) {
	addr := c.String("metrics-address")
	if addr == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %q: want HOST:PORT: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %q: port %q: %w", addr, port, err)
	}
	if p != 0 {
		p += uint64(metricsDaemons)
		if p > 65535 {
			return nil, fmt.Errorf("--metrics-address %q: no port left for daemon %d", addr, metricsDaemons)
		}
	}
	metricsDaemons++
	args := []string{"--metrics-address", net.JoinHostPort(host, strconv.FormatUint(p, 10))}
	if c.Bool("pprof") {
		args = append(args, "--pprof")
	}
	return args, nil
}

// startDaemonMetrics serves the daemon's metrics when it was given an
// address: the controller's counters and those of its RDMA device. The
// returned function stops the endpoint.
func startDaemonMetrics(c *cli.Context, ctrl *initiator.Controller, name string, dev rdma.Device, log hclog.Logger) (func(), error) {
	addr := c.String("metrics-address")
	if addr == "" {
		return func() {}, nil
	}
	ctrl.EnableLatencyStats(true)
	devices := func() []rdma.Device {
		if dev == nil {
			return nil
		}
		return []rdma.Device{dev}
	}
	reg, err := metrics.NewRegistry(metrics.NewHostCollector(ctrl, name), &metrics.RDMACollector{Devices: devices})
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
