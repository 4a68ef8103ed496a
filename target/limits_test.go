package target

import (
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// controllers returns the number of controllers of the test subsystem.
func (f *fixture) controllers() int {
	f.tgt.mu.RLock()
	defer f.tgt.mu.RUnlock()
	return len(f.tgt.subsys[testSubNQN].ctrls)
}

// TestIOQueueLostReclaimsController: when the transport loses an I/O
// queue (a host gone: the RC retries of a liveness probe or a response
// exhausted) the controller has a fatal error and goes with its admin
// queue, as in Linux (nvmet_rdma_error_comp). A host with KATO 0 has no
// keep-alive timer that would reclaim it otherwise. An orderly close of
// an I/O queue leaves the controller.
func TestIOQueueLostReclaimsController(t *testing.T) {
	f := newFixture(t)
	s := f.session() // KATO 0
	if n := f.controllers(); n != 1 {
		t.Fatalf("%d controllers, want 1", n)
	}
	ioq := func(qid uint16) *queue {
		f.tgt.mu.RLock()
		c := f.tgt.subsys[testSubNQN].ctrls[s.admin.cntlid]
		f.tgt.mu.RUnlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.queues[qid]
	}
	// Orderly: the host closed queue 1 (DREQ).
	ioq(1).QueueClosed(fabrics.ErrQueueClosed)
	if n := f.controllers(); n != 1 {
		t.Fatalf("after an orderly I/O queue close: %d controllers, want 1", n)
	}
	if _, r := s.admin.propGet(fabrics.PropCSTS, 4); r.err != nil || r.status() != 0 {
		t.Fatalf("admin queue after an orderly I/O queue close: %v %v", r.err, r.status())
	}
	f.connectIO(s.admin, 2, 32)
	// Lost: what fabrics/rdma reports when the RC retries are exhausted.
	ioq(2).QueueClosed(errors.New("nvme-rdma: queue 2: rdma: transport retry counter exceeded"))
	if n := f.controllers(); n != 0 {
		t.Fatalf("after a lost I/O queue: %d controllers, want 0", n)
	}
	if r := s.admin.wait(s.admin.submit(newSQE(uint8(nvme.AdminIdentify), 0), make([]byte, 4096), fabrics.DirCtrlToHost)); !errors.Is(r.err, fabrics.ErrQueueClosed) {
		t.Fatalf("admin queue after a lost I/O queue: %v %v, want closed", r.err, r.status())
	}
}

// TestMaxControllers: an admin Connect beyond the subsystem's
// MaxControllers fails with Connect Controller Busy; a controller that
// goes makes room.
func TestMaxControllers(t *testing.T) {
	f := newFixture(t, func(s *SubsystemConfig, _ *PortConfig) { s.MaxControllers = 2 })
	a := f.connectAdmin(testSubNQN, 0)
	f.connectAdmin(testSubNQN, 0)
	h := f.dial(0, 31)
	r := h.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic)
	expect(t, r, fabrics.StatusConnectControllerBusy, "third admin Connect")
	if !r.cqe.DNR() {
		t.Error("Controller Busy without DNR")
	}
	// The discovery subsystem has no such bound.
	for range 3 {
		f.connectAdmin(fabrics.DiscoveryNQN, 0)
	}
	a.q.Close()
	// The target hears of it on the transport's goroutine.
	waitUntil(t, "the controller of the closed admin queue removed", 5*time.Second, func() bool { return f.controllers() == 1 })
	h = f.dial(0, 31)
	expect(t, h.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect after one left")
}
