package fio

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Addresses of the metrics test: its own, apart from TestFioRDMA's.
const (
	metricsTargetAddr = "127.0.45.1"
	metricsHostAddr   = "127.0.45.2"
	metricsHTTPAddr   = "127.0.45.3"
	metricsNQN        = "nqn.2026-11.io.nvmeof:fio-metrics-test"
)

// The job of the metrics test: known I/O counts, no verify pass (whose
// reads would count as reads too).
const metricsJob = `
[global]
bs=4k
size=8m
iodepth=8
norandommap=0

[randwrite]
rw=randwrite

[randread]
stonewall
rw=randread
bs=8k
`

// scrapeMetrics fetches and parses an exposition.
func scrapeMetrics(url string) (map[string]*dto.MetricFamily, string, error) {
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	return fams, string(b), err
}

// targetIO returns nvmeof_target_<name>{subnqn, nsid 1, opcode} (a
// histogram's count for the latency), or -1 when there is no such series.
func targetIO(fams map[string]*dto.MetricFamily, name, op string) float64 {
	f := fams["nvmeof_target_"+name]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		l := map[string]string{}
		for _, p := range m.Label {
			l[p.GetName()] = p.GetValue()
		}
		if l["subnqn"] != metricsNQN || l["nsid"] != "1" || l["opcode"] != op {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestFioMetrics is the check of issue #13's metrics: nvmetd serves
// --metrics-address on loopback, fio drives I/O of known count through the
// engine over soft RDMA while the endpoint is scraped, and afterwards the
// target's counters agree exactly with fio's report; promtool (when
// installed) passes the exposition.
func TestFioMetrics(t *testing.T) {
	so := engine(t)
	if ok, why := softCMWorks(); !ok {
		t.Skip(why)
	}
	srv := startNvmetd(t, memoryTargetHCL(metricsTargetAddr, metricsNQN, "16MiB"),
		"--control-socket", "none", "--metrics-address", metricsHTTPAddr+":0")
	nvmetdLog := srv.Log
	urlRE := regexp.MustCompile(`url=(http://` + regexp.QuoteMeta(metricsHTTPAddr) + `:[0-9]+/metrics)`)
	m := urlRE.FindStringSubmatch(nvmetdLog())
	if m == nil {
		t.Fatalf("nvmetd serves no metrics:\n%s", nvmetdLog())
	}
	url := m[1]

	// Scrape while fio runs: every scrape parses, and the counters never
	// go down.
	type sample struct{ writes, reads float64 }
	scrapeErr := make(chan error, 1)
	stop := make(chan struct{})
	var samples []sample
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for range 10000 { // bounded: fio's own timeout ends the run first
			fams, _, err := scrapeMetrics(url)
			if err != nil {
				scrapeErr <- err
				return
			}
			samples = append(samples, sample{targetIO(fams, "io_commands_total", "write"), targetIO(fams, "io_commands_total", "read")})
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	jobs, out, err := runFio(t, "--ioengine=external:"+so, "--transport=rdma",
		"--traddr="+metricsTargetAddr, "--trsvcid=4420", "--subnqn="+metricsNQN, "--host_traddr="+metricsHostAddr,
		"--nsid=1", "--nr_io_queues=2", writeJob(t, metricsJob))
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("fio: %v\n%s\nnvmetd:\n%s", err, out, nvmetdLog())
	}
	select {
	case err := <-scrapeErr:
		t.Fatalf("scrape during the fio run: %v", err)
	default:
	}
	if len(samples) < 2 {
		t.Errorf("%d scrapes during the fio run, want several", len(samples))
	}
	for i := 1; i < len(samples); i++ {
		if samples[i].writes < samples[i-1].writes || samples[i].reads < samples[i-1].reads {
			t.Errorf("counters went down between scrapes %d and %d: %+v -> %+v", i-1, i, samples[i-1], samples[i])
		}
	}

	w, r := jobs["randwrite"], jobs["randread"]
	if w.Error != 0 || r.Error != 0 || w.Write.TotalIOs == 0 || r.Read.TotalIOs == 0 {
		t.Fatalf("fio jobs: %+v %+v\n%s", w, r, out)
	}
	fams, body, err := scrapeMetrics(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op         string
		ios, bytes int64
	}{
		{"write", w.Write.TotalIOs + r.Write.TotalIOs, w.Write.IOBytes + r.Write.IOBytes},
		{"read", w.Read.TotalIOs + r.Read.TotalIOs, r.Read.IOBytes + w.Read.IOBytes},
	} {
		if got := targetIO(fams, "io_commands_total", c.op); got != float64(c.ios) {
			t.Errorf("nvmeof_target_io_commands_total{opcode=%q} = %v, fio reports %d I/Os", c.op, got, c.ios)
		}
		if got := targetIO(fams, "io_bytes_total", c.op); got != float64(c.bytes) {
			t.Errorf("nvmeof_target_io_bytes_total{opcode=%q} = %v, fio reports %d bytes", c.op, got, c.bytes)
		}
		if got := targetIO(fams, "io_latency_seconds", c.op); got != float64(c.ios) {
			t.Errorf("nvmeof_target_io_latency_seconds{opcode=%q} count %v, fio reports %d I/Os", c.op, got, c.ios)
		}
		if got := targetIO(fams, "io_errors_total", c.op); got != 0 {
			t.Errorf("nvmeof_target_io_errors_total{opcode=%q} = %v", c.op, got)
		}
	}
	// The target's soft device carried every command: at least one
	// packet received per I/O.
	var rx float64
	if f := fams["nvmeof_rdma_packets_received_total"]; f != nil {
		for _, m := range f.Metric {
			rx += m.GetCounter().GetValue()
		}
	}
	if ios := w.Write.TotalIOs + r.Read.TotalIOs; rx < float64(ios) {
		t.Errorf("nvmeof_rdma_packets_received_total = %v, below the %d I/Os carried", rx, ios)
	}
	t.Logf("fio: %d writes, %d reads; %d scrapes during the run", w.Write.TotalIOs, r.Read.TotalIOs, len(samples))
	if path, err := exec.LookPath("promtool"); err != nil {
		t.Log("promtool not installed (Debian package prometheus): exposition not linted")
	} else {
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, b)
		}
	}
}
