package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// End-to-end tests of the nvmeof CLI: the real binaries, the connection
// daemons, FUSE + loop mappings, a filesystem on them.
//
//   - TestCLILoop: the target runs inside each nvmeof process (-t loop
//     --target-config), so everything but RDMA is exercised without the
//     soft provider's connection manager. Needs root, /dev/fuse, loop
//     devices and mkfs.ext4.
//   - TestCLIRDMA: nvmetd serves the namespaces on 127.0.0.1 over the
//     soft RoCE provider and nvmeof connects from 127.0.0.2+, including
//     unreachable addresses and the target dying mid-I/O. Needs the above
//     and a working soft connection manager.

const (
	diskNQN   = "nqn.2026-11.io.nvmeof:e2e-disk"
	strictNQN = "nqn.2026-11.io.nvmeof:e2e-strict"
	otherHost = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"
	cmdTmo    = 90 * time.Second // bound of any one command
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds cmd/nvmeof and cmd/nvmetd once per test binary.
func binaries(t *testing.T) (nvmeof, nvmetd string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "nvmeof-e2e-bin-")
		if buildErr != nil {
			return
		}
		for _, c := range []string{"nvmeof", "nvmetd"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, c), "./cmd/"+c)
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", c, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "nvmeof"), filepath.Join(binDir, "nvmetd")
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(unprivChildEnv); mode != "" {
		os.Exit(unprivChild(mode))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// requireBlockdev skips unless FUSE + loop mappings and mkfs can work.
func requireBlockdev(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE mounts, loop devices, the soft RoCE provider)")
	}
	for _, p := range []string{"/dev/fuse", "/dev/loop-control"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s", p)
		}
	}
	for _, c := range []string{"mkfs.ext4", "mount", "umount", "blockdev"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s", c)
		}
	}
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// cli runs nvmeof against a run directory.
type cli struct {
	t      *testing.T
	bin    string
	runDir string
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	r := runCmd(c.t, cmdTmo, append([]string{c.bin, "--run-dir", c.runDir}, args...)...)
	if testing.Verbose() {
		c.t.Logf("nvmeof %s: exit %d in %v", strings.Join(args, " "), r.code, r.took.Round(time.Millisecond))
	}
	return r
}

// ok runs a command that must succeed.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("nvmeof %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// fails runs a command that must fail with one line on stderr containing
// want, within bound.
func (c *cli) fails(bound time.Duration, want string, args ...string) {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 1 {
		c.t.Fatalf("nvmeof %s: want exit status 1: %s", strings.Join(args, " "), r)
	}
	if lines := strings.Split(strings.TrimSpace(r.stderr), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "nvmeof: ") {
		c.t.Errorf("nvmeof %s: want one error line, got %q", strings.Join(args, " "), r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		c.t.Errorf("nvmeof %s: error %q lacks %q", strings.Join(args, " "), strings.TrimSpace(r.stderr), want)
	}
	if r.took > bound {
		c.t.Errorf("nvmeof %s: failed after %v, want within %v", strings.Join(args, " "), r.took, bound)
	}
}

func runCmd(t *testing.T, tmo time.Duration, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), tmo)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		r.code = -1
		r.stderr += err.Error()
	}
	if ctx.Err() != nil {
		t.Fatalf("%s: no exit within %v (killed): %s", strings.Join(argv, " "), tmo, r)
	}
	return r
}

// sh runs a helper command that must succeed.
func sh(t *testing.T, argv ...string) string {
	t.Helper()
	r := runCmd(t, cmdTmo, argv...)
	if r.code != 0 {
		t.Fatalf("%s: %s", strings.Join(argv, " "), r)
	}
	return r.stdout
}

// daemonPIDs reads the PIDs of the daemons with state under runDir.
func daemonPIDs(runDir string) []int {
	var pids []int
	files, _ := filepath.Glob(filepath.Join(runDir, "nvmeof*", session.StateFile))
	for _, f := range files {
		if st, err := session.ReadState(f); err == nil && st.PID > 0 {
			pids = append(pids, st.PID)
		}
	}
	return pids
}

// alive reports whether pid runs: a zombie does not, once its other
// threads have exited too (processAlive in internal/hostcli).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X') {
		return true
	}
	// A zombie leader whose other threads still exit holds the
	// process's files (the session lock): field 20, the thread count.
	f := bytes.Fields(b[i+1:])
	return len(f) > 17 && string(f[17]) != "1" && string(f[17]) != "0"
}

// keptLog reports whether name is a connection daemon's log, which stays
// after the daemon exits (and its rotated predecessor), by design.
func keptLog(name string) bool {
	base := strings.TrimSuffix(name, ".1")
	return strings.HasPrefix(base, "nvmeof") && strings.HasSuffix(base, ".log")
}

// leftovers lists what a test must not leave behind under runDir: files,
// mounts, loop devices backed by files below it, and live daemons.
func leftovers(runDir string, pids []int) []string {
	var out []string
	ents, _ := os.ReadDir(runDir)
	for _, e := range ents {
		if keptLog(e.Name()) {
			continue
		}
		out = append(out, "file "+e.Name())
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], runDir+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if s, err := os.ReadFile(b); err == nil && strings.HasPrefix(strings.TrimSpace(string(s)), runDir+"/") {
			out = append(out, "loop device "+filepath.Base(filepath.Dir(filepath.Dir(b))))
		}
	}
	for _, p := range pids {
		if alive(p) {
			out = append(out, "daemon pid "+strconv.Itoa(p))
		}
	}
	return out
}

// procWritten returns the bytes process pid has written (wchar of
// /proc/PID/io), 0 when unknown.
func procWritten(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// newCLI prepares a run directory whose daemons are all stopped at the
// end of the test, whatever happens.
func newCLI(t *testing.T, bin string) *cli {
	runDir, err := os.MkdirTemp("", "nvmeof-e2e-run-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cli{t: t, bin: bin, runDir: runDir}
	t.Cleanup(func() {
		pids := daemonPIDs(runDir)
		runCmd(t, cmdTmo, bin, "--run-dir", runDir, "disconnect-all")
		for _, p := range pids {
			if alive(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
		// The killed daemons gone, list cleans their leftovers.
		if !waitFor(10*time.Second, func() bool { return !slices.ContainsFunc(pids, alive) }) {
			t.Errorf("daemons still alive after SIGKILL: %v", pids)
		}
		runCmd(t, cmdTmo, bin, "--run-dir", runDir, "list") // cleans stale daemons' leftovers
		os.RemoveAll(runDir)
	})
	return c
}

// waitFor reports whether cond holds within d, for states that signal no
// event (a process gone, a file removed, a log line written by another
// process): it asks again after 1 ms, then twice as long each time up to
// 50 ms.
func waitFor(d time.Duration, cond func() bool) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if cond() {
			return true
		}
		select {
		case <-timeout.C:
			return cond()
		case <-time.After(wait):
		}
	}
}

// listed is one namespace of `nvmeof list -o json`.
type listed struct {
	NameSpace    uint32
	DevicePath   string
	GenericPath  string
	SerialNumber string
	ModelNumber  string
	PhysicalSize uint64
	SectorSize   uint64
	Controller   string
	SubsystemNQN string
	State        string
}

func list(t *testing.T, c *cli) []listed {
	t.Helper()
	var v struct{ Devices []listed }
	out := c.ok("list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	return v.Devices
}

// treeSums returns the SHA-256 of every regular file below dir, by
// relative path.
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, p)
		sums[rel] = hex.EncodeToString(s[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// filesystemRoundTrip makes an ext4 filesystem on dev, copies a source
// tree onto it, remounts it (through the block device, caches dropped) and
// compares every file's SHA-256, then unmounts. It also checks that
// disconnect is refused while the filesystem is mounted.
func filesystemRoundTrip(t *testing.T, c *cli, dev, ctrl string) {
	t.Helper()
	sh(t, "mkfs.ext4", "-q", "-F", dev)
	mnt := t.TempDir()
	sh(t, "mount", dev, mnt)
	mounted := true
	t.Cleanup(func() {
		if mounted {
			runCmd(t, cmdTmo, "umount", "-l", mnt)
		}
	})
	src := filepath.Join("..", "fabrics")
	sh(t, "cp", "-r", src, filepath.Join(mnt, "fabrics"))
	want := treeSums(t, src)
	// Disconnect must refuse while the filesystem is mounted.
	c.fails(cmdTmo, "is mounted on "+mnt, "disconnect", "-d", ctrl)
	sh(t, "umount", mnt)
	sh(t, "blockdev", "--flushbufs", dev)
	sh(t, "mount", dev, mnt)
	got := treeSums(t, filepath.Join(mnt, "fabrics"))
	sh(t, "umount", mnt)
	mounted = false
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("copied %d files, read back %d", len(want), len(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: sha256 %s after the round trip, want %s", k, got[k], v)
		}
	}
}

const loopTargetHCL = `port "p0" {
  transport = "loop"
  address   = "127.0.0.1"
  service   = %d
}

host %q {}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  serial         = "E2E0001"
  model          = "nvmeof-e2e"

  namespace "1" {
    backend    = "memory"
    size       = "256MiB"
    block_size = 512
  }
}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = false
  allowed_hosts  = [%q]

  namespace "1" {
    backend = "memory"
    size    = "16MiB"
  }
}
`

// TestCLILoop drives discover, connect (FUSE + loop), list, id-ctrl,
// id-ns, smart-log, a filesystem round trip, refusals and disconnect with
// the target inside each nvmeof process.
func TestCLILoop(t *testing.T) {
	requireBlockdev(t)
	bin, _ := binaries(t)
	c := newCLI(t, bin)
	cfg := filepath.Join(t.TempDir(), "target.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(loopTargetHCL, 4420, otherHost, diskNQN, strictNQN, otherHost)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"-t", "loop", "-a", "127.0.0.1", "-s", "4420", "--target-config", cfg}

	out := c.ok(append([]string{"discover"}, base...)...)
	// The strict subsystem is not listed for a host it does not allow.
	for _, want := range []string{"Discovery Log Number of Records 2", "subnqn:  " + diskNQN, "trtype:  loop"} {
		if !strings.Contains(out, want) {
			t.Errorf("discover output lacks %q:\n%s", want, out)
		}
	}

	// Refusals: one line, exit 1, nothing left behind.
	c.fails(30*time.Second, "unknown subsystem nqn.2026-11.io.nvmeof:nope", append([]string{"connect", "-n", "nqn.2026-11.io.nvmeof:nope"}, base...)...)
	c.fails(30*time.Second, "is not allowed to access subsystem "+strictNQN, append([]string{"connect", "-n", strictNQN}, base...)...)
	c.fails(30*time.Second, "connection refused", "connect", "-n", diskNQN, "-t", "loop", "-a", "127.0.0.1", "-s", "4421", "--target-config", cfg)
	if l := leftovers(c.runDir, nil); len(l) != 0 {
		t.Fatalf("refused connects left %v", l)
	}

	out = c.ok(append([]string{"connect", "-n", diskNQN, "--map", "fuse"}, base...)...)
	lines := strings.Fields(out)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "/dev/loop") || lines[1] != "nvmeof0" {
		t.Fatalf("connect printed %q, want a loop device then nvmeof0", out)
	}
	dev := lines[0]
	pids := daemonPIDs(c.runDir)
	if len(pids) != 1 {
		t.Fatalf("daemons: %v", pids)
	}
	c.fails(30*time.Second, "already connected as nvmeof0", append([]string{"connect", "-n", diskNQN}, base...)...)
	// The host allowed by the strict subsystem gets in (no mapping).
	if out := c.ok(append([]string{"connect", "-n", strictNQN, "-q", otherHost, "--map", "none"}, base...)...); strings.TrimSpace(out) != "nvmeof1" {
		t.Fatalf("connect --map none printed %q", out)
	}
	pids = daemonPIDs(c.runDir)

	devs := list(t, c)
	if len(devs) != 2 || devs[0].DevicePath != dev || devs[0].GenericPath != "nvmeof0n1" || devs[0].SerialNumber != "E2E0001" ||
		devs[0].PhysicalSize != 256<<20 || devs[0].SectorSize != 512 || devs[0].State != "live" || devs[1].DevicePath != "" {
		t.Fatalf("list: %+v", devs)
	}
	if out := c.ok("list"); !strings.Contains(out, dev) || !strings.Contains(out, "nvmeof-e2e") {
		t.Errorf("list:\n%s", out)
	}
	var idc struct {
		SN     string `json:"sn"`
		Subnqn string `json:"subnqn"`
		Ioccsz int    `json:"ioccsz"`
	}
	if err := json.Unmarshal([]byte(c.ok("id-ctrl", dev, "-o", "json")), &idc); err != nil || idc.SN != "E2E0001" || idc.Subnqn != diskNQN {
		t.Errorf("id-ctrl -o json: %+v %v", idc, err)
	}
	if out := c.ok("id-ctrl", "nvmeof0"); !strings.Contains(out, "subnqn    : "+diskNQN) {
		t.Errorf("id-ctrl:\n%s", out)
	}
	if out := c.ok("id-ns", "nvmeof0n1"); !strings.Contains(out, "nsze    : 0x80000") || !strings.Contains(out, "(in use)") {
		t.Errorf("id-ns:\n%s", out)
	}
	if out := c.ok("smart-log", dev); !strings.Contains(out, "critical_warning") || !strings.Contains(out, "available_spare") {
		t.Errorf("smart-log:\n%s", out)
	}
	c.fails(30*time.Second, "not a device of a connected controller", "id-ctrl", "/dev/null")

	filesystemRoundTrip(t, c, dev, "nvmeof0")

	if out := c.ok("disconnect", "-n", diskNQN); !strings.Contains(out, "disconnected 1 controller(s)") {
		t.Errorf("disconnect printed %q", out)
	}
	c.ok("disconnect", "-d", "nvmeof1")
	if l := leftovers(c.runDir, pids); len(l) != 0 {
		t.Fatalf("left after disconnect: %v", l)
	}
	if out := c.ok("list", "-o", "json"); !strings.Contains(out, `"Devices": []`) {
		t.Errorf("list after disconnect: %s", out)
	}

	// connect-all connects what discovery offers this host (the strict
	// subsystem is not offered), once.
	out = c.ok(append([]string{"connect-all", "--map", "none"}, base...)...)
	if strings.TrimSpace(out) != "nvmeof0" {
		t.Errorf("connect-all printed %q, want nvmeof0", out)
	}
	if out := c.ok(append([]string{"connect-all", "--map", "none"}, base...)...); strings.TrimSpace(out) != "" {
		t.Errorf("second connect-all printed %q, want nothing", out)
	}
	if devs := list(t, c); len(devs) != 1 || devs[0].SubsystemNQN != diskNQN {
		t.Errorf("list after connect-all: %+v", devs)
	}
	pids = daemonPIDs(c.runDir)
	c.ok("disconnect-all")
	if l := leftovers(c.runDir, pids); len(l) != 0 {
		t.Fatalf("left after disconnect-all: %v", l)
	}
}

// TestCLILoopDaemonKilled: a daemon killed with SIGKILL leaves a dead
// FUSE mount and a loop device; the next command cleans them up.
func TestCLILoopDaemonKilled(t *testing.T) {
	requireBlockdev(t)
	bin, _ := binaries(t)
	c := newCLI(t, bin)
	cfg := filepath.Join(t.TempDir(), "target.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(loopTargetHCL, 4420, otherHost, diskNQN, strictNQN, otherHost)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("connect", "-t", "loop", "-a", "127.0.0.1", "--target-config", cfg, "-n", diskNQN, "--map", "fuse")
	pids := daemonPIDs(c.runDir)
	if len(pids) != 1 {
		t.Fatalf("daemons: %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitFor(10*time.Second, func() bool { return !alive(pids[0]) }) {
		t.Fatal("daemon survived SIGKILL")
	}
	if out := c.ok("list", "-o", "json"); !strings.Contains(out, `"Devices": []`) {
		t.Errorf("list after the daemon died: %s", out)
	}
	if l := leftovers(c.runDir, pids); len(l) != 0 {
		t.Fatalf("left after a dead daemon's cleanup: %v", l)
	}
}

// softCMReady reports whether the soft RoCE provider has a connection
// manager (another part of the project may not be finished).
func softCMReady(t *testing.T) bool {
	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.0.250")})
	if err != nil {
		t.Logf("soft device: %v", err)
		return false
	}
	defer dev.Close()
	_, err = dev.ConnManager()
	if errors.Is(err, rdma.ErrNotSupported) {
		return false
	}
	return err == nil
}

const rdmaTargetHCL = `log_level = "info"

port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = %d
}

host %q {}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  serial         = "E2E0002"
  model          = "nvmeof-e2e-rdma"

  namespace "1" {
    backend    = "file"
    path       = %q
    size       = "256MiB"
    block_size = 512
  }
}

subsystem %q {
  ports          = ["p0"]
  allow_any_host = false
  allowed_hosts  = [%q]

  namespace "1" {
    backend = "memory"
    size    = "16MiB"
  }
}
`

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nvmetd is a running target daemon.
type nvmetd struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *syncBuffer
}

// startNvmetd starts nvmetd with cfg and waits until it listens.
func startNvmetd(t *testing.T, bin, cfg string) *nvmetd {
	t.Helper()
	d := &nvmetd{cmd: exec.Command(bin, "--config", cfg), done: make(chan struct{}), log: &syncBuffer{}}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	listening := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		once := sync.Once{}
		for {
			n, err := pr.Read(buf)
			d.log.Write(buf[:n])
			if strings.Contains(d.log.String(), "listening") {
				once.Do(func() { close(listening) })
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	select {
	case <-listening:
	case <-d.done:
		t.Fatalf("nvmetd exited:\n%s", d.log)
	case <-time.After(20 * time.Second):
		t.Fatalf("nvmetd not listening after 20 s:\n%s", d.log)
	}
	return d
}

// stop ends nvmetd by its PID (SIGTERM, then SIGKILL).
func (d *nvmetd) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// TestCLIRDMA drives the CLI against nvmetd over the soft RoCE provider on
// loopback.
func TestCLIRDMA(t *testing.T) {
	requireBlockdev(t)
	if !softCMReady(t) {
		t.Skip("the soft RoCE provider's connection manager is not available yet")
	}
	bin, tgt := binaries(t)
	c := newCLI(t, bin)
	dir := t.TempDir()
	// Addresses and port of their own: other tests may run soft RoCE
	// devices on 127.0.0.1 and 127.0.0.2 at the same time.
	const (
		tgtAddr  = "127.0.41.1"
		hostAddr = "127.0.41.2"
		svc      = 4431
	)
	cfg := filepath.Join(dir, "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(rdmaTargetHCL, tgtAddr, svc, otherHost, diskNQN, filepath.Join(dir, "disk0.img"), strictNQN, otherHost)), 0o644); err != nil {
		t.Fatal(err)
	}
	target := startNvmetd(t, tgt, cfg)
	base := []string{"-t", "rdma", "-a", tgtAddr, "-s", strconv.Itoa(svc), "-w", hostAddr, "--timeout", "15s"}

	// Discover without -w: the host address is picked (127.0.0.2, or
	// the next free one).
	out := c.ok("discover", "-t", "rdma", "-a", tgtAddr, "-s", strconv.Itoa(svc))
	for _, want := range []string{"trtype:  rdma", "subnqn:  " + diskNQN, "traddr:  " + tgtAddr, "rdma_cms:    rdma-cm"} {
		if !strings.Contains(out, want) {
			t.Errorf("discover output lacks %q:\n%s", want, out)
		}
	}
	c.fails(30*time.Second, "unknown subsystem", append([]string{"connect", "-n", "nqn.2026-11.io.nvmeof:nope"}, base...)...)
	c.fails(30*time.Second, "is not allowed to access subsystem", append([]string{"connect", "-n", strictNQN}, base...)...)
	// Nobody listens on 127.0.0.9: bounded by --timeout.
	c.fails(15*time.Second, "127.0.0.9", "connect", "-t", "rdma", "-a", "127.0.0.9", "-s", strconv.Itoa(svc), "-w", hostAddr, "-n", diskNQN, "--timeout", "3s")
	if l := leftovers(c.runDir, nil); len(l) != 0 {
		t.Fatalf("refused connects left %v", l)
	}

	out = c.ok(append([]string{"connect", "-n", diskNQN, "--map", "fuse"}, base...)...)
	lines := strings.Fields(out)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "/dev/loop") || lines[1] != "nvmeof0" {
		t.Fatalf("connect printed %q", out)
	}
	dev := lines[0]
	pids := daemonPIDs(c.runDir)
	devs := list(t, c)
	if len(devs) != 1 || devs[0].DevicePath != dev || devs[0].SerialNumber != "E2E0002" || devs[0].PhysicalSize != 256<<20 {
		t.Fatalf("list: %+v", devs)
	}
	filesystemRoundTrip(t, c, dev, "nvmeof0")
	c.ok("disconnect", "-n", diskNQN)
	if l := leftovers(c.runDir, pids); len(l) != 0 {
		t.Fatalf("left after disconnect: %v", l)
	}

	// The target dies during I/O: the I/O fails, the daemon gives up after
	// ctrl-loss-tmo and removes its device; nothing hangs.
	out = c.ok(append([]string{"connect", "-n", diskNQN, "--map", "fuse", "-k", "1", "-c", "1", "-l", "1"}, base...)...)
	dev = strings.Fields(out)[0]
	pids = daemonPIDs(c.runDir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dd := exec.CommandContext(ctx, "dd", "if=/dev/zero", "of="+dev, "bs=1M", "count=200", "oflag=direct")
	var ddErr bytes.Buffer
	dd.Stderr = &ddErr
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the target once dd's writes flow (its first 1 MiB written).
	if !waitFor(20*time.Second, func() bool { return procWritten(dd.Process.Pid) >= 1<<20 }) {
		t.Logf("dd wrote nothing within 20 s")
	}
	_ = target.cmd.Process.Kill()
	<-target.done
	start := time.Now()
	err := dd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("dd hung after the target died")
	}
	if err == nil {
		t.Logf("dd finished before the target died: %s", ddErr.String())
	} else {
		t.Logf("dd failed after %v as expected: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(ddErr.String()))
	}
	if !waitFor(45*time.Second, func() bool { return len(leftovers(c.runDir, pids)) == 0 }) {
		t.Fatalf("the lost controller's daemon left %v", leftovers(c.runDir, pids))
	}
	c.fails(15*time.Second, tgtAddr, append([]string{"connect", "-n", diskNQN, "--timeout", "3s"}, base[:len(base)-2]...)...)
}
