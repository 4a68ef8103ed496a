package interop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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

// RBD images of TestKernelHostRBDGateways: namespace 1 (pattern, fio,
// failover) and namespace 2 (ext4).
const (
	rbdImage1, rbdImage1Size = "kpeer", 64 << 20
	rbdImage2, rbdImage2Size = "kpeer-fs", 16 << 20
)

// TestKernelHostRBDGateways is TestKernelHostGateways with the namespaces on
// Ceph RBD images, in one guest boot: the host command starts a throwaway
// cluster inside the kernel-peer network namespace (internal/cephtest's
// ceph-up.sh on that namespace's 127.0.0.1: a fresh namespace, so its fixed
// mon port is free), creates two images without exclusive-lock and runs two
// gateways of nvmetd built with -tags rbd on them, active/active: namespace
// 1 in ANA group 1 (optimized on gateway 1), namespace 2 in group 2
// (optimized on gateway 2). The guest's kernel host (native multipath)
// checks each namespace's I/O goes to its group's gateway and nvme-cli's
// ana-log of each gateway, writes a pattern, runs fio crc32c verify while the
// gateway carrying the I/O is SIGKILLed and restarted, and makes an ext4
// file system on namespace 2 (mkfs, mount, checksums, fsck). Then rbd
// export, run in the daemons' network namespace (nsenter), must hold the
// guest's pattern (image 1) and the bytes the guest hashed (image 2), and
// the cluster is purged. Skips without the Ceph packages or librbd's
// headers.
func TestKernelHostRBDGateways(t *testing.T) {
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
	rbdNS := func(nsid int, image string) gwNamespace {
		return gwNamespace{nsid: nsid, backend: fmt.Sprintf("    backend   = \"rbd\"\n    pool      = \"rbd\"\n    image     = %q\n    ceph_conf = %q", image, cl.Conf)}
	}
	// Active/active, as ceph-nvmeof runs its gateways: namespace 2 is in
	// ANA group 2, which gateway 2 serves optimized.
	ns2 := rbdNS(2, rbdImage2)
	ns2.anaGroup2 = true
	writeGatewayConfigs(t, work, "rdma", []gwNamespace{rbdNS(1, rbdImage1), ns2}, gwANA)
	prelude := fmt.Sprintf("set -e; CEPH_DIR=%s CEPH_PORT=%d bash %s start; "+
		"rbd -c %s create --size %dM --image-feature layering rbd/%s; "+
		"rbd -c %s create --size %dM --image-feature layering rbd/%s; rbd -c %s info rbd/%s; set +e",
		cl.Dir, cl.Port, cephtest.Script(), cl.Conf, rbdImage1Size>>20, rbdImage1, cl.Conf, rbdImage2Size>>20, rbdImage2, cl.Conf, rbdImage1)
	// The cluster starts while the guest boots (10-40 s on a loaded
	// machine): the guest discovers for up to 3 minutes (DISCOVER_TRIES).
	res := runGateways(t, dir, bin, work, prelude, 15*time.Minute, "FS_NSID=2", "ANA2_NSID=2")
	if info := res.Log("host-cmd.log"); strings.Contains(info, "exclusive-lock") {
		t.Errorf("an image has exclusive-lock:\n%s", lastLines(info, 40))
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
	export := func(image string) []byte {
		t.Helper()
		exp := exec.Command("nsenter", "-t", strings.TrimSpace(string(pid)), "-n", "rbd", "-c", cl.Conf, "export", "--no-progress", "rbd/"+image, "-")
		var stderr bytes.Buffer
		exp.Stderr = &stderr
		b, err := exp.Output()
		if err != nil {
			t.Fatalf("rbd export %s: %v: %s", image, err, stderr.String())
		}
		return b
	}
	checkPattern(t, "rbd export of "+rbdImage1, export(rbdImage1))

	// The guest hashed the whole of namespace 2 after umount and fsck.
	f, err := os.ReadFile(filepath.Join(res.Share, "out", "a", "fs.sha256"))
	if err != nil {
		t.Fatalf("guest's sha256 of namespace 2: %v", err)
	}
	fields := strings.Fields(string(f))
	b := export(rbdImage2)
	sum := sha256.Sum256(b)
	if len(fields) != 2 || fields[0] != hex.EncodeToString(sum[:]) || fields[1] != strconv.Itoa(len(b)) {
		t.Errorf("rbd export of %s: sha256 %x, %d bytes; the guest read %q", rbdImage2, sum, len(b), f)
	} else {
		t.Logf("rbd export of %s (ext4) matches the guest's block device: sha256 %x (%d bytes)", rbdImage2, sum, len(b))
	}
}
