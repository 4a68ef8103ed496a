package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/metrics"
)

// TestMetricsEndpoint: --metrics-address serves the target's and the
// soft RDMA device's metrics (port 0: the kernel picks one, the log says
// which), --pprof the profiles beside them; an address that cannot be
// bound stops the start with an error naming it.
func TestMetricsEndpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "n.hcl")
	const nqn = "nqn.2026-11.io.nvmeof:metrics"
	writeFile(t, cfg, `port "p" {
  address  = "127.79.2.5"
  provider = "soft"
  congestion {
    enabled = true
  }
}
subsystem "`+nqn+`" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`)
	d := startDaemon(t, dir, "--config", cfg, "--metrics-address", "127.79.2.6:0", "--pprof")
	l := d.waitFor("serving metrics")
	m := regexp.MustCompile(`url=(http://127\.79\.2\.6:[0-9]+)/metrics`).FindStringSubmatch(l)
	if m == nil {
		t.Fatalf("no URL in %q", l)
	}
	d.waitFor("serving subsystem")
	get := func(path string) string {
		t.Helper()
		cl := http.Client{Timeout: 20 * time.Second}
		resp, err := cl.Get(m[1] + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	body := get("/metrics")
	for _, want := range []string{
		`nvmeof_target_controllers{subnqn="` + nqn + `"} 0`,
		`nvmeof_target_namespace_enabled{nsid="1",subnqn="` + nqn + `"} 1`,
		`nvmeof_target_io_commands_total{nsid="1",opcode="read",subnqn="` + nqn + `"} 0`,
		`nvmeof_rdma_device_info{addr="127.79.2.5",device=`,
		`nvmeof_rdma_packets_sent_total{device=`,
		// Congestion control, under ConnectX's names (docs/congestion.md).
		`nvmeof_rdma_np_ecn_marked_roce_packets_total{device=`,
		`nvmeof_rdma_np_cnp_sent_total{device=`,
		`nvmeof_rdma_rp_cnp_handled_total{device=`,
		`nvmeof_rdma_rp_cnp_ignored_total{device=`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	get("/debug/pprof/")

	code, _, errs := runNvmetd(t, dir, "--config", cfg, "--metrics-address", "127.79.2.6")
	if code != 1 || !strings.Contains(errs, "metrics: listen on 127.79.2.6") {
		t.Errorf("bad --metrics-address: exit %d, stderr %q", code, errs)
	}
}

// TestMetricsOptions: by default nvmetd exports no per-queue or per-QP
// series, no host NQN, and per-controller series for at most
// metrics.DefaultMaxControllers controllers; the flags turn them on.
func TestMetricsOptions(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   metrics.TargetOptions
		maxQPs int
	}{
		{nil, metrics.TargetOptions{MaxControllers: metrics.DefaultMaxControllers}, -1},
		{[]string{"--metrics-per-queue", "--metrics-hostnqn", "--metrics-max-controllers", "10"}, metrics.TargetOptions{PerQueue: true, HostNQN: true, MaxControllers: 10}, metrics.DefaultMaxQPs},
		{[]string{"--metrics-max-controllers", "0"}, metrics.TargetOptions{MaxControllers: -1}, -1},
	} {
		var got metrics.TargetOptions
		var maxQPs int
		app := &cli.App{Flags: []cli.Flag{metricsPerQueueFlag, metricsHostNQNFlag, metricsMaxCtrlsFlag},
			Action: func(c *cli.Context) error { got, maxQPs = metricsOptions(c); return nil }}
		if err := app.Run(append([]string{"nvmetd"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if got != tc.want || maxQPs != tc.maxQPs {
			t.Errorf("%q: %+v, %d QPs; want %+v, %d", tc.args, got, maxQPs, tc.want, tc.maxQPs)
		}
	}
}
