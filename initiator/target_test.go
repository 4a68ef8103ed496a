package initiator

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// End-to-end tests against the real target package over the loop
// transport.

const tgtNQN = "nqn.2026-11.io.nvmeof:initiator-e2e"

type tgtFixture struct {
	tgt  *target.Target
	net  *loop.Network
	addr fabrics.Address
}

func newTgtFixture(t testing.TB, nsSize int64) *tgtFixture {
	t.Helper()
	return newTgtFixtureFor(t, nsSize, tgtNQN, testHostNQN, nil)
}

// newTgtFixtureFor serves subsystem nqn, open to host, with one namespace
// of nsSize bytes; wrap, if set, wraps the listener the target serves.
func newTgtFixtureFor(t testing.TB, nsSize int64, nqn, host string, wrap func(fabrics.Listener) fabrics.Listener) *tgtFixture {
	t.Helper()
	f := &tgtFixture{net: loop.NewNetwork()}
	f.addr = fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
	f.tgt = target.New(target.Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.tgt.AddSubsystem(target.SubsystemConfig{NQN: nqn, Serial: "E2E0001", AllowedHosts: []string{host}}))
	mem, err := bdev.NewMemory(nsSize, 512)
	must(err)
	must(f.tgt.AddNamespace(nqn, target.NamespaceConfig{NSID: 1, Device: mem,
		NGUID: [16]byte{0xaa, 1}, EUI64: [8]byte{0xbb, 2}, UUID: [16]byte{0xcc, 3}}))
	must(f.tgt.AddPort(target.PortConfig{ID: 1, Address: f.addr, InlineDataSize: 8192, Subsystems: []string{nqn}}))
	ln, err := f.net.Listen(f.addr)
	must(err)
	var l fabrics.Listener = ln
	if wrap != nil {
		l = wrap(l)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.tgt.Serve(ctx, 1, l) }()
	t.Cleanup(func() {
		cancel()
		<-served
		_ = f.tgt.Close()
	})
	return f
}

func (f *tgtFixture) connect(t testing.TB, o Options) *Controller {
	t.Helper()
	if o.SubsystemNQN == "" {
		o.SubsystemNQN = tgtNQN
	}
	if o.HostNQN == "" {
		o.HostNQN = testHostNQN
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, loop.Dialer{Net: f.net}, f.addr, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTargetReadWrite(t *testing.T) {
	f := newTgtFixture(t, 32<<20)
	c := f.connect(t, Options{})
	if c.State() != StateLive || c.NumIOQueues() < 1 {
		t.Fatalf("state %v, %d I/O queues", c.State(), c.NumIOQueues())
	}
	id := c.IdentifyData()
	if id.SUBNQN() != tgtNQN || id.SN() != "E2E0001" {
		t.Errorf("Identify: subnqn %q sn %q", id.SUBNQN(), id.SN())
	}
	t.Logf("cntlid %d, %d I/O queues of %d, MDTS %d (max transfer %d), kato %v",
		c.CntlID(), c.NumIOQueues(), c.QueueSize(), id.MDTS(), c.MaxTransfer(), c.KeepAliveTimeout())
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Size() != 32<<20 || ns.BlockSize() != 512 {
		t.Fatalf("size %d block %d", ns.Size(), ns.BlockSize())
	}
	if ns.NGUID() != [16]byte{0xaa, 1} || ns.UUID() != [16]byte{0xcc, 3} || ns.EUI64() != [8]byte{0xbb, 2} {
		t.Errorf("identifiers NGUID %x UUID %x EUI64 %x", ns.NGUID(), ns.UUID(), ns.EUI64())
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{512, 4096, 16 << 10, 128 << 10, 1 << 20, 1<<20 + 512, 4 << 20} {
		for range 3 {
			off := int64(rng.IntN(int(ns.Size())-size)) &^ 511
			w := make([]byte, size)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			if _, err := ns.WriteAt(w, off); err != nil {
				t.Fatalf("WriteAt(%d @%d): %v", size, off, err)
			}
			r := make([]byte, size)
			if _, err := ns.ReadAt(r, off); err != nil {
				t.Fatalf("ReadAt(%d @%d): %v", size, off, err)
			}
			if !bytes.Equal(r, w) {
				t.Fatalf("mismatch at size %d offset %d", size, off)
			}
		}
	}
	if err := ns.Flush(); err != nil {
		t.Fatal(err)
	}

	// Trim, then read zeroes; Write Zeroes likewise.
	ones := bytes.Repeat([]byte{0xff}, 1<<20)
	if _, err := ns.WriteAt(ones, 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Trim(64<<10, 128<<10); err != nil {
		t.Fatal(err)
	}
	if err := ns.WriteZeroes(512<<10, 256<<10); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 1<<20)
	if _, err := ns.ReadAt(r, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range r {
		zero := (i >= 64<<10 && i < 192<<10) || (i >= 512<<10 && i < 768<<10)
		if (b == 0) != zero {
			t.Fatalf("byte %d = %#x after trim/write zeroes", i, b)
		}
	}

	// Admin helpers.
	ctx := context.Background()
	if _, err := c.SMARTLog(ctx); err != nil {
		t.Errorf("SMARTLog: %v", err)
	}
	if v, err := c.PropertyGet(ctx, fabrics.PropCSTS); err != nil || !fabrics.CSTS(v).RDY() {
		t.Errorf("CSTS %#x %v", v, err)
	}
	if _, err := c.GetFeature(ctx, nvme.FeatNumberOfQueues, 0); err != nil {
		t.Errorf("Get Features: %v", err)
	}
	// A read beyond the namespace's end, sent anyway, fails with a status.
	var cdw [64]byte
	ns.fill(&cdw, nvme.IORead, ns.Blocks(), 1)
	err = c.ioSync(&cdw, make([]byte, 512), fabrics.DirCtrlToHost, "Read")
	var ne *nvme.Error
	if !errors.As(err, &ne) || ne.Status != nvme.StatusLBAOutOfRange {
		t.Errorf("read past the end: %v", err)
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect: %v", err)
	}
}

func TestTargetDiscovery(t *testing.T) {
	f := newTgtFixture(t, 1<<20)
	entries, err := Discover(context.Background(), loop.Dialer{Net: f.net}, f.addr, Options{HostNQN: testHostNQN})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range entries {
		t.Logf("entry: %v %v %s %q %q portid %d", e.TRType, e.SubType, e.SubNQN, e.TRADDR, e.TRSVCID, e.PortID)
		if e.SubNQN == tgtNQN {
			found = true
			if e.SubType != fabrics.SubTypeNVM || e.PortID != 1 {
				t.Errorf("entry %+v", e)
			}
		}
	}
	if !found {
		t.Errorf("subsystem %s not in %d discovery entries", tgtNQN, len(entries))
	}
}

func TestTargetAsyncEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTgtFixture(t, 1<<20)
		events := make(chan AsyncEvent, 4)
		c := f.connect(t, Options{OnAsyncEvent: func(ev AsyncEvent) { events <- ev }})
		synctest.Wait() // the AER has reached the target
		mem, err := bdev.NewMemory(2<<20, 512)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.tgt.AddNamespace(tgtNQN, target.NamespaceConfig{NSID: 2, Device: mem}); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-events:
			if ev.Event != nvme.AENNamespaceChanged {
				t.Errorf("event %v", ev.Event)
			}
			t.Logf("event %v changed %v", ev.Event, ev.ChangedNSIDs)
		case <-time.After(5 * time.Second):
			t.Fatal("no asynchronous event")
		}
		ns, err := c.Namespace(2)
		if err != nil {
			t.Fatal(err)
		}
		if ns.Size() != 2<<20 {
			t.Errorf("size %d", ns.Size())
		}
		w := bytes.Repeat([]byte{9}, 4096)
		if _, err := ns.WriteAt(w, 4096); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTargetConnectErrors(t *testing.T) {
	f := newTgtFixture(t, 1<<20)
	d := loop.Dialer{Net: f.net}
	_, err := Connect(context.Background(), d, f.addr, Options{SubsystemNQN: "nqn.2026-11.io.nvmeof:absent", HostNQN: testHostNQN})
	var ce *ConnectError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "unknown subsystem") {
		t.Errorf("unknown NQN: %v", err)
	}
	t.Log(err)
	_, err = Connect(context.Background(), d, f.addr, Options{SubsystemNQN: tgtNQN, HostNQN: "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"})
	if !errors.As(err, &ce) || ce.Status != fabrics.StatusConnectInvalidHost || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("host not allowed: %v", err)
	}
	t.Log(err)
}

func BenchmarkTargetReadAt4K(b *testing.B) {
	f := newTgtFixture(b, 16<<20)
	c := f.connect(b, Options{})
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	if _, err := ns.WriteAt(make([]byte, 16<<20), 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(4096)
	for i := 0; b.Loop(); i++ {
		if _, err := ns.ReadAt(buf, int64(i%4096)*4096); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTargetKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTgtFixture(t, 1<<20)
		c := f.connect(t, Options{KeepAliveTimeout: 300 * time.Millisecond})
		// Idle for several KATOs: keep-alive keeps the controller alive.
		time.Sleep(1 * time.Second) // the bubble's clock
		synctest.Wait()
		if c.State() != StateLive || c.CntlID() != 1 {
			t.Fatalf("state %v cntlid %d after idling", c.State(), c.CntlID())
		}
		ns, _ := c.Namespace(1)
		if _, err := ns.ReadAt(make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		if c.CntlID() != 1 {
			t.Errorf("reconnected (cntlid %d): keep-alive did not keep the association", c.CntlID())
		}
	})
}

func TestTargetReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTgtFixture(t, 1<<20)
		c := f.connect(t, Options{ReconnectDelay: 50 * time.Millisecond})
		ns, _ := c.Namespace(1)
		w := bytes.Repeat([]byte{5}, 8192)
		if _, err := ns.WriteAt(w, 0); err != nil {
			t.Fatal(err)
		}
		// The admin queue fails under the host (as a dropped connection
		// would): the outstanding Asynchronous Event Request completes with
		// a transport error and the host reconnects.
		_ = c.cur.Load().admin.hq.Close()
		r := make([]byte, 8192)
		if _, err := ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
			t.Fatalf("read across the reconnect: %v", err)
		}
		waitFor(t, "a new association", func() bool { return c.CntlID() != 1 })
		if c.State() != StateLive || c.CntlID() == 1 {
			t.Errorf("state %v cntlid %d: no new association", c.State(), c.CntlID())
		}
	})
}

// A namespace added while the host is disconnected raises no notice the
// host can receive: the rescan after the reconnect finds it and the host
// reports it as a Namespace Attribute Changed event marked Rescan.
func TestTargetReconnectReportsMissedNamespaceChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTgtFixture(t, 1<<20)
		events := make(chan AsyncEvent, 4)
		c := f.connect(t, Options{ReconnectDelay: 50 * time.Millisecond, OnAsyncEvent: func(ev AsyncEvent) { events <- ev }})
		_ = c.cur.Load().admin.hq.Close()
		synctest.Wait() // the host waits out its reconnect delay; the target has dropped the controller
		if n := len(f.tgt.Controllers()); n != 0 {
			t.Fatalf("%d controllers left on the target", n)
		}
		mem, err := bdev.NewMemory(1<<20, 512)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.tgt.AddNamespace(tgtNQN, target.NamespaceConfig{NSID: 2, Device: mem}); err != nil {
			t.Fatal(err)
		}
		var ev AsyncEvent
		select {
		case ev = <-events:
		case <-time.After(time.Minute):
			t.Fatal("no event after the reconnect")
		}
		if !ev.Rescan || ev.Event != nvme.AENNamespaceChanged || len(ev.ChangedNSIDs) != 1 || ev.ChangedNSIDs[0] != 2 {
			t.Errorf("event %v rescan %v nsids %v, want the namespace change of NSID 2 found by the rescan", ev.Event, ev.Rescan, ev.ChangedNSIDs)
		}
		if _, err := c.Namespace(2); err != nil {
			t.Errorf("namespace 2 after the reconnect: %v", err)
		}
		// The association made by the reconnect reports nothing else.
		synctest.Wait()
		select {
		case ev := <-events:
			t.Errorf("second event %v %v", ev.Event, ev.ChangedNSIDs)
		default:
		}
	})
}
