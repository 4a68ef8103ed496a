package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// dashboardExprs returns the PromQL expressions of the example Grafana
// dashboard's panels.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", "grafana", "nvmeof.json"))
	must(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("examples/grafana/nvmeof.json: %v", err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// describedNames returns the metric names the collectors describe, with
// a histogram's _bucket, _sum and _count.
func describedNames() map[string]bool {
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		for _, c := range []prometheus.Collector{NewTargetCollector(nil), NewHostCollector(nil, ""), &RDMACollector{}} {
			c.Describe(ch)
		}
		close(ch)
	}()
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := re.FindStringSubmatch(d.String()); m != nil {
			n := m[1]
			names[n] = true
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[n+s] = true
			}
		}
	}
	return names
}

// TestDashboard: every metric the example dashboard queries exists, and
// promtool (when installed) parses every query.
func TestDashboard(t *testing.T) {
	exprs := dashboardExprs(t)
	names := describedNames()
	re := regexp.MustCompile(`nvmeof_[a-z0-9_]+`)
	for _, e := range exprs {
		for _, n := range re.FindAllString(e, -1) {
			if !names[n] {
				t.Errorf("the dashboard queries %s, which no collector exports: %s", n, e)
			}
		}
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: queries not parsed")
		return
	}
	// Grafana's variables replaced by what they expand to.
	r := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*", "$subnqn", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&rules, "  - record: dashboard:q%d\n    expr: %q\n", i, r.Replace(e))
	}
	f := filepath.Join(t.TempDir(), "rules.yml")
	must(t, os.WriteFile(f, []byte(rules.String()), 0o644))
	if out, err := exec.Command(path, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
