package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// ublkKernel is the guest kernel with ublk (6.0+; the 6.1 image has no
// ublk_drv with the ioctl-encoded opcodes checked).
const ublkKernel = "6.12"

// ublkNvmetdConfig exports namespace 1 (64 MiB, or 96 MiB grown in place
// with grow; 512-byte blocks) and, with ns2, namespace 2 (32 MiB,
// 4096-byte blocks) from files in dir.
func ublkNvmetdConfig(dir string, ns2, grow bool) string {
	ns1 := `size       = "64MiB"`
	if grow {
		ns1 = `size       = "96MiB"
    grow       = true`
	}
	cfg := fmt.Sprintf(`
log_level = "info"
port "kpeer" {
  transport = "rdma"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  serial         = "NVMEOFUBLK01"
  model          = "nvmeof-ublk"
  namespace "1" {
    backend    = "file"
    path       = %q
    %s
    block_size = 512
  }
`, kpeer.HostAddr, kpeerNQN, filepath.Join(dir, "ns1.img"), ns1)
	if ns2 {
		cfg += fmt.Sprintf(`  namespace "2" {
    backend    = "file"
    path       = %q
    size       = "32MiB"
    block_size = 4096
  }
`, filepath.Join(dir, "ns2.img"))
	}
	return cfg + "}\n"
}

// TestUblkInGuest: a static build of cmd/nvmeof in a 6.12 guest (its own
// soft RoCEv2, no kernel rxe) connects to nvmetd on the host side of the
// kernel-peer namespace and maps the namespace through the kernel's ublk
// driver (guest/ublk-host.sh): ext4 with checksums after a remount, a
// disconnect refused while mounted, write zeroes, fio verify, a namespace
// added by nvmetd's reload mapped and unmapped when a reload removes it,
// disconnect with nothing left. Then
// fio 4k random reads at QD1 and QD32 on the same namespace through ublk
// and through NBD, logged with their ratio (correctness is asserted, speed
// is not). Then namespace 1 grown by a reload while mapped through NBD
// and through ublk (two controllers): the NBD disk follows; the ublk disk
// follows on 6.16+, else keeps its size with a warning that says why.
// Last, a killed daemon's device cleaned up.
func TestUblkInGuest(t *testing.T) {
	dir := kpeer.RequireKernel(t, ublkKernel)
	s := newGuestShare(t)
	s.addStaticBinary(t, "./cmd/nvmeof", "nvmeof")
	work := t.TempDir()
	nvmetd := filepath.Join(work, "nvmetd")
	buildTagged(t, "./cmd/nvmetd", nvmetd, false)
	cfg := filepath.Join(work, "nvmetd.hcl")
	cfg2 := filepath.Join(work, "nvmetd-ns2.hcl")
	cfg3 := filepath.Join(work, "nvmetd-grown.hcl")
	if err := writeFile(cfg, ublkNvmetdConfig(work, false, false)); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(cfg2, ublkNvmetdConfig(work, true, false)); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(cfg3, ublkNvmetdConfig(work, false, true)); err != nil {
		t.Fatal(err)
	}
	// nvmetd; on the guest's add-ns signal the second namespace comes by a
	// configuration reload (SIGHUP), on del-ns it goes by another, on
	// grow-ns namespace 1 grows by a third; the guest polls for its disks
	// to appear, go and grow.
	host := filepath.Join(work, "nvmetd-host.sh")
	if err := writeFile(host, fmt.Sprintf(`#!/bin/bash
%s --config %s &
p=$!
trap 'kill -TERM $p; wait $p; exit' TERM INT
while [ ! -e "$KPEER_SIGNAL/add-ns" ]; do
  kill -0 $p 2>/dev/null || { echo "nvmetd exited"; exit 1; }
  sleep 0.2
done
cp %s %s.1 && cp %s %s && kill -HUP $p && echo "nvmetd: namespace 2 added" && touch "$KPEER_SIGNAL/ns-added"
while [ ! -e "$KPEER_SIGNAL/del-ns" ]; do
  kill -0 $p 2>/dev/null || { echo "nvmetd exited"; exit 1; }
  sleep 0.2
done
cp %s.1 %s && kill -HUP $p && echo "nvmetd: namespace 2 removed" && touch "$KPEER_SIGNAL/ns-deleted"
while [ ! -e "$KPEER_SIGNAL/grow-ns" ]; do
  kill -0 $p 2>/dev/null || { echo "nvmetd exited"; exit 1; }
  sleep 0.2
done
cp %s %s && kill -HUP $p && echo "nvmetd: namespace 1 grown" && touch "$KPEER_SIGNAL/ns-grown"
wait $p
`, nvmetd, cfg, cfg, cfg, cfg2, cfg, cfg, cfg, cfg3, cfg)); err != nil {
		t.Fatal(err)
	}
	res := kpeer.Do(t, dir, kpeer.Run{
		Kernel:  ublkKernel,
		Scripts: []string{s.script("ublk-host.sh")},
		HostCmd: "exec bash " + host,
		Env:     []string{"NQN=" + kpeerNQN, "TARGET_ADDR=" + kpeer.HostAddr, "FILE_MB=8", "FIO_VERIFY_MB=16", "PERF_S=8", "PERF_ROUNDS=2"},
		Share:   s.Dir,
		Timeout: 15 * time.Minute,
	})
	defer keepOnFailure(t, res, "")
	script := res.Log("a/script.log")
	t.Logf("guest checks:\n%s", passLines(script))
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", tail(script, 120))
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 60))
		t.Errorf("ublk guest failed: %v", res.Err)
	}
	for _, want := range []string{
		"PASS: sha256 after remount matches", "PASS: disconnect refused", "PASS: fio verify",
		"PASS: write zeroes reads back as zeroes", "PASS: namespace 2 mapped", "PASS: ublkc", "gone with the daemon",
		"deleted by the stale cleanup", "PASS: no ublk device left", "logical block size 4096", "--map auto chose ublk",
		"unmapped after the namespace was removed", "deleted after the namespace was removed",
		"PASS: no ublk warning in the daemon's log",
		"PASS: NBD disk grown", "PASS: ublk disk", "PASS: connect said: nvmeof0: --map auto chose ublk",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("guest log lacks %q", want)
		}
	}

	// PERF: <map> <job> <iops>, once per round.
	perf := map[string]map[string][]float64{}
	for _, l := range strings.Split(script, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "PERF:" {
			continue
		}
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			continue
		}
		if perf[f[2]] == nil {
			perf[f[2]] = map[string][]float64{}
		}
		perf[f[2]][f[1]] = append(perf[f[2]][f[1]], v)
	}
	for _, job := range []string{"randread-4k-qd1", "randread-4k-qd32"} {
		u, n := perf[job]["ublk"], perf[job]["nbd"]
		if len(u) == 0 || len(n) == 0 {
			t.Errorf("fio %s: ublk %v IOPS, nbd %v IOPS: a run is missing", job, u, n)
			continue
		}
		t.Logf("fio %s (TCG guest, 1 vCPU), IOPS per round: ublk %v, nbd %v; best ublk/nbd %.2f",
			job, u, n, slices.Max(u)/slices.Max(n))
	}
	if b, err := os.ReadFile(filepath.Join(res.Share, "out", "a", "dmesg.txt")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "ublk") || strings.Contains(l, "WARNING") || strings.Contains(l, "BUG") {
				t.Logf("dmesg: %s", l)
			}
		}
	}
}
