package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
