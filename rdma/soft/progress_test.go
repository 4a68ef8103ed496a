package soft

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// TestProgressOnCallerGoroutine holds every receive queue of the receiving
// device, so that its goroutines cannot receive, and shows that a SEND's
// receive completion then arrives through poll on the test's goroutine,
// its CQ handler run before poll returns.
func TestProgressOnCallerGoroutine(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	var polling, onCaller, got atomic.Int32
	eb.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) {
		got.Add(int32(len(wcs)))
		if polling.Load() == 1 {
			onCaller.Add(int32(len(wcs)))
		}
	})
	waitUntil(t, 5*time.Second, "receive queues started", func() bool {
		for i := range b.rxqs {
			if b.rxqs[i].Load() == nil {
				return false
			}
		}
		return true
	})
	for i := range b.rxqs {
		b.rxqs[i].Load().mu.Lock()
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			for i := range b.rxqs {
				b.rxqs[i].Load().mu.Unlock()
			}
		}
	}
	defer unlock()

	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1, sge(rbuf, 0, 64))
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sbuf, 0, 32)}})

	deadline := time.Now().Add(10 * time.Second)
	for got.Load() == 0 && time.Now().Before(deadline) {
		polling.Store(1)
		for i := range b.rxqs {
			b.rxqs[i].Load().poll()
		}
		polling.Store(0)
	}
	unlock()
	if got.Load() != 1 || onCaller.Load() != 1 {
		t.Fatalf("receive completions: %d, %d of them from poll on the test's goroutine; want 1 and 1", got.Load(), onCaller.Load())
	}
	poll(t, ea.scq, 1, 5*time.Second)

	// Nothing pending: Progress costs a non-blocking receive per queue.
	if n := testing.AllocsPerRun(100, func() { eb.rcq.(rdma.Progresser).Progress() }); n != 0 {
		t.Errorf("Progress with nothing to receive: %v allocations, want 0", n)
	}
}

// TestProgressReadsTheCQsQueues: a CQ's Progress reads the receive queue
// its QP's packets are steered to, not every queue of the device.
func TestProgressReadsTheCQsQueues(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 2}, Config{RecvQueues: 2})
	ea, _ := connect(t, a, b, qpOpts{})
	want := uint32(1) << a.queueOf(ea.qp.QPN())
	for _, c := range []rdma.CQ{ea.scq, ea.rcq} {
		if got := c.(*cq).rxqMask.Load(); got != want {
			t.Errorf("CQ receive queue mask %#b, want %#b (QP %#x)", got, want, ea.qp.QPN())
		}
	}
}
