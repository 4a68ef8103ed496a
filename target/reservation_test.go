package target

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// resvNSID is the namespace with reservations in these tests; NSID 1 of
// the fixture has none.
const resvNSID = 2

var (
	hostA = [16]byte{0xa}
	hostB = [16]byte{0xb}
)

const (
	hostANQN = "nqn.2014-08.org.nvmexpress:uuid:0a000000-0000-0000-0000-000000000000"
	hostBNQN = "nqn.2014-08.org.nvmexpress:uuid:0b000000-0000-0000-0000-000000000000"
)

// resvFixture is a target whose namespace 2 has reservations, open to
// every host.
func resvFixture(t *testing.T) *fixture {
	f := newFixture(t, func(s *SubsystemConfig, _ *PortConfig) { s.AllowAnyHost = true })
	mem, err := bdev.NewMemory(1<<20, 512)
	must(t, err)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: resvNSID, Device: mem, Reservations: true}))
	return f
}

// resvCtrl is one controller of a host: its admin and I/O queue.
type resvCtrl struct {
	t         *testing.T
	admin, io *hq
}

// connectAs connects a controller as host nqn with host identifier id.
func (f *fixture) connectAs(t *testing.T, nqn string, id [16]byte) *resvCtrl {
	t.Helper()
	connect := func(h *hq, sqsize uint16, cntlid uint16) result {
		sqe, d := connectSQE(h.qid, sqsize, 0, 0, testSubNQN, nqn, cntlid)
		fabrics.ConnectData(d).SetHostID(id)
		return h.run(sqe, d, fabrics.DirHostToCtrl)
	}
	a := f.dial(0, 31)
	r := connect(a, 31, fabrics.CntlIDDynamic)
	expect(t, r, 0, "admin Connect")
	a.cntlid = uint16(r.cqe.DW0())
	a.enable()
	io := f.dial(1, 16)
	expect(t, connect(io, 16, a.cntlid), 0, "I/O Connect")
	return &resvCtrl{t: t, admin: a, io: io}
}

func (c *resvCtrl) resv(op nvme.IOOpcode, act uint8, rtype nvme.ReservationType, iekey bool, k1, k2 uint64) result {
	c.t.Helper()
	sqe := newSQE(uint8(op), resvNSID)
	cmd := nvme.ReservationCommand{SQE: nvme.SQE(sqe[:])}
	cmd.SetAction(act)
	cmd.SetRTYPE(rtype)
	cmd.SetIEKEY(iekey)
	n := nvme.ResvRegisterDataSize
	if op == nvme.IOReservationRelease {
		n = nvme.ResvReleaseDataSize
	}
	d := nvme.ReservationData(make([]byte, n))
	d.SetCRKEY(k1)
	if n > 8 {
		d.SetNRKEY(k2)
	}
	return c.io.run(sqe, d, fabrics.DirHostToCtrl)
}

func (c *resvCtrl) register(act uint8, iekey bool, crkey, nrkey uint64) result {
	return c.resv(nvme.IOReservationRegister, act, 0, iekey, crkey, nrkey)
}

func (c *resvCtrl) acquire(act uint8, rtype nvme.ReservationType, crkey, prkey uint64) result {
	return c.resv(nvme.IOReservationAcquire, act, rtype, false, crkey, prkey)
}

func (c *resvCtrl) release(act uint8, rtype nvme.ReservationType, crkey uint64) result {
	return c.resv(nvme.IOReservationRelease, act, rtype, false, crkey, 0)
}

func (c *resvCtrl) report(eds bool) (nvme.ReservationStatus, result) {
	c.t.Helper()
	sqe := newSQE(uint8(nvme.IOReservationReport), resvNSID)
	cmd := nvme.ReservationReportCommand{SQE: nvme.SQE(sqe[:])}
	cmd.SetLength(4096)
	cmd.SetEDS(eds)
	r := c.io.run(sqe, make([]byte, 4096), fabrics.DirCtrlToHost)
	if !r.status().Success() {
		return nvme.ReservationStatus{}, r
	}
	s, err := nvme.ParseReservationStatus(r.data, eds)
	must(c.t, err)
	return s, r
}

func (c *resvCtrl) write() result {
	return c.io.write(resvNSID, 0, make([]byte, 512))
}

func (c *resvCtrl) read() result { return c.io.read(resvNSID, 0, 1) }

// aer submits an Asynchronous Event Request.
func (c *resvCtrl) aer() <-chan result {
	return c.admin.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
}

// expectNotice waits for a reservation AEN on aer and reads the log
// page, which must hold typ and nothing after it.
func (c *resvCtrl) expectNotice(aer <-chan result, typ nvme.ResvNotificationType) {
	c.t.Helper()
	r := c.admin.wait(aer)
	expect(c.t, r, 0, "AER")
	if r.cqe.DW0() != resvAENResult {
		c.t.Fatalf("AER dw0 %#x, want %#x", r.cqe.DW0(), resvAENResult)
	}
	r = c.admin.getLog(nvme.LIDReservationNotification, 0, nvme.ResvNotificationLogSize, 0, false)
	expect(c.t, r, 0, "reservation log")
	l, err := nvme.ParseResvNotificationLog(r.data)
	must(c.t, err)
	if l.Type() != typ || l.NSID() != resvNSID || l.Count() == 0 || l.Available() != 0 {
		c.t.Fatalf("notification %v nsid %d count %d available %d, want %v nsid %d", l.Type(), l.NSID(), l.Count(), l.Available(), typ, resvNSID)
	}
}

// expectNoNotice checks the reservation log is empty.
func (c *resvCtrl) expectNoNotice() {
	c.t.Helper()
	r := c.admin.getLog(nvme.LIDReservationNotification, 0, nvme.ResvNotificationLogSize, 0, false)
	expect(c.t, r, 0, "reservation log")
	if l := nvme.ResvNotificationLog(r.data); l.Type() != nvme.ResvNotifEmpty {
		c.t.Fatalf("notification %v, want none", l.Type())
	}
}

// TestReservationAccessMatrix checks Read and Write of a holder, a
// registrant and a non-registrant under each reservation type.
func TestReservationAccessMatrix(t *testing.T) {
	tests := []struct {
		rtype                      nvme.ReservationType
		regRead, regWrite, nonRead bool // non-registrants never write
	}{
		{nvme.ResvWriteExclusive, true, false, true},
		{nvme.ResvExclusiveAccess, false, false, false},
		{nvme.ResvWriteExclusiveRegOnly, true, true, true},
		{nvme.ResvExclusiveAccessRegOnly, true, true, false},
		{nvme.ResvWriteExclusiveAllRegs, true, true, true},
		{nvme.ResvExclusiveAccessAllRegs, true, true, false},
	}
	holder, reg, non := [16]byte{1}, [16]byte{2}, [16]byte{3}
	for _, tt := range tests {
		t.Run(tt.rtype.String(), func(t *testing.T) {
			p := &reservations{}
			for _, h := range [][16]byte{holder, reg} {
				if s, _, _ := p.register(h, "", regCmd(nvme.ResvRegister, false, 0), resvData(0, 7)); !s.Status.Success() {
					t.Fatalf("register: %v", s.Status)
				}
			}
			if s, _, _ := p.acquire(holder, acqCmd(nvme.ResvAcquire, tt.rtype), resvData(7, 0)); !s.Status.Success() {
				t.Fatalf("acquire: %v", s.Status)
			}
			for _, c := range []struct {
				who  [16]byte
				op   nvme.IOOpcode
				want bool
			}{
				{holder, nvme.IORead, true}, {holder, nvme.IOWrite, true},
				{reg, nvme.IORead, tt.regRead}, {reg, nvme.IOCompare, tt.regRead},
				{reg, nvme.IOWrite, tt.regWrite}, {reg, nvme.IOWriteZeroes, tt.regWrite},
				{reg, nvme.IODatasetManagement, tt.regWrite}, {reg, nvme.IOFlush, tt.regWrite},
				{non, nvme.IORead, tt.nonRead}, {non, nvme.IOCompare, tt.nonRead},
				{non, nvme.IOWrite, false}, {non, nvme.IOFlush, false},
				{non, nvme.IOReservationReport, true}, {non, nvme.IOReservationRegister, true},
			} {
				if got := p.allows(c.who, c.op); got != c.want {
					t.Errorf("host %d %v: allowed %v, want %v", c.who[0], c.op, got, c.want)
				}
			}
			// Released: everyone may do everything.
			if s, _, _ := p.release(holder, relCmd(nvme.ResvRelease, tt.rtype), resvData(7, 0)); !s.Status.Success() {
				t.Fatalf("release: %v", s.Status)
			}
			if !p.allows(non, nvme.IOWrite) {
				t.Error("write refused after release")
			}
		})
	}
}

func cmdSQE() nvme.SQE { var b [64]byte; return nvme.SQE(b[:]) }

func regCmd(act uint8, iekey bool, cptpl uint8) nvme.ReservationCommand {
	c := nvme.ReservationCommand{SQE: cmdSQE()}
	c.SetAction(act)
	c.SetIEKEY(iekey)
	c.SetCPTPL(cptpl)
	return c
}

func acqCmd(act uint8, rtype nvme.ReservationType) nvme.ReservationCommand {
	c := nvme.ReservationCommand{SQE: cmdSQE()}
	c.SetAction(act)
	c.SetRTYPE(rtype)
	return c
}

func relCmd(act uint8, rtype nvme.ReservationType) nvme.ReservationCommand { return acqCmd(act, rtype) }

func resvData(k1, k2 uint64) nvme.ReservationData {
	d := nvme.ReservationData(make([]byte, 16))
	d.SetCRKEY(k1)
	d.SetNRKEY(k2)
	return d
}

// TestReservationRegister runs Register, Replace and Unregister steps
// against one state, checking status and generation.
func TestReservationRegister(t *testing.T) {
	p := &reservations{}
	steps := []struct {
		name       string
		act        uint8
		iekey      bool
		cptpl      uint8
		crkey, new uint64
		want       nvme.Status
		gen        uint32
		key        uint64 // the key afterwards (0: not registered)
	}{
		{"register", nvme.ResvRegister, false, 0, 0, 5, 0, 1, 5},
		{"register same key", nvme.ResvRegister, false, 0, 0, 5, 0, 2, 5},
		{"register other key", nvme.ResvRegister, false, 0, 0, 6, nvme.StatusReservationConflict, 2, 5},
		{"replace wrong key", nvme.ResvReplace, false, 0, 9, 6, nvme.StatusReservationConflict, 2, 5},
		{"replace", nvme.ResvReplace, false, 0, 5, 6, 0, 3, 6},
		{"replace IEKEY", nvme.ResvReplace, true, 0, 0, 7, 0, 4, 7},
		{"CPTPL set (no PTPL)", nvme.ResvReplace, false, nvme.CPTPLSet, 7, 7, nvme.StatusInvalidField, 4, 7},
		{"CPTPL reserved", nvme.ResvReplace, false, 1, 7, 7, nvme.StatusInvalidField, 4, 7},
		{"CPTPL clear", nvme.ResvReplace, false, nvme.CPTPLClear, 7, 7, 0, 5, 7},
		{"bad action", 3, false, 0, 7, 7, nvme.StatusInvalidField, 5, 7},
		{"unregister wrong key", nvme.ResvUnregister, false, 0, 8, 0, nvme.StatusReservationConflict, 5, 7},
		{"unregister", nvme.ResvUnregister, false, 0, 7, 0, 0, 6, 0},
		{"unregister again", nvme.ResvUnregister, true, 0, 7, 0, nvme.StatusReservationConflict, 6, 0},
		{"replace unregistered", nvme.ResvReplace, true, 0, 0, 1, nvme.StatusReservationConflict, 6, 0},
	}
	for _, s := range steps {
		got, _, _ := p.register(hostA, "", regCmd(s.act, s.iekey, s.cptpl), resvData(s.crkey, s.new))
		if got.Status != s.want {
			t.Fatalf("%s: status %v, want %v", s.name, got.Status, s.want)
		}
		st := p.status()
		var key uint64
		if len(st.Controllers) == 1 {
			key = st.Controllers[0].RKEY
		}
		if st.Generation != s.gen || key != s.key {
			t.Fatalf("%s: generation %d key %d, want %d %d", s.name, st.Generation, key, s.gen, s.key)
		}
	}
}

// TestReservationPreempt covers the Preempt rules (Linux nvmet_pr_preempt).
func TestReservationPreempt(t *testing.T) {
	hostC := [16]byte{0xc}
	setup := func(t *testing.T, rtype nvme.ReservationType) *reservations {
		p := &reservations{}
		for i, h := range [][16]byte{hostA, hostB, hostC} {
			if s, _, _ := p.register(h, "", regCmd(nvme.ResvRegister, false, 0), resvData(0, uint64(i+1))); !s.Status.Success() {
				t.Fatal(s.Status)
			}
		}
		if s, _, _ := p.acquire(hostA, acqCmd(nvme.ResvAcquire, rtype), resvData(1, 0)); !s.Status.Success() {
			t.Fatal(s.Status)
		}
		return p
	}
	tests := []struct {
		name      string
		rtype     nvme.ReservationType // held by host A (key 1)
		newType   nvme.ReservationType
		prkey     uint64 // host B preempts with it
		want      nvme.Status
		holder    [16]byte
		heldType  nvme.ReservationType
		regs      int
		preempted [][16]byte // Registration Preempted sent to
		released  bool       // Reservation Released sent (to A and C)
	}{
		{"holder's key", nvme.ResvWriteExclusive, nvme.ResvWriteExclusive, 1, 0, hostB, nvme.ResvWriteExclusive, 2, [][16]byte{hostA}, false},
		{"holder's key, new type", nvme.ResvWriteExclusive, nvme.ResvExclusiveAccess, 1, 0, hostB, nvme.ResvExclusiveAccess, 2, [][16]byte{hostA}, true},
		{"other registrant's key", nvme.ResvWriteExclusive, nvme.ResvWriteExclusive, 3, 0, hostA, nvme.ResvWriteExclusive, 2, [][16]byte{hostC}, false},
		{"key 0 not the holder's", nvme.ResvWriteExclusive, nvme.ResvWriteExclusive, 0, nvme.StatusInvalidField, hostA, nvme.ResvWriteExclusive, 3, nil, false},
		{"unknown key", nvme.ResvWriteExclusive, nvme.ResvWriteExclusive, 9, nvme.StatusReservationConflict, hostA, nvme.ResvWriteExclusive, 3, nil, false},
		{"all registrants, key 0", nvme.ResvWriteExclusiveAllRegs, nvme.ResvExclusiveAccess, 0, 0, hostB, nvme.ResvExclusiveAccess, 1, [][16]byte{hostA, hostC}, false},
		{"all registrants, a key", nvme.ResvExclusiveAccessAllRegs, nvme.ResvWriteExclusive, 1, 0, hostB, nvme.ResvExclusiveAccessAllRegs, 2, [][16]byte{hostA}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := setup(t, tt.rtype)
			gen := p.status().Generation
			s, _, ev := p.acquire(hostB, acqCmd(nvme.ResvPreempt, tt.newType), resvData(2, tt.prkey))
			if s.Status != tt.want {
				t.Fatalf("status %v, want %v", s.Status, tt.want)
			}
			st := p.status()
			if st.Type != tt.heldType || st.Registrants != tt.regs || !p.isHolderLocked(tt.holder) {
				t.Fatalf("after: %+v, want type %v, %d registrants, holder %x", st, tt.heldType, tt.regs, tt.holder[0])
			}
			if tt.want == 0 && st.Generation != gen+1 {
				t.Errorf("generation %d, want %d", st.Generation, gen+1)
			}
			var pre [][16]byte
			released := false
			for _, e := range ev {
				switch e.typ {
				case nvme.ResvNotifRegistrationPreempted:
					pre = append(pre, e.host)
				case nvme.ResvNotifReservationReleased:
					released = true
				}
			}
			if len(pre) != len(tt.preempted) || released != tt.released {
				t.Fatalf("events %+v, want preempted %x, released %v", ev, tt.preempted, tt.released)
			}
			for i := range pre {
				if pre[i] != tt.preempted[i] {
					t.Fatalf("preempted %x, want %x", pre, tt.preempted)
				}
			}
		})
	}
}

// TestReservationHolderUnregisters checks what a holder leaving does to
// its reservation.
func TestReservationHolderUnregisters(t *testing.T) {
	for _, tt := range []struct {
		rtype    nvme.ReservationType
		held     bool
		released bool
	}{
		{nvme.ResvWriteExclusive, false, false},
		{nvme.ResvWriteExclusiveRegOnly, false, true},
		{nvme.ResvExclusiveAccessAllRegs, true, false},
	} {
		p := &reservations{}
		p.register(hostA, "", regCmd(nvme.ResvRegister, false, 0), resvData(0, 1))
		p.register(hostB, "", regCmd(nvme.ResvRegister, false, 0), resvData(0, 2))
		p.acquire(hostA, acqCmd(nvme.ResvAcquire, tt.rtype), resvData(1, 0))
		_, _, ev := p.register(hostA, "", regCmd(nvme.ResvUnregister, false, 0), resvData(1, 0))
		st := p.status()
		if (st.Type != 0) != tt.held || (len(ev) == 1) != tt.released {
			t.Errorf("%v: after unregister %+v events %+v, want held %v released %v", tt.rtype, st, ev, tt.held, tt.released)
		}
		if tt.held && !p.isHolderLocked(hostB) {
			t.Errorf("%v: host B does not hold the reservation", tt.rtype)
		}
	}
}

// TestReservationTwoHosts runs reservations end to end: host A with two
// controllers, host B with one.
func TestReservationTwoHosts(t *testing.T) {
	f := resvFixture(t)
	a1 := f.connectAs(t, hostANQN, hostA)
	a2 := f.connectAs(t, hostANQN, hostA)
	b := f.connectAs(t, hostBNQN, hostB)

	// Capabilities.
	r := a1.admin.identify(nvme.CNSController, 0, 0)
	if nvme.IdentifyController(r.data).ONCS()&nvme.ONCSReservations == 0 {
		t.Fatal("ONCS: no reservations")
	}
	r = a1.admin.identify(nvme.CNSNamespace, resvNSID, 0)
	if got := nvme.IdentifyNamespace(r.data).RESCAP(); got != 0xfe {
		t.Fatalf("RESCAP %#x, want 0xfe", got)
	}
	r = a1.admin.identify(nvme.CNSNamespace, 1, 0)
	if got := nvme.IdentifyNamespace(r.data).RESCAP(); got != 0 {
		t.Fatalf("RESCAP of a namespace without reservations %#x, want 0", got)
	}
	sqe := newSQE(uint8(nvme.IOReservationRegister), 1)
	expect(t, a1.io.run(sqe, make([]byte, 16), fabrics.DirHostToCtrl), nvme.StatusInvalidOpcode, "Register without resv_enable")

	expect(t, a1.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers")
	expect(t, a2.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers again from its second controller")
	expect(t, b.register(nvme.ResvRegister, false, 0, 0xb), 0, "B registers")
	expect(t, b.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusive, 0xa, 0), nvme.StatusReservationConflict, "B acquires with A's key")
	expect(t, a1.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusive, 0xa, 0), 0, "A acquires Write Exclusive")
	expect(t, b.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusive, 0xb, 0), nvme.StatusReservationConflict, "B acquires too")

	st, r := b.report(true)
	expect(t, r, 0, "report")
	if st.Type != nvme.ResvWriteExclusive || st.Registrants != 2 || len(st.Controllers) != 2 ||
		st.Controllers[0].HostID != hostA || !st.Controllers[0].Holder || st.Controllers[0].RKEY != 0xa ||
		st.Controllers[1].HostID != hostB || st.Controllers[1].Holder || st.Controllers[1].CNTLID != 0xffff {
		t.Fatalf("report %+v", st)
	}
	_, r = b.report(false)
	expect(t, r, nvme.StatusHostIdentifierInconsistentFormat, "report without EDS")

	expect(t, b.write(), nvme.StatusReservationConflict, "B writes")
	if !b.write().cqe.DNR() {
		t.Error("Reservation Conflict without DNR")
	}
	expect(t, b.read(), 0, "B reads")
	expect(t, a1.write(), 0, "A writes")
	expect(t, a2.write(), 0, "A writes through its second controller")

	// Release: wrong type, then right; B writes again. Write Exclusive
	// sends no notification.
	expect(t, a2.release(nvme.ResvRelease, nvme.ResvExclusiveAccess, 0xa), nvme.StatusInvalidField, "release with the wrong type")
	expect(t, a2.release(nvme.ResvRelease, nvme.ResvWriteExclusive, 0xb), nvme.StatusReservationConflict, "release with B's key")
	expect(t, a2.release(nvme.ResvRelease, nvme.ResvWriteExclusive, 0xa), 0, "A releases from its other controller")
	expect(t, b.write(), 0, "B writes after the release")
	b.expectNoNotice()

	// Registrants Only, released: B (a registrant) is told.
	expect(t, a1.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusiveRegOnly, 0xa, 0), 0, "A acquires WERO")
	expect(t, b.write(), 0, "B (registrant) writes under WERO")
	baer := b.aer()
	expect(t, a1.release(nvme.ResvRelease, nvme.ResvWriteExclusiveRegOnly, 0xa), 0, "A releases WERO")
	b.expectNotice(baer, nvme.ResvNotifReservationReleased)
	a1.expectNoNotice()

	// B preempts A: both of A's controllers hear it, and A may not write.
	expect(t, a1.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusive, 0xa, 0), 0, "A acquires again")
	aer1, aer2 := a1.aer(), a2.aer()
	expect(t, b.acquire(nvme.ResvPreempt, nvme.ResvWriteExclusive, 0xb, 0xa), 0, "B preempts A")
	a1.expectNotice(aer1, nvme.ResvNotifRegistrationPreempted)
	a2.expectNotice(aer2, nvme.ResvNotifRegistrationPreempted)
	expect(t, a1.write(), nvme.StatusReservationConflict, "A writes after the preemption")
	expect(t, a1.read(), 0, "A reads after the preemption")
	expect(t, a1.release(nvme.ResvRelease, nvme.ResvWriteExclusive, 0xa), nvme.StatusReservationConflict, "A (unregistered) releases")
	st, _ = a1.report(true)
	if st.Registrants != 1 || !st.Controllers[0].Holder || st.Controllers[0].HostID != hostB {
		t.Fatalf("report after preempt %+v", st)
	}

	// Clear: A registered again hears Reservation Preempted, unless
	// masked.
	expect(t, a1.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers again")
	aer1 = a1.aer()
	expect(t, b.release(nvme.ResvClear, 0, 0xb), 0, "B clears")
	a1.expectNotice(aer1, nvme.ResvNotifReservationPreempted)
	if st, _ = b.report(true); st.Registrants != 0 || st.Type != 0 {
		t.Fatalf("report after clear %+v", st)
	}
	expect(t, a1.write(), 0, "A writes after the clear")

	fs := featSQE(true, nvme.FeatReservationNotifMask, nvme.ResvMaskReservationPreempted)
	nvme.SQE(fs[:]).SetNSID(resvNSID)
	expect(t, a1.admin.run(fs, nil, fabrics.DirNone), 0, "mask Reservation Preempted")
	fs = featSQE(false, nvme.FeatReservationNotifMask, 0)
	nvme.SQE(fs[:]).SetNSID(resvNSID)
	if r = a1.admin.run(fs, nil, fabrics.DirNone); r.cqe.DW0() != nvme.ResvMaskReservationPreempted {
		t.Fatalf("mask %#x", r.cqe.DW0())
	}
	fs = featSQE(true, nvme.FeatReservationNotifMask, 1)
	nvme.SQE(fs[:]).SetNSID(resvNSID)
	expect(t, a1.admin.run(fs, nil, fabrics.DirNone), nvme.StatusInvalidField, "mask bit 0")
	expect(t, a1.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers")
	expect(t, b.register(nvme.ResvRegister, false, 0, 0xb), 0, "B registers")
	expect(t, b.release(nvme.ResvClear, 0, 0xb), 0, "B clears again")
	a1.expectNoNotice() // masked
	// The mask is the controller's: A's other controller has both clears.
	r = a2.admin.getLog(nvme.LIDReservationNotification, 0, nvme.ResvNotificationLogSize, 0, false)
	if l := nvme.ResvNotificationLog(r.data); l.Type() != nvme.ResvNotifReservationPreempted || l.Available() != 1 {
		t.Fatalf("second controller: %v, %d more", l.Type(), l.Available())
	}

	// Reservation Persistence: PTPL off, and it cannot be set.
	fs = featSQE(false, nvme.FeatReservationPersistence, 0)
	nvme.SQE(fs[:]).SetNSID(resvNSID)
	if r = a1.admin.run(fs, nil, fabrics.DirNone); r.status() != 0 || r.cqe.DW0() != 0 {
		t.Fatalf("Get Reservation Persistence: %v %#x", r.status(), r.cqe.DW0())
	}
	fs = featSQE(true, nvme.FeatReservationPersistence, 1)
	nvme.SQE(fs[:]).SetNSID(resvNSID)
	expect(t, a1.admin.run(fs, nil, fabrics.DirNone), nvme.StatusInvalidField, "set PTPL")
	fs = featSQE(false, nvme.FeatReservationPersistence, 0)
	nvme.SQE(fs[:]).SetNSID(1)
	expect(t, a1.admin.run(fs, nil, fabrics.DirNone), nvme.StatusInvalidField, "Reservation Persistence without reservations")
}

// TestReservationNotificationQueue checks the log page's count and
// Number of Available Log Pages over several notifications.
func TestReservationNotificationQueue(t *testing.T) {
	f := resvFixture(t)
	a := f.connectAs(t, hostANQN, hostA)
	b := f.connectAs(t, hostBNQN, hostB)
	for range 3 {
		expect(t, a.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers")
		expect(t, b.register(nvme.ResvRegister, false, 0, 0xb), 0, "B registers")
		expect(t, b.release(nvme.ResvClear, 0, 0xb), 0, "B clears")
	}
	var last uint64
	for i := range 3 {
		r := a.admin.getLog(nvme.LIDReservationNotification, 0, nvme.ResvNotificationLogSize, 0, false)
		l := nvme.ResvNotificationLog(r.data)
		if l.Type() != nvme.ResvNotifReservationPreempted || int(l.Available()) != 2-i || l.Count() <= last {
			t.Fatalf("entry %d: %v available %d count %d (last %d)", i, l.Type(), l.Available(), l.Count(), last)
		}
		last = l.Count()
	}
	a.expectNoNotice()
	// The AERs of the three notifications: one is queued while undelivered.
	select {
	case r := <-a.aer():
		if r.cqe.DW0() != resvAENResult {
			t.Fatalf("AER %#x", r.cqe.DW0())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no queued reservation event")
	}
}

// TestReservationPTPL: with a reservation file, CPTPL 11b keeps the
// registrations and the reservation over the namespace's re-creation (a
// restart); turning PTPL off forgets them.
func TestReservationPTPL(t *testing.T) {
	f := resvFixture(t)
	file := filepath.Join(t.TempDir(), "ns3.resv")
	const nsid = 3
	add := func() error {
		mem, err := bdev.NewMemory(1<<20, 512)
		must(t, err)
		return f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: nsid, Device: mem, Reservations: true, ReservationFile: file})
	}
	must(t, add())
	a := f.connectAs(t, hostANQN, hostA)
	b := f.connectAs(t, hostBNQN, hostB)
	run := func(c *resvCtrl, op nvme.IOOpcode, act uint8, rtype nvme.ReservationType, cptpl uint8, k1, k2 uint64) result {
		sqe := newSQE(uint8(op), nsid)
		cmd := nvme.ReservationCommand{SQE: nvme.SQE(sqe[:])}
		cmd.SetAction(act)
		cmd.SetRTYPE(rtype)
		cmd.SetCPTPL(cptpl)
		d := resvData(k1, k2)
		if op == nvme.IOReservationRelease {
			d = d[:8]
		}
		return c.io.run(sqe, d, fabrics.DirHostToCtrl)
	}
	report := func(c *resvCtrl) nvme.ReservationStatus {
		sqe := newSQE(uint8(nvme.IOReservationReport), nsid)
		cmd := nvme.ReservationReportCommand{SQE: nvme.SQE(sqe[:])}
		cmd.SetLength(4096)
		cmd.SetEDS(true)
		r := c.io.run(sqe, make([]byte, 4096), fabrics.DirCtrlToHost)
		expect(t, r, 0, "report")
		s, err := nvme.ParseReservationStatus(r.data, true)
		must(t, err)
		return s
	}
	ptplFeature := func(set bool, v uint32) result {
		fs := featSQE(set, nvme.FeatReservationPersistence, v)
		nvme.SQE(fs[:]).SetNSID(nsid)
		return a.admin.run(fs, nil, fabrics.DirNone)
	}

	if got := nvme.IdentifyNamespace(a.admin.identify(nvme.CNSNamespace, nsid, 0).data).RESCAP(); got != 0xff {
		t.Fatalf("RESCAP %#x, want 0xff (with PTPL)", got)
	}
	expect(t, run(a, nvme.IOReservationRegister, nvme.ResvRegister, 0, nvme.CPTPLSet, 0, 0xa), 0, "A registers, PTPL on")
	expect(t, run(b, nvme.IOReservationRegister, nvme.ResvRegister, 0, 0, 0, 0xb), 0, "B registers")
	expect(t, run(a, nvme.IOReservationAcquire, nvme.ResvAcquire, nvme.ResvWriteExclusiveRegOnly, 0, 0xa, 0), 0, "A acquires WERO")
	before := report(b)
	if !before.PTPLS || before.Type != nvme.ResvWriteExclusiveRegOnly || before.Registrants != 2 {
		t.Fatalf("report %+v", before)
	}
	if r := ptplFeature(false, 0); r.cqe.DW0() != nvme.ResvPersistencePTPL {
		t.Fatalf("Get Reservation Persistence %#x", r.cqe.DW0())
	}

	// The namespace again, as after a restart: the same state.
	if err := f.tgt.RemoveNamespace(testSubNQN, nsid); err != nil {
		t.Fatal(err)
	}
	must(t, add())
	after := report(b)
	if after.Generation != before.Generation || after.Type != before.Type || !after.PTPLS || len(after.Controllers) != 2 ||
		after.Controllers[0] != before.Controllers[0] || after.Controllers[1] != before.Controllers[1] {
		t.Fatalf("after re-creation %+v, want %+v", after, before)
	}
	sqe := rwSQE(nvme.IOWrite, nsid, 0, 1)
	expect(t, b.io.run(sqe, make([]byte, 512), fabrics.DirHostToCtrl), 0, "B (registrant) writes under the restored WERO")

	// PTPL off: the next re-creation starts empty.
	expect(t, ptplFeature(true, 0), 0, "PTPL off")
	if err := f.tgt.RemoveNamespace(testSubNQN, nsid); err != nil {
		t.Fatal(err)
	}
	must(t, add())
	if st := report(a); st.Registrants != 0 || st.Type != 0 || st.PTPLS {
		t.Fatalf("after PTPL off: %+v", st)
	}
	expect(t, ptplFeature(true, 1), 0, "PTPL on by Set Features")

	// A damaged file fails the namespace, naming the file.
	if err := f.tgt.RemoveNamespace(testSubNQN, nsid); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(file, []byte("{"), 0o600))
	if err := add(); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("damaged file: %v", err)
	}
}
