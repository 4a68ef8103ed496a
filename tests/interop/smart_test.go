package interop

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// QEMU's emulated SATA disk (hw/ide/core.c smart_attributes): attribute 9
// power-on hours raw 1, attribute 190 airflow temperature raw 1f 00 1f 1f
// (31 °C, min/max 31), no power cycles. The emulated NVMe controller
// (hw/nvme) reports its temperature (323 K by default) and the hours since
// it started; guest/smart.sh reads those directly to compare.
const (
	qemuSATATempK = 273 + 31
	qemuSATAHours = 1
)

const smartNQN = "nqn.2026-12.io.nvmeof:smart"

// TestSMARTEmulatedDisks: in one guest, QEMU attaches an NVMe drive and an
// AHCI SATA drive; nvmetd (ibverbs, rxe0) exports them as block namespaces
// 1 and 2 beside a memory namespace 3; the guest's own kernel host connects
// over rxe loopback and `nvme smart-log -n N` must show, for namespace 1,
// what `nvme smart-log` of the emulated controller shows directly
// (temperature, power-on hours, power cycles, spare, wear, warnings) and,
// for namespace 2, QEMU's SATA SMART values (31 °C, 1 power-on hour) read
// through ATA pass-through. Namespace 3 (no disk) must report the target's
// own values, which differ from both: the disks' values are not defaults.
// In the same boot, target/bdev's TestReadHealthDisks reads the two disks
// and a partition of the SATA disk directly (SMART RETURN STATUS and
// thresholds through libata's SAT layer, partition -> whole disk).
func TestSMARTEmulatedDisks(t *testing.T) {
	dir := kpeer.Require(t)
	if standIn() {
		t.Skip("needs nvmetd with the ibverbs provider (rxe is the only RDMA device the kernel host can use in one guest)")
	}
	tmp := t.TempDir()
	nv, sata := filepath.Join(tmp, "nv.img"), filepath.Join(tmp, "sata.img")
	for _, p := range []string{nv, sata} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 64<<20); err != nil {
			t.Fatal(err)
		}
	}
	// An MBR with one partition (sectors 2048-34815) on the SATA disk, so
	// the guest has a partition to read health through (the image has no
	// sfdisk).
	mbr := make([]byte, 512)
	e := mbr[446:]
	e[4] = 0x83 // Linux
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], 32768)
	mbr[510], mbr[511] = 0x55, 0xaa
	if f, err := os.OpenFile(sata, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else if _, err := f.WriteAt(mbr, 0); err != nil || f.Close() != nil {
		t.Fatalf("partition table: %v", err)
	}
	qemuArgs := "KPEER_QEMU_ARGS=" + fmt.Sprintf("-drive file=%s,if=none,id=nv0,format=raw "+
		"-device nvme,serial=kpeer0001,drive=nv0 -drive file=%s,if=none,id=sd0,format=raw "+
		"-device ahci,id=ahci0 -device ide-hd,drive=sd0,bus=ahci0.0", nv, sata)
	s := newGuestShare(t)
	s.addVerbsBinary(t, "./cmd/nvmetd", "nvmetd")
	addTestBinary(t, s, "./target/bdev", "bdev.test")
	cfg := s.writeConfig(t, "smart.hcl", fmt.Sprintf(`
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
    backend = "block"
    path    = "@NVME@"
  }
  namespace "2" {
    backend = "block"
    path    = "@SATA@"
  }
  namespace "3" {
    backend = "memory"
    size    = "16MiB"
  }
}
`, kpeer.GuestAAddr, smartNQN))
	start := time.Now()
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{s.script("smart.sh")},
		Env:     []string{"NVMETD_CONFIG=" + cfg, "NQN=" + smartNQN},
		HostEnv: []string{qemuArgs},
		Share:   s.Dir,
		Timeout: 8 * time.Minute,
	})
	log := res.Log("a/script.log")
	t.Logf("session %s\n%s", time.Since(start).Round(time.Second), passLines(log))
	if res.Err != nil || !strings.Contains(log, "RESULT: PASS") {
		t.Logf("guest log:\n%s", tail(log, 120))
		t.Logf("nvmetd log:\n%s", tail(res.Log("a/nvmetd.log"), 80))
		t.Fatalf("SMART session failed: %v", res.Err)
	}
	direct := smartLog(t, res, "a/direct-nvme.json")
	ns1, ns2, ns3 := smartLog(t, res, "a/ns1.json"), smartLog(t, res, "a/ns2.json"), smartLog(t, res, "a/ns3.json")
	t.Logf("direct NVMe: %v\nns1 (NVMe): %v\nns2 (SATA): %v\nns3 (memory): %v", direct, ns1, ns2, ns3)

	if !strings.Contains(log, "PASS: bdev TestReadHealthDisks") {
		t.Errorf("target/bdev's TestReadHealthDisks did not pass in the guest:\n%s", res.Log("a/bdev-test.log"))
	}
	for _, k := range []string{"critical_warning", "temperature", "avail_spare", "spare_thresh", "percent_used",
		"power_cycles", "power_on_hours", "unsafe_shutdowns"} {
		if ns1[k] != direct[k] {
			t.Errorf("namespace 1 (QEMU NVMe): %s = %d through nvmetd, %d read directly", k, ns1[k], direct[k])
		}
	}
	for k, want := range map[string]uint64{"temperature": qemuSATATempK, "power_on_hours": qemuSATAHours,
		"power_cycles": 0, "critical_warning": 0, "media_errors": 0} {
		if ns2[k] != want {
			t.Errorf("namespace 2 (QEMU SATA): %s = %d, want QEMU's %d", k, ns2[k], want)
		}
	}
	for _, k := range []string{"temperature", "power_cycles"} {
		if ns3[k] == ns1[k] || ns3[k] == ns2[k] {
			t.Errorf("%s: the memory namespace reports %d like a disk (NVMe %d, SATA %d): disk values look like the target's defaults",
				k, ns3[k], ns1[k], ns2[k])
		}
	}
}

// addTestBinary builds the test binary of pkg (static) into the share's
// bin/NAME, for a guest script to run some of its tests on the guest's
// devices.
func addTestBinary(t *testing.T, s *guestShare, pkg, name string) {
	t.Helper()
	cmd := exec.Command("go", "test", "-c", "-o", filepath.Join(s.Dir, "bin", name), pkg)
	cmd.Dir = moduleRoot(t)
	if src := os.Getenv("NVMEOF_INTEROP_SRC"); src != "" {
		cmd.Dir = src
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", pkg, err, b)
	}
}

// smartLog reads `nvme smart-log -o json` output into its integer fields
// (nvme-cli prints 128-bit counters as numbers, some versions as strings).
func smartLog(t *testing.T, res *kpeer.Result, name string) map[string]uint64 {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.Log(name)), &raw); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, res.Log(name))
	}
	out := map[string]uint64{}
	for k, v := range raw {
		if n, err := strconv.ParseUint(strings.Trim(string(v), `"`), 10, 64); err == nil {
			out[k] = n
		}
	}
	for _, k := range []string{"temperature", "power_on_hours", "power_cycles"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("%s has no %q: %s", name, k, res.Log(name))
		}
	}
	return out
}
