package hostcli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/target/server"
)

// selftestNQN is the subsystem of nvmetd's embedded default, which the
// self-test serves.
const selftestNQN = server.DefaultNQN

func selftestFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "transport", Aliases: []string{"t"}, Value: transportRDMA,
			Usage: "`TRANSPORT`: rdma (soft RoCE over loopback: no root needed there, CAP_NET_RAW on other addresses) or loop (in-memory)"},
		&cli.StringFlag{Name: "size", Value: "64MiB", Usage: "`BYTES` of data to write and verify (units KiB, MiB, GiB)"},
		&cli.DurationFlag{Name: "seconds", Value: 60 * time.Second,
			Usage: "stop issuing I/O after `DURATION` (what was written is still verified)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "`SEED` of the data pattern and I/O sizes"},
		&cli.IntFlag{Name: "queue-depth", Value: 8, Usage: "`N` I/Os in flight"},
		&cli.StringFlag{Name: "target-addr", Value: "127.0.0.1", Usage: "`ADDRESS` of the in-process target's port"},
		&cli.StringFlag{Name: "host-addr", Value: "127.0.0.2", Usage: "local `ADDRESS` of the initiator's RDMA device (rdma)"},
		providerFlag(),
		deviceFlag(),
	}
}

// selftestConfig configures runSelftest.
type selftestConfig struct {
	Transport  string
	Size       int64
	Duration   time.Duration
	Seed       uint64
	QueueDepth int
	TargetAddr netip.Addr
	HostAddr   netip.Addr
	// Provider and Device select the RDMA devices of both sides (rdma).
	Provider, Device string
}

func cmdSelftest(c *cli.Context) error {
	size, err := configfs.ParseSize(c.String("size"))
	if err != nil || size < 1<<20 {
		return fmt.Errorf("--size %q: want at least 1MiB", c.String("size"))
	}
	cfg := selftestConfig{
		Transport:  c.String("transport"),
		Size:       size,
		Duration:   c.Duration("seconds"),
		Seed:       c.Uint64("seed"),
		QueueDepth: c.Int("queue-depth"),
		Provider:   c.String("provider"),
		Device:     c.String("device"),
	}
	if cfg.TargetAddr, err = netip.ParseAddr(c.String("target-addr")); err != nil || cfg.TargetAddr.Zone() != "" {
		return fmt.Errorf("--target-addr %q is not an IP address", c.String("target-addr"))
	}
	if cfg.HostAddr, err = netip.ParseAddr(c.String("host-addr")); err != nil || cfg.HostAddr.Zone() != "" {
		return fmt.Errorf("--host-addr %q is not an IP address", c.String("host-addr"))
	}
	cfg.TargetAddr, cfg.HostAddr = cfg.TargetAddr.Unmap(), cfg.HostAddr.Unmap()
	if cfg.TargetAddr.Is4() != cfg.HostAddr.Is4() {
		return fmt.Errorf("--target-addr %s and --host-addr %s: give two addresses of one family", cfg.TargetAddr, cfg.HostAddr)
	}
	if cfg.Transport == transportRDMA {
		if err := (connectArgs{Provider: cfg.Provider, Device: cfg.Device}).checkProvider(); err != nil {
			return err
		}
	}
	if cfg.QueueDepth < 1 || cfg.QueueDepth > 256 {
		return fmt.Errorf("--queue-depth %d: want 1 to 256", cfg.QueueDepth)
	}
	if cfg.Duration <= 0 {
		return fmt.Errorf("--seconds %v: must be positive", cfg.Duration)
	}
	return runSelftest(c.Context, cfg, c.App.Writer, newLogger(c, "nvmeof.selftest"))
}

// runSelftest starts the target in-process, connects to it and runs the
// verified workload on every namespace.
func runSelftest(ctx context.Context, cfg selftestConfig, w io.Writer, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var net *loop.Network
	switch cfg.Transport {
	case transportRDMA:
	case transportLoop:
		net = loop.NewNetwork()
	default:
		return fmt.Errorf("--transport %q: want rdma or loop", cfg.Transport)
	}
	// nvmetd's embedded default, on the self-test's transport and address,
	// with a namespace large enough for the test.
	tree, err := configfs.ParseHCL(server.DefaultConfig, "(embedded default)")
	if err != nil {
		return err
	}
	port := tree.Ports[0]
	port.Trtype, port.Traddr, port.Adrfam = cfg.Transport, cfg.TargetAddr.String(), ""
	if cfg.Transport == transportLoop {
		port.Provider = ""
	} else if cfg.Provider != "" {
		port.Provider, port.Device = cfg.Provider, cfg.Device
	}
	ns := tree.Subsystems[0].Namespaces[0]
	ns.Size = max(ns.Size, cfg.Size)
	if err := tree.Validate(); err != nil {
		return err
	}
	srv := server.New(server.Options{Logger: log, LoopNetwork: net})
	defer srv.Close()
	if err := srv.Apply(tree); err != nil {
		return selftestOpenError("target", cfg.TargetAddr, err)
	}
	addr := fabrics.Address{Transport: cfg.Transport, Addr: cfg.TargetAddr, ServiceID: fabrics.DefaultServiceID}
	var dialer fabrics.Dialer
	hostDesc := "in-process"
	if net != nil {
		dialer = loop.Dialer{Net: net}
	} else {
		dev, err := provider.Open(provider.Config{Provider: cfg.Provider, Device: cfg.Device, Addr: cfg.HostAddr, Logger: log.Named("rdma")})
		if err != nil {
			return selftestOpenError("initiator", cfg.HostAddr, err)
		}
		defer dev.Close()
		dialer = nvmerdma.NewDialer(nvmerdma.HostConfig{Device: dev, Logger: log.Named("rdma")})
		hostDesc = cfg.HostAddr.String() + " (" + provider.Describe(dev).String() + ")"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ctrl, err := initiator.Connect(cctx, dialer, addr, initiator.Options{SubsystemNQN: selftestNQN, Logger: log})
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %s", describeConnectError(err, connectArgs{Transport: cfg.Transport,
			Traddr: cfg.TargetAddr.String(), Trsvcid: "4420", Timeout: 30 * time.Second}, &transport{host: hostDesc}))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ctrl.Disconnect(dctx)
	}()
	fmt.Fprintf(w, "nvmeof selftest: %s on %s %s:%d, host %s\n", selftestNQN, cfg.Transport, cfg.TargetAddr,
		fabrics.DefaultServiceID, hostDesc)
	fmt.Fprintf(w, "controller: cntlid %d, %d I/O queues of %d entries, max transfer %s\n",
		ctrl.CntlID(), ctrl.NumIOQueues(), ctrl.QueueSize(), sizeStr(int64(ctrl.MaxTransfer())))
	nss := ctrl.Namespaces()
	if len(nss) == 0 {
		return errors.New("the subsystem has no namespace")
	}
	deadline := time.Now().Add(cfg.Duration)
	for _, ns := range nss {
		fmt.Fprintf(w, "namespace %d: %s (%d blocks of %d bytes)\n", ns.NSID(), sizeStr(ns.Size()), ns.Blocks(), ns.BlockSize())
		wl := newWorkload(ns, cfg, deadline)
		if err := wl.run(w); err != nil {
			return fmt.Errorf("namespace %d: %w", ns.NSID(), err)
		}
	}
	fmt.Fprintln(w, "selftest passed")
	return nil
}

// selftestOpenError explains a target or initiator that could not start.
func selftestOpenError(what string, addr netip.Addr, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("%s: cannot open the soft RoCE device on %s: run as root (CAP_NET_RAW) or use --transport loop", what, addr)
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("%s: %s is taken by another soft RoCE device (is nvmetd running?): pass --target-addr/--host-addr or use --transport loop", what, addr)
	}
	return fmt.Errorf("%s: %s", what, trimPrefixes(err.Error()))
}

// sizeStr formats a byte count in binary units.
func sizeStr(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// The workload's unit: data is generated, tracked and verified in 4 KiB
// units (or the block size, if larger).
const (
	unitSize   = 4096
	maxIO      = 1 << 20
	genUnknown = 0   // never written: content not checked
	genZero    = 255 // trimmed or zeroed: must read back as zeroes
)

// nsDevice is the namespace as the workload uses it (*initiator.Namespace).
type nsDevice interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Flush() error
	Trim(off, n int64) error
	WriteZeroes(off, n int64) error
	Size() int64
	BlockSize() int
	NSID() uint32
	Identify() nvme.IdentifyNamespace
}

// workload writes and verifies one namespace.
type workload struct {
	ns       nsDevice
	cfg      selftestConfig
	deadline time.Time
	unit     int64
	region   int64
	gens     []uint8 // per unit: the generation last written
	rng      *rand.Rand
}

func newWorkload(ns nsDevice, cfg selftestConfig, deadline time.Time) *workload {
	unit := int64(max(unitSize, ns.BlockSize()))
	region := min(cfg.Size, ns.Size()) / unit * unit
	return &workload{ns: ns, cfg: cfg, deadline: deadline, unit: unit, region: region,
		gens: make([]uint8, region/unit), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(ns.NSID())))}
}

// extent is one I/O: a byte range of whole units.
type extent struct{ off, len int64 }

// partition cuts [0, region) into extents of random sizes (1 unit to
// 1 MiB) in random order.
func (wl *workload) partition() []extent {
	var out []extent
	maxUnits := max(maxIO/wl.unit, 1)
	for off := int64(0); off < wl.region; {
		n := min((1+wl.rng.Int64N(maxUnits))*wl.unit, wl.region-off)
		out = append(out, extent{off, n})
		off += n
	}
	wl.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// fill writes the pattern of unit u at generation g into p (one unit):
// a header (unit, generation, seed) then a xorshift stream.
func (wl *workload) fill(p []byte, u int64, g uint8) {
	x := wl.cfg.Seed ^ uint64(u)*0x9e3779b97f4a7c15 ^ uint64(g)<<56 ^ uint64(wl.ns.NSID())<<48
	binary.LittleEndian.PutUint64(p[0:], uint64(u))
	binary.LittleEndian.PutUint64(p[8:], uint64(g))
	for i := 16; i+8 <= len(p); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(p[i:], x)
	}
}

// stats counts one phase's I/O.
type stats struct {
	bytes, ios atomic.Int64
	start      time.Time
	elapsed    time.Duration
}

func (s *stats) String() string {
	sec := s.elapsed.Seconds()
	if sec <= 0 {
		sec = 1e-9
	}
	return fmt.Sprintf("%s in %d I/Os, %.1f MB/s, %.0f IOPS", sizeStr(s.bytes.Load()), s.ios.Load(),
		float64(s.bytes.Load())/sec/1e6, float64(s.ios.Load())/sec)
}

// errMismatch is wrapped by verification failures.
var errMismatch = errors.New("data mismatch")

// parallel runs fn on the extents with QueueDepth workers, each with its
// own buffer, stopping at the deadline (unless all is set) or the first
// error.
func (wl *workload) parallel(exts []extent, all bool, fn func(buf []byte, e extent) error) (*stats, error) {
	st := &stats{start: time.Now()}
	ch := make(chan extent)
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	stop := make(chan struct{})
	for range wl.cfg.QueueDepth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, maxIO+wl.unit)
			for e := range ch {
				if err := fn(buf[:e.len], e); err != nil {
					once.Do(func() { firstErr = err; close(stop) })
					return
				}
				st.bytes.Add(e.len)
				st.ios.Add(1)
			}
		}()
	}
feed:
	for _, e := range exts {
		if !all && time.Now().After(wl.deadline) {
			break
		}
		select {
		case ch <- e:
		case <-stop:
			break feed
		}
	}
	close(ch)
	wg.Wait()
	st.elapsed = time.Since(st.start)
	return st, firstErr
}

// chunks cuts [off, off+n) into extents of at most maxIO bytes.
func chunks(off, n int64) []extent {
	var out []extent
	for end := off + n; off < end; off += maxIO {
		out = append(out, extent{off, min(int64(maxIO), end-off)})
	}
	return out
}

// writeExtent writes generation g over e and records it.
func (wl *workload) writeExtent(buf []byte, e extent, g uint8) error {
	for i := int64(0); i < e.len; i += wl.unit {
		wl.fill(buf[i:i+wl.unit], (e.off+i)/wl.unit, g)
	}
	if _, err := wl.ns.WriteAt(buf, e.off); err != nil {
		return fmt.Errorf("write of %d bytes at %d: %w", e.len, e.off, err)
	}
	for i := int64(0); i < e.len; i += wl.unit {
		wl.gens[(e.off+i)/wl.unit] = g
	}
	return nil
}

// verifyExtent reads e and checks every unit of known content.
func (wl *workload) verifyExtent(buf []byte, e extent) error {
	if _, err := wl.ns.ReadAt(buf, e.off); err != nil {
		return fmt.Errorf("read of %d bytes at %d: %w", e.len, e.off, err)
	}
	want := make([]byte, wl.unit)
	for i := int64(0); i < e.len; i += wl.unit {
		u := (e.off + i) / wl.unit
		got := buf[i : i+wl.unit]
		switch g := wl.gens[u]; g {
		case genUnknown:
		case genZero:
			if j := bytes.IndexFunc(got, func(r rune) bool { return r != 0 }); j >= 0 {
				return fmt.Errorf("%w: byte %d (unit %d) should read as zero after trim/write zeroes", errMismatch, e.off+i+int64(j), u)
			}
		default:
			wl.fill(want, u, g)
			if !bytes.Equal(got, want) {
				j := 0
				for j < len(got) && got[j] == want[j] {
					j++
				}
				return fmt.Errorf("%w at byte %d (unit %d, generation %d): read %#02x, wrote %#02x",
					errMismatch, e.off+i+int64(j), u, g, got[j], want[j])
			}
		}
	}
	return nil
}

// run writes, flushes, reads back, trims, rewrites and verifies.
func (wl *workload) run(w io.Writer) error {
	if wl.region == 0 {
		return errors.New("namespace too small")
	}
	// 1. Fill the region in random-sized writes in random order.
	st, err := wl.parallel(wl.partition(), false, func(buf []byte, e extent) error { return wl.writeExtent(buf, e, 1) })
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  write:   %s\n", st)
	if err := wl.ns.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Fprintln(w, "  flush:   ok")
	// 2. Read back in other random sizes and order.
	st, err = wl.parallel(wl.partition(), false, wl.verifyExtent)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "  read:    %s, verified\n", st)
	// 3. Deallocate a range: it must read back as zeroes (with Write
	// Zeroes when the namespace does not promise that for deallocated
	// blocks, DLFEAT).
	toff := wl.region / 4 / (1 << 20) * (1 << 20)
	tlen := max(min(8<<20, wl.region/8)/(1<<20)*(1<<20), wl.unit)
	tlen = min(tlen, wl.region-toff)
	if err := wl.ns.Trim(toff, tlen); err != nil {
		return fmt.Errorf("trim of %d bytes at %d: %w", tlen, toff, err)
	}
	how := ""
	if wl.ns.Identify().DLFEAT()&7 != 1 {
		if err := wl.ns.WriteZeroes(toff, tlen); err != nil {
			return fmt.Errorf("write zeroes of %d bytes at %d: %w", tlen, toff, err)
		}
		how = " (after write zeroes: DLFEAT does not promise zeroes for deallocated blocks)"
	}
	for u := toff / wl.unit; u < (toff+tlen)/wl.unit; u++ {
		wl.gens[u] = genZero
	}
	if _, err := wl.parallel(chunks(toff, tlen), true, wl.verifyExtent); err != nil {
		return err
	}
	fmt.Fprintf(w, "  trim:    %s at %s, reads back as zeroes%s\n", sizeStr(tlen), sizeStr(toff), how)
	// 4. Overwrite about a quarter of the region with a new generation.
	var over []extent
	for _, e := range wl.partition() {
		if wl.rng.IntN(4) == 0 {
			over = append(over, e)
		}
	}
	st, err = wl.parallel(over, false, func(buf []byte, e extent) error { return wl.writeExtent(buf, e, 2) })
	if err != nil {
		return err
	}
	if err := wl.ns.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Fprintf(w, "  rewrite: %s\n", st)
	// 5. Verify everything, in 1 MiB reads.
	st, err = wl.parallel(chunks(0, wl.region), true, wl.verifyExtent)
	if err != nil {
		return err
	}
	known := 0
	for _, g := range wl.gens {
		if g != genUnknown {
			known++
		}
	}
	fmt.Fprintf(w, "  verify:  %s: OK (%s checked, seed %d)\n", st, sizeStr(int64(known)*wl.unit), wl.cfg.Seed)
	if time.Now().After(wl.deadline) {
		fmt.Fprintf(w, "  note:    stopped issuing I/O at the --seconds limit; %s of %s written\n",
			sizeStr(int64(known)*wl.unit), sizeStr(wl.region))
	}
	return nil
}
