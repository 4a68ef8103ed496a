package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

const (
	testNQN  = "nqn.2026-11.io.nvmeof:metrics"
	testHost = "nqn.2014-08.org.nvmexpress:uuid:0f6b6a43-7f6c-4f59-8d55-0d3b5e2f1a10"
)

// loopTarget is an in-process target with one memory namespace, served
// over the loop transport, and a host connected to it.
type loopTarget struct {
	tgt  *target.Target
	ctrl *initiator.Controller
	ns   *initiator.Namespace
}

func newLoopTarget(t *testing.T) *loopTarget {
	t.Helper()
	addr := fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: fabrics.DefaultServiceID}
	tgt := target.New(target.Options{})
	t.Cleanup(func() { tgt.Close() })
	must(t, tgt.AddSubsystem(target.SubsystemConfig{NQN: testNQN, AllowAnyHost: true}))
	mem, err := bdev.NewMemory(4<<20, 512)
	must(t, err)
	must(t, tgt.AddNamespace(testNQN, target.NamespaceConfig{NSID: 1, Device: mem}))
	must(t, tgt.AddPort(target.PortConfig{ID: 1, Address: addr, Subsystems: []string{testNQN}}))
	net := loop.NewNetwork()
	l, err := net.Listen(addr)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = tgt.Serve(ctx, 1, l) }()
	t.Cleanup(func() { cancel(); <-served })
	tgt.EnableLatencyStats(true)
	c, err := initiator.Connect(ctx, loop.Dialer{Net: net}, addr, initiator.Options{SubsystemNQN: testNQN, HostNQN: testHost})
	must(t, err)
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(1)
	must(t, err)
	return &loopTarget{tgt: tgt, ctrl: c, ns: ns}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scrape fetches h's /metrics and parses it.
func scrape(t *testing.T, h http.Handler) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	must(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must(t, err)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse the exposition: %v\n%s", err, body)
	}
	return fams, body
}

// value returns the value of the series of family name with the given
// labels (counter, gauge, or a histogram's count), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func wantValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := value(fams, name, labels)
	if !ok {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestTargetMetrics runs I/O of known count and size through an
// in-process target and checks that the scraped counters agree exactly
// (every series on: per queue, with the host NQN).
func TestTargetMetrics(t *testing.T) {
	lt := newLoopTarget(t)
	reg, err := NewRegistry(NewTargetCollectorWith(lt.tgt, TargetOptions{PerQueue: true, HostNQN: true}))
	must(t, err)
	h := Handler(reg, false)

	for _, tc := range []struct {
		name          string
		writes, reads int
		blocks        int
	}{
		{"first", 11, 6, 8},
		{"more", 3, 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := scrape(t, h)
			nsl := func(op string) map[string]string {
				return map[string]string{"subnqn": testNQN, "nsid": "1", "opcode": op}
			}
			base := func(name, op string) float64 { v, _ := value(before, name, nsl(op)); return v }
			buf := make([]byte, tc.blocks*512)
			for i := range tc.writes {
				_, err := lt.ns.WriteAt(buf, int64(i*len(buf)))
				must(t, err)
			}
			for i := range tc.reads {
				_, err := lt.ns.ReadAt(buf, int64(i*len(buf)))
				must(t, err)
			}
			fams, _ := scrape(t, h)
			for _, c := range []struct {
				op string
				n  int
			}{{"write", tc.writes}, {"read", tc.reads}} {
				wantValue(t, fams, "nvmeof_target_io_commands_total", nsl(c.op), base("nvmeof_target_io_commands_total", c.op)+float64(c.n))
				wantValue(t, fams, "nvmeof_target_io_bytes_total", nsl(c.op), base("nvmeof_target_io_bytes_total", c.op)+float64(c.n*len(buf)))
				wantValue(t, fams, "nvmeof_target_io_latency_seconds", nsl(c.op), base("nvmeof_target_io_latency_seconds", c.op)+float64(c.n))
				wantValue(t, fams, "nvmeof_target_io_errors_total", nsl(c.op), 0)
			}
			wantValue(t, fams, "nvmeof_target_controllers_created_total", map[string]string{"subnqn": testNQN}, 1)
			wantValue(t, fams, "nvmeof_target_controllers", map[string]string{"subnqn": testNQN}, 1)
			cntlid := fmt.Sprint(lt.ctrl.CntlID())
			wantValue(t, fams, "nvmeof_target_controller_info", map[string]string{"subnqn": testNQN, "cntlid": cntlid, "hostnqn": testHost}, 1)
			wantValue(t, fams, "nvmeof_target_controller_inflight_commands", map[string]string{"subnqn": testNQN, "cntlid": cntlid}, 0)
			wantValue(t, fams, "nvmeof_target_controller_io_queues", map[string]string{"subnqn": testNQN, "cntlid": cntlid}, float64(lt.ctrl.NumIOQueues()))
			wantValue(t, fams, "nvmeof_target_queue_inflight_commands", map[string]string{"subnqn": testNQN, "cntlid": cntlid, "qid": "1"}, 0)
			wantValue(t, fams, "nvmeof_target_controllers_not_exported", map[string]string{"subnqn": testNQN}, 0)
		})
	}

	_, body := scrape(t, h)
	checkPromtool(t, body)
}

// TestStatusName checks the status label: snake case, never empty.
func TestStatusName(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"words", "LBA Out of Range", "lba_out_of_range"},
		{"punctuation", "Invalid Field in Command", "invalid_field_in_command"},
		{"slash", "Namespace Not Ready / x", "namespace_not_ready_x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := snake(tc.in); got != tc.want {
				t.Errorf("snake(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// checkPromtool runs `promtool check metrics` on an exposition when
// promtool is installed (Debian package prometheus).
func checkPromtool(t *testing.T, body []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus): exposition not linted")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(string(body))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestPromtool(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	lt := newLoopTarget(t)
	_, err := lt.ns.WriteAt(make([]byte, 4096), 0)
	must(t, err)
	reg, err := NewRegistry(NewTargetCollector(lt.tgt), &RDMACollector{})
	must(t, err)
	_, body := scrape(t, Handler(reg, false))
	checkPromtool(t, body)
}

func TestHandlerPprof(t *testing.T) {
	reg, err := NewRegistry()
	must(t, err)
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer(Handler(reg, on))
		resp, err := http.Get(srv.URL + "/debug/pprof/")
		must(t, err)
		resp.Body.Close()
		srv.Close()
		if got := resp.StatusCode == http.StatusOK; got != on {
			t.Errorf("pprof %v: GET /debug/pprof/ status %d", on, resp.StatusCode)
		}
	}
}
