package target

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Issue 22: what a peer without the host's key, or with another host's
// Host ID, or with one allowed NQN and many Connects, can do to a target.

// authedVictim is a host with a key: its admin queue and I/O queue 1
// authenticated, the controller enabled and no Number of Queues set, so
// every I/O queue up to MaxIOQueues is granted.
type authedVictim struct {
	admin, io *hq
	cfg       auth.HostConfig
}

func newAuthedVictim(t *testing.T, f *fixture) *authedVictim {
	t.Helper()
	hk := genKey(t, auth.HashSHA256)
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: hk}))
	v := &authedVictim{cfg: auth.HostConfig{Key: hk}}
	v.admin = f.dial(0, 31)
	r := v.admin.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, 0, "victim admin Connect")
	v.admin.cntlid = fabrics.ConnectResultCntlID(r.cqe.DW0())
	must(t, v.admin.authenticate(v.cfg))
	v.admin.enable()
	v.io = f.dial(1, 16)
	expect(t, v.io.connectRaw(16, 0, 0, testSubNQN, testHostNQN, v.admin.cntlid), 0, "victim I/O Connect")
	must(t, v.io.authenticate(v.cfg))
	return v
}

// alive checks the victim's admin and I/O queues still work.
func (v *authedVictim) alive(t *testing.T, what string) {
	t.Helper()
	expect(t, v.admin.identify(nvme.CNSController, 0, 0), 0, what+": victim Identify")
	expect(t, v.io.read(1, 0, 8), 0, what+": victim Read")
}

// attackerIO connects I/O queue qid of the victim's controller as a peer
// that knows the host NQN and guessed the controller ID, without a key.
func attackerIO(t *testing.T, f *fixture, v *authedVictim, qid uint16) *hq {
	t.Helper()
	a := f.dial(qid, 16)
	r := a.connectRaw(16, 0, 0, testSubNQN, testHostNQN, v.admin.cntlid)
	expect(t, r, 0, "attacker I/O Connect")
	if fabrics.ConnectResultAuthReq(r.cqe.DW0()) != 2 {
		t.Fatalf("attacker I/O Connect DW0 %#x: AUTHREQ.ATR not set", r.cqe.DW0())
	}
	expect(t, a.read(1, 0, 8), fabrics.StatusAuthenticationRequired, "attacker Read before authenticating")
	return a
}

// TestAuthIOQueueFailureClosesOnlyThatQueue: a keyless peer's failed
// transaction on an I/O queue of an authenticated controller closes that
// queue only; the log names it by its transport address.
func TestAuthIOQueueFailureClosesOnlyThatQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(h *hq)
	}{
		{"Receive before Negotiate", func(h *hq) {
			r := h.authReceive(auth.MaxMessageLen)
			expect(t, r, 0, "attacker Authentication Receive")
		}},
		{"wrong key", func(h *hq) {
			err := h.authenticate(auth.HostConfig{Key: genKey(t, auth.HashSHA256)})
			var ae *auth.Error
			if !errors.As(err, &ae) || ae.Reason != auth.ReasonFailed {
				t.Fatalf("attacker with a wrong key: %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, logs := newLoggedFixture(t, Options{})
			v := newAuthedVictim(t, f)
			a := attackerIO(t, f, v, 2)
			tc.fail(a)
			waitClosed(t, a, 3*time.Second)
			v.alive(t, "after the attacker's failure")
			if n := f.controllers(); n != 1 {
				t.Fatalf("%d controllers, want 1", n)
			}
			out := logs.String()
			if !strings.Contains(out, "authentication failed") || !strings.Contains(out, "remote=") {
				t.Errorf("the failure is not logged with the peer's address:\n%s", out)
			}
			if strings.Contains(out, "controller removed") {
				t.Errorf("controller removed:\n%s", out)
			}
			// The host itself still connects that queue.
			io2 := f.dial(2, 16)
			expect(t, io2.connectRaw(16, 0, 0, testSubNQN, testHostNQN, v.admin.cntlid), 0, "victim I/O Connect of queue 2")
			must(t, io2.authenticate(v.cfg))
			expect(t, io2.read(1, 0, 8), 0, "victim Read on queue 2")
		})
	}
}

// TestAuthUnauthenticatedQueueHoldsNoQID: a keyless peer that connected a
// granted I/O queue does not keep the host from connecting it; the queue
// that authenticates takes the QID and the other is closed.
func TestAuthUnauthenticatedQueueHoldsNoQID(t *testing.T) {
	f := newFixture(t)
	v := newAuthedVictim(t, f)
	a := attackerIO(t, f, v, 3)
	io3 := f.dial(3, 16)
	expect(t, io3.connectRaw(16, 0, 0, testSubNQN, testHostNQN, v.admin.cntlid), 0, "victim I/O Connect of the queue the attacker holds")
	must(t, io3.authenticate(v.cfg))
	expect(t, io3.read(1, 0, 8), 0, "victim Read on queue 3")
	waitClosed(t, a, 3*time.Second)
	v.alive(t, "after the host took queue 3")
	// Once it is the host's, a second Connect of the QID is refused.
	again := f.dial(3, 16)
	expect(t, again.connectRaw(16, 0, 0, testSubNQN, testHostNQN, v.admin.cntlid), nvme.StatusCommandSequenceError, "second Connect of an authenticated queue")
}

// TestUnauthenticatedIOQueueLossNotFatal: the transport losing an I/O
// queue that never authenticated is not the controller's fatal error (a
// keyless peer that vanishes must not take the host's controller along).
func TestUnauthenticatedIOQueueLossNotFatal(t *testing.T) {
	f := newFixture(t)
	v := newAuthedVictim(t, f)
	attackerIO(t, f, v, 2)
	var tq *queue
	p := f.tgt.ports[testPortID]
	p.mu.Lock()
	for q := range p.queues {
		if c := q.ctrl.Load(); c != nil && c.cntlid == v.admin.cntlid && q.qid == 2 {
			tq = q
		}
	}
	p.mu.Unlock()
	if tq == nil {
		t.Fatal("attacker's queue not found")
	}
	tq.QueueClosed(errors.New("nvme-rdma: queue 2: rdma: transport retry counter exceeded"))
	v.alive(t, "after the attacker's queue was lost")
	if n := f.controllers(); n != 1 {
		t.Fatalf("%d controllers, want 1", n)
	}
}

// TestAuthDeadline: a queue that must authenticate and does not is closed
// within DefaultAuthDeadline (10 s), not after KATO or 120 s: an admin
// queue with its controller, an I/O queue alone.
func TestAuthDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		v := newAuthedVictim(t, f)
		a := attackerIO(t, f, v, 2)
		adm := f.dial(0, 31)
		expect(t, adm.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect without authenticating")
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		waitClosed(t, a, 0)
		waitClosed(t, adm, 0)
		v.alive(t, "after the deadline")
		if n := f.controllers(); n != 1 {
			t.Fatalf("%d controllers, want 1", n)
		}
	})
}

// TestHostIDBoundToNQN: a Host ID belongs to the host NQN that uses it in
// the subsystem while it has a controller or a registration there; another
// NQN presenting it is refused at Connect (Connect Invalid Host), so it
// cannot write through the holder's reservation or release it.
func TestHostIDBoundToNQN(t *testing.T) {
	logs := &syncBuffer{}
	f := newFixtureWith(t, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})},
		func(s *SubsystemConfig, _ *PortConfig) { s.AllowAnyHost = true })
	mem, err := bdev.NewMemory(1<<20, 512)
	must(t, err)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: resvNSID, Device: mem, Reservations: true}))
	connect := func(nqn string, id [16]byte) (result, *hq) {
		h := f.dial(0, 31)
		sqe, d := connectSQE(0, 31, 0, 0, testSubNQN, nqn, fabrics.CntlIDDynamic)
		fabrics.ConnectData(d).SetHostID(id)
		return h.run(sqe, d, fabrics.DirHostToCtrl), h
	}
	a := f.connectAs(t, hostANQN, hostA)
	expect(t, a.register(nvme.ResvRegister, false, 0, 0xa), 0, "A registers")
	expect(t, a.acquire(nvme.ResvAcquire, nvme.ResvWriteExclusive, 0xa, 0), 0, "A acquires Write Exclusive")

	r, _ := connect(hostBNQN, hostA)
	expect(t, r, fabrics.StatusConnectInvalidHost, "B connects with A's Host ID")
	if !r.cqe.DNR() {
		t.Error("Connect Invalid Host without DNR")
	}
	if out := logs.String(); !strings.Contains(out, "remote=") || !strings.Contains(out, hostANQN) {
		t.Errorf("the refusal does not name the peer's address and the owner:\n%s", out)
	}
	// A itself connects again; B with its own Host ID too.
	r, a2 := connect(hostANQN, hostA)
	expect(t, r, 0, "A connects again")
	b := f.connectAs(t, hostBNQN, hostB)
	expect(t, b.write(), nvme.StatusReservationConflict, "B writes under A's reservation")

	// A's controllers gone, its registration still binds the Host ID.
	a.admin.q.Close()
	a2.q.Close()
	waitUntil(t, "A's controllers removed", 3*time.Second, func() bool { return f.controllers() == 1 })
	r, _ = connect(hostBNQN, hostA)
	expect(t, r, fabrics.StatusConnectInvalidHost, "B with A's Host ID, A registered but not connected")
}

// TestControllersPerHostDefault: by default one host NQN has at most 16
// controllers in a subsystem, and a subsystem at most 1024; past either,
// admin Connect fails with Connect Controller Busy (DNR). Other hosts are
// not affected by one host's bound.
func TestControllersPerHostDefault(t *testing.T) {
	f := newFixture(t, func(s *SubsystemConfig, _ *PortConfig) { s.AllowAnyHost = true })
	const perHost, perSubsys = 16, 1024
	connect := func(nqn string) result {
		return f.dial(0, 31).connectAs(testSubNQN, nqn)
	}
	for range perHost {
		expect(t, connect(testHostNQN), 0, "admin Connect")
	}
	r := connect(testHostNQN)
	expect(t, r, fabrics.StatusConnectControllerBusy, "one more controller of the same host")
	if !r.cqe.DNR() {
		t.Error("Controller Busy without DNR")
	}
	expect(t, connect(otherHost), 0, "another host")
	// The discovery subsystem bounds each host too.
	disc := func() result { return f.dial(0, 31).connectAs(fabrics.DiscoveryNQN, testHostNQN) }
	for range perHost {
		expect(t, disc(), 0, "discovery Connect")
	}
	expect(t, disc(), fabrics.StatusConnectControllerBusy, "one more discovery controller")

	// The subsystem's bound: many hosts.
	n := f.controllers()
	for i := 0; n < perSubsys; i++ {
		nqn := "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-" + strings.Repeat("0", 8) + hex4(i)
		for j := 0; j < perHost && n < perSubsys; j++ {
			expect(t, connect(nqn), 0, "admin Connect of "+nqn)
			n++
		}
	}
	expect(t, connect("nqn.2014-08.org.nvmexpress:uuid:ffffffff-0000-0000-0000-000000000000"), fabrics.StatusConnectControllerBusy, "a controller past the subsystem's bound")
}

// connectAs runs an admin Connect to subnqn as host nqn, with the Host ID
// of its NQN's UUID.
func (h *hq) connectAs(subnqn, nqn string) result {
	h.t.Helper()
	sqe, d := connectSQE(0, 31, 0, 0, subnqn, nqn, fabrics.CntlIDDynamic)
	id, ok := fabrics.UUIDFromNQN(nqn)
	if !ok {
		h.t.Fatalf("%s: no UUID", nqn)
	}
	fabrics.ConnectData(d).SetHostID(id)
	return h.run(sqe, d, fabrics.DirHostToCtrl)
}

func hex4(i int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[i>>12&15], digits[i>>8&15], digits[i>>4&15], digits[i&15]})
}
