package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

const testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"

func testOpts() Options {
	return Options{
		SubsystemNQN:   fakeNQN,
		HostNQN:        testHostNQN,
		CommandTimeout: 5 * time.Second,
		ReconnectDelay: 50 * time.Millisecond,
	}
}

func connectFake(t testing.TB, ft *fakeTarget, o Options) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, ft.dialer(), ft.addr, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestConnectIdentify(t *testing.T) {
	ft := newFakeTarget(t, 16<<20)
	c := connectFake(t, ft, testOpts())
	if c.State() != StateLive {
		t.Fatalf("state %v", c.State())
	}
	if c.CntlID() != 1 {
		t.Errorf("cntlid %d, want 1", c.CntlID())
	}
	if got, want := c.NumIOQueues(), min(4, DefaultNrIOQueuesForTest()); got != want {
		t.Errorf("I/O queues %d, want %d", got, want)
	}
	if c.QueueSize() != 128 {
		t.Errorf("queue size %d, want 128", c.QueueSize())
	}
	if c.MaxTransfer() != 128<<10 {
		t.Errorf("max transfer %d, want %d (MDTS 5)", c.MaxTransfer(), 128<<10)
	}
	if c.KeepAliveTimeout() != DefaultKeepAliveTimeout {
		t.Errorf("kato %v", c.KeepAliveTimeout())
	}
	if c.VS() != nvme.Version1_3 || c.CAP().MQES() != 127 {
		t.Errorf("VS %#x CAP %#x", c.VS(), uint64(c.CAP()))
	}
	if got := fabrics.CC(c.cur.Load().cc); !got.EN() || got.IOSQES() != 6 || got.IOCQES() != 4 || got.CSS() != 0 {
		t.Errorf("CC %#x", uint32(got))
	}
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Size() != 16<<20 || ns.BlockSize() != 512 || ns.Blocks() != 32768 {
		t.Errorf("size %d bs %d blocks %d", ns.Size(), ns.BlockSize(), ns.Blocks())
	}
	if ns.NGUID() != [16]byte{0xaa, 1} || ns.UUID() != [16]byte{0x55, 1} {
		t.Errorf("NGUID %x UUID %x", ns.NGUID(), ns.UUID())
	}
	if _, err := c.Namespace(7); !errors.Is(err, ErrNoNamespace) {
		t.Errorf("Namespace(7) = %v", err)
	}
	ctx := context.Background()
	id, err := c.IdentifyController(ctx)
	if err != nil || id.SN() != "FAKE0001" || id.SUBNQN() != fakeNQN {
		t.Errorf("IdentifyController: %v %q %q", err, id.SN(), id.SUBNQN())
	}
	idns, err := c.IdentifyNamespace(ctx, 1)
	if err != nil || idns.NSZE() != 32768 {
		t.Errorf("IdentifyNamespace: %v", err)
	}
	sl, err := c.SMARTLog(ctx)
	if err != nil || sl.CompositeTemperature() != 300 {
		t.Errorf("SMARTLog: %v", err)
	}
	if v, err := c.GetFeature(ctx, nvme.FeatArbitration, 0); err != nil || v != 0x1234 {
		t.Errorf("GetFeature = %#x, %v", v, err)
	}
	if _, err := c.SetFeature(ctx, nvme.FeatTimestamp, 0, false); err == nil {
		t.Error("SetFeature of an unsupported feature succeeded")
	} else if e := nvme.AsError(err); e.Status != nvme.StatusInvalidField {
		t.Errorf("SetFeature error %v", err)
	}
	if v, err := c.PropertyGet(ctx, fabrics.PropCSTS); err != nil || !fabrics.CSTS(v).RDY() {
		t.Errorf("CSTS %#x %v", v, err)
	}
	// The connect sequence: one admin Connect and one per I/O queue.
	if n := ft.count("Connect"); n != 1+c.NumIOQueues() {
		t.Errorf("%d Connects", n)
	}
}

// DefaultNrIOQueuesForTest is the NrIOQueues default on this machine.
func DefaultNrIOQueuesForTest() int {
	o, _ := Options{SubsystemNQN: fakeNQN, HostNQN: testHostNQN}.withDefaults()
	return o.NrIOQueues
}

func TestReadWriteVerify(t *testing.T) {
	ft := newFakeTarget(t, 16<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{512, 4096, 8192, 64 << 10, 128 << 10, 132 << 10, 1 << 20, 4 << 20} {
		for range 3 {
			off := int64(rng.IntN(int(ns.Size())-size)) &^ 511
			w := make([]byte, size)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			if n, err := ns.WriteAt(w, off); err != nil || n != size {
				t.Fatalf("WriteAt(%d @%d) = %d, %v", size, off, n, err)
			}
			r := make([]byte, size)
			if n, err := ns.ReadAt(r, off); err != nil || n != size {
				t.Fatalf("ReadAt(%d @%d) = %d, %v", size, off, n, err)
			}
			if !bytes.Equal(r, w) {
				t.Fatalf("data mismatch at size %d offset %d", size, off)
			}
			if !bytes.Equal(ft.ns[1][off:off+int64(size)], w) {
				t.Fatalf("target data mismatch at size %d offset %d", size, off)
			}
		}
	}
	// 4 MiB at MDTS 128 KiB is 32 commands each way.
	if n := ft.count("Read"); n < 32 {
		t.Errorf("only %d Reads", n)
	}
}

// TestTransferBeyondWindow moves more chunks than ReadAt and WriteAt keep
// in flight (maxWindow): the window must not reuse an entry whose command
// is still outstanding (it used to, and every transfer above 64 × MDTS
// failed).
func TestTransferBeyondWindow(t *testing.T) {
	ft := newFakeTarget(t, 4<<20)
	ft.mdts = 1 // 8 KiB
	o := testOpts()
	o.NrIOQueues = 2
	c := connectFake(t, ft, o)
	ns, _ := c.Namespace(1)
	xfer := c.MaxTransfer()
	if xfer != 8<<10 {
		t.Fatalf("max transfer %d, want 8 KiB", xfer)
	}
	for _, chunks := range []int{maxWindow - 1, maxWindow, maxWindow + 1, 3*maxWindow + 5} {
		size := chunks * xfer
		w := make([]byte, size)
		for i := range w {
			w[i] = byte(i*7 + chunks)
		}
		if n, err := ns.WriteAt(w, 512); err != nil || n != size {
			t.Fatalf("WriteAt of %d chunks = %d, %v", chunks, n, err)
		}
		r := make([]byte, size)
		if n, err := ns.ReadAt(r, 512); err != nil || n != size {
			t.Fatalf("ReadAt of %d chunks = %d, %v", chunks, n, err)
		}
		if !bytes.Equal(r, w) {
			t.Fatalf("%d chunks: data mismatch", chunks)
		}
	}
}

func TestConcurrentIO(t *testing.T) {
	for _, tc := range []struct {
		name      string
		queueSize int
		xfer      int
	}{
		{"default queues", 0, 256 << 10},
		{"small queues, large transfers", MinQueueSize, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentIO(t, tc.queueSize, tc.xfer) })
	}
}

func testConcurrentIO(t *testing.T, queueSize, xfer int) {
	ft := newFakeTarget(t, 16<<20)
	o := testOpts()
	o.QueueSize = queueSize
	c := connectFake(t, ft, o)
	ns, _ := c.Namespace(1)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			base := int64(g) << 20
			w := bytes.Repeat([]byte{byte(g + 1)}, xfer)
			for i := range (1 << 20) / xfer {
				off := base + int64(i)*int64(xfer)
				if _, err := ns.WriteAt(w, off); err != nil {
					t.Error(err)
					return
				}
				r := make([]byte, len(w))
				if _, err := ns.ReadAt(r, off); err != nil || !bytes.Equal(r, w) {
					t.Errorf("goroutine %d: %v or mismatch", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestIOValidation(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"unaligned offset", func() error { _, err := ns.ReadAt(buf, 100); return err }, "multiples of the 512-byte block size"},
		{"unaligned length", func() error { _, err := ns.WriteAt(buf[:100], 0); return err }, "multiples"},
		{"negative offset", func() error { _, err := ns.ReadAt(buf, -512); return err }, "multiples"},
		{"write past end", func() error { _, err := ns.WriteAt(buf, 1<<20-512); return err }, "past the end"},
		{"trim past end", func() error { return ns.Trim(1<<20, 512) }, "past the end"},
		{"write zeroes unaligned", func() error { return ns.WriteZeroes(0, 100) }, "multiple"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	// Reading across the end returns what there is and io.EOF.
	n, err := ns.ReadAt(buf, 1<<20-1024)
	if n != 1024 || err != io.EOF {
		t.Errorf("ReadAt across the end = %d, %v", n, err)
	}
	if n, err := ns.ReadAt(buf, 1<<20); n != 0 || err != io.EOF {
		t.Errorf("ReadAt at the end = %d, %v", n, err)
	}
}

func TestFlushTrimWriteZeroes(t *testing.T) {
	ft := newFakeTarget(t, 4<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	ones := bytes.Repeat([]byte{0xff}, 1<<20)
	if _, err := ns.WriteAt(ones, 0); err != nil {
		t.Fatal(err)
	}
	if err := ns.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Trim(4096, 8192); err != nil {
		t.Fatal(err)
	}
	if err := ns.WriteZeroes(64<<10, 256<<10); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 1<<20)
	if _, err := ns.ReadAt(r, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range r {
		zero := (i >= 4096 && i < 12288) || (i >= 64<<10 && i < 320<<10)
		if (b == 0) != zero {
			t.Fatalf("byte %d = %#x", i, b)
		}
	}
	if ft.count("Flush") != 1 || ft.count("Dataset Management") != 1 || ft.count("Write Zeroes") < 2 {
		t.Errorf("counts: flush %d dsm %d wz %d", ft.count("Flush"), ft.count("Dataset Management"), ft.count("Write Zeroes"))
	}
}

func TestStatusError(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	ft.mu.Lock()
	ft.ns[1] = ft.ns[1][:4096] // the target shrinks behind the host's back
	ft.mu.Unlock()
	_, err := ns.ReadAt(make([]byte, 4096), 8192)
	var ne *nvme.Error
	if !errors.As(err, &ne) || ne.Status != nvme.StatusLBAOutOfRange || !ne.DNR {
		t.Fatalf("error %v, want LBA Out of Range", err)
	}
	if !strings.Contains(err.Error(), "Read nsid 1") {
		t.Errorf("message %q lacks context", err)
	}
}

func TestConnectErrors(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	ft.allowed = map[string]bool{testHostNQN: true}
	ctx := context.Background()

	o := testOpts()
	o.SubsystemNQN = "nqn.2026-01.io.nvmeof:nope"
	_, err := Connect(ctx, ft.dialer(), ft.addr, o)
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Status != fabrics.StatusConnectInvalidParameters {
		t.Fatalf("unknown NQN: %v", err)
	}
	if !strings.Contains(err.Error(), "unknown subsystem nqn.2026-01.io.nvmeof:nope") {
		t.Errorf("unknown NQN message: %v", err)
	}
	if ne := nvme.AsError(err); ne.Status != fabrics.StatusConnectInvalidParameters || !ne.DNR {
		t.Errorf("nvme.Error %v", ne)
	}

	o = testOpts()
	o.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555"
	_, err = Connect(ctx, ft.dialer(), ft.addr, o)
	if !errors.As(err, &ce) || ce.Status != fabrics.StatusConnectInvalidHost {
		t.Fatalf("host not allowed: %v", err)
	}
	if !strings.Contains(err.Error(), "is not allowed to access subsystem "+fakeNQN) {
		t.Errorf("host message: %v", err)
	}
	t.Log(err)

	bad := ft.addr
	bad.ServiceID = 4421
	_, err = Connect(ctx, ft.dialer(), bad, testOpts())
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("unreachable: %v", err)
	}
	t.Log(err)

	o = testOpts()
	o.SubsystemNQN = "not an nqn"
	if _, err := Connect(ctx, ft.dialer(), ft.addr, o); err == nil {
		t.Error("bad NQN accepted")
	}
	o = testOpts()
	o.QueueSize = 4
	if _, err := Connect(ctx, ft.dialer(), ft.addr, o); err == nil {
		t.Error("queue size 4 accepted")
	}
}

func TestDiscover(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	ft.discovery = []fabrics.DiscoveryRecord{
		{TRType: fabrics.TRTypeRDMA, AdrFam: fabrics.AdrFamIPv4, SubType: fabrics.SubTypeNVM, PortID: 1, CntlID: 0xffff, ASQSZ: 32, TRSVCID: "4420", TRADDR: "192.0.2.1", SubNQN: fakeNQN},
		{TRType: fabrics.TRTypeTCP, AdrFam: fabrics.AdrFamIPv4, SubType: fabrics.SubTypeNVM, PortID: 2, CntlID: 0xffff, ASQSZ: 32, TRSVCID: "4421", TRADDR: "192.0.2.2", SubNQN: "nqn.2026-01.io.nvmeof:other"},
	}
	ft.genctr = 7
	o := testOpts()
	o.SubsystemNQN = ""
	entries, err := Discover(context.Background(), ft.dialer(), ft.addr, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].SubNQN != fakeNQN || entries[1].TRSVCID != "4421" {
		t.Fatalf("entries %+v", entries)
	}
	a, err := entries[0].Address()
	if err != nil || a.Transport != fabrics.TransportRDMA || a.Addr.String() != "192.0.2.1" || a.ServiceID != 4420 {
		t.Errorf("Address() = %v, %v", a, err)
	}
	// No keep-alive for a discovery controller, no I/O queues.
	if n := ft.count("Connect"); n != 1 {
		t.Errorf("%d Connects for discovery", n)
	}
	if ft.count("Keep Alive") != 0 {
		t.Error("keep-alive on a discovery controller")
	}
}

func TestDiscoverLargeLog(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	ft.mdts = 0 // admin transfers limited by the transport (1 MiB) only
	for i := range 1100 {
		ft.discovery = append(ft.discovery, fabrics.DiscoveryRecord{TRType: fabrics.TRTypeTCP, AdrFam: fabrics.AdrFamIPv4, SubType: fabrics.SubTypeNVM, PortID: uint16(i), TRSVCID: "4420", TRADDR: "192.0.2.1", SubNQN: fakeNQN})
	}
	entries, err := Discover(context.Background(), ft.dialer(), ft.addr, Options{HostNQN: testHostNQN})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1100 || entries[1099].PortID != 1099 {
		t.Fatalf("%d entries", len(entries))
	}
}

func TestAsyncEventNamespaceAdded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		events := make(chan AsyncEvent, 4)
		o := testOpts()
		o.OnAsyncEvent = func(ev AsyncEvent) { events <- ev }
		c := connectFake(t, ft, o)
		if len(c.Namespaces()) != 1 {
			t.Fatalf("%d namespaces", len(c.Namespaces()))
		}
		waitFor(t, "AER outstanding", func() bool { return ft.count("Asynchronous Event Request") == 1 })
		ft.addNamespace(2, 2<<20)
		select {
		case ev := <-events:
			if ev.Event != nvme.AENNamespaceChanged || len(ev.ChangedNSIDs) != 1 || ev.ChangedNSIDs[0] != 2 {
				t.Errorf("event %+v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		ns, err := c.Namespace(2)
		if err != nil {
			t.Fatal(err)
		}
		if ns.Size() != 2<<20 {
			t.Errorf("size %d", ns.Size())
		}
		// The host re-arms the AER.
		waitFor(t, "AER re-armed", func() bool { return ft.count("Asynchronous Event Request") == 2 })
	})
}

// waitFor waits, in a synctest bubble, until cond holds: it lets every
// goroutine of the bubble run until blocked, then moves the bubble's
// clock on to the next timer (reconnect delays, timeouts) and looks
// again, for at most a minute of the bubble's time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		synctest.Wait()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // the bubble's clock: no real time passes
	}
}

// oneQueue connects to a fake target of 1 MiB with one I/O queue and the
// given command timeout, and returns namespace 1.
func oneQueue(t *testing.T, timeout time.Duration) (*fakeTarget, Options, *Controller, *Namespace) {
	t.Helper()
	ft := newFakeTarget(t, 1<<20)
	o := testOpts()
	o.CommandTimeout = timeout
	o.NrIOQueues = 1
	c := connectFake(t, ft, o)
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	return ft, o, c, ns
}

func TestCommandTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft, _, c, ns := oneQueue(t, 100*time.Millisecond)
		ft.stallRead.Store(true)
		start := time.Now()
		_, err := ns.ReadAt(make([]byte, 4096), 0)
		var te *TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) || te.Op != "Read" || te.QID != 1 {
			t.Fatalf("error %v, want a Read timeout", err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
			t.Errorf("timed out after %v", d)
		}
		t.Log(err)
		if ft.count("Abort") != 1 {
			t.Errorf("%d Aborts", ft.count("Abort"))
		}
		// The queue is reset: a new Connect for qid 1 with the same controller.
		waitFor(t, "queue reconnected", func() bool { return ft.count("Connect") == 3 })
		if c.State() != StateLive || c.CntlID() != 1 {
			t.Errorf("state %v cntlid %d", c.State(), c.CntlID())
		}
		ft.stallRead.Store(false)
		if _, err := ns.ReadAt(make([]byte, 4096), 0); err != nil {
			t.Fatalf("read after queue reset: %v", err)
		}
	})
}

func TestCommandTimeoutAborted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		ft.abortOK.Store(true)
		o := testOpts()
		o.CommandTimeout = 100 * time.Millisecond
		c := connectFake(t, ft, o)
		ns, _ := c.Namespace(1)
		ft.stallRead.Store(true)
		_, err := ns.ReadAt(make([]byte, 4096), 0)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("error %v", err)
		}
		// The abort worked: no queue reset (a reset would have connected
		// a new queue by the time every goroutine is idle).
		synctest.Wait()
		if n := ft.count("Connect"); n != 1+c.NumIOQueues() {
			t.Errorf("%d Connects: the queue was reset", n)
		}
	})
}

func TestReconnectAfterQueueFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		c := connectFake(t, ft, testOpts())
		ns, _ := c.Namespace(1)
		w := bytes.Repeat([]byte{7}, 4096)
		if _, err := ns.WriteAt(w, 0); err != nil {
			t.Fatal(err)
		}
		ft.killQueues()
		waitFor(t, "reset", func() bool { return c.State() != StateLive })
		// I/O issued while reconnecting waits, then completes.
		r := make([]byte, 4096)
		if _, err := ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
			t.Fatalf("read across reconnect: %v", err)
		}
		if c.State() != StateLive || c.CntlID() != 2 {
			t.Errorf("state %v cntlid %d, want live on a new controller", c.State(), c.CntlID())
		}
		if ns2, err := c.Namespace(1); err != nil || ns2 != ns {
			t.Errorf("namespace handle changed: %v", err)
		}
	})
}

func TestControllerLoss(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	o := testOpts()
	o.CtrlLossTimeout = 200 * time.Millisecond
	c := connectFake(t, ft, o)
	ns, _ := c.Namespace(1)
	ft.unlisten()
	ft.killQueues()
	start := time.Now()
	_, err := ns.ReadAt(make([]byte, 4096), 0)
	if !errors.Is(err, ErrControllerLost) {
		t.Fatalf("error %v, want ErrControllerLost", err)
	}
	t.Log(err, time.Since(start))
	if c.State() != StateDead {
		t.Errorf("state %v", c.State())
	}
	if err := c.Disconnect(context.Background()); err != nil {
		t.Errorf("Disconnect of a dead controller: %v", err)
	}
}

func TestKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		o := testOpts()
		o.KeepAliveTimeout = 200 * time.Millisecond
		c := connectFake(t, ft, o)
		time.Sleep(450 * time.Millisecond) // the bubble's clock
		synctest.Wait()
		if n := ft.count("Keep Alive"); n < 3 || n > 6 {
			t.Errorf("%d keep-alives in 450 ms at KATO 200 ms", n)
		}
		// A keep-alive that is not answered within KATO fails the controller.
		ft.stallKA.Store(true)
		waitFor(t, "recovery", func() bool { return c.State() != StateLive })
		ft.stallKA.Store(false)
		waitFor(t, "reconnect", func() bool { return c.State() == StateLive })
		if c.CntlID() != 2 {
			t.Errorf("cntlid %d", c.CntlID())
		}
	})
}

func TestDisconnect(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	if err := c.Disconnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	cc := fabrics.CC(ft.ctrls[1].cc)
	ft.mu.Unlock()
	if cc.SHN() != fabrics.SHNNormal {
		t.Errorf("CC %#x: no normal shutdown", uint32(cc))
	}
	if _, err := ns.ReadAt(make([]byte, 512), 0); err == nil {
		t.Error("read after Disconnect succeeded")
	}
	if _, err := c.IdentifyController(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("admin after Disconnect: %v", err)
	}
	if err := c.Disconnect(context.Background()); err != nil {
		t.Errorf("second Disconnect: %v", err)
	}
	if c.State() != StateDeleted {
		t.Errorf("state %v", c.State())
	}
}

func TestDefaultHostIdentity(t *testing.T) {
	dir := t.TempDir()
	oldN, oldI := HostNQNFile, HostIDFile
	t.Cleanup(func() { HostNQNFile, HostIDFile = oldN, oldI })
	HostNQNFile = filepath.Join(dir, "hostnqn")
	HostIDFile = filepath.Join(dir, "hostid")

	o, err := Options{SubsystemNQN: fakeNQN}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	o2, _ := Options{SubsystemNQN: fakeNQN}.withDefaults()
	if !strings.HasPrefix(o.HostNQN, fabrics.UUIDNQNPrefix) || o.HostNQN != o2.HostNQN {
		t.Errorf("generated host NQN %q / %q", o.HostNQN, o2.HostNQN)
	}
	if u, _ := fabrics.UUIDFromNQN(o.HostNQN); u != o.HostID {
		t.Errorf("host ID %x does not match the NQN", o.HostID)
	}
	const nqn = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100"
	if err := os.WriteFile(HostNQNFile, []byte(nqn+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(HostIDFile, []byte("00112233-4455-6677-8899-aabbccddeeff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, _ = Options{SubsystemNQN: fakeNQN}.withDefaults()
	if o.HostNQN != nqn || fabrics.FormatUUID(o.HostID) != "00112233-4455-6677-8899-aabbccddeeff" {
		t.Errorf("from files: %q %x", o.HostNQN, o.HostID)
	}
	if o.KeepAliveTimeout != 5*time.Second || o.QueueSize != 128 || o.CtrlLossTimeout != 600*time.Second || o.ReconnectDelay != 10*time.Second || o.CommandTimeout != 30*time.Second {
		t.Errorf("defaults %+v", o)
	}
	if o.maxReconnects() != 60 {
		t.Errorf("max reconnects %d", o.maxReconnects())
	}
	d, _ := Options{SubsystemNQN: fabrics.DiscoveryNQN}.withDefaults()
	if d.KeepAliveTimeout != 0 || d.NrIOQueues != 0 {
		t.Errorf("discovery defaults: kato %v queues %d", d.KeepAliveTimeout, d.NrIOQueues)
	}
	d, _ = Options{SubsystemNQN: fabrics.DiscoveryNQN, Persistent: true}.withDefaults()
	if d.KeepAliveTimeout != 30*time.Second {
		t.Errorf("persistent discovery kato %v", d.KeepAliveTimeout)
	}
	n, _ := Options{SubsystemNQN: fakeNQN, KeepAliveTimeout: -1, CtrlLossTimeout: -1}.withDefaults()
	if n.KeepAliveTimeout != 0 || n.maxReconnects() != -1 {
		t.Errorf("off: kato %v reconnects %d", n.KeepAliveTimeout, n.maxReconnects())
	}
}

func TestReadAtAllocs(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := ns.ReadAt(buf, 8192); err != nil {
			t.Fatal(err)
		}
	})
	// The whole process is counted: the loop transport and the fake
	// target allocate nothing per command either.
	if allocs > 0 {
		t.Errorf("%v allocations per 4 KiB ReadAt", allocs)
	}
}

func BenchmarkReadAt4K(b *testing.B) {
	ft := newFakeTarget(b, 16<<20)
	c := connectFake(b, ft, testOpts())
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(4096)
	for i := 0; b.Loop(); i++ {
		if _, err := ns.ReadAt(buf, int64(i%4096)*4096); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadAt4KParallel(b *testing.B) {
	ft := newFakeTarget(b, 16<<20)
	c := connectFake(b, ft, testOpts())
	ns, _ := c.Namespace(1)
	b.ReportAllocs()
	b.SetBytes(4096)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		i := 0
		for pb.Next() {
			if _, err := ns.ReadAt(buf, int64(i%4096)*4096); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

func TestReconnectUnderLoad(t *testing.T) {
	ft := newFakeTarget(t, 8<<20)
	o := testOpts()
	o.ReconnectDelay = 20 * time.Millisecond
	c := connectFake(t, ft, o)
	ns, _ := c.Namespace(1)
	stop := make(chan struct{})
	progress := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			base := int64(g) << 21
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w := bytes.Repeat([]byte{byte(g*16 + i%16)}, 512<<10)
				off := base + int64(i%4)*(512<<10)
				if _, err := ns.WriteAt(w, off); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				r := make([]byte, len(w))
				if _, err := ns.ReadAt(r, off); err != nil || !bytes.Equal(r, w) {
					t.Errorf("read: %v (or mismatch)", err)
					return
				}
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}
	// Some round trips on the live controller, from any workers.
	load := func() {
		t.Helper()
		for len(progress) > 0 {
			<-progress
		}
		for range 8 {
			select {
			case <-progress:
			case <-time.After(time.Minute):
				t.Fatal("no I/O completes")
			}
		}
	}
	for range 3 {
		load()
		ft.killQueues()
		// The failed AER moved the controller to resetting as the
		// queues closed: wait for it to be live again.
		if err := c.waitLive(nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	load()
	close(stop)
	wg.Wait()
	if c.CntlID() < 4 {
		t.Errorf("cntlid %d after 3 failures", c.CntlID())
	}
}

// TestAdminCancelLeavesBuffer cancels an admin command's context while the
// controller holds the command, then lets the controller answer: the late
// data must not land in the buffer of the call that returned.
func TestAdminCancelLeavesBuffer(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	held := make(chan *fabrics.Request, 1)
	ft.mu.Lock()
	ft.holdLogs = held
	ft.mu.Unlock()
	buf := bytes.Repeat([]byte{0x5a}, nvme.SMARTLogSize)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.GetLogPage(ctx, nvme.LIDSMART, nvme.NSIDAll, buf) }()
	r := <-held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("GetLogPage: %v, want context.Canceled", err)
	}
	for i := range r.Data {
		r.Data[i] = 0xee
	}
	r.Complete() // the loop transport delivers the completion before Complete returns
	if i := bytes.IndexFunc(buf, func(r rune) bool { return r != 0x5a }); i >= 0 {
		t.Fatalf("byte %d of the caller's buffer written after the call returned", i)
	}
	// The slot the late completion freed serves the next command.
	ft.mu.Lock()
	ft.holdLogs = nil
	ft.mu.Unlock()
	if err := c.GetLogPage(context.Background(), nvme.LIDSMART, nvme.NSIDAll, buf); err != nil {
		t.Fatal(err)
	}
	if nvme.SMARTLog(buf).CompositeTemperature() != 300 {
		t.Errorf("SMART log not read: temperature %d", nvme.SMARTLog(buf).CompositeTemperature())
	}
}

// bidiDialer's admin queue completes vendor admin opcode 0xc3 (data
// bidirectional) itself, as an RDMA transport moves such data: the
// controller reads the host's bytes and writes its own (each inverted).
type bidiDialer struct{ d fabrics.Dialer }

func (d bidiDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	hq, err := d.d.Dial(ctx, addr, p)
	if err != nil || p.QID != 0 {
		return hq, err
	}
	return bidiQueue{hq}, nil
}

type bidiQueue struct{ fabrics.HostQueue }

func (q bidiQueue) Submit(cmd *fabrics.HostCommand) error {
	if cmd.SQE[0] != 0xc3 {
		return q.HostQueue.Submit(cmd)
	}
	for i := range cmd.Data {
		cmd.Data[i] ^= 0xff
	}
	cmd.CQE = [16]byte{}
	go cmd.Done(cmd)
	return nil
}

// TestAdminCommandBidirectional: an admin passthrough whose data moves
// both ways (or whose direction is unsaid) reaches the controller and
// comes back through the slot's own buffer.
func TestAdminCommandBidirectional(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectWith(t, bidiDialer{ft.dialer()}, ft.addr, testOpts())
	for _, dir := range []fabrics.DataDirection{fabrics.DirBidirectional, fabrics.DirNone} {
		buf := bytes.Repeat([]byte{0x5a}, 512)
		var sqe [64]byte
		sqe[0] = 0xc3
		if _, err := c.AdminCommand(context.Background(), sqe, buf, dir); err != nil {
			t.Fatalf("direction %d: %v", dir, err)
		}
		if !bytes.Equal(buf, bytes.Repeat([]byte{0xa5}, len(buf))) {
			t.Fatalf("direction %d: buffer % x..., want the controller's a5 (from the host's 5a)", dir, buf[:8])
		}
	}
}

// gateDialer's I/O queues hold Close until gate is closed, as a
// transport whose teardown takes a while.
type gateDialer struct {
	d    fabrics.Dialer
	gate chan struct{}
}

func (d gateDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	hq, err := d.d.Dial(ctx, addr, p)
	if err != nil || p.QID == 0 {
		return hq, err
	}
	return gateQueue{hq, d.gate}, nil
}

type gateQueue struct {
	fabrics.HostQueue
	gate chan struct{}
}

func (q gateQueue) Close() error {
	<-q.gate
	return q.HostQueue.Close()
}

// TestTimeoutWaitsForQueueClose times two Reads out on one queue whose
// transport takes its time to close: neither may return while the
// transport still holds its buffer (the second used to return at once,
// the reset being the first one's).
func TestTimeoutWaitsForQueueClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		o := testOpts()
		o.NrIOQueues = 1
		o.CommandTimeout = time.Second
		gate := make(chan struct{})
		c := connectWith(t, gateDialer{ft.dialer(), gate}, ft.addr, o)
		ns, err := c.Namespace(1)
		if err != nil {
			t.Fatal(err)
		}
		ft.stallRead.Store(true)
		var opened atomic.Bool
		errs := make(chan error, 2)
		for i := range 2 {
			go func() {
				_, err := ns.ReadAt(make([]byte, 4096), int64(i)*4096)
				if !opened.Load() {
					err = fmt.Errorf("returned while the transport held the buffer: %w", err)
				}
				errs <- err
			}()
		}
		// Both time out, are not aborted, and wait out a further timeout.
		time.Sleep(5 * o.CommandTimeout) // the bubble's clock
		synctest.Wait()
		opened.Store(true)
		close(gate)
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrTimeout) || strings.Contains(err.Error(), "returned while") {
				t.Error(err)
			}
		}
		ft.mu.Lock()
		held := ft.held
		ft.held = nil
		ft.mu.Unlock()
		for _, r := range held {
			r.Complete()
		}
	})
}
