package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests run nvmetd as a child process: the test binary itself, which
// runs main's run when this variable is set.
const childEnv = "NVMETD_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(append([]string{"nvmetd"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	// The children must not take the default control socket (a running
	// nvmetd's, or another test's): tests that want one give a path.
	if os.Getenv("NVMETD_CONTROL_SOCKET") == "" {
		os.Setenv("NVMETD_CONTROL_SOCKET", "none")
	}
	os.Exit(m.Run())
}

// nvmetd returns the command for nvmetd with args in directory dir, killed
// after timeout.
func nvmetd(t *testing.T, ctx context.Context, dir string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Dir = dir
	return cmd
}

// runNvmetd runs nvmetd to completion (at most 20 s) and returns its exit
// status and output.
func runNvmetd(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := nvmetd(t, ctx, dir, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("nvmetd %q did not exit (it serves?); stderr:\n%s", args, stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// TestArgs: nvmetd takes no positional arguments; mistakes on the command
// line exit with status 2 and suggest the flag meant, instead of serving
// the embedded default.
func TestArgs(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"extra-arg", "--check"}, 2, `unexpected argument "extra-arg"`},
		{[]string{"chec", "--config", "x.hcl"}, 2, `unexpected argument "chec": nvmetd takes only flags (did you mean --check?)`},
		{[]string{"--chek"}, 2, "(did you mean --check?)"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--config"}, 2, "flag needs an argument"},
		{[]string{"--config", "missing.hcl", "--check"}, 1, "no such file"},
		{[]string{"--print-default"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			status, _, stderr := runNvmetd(t, dir, tt.args...)
			if status != tt.status || !strings.Contains(stderr, tt.want) {
				t.Errorf("status %d, want %d; stderr %q, want it to contain %q", status, tt.status, stderr, tt.want)
			}
		})
	}
}

func TestClosestWord(t *testing.T) {
	ws := []string{"--config", "--check", "--log-level", "--log-json", "--print-default", "--pcap", "--poll"}
	for _, tt := range []struct{ in, want string }{
		{"chec", "--check"}, {"-chekc", "--check"}, {"config", "--config"}, {"confg", "--config"},
		{"loglevel", "--log-level"}, {"extra-arg", ""}, {"x", ""}, {"serve", ""},
	} {
		if got := closestWord(tt.in, ws); got != tt.want {
			t.Errorf("closestWord(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// takeUDP4791 binds the RoCEv2 UDP port on addr, as a running nvmetd's
// soft device does, until the test ends.
func takeUDP4791(t *testing.T, addr string) {
	t.Helper()
	c, err := net.ListenPacket("udp", net.JoinHostPort(addr, "4791"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckAsStart: --check refuses what start refuses, each error at
// FILE:LINE:COL; it used to say OK for all of these. A configuration that
// can start passes and nothing is created.
func TestCheckAsStart(t *testing.T) {
	dir := t.TempDir()
	takeUDP4791(t, "127.79.1.2")
	bad := `port "taken" {
  address  = "127.79.1.2"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:c" {
  ports          = ["taken"]
  allow_any_host = true
  namespace "1" {
    path = "notadir/sub/disk.img"
    size = "1MiB"
  }
  namespace "2" {
    path = "."
  }
  namespace "3" {
    backend = "file"
    path    = "/dev/zero"
  }
  namespace "4" {
    backend = "memory"
    size    = "1000000TiB"
  }
}
`
	writeFile(t, filepath.Join(dir, "bad.hcl"), bad)
	writeFile(t, filepath.Join(dir, "notadir"), "a file where a directory should be")
	status, stdout, stderr := runNvmetd(t, "/", "--check", "--config", filepath.Join(dir, "bad.hcl"))
	if status != 1 || strings.Contains(stdout, "OK") {
		t.Errorf("--check: status %d, stdout %q", status, stdout)
	}
	f := filepath.Join(dir, "bad.hcl")
	for _, w := range []string{
		f + ":2:14: ports/taken: address: ",
		f + ":9:12: subsystems/nqn.2026-11.io.nvmeof:c/namespaces/1: path: bdev: file: stat " + filepath.Join(dir, "notadir/sub/disk.img") + ": not a directory",
		f + ":13:12: subsystems/nqn.2026-11.io.nvmeof:c/namespaces/2: path: bdev: file \"" + dir + "\" is a directory",
		f + ":17:15: subsystems/nqn.2026-11.io.nvmeof:c/namespaces/3: path: bdev: file \"/dev/zero\" is not a regular file",
		f + ":21:15: subsystems/nqn.2026-11.io.nvmeof:c/namespaces/4: size: bdev: memory: size 1099511627776000000 bytes (976.6PiB) is more than the machine's memory",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("--check stderr lacks %q:\n%s", w, stderr)
		}
	}

	good := `port "p" {
  address  = "127.79.1.3"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:c" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    path = "disk.img"
    size = "1MiB"
  }
  namespace "2" {
    path = "state/dir/disk.img"
    size = "1MiB"
  }
}
`
	writeFile(t, filepath.Join(dir, "good.hcl"), good)
	status, stdout, stderr = runNvmetd(t, "/", "--check", "--config", filepath.Join(dir, "good.hcl"))
	if status != 0 || !strings.Contains(stdout, "configuration OK: 1 ports, 1 subsystems") {
		t.Errorf("--check of a good configuration: status %d, stdout %q, stderr %q", status, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "disk.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--check created the backend file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--check created the backend's directory: %v", err)
	}
}

// TestStartRefusesOversizedMemory: a memory namespace of 1000000 TiB used to
// kill the daemon at start; now it exits 1 with the position.
func TestStartRefusesOversizedMemory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big.hcl"), `port "p" {
  address  = "127.79.1.4"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:c" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1000000TiB"
  }
}
`)
	status, _, stderr := runNvmetd(t, dir, "--config", "big.hcl")
	if want := "big.hcl:10:15: subsystems/nqn.2026-11.io.nvmeof:c/namespaces/1: size: bdev: memory: size"; status != 1 || !strings.Contains(stderr, want) {
		t.Errorf("status %d, want 1; stderr lacks %q:\n%s", status, want, stderr)
	}
}

// daemon is a running nvmetd whose log lines the test reads.
type daemon struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	seen  []string
}

func startDaemon(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := nvmetd(t, ctx, dir, args...)
	r, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{t: t, cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range d.lines {
		}
		cmd.Wait()
	})
	return d
}

// waitFor returns the first log line from now on containing s, and fails
// the test if none comes within 20 s or the daemon exits.
func (d *daemon) waitFor(s string) string {
	d.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				d.t.Fatalf("nvmetd exited before logging %q; log:\n%s", s, strings.Join(d.seen, "\n"))
			}
			d.seen = append(d.seen, l)
			if strings.Contains(l, s) {
				return l
			}
		case <-timeout:
			d.t.Fatalf("no log line %q within 20 s; log:\n%s", s, strings.Join(d.seen, "\n"))
		}
	}
}

// TestRelativePathsAndReload: a relative backend path is the configuration
// file's directory's, not the working directory's; a SIGHUP reload that
// cannot apply in full changes nothing and says where it failed; a good
// one applies.
func TestRelativePathsAndReload(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(etc, "n.hcl")
	base := `port "p" {
  address  = "127.79.1.5"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:r" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    path = "disk.img"
    size = "1MiB"
  }
`
	writeFile(t, cfg, base+"}\n")
	d := startDaemon(t, dir, "--config", "etc/n.hcl")
	d.waitFor("serving subsystem")
	if _, err := os.Stat(filepath.Join(etc, "disk.img")); err != nil {
		t.Errorf("backend not beside the configuration: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "disk.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("backend in the working directory: %v", err)
	}

	// Namespace 2 would open, 3 would not: neither is added.
	writeFile(t, cfg, base+`  namespace "2" {
    backend = "memory"
    size    = "1MiB"
  }
  namespace "3" {
    path = "disk.img/disk3.img"
    size = "1MiB"
  }
}
`)
	d.cmd.Process.Signal(syscall.SIGHUP)
	l := d.waitFor("reload")
	if !strings.Contains(l, "reload refused: nothing applied") {
		t.Errorf("reload log: %s", l)
	}
	if want := "etc/n.hcl:17:12: subsystems/nqn.2026-11.io.nvmeof:r/namespaces/3: path: "; !strings.Contains(l, want) {
		t.Errorf("reload error %q lacks %q", l, want)
	}

	writeFile(t, cfg, base+`  namespace "2" {
    backend = "memory"
    size    = "1MiB"
  }
}
`)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitFor("configuration reloaded")
	for _, l := range d.seen {
		if strings.Contains(l, "namespace added") && strings.Contains(l, "nsid=3") {
			t.Errorf("namespace 3 was added: %s", l)
		}
	}
	added := 0
	for _, l := range d.seen {
		if strings.Contains(l, "namespace added") && strings.Contains(l, "nsid=2") {
			added++
		}
	}
	if added != 1 {
		t.Errorf("namespace 2 added %d times, want once (by the second reload)", added)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.waitFor("shutting down")
}

func TestDefaultAnnouncement(t *testing.T) {
	got := defaultAnnouncement([]string{"127.0.0.1:4420"})
	if want := "serving the embedded default configuration: open to any host, on loopback only (127.0.0.1:4420)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
