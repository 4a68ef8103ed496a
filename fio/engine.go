package fio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/internal/monoclock"
	"github.com/nvmeof/nvmeof/nvme"
)

// Op is the operation of one request: the initiator's.
type Op = initiator.Op

// Operations, as fio's data directions map onto NVMe commands.
const (
	OpRead  = initiator.OpRead  // DDIR_READ: Read
	OpWrite = initiator.OpWrite // DDIR_WRITE: Write
	OpTrim  = initiator.OpTrim  // DDIR_TRIM: Dataset Management, Deallocate
	OpFlush = initiator.OpFlush // DDIR_SYNC, DDIR_DATASYNC: Flush
)

// Request is one I/O handed to Submit.
type Request struct {
	Op Op
	// Buf is the data buffer of a read or write; the engine reads or
	// fills it until the request completes.
	Buf []byte
	// Off is the byte offset in the namespace; Len the byte length of a
	// trim (reads and writes move len(Buf)).
	Off int64
	Len int64
}

// Completion is a finished request, as Reap returns it.
type Completion struct {
	// Slot is the slot the request was submitted on.
	Slot int32
	// Errno is 0 on success, else the error as an errno for fio.
	Errno syscall.Errno
	// Resid is the number of bytes not transferred.
	Resid int64
}

// slot is the state of one request slot: the request, the initiator I/O
// that carries it (its Done bound once to the slot) and the result. The
// submitter writes the request before Start; Done writes the result before
// it pushes the slot on the completion ring, whose mutex orders it before
// Reap reads it.
type slot struct {
	req   Request
	io    initiator.IO
	busy  bool
	err   error
	resid int64
}

// Engine submits I/O to one namespace asynchronously. Submit and Reap are
// meant for one submitting goroutine (one fio job); Close may be called
// from any.
type Engine struct {
	cfg  Config
	conn *conn
	ns   namespace
	poll poller // ns, when it is one and cfg.BusyPoll > 0 (else nil)
	// spinMisses counts the spins in a row that ended without a
	// completion; spinSkip the reaps left that sleep without spinning
	// (spin's back-off, for devices far slower than the window).
	spinMisses, spinSkip int
	// lastYield is when Reap last passed through the scheduler
	// (monoclock).
	lastYield time.Duration
	// plug is ns when it is one and cfg.DelaySubmit (else nil); plugged:
	// Submit plugged it and no Reap has unplugged it since; held: the
	// requests submitted since (the submitting goroutine's).
	plug    plugger
	plugged bool
	held    int

	slots []slot

	mu      sync.Mutex
	ring    []int32      // completed slots, FIFO; len(ring) == Depth
	head    int          // next to reap
	count   int          // completed and not reaped
	waker   waker        // wakes Reap
	pending atomic.Int32 // submitted and not reaped

	closed    atomic.Bool
	closeOnce sync.Once
	inflight  sync.WaitGroup // submitted and not completed
}

// namespace is what Engine needs of an *initiator.Namespace (tests put a
// fake in its place). The engine itself uses Start, Size and BlockSize.
type namespace interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Trim(off, length int64) error
	Flush() error
	Size() int64
	BlockSize() int
	// Start starts io and calls io.Done once when it has finished, maybe
	// before Start returns (initiator.Namespace.Start).
	Start(io *initiator.IO)
}

// ErrBusy is returned by Submit for a slot whose previous request has not
// been reaped, or a slot out of range.
var ErrBusy = errors.New("fio engine: slot busy or out of range")

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("fio engine: closed")

// Open connects to the namespace cfg names (for transport loop, after
// starting the in-process target if this process has none yet) and
// returns an engine of cfg.Depth slots.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ns, err := c.ctrl.Namespace(cfg.NSID)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("fio engine: %s: %w", c.ctrl.SubsystemNQN(), err)
	}
	return newEngine(cfg, c, ns), nil
}

// newEngine makes an engine of cfg.Depth slots on ns.
func newEngine(cfg Config, c *conn, ns namespace) *Engine {
	e := &Engine{
		cfg:   cfg,
		conn:  c,
		ns:    ns,
		slots: make([]slot, cfg.Depth),
		ring:  make([]int32, cfg.Depth),
	}
	p, ok := ns.(poller)
	if cfg.PollSleepAuto {
		cfg.PollSleep = ok && p.CanPollWait()
		if cfg.PollSleep {
			cfg.BusyPoll = max(cfg.BusyPoll, autoSleepWindow)
		}
		e.cfg = cfg
	}
	if ok && cfg.BusyPoll > 0 {
		e.poll = p
	}
	if p, ok := ns.(plugger); ok && cfg.DelaySubmit {
		e.plug = p
	}
	for i := range e.slots {
		e.slots[i].io.Done = func(*initiator.IO) { e.done(int32(i)) }
	}
	return e
}

// Size returns the namespace size in bytes.
func (e *Engine) Size() int64 { return e.ns.Size() }

// BlockSize returns the namespace's logical block size.
func (e *Engine) BlockSize() int { return e.ns.BlockSize() }

// Depth returns the number of request slots.
func (e *Engine) Depth() int { return len(e.slots) }

// Controller returns the engine's controller (nil for a test engine).
func (e *Engine) Controller() *initiator.Controller {
	if e.conn == nil {
		return nil
	}
	return e.conn.ctrl
}

// Submit starts r on slot, which must be free: 0 <= slot < Depth and its
// previous request reaped. It does not wait; the result comes from Reap.
// The request is handed to the initiator (Namespace.Start) on the calling
// goroutine: a read or write that is one command goes to the transport
// from here and completes from the transport's completion callback.
func (e *Engine) Submit(slot int, r Request) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if slot < 0 || slot >= len(e.slots) || e.slots[slot].busy {
		return fmt.Errorf("%w: slot %d of %d", ErrBusy, slot, len(e.slots))
	}
	s := &e.slots[slot]
	s.req, s.busy, s.err, s.resid = r, true, nil, 0
	e.pending.Add(1)
	e.inflight.Add(1)
	x := &s.io
	x.Buf, x.Off, x.Len = nil, r.Off, r.Len
	x.Op = r.Op
	switch r.Op {
	case OpRead, OpWrite:
		x.Buf = r.Buf
	case OpTrim, OpFlush:
	default:
		x.N, x.Err = 0, fmt.Errorf("fio engine: %w: operation %d", syscall.EINVAL, r.Op)
		e.done(int32(slot))
		return nil
	}
	if e.plug != nil {
		if !e.plugged {
			e.plug.Plug()
			e.plugged = true
		}
		e.held++
	}
	e.ns.Start(x) // Done may run before Start returns: s is not touched after
	return nil
}

// plugger is implemented by a namespace that can hold the commands its
// caller starts and send them together (*initiator.Namespace).
type plugger interface {
	Plug()
	Unplug()
}

// unplug sends the commands Submit held (DelaySubmit).
func (e *Engine) unplug() {
	if e.plugged {
		e.plugged, e.held = false, 0
		e.plug.Unplug()
	}
}

// keepHolding reports whether Reap may leave the held requests for a
// later Reap: while it has min completions to return at once, fewer than
// a quarter of the slots are held and at least half are in flight. fio
// reaps one completion and commits one request at a time (iodepth_batch
// 1): sent at each Reap, every request would be a send of its own.
func (e *Engine) keepHolding(min int) bool {
	if !e.plugged || e.held >= len(e.slots)/4 || int(e.pending.Load())-e.held < len(e.slots)/2 {
		return false
	}
	e.mu.Lock()
	ready := e.count
	e.mu.Unlock()
	return ready >= max(min, 1)
}

// done is the Done of slot i's I/O: it turns the I/O's result into the
// slot's and completes the slot. It runs on the transport's goroutine (or
// the submitter's) and does not block.
func (e *Engine) done(i int32) {
	s := &e.slots[i]
	r, x := &s.req, &s.io
	err := x.Err
	switch r.Op {
	case OpRead:
		if err == io.EOF && x.N > 0 {
			err = nil // short read at the end: fio sees the residual
		}
		s.resid = int64(len(r.Buf) - x.N)
	case OpWrite:
		s.resid = int64(len(r.Buf) - x.N)
	case OpTrim:
		if err != nil {
			s.resid = r.Len
		}
	case OpFlush:
	default:
		s.resid = int64(len(r.Buf))
	}
	s.err = err
	e.complete(i)
	e.inflight.Done()
}

// Pending returns the number of requests submitted and not yet reaped.
func (e *Engine) Pending() int { return int(e.pending.Load()) }

// Reap moves up to min(max, len(out)) completions into out and returns how
// many. It waits until at least min are there (min is capped at the number
// of requests outstanding), or until timeout has passed (negative: no
// limit; 0: do not wait).
func (e *Engine) Reap(min, max int, timeout time.Duration, out []Completion) int {
	e.yieldSometimes()
	if !e.keepHolding(min) {
		e.unplug()
	}
	max = minInt(max, len(out))
	min = minInt(min, max, int(e.pending.Load()))
	n := 0
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		t := e.waker.ticket()
		got := 0
		e.mu.Lock()
		for n < max && e.count > 0 {
			i := e.ring[e.head]
			e.head = (e.head + 1) % len(e.ring)
			e.count--
			s := &e.slots[i]
			out[n] = Completion{Slot: i, Errno: Errno(s.err), Resid: s.resid}
			s.busy = false
			n++
			got++
		}
		e.mu.Unlock()
		if got > 0 {
			e.pending.Add(-int32(got))
		}
		if n >= min || n >= max || timeout == 0 {
			break
		}
		d := time.Duration(-1)
		if timeout > 0 {
			if d = time.Until(deadline); d <= 0 {
				timeout = 0 // one last look, then return
				continue
			}
		}
		if e.spin(t, d) {
			continue
		}
		e.waker.sleep(t, d)
	}
	return n
}

// yieldEvery is how often Reap passes through the Go scheduler: under
// sysmon's 10 ms limit for a goroutine that has not (forcePreemptNS).
const yieldEvery = 8 * time.Millisecond

// yieldSometimes passes through the scheduler every yieldEvery. fio's
// thread runs Go only in its cgo callbacks, as one locked goroutine
// that never does otherwise; sysmon then takes it for one running too
// long every 10 ms, signals the thread and takes its P, and each such
// retake sends sysmon back to naps of 20 us (docs/tcp.md, "Host wake-ups
// at QD1"). A yield costs two hand-offs of the P, 125 times a second.
func (e *Engine) yieldSometimes() {
	if now := monoclock.Now(); now-e.lastYield >= yieldEvery {
		e.lastYield = now
		runtime.Gosched()
	}
}

// poller is implemented by a namespace whose completions can be run on
// the caller's thread (*initiator.Namespace over RDMA).
type poller interface {
	Poll() bool
	PollWait(d time.Duration) bool
	PollDone()
	CanPoll() bool
	CanPollWait() bool
}

// Spin back-off: after spinMissLimit spins in a row found nothing within
// the window, the next spinBackoff reaps sleep at once, then one spins
// again to look. A device whose I/O takes milliseconds (a disk, null_blk
// with completion_nsec) then costs no spinning CPU; one that answers
// within the window keeps every spin.
const (
	spinMissLimit = 8
	spinBackoff   = 32
)

// spin polls the transport for up to the busy-poll window (bounded by d
// when d >= 0) and reports whether a completion came after ticket t: the
// completion then ran on this thread, with no wake-up of the provider's
// goroutine or of this one.
func (e *Engine) spin(t uint32, d time.Duration) bool {
	// CanPoll is asked per spin, not once: the queues change on reconnect.
	p, w := e.poll, e.cfg.BusyPoll
	if p == nil || !p.CanPoll() {
		return false
	}
	// Asleep in PollWait costs no more than asleep in Reap: no back-off.
	if !e.cfg.PollSleep && e.spinSkip > 0 {
		e.spinSkip--
		return false
	}
	if d >= 0 && d < w {
		w = d
	}
	// The first pass waits the whole window: at queue depth 1 it is the
	// only one, and reads no clock.
	start, left := monoclock.Now(), w
	for first := true; e.waker.ticket() == t; first = false {
		if !first {
			left = w - (monoclock.Now() - start)
		}
		var got bool
		if e.cfg.PollSleep && left > 0 {
			got = p.PollWait(left)
		} else {
			got = p.Poll()
		}
		if !got && left <= 0 {
			// Reap sleeps next: the transport's goroutines must
			// complete what comes from now on.
			p.PollDone()
			if e.spinMisses++; e.spinMisses >= spinMissLimit {
				e.spinMisses, e.spinSkip = 0, spinBackoff
			}
			return false
		}
	}
	e.spinMisses = 0
	return true
}

// Err returns the error of the last request completed on slot (nil on
// success), for fio's error details; valid until the slot is reused.
func (e *Engine) Err(slot int) error {
	if slot < 0 || slot >= len(e.slots) {
		return nil
	}
	return e.slots[slot].err
}

// Close waits for the requests in flight to complete and disconnects the
// controller; Submit fails with ErrClosed afterwards. It must not run
// concurrently with Submit.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		e.unplug()
		e.inflight.Wait()
		if e.conn != nil {
			err = e.conn.close()
		}
	})
	return err
}

// complete pushes slot i on the completion ring and wakes the reaper.
func (e *Engine) complete(i int32) {
	e.mu.Lock()
	e.ring[(e.head+e.count)%len(e.ring)] = i
	e.count++
	e.mu.Unlock()
	e.waker.wake()
}

// Errno maps an I/O error to the errno fio reports, as the Linux block
// layer maps NVMe status codes (nvme_error_status): nil is 0.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	var ne *nvme.Error
	switch {
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, initiator.ErrNotSupported):
		return syscall.EOPNOTSUPP
	case errors.Is(err, initiator.ErrTimeout):
		return syscall.ETIMEDOUT
	case errors.Is(err, initiator.ErrControllerLost), errors.Is(err, initiator.ErrClosed), errors.Is(err, ErrClosed):
		return syscall.ENOTCONN
	case errors.Is(err, initiator.ErrNoNamespace):
		return syscall.ENODEV
	case errors.As(err, &ne):
		return statusErrno(ne.Status)
	case errors.Is(err, io.EOF):
		return syscall.EIO
	}
	return syscall.EIO
}

func minInt(v int, vs ...int) int {
	for _, x := range vs {
		v = min(v, x)
	}
	return v
}

// statusErrno maps an NVMe status as Linux nvme_error_status and
// blk_status_to_errno do.
func statusErrno(s nvme.Status) syscall.Errno {
	switch s.SCT() {
	case nvme.SCTGeneric:
		switch s & 0x7ff {
		case nvme.StatusCapacityExceeded:
			return syscall.ENOSPC // BLK_STS_NOSPC
		case nvme.StatusLBAOutOfRange, nvme.StatusCommandInterrupted, nvme.StatusNamespaceNotReady:
			return syscall.EREMOTEIO // BLK_STS_TARGET
		case nvme.StatusInvalidOpcode, nvme.StatusInvalidField, nvme.StatusInvalidNamespaceOrFormat:
			return syscall.EOPNOTSUPP // BLK_STS_NOTSUPP
		case nvme.StatusNamespaceWriteProtected:
			return syscall.ENODATA // BLK_STS_MEDIUM
		case nvme.StatusReservationConflict:
			return syscall.EBADE // BLK_STS_RESV_CONFLICT
		}
	case nvme.SCTMediaError:
		switch s.SC() {
		case 0x82, 0x83, 0x84: // end-to-end guard, application and reference tag checks
			return syscall.EILSEQ // BLK_STS_PROTECTION
		case 0x80, 0x81, 0x85, 0x86, 0x87: // write fault, unrecovered read, compare, access denied, unwritten
			return syscall.ENODATA // BLK_STS_MEDIUM
		}
	case nvme.SCTPathRelated:
		return syscall.ENOLINK // BLK_STS_TRANSPORT
	}
	return syscall.EIO
}
