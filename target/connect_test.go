package target

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

func TestConnectAdminAndIOQueues(t *testing.T) {
	f := newFixture(t, func(s *SubsystemConfig, _ *PortConfig) { s.CntlIDMin, s.CntlIDMax = 10, 20 })
	a := f.connectAdmin(testSubNQN, 0)
	if a.cntlid < 10 || a.cntlid > 20 {
		t.Fatalf("cntlid %d outside 10-20", a.cntlid)
	}
	b := f.connectAdmin(testSubNQN, 0)
	if b.cntlid == a.cntlid {
		t.Fatalf("two controllers share cntlid %d", a.cntlid)
	}
	a.enable()
	r := a.setFeature(nvme.FeatNumberOfQueues, nvme.MakeNumQueues(4, 4))
	expect(t, r, 0, "Set Features Number of Queues")
	if nsq, ncq := nvme.NumQueues(r.cqe.DW0()); nsq != 4 || ncq != 4 {
		t.Fatalf("granted %d/%d queues, want 4/4", nsq, ncq)
	}
	for qid := uint16(1); qid <= 4; qid++ {
		io := f.dial(qid, 16)
		r := io.connectRaw(16, 0, 0, testSubNQN, testHostNQN, a.cntlid)
		expect(t, r, 0, "I/O Connect")
		if got := fabrics.ConnectResultCntlID(r.cqe.DW0()); got != a.cntlid {
			t.Fatalf("I/O Connect DW0 cntlid %d, want %d", got, a.cntlid)
		}
		if r.cqe.SQHD() != 1 {
			t.Fatalf("I/O Connect SQHD %d, want 1", r.cqe.SQHD())
		}
	}
}

func TestConnectErrors(t *testing.T) {
	f := newFixture(t)
	a := f.connectAdmin(testSubNQN, 0)

	dataParam := func(off uint16) uint32 { return fabrics.InvalidParam{InData: true, Offset: off}.DW0() }
	sqeParam := func(off uint16) uint32 { return fabrics.InvalidParam{Offset: off}.DW0() }
	tests := []struct {
		name    string
		qid     uint16
		sqsize  uint16
		subnqn  string
		hostnqn string
		cntlid  uint16
		recfmt  uint16
		enable  bool
		want    nvme.Status
		dw0     uint32
		checkDW bool
	}{
		{name: "unknown subsystem", subnqn: "nqn.2026-11.io.nvmeof:nope", hostnqn: testHostNQN, cntlid: 0xffff, sqsize: 31,
			want: fabrics.StatusConnectInvalidParameters, dw0: dataParam(fabrics.ConnectDataOffSubNQN), checkDW: true},
		{name: "host not allowed", subnqn: testSubNQN, hostnqn: otherHost, cntlid: 0xffff, sqsize: 31,
			want: fabrics.StatusConnectInvalidHost, dw0: dataParam(fabrics.ConnectDataOffHostNQN), checkDW: true},
		{name: "static cntlid on admin queue", subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: 1, sqsize: 31,
			want: fabrics.StatusConnectInvalidParameters, dw0: dataParam(fabrics.ConnectDataOffCntlID), checkDW: true},
		{name: "admin sqsize 0", subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: 0xffff, sqsize: 0,
			want: fabrics.StatusConnectInvalidParameters, dw0: sqeParam(fabrics.ConnectOffSQSize), checkDW: true},
		{name: "record format", subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: 0xffff, sqsize: 31, recfmt: 1,
			want: fabrics.StatusConnectIncompatibleFormat},
		{name: "io before enable", qid: 1, subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: a.cntlid, sqsize: 31,
			want: nvme.StatusCommandSequenceError},
		{name: "io wrong cntlid", qid: 1, subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: a.cntlid + 1, sqsize: 31, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: dataParam(fabrics.ConnectDataOffCntlID), checkDW: true},
		{name: "io other host's controller", qid: 1, subnqn: testSubNQN, hostnqn: otherHost, cntlid: a.cntlid, sqsize: 31, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: dataParam(fabrics.ConnectDataOffCntlID), checkDW: true},
		{name: "io unknown subsystem", qid: 1, subnqn: "nqn.2026-11.io.nvmeof:nope", hostnqn: testHostNQN, cntlid: a.cntlid, sqsize: 31, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: dataParam(fabrics.ConnectDataOffSubNQN), checkDW: true},
		{name: "io sqsize 0", qid: 1, subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: a.cntlid, sqsize: 0, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: sqeParam(fabrics.ConnectOffSQSize), checkDW: true},
		{name: "io sqsize above MQES", qid: 1, subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: a.cntlid, sqsize: 1024, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: sqeParam(fabrics.ConnectOffSQSize), checkDW: true},
		{name: "io qid beyond granted", qid: 3, subnqn: testSubNQN, hostnqn: testHostNQN, cntlid: a.cntlid, sqsize: 31, enable: true,
			want: fabrics.StatusConnectInvalidParameters, dw0: sqeParam(fabrics.ConnectOffQID), checkDW: true},
	}
	enabled := false
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.enable && !enabled {
				a.enable()
				expect(t, a.setFeature(nvme.FeatNumberOfQueues, nvme.MakeNumQueues(2, 2)), 0, "Number of Queues")
				enabled = true
			}
			h := f.dial(tc.qid, 31)
			sqe, d := connectSQE(tc.qid, tc.sqsize, 0, 0, tc.subnqn, tc.hostnqn, tc.cntlid)
			fabrics.ConnectCommand(sqe[:]).SetRecFmt(tc.recfmt)
			r := h.run(sqe, d, fabrics.DirHostToCtrl)
			expect(t, r, tc.want, "Connect")
			if !r.cqe.DNR() {
				t.Errorf("DNR not set")
			}
			if tc.checkDW && r.cqe.DW0() != tc.dw0 {
				t.Errorf("DW0 %#x (%v), want %#x (%v)", r.cqe.DW0(), fabrics.ParseInvalidParam(r.cqe.DW0()),
					tc.dw0, fabrics.ParseInvalidParam(tc.dw0))
			}
		})
	}

	t.Run("qid already connected", func(t *testing.T) {
		f.connectIO(a, 1, 8)
		h := f.dial(1, 8)
		expect(t, h.connectRaw(8, 0, 0, testSubNQN, testHostNQN, a.cntlid), nvme.StatusCommandSequenceError, "second Connect of qid 1")
	})
	t.Run("command before connect", func(t *testing.T) {
		h := f.dial(0, 8)
		r := h.run(newSQE(uint8(nvme.AdminIdentify), 0), make([]byte, 4096), fabrics.DirCtrlToHost)
		expect(t, r, nvme.StatusCommandSequenceError, "Identify before Connect")
		cmd := fabrics.NewCommand(fabrics.FCTypePropertyGet)
		r = h.run([64]byte(cmd), nil, fabrics.DirNone)
		expect(t, r, nvme.StatusCommandSequenceError, "Property Get before Connect")
	})
	t.Run("connect data length", func(t *testing.T) {
		h := f.dial(0, 8)
		sqe, d := connectSQE(0, 8, 0, 0, testSubNQN, testHostNQN, 0xffff)
		r := h.run(sqe, d[:512], fabrics.DirHostToCtrl)
		expect(t, r, nvme.StatusDataSGLLengthInvalid, "short Connect data")
	})
	t.Run("connect twice on one queue", func(t *testing.T) {
		sqe, d := connectSQE(0, 31, 0, 0, testSubNQN, testHostNQN, 0xffff)
		expect(t, a.run(sqe, d, fabrics.DirHostToCtrl), nvme.StatusCommandSequenceError, "Connect on a connected queue")
	})
	t.Run("cntlid range exhausted", func(t *testing.T) {
		f2 := newFixture(t, func(s *SubsystemConfig, _ *PortConfig) { s.CntlIDMin, s.CntlIDMax = 5, 5 })
		f2.connectAdmin(testSubNQN, 0)
		h := f2.dial(0, 8)
		expect(t, h.connectRaw(8, 0, 0, testSubNQN, testHostNQN, 0xffff), fabrics.StatusConnectControllerBusy, "third controller")
	})
}

func TestSQHeadAndFlowControl(t *testing.T) {
	f := newFixture(t)
	h := f.dial(0, 3)
	r := h.connectRaw(3, 0, 0, testSubNQN, testHostNQN, 0xffff)
	expect(t, r, 0, "Connect")
	if r.cqe.SQHD() != 1 {
		t.Fatalf("Connect SQHD %d, want 1", r.cqe.SQHD())
	}
	// SQSIZE 3 (0's based): the head wraps modulo 4.
	for i, want := range []uint16{2, 3, 0, 1, 2} {
		_, r := h.propGet(fabrics.PropVS, 4)
		if r.cqe.SQHD() != want {
			t.Fatalf("command %d: SQHD %d, want %d", i, r.cqe.SQHD(), want)
		}
	}

	off := f.dial(0, 8)
	r = off.connectRaw(8, 0, connectAttrDisableSQFlow, testSubNQN, testHostNQN, 0xffff)
	expect(t, r, 0, "Connect without SQ flow control")
	if r.cqe.SQHD() != 0xffff {
		t.Fatalf("Connect SQHD %#x with flow control disabled, want 0xffff", r.cqe.SQHD())
	}
	if _, r := off.propGet(fabrics.PropVS, 4); r.cqe.SQHD() != 0 {
		t.Fatalf("SQHD %d with flow control disabled, want 0", r.cqe.SQHD())
	}
}

func TestProperties(t *testing.T) {
	f := newFixture(t)
	a := f.connectAdmin(testSubNQN, 0)

	v, r := a.propGet(fabrics.PropCAP, 8)
	expect(t, r, 0, "Get CAP")
	capv := fabrics.CAP(v)
	if capv.MQES() != DefaultMaxQueueSize-1 || !capv.CQR() || capv.TO() != capTimeout ||
		capv.CSS()&fabrics.CAPCSSNVM == 0 || capv.MPSMIN() != 0 {
		t.Errorf("CAP %#x: %+v", v, capv.Fields())
	}
	v, r = a.propGet(fabrics.PropVS, 4)
	expect(t, r, 0, "Get VS")
	if fabrics.VS(v) != fabrics.VS13 {
		t.Errorf("VS %v, want 1.3", fabrics.VS(v))
	}
	for _, bad := range []struct {
		off  uint32
		size int
	}{{fabrics.PropCAP, 4}, {fabrics.PropVS, 8}, {fabrics.PropNSSR, 4}, {0x100, 4}} {
		_, r := a.propGet(bad.off, bad.size)
		expect(t, r, nvme.StatusInvalidField, "Property Get "+fabrics.PropertyName(bad.off))
	}
	expect(t, a.propSet(fabrics.PropCSTS, 0), nvme.StatusInvalidField, "Property Set CSTS")

	// Admin commands need CC.EN = 1 and CSTS.RDY = 1.
	expect(t, a.identify(nvme.CNSController, 0, 0), nvme.StatusCommandSequenceError, "Identify before enable")

	// Wrong I/O queue entry sizes: the controller fails (CFS), not ready.
	expect(t, a.propSet(fabrics.PropCC, uint64(fabrics.CC(0).WithEN(true))), 0, "Set CC")
	v, _ = a.propGet(fabrics.PropCSTS, 4)
	if cs := fabrics.CSTS(v); cs.RDY() || !cs.CFS() {
		t.Fatalf("CSTS %#x after enable with IOSQES 0: want CFS, not RDY", v)
	}
	expect(t, a.propSet(fabrics.PropCC, 0), 0, "clear CC")
	a.enable()
	v, _ = a.propGet(fabrics.PropCC, 4)
	if fabrics.CC(v) != enableCC {
		t.Fatalf("CC %#x, want %#x", v, uint32(enableCC))
	}
	expect(t, a.identify(nvme.CNSController, 0, 0), 0, "Identify once enabled")

	// An I/O queue, then a controller reset tears it down.
	io := f.connectIO(a, 1, 8)
	expect(t, io.read(1, 0, 1), 0, "Read")
	expect(t, a.propSet(fabrics.PropCC, 0), 0, "disable")
	v, _ = a.propGet(fabrics.PropCSTS, 4)
	if fabrics.CSTS(v).RDY() {
		t.Fatalf("CSTS %#x: still ready after CC.EN = 0", v)
	}
	waitClosed(t, io, 2*time.Second)
	expect(t, a.identify(nvme.CNSController, 0, 0), nvme.StatusCommandSequenceError, "Identify after disable")

	// Shutdown: SHST complete, not ready.
	a.enable()
	io = f.connectIO(a, 1, 8)
	expect(t, a.propSet(fabrics.PropCC, uint64(enableCC.WithSHN(fabrics.SHNNormal))), 0, "shutdown")
	v, _ = a.propGet(fabrics.PropCSTS, 4)
	if cs := fabrics.CSTS(v); cs.SHST() != fabrics.SHSTComplete || cs.RDY() {
		t.Fatalf("CSTS %#x after shutdown: want SHST complete, not ready", v)
	}
	waitClosed(t, io, 2*time.Second)
}

// TestDisconnectAndQueueLoss runs in a synctest bubble: the target closes
// queues on its own goroutines, and synctest.Wait is when it has.
func TestDisconnectAndQueueLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		s := f.session()
		cmd := fabrics.NewCommand(fabrics.FCTypeDisconnect)
		expect(t, s.io.run([64]byte(cmd), nil, fabrics.DirNone), 0, "Disconnect I/O queue")
		synctest.Wait()
		waitClosed(t, s.io, 0)
		// The controller lives on: the queue can be connected again.
		f.connectIO(s.admin, 1, 8)

		// Losing the admin queue tears the controller down: its cntlid can
		// no longer take I/O queues.
		s.admin.q.Close()
		synctest.Wait()
		h := f.dial(2, 8)
		sqe, d := connectSQE(2, 8, 0, 0, testSubNQN, testHostNQN, s.admin.cntlid)
		if r := h.wait(h.submit(sqe, d, fabrics.DirHostToCtrl)); r.err != nil || r.status() != fabrics.StatusConnectInvalidParameters {
			t.Fatalf("controller %d after admin queue loss: I/O Connect %v %v, want Connect Invalid Parameters", s.admin.cntlid, r.err, r.status())
		}
	})
}

// TestKeepAliveExpiry runs in a synctest bubble: the keep-alive timer and
// the host's pauses are on the bubble's clock, exact and instant.
func TestKeepAliveExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.connectAdmin(testSubNQN, 1000)
		a.enable()
		// Keep-alives hold the controller.
		for range 3 {
			time.Sleep(400 * time.Millisecond)
			expect(t, a.run(newSQE(uint8(nvme.AdminKeepAlive), 0), nil, fabrics.DirNone), 0, "Keep Alive")
		}
		// Silence: an AER left outstanding fails when the queue is torn down.
		start := time.Now()
		aer := a.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
		select {
		case r := <-aer:
			if r.err == nil {
				t.Fatalf("AER completed with %v, want the queue torn down", r.cqe)
			}
			waitClosed(t, a, time.Second)
		case <-time.After(4 * time.Second):
			t.Fatal("controller alive 4 s after keep-alives stopped (KATO 1 s)")
		}
		if d := time.Since(start); d < time.Second {
			t.Fatalf("torn down after %v, before KATO", d)
		}

		// Keep Alive with keep-alive disabled.
		b := f.connectAdmin(testSubNQN, 0)
		b.enable()
		expect(t, b.run(newSQE(uint8(nvme.AdminKeepAlive), 0), nil, fabrics.DirNone), nvme.StatusKeepAliveTimeoutInvalid, "Keep Alive with KATO 0")
	})
}

// gatedDevice is an asynchronous device whose reads complete only when
// the test sends on gate, one read per send.
type gatedDevice struct {
	*asyncDevice
	gate chan struct{}
}

func (d *gatedDevice) ReadAsync(p []byte, off int64, c bdev.Completion) {
	go func() {
		<-d.gate
		_, err := d.ReadAt(p, off)
		c.Complete(err)
	}()
}

// TestKeepAliveCountsCompletions: with Traffic Based Keep Alive the host
// sends no Keep Alive while completions keep arriving (nvme_keep_alive_work
// looks at comp_seen), so a completion must restart the controller's timer
// as a command does. Here four reads arrive before the timer's re-arm at
// KATO and complete one by one across the next KATO, with no other
// command: a timer that counted only arrivals tore the controller down
// at 2 KATO while the host was right to stay silent.
func TestKeepAliveCountsCompletions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		mem, err := bdev.NewMemory(1<<20, 512)
		must(t, err)
		dev := &gatedDevice{asyncDevice: &asyncDevice{Device: mem, calls: map[string]int{}}, gate: make(chan struct{})}
		must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
		a := f.connectAdmin(testSubNQN, 5000)
		a.enable()
		io := f.connectIO(a, 1, 8)
		var reads []<-chan result
		for i := range 4 {
			reads = append(reads, io.submit(rwSQE(nvme.IORead, 2, uint64(i), 1), make([]byte, 512), fabrics.DirCtrlToHost))
		}
		time.Sleep(6 * time.Second)
		for range reads {
			dev.gate <- struct{}{} // one read completes
			synctest.Wait()
			time.Sleep(1200 * time.Millisecond) // under the host's KATO/4 check period
		}
		for _, r := range reads {
			expect(t, io.wait(r), 0, "gated read")
		}
		// t = 10.8 s: past the 10 s a timer armed at 5 s would end at.
		if n := len(f.tgt.Controllers()); n != 1 {
			t.Fatalf("%d controllers after the completions, want the controller alive", n)
		}
		expect(t, a.run(newSQE(uint8(nvme.AdminKeepAlive), 0), nil, fabrics.DirNone), 0, "Keep Alive")
	})
}
