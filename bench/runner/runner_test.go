package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/bench/report"
	"github.com/nvmeof/nvmeof/configfs"
)

const jobsDir = "../../examples/fio"

func TestParseStatCPU(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime ...
	for _, c := range []struct {
		stat string
		want float64
		err  bool
	}{
		{"1234 (nbdkit) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 17 0", 3.8, false},
		{"42 (a (weird) name) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0", 0.1, false},
		{"42 nbdkit S 1", 0, true},
		{"42 (x) S 1 2 3", 0, true},
		{"42 (x) S 1 1 1 0 -1 0 0 0 0 0 x 3 0 0", 0, true},
	} {
		got, err := parseStatCPU(c.stat)
		if (err != nil) != c.err || (err == nil && (got < c.want-1e-9 || got > c.want+1e-9)) {
			t.Errorf("parseStatCPU(%q) = %v, %v; want %v, error %v", c.stat, got, err, c.want, c.err)
		}
	}
}

func TestServerCPUOfSelf(t *testing.T) {
	s := &Server{Name: "self", PID: os.Getpid()}
	if v, err := s.CPUSeconds(); err != nil || v < 0 {
		t.Errorf("CPUSeconds of this process = %v, %v", v, err)
	}
	if v, err := s.CtxSwitches(); err != nil || v <= 0 {
		t.Errorf("CtxSwitches of this process = %v, %v", v, err)
	}
	st := "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"
	if n := parseCtxSwitches(st); n != 15 {
		t.Errorf("parseCtxSwitches = %v, want 15", n)
	}
}

func TestListJobs(t *testing.T) {
	jobs, err := ListJobs(jobsDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	want := append([]string{}, jobOrder...)
	for _, n := range jobOrder {
		if !strings.HasSuffix(n, "-2jobs") {
			want = append(want, n+"-verify")
		}
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("jobs %v\nwant %v", names, want)
	}
	jobs, err = ListJobs(jobsDir, []string{"seqread-128k-qd8-verify", "randread-4k-qd1"})
	if err != nil || len(jobs) != 2 || jobs[0].Name != "randread-4k-qd1" {
		t.Errorf("ListJobs(only) = %v, %v", jobs, err)
	}
	if _, err := ListJobs(jobsDir, []string{"no-such-job"}); err == nil {
		t.Error("ListJobs with an unknown job: no error")
	}
	if _, err := ListJobs(t.TempDir(), nil); err == nil {
		t.Error("ListJobs of an empty directory: no error")
	}
}

// TestJobFiles checks every example job file with fio's own parser
// (--parse-only) when fio is installed.
func TestJobFiles(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio not installed")
	}
	jobs, err := ListJobs(jobsDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		out, err := exec.Command("fio", "--parse-only", "--ioengine=null", "--size=1m", j.Path).CombinedOutput()
		if err != nil {
			t.Errorf("fio --parse-only %s: %v\n%s", j.Path, err, out)
		}
		b, _ := os.ReadFile(j.Path)
		for _, banned := range []string{"ioengine=", "filename=", "uri="} {
			if strings.Contains(string(b), "\n"+banned) {
				t.Errorf("%s sets %s: job files are engine-agnostic", j.Path, banned)
			}
		}
	}
}

func TestCheckTools(t *testing.T) {
	err := CheckTools("/nonexistent/fio", "/nonexistent/nbdkit", false)
	if !errors.Is(err, ErrMissingTools) || !strings.Contains(err.Error(), "apt-get install fio nbdkit") {
		t.Errorf("CheckTools with missing tools: %v", err)
	}
	err = CheckTools("/nonexistent/fio", "/nonexistent/nbdkit", true)
	if err == nil || strings.Contains(err.Error(), "nbdkit") {
		t.Errorf("CheckTools skipping nbdkit: %v", err)
	}
}

func TestNvmeofHook(t *testing.T) {
	n := DefaultNvmeofConfig()
	n.Engine = filepath.Join(t.TempDir(), "missing.so")
	if ok, why := n.Available(); ok || !strings.Contains(why, "not built") {
		t.Errorf("Available() with no engine = %v, %q", ok, why)
	}
	n.Engine = "/engines/e.so"
	n.Port = 4420
	for _, tr := range []string{"rdma", "tcp"} {
		n.Transport = tr
		want := []string{"ioengine=external:/engines/e.so", "thread", "transport=" + tr, "traddr=127.0.0.1", "trsvcid=4420",
			"subnqn=nqn.2026-11.io.nvmeof:bench", "host_traddr=127.0.0.2", "nsid=1"}
		if got := n.EngineArgs(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: EngineArgs() = %q\nwant %q", tr, got, want)
		}
		cfg := n.NvmetdConfig("1G")
		for _, s := range []string{`backend    = "memory"`, `size       = "1GiB"`, `address   = "127.0.0.1"`, `service   = 4420`,
			`allow_any_host = true`, `log_level = "info"`, `subsystem "nqn.2026-11.io.nvmeof:bench"`, `transport = "` + tr + `"`} {
			if !strings.Contains(cfg, s) {
				t.Errorf("%s: nvmetd config lacks %s:\n%s", tr, s, cfg)
			}
		}
		if strings.Contains(cfg, "provider") != (tr == "rdma") {
			t.Errorf("%s: provider in the config: %v, want only for rdma:\n%s", tr, !strings.Contains(cfg, "provider"), cfg)
		}
		if _, err := configfs.ParseHCL([]byte(cfg), "bench.hcl"); err != nil {
			t.Errorf("%s: nvmetd would refuse its config: %v\n%s", tr, err, cfg)
		}
	}
	for in, want := range map[string]string{"1G": "1GiB", "512M": "512MiB", "1073741824": "1073741824", "": ""} {
		if got := hclSize(in); got != want {
			t.Errorf("hclSize(%q) = %q, want %q", in, got, want)
		}
	}
	for range 100 {
		if p := pickPort(); p < 49152 || p > 65535 {
			t.Fatalf("pickPort() = %d", p)
		}
	}
}

func TestUDPFree(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := c.LocalAddr().(*net.UDPAddr).Port
	if err := udpFree("127.0.0.1", port); err == nil {
		t.Errorf("udpFree of a bound port: no error")
	}
	if err := udpFree("not-an-ip", port); err == nil {
		t.Errorf("udpFree of a bad address: no error")
	}
}

// fakeNvmetd writes a shell script that logs nvmetd's listening line for the
// config it is given, after a delay, then waits; with ignoreTerm it
// ignores SIGTERM.
func fakeNvmetd(t *testing.T, ignoreTerm bool) string {
	t.Helper()
	trap := ""
	if ignoreTerm {
		trap = "trap '' TERM\n"
	}
	script := "#!/bin/sh\n" + trap + `cfg=$2
port=$(sed -n 's/^ *service *= *\([0-9]*\).*/\1/p' "$cfg")
sleep 0.2
echo "2026-11-29T16:07:20.866Z [INFO]  nvmetd: listening: port=bench portid=1 address=\"trtype=rdma,traddr=127.0.0.1,trsvcid=$port\"" >&2
while :; do sleep 0.05; done
`
	p := filepath.Join(t.TempDir(), "nvmetd")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStartNvmetd checks the readiness wait (nvmetd's "listening" line for
// the picked port) and the stop by PID, SIGKILL included.
func TestStartNvmetd(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	type variant struct{ ignoreTerm, netns bool }
	variants := []variant{{false, false}, {true, false}}
	if os.Geteuid() == 0 && netnsTools() == "" {
		variants = append(variants, variant{false, true}, variant{true, true})
	}
	for _, v := range variants {
		ignoreTerm := v.ignoreTerm
		n := DefaultNvmeofConfig()
		n.Netns = v.netns
		n.Nvmetd = fakeNvmetd(t, ignoreTerm)
		n.Port = pickPort()
		n.Grace = 300 * time.Millisecond
		c := Config{WorkDir: t.TempDir(), MemSize: "64M"}
		var ns []string
		if n.Netns {
			ns = netnsPrefix
		}
		srv, err := c.startNvmetd(context.Background(), n, "", ns)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(c.WorkDir, "nvmetd.hcl"))
		if !strings.Contains(string(b), fmt.Sprintf("service   = %d", n.Port)) || !strings.Contains(string(b), `"64MiB"`) {
			t.Errorf("config:\n%s", b)
		}
		if srv.exited() {
			t.Fatal("fake nvmetd exited")
		}
		if v.netns {
			self, _ := os.Readlink("/proc/self/ns/net")
			its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", srv.PID))
			if err != nil || its == self {
				// Gone (seen once under heavy load): say how it ended.
				ended := "still running"
				select {
				case <-srv.done:
					ended = fmt.Sprintf("exited: %v", srv.err)
				case <-time.After(2 * time.Second):
				}
				t.Errorf("netns: fake nvmetd pid %d in network namespace %q (%v), the test's is %q; the process %s%s", srv.PID, its, err, self, ended, srv.logTail())
			}
		}
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
		if srv.Killed != ignoreTerm {
			t.Errorf("ignoreTerm %v: Killed %v", ignoreTerm, srv.Killed)
		}
		if !gone(srv.PID) {
			t.Errorf("pid %d still there after Stop", srv.PID)
		}
	}

	// Listening on another service ID than the one picked (the fake reads
	// another config): the wait gives up and says why.
	n := DefaultNvmeofConfig()
	n.Nvmetd = fakeNvmetd(t, false)
	n.Port = 1
	n.Ready = 500 * time.Millisecond
	other := filepath.Join(t.TempDir(), "other.hcl")
	if err := os.WriteFile(other, []byte("service = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.NvmetdArgs = []string{"--config", other}
	c := Config{WorkDir: t.TempDir(), MemSize: "64M"}
	if _, err := c.startNvmetd(context.Background(), n, "", nil); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("startNvmetd listening on another port: %v", err)
	}
}

func TestConfigRuntime(t *testing.T) {
	for _, c := range []struct {
		c    Config
		want time.Duration
	}{
		{Config{}, 10 * time.Second},
		{Config{Mode: ModeQuick}, 3 * time.Second},
		{Config{Mode: ModeSmoke}, time.Second},
		{Config{Mode: ModeQuick, Runtime: 5 * time.Second}, 5 * time.Second},
	} {
		if got := c.c.runtime(); got != c.want {
			t.Errorf("%+v: runtime %v, want %v", c.c, got, c.want)
		}
	}
	for _, c := range []struct {
		c    Config
		want int
	}{{Config{}, 3}, {Config{Mode: ModeQuick}, 3}, {Config{Mode: ModeSmoke}, 1}, {Config{Mode: ModeSmoke, Rounds: 2}, 2}} {
		if got := c.c.rounds(); got != c.want {
			t.Errorf("%+v: rounds %d, want %d", c.c, got, c.want)
		}
	}
}

func TestParsePerf(t *testing.T) {
	total := "# started on Tue Dec  1 01:51:27 2026\n\n463,,raw_syscalls:sys_enter,5830243,100.00,,\n"
	if n, err := parsePerfTotal([]byte(total)); err != nil || n != 463 {
		t.Errorf("parsePerfTotal = %v, %v", n, err)
	}
	if _, err := parsePerfTotal([]byte("<not counted>,,raw_syscalls:sys_enter,0,100.00,,\n")); err == nil {
		t.Error("<not counted> alone: no error")
	}
	if _, err := parsePerfTotal([]byte("# started\n")); err == nil {
		t.Error("no count line: no error")
	}
	intervals := `# started on Tue Dec  1 01:52:11 2026

     0.100447785,1000,,raw_syscalls:sys_enter,28686974,100.00,,
     0.200000000,<not counted>,,raw_syscalls:sys_enter,0,100.00,,
     0.300000000,2000,,raw_syscalls:sys_enter,1798372,100.00,,
`
	lines, err := parsePerfLines([]byte(intervals))
	if err != nil || len(lines) != 3 || lines[1].count != 0 || !lines[1].notCounted || lines[2].at != 0.3 {
		t.Fatalf("parsePerfLines = %+v, %v", lines, err)
	}
	lines[0].at = 0.1
	for _, c := range []struct {
		from, to float64
		want     float64
		ok       bool
	}{
		{0, 0.3, 3000, true},
		{0.05, 0.25, 500 + 0 + 1000, true},
		{0.15, 0.3, 2000, true},
		{0.2, 0.4, 2000, false},
	} {
		n, ok := windowCount(lines, c.from, c.to)
		if ok != c.ok || n < c.want-1e-6 || n > c.want+1e-6 {
			t.Errorf("windowCount(%v, %v) = %v, %v; want %v, %v", c.from, c.to, n, ok, c.want, c.ok)
		}
	}
}

func TestParseSNMPUDP(t *testing.T) {
	text := `Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1234 0 5 5678 0 0 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 0 0 0
`
	in, out, err := parseSNMPUDP(text)
	if err != nil || in != 1234 || out != 5678 {
		t.Errorf("parseSNMPUDP = %v, %v, %v", in, out, err)
	}
	if _, _, err := parseSNMPUDP("Ip: a\nIp: 1\n"); err == nil {
		t.Error("no Udp lines: no error")
	}
	if in, out, err := snmpUDP(0); err != nil || in < 0 || out < 0 {
		t.Errorf("snmpUDP of this namespace = %v, %v, %v", in, out, err)
	}
}

func TestParseBenchmem(t *testing.T) {
	out := `goos: linux
pkg: github.com/nvmeof/nvmeof/fio
BenchmarkLoopRead4K/qd1-2         	    5000	     21000 ns/op	 195.04 MB/s	       3 B/op	       0 allocs/op
BenchmarkLoopRead4K/qd16-2        	    5000	      9000 ns/op	      12 B/op	       1 allocs/op
PASS
pkg: github.com/nvmeof/nvmeof/target
BenchmarkRead4K-2   	    5000	      4000 ns/op	       0 B/op	       0 allocs/op
--- FAIL: BenchmarkX-2
`
	got := parseBenchmem(out)
	if len(got) != 3 || got[1].Name != "BenchmarkLoopRead4K/qd16-2" || got[1].AllocsPerOp != 1 || got[1].BytesPerOp != 12 ||
		got[0].NsPerOp != 21000 || got[2].Package != "github.com/nvmeof/nvmeof/target" {
		t.Errorf("parseBenchmem = %+v", got)
	}
	cmd := strings.Join(allocsCommand(), " ")
	if !strings.Contains(cmd, "-benchmem") || !strings.Contains(cmd, "./fio/") || !strings.Contains(cmd, "BenchmarkLoopRead4K|") {
		t.Errorf("allocs command %q", cmd)
	}
}

// TestServerUnderPerf starts a server that makes system calls under perf
// stat -I, as the runner does when it counts them, and cuts a window of its
// count; skipped where perf does not work.
func TestServerUnderPerf(t *testing.T) {
	if err := CheckPerf(context.Background(), ""); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	w := serverWrap{PerfOut: filepath.Join(dir, "perf.csv")}
	w.Prefix = append([]string{"perf"}, perfStatArgs(w.PerfOut, perfInterval)...)
	w.Prefix = append(w.Prefix, "setpriv", "--pdeathsig", "TERM", "--")
	// A shell loop that starts a process every 10 ms: many system calls.
	srv, err := startServer("busy", []string{"sh", "-c", "while :; do /bin/true; sleep 0.01; done"}, filepath.Join(dir, "log"), w)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.PID == srv.cmd.Process.Pid {
		t.Errorf("server pid %d is perf's", srv.PID)
	}
	t0 := time.Now()
	deadline := t0.Add(30 * time.Second)
	for time.Since(t0) < 4*perfInterval && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(perfInterval)
	}
	n, err := srv.Syscalls(t0, time.Now(), 5*time.Second)
	if err != nil || n <= 0 {
		t.Errorf("Syscalls = %v, %v", n, err)
	}
	if err := srv.Stop(); err != nil {
		t.Error(err)
	}
	if !gone(srv.PID) {
		t.Errorf("pid %d still there after Stop", srv.PID)
	}
}

// gone reports whether process pid has ended: no such process, or a zombie
// (a wrapper's child that init has not reaped yet).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i >= 0 && strings.HasPrefix(st[i+1:], " Z")
}

// TestRunSmoke runs two jobs for half a second each against a real nbdkit,
// and the nvmeof side with a file that is not a fio engine: its jobs must
// fail or be skipped, never produce numbers.
func TestRunSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if err := CheckTools("", "", false); err != nil {
		t.Skip(err)
	}
	notEngine := filepath.Join(t.TempDir(), "not-an-engine.so")
	if err := os.WriteFile(notEngine, []byte("not ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	nv := DefaultNvmeofConfig()
	nv.Engine = notEngine
	var log bytes.Buffer
	r, err := Run(context.Background(), Config{
		Mode:    ModeSmoke,
		Runtime: 500 * time.Millisecond,
		JobsDir: jobsDir,
		Only:    []string{"randread-4k-qd1", "seqwrite-128k-qd8-verify"},
		MemSize: "512M",
		Nvmeof:  nv,
		Log:     &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(r.Jobs) != 2 {
		t.Fatalf("%d jobs", len(r.Jobs))
	}
	for _, j := range r.Jobs {
		m := j.Nbdkit
		if m == nil || m.Error != "" || m.IOPS <= 0 || m.MBps <= 0 || m.P50us <= 0 || m.ServerCPUs < 0 {
			t.Errorf("job %s nbdkit metrics %+v", j.Name, m)
		}
		if j.Nvmeof != nil && j.Nvmeof.Error == "" {
			t.Errorf("job %s: nvmeof numbers from a file that is no engine: %+v", j.Name, j.Nvmeof)
		}
	}
	if r.NvmeofSkipped == "" && r.Jobs[0].Nvmeof == nil {
		t.Error("nvmeof side neither skipped nor failed")
	}
	t.Logf("nvmeof side: skipped %q, first job %+v", r.NvmeofSkipped, r.Jobs[0].Nvmeof)
	if r.LoadStart < 0 || r.LoadEnd < 0 {
		t.Errorf("load average not read: %v, %v", r.LoadStart, r.LoadEnd)
	}
	if r.Ceilings.PingPong.Count == 0 {
		t.Errorf("no ping-pong measured: %+v", r.Ceilings)
	}
	if len(r.Goals) != 5 || r.Goals[0].Pass != nil || r.GoalsJudged || r.GoalsMissed != 0 {
		t.Errorf("goals %+v", r.Goals)
	}

	dir := t.TempDir()
	paths, err := WriteResults(r, filepath.Join(dir, "res.json"), filepath.Join(dir, "out"))
	if err != nil || len(paths) != 6 {
		t.Fatalf("WriteResults = %v, %v", paths, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "res.csv")); err != nil || !strings.HasPrefix(string(b), "panel,group,series,value\n") || strings.Count(string(b), "\n") < 1+2*2 {
		t.Errorf("CSV beside the chart: %v\n%s", err, b)
	}
	f, err := os.Open(filepath.Join(dir, "res.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("chart: %v", err)
	}
	var back report.Report
	b, _ := os.ReadFile(paths[0])
	if err := json.Unmarshal(b, &back); err != nil || len(back.Jobs) != 2 {
		t.Errorf("JSON read back: %v, %d jobs", err, len(back.Jobs))
	}
}

// TestRunNvmeofSmoke runs two short jobs on the nvmeof side for real: nvmetd
// and the fio engine from out/ (scripts/bench.sh builds them), as root.
func TestRunNvmeofSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	nv := DefaultNvmeofConfig()
	nv.Engine = filepath.Join("..", "..", DefaultEngine)
	nv.Nvmetd = filepath.Join("..", "..", DefaultNvmetd)
	if e := os.Getenv("NVMEOF_FIO_ENGINE"); e != "" {
		nv.Engine = e
	}
	if e := os.Getenv("NVMEOF_NVMETD"); e != "" {
		nv.Nvmetd = e
	}
	if ok, why := nv.Available(); !ok {
		t.Skip(why)
	}
	if err := CheckTools("", "", true); err != nil {
		t.Skip(err)
	}
	var log bytes.Buffer
	r, err := Run(context.Background(), Config{
		Mode:         ModeSmoke,
		Runtime:      500 * time.Millisecond,
		JobsDir:      jobsDir,
		Only:         []string{"randread-4k-qd32", "randwrite-4k-qd32-verify"},
		MemSize:      "128M",
		SkipCeilings: true,
		SkipNbdkit:   true,
		Rounds:       2,
		Syscalls:     true,
		Nvmeof:       nv,
		Log:          &log,
	})
	t.Logf("%s", log.String())
	perfErr := CheckPerf(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.NvmeofSkipped != "" {
		t.Fatalf("nvmeof skipped: %s", r.NvmeofSkipped)
	}
	for _, j := range r.Jobs {
		m := j.Nvmeof
		if m == nil || m.Error != "" || m.IOPS <= 0 || m.FioCPUs <= 0 || m.ServerCPUs < 0 || m.Rounds != 2 || len(j.NvmeofRounds) != 2 {
			t.Fatalf("job %s nvmeof metrics %+v", j.Name, m)
		}
		// In the side's own network namespace, the I/Os send their
		// command capsules (several to a datagram when fio's engine
		// sends them as one GSO run: delay_submit).
		if m.DatagramsPerIO <= 0 || m.DatagramSource != srcNetnsSNMP {
			t.Errorf("job %s: %v datagrams per I/O from %q", j.Name, m.DatagramsPerIO, m.DatagramSource)
		}
		if m.FioCtxSwitchesPerIO <= 0 || m.ServerCtxSwitchesPerIO < 0 {
			t.Errorf("job %s: context switches per I/O %v + %v", j.Name, m.FioCtxSwitchesPerIO, m.ServerCtxSwitchesPerIO)
		}
		if perfErr == nil && (m.FioSyscallsPerIO <= 0 || m.ServerSyscallsPerIO <= 0) {
			t.Errorf("job %s: system calls per I/O %v + %v with perf working", j.Name, m.FioSyscallsPerIO, m.ServerSyscallsPerIO)
		}
	}
	if !strings.Contains(log.String(), "nvmetd pid") || strings.Contains(log.String(), "killed") {
		t.Errorf("nvmetd start/stop not as expected:\n%s", log.String())
	}
}
