package hostcli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const metricsTargetHCL = `port "p0" {
  transport = "loop"
  address   = "127.0.0.1"
  service   = 4420
}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = true

  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`

// TestDaemonMetrics connects through a connection daemon started with
// --metrics-address (port 0: the kernel picks one, which the daemon logs)
// and scrapes its endpoint: the controller is live, its namespace has
// counters, pprof answers, and promtool (when installed) finds the
// exposition well formed.
func TestDaemonMetrics(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "target.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(metricsTargetHCL, tNQN)), 0o600); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	cli := runDirCLI(t, runDir)
	code, out, errs := cli("connect", "-t", "loop", "-a", "127.0.0.1", "-s", "4420", "--target-config", cfg, "-n", tNQN,
		"-q", tHost, "--map", "none", "--timeout", "30s", "--metrics-address", "127.61.7.3:0", "--pprof")
	if code != 0 {
		t.Fatalf("connect: exit %d: %s%s", code, out, errs)
	}
	name := strings.TrimSpace(out)
	logs, _ := filepath.Glob(filepath.Join(runDir, "*.log"))
	var url string
	re := regexp.MustCompile(`url=(http://127\.61\.7\.3:[0-9]+/metrics)`)
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if m := re.FindSubmatch(b); m != nil {
			url = string(m[1])
		}
	}
	if url == "" {
		t.Fatalf("no \"serving metrics\" line in the daemon's logs %v", logs)
	}
	get := func(u string) string {
		t.Helper()
		cl := http.Client{Timeout: 30 * time.Second}
		resp, err := cl.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %s", u, err, resp.Status)
		}
		return string(b)
	}
	body := get(url)
	for _, want := range []string{
		fmt.Sprintf(`nvmeof_host_controller_live{controller=%q,subnqn=%q} 1`, name, tNQN),
		fmt.Sprintf(`nvmeof_host_io_commands_total{controller=%q,nsid="1",opcode="read",subnqn=%q}`, name, tNQN),
		fmt.Sprintf(`nvmeof_host_reconnects_total{controller=%q,subnqn=%q} 0`, name, tNQN),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	get(strings.TrimSuffix(url, "/metrics") + "/debug/pprof/")
	if path, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}
