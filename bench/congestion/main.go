// Command congestion reports scripts/bench-congestion.sh: rounds of
// nvmetd on the soft provider behind a tbf + red ecn bottleneck in a
// kernel-peer guest, read by three hosts at once (two bulk readers and a
// QD1 probe), with congestion control off and on. For each round it reads
// the hosts' fio JSON, nvmetd's device counters before and after (the
// Prometheus text), the bottleneck's qdisc counters and its once-a-second
// samples, and prints per round and per mode (medians): goodput of each
// flow, the bottleneck's use, retransmissions, timeouts, CNPs, marks and
// drops, and the probe's latency; then the goals.
//
//	go run ./bench/congestion -dir SHARE/out -rate 40mbit [-skip 5] [-json FILE] [-meta k=v ...]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nvmeof/nvmeof/bench/fio"
	"github.com/nvmeof/nvmeof/bench/report"
)

// Flow is one host's fio job in a round.
type Flow struct {
	MBps   float64 `json:"mb_per_s"`
	IOPS   float64 `json:"iops"`
	P50ms  float64 `json:"clat_p50_ms"`
	P99ms  float64 `json:"clat_p99_ms"`
	MeanMs float64 `json:"clat_mean_ms"`
}

// Round is one run of every flow with congestion control off or on.
type Round struct {
	Index int              `json:"round"`
	Mode  string           `json:"mode"`
	Flows map[string]*Flow `json:"flows"`
	// GoodputMBps is the flows' bytes per second together.
	GoodputMBps float64 `json:"goodput_mb_per_s"`
	// Utilization is the bottleneck's sent bits over its rate in the
	// round's steady part (the samples after -skip seconds of traffic).
	Utilization float64 `json:"utilization"`
	// Share is the slower bulk flow's goodput over the faster's.
	Share float64 `json:"bulk_share"`
	// nvmetd's device counters, differences over the round.
	Retransmissions uint64 `json:"retransmissions"`
	Timeouts        uint64 `json:"timeouts"`
	CNPHandled      uint64 `json:"rp_cnp_handled"`
	PacedDrops      uint64 `json:"paced_drops"`
	// The red qdisc's counters: packets marked CE, dropped early (Not-ECT
	// between the thresholds) and dropped over its limit.
	Marked uint64 `json:"red_marked"`
	Early  uint64 `json:"red_early_drops"`
	PDrop  uint64 `json:"red_limit_drops"`
}

// Summary is the medians of one mode's rounds.
type Summary struct {
	Mode            string  `json:"mode"`
	Rounds          int     `json:"rounds"`
	GoodputMBps     float64 `json:"goodput_mb_per_s"`
	Utilization     float64 `json:"utilization"`
	Share           float64 `json:"bulk_share"`
	Retransmissions float64 `json:"retransmissions"`
	Timeouts        float64 `json:"timeouts"`
	ProbeP50ms      float64 `json:"probe_p50_ms"`
	ProbeP99ms      float64 `json:"probe_p99_ms"`
}

// Goal is one of the targets and whether it was met.
type Goal struct {
	What  string  `json:"what"`
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

// Result is the whole report.
type Result struct {
	Meta    map[string]string `json:"meta,omitempty"`
	Rounds  []Round           `json:"rounds"`
	Summary []Summary         `json:"summary"`
	Goals   []Goal            `json:"goals"`
}

func main() {
	dir := flag.String("dir", "", "the run's out directory (host/ and a/ in it)")
	rate := flag.String("rate", "", "the bottleneck's rate as tc writes it (40mbit)")
	skip := flag.Float64("skip", 5, "seconds of each round's traffic left out of the bottleneck's use (fio's ramp)")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	meta := report.MetaFlag{}
	flag.Var(meta, "meta", "KEY=VALUE recorded in the JSON (repeatable)")
	flag.Parse()
	bps, err := parseRate(*rate)
	if *dir == "" || err != nil {
		fmt.Fprintln(os.Stderr, "usage: congestion -dir DIR -rate RATE [-skip S] [-json FILE] [-meta K=V ...]", err)
		os.Exit(2)
	}
	res, err := load(*dir, bps, *skip)
	if err != nil {
		fmt.Fprintln(os.Stderr, "congestion:", err)
		os.Exit(1)
	}
	res.Meta = meta
	printReport(os.Stdout, res)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "congestion:", err)
			os.Exit(1)
		}
	}
}

// parseRate reads a tc rate: a number with kbit, mbit or gbit (decimal).
func parseRate(s string) (float64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"bit", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("rate %q: want a number with kbit, mbit or gbit", s)
	}
	return v * mult, nil
}

// load reads every round of dir.
func load(dir string, bps, skip float64) (*Result, error) {
	modes, _ := filepath.Glob(filepath.Join(dir, "host", "mode-*"))
	if len(modes) == 0 {
		return nil, fmt.Errorf("%s: no rounds (host/mode-N)", dir)
	}
	res := &Result{}
	for _, m := range modes {
		i, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(m), "mode-"))
		if err != nil {
			continue
		}
		r, err := loadRound(dir, i, bps, skip)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", i, err)
		}
		res.Rounds = append(res.Rounds, *r)
	}
	sort.Slice(res.Rounds, func(a, b int) bool { return res.Rounds[a].Index < res.Rounds[b].Index })
	for _, mode := range []string{"off", "on"} {
		if s, ok := summarize(res.Rounds, mode); ok {
			res.Summary = append(res.Summary, s)
		}
	}
	res.Goals = goals(res.Summary)
	return res, nil
}

func loadRound(dir string, i int, bps, skip float64) (*Round, error) {
	host := filepath.Join(dir, "host")
	mode, err := os.ReadFile(filepath.Join(host, fmt.Sprintf("mode-%d", i)))
	if err != nil {
		return nil, err
	}
	r := &Round{Index: i, Mode: strings.TrimSpace(string(mode)), Flows: map[string]*Flow{}}
	files, _ := filepath.Glob(filepath.Join(host, fmt.Sprintf("fio-%d-*.json", i)))
	for _, p := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), fmt.Sprintf("fio-%d-", i)), ".json")
		f, err := loadFlow(p)
		if err != nil {
			return nil, err
		}
		r.Flows[name] = f
		r.GoodputMBps += f.MBps
	}
	if a, b := r.Flows["bulk-a"], r.Flows["bulk-b"]; a != nil && b != nil && max(a.MBps, b.MBps) > 0 {
		r.Share = min(a.MBps, b.MBps) / max(a.MBps, b.MBps)
	}
	before, err := readCounters(filepath.Join(host, fmt.Sprintf("metrics-%d-before.txt", i)))
	if err != nil {
		return nil, err
	}
	after, err := readCounters(filepath.Join(host, fmt.Sprintf("metrics-%d-after.txt", i)))
	if err != nil {
		return nil, err
	}
	d := func(name string) uint64 { return uint64(max(after[name]-before[name], 0)) }
	r.Retransmissions, r.Timeouts = d("retransmissions_total"), d("retransmission_timeouts_total")
	r.CNPHandled, r.PacedDrops = d("rp_cnp_handled_total"), d("paced_drops_total")
	if tc, err := os.ReadFile(filepath.Join(dir, "a", fmt.Sprintf("tc-%d.txt", i))); err == nil {
		r.Marked, r.Early, r.PDrop = redCounters(string(tc))
	}
	if q, err := os.Open(filepath.Join(dir, "a", fmt.Sprintf("queue-%d.txt", i))); err == nil {
		r.Utilization = utilization(q, bps, skip)
		q.Close()
	}
	return r, nil
}

func loadFlow(path string) (*Flow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out, err := fio.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out.Jobs) != 1 || out.Jobs[0].Error != 0 {
		return nil, fmt.Errorf("%s: want one job without error", path)
	}
	rd := out.Jobs[0].Read
	f := &Flow{MBps: rd.BwBytes / 1e6, IOPS: rd.IOPS, MeanMs: rd.Clat.Mean / 1e6}
	if v, ok := rd.Clat.Percentile(50); ok {
		f.P50ms = v / 1e6
	}
	if v, ok := rd.Clat.Percentile(99); ok {
		f.P99ms = v / 1e6
	}
	return f, nil
}

// readCounters returns the device-wide nvmeof_rdma_* series of a
// Prometheus text file by name without the prefix (per-QP series, which
// carry a qpn label, are left out).
func readCounters(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || !strings.HasPrefix(name, "nvmeof_rdma_") || strings.Contains(rest, "qpn=") {
			continue
		}
		_, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		m[strings.TrimPrefix(name, "nvmeof_rdma_")] += v
	}
	return m, sc.Err()
}

// redCounters reads "marked M early E pdrop P" from tc -s qdisc output.
func redCounters(tc string) (marked, early, pdrop uint64) {
	f := strings.Fields(tc)
	for i := 0; i+1 < len(f); i++ {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			continue
		}
		switch f[i] {
		case "marked":
			marked = v
		case "early":
			early = v
		case "pdrop":
			pdrop = v
		}
	}
	return
}

// utilization reads the bottleneck's samples ("uptime sent-bytes backlog
// ...") and returns the bits it sent per second over bps, from skip
// seconds after its traffic began to its last sample that moved.
func utilization(r io.Reader, bps, skip float64) float64 {
	type sample struct{ t, sent float64 }
	var s []sample
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		t, err1 := strconv.ParseFloat(f[0], 64)
		b, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil {
			s = append(s, sample{t, b})
		}
	}
	first, last := -1, -1
	for i := 1; i < len(s); i++ {
		if s[i].sent > s[i-1].sent {
			if first < 0 {
				first = i - 1
			}
			last = i
		}
	}
	if first < 0 {
		return 0
	}
	from := first
	for from < last && s[from].t < s[first].t+skip {
		from++
	}
	// The last sample that moved may be partly idle: end one before it.
	to := max(last-1, from)
	if s[to].t <= s[from].t {
		return 0
	}
	return (s[to].sent - s[from].sent) * 8 / (s[to].t - s[from].t) / bps
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func summarize(rounds []Round, mode string) (Summary, bool) {
	var g, u, sh, re, to, p50, p99 []float64
	for _, r := range rounds {
		if r.Mode != mode {
			continue
		}
		g, u, sh = append(g, r.GoodputMBps), append(u, r.Utilization), append(sh, r.Share)
		re, to = append(re, float64(r.Retransmissions)), append(to, float64(r.Timeouts))
		if p := r.Flows["probe"]; p != nil {
			p50, p99 = append(p50, p.P50ms), append(p99, p.P99ms)
		}
	}
	if len(g) == 0 {
		return Summary{}, false
	}
	return Summary{Mode: mode, Rounds: len(g), GoodputMBps: median(g), Utilization: median(u), Share: median(sh),
		Retransmissions: median(re), Timeouts: median(to), ProbeP50ms: median(p50), ProbeP99ms: median(p99)}, true
}

// goals checks issue 26's end-to-end goals on the medians: retransmitted
// packets and timeouts fall by at least 10x with congestion control on,
// the bottleneck stays at least 90 % used, the two bulk flows' shares are
// within 20 % of each other, and the probe's p99 falls.
func goals(s []Summary) []Goal {
	var off, on *Summary
	for i := range s {
		switch s[i].Mode {
		case "off":
			off = &s[i]
		case "on":
			on = &s[i]
		}
	}
	if on == nil {
		return nil
	}
	gs := []Goal{
		{"bottleneck used >= 90 % with congestion control on", on.Utilization, on.Utilization >= 0.9},
		{"bulk flows' shares within 20 % (slower/faster >= 0.8)", on.Share, on.Share >= 0.8},
	}
	if off != nil {
		r := off.Retransmissions / max(on.Retransmissions, 1)
		t := off.Timeouts / max(on.Timeouts, 1)
		p := off.ProbeP99ms / on.ProbeP99ms
		gs = append(gs,
			Goal{"retransmissions off/on >= 10", r, r >= 10},
			Goal{"timeouts off/on >= 10", t, t >= 10},
			Goal{"probe QD1 p99 off/on > 1 (falls)", p, p > 1})
	}
	return gs
}

func printReport(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tmode\tbulk-a MB/s\tbulk-b MB/s\tprobe p50/p99 ms\tgoodput MB/s\tlink use\tretrans\ttimeouts\tCNPs\tmarked\tdropped\t")
	for _, r := range res.Rounds {
		a, b, p := r.Flows["bulk-a"], r.Flows["bulk-b"], r.Flows["probe"]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.2f\t%.0f %%\t%d\t%d\t%d\t%d\t%d\t\n", r.Index, r.Mode,
			mbps(a), mbps(b), lat(p), r.GoodputMBps, 100*r.Utilization, r.Retransmissions, r.Timeouts,
			r.CNPHandled, r.Marked, r.Early+r.PDrop)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "median\trounds\tgoodput MB/s\tlink use\tbulk share\tretrans\ttimeouts\tprobe p50 ms\tprobe p99 ms\t")
	for _, s := range res.Summary {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f %%\t%.2f\t%.0f\t%.0f\t%.1f\t%.1f\t\n", s.Mode, s.Rounds, s.GoodputMBps,
			100*s.Utilization, s.Share, s.Retransmissions, s.Timeouts, s.ProbeP50ms, s.ProbeP99ms)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, g := range res.Goals {
		met := "MISSED"
		if g.Met {
			met = "met"
		}
		fmt.Fprintf(w, "goal: %s: %.2f, %s\n", g.What, g.Value, met)
	}
}

func mbps(f *Flow) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(f.MBps, 'f', 2, 64)
}

func lat(f *Flow) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.1f", f.P50ms, f.P99ms)
}
