package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/nvme"
)

// Issue 22, item 3: how many controllers one host NQN can create in
// nvmetd, and what each costs nvmetd (its resident memory). The figures
// are in docs/target-limits.md. The measurement runs only with
// NVMEOF_MEASURE_CONTROLLERS=N (N controllers over N/16 host NQNs); the
// bound on one host runs always.
const (
	cmTgtAddr  = "127.0.80.1"
	cmHostAddr = "127.0.80.2"
	cmSvc      = 4480
	cmNQN      = "nqn.2026-11.io.nvmeof:ctrlmem"
)

// cmHostNQN is the i-th host NQN of this test.
func cmHostNQN(i int) string {
	return fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:c2000000-0000-4000-8000-%012x", i)
}

// rssKiB returns a process's resident set size.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func TestNvmetdControllersPerHost(t *testing.T) {
	_, tgt := binaries(t)
	cfg := filepath.Join(t.TempDir(), "nvmetd.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
port "p" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = %d
}
subsystem %q {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`, cmTgtAddr, cmSvc, cmNQN)), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := openSoftDevice(t, cmHostAddr)
	target := startNvmetd(t, tgt, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*softTimeout)
	defer cancel()
	d := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(cmTgtAddr), ServiceID: cmSvc}
	// connect opens an admin queue and creates a controller as host i.
	connect := func(i int) (fabrics.HostQueue, nvme.Status) {
		q, err := d.Dial(ctx, addr, fabrics.QueueParams{QID: 0, SQSize: 32, RQSize: 32})
		if err != nil {
			t.Fatalf("admin queue %d: %v", i, err)
		}
		t.Cleanup(func() { q.Close() })
		dd := fabrics.NewConnectData()
		id, _ := fabrics.UUIDFromNQN(cmHostNQN(i))
		dd.SetHostID(id)
		dd.SetCntlID(fabrics.CntlIDDynamic)
		_ = dd.SetSubNQN(cmNQN)
		_ = dd.SetHostNQN(cmHostNQN(i))
		cqe, err := runSQE(ctx, q, connectSQE(0, 32, 0), dd, fabrics.DirHostToCtrl)
		if err != nil {
			t.Fatalf("Connect %d: %v", i, err)
		}
		return q, cqe.Status()
	}
	// One host: 16 controllers, then Connect Controller Busy.
	n := 0
	for ; n < 1000; n++ {
		if _, st := connect(0); st != 0 {
			if st != fabrics.StatusConnectControllerBusy {
				t.Fatalf("controller %d of one host: %v, want Connect Controller Busy", n+1, st)
			}
			break
		}
	}
	t.Logf("one host NQN created %d controllers", n)
	if n != 16 {
		t.Fatalf("one host created %d controllers, want 16", n)
	}
	// nvmetd's output reaches target.log on its reader's goroutine.
	if !waitFor(5*time.Second, func() bool { return strings.Contains(target.log.String(), "the host has its most controllers") }) {
		t.Error("the refusal is not logged")
	}

	total, _ := strconv.Atoi(os.Getenv("NVMEOF_MEASURE_CONTROLLERS"))
	if total <= 0 {
		return
	}
	pid := target.cmd.Process.Pid
	before := rssKiB(t, pid)
	made := 0
	for h := 1; made < total; h++ {
		for j := 0; j < 16 && made < total; j++ {
			if _, st := connect(h); st != 0 {
				t.Logf("controller %d (host %d): %v", made+n+1, h, st)
				total = made
				break
			}
			made++
		}
	}
	after := rssKiB(t, pid)
	t.Logf("nvmetd RSS %d KiB with %d controllers, %d KiB with %d: %.1f KiB per controller",
		before, n, after, n+made, float64(after-before)/float64(made))
}
