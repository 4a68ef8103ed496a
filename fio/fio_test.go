package fio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// These tests run fio itself with the engine built by
// scripts/build-fio-engine.sh. $NVMEOF_FIO_ENGINE names an engine already
// built; otherwise the tests build one (as root, or when the fio source is
// already in the script's cache), or skip saying why.

var (
	engineOnce sync.Once
	enginePath string
	engineSkip string
)

// repoRoot is the module's root: this package is fio/ in it.
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// engine returns the path of a built engine, or skips the test.
func engine(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not running fio")
	}
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio is not installed (apt-get install fio)")
	}
	engineOnce.Do(func() {
		if p := os.Getenv("NVMEOF_FIO_ENGINE"); p != "" {
			if _, err := os.Stat(p); err != nil {
				engineSkip = fmt.Sprintf("$NVMEOF_FIO_ENGINE: %v", err)
				return
			}
			enginePath = p
			return
		}
		cache := os.Getenv("FIO_SRC_CACHE")
		if cache == "" {
			cache = "/var/cache/nvmeof/fio-src"
		}
		matches, _ := filepath.Glob(filepath.Join(cache, "*", "fio-*", "fio.h"))
		if os.Geteuid() != 0 && len(matches) == 0 && os.Getenv("FIO_SRC") == "" {
			engineSkip = "the engine needs fio's source: run scripts/build-fio-engine.sh as root once (or set $NVMEOF_FIO_ENGINE)"
			return
		}
		dir, err := os.MkdirTemp("", "nvmeof-fio-engine-")
		if err != nil {
			engineSkip = err.Error()
			return
		}
		out := filepath.Join(dir, "fio-nvmeof.so")
		cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "build-fio-engine.sh"), out)
		if b, err := cmd.CombinedOutput(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == 4 {
				engineSkip = fmt.Sprintf("fio's source could not be fetched:\n%s", b)
			} else {
				engineSkip = fmt.Sprintf("scripts/build-fio-engine.sh failed: %v\n%s", err, b)
			}
			return
		}
		enginePath = out
	})
	if enginePath == "" {
		if strings.Contains(engineSkip, "build-fio-engine.sh failed") && os.Geteuid() == 0 {
			t.Fatal(engineSkip) // as root the build must work
		}
		t.Skip(engineSkip)
	}
	return enginePath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if enginePath != "" && os.Getenv("NVMEOF_FIO_ENGINE") == "" {
		os.RemoveAll(filepath.Dir(enginePath))
	}
	if nvmetdBin != "" {
		os.RemoveAll(filepath.Dir(nvmetdBin))
	}
	os.Exit(code)
}

// fioJob is the part of a job in fio's JSON report the tests check.
type fioJob struct {
	Name  string `json:"jobname"`
	Error int    `json:"error"`
	Read  struct {
		IOBytes  int64 `json:"io_bytes"`
		TotalIOs int64 `json:"total_ios"`
	} `json:"read"`
	Write struct {
		IOBytes  int64 `json:"io_bytes"`
		TotalIOs int64 `json:"total_ios"`
	} `json:"write"`
	Trim struct {
		IOBytes int64 `json:"io_bytes"`
	} `json:"trim"`
	Sync struct {
		TotalIOs int64 `json:"total_ios"`
	} `json:"sync"`
}

// runFio runs fio in a temporary directory (fio may leave verify state
// files there) and returns its jobs by name, its output and its error.
func runFio(t *testing.T, args ...string) (map[string]fioJob, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "fio", append([]string{"--output-format=json"}, args...)...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	text := stdout.String() + stderr.String()
	out := stdout.Bytes()
	if i := bytes.IndexByte(out, '{'); i >= 0 {
		out = out[i:]
	}
	var rep struct {
		Jobs []fioJob `json:"jobs"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		if runErr == nil {
			runErr = fmt.Errorf("fio's JSON: %w", err)
		}
		return nil, text, runErr
	}
	jobs := map[string]fioJob{}
	for _, j := range rep.Jobs {
		jobs[j.Name] = j
	}
	return jobs, text, runErr
}

// verifyJob is the check of the issue: a 16 MiB random write at queue
// depth 16 read back and checked with crc32c, then the same blocks read
// and checked again by a separate job (the next fio job, a new controller)
// and a sequential pass with trims and flushes.
const verifyJob = `
[global]
bs=4k
size=16m
iodepth=16
verify=crc32c
verify_fatal=1
verify_state_save=0

[randwrite-verify]
rw=randwrite
do_verify=1

[randread-verify]
stonewall
rw=randread

[trim]
stonewall
rw=randtrim
size=1m
verify=0

[sync]
stonewall
rw=write
size=1m
verify=0
fsync=4
`

func writeJob(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.fio")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkVerifyJobs(t *testing.T, jobs map[string]fioJob, out string) {
	t.Helper()
	const size = 16 << 20
	w, r, tr, sy := jobs["randwrite-verify"], jobs["randread-verify"], jobs["trim"], jobs["sync"]
	if w.Error != 0 || r.Error != 0 || tr.Error != 0 || sy.Error != 0 || len(jobs) != 4 {
		t.Fatalf("fio jobs %d, errors %d %d %d %d:\n%s", len(jobs), w.Error, r.Error, tr.Error, sy.Error, out)
	}
	if tr.Trim.IOBytes != 1<<20 {
		t.Errorf("trim job trimmed %d bytes, want 1 MiB", tr.Trim.IOBytes)
	}
	// fio issues a sync every 4 writes, and again until one completes
	// (last_was_sync is set at completion): the count depends on timing.
	if sy.Sync.TotalIOs == 0 || sy.Write.IOBytes != 1<<20 {
		t.Errorf("sync job: %d flushes, %d bytes written", sy.Sync.TotalIOs, sy.Write.IOBytes)
	}
	if w.Write.IOBytes != size || w.Write.TotalIOs != size/4096 {
		t.Errorf("randwrite-verify wrote %d bytes in %d I/Os, want %d", w.Write.IOBytes, w.Write.TotalIOs, size)
	}
	// The verify pass: every block written was read back and checked.
	if w.Read.IOBytes != size || w.Read.TotalIOs != size/4096 {
		t.Errorf("randwrite-verify's verify pass read %d bytes in %d I/Os, want %d", w.Read.IOBytes, w.Read.TotalIOs, size)
	}
	if r.Read.IOBytes != size {
		t.Errorf("randread-verify read %d bytes, want %d", r.Read.IOBytes, size)
	}
}

// TestFioLoop runs fio with the engine over transport=loop: the engine
// starts an in-process target, so this needs neither root nor a daemon.
// The command line is the shape the benchmark runner uses.
func TestFioLoop(t *testing.T) {
	so := engine(t)
	jobs, out, err := runFio(t, "--ioengine=external:"+so, "--transport=loop", "--loop_size=64m",
		"--subnqn=nqn.2026-11.io.nvmeof:fio-test", writeJob(t, verifyJob))
	if err != nil {
		t.Fatalf("fio: %v\n%s", err, out)
	}
	checkVerifyJobs(t, jobs, out)
}

// TestFioLoopDetectsBadData: a verify job over blocks nobody wrote (a fresh
// loop target reads zeroes) must fail, so a passing verify means the data
// made the round trip.
func TestFioLoopDetectsBadData(t *testing.T) {
	so := engine(t)
	jobs, out, err := runFio(t, "--ioengine=external:"+so, "--transport=loop", "--loop_size=1m",
		"--name=unwritten", "--rw=read", "--bs=4k", "--size=64k", "--verify=crc32c", "--verify_fatal=1", "--verify_state_save=0")
	if err == nil || jobs["unwritten"].Error == 0 {
		t.Fatalf("verify of unwritten blocks passed (err %v):\n%s", err, out)
	}
}

// TestFioEngineOptions checks the options fio lists for the engine, the
// names the benchmark runner passes.
func TestFioEngineOptions(t *testing.T) {
	so := engine(t)
	b, err := exec.Command("fio", "--enghelp="+so).CombinedOutput()
	if err != nil {
		t.Fatalf("fio --enghelp: %v\n%s", err, b)
	}
	for _, name := range []string{"transport", "traddr", "trsvcid", "subnqn", "hostnqn", "host_traddr", "provider", "device", "nsid", "nr_io_queues", "queue_size", "loop_size", "busy_poll", "poll_sleep", "delay_submit", "congestion"} {
		if !strings.Contains(string(b), "\n"+name+" ") && !strings.HasPrefix(string(b), name+" ") {
			t.Errorf("fio --enghelp does not list %s:\n%s", name, b)
		}
	}
	_, out, err := runFio(t, "--ioengine=external:"+so, "--transport=rdma", "--name=x", "--rw=read", "--size=1m")
	if err == nil || !strings.Contains(out, "subnqn is required") {
		t.Errorf("rdma without subnqn: err %v, output:\n%s", err, out)
	}
}

// TestFioForkRefused: with processes instead of threads and setup after
// the fork (create_serialize=0) the engine must refuse cleanly, not hang.
func TestFioForkRefused(t *testing.T) {
	so := engine(t)
	_, out, err := runFio(t, "--ioengine=external:"+so, "--transport=loop", "--create_serialize=0",
		"--name=forked", "--rw=read", "--size=1m")
	if err == nil || !strings.Contains(out, "needs --thread") {
		t.Errorf("forked job: err %v, output:\n%s", err, out)
	}
}

// Loopback addresses for the RDMA test: distinct from 127.0.0.1/127.0.0.2,
// which other packages' tests bind while `go test ./...` runs them in
// parallel (every soft device holds UDP 4791 on its address).
const (
	rdmaTargetAddr = "127.0.44.1"
	rdmaHostAddr   = "127.0.44.2"
	rdmaNQN        = "nqn.2026-11.io.nvmeof:fio-rdma-test"
)

// softCMWorks reports whether the soft provider's connection manager is
// there, or why not.
func softCMWorks() (bool, string) {
	d, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(rdmaHostAddr)})
	if err != nil {
		return false, fmt.Sprintf("soft RoCE device on %s: %v", rdmaHostAddr, err)
	}
	defer d.Close()
	if _, err := d.ConnManager(); err != nil {
		if errors.Is(err, rdma.ErrNotSupported) {
			return false, "the soft provider has no connection manager yet (rdma/soft ConnManager: not supported)"
		}
		return false, err.Error()
	}
	return true, ""
}

// TestFioRDMA runs the verify jobs over NVMe/RDMA on loopback: nvmetd with
// a memory namespace on a soft RoCE device, the engine with its own.
func TestFioRDMA(t *testing.T) {
	so := engine(t)
	if ok, why := softCMWorks(); !ok {
		t.Skip(why)
	}
	srv := startNvmetd(t, memoryTargetHCL(rdmaTargetAddr, rdmaNQN, "64MiB"))

	// busy_poll 50 (the default): completions run on fio's thread
	// (Namespace.Poll, the soft device's Progress); with poll_sleep=1 it
	// sleeps on the queue's socket meanwhile (one I/O queue:
	// Namespace.PollWait); 0: through the provider's receive goroutine
	// and a futex wake.
	for _, opts := range [][]string{
		{"--busy_poll=50", "--nr_io_queues=2"},
		{"--busy_poll=50", "--nr_io_queues=1", "--poll_sleep=1"},
		{"--busy_poll=0", "--nr_io_queues=2"},
	} {
		args := append([]string{"--ioengine=external:" + so, "--transport=rdma",
			"--traddr=" + rdmaTargetAddr, "--trsvcid=4420", "--subnqn=" + rdmaNQN, "--host_traddr=" + rdmaHostAddr,
			"--nsid=1"}, opts...)
		jobs, out, err := runFio(t, append(args, writeJob(t, verifyJob))...)
		if err != nil {
			t.Fatalf("fio %v: %v\n%s\nnvmetd:\n%s", opts, err, out, srv.Log())
		}
		checkVerifyJobs(t, jobs, out)
	}
}
