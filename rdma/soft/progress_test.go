package soft

import (
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestProgressQuietsItsQueues: while a consumer polls, the datagrams of
// its CQ's receive queue wake nothing (the queue's epoll instance, which
// its goroutine waits on, stays empty though the socket holds a SEND);
// Progress takes the SEND; after ProgressDone the goroutine takes the next
// one by itself; and a poller that leaves without ProgressDone gets its
// queue back from watchQuiet.
func TestProgressQuietsItsQueues(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	var got atomic.Int32
	eb.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) { got.Add(int32(len(wcs))) })
	p := eb.rcq.(rdma.Progresser)
	rq := b.rxqs[0].Load()
	b.quietEvery.Store(int64(time.Hour)) // no watchQuiet until the last part
	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	send := func(id uint64) {
		t.Helper()
		postRecv(t, eb.qp, id, sge(rbuf, 0, 64))
		postSend(t, ea.qp, &rdma.SendWR{WRID: id, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sbuf, 0, 32)}})
	}
	readable := func(fd int) bool {
		t.Helper()
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 5000)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	p.Progress()
	rq.mu.Lock()
	quiet := rq.quiet
	rq.mu.Unlock()
	if !quiet {
		t.Fatal("the polled receive queue is not quiet")
	}
	send(1)
	if !readable(rq.w.sock) {
		t.Fatal("the SEND did not reach the device's socket in 5 s")
	}
	var ev [1]unix.EpollEvent
	var n int
	var err error
	rq.w.rc.Control(func(ep uintptr) { n, err = unix.EpollWait(int(ep), ev[:], 0) })
	if n != 0 || err != nil {
		t.Fatalf("the quiet queue's epoll instance reports %d events (%v): its goroutine would wake", n, err)
	}
	waitUntil(t, 5*time.Second, "Progress takes the SEND", func() bool {
		p.Progress()
		return got.Load() == 1
	})

	p.ProgressDone()
	send(2)
	waitUntil(t, 5*time.Second, "the receive goroutine takes the SEND after ProgressDone", func() bool { return got.Load() == 2 })

	// A poller that goes away without ProgressDone.
	p.Progress()
	send(3)
	b.quietEvery.Store(int64(time.Millisecond))
	b.quietTimer.Reset(time.Millisecond)
	waitUntil(t, 5*time.Second, "watchQuiet gives the queue back to its goroutine", func() bool { return got.Load() == 3 })
	rq.mu.Lock()
	quiet = rq.quiet
	rq.mu.Unlock()
	if quiet {
		t.Error("the queue is still quiet after its poller left")
	}
	poll(t, ea.scq, 3, 5*time.Second)
}

// TestReceiveGoroutineNoStall: a datagram that arrives while the receive
// goroutine handles the previous batch is received without waiting for the
// next one. The receiving side's CQ handler, which runs in its receive
// goroutine, posts the next SEND towards itself, so that each datagram
// lands during the batch before it; 100 of them must complete without a
// retransmission, with a 1 s retransmission timeout that a datagram left
// in the socket would have had to wait for. (A goroutine that parked
// after a short batch without trying the socket, trusting the readiness
// the netpoller latched, failed this: RawConn.Read clears that readiness
// before it starts.)
func TestReceiveGoroutineNoStall(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{timeout: 18})
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	const n = 100
	var got atomic.Int32
	done := make(chan struct{})
	errs := make(chan error, 1)
	send := func(i uint64) {
		if err := eb.qp.PostRecv(&rdma.RecvWR{WRID: i, SGL: []rdma.SGE{sge(rbuf, 0, 64)}}); err != nil {
			errs <- err
			return
		}
		if err := ea.qp.PostSend(&rdma.SendWR{WRID: i, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(sbuf, 0, 16)}}); err != nil {
			errs <- err
		}
	}
	eb.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) {
		for range wcs {
			switch k := got.Add(1); {
			case k < n:
				send(uint64(k))
			case k == n:
				close(done)
			}
		}
	})
	send(0)
	select {
	case <-done:
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d SENDs received in 60 s", got.Load(), n)
	}
	for _, d := range []*Device{a, b} {
		if s := d.Stats(); s.Retransmissions != 0 || s.Timeouts != 0 {
			t.Errorf("%s: %d retransmissions, %d timeouts; want none", d.Name(), s.Retransmissions, s.Timeouts)
		}
	}
}

// TestProgressWait: ProgressWait sleeps on the CQ's receive socket and is
// woken by the datagram, which it handles on the caller's goroutine (not
// the queue's goroutine, which a quiet queue does not wake); with nothing
// coming it returns false once d has passed, without allocating.
func TestProgressWait(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	b.quietEvery.Store(int64(time.Hour)) // the queue stays quiet while we wait
	var waiting, onCaller, got atomic.Int32
	eb.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) {
		got.Add(int32(len(wcs)))
		if waiting.Load() == 1 {
			onCaller.Add(int32(len(wcs)))
		}
	})
	p := eb.rcq.(rdma.ProgressWaiter)
	if p.ProgressWait(time.Millisecond) {
		t.Fatal("ProgressWait found work with nothing sent")
	}
	if n := testing.AllocsPerRun(20, func() { p.ProgressWait(10 * time.Microsecond) }); n != 0 {
		t.Errorf("ProgressWait with nothing to receive: %v allocations, want 0", n)
	}

	rq := b.rxqs[0].Load()
	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1, sge(rbuf, 0, 64))
	type result struct {
		ok      bool
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		waiting.Store(1)
		start := time.Now()
		var stop atomic.Bool // the preemption signal ends a wait early: go on
		ok := waitProgress(p, 30*time.Second, &stop)
		waiting.Store(0)
		done <- result{ok, time.Since(start)}
	}()
	waitUntil(t, 5*time.Second, "the waiting poller quiets its queue", func() bool {
		if !rq.mu.TryLock() {
			return true // the poller holds it: quieting it, or asleep in its receive
		}
		defer rq.mu.Unlock()
		return rq.quiet
	})
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sbuf, 0, 32)}})
	r := <-done
	if !r.ok || r.elapsed > 20*time.Second {
		t.Fatalf("ProgressWait(30s) = %v after %v: not woken by the SEND", r.ok, r.elapsed)
	}
	if got.Load() != 1 || onCaller.Load() != 1 {
		t.Fatalf("receive completions: %d, %d of them on the waiting goroutine; want 1 and 1", got.Load(), onCaller.Load())
	}
	poll(t, ea.scq, 1, 5*time.Second)
}

// TestProgressWaitDrained: once a poll has left the CQ's quiet receive
// queue empty, ProgressWait goes to ppoll without a receive that would
// find nothing, and still takes a datagram that arrived before it was
// called (ppoll returns at once for it).
func TestProgressWaitDrained(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	b.quietEvery.Store(int64(time.Hour)) // the queue stays quiet while we wait
	var got atomic.Int32
	eb.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) { got.Add(int32(len(wcs))) })
	p := eb.rcq.(rdma.ProgressWaiter)
	rq := b.rxqs[0].Load()
	state := func() (drained, quiet bool, empty uint64) {
		rq.mu.Lock()
		defer rq.mu.Unlock()
		return rq.drained, rq.quiet, rq.empty
	}
	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	send := func(id uint64) {
		postRecv(t, eb.qp, id, sge(rbuf, 0, 64))
		postSend(t, ea.qp, &rdma.SendWR{WRID: id, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sbuf, 0, 32)}})
	}

	// The first call quiets the queue: from then on only this poller
	// receives.
	if p.ProgressWait(time.Millisecond) {
		t.Fatal("ProgressWait found work with nothing sent")
	}
	send(1)
	for got.Load() < 1 {
		p.ProgressWait(time.Second)
	}
	if drained, quiet, _ := state(); !drained || !quiet {
		t.Fatalf("after the first SEND: drained %v, quiet %v; want both", drained, quiet)
	}
	_, _, empty := state()
	if p.ProgressWait(time.Millisecond) {
		t.Fatal("ProgressWait found work with nothing sent")
	}
	if _, _, e := state(); e != empty {
		t.Fatalf("ProgressWait on a drained queue made %d receives that found nothing, want 0", e-empty)
	}

	send(2)
	waitUntil(t, 5*time.Second, "the second SEND waits in the socket", func() bool {
		ready := false
		_ = rq.sock.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			ready = err == nil && n > 0
		})
		return ready
	})
	start := time.Now()
	if !p.ProgressWait(30 * time.Second) {
		t.Fatal("ProgressWait did not take the datagram that was waiting")
	}
	if el := time.Since(start); el > 20*time.Second || got.Load() != 2 {
		t.Fatalf("after %v: %d receive completions, want 2", el, got.Load())
	}
	if _, _, e := state(); e != empty {
		t.Fatalf("%d receives found nothing, want 0", e-empty)
	}
	poll(t, ea.scq, 2, 5*time.Second)
}
