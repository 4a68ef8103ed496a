package hostcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
	const small, big = 1 << 20, 4 << 20 // namespace 1 of e2eTargetHCL, then grown
	srv := startSoftTarget(t, addr, nqn)
	cli := runDirCLI(t, filepath.Join(t.TempDir(), "run"))
	code, out, errs := cli("connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", host,
		"-n", nqn, "-q", tHost, "--map", "fuse", "--timeout", "30s")
	if code != 0 {
		t.Fatalf("connect: exit %d: %s", code, errs)
	}
	t.Cleanup(func() { cli("disconnect", "-n", nqn) })
	dev, _, _ := strings.Cut(out, "\n") // namespace 1's
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

	grown := softTargetTree(t, addr, nqn)
	grown.Subsystems[0].Namespaces[0].Size = big
	if err := srv.Apply(grown); err != nil {
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
	_, out, _ = cli("list", "-o", "json")
	var list struct {
		Devices []struct {
			DevicePath   string
			PhysicalSize int64
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	found := false
	for _, d := range list.Devices {
		if d.DevicePath == dev {
			found = true
			if d.PhysicalSize != big {
				t.Errorf("list: %s has %d bytes, want %d", dev, d.PhysicalSize, big)
			}
		}
	}
	if !found {
		t.Errorf("list does not show %s:\n%s", dev, out)
	}
}
