package interop

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// Our initiator against two nvmetd gateways (issue 14's done-when, our
// host on the host side): two nvmetd processes over the soft RoCE
// provider on distinct loopback addresses export one subsystem NQN over
// one shared file, with disjoint cntlid ranges, gateway 1's ANA group
// optimized and gateway 2's non-optimized. No guest: everything runs on
// this machine's loopback.

const mpGwNQN = "nqn.2026-12.io.nvmeof:gateways"

// mpGwHCL is one gateway's configuration: address, ANA state of group 1,
// cntlid range, the shared file.
const mpGwHCL = `log_level = "info"
port "gw" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
  ana_group "1" { state = %q }
}

subsystem %q {
  ports          = ["gw"]
  allow_any_host = true
  serial         = "GW0001"
  cntlid_min     = %d
  cntlid_max     = %d
  namespace "1" {
    backend   = "file"
    path      = %q
    size      = "16MiB"
    uuid      = "3d0b8c8e-4f0a-4e61-9b1c-2a7e5f6d8c91"
    nguid     = "3d0b8c8e4f0a4e619b1c2a7e5f6d8c91"
    ana_grpid = 1
  }
}
`

// mpGateway is one nvmetd process.
type mpGateway struct {
	t      *testing.T
	bin    string
	dir    string
	addr   string
	cmin   int
	file   string
	state  string
	cmd    *exec.Cmd
	exited chan struct{}
}

func (g *mpGateway) config() string {
	p := filepath.Join(g.dir, "gw-"+g.addr+".hcl")
	hcl := fmt.Sprintf(mpGwHCL, g.addr, g.state, mpGwNQN, g.cmin, g.cmin+999, g.file)
	if err := os.WriteFile(p, []byte(hcl), 0o600); err != nil {
		g.t.Fatal(err)
	}
	return p
}

// start runs the gateway's nvmetd.
func (g *mpGateway) start() {
	g.t.Helper()
	log, err := os.OpenFile(filepath.Join(g.dir, "nvmetd-"+g.addr+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		g.t.Fatal(err)
	}
	g.cmd = exec.Command(g.bin, "--config", g.config())
	g.cmd.Stdout, g.cmd.Stderr = log, log
	if err := g.cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}(g.cmd, g.exited)
}

// kill SIGKILLs the gateway and waits for it to be gone.
func (g *mpGateway) kill() {
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.exited
	g.cmd = nil
}

// reload rewrites the configuration with group 1 in state s and sends
// SIGHUP.
func (g *mpGateway) reload(s string) {
	g.state = s
	g.config()
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		g.t.Fatal(err)
	}
}

func (g *mpGateway) logTail() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "nvmetd-"+g.addr+".log"))
	return lastLines(string(b), 40)
}

// mpIOCount returns the Reads and Writes controller c completed.
func mpIOCount(c *initiator.Controller) uint64 {
	var n uint64
	for _, ns := range c.Stats().Namespaces {
		for _, op := range ns.Ops {
			if op.Opcode == nvme.IORead || op.Opcode == nvme.IOWrite {
				n += op.Commands
			}
		}
	}
	return n
}

// needTargetANA fails the test early, with the parser's message, when the
// gateways' ANA configuration (ana_group, ana_grpid) does not parse.
func needTargetANA(t *testing.T) {
	t.Helper()
	hcl := fmt.Sprintf(mpGwHCL, "127.0.0.1", "optimized", mpGwNQN, 1, 1000, "/nonexistent")
	if _, err := configfs.ParseHCL([]byte(hcl), "ana-probe.hcl"); err != nil {
		t.Fatalf("the gateways' ANA configuration: %v", err)
	}
}

// mpEventually polls cond (the gateways are other processes) until it holds
// or d passes.
func mpEventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mpVerifier runs verified writes and reads, each goroutine on its own
// part of the namespace, until stopped.
type mpVerifier struct {
	ns        *initiator.MultipathNamespace
	ops, errs atomic.Uint64
	stop      atomic.Bool
	wg        sync.WaitGroup
	mu        sync.Mutex
	first     error
}

func (v *mpVerifier) run(workers int, region int64) {
	part := region / int64(workers) &^ 4095
	for i := 0; i < workers; i++ {
		v.wg.Add(1)
		go func(base int64) {
			defer v.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(base), 3))
			w := make([]byte, 32<<10)
			r := make([]byte, 32<<10)
			for seq := byte(1); !v.stop.Load(); seq++ {
				n := int64(4096 << rng.IntN(4))
				off := base + rng.Int64N((part-n)/4096+1)*4096
				for j := range w[:n] {
					w[j] = seq ^ byte(j) ^ byte(off>>12)
				}
				_, err := v.ns.WriteAt(w[:n], off)
				if err == nil {
					_, err = v.ns.ReadAt(r[:n], off)
				}
				if err == nil && !bytes.Equal(r[:n], w[:n]) {
					err = fmt.Errorf("data mismatch: %d bytes at %d", n, off)
				}
				if err != nil {
					v.errs.Add(1)
					v.mu.Lock()
					if v.first == nil {
						v.first = err
					}
					v.mu.Unlock()
					continue
				}
				v.ops.Add(1)
			}
		}(int64(i) * part)
	}
}

func (v *mpVerifier) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := v.errs.Load(); n > 0 {
		t.Fatalf("%d verified I/O errors, the first: %v", n, v.first)
	}
}

// carries reports whether c took nearly all of the I/O of a window of 50
// verified operations (the other path at most a few failed-over tries).
func (v *mpVerifier) carries(t *testing.T, c, other *initiator.Controller) bool {
	t.Helper()
	a0, b0, start := mpIOCount(c), mpIOCount(other), v.ops.Load()
	mpEventually(t, "I/O progressing", 30*time.Second, func() bool { return v.ops.Load() >= start+50 })
	da, db := mpIOCount(c)-a0, mpIOCount(other)-b0
	return da > 0 && db*10 <= da
}

// TestInitiatorTwoGateways: verified I/O through our initiator's
// multipath while the optimized nvmetd gateway is SIGKILLed (no I/O
// error; the I/O goes on through the other gateway), the path back when
// the gateway restarts, and ANA changes by reload (SIGHUP) moving the I/O.
func TestInitiatorTwoGateways(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the soft RoCE provider's raw socket)")
	}
	needTargetANA(t)
	bin := buildBinary(t, "./cmd/nvmetd")
	dir := t.TempDir()
	file := filepath.Join(dir, "shared.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 16<<20); err != nil {
		t.Fatal(err)
	}
	g1 := &mpGateway{t: t, bin: bin, dir: dir, addr: "127.71.9.1", cmin: 1, file: file, state: "optimized"}
	g2 := &mpGateway{t: t, bin: bin, dir: dir, addr: "127.71.9.3", cmin: 1001, file: file, state: "non-optimized"}
	for _, g := range []*mpGateway{g1, g2} {
		g.start()
		t.Cleanup(g.kill)
	}
	defer func() {
		if t.Failed() {
			t.Logf("gateway 1 log:\n%s\ngateway 2 log:\n%s", g1.logTail(), g2.logTail())
		}
	}()

	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.71.9.2")})
	if err != nil {
		t.Skipf("soft RoCE device on 127.71.9.2: %v", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	dialer := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev})
	opts := initiator.Options{SubsystemNQN: mpGwNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000d1",
		QueueSize: 32, NrIOQueues: 2, ReconnectDelay: 200 * time.Millisecond, CtrlLossTimeout: 60 * time.Second,
		CommandTimeout: 10 * time.Second}
	connect := func(g *mpGateway) *initiator.Controller {
		t.Helper()
		var c *initiator.Controller
		// The gateway is another process: try until it listens.
		mpEventually(t, "connect to "+g.addr, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			c, err = initiator.Connect(ctx, dialer, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(g.addr), ServiceID: 4420}, opts)
			return err == nil
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c1, c2 := connect(g1), connect(g2)
	if c1.CntlID() > 1000 || c2.CntlID() < 1001 {
		t.Fatalf("cntlids %d and %d: want the gateways' disjoint ranges", c1.CntlID(), c2.CntlID())
	}
	m := initiator.NewMultipath(mpGwNQN, initiator.MultipathOptions{})
	for _, c := range []*initiator.Controller{c1, c2} {
		if err := m.AddPath(c); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := m.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	states := func() (nvme.ANAState, nvme.ANAState) {
		pi := ns.Paths()
		return pi[0].ANAState, pi[1].ANAState
	}
	if a, b := states(); a != nvme.ANAOptimized || b != nvme.ANANonOptimized {
		t.Fatalf("ANA states %v, %v: want optimized, non-optimized", a, b)
	}

	v := &mpVerifier{ns: ns}
	v.run(2, 8<<20)
	defer func() {
		v.stop.Store(true)
		v.wg.Wait()
	}()
	if !v.carries(t, c1, c2) {
		t.Fatal("I/O not on the optimized gateway")
	}

	start := time.Now()
	t.Log("SIGKILL of gateway 1")
	g1.kill()
	mpEventually(t, "path 1 down", 15*time.Second, func() bool { return c1.State() != initiator.StateLive })
	t.Logf("path 1 seen down after %v", time.Since(start).Round(time.Millisecond))
	mpEventually(t, "I/O on gateway 2 while gateway 1 is down", 30*time.Second, func() bool { return v.carries(t, c2, c1) })
	v.check(t)

	t.Log("restarting gateway 1")
	g1.start()
	mpEventually(t, "path 1 back", 30*time.Second, func() bool { return c1.State() == initiator.StateLive && ns.Paths()[0].Usable })
	mpEventually(t, "I/O back on gateway 1", 30*time.Second, func() bool { return v.carries(t, c1, c2) })
	v.check(t)

	// ANA change by reload: gateway 2 optimized first, then gateway 1
	// non-optimized, so that one gateway is optimized all along.
	t.Log("reload: gateway 2 optimized, gateway 1 non-optimized")
	g2.reload("optimized")
	g1.reload("non-optimized")
	mpEventually(t, "ANA change seen", 15*time.Second, func() bool {
		a, b := states()
		return a == nvme.ANANonOptimized && b == nvme.ANAOptimized
	})
	mpEventually(t, "I/O on gateway 2 after the reload", 30*time.Second, func() bool { return v.carries(t, c2, c1) })

	// Gateway 2 inaccessible: the I/O that hits it fails over, none
	// surfaces.
	t.Log("reload: gateway 2 inaccessible, gateway 1 optimized")
	g2.reload("inaccessible")
	g1.reload("optimized")
	mpEventually(t, "I/O on gateway 1 with gateway 2 inaccessible", 30*time.Second, func() bool { return v.carries(t, c1, c2) })

	v.stop.Store(true)
	v.wg.Wait()
	v.check(t)
	t.Logf("%d verified operations, no I/O error", v.ops.Load())
}
