package soft

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
)

// pingPong sends n SENDs from a to b, one at a time, and has b answer
// each with a SEND before a sends the next, as an NVMe host and target do
// at queue depth 1. It waits for every completion on both sides.
func pingPong(t *testing.T, ea, eb *end, n int) {
	t.Helper()
	abuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	bbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	for i := range n {
		id := uint64(i + 1)
		postRecv(t, eb.qp, id, sge(bbuf, 0, 64))
		postRecv(t, ea.qp, id, sge(abuf, 32, 32))
		postSend(t, ea.qp, &rdma.SendWR{WRID: id, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(abuf, 0, 32)}})
		checkWC(t, poll(t, eb.rcq, 1, 10*time.Second)[0], id, rdma.Success)
		postSend(t, eb.qp, &rdma.SendWR{WRID: id, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(bbuf, 32, 32)}})
		checkWC(t, poll(t, ea.rcq, 1, 10*time.Second)[0], id, rdma.Success)
	}
	poll(t, ea.scq, n, 10*time.Second)
	poll(t, eb.scq, n, 10*time.Second)
}

// TestServeWaitsWithoutEmptyReceive: a receive goroutine that handled a
// batch smaller than it asked for waits for the socket without first
// trying a recvmmsg that would find it empty. At one datagram per wake-up
// the old loop made one such receive per datagram.
func TestServeWaitsWithoutEmptyReceive(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{psnA: 10, psnB: 20})
	rq := b.rxqs[0].Load()
	idle := func() uint64 {
		rq.mu.Lock()
		defer rq.mu.Unlock()
		return rq.idle
	}
	const n = 100
	before := idle()
	pingPong(t, ea, eb, n)
	// A receive finds nothing only after a wake-up for datagrams an
	// earlier receive of the same batch took along (one per batch at
	// most); b gets one datagram, a SEND, per round trip.
	if got := idle() - before; got > n/4 {
		t.Fatalf("%d of %d round trips: the receive goroutine made %d receives that found nothing, want at most %d", n, n, got, n/4)
	}
}

// TestDelayedAckTimerTicks: while a QP's ACKs keep being held and carried
// by its answers, its delayed-ACK timer is started once, not once per
// message (each start wakes the runtime's netpoller on another thread);
// and an ACK nothing carries still leaves, at a tick after AckDelay.
func TestDelayedAckTimerTicks(t *testing.T) {
	const delay = 20 * time.Millisecond // the timer ticks every 80 ms: far longer than a round trip here
	a, b := openPair(t, Config{RecvQueues: 1, AckDelay: delay}, Config{RecvQueues: 1, AckDelay: delay})
	// Local ACK timeout 4.096 µs × 2^18 ≈ 1 s: no retransmission while an
	// ACK is held for up to (1+ackTicks) × delay.
	ea, eb := connect(t, a, b, qpOpts{psnA: 10, psnB: 20, timeout: 18})

	const n = 50
	arms := b.stats.ackTimerArms.Load()
	pingPong(t, ea, eb, n)
	if got := b.stats.ackTimerArms.Load() - arms; got > 5 {
		t.Errorf("%d round trips started b's delayed-ACK timer %d times, want a few", n, got)
	}

	// A last SEND that b does not answer: its ACK leaves on a tick.
	buf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1000, sge(rbuf, 0, 64))
	start := time.Now()
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1000, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(buf, 0, 32)}})
	checkWC(t, poll(t, ea.scq, 1, 10*time.Second)[0], 1000, rdma.Success)
	if el := time.Since(start); el < delay {
		t.Errorf("the held ACK came after %v, before AckDelay %v", el, delay)
	}
	if s := a.Stats(); s.Retransmissions != 0 {
		t.Errorf("%d retransmissions, want 0", s.Retransmissions)
	}
}

// TestProgressWaitSleepsInReceive: ProgressWait sleeps in the receive
// itself, for the time asked (SO_RCVTIMEO), takes a SEND that arrives
// meanwhile, and is woken by the device's close.
func TestProgressWaitSleepsInReceive(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	ea, eb := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	b.quietEvery.Store(int64(time.Hour))
	p := eb.rcq.(rdma.ProgressWaiter)
	rq := b.rxqs[0].Load()
	timeo := func() time.Duration {
		var tv *unix.Timeval
		_ = rq.sock.Control(func(fd uintptr) { tv, _ = unix.GetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO) })
		if tv == nil {
			return -1
		}
		return time.Duration(tv.Nano())
	}

	// A wait may end early: the runtime's preemption signal interrupts
	// a receive that holds its P for 10 ms.
	for _, d := range []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond} {
		if p.ProgressWait(d) {
			t.Fatal("ProgressWait found work with nothing sent")
		}
		// The kernel keeps the timeout in ticks: at least d, under a tick more.
		if got := timeo(); got < d || got > d+20*time.Millisecond {
			t.Errorf("after ProgressWait(%v): SO_RCVTIMEO %v", d, got)
		}
	}

	rbuf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	sbuf := regMR(t, ea.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1, sge(rbuf, 0, 64))
	var stop atomic.Bool
	wait := func(d time.Duration) <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- waitProgress(p, d, &stop) }()
		waitUntil(t, 5*time.Second, "the poller asleep in its receive", func() bool {
			if rq.mu.TryLock() {
				rq.mu.Unlock()
				return false
			}
			return true
		})
		return done
	}
	done := wait(30 * time.Second)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sbuf, 0, 32)}})
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("ProgressWait(30s) returned false with a SEND sent")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ProgressWait(30s) not woken by the SEND")
	}
	checkWC(t, poll(t, eb.rcq, 1, 5*time.Second)[0], 1, rdma.Success)

	done = wait(30 * time.Second)
	stop.Store(true)
	b.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("ProgressWait(30s) not woken by the device's close")
	}
}

// TestPollInSignals: signals that interrupt pollIn's ppoll (the runtime's
// preemption signal) neither end its wait early nor restart it from the
// whole timeout: it returns false once the time given has passed.
func TestPollInSignals(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	const d = 50 * time.Millisecond
	done := make(chan struct{})
	signals := make(chan int, 1)
	go func() {
		n := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		// Signals every millisecond, for at most 10 s: a pollIn that
		// started its wait over at each would not return before.
		for stop := time.After(10 * time.Second); ; {
			select {
			case <-done:
				signals <- n
				return
			case <-stop:
				signals <- n
				return
			case <-tick.C:
				if unix.Tgkill(pid, tid, unix.SIGURG) == nil {
					n++
				}
			}
		}
	}()
	start := time.Now()
	ready := pollIn(uintptr(fds[0]), d)
	el := time.Since(start)
	close(done)
	n := <-signals
	if ready {
		t.Fatal("pollIn reported an empty socket readable")
	}
	if el < d {
		t.Errorf("pollIn returned after %v, before its %v", el, d)
	}
	if el >= 10*time.Second {
		t.Errorf("pollIn returned after %v: it waited anew after each of %d signals", el, n)
	}
	if n == 0 {
		t.Skip("no signal was delivered during the wait")
	}
}

// TestProgressWaitBesideSleeper: while one poller sleeps in a receive
// queue's receive, a poller of another QP's CQ on the same queue sleeps
// in ppoll beside it for the time asked, rather than return at once to
// a caller that would spin, and marks the queue shared: from then on no
// poller sleeps in its receive (where it alone would be woken).
func TestProgressWaitBesideSleeper(t *testing.T) {
	a, b := openPair(t, Config{RecvQueues: 1}, Config{RecvQueues: 1})
	_, eb1 := connect(t, a, b, qpOpts{psnA: 100, psnB: 200})
	_, eb2 := connect(t, a, b, qpOpts{psnA: 300, psnB: 400})
	b.quietEvery.Store(int64(time.Hour))
	rq := b.rxqs[0].Load()
	p1, p2 := eb1.rcq.(rdma.ProgressWaiter), eb2.rcq.(rdma.ProgressWaiter)

	var stop atomic.Bool
	done := make(chan bool, 1)
	go func() { done <- waitProgress(p1, 30*time.Second, &stop) }()
	waitUntil(t, 5*time.Second, "the first poller asleep in its receive", func() bool {
		if rq.mu.TryLock() {
			rq.mu.Unlock()
			return false
		}
		return true
	})
	const d = 50 * time.Millisecond
	start := time.Now()
	if p2.ProgressWait(d) {
		t.Fatal("the second poller found work with nothing sent")
	}
	if el := time.Since(start); el < d {
		t.Errorf("the second poller's ProgressWait(%v) returned after %v", d, el)
	}
	if !rq.shared.Load() {
		t.Fatal("the queue is not marked shared after a poller of another CQ found it busy")
	}

	stop.Store(true)
	b.Close() // wakes the first poller's receive
	<-done
}

// waitProgress calls p.ProgressWait(d) until it reports work, stop is set or
// d has passed, and reports whether it found work. The runtime's
// preemption signal ends a wait after about 10 ms.
func waitProgress(p rdma.ProgressWaiter, d time.Duration, stop *atomic.Bool) bool {
	for end := time.Now().Add(d); !stop.Load() && time.Now().Before(end); {
		if p.ProgressWait(d) {
			return true
		}
	}
	return false
}
