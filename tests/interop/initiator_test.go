package interop

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Our initiator against the Linux kernel's nvmet-rdma target (issue 5,
// kernel-peer part). guest/initiator-target.sh runs the target in guest a
// (192.0.2.2): subsystem kpeerNQN with a 64 MiB null_blk namespace whose
// first 2 MiB carry a pattern the guest wrote, and a subsystem only one
// host NQN may use.

// keepOnFailure copies a failed session's share (logs) and capture to a
// directory that outlives the test and logs where (every session's with
// NVMEOF_INTEROP_KEEP set).
func keepOnFailure(t *testing.T, res *kpeer.Result, capture string) {
	t.Helper()
	if !t.Failed() && os.Getenv("NVMEOF_INTEROP_KEEP") == "" {
		return
	}
	dir, err := os.MkdirTemp("", "kpeer-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	copyTree := func(src, dst string) {
		_ = filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || fi.Size() > 64<<20 {
				return nil
			}
			rel, _ := filepath.Rel(src, p)
			if strings.HasPrefix(rel, ".kpeer") || rel == "nvmeof" {
				return nil
			}
			return copyFile(p, filepath.Join(dst, rel))
		})
	}
	copyTree(filepath.Join(res.Share, "out"), filepath.Join(dir, "out"))
	if capture != "" {
		_ = copyFile(capture, filepath.Join(dir, filepath.Base(capture)))
	}
	t.Logf("session logs and capture kept in %s", dir)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// checkLines fails the test for every FAIL: line and logs the PASS: and
// INFO: lines of a log.
func checkLines(t *testing.T, who, log string) {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		switch {
		case strings.HasPrefix(l, "FAIL:"):
			t.Errorf("%s: %s", who, l)
		case strings.HasPrefix(l, "PASS:"), strings.HasPrefix(l, "INFO:"):
			t.Logf("%s: %s", who, l)
		}
	}
}

// TestInitiatorAgainstKernelTarget: tests/interop/cmd/kpeer-host, on the
// host side of the namespace (192.0.2.1, soft RoCEv2), against the guest's
// kernel target:
//
//   - discovery lists kpeerNQN on rdma 192.0.2.2:4420 (and the restricted
//     subsystem only to its allowed host);
//   - connect (admin + I/O queues), Identify (model kpeer-linux-nvmet,
//     serial kpeer0001, MDTS), namespace size and UUID, SMART log;
//   - the guest's pattern reads back;
//   - 4 KiB, 128 KiB, 1 MiB and 2 MiB+4 KiB, 4 MiB+512 verified writes and
//     reads, split into commands of at most MDTS (1 MiB on nvmet-rdma);
//   - Flush, a clean disconnect;
//   - unknown NQN, refused host, a port without listener and an
//     unreachable address fail in one line within a bound; the allowed host
//     connects; a later connect works;
//   - the same failures and a connect/list/disconnect through cmd/nvmeof
//     (exit status, one line on stderr, nothing left in `nvmeof list`),
//     and on that connection nvmeof list-subsys, get-log, error-log,
//     ns-descs, get-feature and reset (issue 13);
//   - the target sees no QP left and no keep-alive expiry afterwards.
func TestInitiatorAgainstKernelTarget(t *testing.T) {
	dir := kpeer.Require(t)
	host := buildBinary(t, "./tests/interop/cmd/kpeer-host")
	cli := buildBinary(t, "./cmd/nvmeof")
	capture := filepath.Join(t.TempDir(), "initiator-kernel-target.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts:  []string{guestScript(t, "initiator-target.sh")},
		HostTest: fmt.Sprintf("exec %s -cli %s -fault-timeout 15s", host, cli),
		Env:      []string{"NQN=" + kpeerNQN, "PATTERN_MB=2"},
		Capture:  capture,
		Timeout:  8 * time.Minute,
	})
	defer keepOnFailure(t, res, capture)
	hostLog, guest := res.Log("host-test.log"), res.Log("a/script.log")
	checkLines(t, "host", hostLog)
	checkLines(t, "guest", guest)
	if res.Err != nil {
		t.Errorf("session failed: %v\nhost:\n%s\nguest:\n%s", res.Err, tail(hostLog, 60), tail(guest, 60))
	}
	if !strings.Contains(hostLog, "RESULT: PASS") {
		t.Errorf("kpeer-host did not pass:\n%s", tail(hostLog, 60))
	}
	for _, want := range []string{"PASS: list-subsys: nvmeof0 rdma", "PASS: get-log SMART page", "PASS: error-log:",
		"PASS: ns-descs: uuid", "PASS: get-feature Keep Alive Timer", "PASS: reset: nvmeof0 live again"} {
		if !strings.Contains(hostLog, want) {
			t.Errorf("host log lacks %q (nvme-cli's commands through nvmeof)", want)
		}
	}
	for _, want := range []string{"PASS: pattern written", "PASS: no RC QP left on rxe0", "PASS: no keep-alive expiry", "PASS: target torn down"} {
		if !strings.Contains(guest, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}
}

// TestInitiatorNBDInGuest: a static build of cmd/nvmeof inside guest b
// (192.0.2.3, its own soft RoCEv2 device, no kernel rxe) connects to the
// kernel target of guest a and maps the namespace through the kernel's NBD
// (guest/nbd-host.sh): mkfs.ext4, mount, copy a file, sha256 after a
// remount, umount, disconnect, nothing left behind.
func TestInitiatorNBDInGuest(t *testing.T) {
	dir := kpeer.Require(t)
	cli := buildBinary(t, "./cmd/nvmeof")
	share := t.TempDir()
	if err := copyFile(cli, filepath.Join(share, "nvmeof")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(share, "nvmeof"), 0o755); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(t.TempDir(), "initiator-nbd.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{guestScript(t, "initiator-target.sh"), guestScript(t, "nbd-host.sh")},
		Env:     []string{"NQN=" + kpeerNQN, "PATTERN_MB=0", "FILE_MB=8"},
		Share:   share,
		Capture: capture,
		Timeout: 10 * time.Minute,
	})
	defer keepOnFailure(t, res, capture)
	guestA, guestB := res.Log("a/script.log"), res.Log("b/script.log")
	checkLines(t, "nbd guest", guestB)
	checkLines(t, "target guest", guestA)
	if res.Err != nil {
		t.Errorf("session failed: %v\nnbd guest:\n%s\ntarget guest:\n%s", res.Err, tail(guestB, 60), tail(guestA, 40))
	}
	if !strings.Contains(guestB, "RESULT: PASS") {
		t.Errorf("nbd-host.sh did not pass:\n%s", tail(guestB, 60))
	}
	for _, want := range []string{"PASS: sha256 after remount matches", "PASS: disconnect"} {
		if !strings.Contains(guestB, want) {
			t.Errorf("nbd guest log lacks %q", want)
		}
	}
	if !strings.Contains(guestA, "PASS: no RC QP left on rxe0") {
		t.Errorf("target guest log lacks the stale-state check")
	}
}
