// Command kpeer-mpath runs our NVMe-oF host's native multipath (package
// initiator's Multipath over fabrics/rdma and the soft RoCEv2 provider)
// against the Linux kernel target that
// tests/interop/guest/multipath-target.sh sets up in a kernel-peer guest:
// one subsystem on two ports, ANA group 1 optimized on port 4420 and
// non-optimized on 4421. With verified I/O running all along it checks:
//
//   - both paths connect, report ANA and show the guest's states; I/O goes
//     to the optimized path;
//   - the guest flips the states in configfs (nvmet sends ANA Change
//     AENs): the host re-reads the ANA log and I/O moves to the other
//     path, then back when the guest restores them (failback);
//   - the guest removes the subsystem's link from port 4420 during I/O: the
//     path goes down and I/O continues on the other path without an
//     error; once the guest links it again the path reconnects and takes
//     the I/O back;
//   - no I/O error and no data mismatch at any time; a clean disconnect.
//
// The guest is driven through files in the kernel-peer signal directory
// ($KPEER_SHARE/signal): the host creates a request file, the guest
// answers with <request>.done. It prints PASS:/FAIL:/INFO: lines and
// exits 1 when a check failed. Root (the soft provider's raw socket),
// inside the kernel-peer network namespace (kpeer.Run.HostTest).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

var (
	traddr   = flag.String("traddr", "192.0.2.2", "target address")
	hostAddr = flag.String("host-addr", "192.0.2.1", "local address of the soft RoCE device")
	nqn      = flag.String("nqn", "nqn.2014-08.org.nvmexpress:kpeer-mpath", "subsystem")
	hostNQN  = flag.String("hostnqn", "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000c2", "our host NQN")
	policy   = flag.String("iopolicy", "numa", "multipath I/O policy")
	signal   = flag.String("signal", "", "kernel-peer signal directory (default $KPEER_SHARE/signal)")
	region   = flag.Int("region-mb", 16, "MiB of the namespace the verified I/O covers")
	workers  = flag.Int("workers", 2, "verified I/O goroutines (each on its own part of the region)")
	stepWait = flag.Duration("step-timeout", 90*time.Second, "bound of each step")
	logLevel = flag.String("log-level", "info", "initiator log level (on stderr)")
)

var failed int

func pass(f string, a ...any) { fmt.Printf("PASS: "+f+"\n", a...) }
func info(f string, a ...any) { fmt.Printf("INFO: "+f+"\n", a...) }
func fail(f string, a ...any) {
	failed++
	fmt.Printf("FAIL: "+f+"\n", a...)
}
func step(s string) { fmt.Printf("\n=== %s [%s]\n", s, time.Now().Format("15:04:05.000")) }

func main() {
	flag.Parse()
	if *signal == "" {
		*signal = filepath.Join(os.Getenv("KPEER_SHARE"), "signal")
	}
	run()
	if failed > 0 {
		fmt.Printf("RESULT: FAIL (%d failed checks)\n", failed)
		os.Exit(1)
	}
	fmt.Println("RESULT: PASS")
}

// ioCount returns the Reads and Writes controller c completed.
func ioCount(c *initiator.Controller) uint64 {
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

// ask makes the guest carry out request req and waits for its answer.
func ask(req string) bool {
	if err := os.WriteFile(filepath.Join(*signal, req), nil, 0o644); err != nil {
		fail("request %s: %v", req, err)
		return false
	}
	deadline := time.Now().Add(*stepWait)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(*signal, req+".done")); err == nil {
			if len(b) > 0 {
				fail("guest could not do %s", req)
				return false
			}
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	fail("guest did not answer %s within %v", req, *stepWait)
	return false
}

// waitUntil polls cond (an external system: the guest) until it holds.
func waitUntil(what string, cond func() bool) bool {
	deadline := time.Now().Add(*stepWait)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	fail("%s: not within %v", what, *stepWait)
	return false
}

// verifier runs verified writes and reads over its part of the region.
type verifier struct {
	ns             *initiator.MultipathNamespace
	ops, errs, bad atomic.Uint64
	stop           atomic.Bool
	wg             sync.WaitGroup
}

func (v *verifier) start(n int, regionBytes int64) {
	part := regionBytes / int64(n) &^ 4095
	for i := 0; i < n; i++ {
		v.wg.Add(1)
		go func(base int64) {
			defer v.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(base), 7))
			wbuf := make([]byte, 64<<10)
			rbuf := make([]byte, 64<<10)
			for seq := uint64(1); !v.stop.Load(); seq++ {
				size := int64(4096 << rng.IntN(5)) // 4 KiB to 64 KiB
				off := base + rng.Int64N((part-size)/4096+1)*4096
				w := wbuf[:size]
				for j := 0; j < len(w); j += 8 {
					x := seq<<32 ^ uint64(off+int64(j))
					for k := 0; k < 8; k++ {
						w[j+k] = byte(x >> (8 * k))
					}
				}
				if _, err := v.ns.WriteAt(w, off); err != nil {
					v.errs.Add(1)
					fmt.Printf("FAIL: write %d bytes at %d: %v\n", size, off, err)
					continue
				}
				r := rbuf[:size]
				if _, err := v.ns.ReadAt(r, off); err != nil {
					v.errs.Add(1)
					fmt.Printf("FAIL: read %d bytes at %d: %v\n", size, off, err)
					continue
				}
				if string(r) != string(w) {
					v.bad.Add(1)
					fmt.Printf("FAIL: data mismatch: %d bytes at %d\n", size, off)
				}
				v.ops.Add(2)
			}
		}(int64(i) * part)
	}
}

func run() {
	log := hclog.New(&hclog.LoggerOptions{Name: "kpeer-mpath", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	ta, err := netip.ParseAddr(*traddr)
	if err != nil {
		fail("bad -traddr: %v", err)
		return
	}
	ha, err := netip.ParseAddr(*hostAddr)
	if err != nil {
		fail("bad -host-addr: %v", err)
		return
	}
	pol, err := initiator.ParseIOPolicy(*policy)
	if err != nil {
		fail("%v", err)
		return
	}
	dev, err := provider.Open(provider.Config{Provider: "soft", Addr: ha, Logger: log.Named("soft")})
	if err != nil {
		fail("RDMA device: %v", err)
		return
	}
	defer dev.Close()
	dialer := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: log.Named("rdma")})

	step("connect both paths")
	opts := initiator.Options{
		SubsystemNQN: *nqn,
		HostNQN:      *hostNQN,
		QueueSize:    32,
		// Long enough for the guest to link the port again before the
		// first attempt: a Connect refused for an unlinked subsystem
		// carries DNR, which ends the path.
		ReconnectDelay:  8 * time.Second,
		CtrlLossTimeout: 120 * time.Second,
		Logger:          log.Named("initiator"),
	}
	var ctrls []*initiator.Controller
	for _, svc := range []uint16{4420, 4421} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		c, err := initiator.Connect(ctx, dialer, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: ta, ServiceID: svc}, opts)
		cancel()
		if err != nil {
			fail("connect %s:%d: %v", ta, svc, err)
			return
		}
		defer c.Close()
		ctrls = append(ctrls, c)
		pass("connected %s:%d cntlid %d, ANA reporting %v", ta, svc, c.CntlID(), c.ANAReporting())
	}
	p1, p2 := ctrls[0], ctrls[1]
	m := initiator.NewMultipath(*nqn, initiator.MultipathOptions{IOPolicy: pol, Logger: log.Named("multipath")})
	for _, c := range ctrls {
		if err := m.AddPath(c); err != nil {
			fail("add path: %v", err)
			return
		}
	}
	ns, err := m.Namespace(1)
	if err != nil {
		fail("namespace 1: %v", err)
		return
	}
	states := func() (nvme.ANAState, nvme.ANAState) {
		var a, b nvme.ANAState
		for _, pi := range ns.Paths() {
			switch pi.Controller {
			case p1:
				a = pi.ANAState
			case p2:
				b = pi.ANAState
			}
		}
		return a, b
	}
	if a, b := states(); a == nvme.ANAOptimized && b == nvme.ANANonOptimized {
		pass("ANA states: 4420 %v, 4421 %v", a, b)
	} else {
		fail("ANA states: 4420 %v, 4421 %v; want optimized, non-optimized", a, b)
	}
	if l, ok := p1.ANALog(); ok {
		info("ANA log of 4420: chgcnt %d, %d groups", l.ChangeCount, len(l.Groups))
	}
	info("namespace 1: %d blocks of %d bytes, nguid %x", ns.Blocks(), ns.BlockSize(), ns.NGUID())

	v := &verifier{ns: ns}
	v.start(*workers, int64(*region)<<20)
	defer func() {
		v.stop.Store(true)
		v.wg.Wait()
	}()
	// busy reports whether controller c carries the I/O: a while of I/O
	// goes mostly through it.
	carries := func(c, other *initiator.Controller) bool {
		a0, b0 := ioCount(c), ioCount(other)
		ops0 := v.ops.Load()
		if !waitUntil("I/O progressing", func() bool { return v.ops.Load() >= ops0+40 }) {
			return false
		}
		da, db := ioCount(c)-a0, ioCount(other)-b0
		info("I/O in the window: %d on cntlid %d, %d on cntlid %d", da, c.CntlID(), db, other.CntlID())
		return da > 0 && da >= 4*db
	}

	step("I/O on the optimized path")
	if waitUntil("I/O on 4420", func() bool { return carries(p1, p2) }) {
		pass("I/O goes to the optimized path (4420)")
	}

	step("ANA change: 4420 inaccessible, 4421 optimized")
	if ask("ana-flip") {
		if waitUntil("ANA change seen", func() bool { a, b := states(); return a == nvme.ANAInaccessible && b == nvme.ANAOptimized }) {
			pass("ANA change seen through the AEN: 4420 inaccessible, 4421 optimized")
		}
		if waitUntil("I/O on 4421", func() bool { return carries(p2, p1) }) {
			pass("I/O moved to 4421 after the ANA change")
		}
	}

	step("ANA back: 4420 optimized, 4421 non-optimized (failback)")
	if ask("ana-back") {
		if waitUntil("ANA back seen", func() bool { a, b := states(); return a == nvme.ANAOptimized && b == nvme.ANANonOptimized }) {
			pass("ANA states back")
		}
		if waitUntil("I/O back on 4420", func() bool { return carries(p1, p2) }) {
			pass("I/O failed back to 4420")
		}
	}

	step("port 4420 unlinked during I/O")
	rec0 := p1.Stats().Recoveries
	if ask("unlink-1") {
		if waitUntil("4420 down", func() bool { return p1.Stats().Recoveries > rec0 || p1.State() != initiator.StateLive }) {
			pass("path 4420 lost (state %v)", p1.State())
		}
		if waitUntil("I/O on 4421 while 4420 is down", func() bool { return carries(p2, p1) }) {
			pass("I/O continues on 4421 with 4420 down")
		}
		if ask("relink-1") {
			if waitUntil("4420 back", func() bool {
				a, _ := states()
				return p1.State() == initiator.StateLive && a == nvme.ANAOptimized
			}) {
				pass("path 4420 reconnected (cntlid %d)", p1.CntlID())
				if waitUntil("I/O back on 4420", func() bool { return carries(p1, p2) }) {
					pass("I/O failed back to 4420 after the reconnect")
				}
			} else {
				info("4420 state %v (a reconnect refused while the link was gone ends the path: DNR)", p1.State())
			}
		}
	}

	v.stop.Store(true)
	v.wg.Wait()
	if n, bad := v.errs.Load(), v.bad.Load(); n == 0 && bad == 0 {
		pass("verified I/O: %d operations, no error, no mismatch", v.ops.Load())
	} else {
		fail("verified I/O: %d operations, %d errors, %d mismatches", v.ops.Load(), n, bad)
	}
	step("disconnect")
	for _, c := range ctrls {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.Disconnect(ctx)
		cancel()
		if err != nil {
			info("disconnect cntlid %d: %v", c.CntlID(), err)
		}
	}
	pass("disconnected")
}
