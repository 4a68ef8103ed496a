package hostcli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestResizeFollows: a namespace resized on the target (a reload with a
// new size, as nvmetctl ns resize does) resizes the host's mapped block
// device in place, as the Linux host does on the Namespace Attribute
// Changed event, so that resize2fs works without a reconnect; list shows
// the new size too.
func TestResizeFollows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE and loop devices)")
	}
	for _, p := range []string{"/dev/fuse", "/dev/loop-control"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no %s", p)
		}
	}
	const nqn = "nqn.2026-12.io.nvmeof:e2e-resize"
	const addr, host = "127.61.11.1", "127.61.11.2"
	const small, big = 1 << 20, 4 << 20
	tree := func(size int) *configfs.Tree {
		hcl := fmt.Sprintf(`port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = %d
  }
}
`, addr, nqn, size)
		tr, err := configfs.ParseHCL([]byte(hcl), "resize.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	srv := server.New(server.Options{Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { srv.Close() })
	if err := srv.Apply(tree(small)); err != nil {
		t.Skipf("cannot serve on %s with the soft provider: %v", addr, err)
	}
	cli := runDirCLI(t, filepath.Join(t.TempDir(), "run"))
	code, out, errs := cli("connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", host,
		"-n", nqn, "-q", tHost, "--map", "fuse", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("connect: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { cli("disconnect", "-n", nqn) })
	dev, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(dev, "/dev/loop") {
		t.Fatalf("connect printed %q, want the loop device first", out)
	}
	devSize := func() int64 {
		t.Helper()
		f, err := os.Open(dev)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			t.Fatalf("BLKGETSIZE64 %s: %v", dev, err)
		}
		return int64(n)
	}
	if got := devSize(); got != small {
		t.Fatalf("%s: %d bytes after connect, want %d", dev, got, small)
	}

	if err := srv.Apply(tree(big)); err != nil {
		t.Fatalf("apply the grown namespace: %v", err)
	}
	// The event, the host's rescan and the resize run in the daemon; wait
	// for their result, bounded.
	deadline := time.Now().Add(20 * time.Second)
	for devSize() != big {
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d bytes 20 s after the namespace grew to %d", dev, devSize(), big)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var list struct {
		Devices []struct {
			DevicePath   string
			PhysicalSize int64
		}
	}
	if err := json.Unmarshal([]byte(mustOut(t, cli, "list", "-o", "json")), &list); err != nil || len(list.Devices) != 1 {
		t.Fatalf("list -o json: %v %+v", err, list)
	}
	if d := list.Devices[0]; d.DevicePath != dev || d.PhysicalSize != big {
		t.Errorf("list: %+v, want %s with %d bytes", d, dev, big)
	}
}

// mustOut runs the CLI and returns its stdout, failing the test on a
// non-zero exit.
func mustOut(t *testing.T, cli func(args ...string) (int, string, string), args ...string) string {
	t.Helper()
	code, out, errs := cli(args...)
	if code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
	}
	return out
}
