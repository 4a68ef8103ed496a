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
		Fio: "fio-3.33", Nbdkit: "1.32.5", Mode: "quick", RuntimeS: 3, Rounds: 3, MemSize: "1G",
		Ceilings: ceilings(),
		Jobs: []Job{
			{Name: JobRandRead4kQD1,
				Nbdkit: &Metrics{IODepth: 1, BlockSize: 4096, IOPS: 30000, MBps: 122.88, P50us: 30, P99us: 50,
					FioCPUsPerGB: 10, ServerCPUs: -1, CPUsPerGB: 10, FioCPUusPerIO: 40, CPUusPerIO: 40,
					Counts:           Counts{FioSyscalls: 600, ServerSyscalls: -1, DatagramsOut: -1, DatagramsIn: -1},
					FioSyscallsPerIO: 6, ServerSyscallsPerIO: -1, DatagramsPerIO: -1},
				Nvmeof: &Metrics{IODepth: 1, BlockSize: 4096, IOPS: 60000, MBps: 245.76, P50us: 15, P99us: 25,
					FioCPUsPerGB: 3, ServerCPUs: 1, ServerCPUsPerGB: 2, CPUsPerGB: 5,
					FioCPUusPerIO: 12, ServerCPUusPerIO: 8, CPUusPerIO: 20,
					FioSyscallsPerIO: 3.5, ServerSyscallsPerIO: 2.25, DatagramsPerIO: 4}},
			{Name: JobRandRead4kQD32,
				Nbdkit: &Metrics{IODepth: 32, BlockSize: 4096, IOPS: 40000, MBps: 163.84, P50us: 700, P99us: 2000},
				Nvmeof: &Metrics{IODepth: 32, BlockSize: 4096, IOPS: 50000, MBps: 204.8, P50us: 600, P99us: 1500}},
			{Name: JobRandRead4kQD32Two,
				Nbdkit: &Metrics{IODepth: 32, BlockSize: 4096, Jobs: 2, IOPS: 70000, MBps: 286.72, P50us: 900, P99us: 2000},
				Nvmeof: &Metrics{IODepth: 32, BlockSize: 4096, Jobs: 2, IOPS: 60000, MBps: 245.76, P50us: 1000, P99us: 3000}},
			{Name: JobSeqRead128kQD8,
				Nbdkit: &Metrics{IODepth: 8, BlockSize: 128 << 10, IOPS: 11000, MBps: 1441, P50us: 600, P99us: 900},
				Nvmeof: &Metrics{IODepth: 8, BlockSize: 128 << 10, IOPS: 19000, MBps: 2490, P50us: 400, P99us: 700}},
			{Name: JobSeqRead128kQD8Two,
				Nbdkit: &Metrics{IODepth: 8, BlockSize: 128 << 10, Jobs: 2, IOPS: 11500, MBps: 1500, P50us: 1100, P99us: 1900},
				Nvmeof: &Metrics{IODepth: 8, BlockSize: 128 << 10, Jobs: 2, IOPS: 38000, MBps: 4980, P50us: 400, P99us: 700}},
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
		{60000.0 / 70000, 1000.0 / 900, 0.35, 0.3, CeilingDatagram},
		{19000.0 / 11000, 400.0 / 600, 1441.0 / 4000, 2490.0 / 4000, CeilingGSO},
		{38000.0 / 11500, 400.0 / 1100, 1500.0 / 4000, 4980.0 / 4000, CeilingGSO},
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
	if c := r.Jobs[0].Ratios.CPUPerIO; c == nil || !near(*c, 0.5) {
		t.Errorf("QD1 CPU per I/O ratio %v, want 0.5", c)
	}

	// QD32 1.25× ≥ 1: pass; seqread 2490/1441 MB/s: pass; QD1 p50 15 of
	// 30 µs: pass; QD32 two jobs: nbdkit 1.75× (applies), nvmeof 1.2×:
	// fail; seqread two jobs: nbdkit 1.04× < 1.6×: does not apply.
	wantStatus := []string{"PASS", "PASS", "PASS", "FAIL", "N/A"}
	if len(r.Goals) != len(wantStatus) {
		t.Fatalf("%d goals", len(r.Goals))
	}
	for i, g := range r.Goals {
		if g.Status() != wantStatus[i] {
			t.Errorf("goal %q: %s, want %s (%s; %s)", g.Name, g.Status(), wantStatus[i], g.Measured, g.Reference)
		}
	}
	if !r.GoalsJudged || r.GoalsMissed != 1 {
		t.Errorf("judged %v, missed %d, want true, 1", r.GoalsJudged, r.GoalsMissed)
	}
	if g := r.Goals[3]; !strings.Contains(g.Measured, "1.20×") || !strings.Contains(g.Reference, "1.75×") {
		t.Errorf("scaling goal %q (%q)", g.Measured, g.Reference)
	}
	if g := r.Goals[4]; !strings.Contains(g.Measured, "not judged") || g.Pass != nil {
		t.Errorf("scaling goal where nbdkit does not scale: %q, pass %v", g.Measured, g.Pass)
	}
	if got := r.GoalsLine(false); got != "goals missed: 1 (not enforced without -strict)" {
		t.Errorf("GoalsLine(false) = %q", got)
	}
	if got := r.GoalsLine(true); !strings.Contains(got, "exit status 4") {
		t.Errorf("GoalsLine(true) = %q", got)
	}
}

// TestGoalsFail: each ratio goal fails on the wrong side of 1.
func TestGoalsFail(t *testing.T) {
	r := sample()
	r.Job(JobRandRead4kQD32).Nvmeof.IOPS = 39000
	r.Job(JobSeqRead128kQD8).Nvmeof.MBps = 1400
	r.Job(JobRandRead4kQD1).Nvmeof.P50us = 31
	r.Compute()
	for _, g := range r.Goals[:3] {
		if g.Status() != "FAIL" {
			t.Errorf("goal %q: %s (%s)", g.Name, g.Status(), g.Measured)
		}
	}
	if r.GoalsMissed != 4 {
		t.Errorf("missed %d, want 4", r.GoalsMissed)
	}
	// Just under the threshold: three decimals, not a rounded 1.00×.
	r.Job(JobRandRead4kQD32).Nvmeof.IOPS = 39920
	r.Compute()
	if g := r.Goals[0]; g.Status() != "FAIL" || !strings.Contains(g.Measured, "= 0.998× nbdkit") {
		t.Errorf("QD32 goal at 0.998×: %s %q", g.Status(), g.Measured)
	}
}

// TestSmokeNotJudged: a smoke run lists its goals with figures but judges
// none, and says so.
func TestSmokeNotJudged(t *testing.T) {
	r := sample()
	r.Mode, r.RuntimeS, r.Rounds = ModeSmoke, 1, 1
	r.Compute()
	if r.GoalsJudged || r.GoalsMissed != 0 {
		t.Errorf("smoke: judged %v, missed %d", r.GoalsJudged, r.GoalsMissed)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "FAIL") || strings.Contains(out, "PASS") || !strings.Contains(out, "NOT JUDGED on a smoke run (1 s per job, 1 round") {
		t.Errorf("smoke table:\n%s", out)
	}
	if got := r.GoalsLine(true); got != "goals: not judged (smoke run)" {
		t.Errorf("GoalsLine = %q", got)
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
		if g.Pass != nil || g.Measured != nvmeofNotMeasured || !strings.HasPrefix(g.Reference, "nbdkit ") || g.Status() != "NOT MEASURED" {
			t.Errorf("goal %q: pass %v measured %q reference %q", g.Name, g.Pass, g.Measured, g.Reference)
		}
	}
	if r.GoalsMissed != 0 {
		t.Errorf("missed %d", r.GoalsMissed)
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

// TestTableCtxSwitches: without system call counts, the column shows
// context switches and says so.
func TestTableCtxSwitches(t *testing.T) {
	r := sample()
	for _, j := range r.Jobs {
		for _, m := range []*Metrics{j.Nbdkit, j.Nvmeof} {
			m.FioSyscallsPerIO, m.ServerSyscallsPerIO = -1, -1
			m.FioCtxSwitchesPerIO, m.ServerCtxSwitchesPerIO = 1.5, -1
		}
	}
	r.Compute()
	rows := r.Table()
	if rows[0][colSyscalls] != "ctxsw/IO" || rows[4][colSyscalls] != "1.50+?" {
		t.Errorf("header %q, first job %q", rows[0][colSyscalls], rows[4])
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "ctxsw/IO, shown instead") {
		t.Errorf("%v\n%s", err, b.String())
	}
}

func TestAllocsGoal(t *testing.T) {
	r := sample()
	r.Allocs = []AllocBench{{Package: "p", Name: "BenchmarkA-2", AllocsPerOp: 0}, {Package: "q", Name: "BenchmarkB-2", AllocsPerOp: 2}}
	r.Compute()
	g := r.Goals[len(r.Goals)-1]
	if g.Name != GoalAllocsBenchLabel || g.Status() != "FAIL" || !strings.Contains(g.Measured, "2 allocs/op (q BenchmarkB-2)") {
		t.Errorf("allocs goal %+v", g)
	}
	r.Allocs[1].AllocsPerOp = 0
	r.Compute()
	if g := r.Goals[len(r.Goals)-1]; g.Status() != "PASS" {
		t.Errorf("allocs goal %+v", g)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil || !strings.Contains(b.String(), "BenchmarkB-2") {
		t.Errorf("table without the benchmarks: %v\n%s", err, b.String())
	}
}

func TestMedian(t *testing.T) {
	rounds := []*Metrics{
		{RW: "randread", IOPS: 100, P50us: 30, IOs: 10, FioSyscallsPerIO: 3, DatagramsPerIO: -1},
		{RW: "randread", IOPS: 300, P50us: 10, IOs: 30, FioSyscallsPerIO: 1, DatagramsPerIO: -1},
		{RW: "randread", IOPS: 200, P50us: 20, IOs: 20, FioSyscallsPerIO: 2, DatagramsPerIO: -1},
	}
	m := Median(rounds)
	if m.IOPS != 200 || m.P50us != 20 || m.IOs != 20 || m.FioSyscallsPerIO != 2 || m.DatagramsPerIO != -1 || m.Rounds != 3 || m.RW != "randread" {
		t.Errorf("median %+v", m)
	}
	if rounds[0].IOPS != 100 {
		t.Error("Median changed its input")
	}
	if m := Median(rounds[:2]); m.IOPS != 200 || m.P50us != 20 {
		t.Errorf("median of two: IOPS %v p50 %v, want the means of the middle two", m.IOPS, m.P50us)
	}
	rounds[1] = &Metrics{Error: "verify failed"}
	if m := Median(rounds); m.Error != "round 2 of 3: verify failed" {
		t.Errorf("median with a failed round: %q", m.Error)
	}
	if Median(nil) != nil {
		t.Error("median of no rounds")
	}
}

// TestFromFioTwoJobs: jobs that ran at once add their rates.
func TestFromFioTwoJobs(t *testing.T) {
	job := func(ios, ms int64) fio.Job {
		return fio.Job{Name: "r", RuntimeMS: ms, Read: fio.IOStats{TotalIOs: ios, IOBytes: ios * 4096}}
	}
	m, err := FromFio(&fio.Output{Jobs: []fio.Job{job(1000, 1000), job(3000, 2000)}}, 0.01, 0.004)
	if err != nil {
		t.Fatal(err)
	}
	if m.Jobs != 2 || !near(m.IOPS, 1000+1500) || !near(m.MBps, (1000+1500)*4096/1e6) || m.RuntimeS != 2 || m.IOs != 4000 {
		t.Errorf("two jobs: %+v", m)
	}
	if !near(m.FioCPUusPerIO, 2.5) || !near(m.ServerCPUusPerIO, 1) || !near(m.CPUusPerIO, 3.5) {
		t.Errorf("CPU per I/O fio %v server %v all %v", m.FioCPUusPerIO, m.ServerCPUusPerIO, m.CPUusPerIO)
	}
	if m.FioSyscallsPerIO != -1 || m.DatagramsPerIO != -1 {
		t.Errorf("counts before SetCounts: %+v", m.Counts)
	}
	m.SetCounts(Counts{FioSyscalls: 8000, ServerSyscalls: 4000, DatagramsOut: 12000, DatagramsIn: 12000})
	if m.FioSyscallsPerIO != 2 || m.ServerSyscallsPerIO != 1 || m.DatagramsPerIO != 3 {
		t.Errorf("per I/O: %v %v %v", m.FioSyscallsPerIO, m.ServerSyscallsPerIO, m.DatagramsPerIO)
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
			if row[colSide] == side && (row[colJob] == job || (side == SideNvmeof && rows[i-1][colJob] == job)) {
				return row
			}
		}
		t.Fatalf("no %s row for %s", side, job)
		return nil
	}
	if row := get(JobRandRead4kQD1, SideNvmeof); row[colIOPS] != "60K" || row[colP50] != "15.0" || row[colVs] != "IOPS 2.00×, p50 0.50×, CPU/IO 0.50×" ||
		row[colCPU] != "20.0" || row[colCPUSplit] != "12.0+8.0" || row[colSyscalls] != "3.50+2.25" || row[colDgrams] != "4.00" {
		t.Errorf("QD1 nvmeof row %q", row)
	}
	if row := get(JobRandRead4kQD1, SideNbdkit); row[colCPU] != "40.0" || row[colCPUSplit] != "40.0+?" || row[colSyscalls] != "6.00+?" || row[colDgrams] != "" {
		t.Errorf("QD1 nbdkit row %q (server CPU and syscalls unknown)", row)
	}
	if row := get(JobSeqRead128kQD8, SideNbdkit); row[colMBps] != "1441" {
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
	for _, s := range []string{"nvmeof/nbdkit", "FAIL", "PASS", "N/A", "ceiling: UDP GSO + GRO", "median of 3 interleaved rounds", "syscalls/IO: fio + server, not counted"} {
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
	if len(back.Jobs) != 6 || back.Jobs[0].Ratios.IOPS == nil || *back.Jobs[0].Ratios.IOPS != 2 {
		t.Errorf("round trip lost ratios: %+v", back.Jobs)
	}
	if back.Ceilings.PingPong.Median != 10*time.Microsecond {
		t.Errorf("ping-pong median %v", back.Ceilings.PingPong.Median)
	}
	for _, f := range []string{`"iops_nvmeof_over_nbdkit": 2`, `"cpu_us_per_io": 20`, `"fio_syscalls_per_io": 3.5`, `"datagrams_per_io": 4`,
		`"goals_missed": 1`, `"rounds": 3`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("JSON lacks %s:\n%s", f, b)
		}
	}
}

func TestChart(t *testing.T) {
	r := sample()
	r.Jobs[1].Nvmeof = nil
	r.Compute()
	ch := r.Chart()
	if len(ch.Panels) != 3 || len(ch.Panels[0].Groups) != 6 || ch.Panels[2].Groups[0].Values[1] != 20 {
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

// sampleTopologies is sample's jobs over loopback and over veth4, where
// nvmeof is half as fast and the QD32 job failed on nbdkit.
func sampleTopologies() *Report {
	r := sample()
	var jobs []Job
	for _, j := range r.Jobs {
		j.Topology = TopologyLoopback
		jobs = append(jobs, j)
		v := j
		v.Topology = "veth4"
		if j.Nvmeof != nil && j.Nvmeof.Error == "" {
			m := *j.Nvmeof
			m.IOPS, m.MBps, m.P50us = m.IOPS/2, m.MBps/2, m.P50us*2
			v.Nvmeof = &m
		}
		if j.Name == JobRandRead4kQD32 {
			v.Nbdkit = &Metrics{Error: "fio: connection refused"}
		}
		jobs = append(jobs, v)
	}
	r.Jobs = jobs
	r.Topologies = []Topology{
		{Name: TopologyLoopback, Link: "loopback", NvmeofTarget: "nvmetd on 127.0.0.1"},
		{Name: "veth4", Link: "veth pair, MTU 9000, 192.0.2.1 and 192.0.2.2", NbdkitTarget: "nbdkit on 192.0.2.1:10809",
			NvmeofTarget: "nvmetd on 192.0.2.1", DatagramSource: "both namespaces' Udp counters"},
		{Name: "veth6", Skipped: "not root"},
	}
	return r
}

// TestTopologies: each topology's rows are labelled, ratios are against
// nbdkit over the same link, the ceilings compare with loopback's rows
// only, and the goals are judged per topology.
func TestTopologies(t *testing.T) {
	r := sampleTopologies()
	r.Compute()
	if got := r.topologyNames(); len(got) != 2 || got[0] != TopologyLoopback || got[1] != "veth4" {
		t.Fatalf("topologies %q", got)
	}
	loop, veth := r.JobOn(TopologyLoopback, JobRandRead4kQD1), r.JobOn("veth4", JobRandRead4kQD1)
	if loop == nil || veth == nil || loop == veth {
		t.Fatalf("JobOn: %v %v", loop, veth)
	}
	if v := loop.Ratios.IOPS; v == nil || !near(*v, 2) {
		t.Errorf("loopback IOPS ratio %v, want 2", v)
	}
	if v := veth.Ratios.IOPS; v == nil || !near(*v, 1) {
		t.Errorf("veth4 IOPS ratio %v, want 1 (nvmeof halved, against veth4's nbdkit)", v)
	}
	if loop.Ratios.Nbdkit == nil || veth.Ratios.Nbdkit != nil || veth.Ratios.Nvmeof != nil {
		t.Errorf("ceiling ratios: loopback %v, veth4 %v %v (want loopback only)", loop.Ratios.Nbdkit, veth.Ratios.Nbdkit, veth.Ratios.Nvmeof)
	}
	if v := r.JobOn("veth4", JobRandRead4kQD32).Ratios.IOPS; v != nil {
		t.Errorf("ratio %v against a failed nbdkit", *v)
	}
	// Five goals per topology: loopback's as in TestCompute; veth4's QD32
	// is not measured (nbdkit failed), seqread 1245/1441: FAIL, QD1 p50
	// 30/30 µs: PASS.
	if len(r.Goals) != 10 {
		t.Fatalf("%d goals", len(r.Goals))
	}
	for i, want := range []string{"PASS", "PASS", "PASS", "FAIL", "N/A", "NOT MEASURED", "FAIL", "PASS"} {
		g := r.Goals[i]
		topo := TopologyLoopback
		if i >= 5 {
			topo = "veth4"
		}
		if g.Status() != want || g.Topology != topo {
			t.Errorf("goal %d %q on %s: %s, want %s on %s (%s)", i, g.Name, g.Topology, g.Status(), want, topo, g.Measured)
		}
	}

	rows := r.Table()
	var links []string
	for _, row := range rows[4:] {
		if len(row) != numCols {
			t.Fatalf("row %q has %d cells", row, len(row))
		}
		if row[colSide] == SideNbdkit {
			links = append(links, row[colJob]+"/"+row[colLink])
		} else if row[colLink] != "" || row[colJob] != "" {
			t.Errorf("nvmeof row %q: job and link are on the nbdkit row", row)
		}
	}
	if len(links) != 12 || links[0] != JobRandRead4kQD1+"/loopback" || links[1] != JobRandRead4kQD1+"/veth4" {
		t.Errorf("rows: %q", links)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"veth6: not run: not root", "veth4: veth pair, MTU 9000", "nbdkit: nbdkit on 192.0.2.1:10809",
		"dgrams/IO: both namespaces' Udp counters", "[veth4] 128K sequential read"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	js, err := r.MarshalIndent()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"topology": "veth4"`, `"skipped": "not root"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	ch := r.Chart()
	if len(ch.Panels[0].Groups) != 12 || ch.Panels[0].Groups[1].Label != "randread\n4k qd1\nveth4" || ch.Width < 1800 {
		t.Errorf("chart: %d groups, label %q, width %d", len(ch.Panels[0].Groups), ch.Panels[0].Groups[1].Label, ch.Width)
	}
}

// TestComputeNbdkitFailedNvmeofNotRun: a job whose nbdkit run failed and
// whose nvmeof side did not run (skipped on that topology) computes
// without ratios rather than panicking.
func TestComputeNbdkitFailedNvmeofNotRun(t *testing.T) {
	r := sample()
	r.Jobs = []Job{{Name: JobRandRead4kQD1, Topology: "veth4", Nbdkit: &Metrics{Error: "fio: signal: killed"}}}
	r.Compute()
	j := r.Jobs[0]
	if j.Ratios.IOPS != nil || j.Ratios.Nbdkit != nil || j.Ratios.Nvmeof != nil {
		t.Errorf("ratios %+v", j.Ratios)
	}
	rows := r.Table()
	if last := rows[len(rows)-1]; last[colSide] != SideNvmeof || last[colVs] != "not run" {
		t.Errorf("nvmeof row %q", last)
	}
}

// TestFromFioTotalLatency: with total latency percentiles in fio's report,
// P50us is the total latency and ClatP50us the completion latency. Real
// QD1 runs on loopback: fio's nbd engine sends in ->queue, before fio
// stamps the issue time, so its clat leaves the send out (slat about
// 11 µs); our engine stamps the issue time before it sends (slat 0.1 µs),
// so its clat and total latency are nearly the same.
func TestFromFioTotalLatency(t *testing.T) {
	for _, c := range []struct {
		file            string
		p50, clat, slat float64 // µs
	}{
		{"randread-4k-qd1-lat.nbd.json", 42.752, 32.384, 11.272566938},
		{"randread-4k-qd1-lat.nvmeof.json", 40.192, 40.192, 0.114618033},
	} {
		out := loadFio(t, c.file)
		m, err := FromFio(out, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !near(m.P50us, c.p50) || !near(m.ClatP50us, c.clat) {
			t.Errorf("%s: P50us %v ClatP50us %v, want %v and %v", c.file, m.P50us, m.ClatP50us, c.p50, c.clat)
		}
		if got := out.Jobs[0].Read.Slat.Mean / 1e3; !near(got, c.slat) {
			t.Errorf("%s: slat mean %v µs, want %v", c.file, got, c.slat)
		}
	}
	// Without total latency percentiles (fio before --lat_percentiles),
	// P50us is the clat median as it was.
	m, err := FromFio(loadFio(t, "randrw70-4k-qd32.nbd.json"), 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !near(m.P50us, 296.960) || !near(m.ClatP50us, 296.960) {
		t.Errorf("clat fallback: P50us %v ClatP50us %v", m.P50us, m.ClatP50us)
	}
}
