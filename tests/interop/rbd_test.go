package interop

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/cephtest"
	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// TestKernelHostAgainstRBD is TestKernelHostAgainstNvmetd with the
// namespace on a Ceph RBD image: the host command starts a throwaway
// cluster inside the kernel-peer network namespace (internal/cephtest's
// ceph-up.sh on that namespace's 127.0.0.1: a fresh namespace, so its fixed
// mon port is free), creates the image and execs nvmetd built with -tags
// rbd. The guest's kernel host runs kernel-host.sh (pattern write/read,
// fio crc32c verify); then rbd export, run in the daemons' network
// namespace (nsenter), must hold the guest's pattern, and the cluster is
// purged. Skips without the Ceph packages or librbd's headers.
func TestKernelHostAgainstRBD(t *testing.T) {
	dir := kpeer.Require(t)
	for _, c := range []string{"ceph-mon", "ceph-osd", "rbd", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed: %v", c, cephtest.ErrNoCeph)
		}
	}
	if _, err := os.Stat("/usr/include/rbd/librbd.h"); err != nil {
		t.Skip("librbd-dev not installed (nvmetd -tags rbd needs it)")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "nvmetd")
	build := exec.Command("go", "build", "-tags", "rbd", "-o", bin, "./cmd/nvmetd")
	build.Dir = moduleRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags rbd: %v\n%s", err, b)
	}
	cl := &cephtest.Cluster{Dir: filepath.Join(work, "ceph"), Conf: filepath.Join(work, "ceph", "ceph.conf"), Port: 40100}
	t.Cleanup(func() {
		if err := cl.Purge(); err != nil {
			t.Errorf("purge the cluster: %v", err)
		}
	})
	cfg := filepath.Join(work, "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
log_level = "info"
port "kpeer" {
  transport = "rdma"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["kpeer"]
  allow_any_host = true
  namespace "1" {
    backend   = "rbd"
    pool      = "rbd"
    image     = "kpeer"
    ceph_conf = %q
  }
}
`, kpeer.HostAddr, kpeerNQN, cl.Conf)), 0o644); err != nil {
		t.Fatal(err)
	}
	hostCmd := fmt.Sprintf("set -e; CEPH_DIR=%s CEPH_PORT=%d bash %s start; "+
		"rbd -c %s create --size 64M --image-feature layering rbd/kpeer; exec %s --config %s",
		cl.Dir, cl.Port, cephtest.Script(), cl.Conf, bin, cfg)
	res := kpeer.Do(t, dir, kpeer.Run{
		Scripts: []string{"kernel-host.sh"},
		HostCmd: hostCmd,
		// The cluster starts while the guest boots (10-40 s on a loaded
		// machine): discover for up to 3 minutes.
		Env:     []string{"NQN=" + kpeerNQN, "IO_MB=2", "FIO_MB=2", "DISCOVER_TRIES=60"},
		Timeout: 8 * time.Minute,
	})
	script := res.Log("a/script.log")
	if res.Err != nil || !strings.Contains(script, "RESULT: PASS") {
		t.Logf("guest script log:\n%s", script)
		t.Logf("host command log:\n%s", lastLines(res.Log("host-cmd.log"), 80))
		t.Fatalf("kernel host against an RBD namespace failed: %v", res.Err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "PASS:") {
			t.Log(line)
		}
	}
	// The daemons outlive the network namespace's name: reach the
	// cluster through the monitor's.
	pid, err := os.ReadFile(filepath.Join(cl.Dir, "run", "mon.a.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strconv.Atoi(strings.TrimSpace(string(pid))); err != nil {
		t.Fatalf("mon pid %q", pid)
	}
	exp := exec.Command("nsenter", "-t", strings.TrimSpace(string(pid)), "-n", "rbd", "-c", cl.Conf, "export", "--no-progress", "rbd/kpeer", "-")
	var stderr bytes.Buffer
	exp.Stderr = &stderr
	b, err := exp.Output()
	if err != nil {
		t.Fatalf("rbd export: %v: %s", err, stderr.String())
	}
	var want bytes.Buffer
	for i := 0; i < 2*2048; i++ {
		fmt.Fprintf(&want, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	if len(b) < want.Len() || !bytes.Equal(b[:want.Len()], want.Bytes()) {
		t.Fatalf("rbd export differs from the guest's pattern (sha256 %x, want %x)",
			sha256.Sum256(b[:min(len(b), want.Len())]), sha256.Sum256(want.Bytes()))
	}
}
