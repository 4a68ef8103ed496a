package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Host identifiers of the two guests (each also its host NQN's UUID): the
// guests boot one image, so their /etc/nvme host IDs would be the same.
const (
	resvNQN     = "nqn.2026-11.io.nvmeof:kpeer-resv"
	resvHostIDA = "6b706565-7200-4000-8000-0000000000a1"
	resvHostIDB = "6b706565-7200-4000-8000-0000000000b2"
)

// TestKernelHostsReservations: two guest kernel hosts, each with its own
// host ID, share nvmetd's namespace 1 (resv_enable) and use nvme-cli's
// resv-* commands (guest/resv-host.sh): while one holds a Write Exclusive
// reservation the other's writes get Reservation Conflict and its reads
// succeed; release, preempt (with the Registration Preempted
// notification), clear and report behave as the NVMe specification says;
// Persist Through Power Loss turned on by a register (CPTPL) shows in the
// report, keeps the reservation over nvmetd killed and restarted
// (host/nvmetd-restart.sh), and shows in the reservation file.
func TestKernelHostsReservations(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	cfg := filepath.Join(work, "nvmetd.hcl")
	ptpl := filepath.Join(work, "ns1.resv")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
log_level = "debug"
port "kpeer" {
  transport = "rdma"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  namespace "1" {
    backend     = "file"
    path        = %q
    size        = "16MiB"
    resv_enable    = true
    resv_ptpl_file = %q
  }
}
`, kpeer.HostAddr, resvNQN, img, ptpl)), 0o644); err != nil {
		t.Fatal(err)
	}
	script := guestScript(t, "resv-host.sh")
	wrapper, err := filepath.Abs(filepath.Join("host", "nvmetd-restart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{script, script},
		// Guest b has nvmetd killed and restarted mid-way (PTPL).
		HostCmd: fmt.Sprintf("exec bash %s %s %s", wrapper, bin, cfg),
		Env:     []string{"NQN=" + resvNQN, "HOSTID_A=" + resvHostIDA, "HOSTID_B=" + resvHostIDB, "DISCOVER_TRIES=10"},
		Timeout: 8 * time.Minute,
	})
	t.Logf("session: %v", time.Since(start).Round(time.Second))
	failed := res.Err != nil
	for _, g := range []string{"a", "b"} {
		log := res.Log(g + "/script.log")
		for _, line := range strings.Split(log, "\n") {
			if strings.HasPrefix(line, "PASS:") || strings.HasPrefix(line, "FAIL:") {
				t.Log(line)
			}
		}
		if !strings.Contains(log, "RESULT: PASS") {
			failed = true
			t.Logf("guest %s script log:\n%s", g, log)
		}
	}
	if failed {
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 120))
		t.Fatalf("reservations between two kernel hosts: %v", res.Err)
	}
	// Host a turned Persist Through Power Loss on: the file holds the
	// state after b's clear (no registrants), PTPL still on.
	if b, err := os.ReadFile(ptpl); err != nil || !strings.Contains(string(b), `"ptpl": true`) || strings.Contains(string(b), "registrants") {
		t.Errorf("reservation file: %v\n%s", err, b)
	}
	// nvmetd saw both hosts by their own host IDs, and was restarted.
	host := res.Log("host-cmd.log")
	if !strings.Contains(host, "restart 1: nvmetd exit status") {
		t.Errorf("nvmetd was not restarted:\n%s", lastLines(host, 20))
	}
	for _, id := range []string{resvHostIDA, resvHostIDB} {
		if !strings.Contains(host, id) {
			t.Errorf("nvmetd log never names host %s", id)
		}
	}
}
