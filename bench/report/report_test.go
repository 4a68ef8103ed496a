package report

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/bench/ceiling"
	"github.com/nvmeof/nvmeof/bench/fio"
)

func loadFio(t *testing.T, name string) *fio.Output {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "fio", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	out, err := fio.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestFromFioMixed(t *testing.T) {
	out := loadFio(t, "randrw70-4k-qd32.nbd.json")
	m, err := FromFio(out, 1.5, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	j := out.Jobs[0]
	ios := float64(j.Read.TotalIOs + j.Write.TotalIOs)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"IOPS", m.IOPS, ios / 2.0},
		{"MBps", m.MBps, float64(251064320+106958848) / 2.0 / 1e6},
		{"P50us", m.P50us, 296.960},
		{"P99us", m.P99us, 6979.584},
		{"FioCPUs", m.FioCPUs, 1.5},
		{"FioJobCPUs", m.FioJobCPUs, (6.65 + 30.05) / 100 * 2},
		{"FioCPUsPerGB", m.FioCPUsPerGB, 1.5 / (float64(251064320+106958848) / 1e9)},
		{"ServerCPUsPerGB", m.ServerCPUsPerGB, 0.5 / (float64(251064320+106958848) / 1e9)},
		{"CPUsPerGB", m.CPUsPerGB, (1.5 + 0.5) / (float64(251064320+106958848) / 1e9)},
		{"RuntimeS", m.RuntimeS, 2},
	} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// fio's own per-direction IOPS add up to the same figure, within the
	// millisecond by which fio's per-direction run times differ.
	if math.Abs(m.IOPS/(j.Read.IOPS+j.Write.IOPS)-1) > 0.002 {
		t.Errorf("IOPS %v, fio's read+write %v", m.IOPS, j.Read.IOPS+j.Write.IOPS)
	}
	if m.RW != "randrw" || m.BlockSize != 4096 || m.IODepth != 32 || m.LatencyOf != "read" {
		t.Errorf("rw %q bs %d qd %d latency of %q", m.RW, m.BlockSize, m.IODepth, m.LatencyOf)
	}
	if CeilingKind(m) != CeilingDatagram {
		t.Errorf("CeilingKind = %q", CeilingKind(m))
	}
}

func TestFromFioPrepExcluded(t *testing.T) {
	out := loadFio(t, "randread-4k-qd1-verify.nbd.json")
	m, err := FromFio(out, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	rd := out.Jobs[1]
	if m.Bytes != 64<<20 || m.AllBytes != 128<<20 {
		t.Errorf("Bytes %d AllBytes %d, want 64 MiB measured, 128 MiB in all", m.Bytes, m.AllBytes)
	}
	if !near(m.RuntimeS, float64(rd.RuntimeMS)/1000) {
		t.Errorf("RuntimeS %v, want the read job's %v", m.RuntimeS, float64(rd.RuntimeMS)/1000)
	}
	if m.IODepth != 1 || m.RW != "randread" || CeilingKind(m) != CeilingRTT {
		t.Errorf("qd %d rw %q kind %q", m.IODepth, m.RW, CeilingKind(m))
	}
	wantCPU := out.Jobs[0].CPUSeconds() + rd.CPUSeconds()
	if !near(m.FioCPUs, wantCPU) || !near(m.CPUsPerGB, wantCPU/(float64(128<<20)/1e9)) || m.ServerCPUsPerGB != 0 {
		t.Errorf("FioCPUs %v CPUsPerGB %v server %v (fio process and server CPU unknown: fio's per-job figures alone)",
			m.FioCPUs, m.CPUsPerGB, m.ServerCPUsPerGB)
	}
}

func TestFromFioWriteOnly(t *testing.T) {
	m, err := FromFio(loadFio(t, "seqwrite-128k-qd8.nbd.json"), 0.1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.LatencyOf != "write" || m.P50us <= 0 || m.BlockSize != 128<<10 || CeilingKind(m) != CeilingGSO {
		t.Errorf("latency of %q p50 %v bs %d kind %q", m.LatencyOf, m.P50us, m.BlockSize, CeilingKind(m))
	}
}

func TestFromFioNoMeasuredJob(t *testing.T) {
	out := &fio.Output{Jobs: []fio.Job{{Name: "prep-x", RuntimeMS: 10}}}
	if _, err := FromFio(out, 0, 0); err == nil {
		t.Error("a report with only prep jobs gave no error")
	}
	if _, err := FromFio(&fio.Output{Jobs: []fio.Job{{Name: "x"}}}, 0, 0); err == nil {
		t.Error("a job of 0 ms gave no error")
	}
}

func ceilings() ceiling.Result {
	return ceiling.Result{
		PingPong: ceiling.PingPong{Count: 1000, Median: 10 * time.Microsecond, P99: 40 * time.Microsecond},
		Datagram: ceiling.Rate{PerSecond: 200000, GBps: 0.8192, Bytes: 1, SentBytes: 1},
		GSO:      ceiling.Rate{GBps: 4.0, PerSecond: 976562, Bytes: 1, SentBytes: 1},
	}
}

func sample() *Report {
	return &Report{
		Started: time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC), Host: "h", Kernel: "6.1", CPUs: 2,
		Fio: "fio-3.33", Nbdkit: "1.32.5", Mode: "quick", RuntimeS: 3, MemSize: "1G",
		Ceilings: ceilings(),
		Jobs: []Job{
			{Name: JobRandRead4kQD1,
				Nbdkit: &Metrics{IODepth: 1, BlockSize: 4096, IOPS: 30000, MBps: 122.88, P50us: 30, P99us: 50,
					FioCPUsPerGB: 10, ServerCPUs: -1, CPUsPerGB: 10},
				Nvmeof: &Metrics{IODepth: 1, BlockSize: 4096, IOPS: 60000, MBps: 245.76, P50us: 15, P99us: 25,
					FioCPUsPerGB: 3, ServerCPUs: 1, ServerCPUsPerGB: 2, CPUsPerGB: 5}},
			{Name: JobRandRead4kQD32,
				Nbdkit: &Metrics{IODepth: 32, BlockSize: 4096, IOPS: 40000, MBps: 163.84, P50us: 700, P99us: 2000},
				Nvmeof: &Metrics{IODepth: 32, BlockSize: 4096, IOPS: 50000, MBps: 204.8, P50us: 600, P99us: 1500}},
			{Name: JobSeqRead128kQD8,
				Nbdkit: &Metrics{IODepth: 8, BlockSize: 128 << 10, IOPS: 11000, MBps: 1441, P50us: 600, P99us: 900},
				Nvmeof: &Metrics{IODepth: 8, BlockSize: 128 << 10, IOPS: 19000, MBps: 2490, P50us: 400, P99us: 700}},
			{Name: "randwrite-4k-qd32",
				Nbdkit: &Metrics{IODepth: 32, BlockSize: 4096, IOPS: 50000, MBps: 204.8},
				Nvmeof: &Metrics{Error: "fio: job x: error 84"}},
		},
	}
}

func TestCompute(t *testing.T) {
	r := sample()
	r.Compute()
	type want struct {
		iops, p50, nbd, nv float64 // NaN: nil
		kind               string
	}
	nan := math.NaN()
	for i, w := range []want{
		{2, 0.5, 3, 1.5, CeilingRTT},
		{1.25, 600.0 / 700, 0.2, 0.25, CeilingDatagram},
		{19000.0 / 11000, 400.0 / 600, 1441.0 / 4000, 2490.0 / 4000, CeilingGSO},
		{nan, nan, 0.25, nan, CeilingDatagram},
	} {
		rt := r.Jobs[i].Ratios
		check := func(name string, got *float64, want float64) {
			if math.IsNaN(want) {
				if got != nil {
					t.Errorf("job %d %s = %v, want nil", i, name, *got)
				}
				return
			}
			if got == nil || !near(*got, want) {
				t.Errorf("job %d %s = %v, want %v", i, name, got, want)
			}
		}
		check("IOPS ratio", rt.IOPS, w.iops)
		check("P50 ratio", rt.P50, w.p50)
		check("nbdkit/ceiling", rt.Nbdkit, w.nbd)
		check("nvmeof/ceiling", rt.Nvmeof, w.nv)
		if rt.Ceiling != w.kind {
			t.Errorf("job %d ceiling %q, want %q", i, rt.Ceiling, w.kind)
		}
	}

	// Goals: QD32 1.25× < 1.5× fails; seqread 2.49 GB/s is 62 % of GSO: pass;
	// QD1 p50 15 µs is 1.5× the 10 µs RTT: pass.
	wantPass := []bool{false, true, true}
	if len(r.Goals) != 3 {
		t.Fatalf("%d goals", len(r.Goals))
	}
	for i, g := range r.Goals {
		if g.Pass == nil || *g.Pass != wantPass[i] {
			t.Errorf("goal %q pass %v, want %v (%s)", g.Name, g.Pass, wantPass[i], g.Measured)
		}
	}
	if !strings.Contains(r.Goals[1].Measured, "62 % of GSO") {
		t.Errorf("seqread goal measured %q", r.Goals[1].Measured)
	}
}

// TestGoalGSOBelowSides: a GSO "ceiling" below what nbdkit moved (measured
// under load) does not let the seqread goal pass on its percentage.
func TestGoalGSOBelowSides(t *testing.T) {
	r := sample()
	r.Ceilings.GSO.GBps = 0.43
	r.Jobs[2].Nvmeof.MBps = 516
	r.Compute()
	g := r.Goals[1]
	if g.Pass == nil || *g.Pass || !strings.Contains(g.Measured, "not a ceiling") {
		t.Errorf("seqread goal with a GSO below nbdkit's MB/s: pass %v, %q", g.Pass, g.Measured)
	}
	r.Jobs[2].Nvmeof.MBps = 2600
	r.Compute()
	if g := r.Goals[1]; g.Pass == nil || !*g.Pass {
		t.Errorf("seqread goal at 2.6 GB/s: pass %v, %q", g.Pass, g.Measured)
	}
}

func TestGoalsNotMeasured(t *testing.T) {
	r := sample()
	for i := range r.Jobs {
		r.Jobs[i].Nvmeof = nil
	}
	r.NvmeofSkipped = "engine not built"
	r.Compute()
	for _, g := range r.Goals {
		if g.Pass != nil || g.Measured != nvmeofNotMeasured || !strings.HasPrefix(g.Reference, "nbdkit ") {
			t.Errorf("goal %q: pass %v measured %q reference %q", g.Name, g.Pass, g.Measured, g.Reference)
		}
	}
	// Without ceilings, the side/ceiling ratios are nil.
	r.Ceilings = ceiling.Result{}
	r.Compute()
	for _, j := range r.Jobs {
		if j.Ratios.Nbdkit != nil {
			t.Errorf("job %s: ratio to a missing ceiling %v", j.Name, *j.Ratios.Nbdkit)
		}
	}
}

func TestTable(t *testing.T) {
	r := sample()
	r.Compute()
	rows := r.Table()
	if len(rows) != 1+3+2*len(r.Jobs) || len(rows[0]) != numCols {
		t.Fatalf("%d rows", len(rows))
	}
	for i, row := range rows {
		if len(row) != len(rows[0]) {
			t.Errorf("row %d has %d cells, header %d", i, len(row), len(rows[0]))
		}
	}
	get := func(job, side string) []string {
		for i, row := range rows {
			if row[1] == side && (row[0] == job || (side == SideNvmeof && rows[i-1][0] == job)) {
				return row
			}
		}
		t.Fatalf("no %s row for %s", side, job)
		return nil
	}
	if row := get(JobRandRead4kQD1, SideNvmeof); row[colIOPS] != "60K" || row[colP50] != "15.0" || row[colVs] != "IOPS 2.00×, p50 0.50×" ||
		row[colCeiling] != "p50 1.5× RTT" || row[colCPU] != "5.00" || row[colCPUSplit] != "3.00+2.00" {
		t.Errorf("QD1 nvmeof row %q", row)
	}
	if row := get(JobRandRead4kQD1, SideNbdkit); row[colCPU] != "10.00" || row[colCPUSplit] != "10.00+?" {
		t.Errorf("QD1 nbdkit row %q (server CPU unknown)", row)
	}
	if row := get(JobSeqRead128kQD8, SideNbdkit); row[colMBps] != "1441" || row[colCeiling] != "36 % of GSO" {
		t.Errorf("seqread nbdkit row %q", row)
	}
	if row := get("randwrite-4k-qd32", SideNvmeof); !strings.HasPrefix(row[colVs], "error: ") {
		t.Errorf("failed nvmeof row %q", row)
	}
	if rows[1][colP50] != "10.0" || rows[1][colP99] != "40.0" || rows[2][colIOPS] != "200K" || rows[3][colMBps] != "4000" {
		t.Errorf("ceiling rows %q", rows[1:4])
	}

	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"nvmeof/nbdkit", "FAIL", "PASS", "ceiling: UDP GSO + GRO"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "WARNING") {
		t.Errorf("loss warning without loss:\n%s", out)
	}
	r.Ceilings.GSO.SentBytes, r.Ceilings.GSO.Bytes = 100, 10
	b.Reset()
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "lost up to 90 %") {
		t.Errorf("no loss warning for a 90 %% loss: %v\n%s", err, b.String())
	}
	// Columns line up: every table line has the "side" column at the same
	// rune offset.
	var col = -1
	for _, line := range strings.Split(out, "\n") {
		for _, side := range []string{"  nbdkit  ", "  nvmeof  ", "  udp  "} {
			if i := strings.Index(line, side); i >= 0 && !strings.Contains(line, "·") {
				n := len([]rune(line[:i]))
				if col >= 0 && n != col {
					t.Errorf("side column at %d, want %d: %q", n, col, line)
				}
				col = n
			}
		}
	}
}

func TestJSON(t *testing.T) {
	r := sample()
	r.Compute()
	b, err := r.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Jobs) != 4 || back.Jobs[0].Ratios.IOPS == nil || *back.Jobs[0].Ratios.IOPS != 2 {
		t.Errorf("round trip lost ratios: %+v", back.Jobs)
	}
	if back.Ceilings.PingPong.Median != 10*time.Microsecond {
		t.Errorf("ping-pong median %v", back.Ceilings.PingPong.Median)
	}
	if !strings.Contains(string(b), `"iops_nvmeof_over_nbdkit": 2`) {
		t.Errorf("JSON lacks the IOPS ratio:\n%s", b)
	}
}

func TestChart(t *testing.T) {
	r := sample()
	r.Jobs[1].Nvmeof = nil
	r.Compute()
	ch := r.Chart()
	if len(ch.Panels) != 2 || len(ch.Panels[0].Groups) != 4 {
		t.Fatalf("panels %d, groups %d", len(ch.Panels), len(ch.Panels[0].Groups))
	}
	if v := ch.Panels[0].Groups[1].Values[1]; !math.IsNaN(v) {
		t.Errorf("missing nvmeof value %v, want NaN", v)
	}
	if got := ch.Panels[1].Groups[0].Label; got != "randread\n4k qd1" {
		t.Errorf("label %q", got)
	}
	var b bytes.Buffer
	if err := ch.WritePNG(&b); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if s := img.Bounds().Size(); s.X != ch.Width || s.Y != ch.Height {
		t.Errorf("PNG %v, want %d×%d", s, ch.Width, ch.Height)
	}
}
