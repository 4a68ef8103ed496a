package interop

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestVerbsNvmetdKernelHost: nvmetd built with the ibverbs provider runs in
// guest a on its rxe0 (192.0.2.2, guest/nvmetd-guest.sh under
// host/nvmetd-restart.sh); the kernel's nvme-rdma host in guest b runs the
// whole checklist of guest/nvmetd-full.sh in one boot: discover, connect
// with defaults and with -i 2 -Q 64 -k 5, id-ctrl, id-ns, smart-log,
// get-log, fio crc32c verify (4k random, 128k sequential, 1M), ext4 with
// the namespace's sha256 equal to the backing file's, disconnect, host
// access control, and nvmetd SIGKILLed while connected with the kernel
// reconnecting and I/O resuming (SIGTERM under a connected host is
// TestKernelHostNvmetdRestart's, provider-independent). At the end no RC QP
// of nvmetd may be left and SIGTERM must stop it cleanly.
func TestVerbsNvmetdKernelHost(t *testing.T) {
	dir := kpeer.Require(t)
	s := newGuestShare(t)
	provider, rxe := "ibverbs", "1"
	if standIn() {
		s.addStaticBinary(t, "./cmd/nvmetd", "nvmetd")
		provider, rxe = "soft", "0"
	} else {
		s.addVerbsBinary(t, "./cmd/nvmetd", "nvmetd")
	}
	// The guest's /tmp is a tmpfs, which refuses O_DIRECT.
	const ns1, ns2 = "/tmp/ns1.img", "/tmp/ns2.img"
	cfg := s.writeConfig(t, "nvmetd.hcl", fullConfig(kpeer.GuestAAddr, provider, ns1, ns2, true))
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("nvmetd-guest.sh"), s.script("nvmetd-full.sh")},
		Env: append(fullEnv("discover admin fio ext4 hosts restart"),
			"NVMETD_CONFIG="+cfg, "NVMETD_RXE="+rxe,
			"HASH_FILES="+ns2, "COPY_FILES="+ns1+":24",
			"WAIT_READY_S=300", "FIO_MB=4", "RESTARTS=KILL"),
		SMP:     2, // -i 2 needs two CPUs in the host guest
		Share:   s.Dir,
		Timeout: 15 * time.Minute,
	})
	a, b, nvmetd := res.Log("a/script.log"), res.Log("b/script.log"), res.Log("a/nvmetd.log")
	t.Logf("session %s\nguest a (nvmetd, %s):\n%s\nguest b (kernel host):\n%s",
		time.Since(start).Round(time.Second), provider, passLines(a), passLines(b))
	if res.Err != nil || !strings.Contains(a, "RESULT: PASS") || !strings.Contains(b, "RESULT: PASS") {
		t.Logf("guest b (kernel host) log:\n%s", tail(b, 150))
		t.Logf("guest a (nvmetd) log:\n%s", tail(a, 60))
		t.Logf("nvmetd log (last 200 lines):\n%s", tail(nvmetd, 200))
		t.Fatalf("kernel host against nvmetd (%s) in a guest failed: %v", provider, res.Err)
	}
	if want := "restart 1: nvmetd exit status 137 (after SIGKILL)"; !strings.Contains(nvmetd, want) {
		t.Errorf("nvmetd log lacks %q:\n%s", want, tail(nvmetd, 60))
	}
	if provider == "ibverbs" && !strings.Contains(nvmetd, "rxe0") {
		t.Errorf("nvmetd does not log the RDMA device it uses (rxe0):\n%s", head(nvmetd, 30))
	}
	checkHashes(t, res, "a/ns2.img.sha256", "b/ns2.sha256")
	// What the guest wrote before and after each restart (see
	// TestKernelHostNvmetdRestart) is in namespace 1's backing file.
	img, err := os.ReadFile(filepath.Join(res.Share, "out", "a", "ns1.img"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		tag string
		off int
	}{{"before1", 8}, {"after1", 12}} {
		want := guestPattern(p.tag, 2)
		if len(img) < p.off<<20+len(want) {
			t.Fatalf("namespace 1 copy: %d bytes", len(img))
		}
		if got := img[p.off<<20 : p.off<<20+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("namespace 1 at %d MiB: not the guest's %q pattern (first block %q)", p.off, p.tag, got[:64])
		}
	}
}

// checkHashes compares two "sha256 size" files of a session's out/: what
// the target side hashed and what the host side read.
func checkHashes(t *testing.T, res *kpeer.Result, target, host string) {
	t.Helper()
	tf, hf := strings.Fields(res.Log(target)), strings.Fields(res.Log(host))
	if len(tf) != 2 || len(hf) != 2 {
		t.Fatalf("hashes: %s %q, %s %q", target, tf, host, hf)
	}
	if tf[0] != hf[0] || tf[1] != hf[1] {
		t.Fatalf("backing file (%s): sha256 %s, %s bytes; the host read (%s) %s, %s bytes", target, tf[0], tf[1], host, hf[0], hf[1])
	}
	t.Logf("backing file matches what the host read: sha256 %s (%s bytes)", tf[0], tf[1])
}

func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
