package interop

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// kpeerNQN is the subsystem kernel-peer's kernel-host.sh connects to.
const kpeerNQN = "nqn.2014-08.org.nvmexpress:kpeer-target"

// nvmetdConfig writes an nvmetd configuration exporting one file-backed
// namespace on the kernel-peer host address.
func nvmetdConfig(t *testing.T, dir, img string) string {
	t.Helper()
	cfg := fmt.Sprintf(`
log_level = "debug"
port "kpeer" {
  transport = "rdma"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  serial         = "NVMEOFKPEER1"
  model          = "nvmeof-interop"
  namespace "1" {
    backend    = "file"
    path       = %q
    size       = "64MiB"
    block_size = 512
  }
}
`, kpeer.HostAddr, kpeerNQN, img)
	path := filepath.Join(dir, "nvmetd.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestKernelHostAgainstNvmetd: the guest kernel's nvme-rdma host
// discovers and connects to nvmetd on the host side of the namespace, reads
// Identify, SMART and properties, writes a pattern with 64 KiB and 4 KiB
// direct I/O, reads it back, runs fio with crc32c verification and
// disconnects (kernel-peer's guest/kernel-host.sh). The namespace's backing
// file must then hold what the guest wrote.
func TestKernelHostAgainstNvmetd(t *testing.T) {
	dir := kpeer.Require(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	work := t.TempDir()
	img := filepath.Join(work, "ns1.img")
	cfg := nvmetdConfig(t, work, img)
	capture := filepath.Join(work, "nvmetd.pcapng")
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{"kernel-host.sh"},
		HostCmd: fmt.Sprintf("exec %s --config %s", bin, cfg),
		Env:     []string{"NQN=" + kpeerNQN, "IO_MB=2", "FIO_MB=2", "DISCOVER_TRIES=10"},
		Capture: capture,
		Timeout: 6 * time.Minute,
	})
	script := res.Log("a/script.log")
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", script)
		t.Logf("nvmetd log:\n%s", lastLines(res.Log("host-cmd.log"), 80))
		t.Fatalf("kernel host against nvmetd failed: %v", res.Err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "PASS:") {
			t.Log(line)
		}
	}
	// nvmetd reports ANA: the kernel reads the ANA log at connect and
	// complains in dmesg (and WARNs) when it cannot parse it.
	if m := kernelANAComplaint.FindString(script); m != "" {
		t.Fatalf("the kernel complained about nvmetd's ANA reporting: %q", m)
	}
	// kernel-host.sh writes its 2 MiB pattern at offset 0: every 512-byte
	// block is "kpeer-pattern blk %08d %0484d\n" with the block number.
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 0; i < 2*2048; i++ {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	if len(b) < want.Len() || !bytes.Equal(b[:want.Len()], want.Bytes()) {
		t.Fatalf("backing file differs from the guest's pattern (sha256 %x, want %x)",
			sha256.Sum256(b[:min(len(b), want.Len())]), sha256.Sum256(want.Bytes()))
	}
}

// kernelANAComplaint matches what Linux's nvme multipath logs when a
// controller's ANA reporting is wrong (nvme_mpath_init_identify,
// nvme_parse_ana_log's WARN_ON_ONCE, nvme_read_ana_log).
var kernelANAComplaint = regexp.MustCompile(`(?im)^.*(\bANA\b.*(invalid|larger than|disabling|failed|error)|WARNING: .*multipath).*$`)

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
