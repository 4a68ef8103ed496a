package soft

import (
	"iter"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
)

var _ rdma.Progresser = (*cq)(nil)

// rxQueue is one receive queue's socket and receive state, shared by the
// queue's goroutine (rxLoop) and by consumers that drive the device on
// their own goroutine (Progress). Whoever holds mu receives and handles a
// batch; the goroutine holds it from the datagrams' arrival to the end of
// their batch, never while it waits.
type rxQueue struct {
	mu      sync.Mutex
	sock    *sockConn
	w       *rxWaiter // what the goroutine waits on
	m       *mmsg
	batch   int
	process func(n int) // handles m's n datagrams and ends the batch (under mu)
	got     bool        // controlRecv's result

	// A quiet queue's socket is out of w (disarmed): a poller reads it,
	// and its datagrams wake no goroutine. Under mu. polls counts
	// Progress calls; seen is the count watchQuiet saw last.
	quiet       bool
	polls, seen uint64
	// drained: the last poll left the socket empty (EAGAIN, or fewer
	// datagrams than it asked for); empty counts polls that found
	// nothing. Under mu.
	drained bool
	empty   uint64

	// errno is the receive error that ended serve's Read (the
	// goroutine's own); idle counts serve's receives that found nothing
	// (under mu).
	errno syscall.Errno
	idle  uint64

	// rcvTimeo is the socket's SO_RCVTIMEO, the longest a poller's
	// blocking receive sleeps (pollWait); waitFor the one it wants next.
	// Under mu.
	rcvTimeo, waitFor time.Duration
	// sleeper is the CQ whose poller last slept in the receive. shared:
	// pollers of another CQ found the queue busy since it went quiet.
	// A poller asleep in the receive holds mu, so it alone would be woken
	// by the others' datagrams (it handles them, but their threads sleep
	// on): pollers of a shared queue all sleep in ppoll, which wakes
	// every one.
	sleeper atomic.Pointer[cq]
	shared  atomic.Bool

	// The receive callbacks, bound once so that none allocates.
	serveFn func(fd uintptr) bool
	ctlFn   func(fd uintptr)
	waitFn  func(fd uintptr)
}

// recv receives one batch without blocking (under mu). It reports false
// when the socket had nothing (EAGAIN).
func (rq *rxQueue) recv(fd uintptr) bool {
	m := rq.m
	m.n = min(rq.batch, len(m.hdrs))
	m.res, m.errno = 0, 0
	return m.recv(fd)
}

// serve is the goroutine's callback for the Read of its epoll instance
// (whose descriptor it is given and ignores). It receives and handles
// batches under mu until one leaves the socket empty (EAGAIN, or fewer
// datagrams than it asked for), then reports false: Read waits for the
// socket and calls it again. Staying in one Read is what lets it wait
// without a recvmmsg that finds the socket empty: the netpoller latches a
// datagram that arrives from here on, and only a new Read would clear
// that (pollDesc prepareRead). It reports true, ending the Read, on a
// receive error, which it leaves in m.errno.
func (rq *rxQueue) serve(uintptr) bool {
	for {
		rq.mu.Lock()
		if !rq.recv(uintptr(rq.w.sock)) {
			rq.idle++
			rq.mu.Unlock()
			return false
		}
		m := rq.m
		if m.errno != 0 {
			rq.errno = m.errno
			rq.mu.Unlock()
			return true
		}
		n, full := m.res, m.res >= m.n
		rq.process(n)
		rq.mu.Unlock()
		if !full {
			return false
		}
	}
}

// controlRecv is Progress's RawConn.Control callback (mu held). Control,
// unlike Read, does not serialise with the goroutine parked in Read, and
// it keeps the descriptor from being closed while it runs.
func (rq *rxQueue) controlRecv(fd uintptr) { rq.got = rq.recv(fd) }

// controlRecvWait is pollWait's RawConn.Control callback (mu held): a
// blocking receive of up to rq.waitFor. SO_RCVTIMEO is set only when the
// wait changes: fio's engine asks for the same window every time.
func (rq *rxQueue) controlRecvWait(fd uintptr) {
	rq.got = false
	if rq.waitFor != rq.rcvTimeo {
		tv := unix.NsecToTimeval(int64(rq.waitFor))
		if unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) != nil {
			return
		}
		rq.rcvTimeo = rq.waitFor
	}
	m := rq.m
	m.n = min(rq.batch, len(m.hdrs))
	m.res, m.errno = 0, 0
	rq.got = m.recvWait(fd)
}

// run receives and handles datagrams as they arrive until the epoll
// instance closes or a receive fails, and returns the error.
func (rq *rxQueue) run() error {
	rq.errno = 0
	if err := rq.w.rc.Read(rq.serveFn); err != nil {
		return err
	}
	if rq.errno == 0 {
		return nil
	}
	return rq.errno
}

// Progress receives and handles what the device's sockets hold now, on the
// caller's goroutine, and with it runs the completion handlers of the CQs
// that got completions (rdma.Progresser). It skips a receive queue whose
// goroutine is busy handling a batch, never blocks, and reports whether it
// handled any datagram.
// It reads only the receive queues the CQ's QPs get their packets from
// (all of them while it has none): a poller of several I/O queues would
// otherwise read every queue once per I/O queue, mostly for nothing.
// The queues it reads turn quiet until ProgressDone, or until nobody has
// polled them for quietCheck (to 2 quietCheck).
func (c *cq) Progress() bool { return c.dev.progress(c.rxqMask.Load()) }

// ProgressDone ends the caller's polling: the receive goroutines of the
// CQ's queues take their datagrams again (rdma.Progresser).
func (c *cq) ProgressDone() { c.dev.unquiet(c.rxqMask.Load()) }

// quietCheck is how often a quiet receive queue is checked for a poller
// that went away without ProgressDone; its datagrams wait at most twice
// this long. Each check is a timer firing in the poller's process, a
// thread woken on another CPU: rare enough not to matter at 25K I/Os per
// second on one queue, short against RC's retransmission timeouts.
const quietCheck = 5 * time.Millisecond

// progress is Progress for the receive queues of mask (0: every one).
func (d *Device) progress(mask uint32) bool {
	got := false
	for rq := range d.pollable(mask) {
		if !rq.mu.TryLock() {
			continue
		}
		rq.polls++
		if !rq.quiet {
			d.quieten(rq)
		}
		if rq.poll() {
			got = true
		}
		rq.mu.Unlock()
	}
	return got
}

// pollable yields the receive queues of mask (0: every one) that a poller
// reads: not udp4 mode's raw socket, which carries rxe's packets only (its
// goroutine serves it, and pollers skip a syscall), and so is never quiet.
func (d *Device) pollable(mask uint32) iter.Seq[*rxQueue] {
	return func(yield func(*rxQueue) bool) {
		for i := range d.rxqs {
			if mask != 0 && mask&(1<<i) == 0 || i == d.socks.assistQueue {
				continue
			}
			if rq := d.rxqs[i].Load(); rq != nil && !yield(rq) {
				return
			}
		}
	}
}

// quieten takes rq's socket out of its goroutine's epoll instance (mu
// held): while a poller reads it, a datagram wakes no thread of the
// process but the poller's (on two CPUs, the other one runs the peer).
func (d *Device) quieten(rq *rxQueue) {
	if rq.w.disarm() != nil {
		return
	}
	rq.quiet = true
	if d.quietArmed.CompareAndSwap(false, true) {
		d.quietTimer.Reset(time.Duration(d.quietEvery.Load()))
	}
}

// unquiet gives the quiet queues of mask (0: every one) back to their
// goroutines.
func (d *Device) unquiet(mask uint32) {
	for rq := range d.pollable(mask) {
		rq.mu.Lock()
		rq.wake()
		rq.mu.Unlock()
	}
}

// wake puts a quiet queue's socket back in its goroutine's epoll instance
// (mu held), which wakes the goroutine at once if datagrams wait.
func (rq *rxQueue) wake() {
	if rq.quiet {
		rq.quiet = false
		rq.sleeper.Store(nil)
		rq.shared.Store(false)
		_ = rq.w.arm()
	}
}

// watchQuiet wakes the quiet queues nobody polled since its last run and
// runs again while some stay quiet.
func (d *Device) watchQuiet() {
	d.quietArmed.Store(false)
	again := false
	for i := range d.rxqs {
		rq := d.rxqs[i].Load()
		if rq == nil {
			continue
		}
		if !rq.mu.TryLock() {
			again = true // polled (or handling a batch) right now
			continue
		}
		if rq.quiet {
			if rq.polls == rq.seen {
				rq.wake()
			} else {
				rq.seen = rq.polls
				again = true
			}
		}
		rq.mu.Unlock()
	}
	if again && !d.isClosed() && d.quietArmed.CompareAndSwap(false, true) {
		d.quietTimer.Reset(time.Duration(d.quietEvery.Load()))
	}
}

// poll receives and handles one batch without blocking (mu held) and
// reports whether there was one.
func (rq *rxQueue) poll() bool {
	rq.got = false
	if rq.sock.Control(rq.ctlFn) != nil || !rq.got || rq.m.errno != 0 || rq.m.res <= 0 {
		if !rq.got {
			rq.drained = true
			rq.empty++
		}
		return false
	}
	rq.drained = rq.m.res < rq.m.n
	rq.process(rq.m.res)
	return true
}

var _ rdma.ProgressWaiter = (*cq)(nil)

// ProgressWait is Progress that sleeps for up to d (rounded up to the
// kernel's tick) when the CQ's receive socket holds nothing
// (rdma.ProgressWaiter). It waits only when the CQ's packets come on one
// receive queue, which a poller has then quieted: with several it returns
// false at once. It sleeps in the receive itself (a blocking recvmmsg, one
// system call where ppoll and then recvmmsg were two), or in ppoll when
// pollers of other CQs share the queue (rxQueue.shared); when the poller's
// last receive left the queue empty it sleeps there at once, without
// trying the socket first: at queue depth 1 the reply is never there yet.
// A signal (the runtime preempts a goroutine that held its P for 10 ms)
// ends the sleep early.
func (c *cq) ProgressWait(d time.Duration) bool {
	mask := c.rxqMask.Load()
	one := c.dev.onePollable(mask)
	skip := d > 0 && one != nil && one.drainedQuiet()
	if !skip && c.dev.progress(mask) {
		return true
	}
	if d <= 0 || one == nil {
		return false
	}
	if !one.shared.Load() {
		got, busy := c.dev.pollWait(one, c, d)
		if !busy {
			return got
		}
		if s := one.sleeper.Load(); s != nil && s != c {
			one.shared.Store(true)
		}
	}
	if !one.waitReadable(d) {
		return false
	}
	return c.dev.progress(mask)
}

// pollWait is progress for the one receive queue rq of c, sleeping in
// its receive for up to dl; busy, it does nothing and says so. The
// queue's lock is held while it sleeps: the queue is quiet, so its
// goroutine waits for nothing, and other pollers find it busy (shared).
func (d *Device) pollWait(rq *rxQueue, c *cq, dl time.Duration) (got, busy bool) {
	if !rq.mu.TryLock() {
		return false, true
	}
	defer rq.mu.Unlock()
	rq.polls++
	if !rq.quiet {
		d.quieten(rq)
	}
	rq.sleeper.Store(c)
	rq.waitFor = dl
	if rq.sock.Control(rq.waitFn) != nil || !rq.got || rq.m.errno != 0 || rq.m.res <= 0 {
		return false, false
	}
	rq.drained = rq.m.res < rq.m.n
	rq.process(rq.m.res)
	return true, false
}

// waitReadable waits up to dl for rq's socket to hold a datagram, and
// reports whether it does.
func (rq *rxQueue) waitReadable(dl time.Duration) bool {
	ready := false
	_ = rq.sock.Control(func(fd uintptr) { ready = pollIn(fd, dl) })
	return ready
}

// onePollable returns the receive queue of mask when it is the only
// pollable one, else nil.
func (d *Device) onePollable(mask uint32) *rxQueue {
	var one *rxQueue
	for rq := range d.pollable(mask) {
		if one != nil {
			return nil
		}
		one = rq
	}
	return one
}

// drainedQuiet reports whether rq is quiet (only pollers read it) and
// was left empty by the last poll. It counts as a poll for watchQuiet.
func (rq *rxQueue) drainedQuiet() bool {
	if !rq.mu.TryLock() {
		return false
	}
	rq.polls++
	ok := rq.quiet && rq.drained
	rq.mu.Unlock()
	return ok
}
