package fio

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// nvmetdBin is nvmetd built once for the package's tests (nvmetdBuild);
// TestMain removes its directory.
var (
	nvmetdOnce  sync.Once
	nvmetdBin   string
	nvmetdBuild string // the build's error output, "" when it worked
)

// nvmetdProc is an nvmetd a test started, with what it wrote to stderr.
type nvmetdProc struct {
	mu  sync.Mutex
	log strings.Builder
}

// Log returns what nvmetd wrote to stderr so far.
func (p *nvmetdProc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// memoryTargetHCL is an nvmetd configuration serving subsystem nqn, open
// to any host, with one memory namespace of size ("64MiB") and 512-byte
// blocks, on a soft RoCE port at addr:4420.
func memoryTargetHCL(addr, nqn, size string) string {
	return fmt.Sprintf(`
log_level = "info"
port "p1" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["p1"]
  allow_any_host = true
  namespace "1" {
    backend    = "memory"
    size       = %q
    block_size = 512
  }
}
`, addr, nqn, size)
}

// startNvmetd starts nvmetd on the HCL configuration hcl with args, waits
// until it serves its subsystems, and stops it when the test ends.
func startNvmetd(t *testing.T, hcl string, args ...string) *nvmetdProc {
	t.Helper()
	nvmetdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nvmetd-fio-test")
		if err != nil {
			nvmetdBuild = err.Error()
			return
		}
		nvmetdBin = filepath.Join(dir, "nvmetd")
		build := exec.Command("go", "build", "-o", nvmetdBin, "./cmd/nvmetd")
		build.Dir = repoRoot(t)
		if b, err := build.CombinedOutput(); err != nil {
			nvmetdBuild = err.Error() + "\n" + string(b)
		}
	})
	if nvmetdBuild != "" {
		t.Fatalf("go build ./cmd/nvmetd: %s", nvmetdBuild)
	}
	cfg := filepath.Join(t.TempDir(), "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, nvmetdBin, append([]string{"--config", cfg}, args...)...)
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	srv.WaitDelay = 10 * time.Second
	logs, err := srv.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = srv.Wait()
	})
	p := &nvmetdProc{}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(logs)
		sent := false
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if !sent && strings.Contains(sc.Text(), "serving subsystem") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("nvmetd exited:\n%s", p.Log())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nvmetd not serving after 60 s")
	}
	return p
}
