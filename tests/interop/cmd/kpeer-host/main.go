// Command kpeer-host runs our NVMe-oF host (package initiator over
// fabrics/rdma and the soft RoCEv2 provider) against the Linux kernel
// target that tests/interop/guest/initiator-target.sh sets up in a
// kernel-peer guest, and checks what issue 5 asks of it:
//
//   - discovery lists the subsystem on rdma 192.0.2.2:4420, and the
//     restricted subsystem only to its allowed host;
//   - connect (admin and I/O queues), Identify values, SMART log;
//   - the pattern the guest wrote into the namespace reads back;
//   - verified writes and reads of 4 KiB, 128 KiB, 1 MiB and more than
//     MDTS, split by the initiator into commands of at most MDTS;
//   - Flush, clean disconnect;
//   - unknown NQN, refused host, unreachable address and a port without a
//     listener fail with one-line errors, in bounded time, and leave
//     nothing behind (a later connect works);
//   - with -cli, the same through the nvmeof command (exit status, one
//     line on stderr, list empty afterwards), and nvme-cli's list-subsys,
//     get-log, error-log, ns-descs, get-feature and reset on the
//     connected controller.
//
// It prints PASS:/FAIL:/INFO: lines and exits 1 when a check failed. It
// needs root (the soft provider's raw socket) and runs inside the
// kernel-peer network namespace (kpeer.Run.HostTest), or in a guest with
// -provider ibverbs (built with cgo and -tags ibverbs, on the guest's rxe0).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// config is the command line.
type config struct {
	traddr, hostAddr        string
	trsvcid                 uint
	nqn, restrictedNQN      string
	hostNQN, allowedHostNQN string
	unreachable             string
	badPort                 uint
	patternMB               int
	nsSizeMB                int
	nsUUID                  string
	model, serial           string
	maxTransfer, queueSize  int
	faultTimeout            time.Duration
	cli                     string
	cliFlags                []string
	logLevel                string
	provider, device        string
	congestion              bool
	ceMark                  float64
	keepAlive               time.Duration
	steps                   map[string]bool
}

func main() {
	var c config
	flag.StringVar(&c.traddr, "traddr", "192.0.2.2", "target address")
	flag.UintVar(&c.trsvcid, "trsvcid", 4420, "target service ID")
	flag.StringVar(&c.hostAddr, "host-addr", "192.0.2.1", "local address of the soft RoCE device")
	flag.StringVar(&c.nqn, "nqn", "nqn.2014-08.org.nvmexpress:kpeer-target", "subsystem any host may use")
	flag.StringVar(&c.restrictedNQN, "restricted-nqn", "nqn.2014-08.org.nvmexpress:kpeer-restricted", "subsystem only -allowed-hostnqn may use")
	flag.StringVar(&c.hostNQN, "hostnqn", "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000b1", "our host NQN (not allowed on -restricted-nqn)")
	flag.StringVar(&c.allowedHostNQN, "allowed-hostnqn", "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000a1", "the host NQN -restricted-nqn allows")
	flag.StringVar(&c.unreachable, "unreachable", "192.0.2.9", "an address where nothing answers")
	flag.UintVar(&c.badPort, "bad-port", 4421, "a service ID the target does not listen on")
	flag.IntVar(&c.patternMB, "pattern-mb", 2, "MiB of the guest's pattern at offset 0 (0: skip)")
	flag.IntVar(&c.nsSizeMB, "ns-size-mb", 64, "expected namespace size")
	flag.StringVar(&c.nsUUID, "ns-uuid", "6b706565-7200-4000-8000-000000000001", "expected namespace UUID")
	flag.StringVar(&c.model, "model", "kpeer-linux-nvmet", "expected model number")
	flag.StringVar(&c.serial, "serial", "kpeer0001", "expected serial number")
	flag.IntVar(&c.maxTransfer, "max-transfer", 2<<20, "transport transfer limit (above MDTS, so MDTS decides)")
	flag.IntVar(&c.queueSize, "queue-size", 16, "I/O queue size")
	flag.DurationVar(&c.faultTimeout, "fault-timeout", 15*time.Second, "bound for each failing connect")
	flag.StringVar(&c.cli, "cli", "", "path of the nvmeof command to check as well")
	flag.StringVar(&c.logLevel, "log-level", "warn", "initiator log level")
	flag.StringVar(&c.provider, "provider", "soft", "RDMA provider of the host side: soft, ibverbs or auto")
	flag.StringVar(&c.device, "device", "", "with -provider ibverbs: the RDMA device (default: the one holding -host-addr)")
	flag.BoolVar(&c.congestion, "congestion", false, "RoCEv2 congestion control (ECN, CNPs, DCQCN) on the soft device")
	flag.DurationVar(&c.keepAlive, "keep-alive", 0, "keep-alive timeout to ask for (0: the initiator's default, 5s)")
	flag.Float64Var(&c.ceMark, "ce-mark", 0, "with -congestion: the fraction of received packets the soft device's fault injector marks CE, ECN-capable or not (the target's QPs then get CNPs)")
	cliFlags := flag.String("cli-flags", "", "extra flags for nvmeof discover and connect (e.g. \"--provider ibverbs\")")
	steps := flag.String("steps", "discovery,session,faults,cli", "which checks to run (comma-separated)")
	flag.Parse()
	c.cliFlags = strings.Fields(*cliFlags)
	c.steps = map[string]bool{}
	for _, s := range strings.Split(*steps, ",") {
		c.steps[strings.TrimSpace(s)] = true
	}

	r := &run{cfg: c, log: hclog.New(&hclog.LoggerOptions{Name: "kpeer-host", Level: hclog.LevelFromString(c.logLevel), Output: os.Stderr})}
	r.main()
	if r.failed > 0 {
		fmt.Printf("RESULT: FAIL (%d failed checks)\n", r.failed)
		os.Exit(1)
	}
	fmt.Println("RESULT: PASS")
}

// run holds the state of one run of the checks.
type run struct {
	cfg    config
	log    hclog.Logger
	failed int
	dev    rdma.Device
	dialer *countingDialer
	addr   fabrics.Address
}

func (r *run) pass(format string, a ...any) { fmt.Printf("PASS: "+format+"\n", a...) }
func (r *run) info(format string, a ...any) { fmt.Printf("INFO: "+format+"\n", a...) }
func (r *run) fail(format string, a ...any) {
	r.failed++
	fmt.Printf("FAIL: "+format+"\n", a...)
}
func (r *run) step(s string) { fmt.Printf("\n=== %s [%s]\n", s, time.Now().Format("15:04:05.000")) }

func (r *run) main() {
	c := r.cfg
	taddr, err := netip.ParseAddr(c.traddr)
	if err != nil {
		r.fail("bad -traddr: %v", err)
		return
	}
	r.addr = fabrics.Address{Transport: "rdma", Addr: taddr, ServiceID: uint16(c.trsvcid)}
	if err := r.openDevice(); err != nil {
		r.fail("%v", err)
		return
	}
	if c.steps["discovery"] {
		r.discovery()
	}
	if c.steps["session"] {
		r.session()
	}
	if c.steps["faults"] {
		r.faults()
	}
	if sd, ok := r.dev.(*soft.Device); ok && c.ceMark > 0 {
		st := sd.Stats()
		r.info("CE marks made %d, CNPs sent %d, CNPs received %d (handled %d, ignored %d)",
			st.FaultCEMarks, st.NPCNPSent, st.RPCNPHandled+st.RPCNPIgnored, st.RPCNPHandled, st.RPCNPIgnored)
		if st.NPCNPSent == 0 {
			r.fail("-ce-mark %g: no CNP sent", c.ceMark)
		}
	}
	r.dev.Close()
	r.dev = nil
	if c.cli != "" && c.steps["cli"] {
		r.cliChecks()
	}
}

// openDevice opens the RDMA device (soft RoCE, or an rdma-core device
// with -provider ibverbs) and the counting dialer.
func (r *run) openDevice() error {
	ha, err := netip.ParseAddr(r.cfg.hostAddr)
	if err != nil {
		return fmt.Errorf("bad -host-addr: %w", err)
	}
	pc := provider.Config{Provider: r.cfg.provider, Device: r.cfg.device, Addr: ha, Logger: r.log.Named(r.cfg.provider)}
	if r.cfg.congestion {
		pc.Congestion = &soft.CongestionConfig{Enabled: true}
	}
	r.dev, err = provider.Open(pc)
	if err != nil {
		return err
	}
	if sd, ok := r.dev.(*soft.Device); ok && r.cfg.ceMark > 0 {
		sd.SetFaults(nil, &soft.FaultConfig{CEMark: r.cfg.ceMark, CEMarkNotECT: true, Seed: 26})
	}
	r.info("RDMA device: %s", provider.Describe(r.dev))
	r.dialer = &countingDialer{Dialer: nvmerdma.NewDialer(nvmerdma.HostConfig{
		Device: r.dev, MaxTransfer: r.cfg.maxTransfer, Logger: r.log.Named("rdma"),
	})}
	return nil
}

func (r *run) opts(nqn, hostNQN string) initiator.Options {
	return initiator.Options{
		SubsystemNQN: nqn,
		HostNQN:      hostNQN,
		QueueSize:    r.cfg.queueSize,
		Logger:       r.log.Named("initiator"),

		KeepAliveTimeout: r.cfg.keepAlive,
	}
}

// discovery: the log page as our host and as the allowed host see it.
func (r *run) discovery() {
	c := r.cfg
	for _, h := range []struct {
		hostNQN        string
		wantRestricted bool
	}{{c.hostNQN, false}, {c.allowedHostNQN, true}} {
		r.step("discover " + r.addr.String() + " as " + h.hostNQN)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t0 := time.Now()
		entries, err := initiator.Discover(ctx, r.dialer, r.addr, r.opts("", h.hostNQN))
		cancel()
		if err != nil {
			r.fail("discover: %v", err)
			continue
		}
		var found, restricted bool
		for _, e := range entries {
			fmt.Printf("  trtype %-4s adrfam %d subtype %d portid %d trsvcid %-5s traddr %-10s subnqn %s\n",
				e.TRType, e.AdrFam, e.SubType, e.PortID, e.TRSVCID, e.TRADDR, e.SubNQN)
			if e.SubNQN == c.nqn && e.TRType == fabrics.TRTypeRDMA && e.TRADDR == c.traddr && e.TRSVCID == fmt.Sprint(c.trsvcid) {
				found = true
				if a, err := e.Address(); err != nil || a != r.addr {
					r.fail("discovery entry address %v (%v), want %v", a, err, r.addr)
				}
			}
			if e.SubNQN == c.restrictedNQN {
				restricted = true
			}
		}
		if found {
			r.pass("discover (%v): %d entries, %s on rdma %s:%d listed", time.Since(t0).Round(time.Millisecond), len(entries), c.nqn, c.traddr, c.trsvcid)
		} else {
			r.fail("discover: no rdma entry for %s at %s:%d", c.nqn, c.traddr, c.trsvcid)
		}
		if restricted != h.wantRestricted {
			r.fail("discover as %s: restricted subsystem listed=%v, want %v", h.hostNQN, restricted, h.wantRestricted)
		} else {
			r.pass("discover as %s: restricted subsystem listed=%v", h.hostNQN, restricted)
		}
	}
}

// session: connect, Identify, SMART, the guest's pattern, verified I/O,
// Flush, disconnect.
func (r *run) session() {
	c := r.cfg
	r.step("connect " + c.nqn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	ctrl, err := initiator.Connect(ctx, r.dialer, r.addr, r.opts(c.nqn, c.hostNQN))
	if err != nil {
		r.fail("connect: %v", err)
		return
	}
	defer func() {
		if ctrl.State() != initiator.StateDeleted {
			ctrl.Close()
		}
	}()
	id := ctrl.IdentifyData()
	r.pass("connect (%v): cntlid %d, %d I/O queues of %d entries, max transfer %d, keep-alive %v, state %v",
		time.Since(t0).Round(time.Millisecond), ctrl.CntlID(), ctrl.NumIOQueues(), ctrl.QueueSize(),
		ctrl.MaxTransfer(), ctrl.KeepAliveTimeout(), ctrl.State())
	if ctrl.NumIOQueues() < 1 {
		r.fail("no I/O queue connected")
	}
	if ctrl.State() != initiator.StateLive {
		r.fail("state %v after connect, want live", ctrl.State())
	}

	r.step("identify")
	fmt.Printf("  mn %q sn %q fr %q subnqn %q\n", id.MN(), id.SN(), id.FR(), id.SUBNQN())
	fmt.Printf("  cntlid %d ver %#x mdts %d ioccsz %d iorcsz %d icdoff %d msdbd %d sgls %#x maxcmd %d kas %d nn %d oncs %#x vwc %#x\n",
		id.CNTLID(), id.VER(), id.MDTS(), id.IOCCSZ(), id.IORCSZ(), id.ICDOFF(), id.MSDBD(), id.SGLS(), id.MAXCMD(), id.KAS(), id.NN(), id.ONCS(), id.VWC())
	fmt.Printf("  CAP %#x (MQES %d, TO %d) VS %#x\n", uint64(ctrl.CAP()), ctrl.CAP().MQES(), ctrl.CAP().TO(), ctrl.VS())
	check := func(ok bool, format string, a ...any) {
		if ok {
			r.pass(format, a...)
		} else {
			r.fail(format, a...)
		}
	}
	check(strings.TrimSpace(id.MN()) == c.model, "identify model %q (want %q)", strings.TrimSpace(id.MN()), c.model)
	check(strings.TrimSpace(id.SN()) == c.serial, "identify serial %q (want %q)", strings.TrimSpace(id.SN()), c.serial)
	check(id.SUBNQN() == c.nqn, "identify subnqn %q", id.SUBNQN())
	check(id.CNTLID() == ctrl.CntlID() && id.CNTLID() != 0xffff, "identify cntlid %d (connect gave %d)", id.CNTLID(), ctrl.CntlID())
	check(ctrl.VS() >= 0x10300, "VS %#x >= 1.3", ctrl.VS())
	check(id.IOCCSZ() >= 4 && id.IORCSZ() == 1 && id.MDTS() > 0, "fabrics fields: ioccsz %d iorcsz %d mdts %d", id.IOCCSZ(), id.IORCSZ(), id.MDTS())
	mdts := int(id.MDTSBytes(4096 << ctrl.CAP().MPSMIN()))
	check(ctrl.MaxTransfer() == min(mdts, c.maxTransfer), "max transfer %d = min(MDTS %d, transport %d)", ctrl.MaxTransfer(), mdts, c.maxTransfer)

	ns, err := ctrl.Namespace(1)
	if err != nil {
		r.fail("namespace 1: %v", err)
		return
	}
	uuid := ns.UUID()
	fmt.Printf("  ns 1: %d blocks of %d bytes, uuid %x nguid %x eui64 %x\n", ns.Blocks(), ns.BlockSize(), uuid, ns.NGUID(), ns.EUI64())
	check(ns.Size() == int64(c.nsSizeMB)<<20 && ns.BlockSize() == 512, "namespace 1: %d bytes, %d-byte blocks", ns.Size(), ns.BlockSize())
	check(fmt.Sprintf("%x-%x-%x-%x-%x", uuid[0:4], uuid[4:6], uuid[6:8], uuid[8:10], uuid[10:]) == c.nsUUID, "namespace UUID %x (want %s)", uuid, c.nsUUID)
	check(len(ctrl.Namespaces()) == 1, "%d active namespaces", len(ctrl.Namespaces()))

	r.step("SMART / Health log")
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	smart, err := ctrl.SMARTLog(sctx)
	scancel()
	if err != nil {
		r.fail("SMART log: %v", err)
	} else {
		r.pass("SMART log: critical warning %#x, temperature %d K, spare %d%%, data units read %v written %v, host reads %v writes %v, power cycles %v",
			smart.CriticalWarning(), smart.CompositeTemperature(), smart.AvailableSpare(), smart.DataUnitsRead(), smart.DataUnitsWritten(),
			smart.HostReadCommands(), smart.HostWriteCommands(), smart.PowerCycles())
		if smart.CriticalWarning() != 0 {
			r.fail("SMART critical warning %#x", smart.CriticalWarning())
		}
	}

	if c.patternMB > 0 {
		r.step(fmt.Sprintf("read the guest's %d MiB pattern", c.patternMB))
		want := pattern(c.patternMB * 2048)
		got := make([]byte, len(want))
		r.dialer.reset()
		t0 := time.Now()
		n, err := ns.ReadAt(got, 0)
		el := time.Since(t0)
		cmds := r.dialer.take()
		switch {
		case err != nil:
			r.fail("read pattern: %d bytes, %v", n, err)
		case !bytes.Equal(got, want):
			r.fail("pattern differs from what the guest wrote: %s", firstDiff(got, want, 512))
		default:
			r.pass("read the guest's pattern: %d bytes in %d Read commands (largest %d) in %v, every block carries its number",
				n, cmds.count(nvme.IORead), cmds.largest(nvme.IORead), el.Round(time.Millisecond))
		}
		// one 4 KiB read in the middle: the blocks are where the guest put them
		blk := int64(1001)
		small := make([]byte, 4096)
		if _, err := ns.ReadAt(small, blk*512); err != nil || !bytes.Equal(small, want[blk*512:blk*512+4096]) {
			r.fail("4 KiB read at block %d: %v %s", blk, err, firstDiff(small, want[blk*512:blk*512+4096], 512))
		} else {
			r.pass("4 KiB read at block %d matches", blk)
		}
	}

	r.step("verified writes and reads")
	rng := rand.New(rand.NewPCG(5, uint64(time.Now().UnixNano())))
	maxX := ctrl.MaxTransfer()
	for _, io := range []struct {
		name string
		off  int64
		size int
	}{
		{"4k", 8 << 20, 4 << 10},
		{"128k", 9 << 20, 128 << 10},
		{"1M", 10 << 20, 1 << 20},
		{"1M at an odd block", 12<<20 + 512, 1 << 20},
		{"2M+4k (above MDTS)", 16 << 20, 2<<20 + 4<<10},
		{"4M+512 (above MDTS)", 20<<20 + 7*512, 4<<20 + 512},
	} {
		buf := make([]byte, io.size)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		r.dialer.reset()
		t0 := time.Now()
		n, err := ns.WriteAt(buf, io.off)
		wel := time.Since(t0)
		wc := r.dialer.take()
		if err != nil || n != io.size {
			r.fail("write %s at %d: %d bytes, %v", io.name, io.off, n, err)
			continue
		}
		back := make([]byte, io.size)
		t0 = time.Now()
		n, err = ns.ReadAt(back, io.off)
		rel := time.Since(t0)
		rc := r.dialer.take()
		if err != nil || n != io.size {
			r.fail("read %s at %d: %d bytes, %v", io.name, io.off, n, err)
			continue
		}
		if !bytes.Equal(buf, back) {
			r.fail("%s at %d: read back differs: %s", io.name, io.off, firstDiff(back, buf, 512))
			continue
		}
		wantCmds := (io.size + maxX - 1) / maxX
		ok := wc.count(nvme.IOWrite) >= wantCmds && wc.largest(nvme.IOWrite) <= maxX && wc.total(nvme.IOWrite) == io.size &&
			rc.count(nvme.IORead) >= wantCmds && rc.largest(nvme.IORead) <= maxX && rc.total(nvme.IORead) == io.size
		msg := fmt.Sprintf("%s at %d: written in %d commands (largest %d) in %v, read in %d (largest %d) in %v, verified",
			io.name, io.off, wc.count(nvme.IOWrite), wc.largest(nvme.IOWrite), wel.Round(time.Millisecond),
			rc.count(nvme.IORead), rc.largest(nvme.IORead), rel.Round(time.Millisecond))
		if ok {
			r.pass("%s", msg)
		} else {
			r.fail("%s; want at least %d commands of at most %d bytes each way", msg, wantCmds, maxX)
		}
	}
	// the pattern around the writes is untouched
	if c.patternMB > 0 {
		got := make([]byte, 64<<10)
		off := int64(c.patternMB)<<20 - int64(len(got))
		want := pattern(c.patternMB * 2048)[off:]
		if _, err := ns.ReadAt(got, off); err != nil || !bytes.Equal(got, want) {
			r.fail("pattern tail after the writes: %v %s", err, firstDiff(got, want, 512))
		} else {
			r.pass("pattern tail untouched by the writes")
		}
	}

	r.step("flush, trim")
	if err := ns.Flush(); err != nil {
		r.fail("flush: %v", err)
	} else {
		r.pass("flush")
	}
	if err := ns.Trim(30<<20, 64<<10); err != nil {
		r.info("trim (Dataset Management, Deallocate): %v", err)
	} else {
		r.info("trim (Dataset Management, Deallocate): ok")
	}

	r.step("disconnect")
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
	t0 = time.Now()
	err = ctrl.Disconnect(dctx)
	dcancel()
	el := time.Since(t0)
	switch {
	case err != nil:
		r.fail("disconnect: %v (after %v)", err, el)
	case ctrl.State() != initiator.StateDeleted:
		r.fail("state %v after disconnect", ctrl.State())
	default:
		r.pass("disconnect in %v, state %v", el.Round(time.Millisecond), ctrl.State())
	}
	// The package documents ErrClosed for I/O after Disconnect; the
	// namespace handle reports ErrNoNamespace instead (Disconnect marks
	// every namespace removed first). Either refuses the I/O.
	switch _, err := ns.ReadAt(make([]byte, 512), 0); {
	case errors.Is(err, initiator.ErrClosed):
		r.pass("read after disconnect: %v", err)
	case errors.Is(err, initiator.ErrNoNamespace):
		r.pass("read after disconnect refused: %v", err)
		r.info("read after disconnect gives ErrNoNamespace, not the ErrClosed the initiator documents")
	default:
		r.fail("read after disconnect: %v, want ErrClosed", err)
	}
}

// faults: connects that must fail, quickly and in one line, and one that
// must work afterwards.
func (r *run) faults() {
	c := r.cfg
	type fault struct {
		name  string
		addr  fabrics.Address
		opts  initiator.Options
		check func(error) bool
		want  string
	}
	isConnect := func(st nvme.Status) func(error) bool {
		return func(err error) bool {
			var ce *initiator.ConnectError
			return errors.As(err, &ce) && ce.Status == st
		}
	}
	unreach := func(err error) bool {
		return errors.Is(err, initiator.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded)
	}
	bad := r.addr
	bad.ServiceID = uint16(c.badPort)
	far := r.addr
	far.Addr = netip.MustParseAddr(c.unreachable)
	for _, f := range []fault{
		{"unknown NQN", r.addr, r.opts(c.nqn+"-nonexistent", c.hostNQN), isConnect(fabrics.StatusConnectInvalidParameters), "ConnectError Connect Invalid Parameters"},
		{"refused host", r.addr, r.opts(c.restrictedNQN, c.hostNQN), isConnect(fabrics.StatusConnectInvalidHost), "ConnectError Connect Invalid Host"},
		{"no listener on the port", bad, r.opts(c.nqn, c.hostNQN), unreach, "ErrUnreachable"},
		{"unreachable address", far, r.opts(c.nqn, c.hostNQN), unreach, "ErrUnreachable or the deadline"},
	} {
		r.step("fault: " + f.name)
		ctx, cancel := context.WithTimeout(context.Background(), c.faultTimeout)
		t0 := time.Now()
		ctrl, err := initiator.Connect(ctx, r.dialer, f.addr, f.opts)
		el := time.Since(t0)
		cancel()
		if err == nil {
			r.fail("%s: connect to %s %s succeeded", f.name, f.addr, f.opts.SubsystemNQN)
			ctrl.Close()
			continue
		}
		msg := err.Error()
		switch {
		case !f.check(err):
			r.fail("%s: %q (%T) after %v, want %s", f.name, msg, err, el, f.want)
		case strings.Contains(msg, "\n"):
			r.fail("%s: error spans lines: %q", f.name, msg)
		case el > c.faultTimeout+2*time.Second:
			r.fail("%s: took %v", f.name, el)
		default:
			r.pass("%s: failed in %v: %s", f.name, el.Round(time.Millisecond), msg)
		}
	}

	r.step("the allowed host on the restricted subsystem")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	ctrl, err := initiator.Connect(ctx, r.dialer, r.addr, r.opts(c.restrictedNQN, c.allowedHostNQN))
	cancel()
	if err != nil {
		r.fail("allowed host: %v", err)
	} else {
		r.pass("allowed host connected to %s (cntlid %d, %d namespaces)", c.restrictedNQN, ctrl.CntlID(), len(ctrl.Namespaces()))
		if err := ctrl.Close(); err != nil {
			r.fail("allowed host: disconnect: %v", err)
		}
	}

	r.step("no stale state: connect again and read")
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctrl, err = initiator.Connect(ctx, r.dialer, r.addr, r.opts(c.nqn, c.hostNQN))
	if err != nil {
		r.fail("connect after the faults: %v", err)
		return
	}
	ns, err := ctrl.Namespace(1)
	if err == nil {
		b := make([]byte, 4096)
		_, err = ns.ReadAt(b, 0)
		if err == nil && c.patternMB > 0 && !bytes.Equal(b, pattern(8)) {
			err = errors.New("pattern differs")
		}
	}
	if derr := ctrl.Disconnect(ctx); err == nil {
		err = derr
	}
	if err != nil {
		r.fail("connect, read, disconnect after the faults: %v", err)
	} else {
		r.pass("connect, read, disconnect after the faults")
	}
}

// cliChecks runs the nvmeof command: discover, the failing connects, and
// a connect/list/disconnect cycle, all with a private run directory.
func (r *run) cliChecks() {
	c := r.cfg
	runDir, err := os.MkdirTemp("", "kpeer-host-run-")
	if err != nil {
		r.fail("%v", err)
		return
	}
	defer os.RemoveAll(runDir)
	cli := func(bound time.Duration, args ...string) (stdout, stderr string, code int, el time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		full := append([]string{"--run-dir", runDir}, args...)
		if len(args) > 0 && len(c.cliFlags) > 0 && (args[0] == "discover" || args[0] == "connect") {
			// the subcommand, then the extra flags, then its arguments
			full = append(append([]string{"--run-dir", runDir, args[0]}, c.cliFlags...), args[1:]...)
		}
		fmt.Printf("$ nvmeof %s\n", strings.Join(full, " "))
		cmd := exec.CommandContext(ctx, c.cli, full...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		t0 := time.Now()
		err := cmd.Run()
		el = time.Since(t0)
		code = cmd.ProcessState.ExitCode()
		if err != nil && code == 0 {
			code = -1
		}
		if ctx.Err() != nil {
			code = -2 // killed at the bound
		}
		fmt.Print(indent(o.String()), indent(e.String()))
		fmt.Printf("  (exit %d after %v)\n", code, el.Round(time.Millisecond))
		return o.String(), e.String(), code, el
	}
	common := []string{"-t", "rdma", "-a", c.traddr, "-s", fmt.Sprint(c.trsvcid), "-w", c.hostAddr}

	r.step("nvmeof discover")
	out, _, code, _ := cli(60*time.Second, append(append([]string{"discover"}, common...), "-q", c.hostNQN)...)
	if code == 0 && strings.Contains(out, c.nqn) && strings.Contains(out, c.traddr) {
		r.pass("nvmeof discover lists %s", c.nqn)
	} else {
		r.fail("nvmeof discover: exit %d", code)
	}

	bound := c.faultTimeout + 10*time.Second
	for _, f := range []struct {
		name string
		args []string
	}{
		{"unknown NQN", []string{"-n", c.nqn + "-nonexistent", "-q", c.hostNQN}},
		{"refused host", []string{"-n", c.restrictedNQN, "-q", c.hostNQN}},
		{"no listener on the port", []string{"-t", "rdma", "-a", c.traddr, "-s", fmt.Sprint(c.badPort), "-n", c.nqn, "-q", c.hostNQN}},
		{"unreachable address", []string{"-t", "rdma", "-a", c.unreachable, "-n", c.nqn, "-q", c.hostNQN}},
	} {
		r.step("nvmeof connect: " + f.name)
		args := []string{"connect", "--map", "none", "--timeout", c.faultTimeout.String()}
		if f.args[0] != "-t" {
			args = append(args, common...)
		} else {
			args = append(args, "-w", c.hostAddr)
		}
		args = append(args, f.args...)
		out, errOut, code, el := cli(bound, args...)
		lines := nonEmptyLines(errOut)
		switch {
		case code == 0:
			r.fail("nvmeof connect (%s) succeeded: %q", f.name, out)
		case code == -2:
			r.fail("nvmeof connect (%s) still running after %v", f.name, bound)
		case len(lines) != 1:
			r.fail("nvmeof connect (%s): exit %d, %d lines on stderr, want one", f.name, code, len(lines))
		default:
			r.pass("nvmeof connect (%s): exit %d after %v: %s", f.name, code, el.Round(time.Millisecond), lines[0])
		}
	}

	r.step("nvmeof list: nothing left by the failures")
	if n, err := r.cliListCount(cli); err != nil || n != 0 {
		r.fail("nvmeof list after the failures: %d namespaces, %v", n, err)
	} else {
		r.pass("nvmeof list after the failures: empty")
	}

	r.step("nvmeof connect / list / disconnect")
	out, _, code, _ = cli(90*time.Second, append(append([]string{"connect", "--map", "none"}, common...), "-n", c.nqn, "-q", c.hostNQN)...)
	if code != 0 {
		r.fail("nvmeof connect: exit %d", code)
	} else {
		r.pass("nvmeof connect: %s", strings.Join(nonEmptyLines(out), ", "))
		if n, err := r.cliListCount(cli); err != nil || n != 1 {
			r.fail("nvmeof list while connected: %d namespaces, %v", n, err)
		} else {
			r.pass("nvmeof list while connected: 1 namespace")
		}
		if lines := nonEmptyLines(out); len(lines) > 0 {
			r.cliNVMeChecks(cli, lines[len(lines)-1])
		}
		if _, errOut, code, _ := cli(60*time.Second, "disconnect", "-n", c.nqn); code != 0 {
			r.fail("nvmeof disconnect: exit %d: %s", code, strings.TrimSpace(errOut))
		} else {
			r.pass("nvmeof disconnect")
		}
	}
	if n, err := r.cliListCount(cli); err != nil || n != 0 {
		r.fail("nvmeof list after disconnect: %d namespaces, %v", n, err)
	} else {
		r.pass("nvmeof list after disconnect: empty")
	}
	// the connection daemon must have let go of the device
	time.Sleep(500 * time.Millisecond)
	if err := r.openDevice(); err != nil {
		r.fail("reopening the %s device after nvmeof disconnect: %v", c.provider, err)
	} else {
		r.pass("%s device free after nvmeof disconnect", c.provider)
		r.dev.Close()
	}
}

// cliListCount returns the number of namespaces `nvmeof list -o json`
// shows.
func (r *run) cliListCount(cli func(time.Duration, ...string) (string, string, int, time.Duration)) (int, error) {
	out, errOut, code, _ := cli(30*time.Second, "list", "-o", "json")
	if code != 0 {
		return -1, fmt.Errorf("exit %d: %s", code, strings.TrimSpace(errOut))
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return -1, fmt.Errorf("list -o json: %w", err)
	}
	return countNamespaces(v), nil
}

// countNamespaces counts the objects under any "Namespaces"-like array of
// a list -o json document (nvme-cli's shape: Devices[].Subsystems[]
// .Controllers[].Namespaces[], or a flat Devices[] list).
func countNamespaces(v any) int {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if strings.EqualFold(k, "Namespaces") {
				if a, ok := x.([]any); ok {
					return len(a)
				}
			}
		}
		n := 0
		for k, x := range t {
			if strings.EqualFold(k, "Devices") {
				if a, ok := x.([]any); ok {
					for _, d := range a {
						if m := countNamespaces(d); m > 0 {
							n += m
						} else {
							n++
						}
					}
					return n
				}
			}
			n += countNamespaces(x)
		}
		return n
	case []any:
		n := 0
		for _, x := range t {
			n += countNamespaces(x)
		}
		return n
	}
	return 0
}

// pattern returns blocks 512-byte blocks each carrying its number, as
// kernel-peer's kernel-host.sh and initiator-target.sh write them.
func pattern(blocks int) []byte {
	var b bytes.Buffer
	b.Grow(blocks * 512)
	for i := 0; i < blocks; i++ {
		fmt.Fprintf(&b, "kpeer-pattern blk %08d %0484d\n", i, i)
	}
	return b.Bytes()
}

// firstDiff describes where got and want first differ.
func firstDiff(got, want []byte, blk int) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			s := i / blk * blk
			e := min(s+40, len(got), len(want))
			return fmt.Sprintf("first difference at byte %d (block %d): got %q, want %q", i, i/blk, got[s:e], want[s:e])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	return "equal"
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}

// countingDialer wraps a dialer and records the opcode and data length of
// every command submitted on an I/O queue, so the run can check how the
// initiator split a transfer.
type countingDialer struct {
	fabrics.Dialer
	mu   sync.Mutex
	cmds cmdLog
}

// cmdLog is what countingDialer saw.
type cmdLog []struct {
	op  nvme.IOOpcode
	len int
}

func (l cmdLog) count(op nvme.IOOpcode) (n int) {
	for _, c := range l {
		if c.op == op {
			n++
		}
	}
	return n
}

func (l cmdLog) largest(op nvme.IOOpcode) (n int) {
	for _, c := range l {
		if c.op == op {
			n = max(n, c.len)
		}
	}
	return n
}

func (l cmdLog) total(op nvme.IOOpcode) (n int) {
	for _, c := range l {
		if c.op == op {
			n += c.len
		}
	}
	return n
}

func (d *countingDialer) reset() {
	d.mu.Lock()
	d.cmds = nil
	d.mu.Unlock()
}

func (d *countingDialer) take() cmdLog {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.cmds
	d.cmds = nil
	return l
}

// Dial implements fabrics.Dialer.
func (d *countingDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	q, err := d.Dialer.Dial(ctx, addr, p)
	if err != nil || p.QID == 0 {
		return q, err
	}
	return &countingQueue{HostQueue: q, d: d}, nil
}

type countingQueue struct {
	fabrics.HostQueue
	d *countingDialer
}

// Submit implements fabrics.HostQueue.
func (q *countingQueue) Submit(cmd *fabrics.HostCommand) error {
	q.d.mu.Lock()
	q.d.cmds = append(q.d.cmds, struct {
		op  nvme.IOOpcode
		len int
	}{nvme.IOOpcode(cmd.SQE[0]), len(cmd.Data)})
	q.d.mu.Unlock()
	return q.HostQueue.Submit(cmd)
}
