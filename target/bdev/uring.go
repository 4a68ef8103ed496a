package bdev

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/uring"
)

// Queue depth bounds of the io_uring engine (Spec.QueueDepth).
const (
	// DefaultQueueDepth is the per-namespace bound on I/Os in flight to a
	// file or block device when the configuration gives none.
	DefaultQueueDepth = 128
	// MaxQueueDepth is the largest queue_depth accepted.
	MaxQueueDepth = 4096
)

// Kinds of engine operations.
const (
	opRead = iota
	opWrite
	opWriteFUA
	opFlush
	opZero
	opDiscard
)

var opNames = [...]string{"read", "write", "write", "flush", "write zeroes", "discard"}

// ringOp is one operation of the engine: in a slot while in flight, in
// the pending FIFO while the namespace's queue depth is used up.
type ringOp struct {
	kind   uint8
	direct bool // on the O_DIRECT descriptor
	// bounce: the transfer goes through the slot's aligned bounce buffer
	// (the caller's buffer is not aligned for O_DIRECT: in-capsule data);
	// staged: a write's data is in it.
	bounce, staged bool
	p              []byte
	off            int64
	n              int64 // bytes for zero and discard
	done           int64 // bytes already transferred (short reads and writes)
	c              Completion
}

// ringFiles is what the engine needs from its device: descriptors, and
// the blocking fallbacks for what fallocate cannot do.
type ringFiles struct {
	what     string // "file \"/path\"" for errors
	bfd      int    // buffered descriptor: flush, fallocate, unaligned I/O
	dfd      int    // O_DIRECT descriptor, -1 with buffered_io
	align    int64  // O_DIRECT alignment of offset, length and address
	zeroMode uint32 // fallocate mode of Write Zeroes
	discMode uint32 // fallocate mode of Discard
	// zero and discard run the device's blocking Write Zeroes and Discard
	// on the engine's slow goroutine when fallocate is refused.
	zero, discard func(off, n int64) error
}

// engine runs a device's I/O through one io_uring: submitters (the
// transports' goroutines) take mu to fill SQEs; one reaper goroutine
// waits for completions and hands each to its Completion. At most depth
// operations are in flight; the rest wait, in order, in a FIFO that grows
// to the largest backlog seen and is reused, so a steady state allocates
// nothing.
type engine struct {
	files ringFiles
	ring  *uring.Ring
	// submit is ring.Submit, but for tests that make the kernel refuse.
	submit func(wait uint32) error
	depth  int

	mu       sync.Mutex
	slots    []ringOp
	bounce   [][]byte // per slot, grown on demand, page aligned
	free     []uint32
	pending  []ringOp
	phead    int
	inflight int
	closed   bool
	// held: slots whose SQEs are prepared and not yet submitted, in SQ
	// order (operations a transport's Plug holds back until its batch
	// ends); any submission takes them along. refused: slots whose SQEs
	// the kernel did not take, to be finished with refusedErr once mu is
	// released (unlock).
	held       []uint32
	refused    []uint32
	refusedErr error

	// noZero, noDiscard: fallocate refused the mode once; later calls
	// go straight to the fallback.
	noZero, noDiscard atomic.Bool
	latch             *flushLatch // the device's, shared with its blocking Flush
	// drained is signalled when closed and nothing is in flight.
	drained sync.Cond

	slow   chan uint32 // slots whose operation runs its blocking fallback
	reaped chan struct{}
	slowWG sync.WaitGroup
	// launch starts the reaper and the slow goroutine on the first
	// operation: a device opened only to be checked, or never used
	// asynchronously, costs no goroutine blocked in the kernel.
	launch   sync.Once
	launched atomic.Bool

	// The reaper's own: the batch of its pass (from the first
	// BatchCompletion it completes).
	batch Batch
}

// stopTag is the user data of the NOP that ends the reaper.
const stopTag = ^uint64(0)

// newEngine sets up the ring for files with room for depth operations.
func newEngine(files ringFiles, depth int, latch *flushLatch) (*engine, error) {
	if depth <= 0 {
		depth = DefaultQueueDepth
	}
	// One extra SQE for the stop NOP; the CQ (twice the SQ) never fills.
	r, err := uring.New(uint32(depth+1), 0)
	if err != nil {
		return nil, fmt.Errorf("bdev: %s: io_uring: %w", files.what, err)
	}
	e := &engine{files: files, ring: r, depth: depth, latch: latch,
		slots: make([]ringOp, depth), free: make([]uint32, depth), bounce: make([][]byte, depth),
		held: make([]uint32, 0, depth), slow: make(chan uint32, depth), reaped: make(chan struct{})}
	e.submit = r.Submit
	e.drained.L = &e.mu
	for i := range e.free {
		e.free[i] = uint32(depth - 1 - i)
	}
	return e, nil
}

// goroutines starts the reaper and the slow goroutine.
func (e *engine) goroutines() {
	e.launched.Store(true)
	go e.reap()
	e.slowWG.Add(1)
	go e.slowLoop()
}

// start queues op: into a slot when one is free, else into the FIFO. An
// op whose Completion gives a Plug is prepared and held until the plug's
// owner flushes it (FlushPlug), or another submission takes it along.
func (e *engine) start(op ringOp) {
	e.launch.Do(e.goroutines)
	var plug Plug
	if pc, ok := op.c.(PluggedCompletion); ok {
		plug = pc.SubmitPlug()
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		op.c.Complete(ErrClosed)
		return
	}
	if len(e.free) == 0 {
		e.pending = append(e.pending, op)
		e.mu.Unlock()
		return
	}
	i := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	e.slots[i] = op
	e.inflight++
	var err error
	queued := false
	if plug != nil {
		if queued, err = e.prepLocked(i); queued {
			e.held = append(e.held, i)
		}
	} else {
		err = e.submitLocked(i)
	}
	e.unlock(false)
	if queued {
		plug.Join(e)
	}
	if err != nil {
		e.finish(i, err, false)
	}
}

// FlushPlug submits the operations held for transports' plugs
// (fabrics.SubmitPlug): one io_uring_enter for all of them.
func (e *engine) FlushPlug() {
	e.mu.Lock()
	if len(e.held) > 0 {
		e.enterLocked()
	}
	e.unlock(false)
}

// submitLocked prepares the SQE of slot i and submits it, with the held
// ones. A preparation error means nothing was queued for i: the caller
// finishes the slot. Slots whose SQEs the kernel did not take (i among
// them) go to e.refused: the caller releases mu with unlock.
func (e *engine) submitLocked(i uint32) error {
	queued, err := e.prepLocked(i)
	if err != nil || !queued {
		return err
	}
	e.held = append(e.held, i)
	e.enterLocked()
	return nil
}

// enterLocked submits every prepared SQE (the held slots'). On an error
// the kernel took none of those it left: they are taken back, so that
// none runs after its slot is failed and reused, and their slots move to
// e.refused.
func (e *engine) enterLocked() {
	if err := e.submit(0); err != nil {
		n := min(int(e.ring.Drop()), len(e.held))
		e.refused = append(e.refused, e.held[len(e.held)-n:]...)
		e.refusedErr = err
	}
	e.held = e.held[:0]
}

// unlock releases mu, then finishes the slots the kernel refused (their
// SQEs taken back by enterLocked) with their submission error. reaped as
// for finish.
func (e *engine) unlock(reaped bool) {
	if len(e.refused) == 0 {
		e.mu.Unlock()
		return
	}
	slots := e.refused
	errs := make([]error, len(slots)) // the error path only
	for k, j := range slots {
		op := &e.slots[j]
		errs[k] = fmt.Errorf("bdev: %s: %s at %d: %w", e.files.what, opNames[op.kind], op.off, e.refusedErr)
	}
	e.refused = nil
	e.mu.Unlock()
	for k, j := range slots {
		e.finish(j, errs[k], reaped)
	}
}

// prepLocked fills the SQE of slot i and reports whether it took one (a
// fallocate the kernel refused before goes to the slow goroutine
// instead); an error means nothing was queued and the caller completes
// the slot.
func (e *engine) prepLocked(i uint32) (bool, error) {
	op := &e.slots[i]
	if op.kind == opZero && e.noZero.Load() || op.kind == opDiscard && e.noDiscard.Load() {
		e.slow <- i // never blocks: the channel holds every slot
		return false, nil
	}
	sqe := e.ring.SQE()
	if sqe == nil {
		// Cannot happen: at most depth slots are in flight, and the SQ
		// has one more entry than that (the stop NOP).
		return false, fmt.Errorf("bdev: %s: io_uring submission queue full", e.files.what)
	}
	f := &e.files
	switch op.kind {
	case opRead, opWrite, opWriteFUA:
		fd := f.bfd
		if op.direct {
			fd = f.dfd
			if !op.bounce && uintptr(unsafe.Pointer(unsafe.SliceData(op.p)))&uintptr(f.align-1) != 0 {
				op.bounce = true
			}
		}
		p := op.p[op.done:]
		if op.bounce {
			b := e.bounceBuf(i, len(op.p))
			if op.kind != opRead && !op.staged {
				copy(b, op.p)
				op.staged = true
			}
			p = b[op.done:len(op.p)]
		}
		addr := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		n := uint32(min(len(p), 1<<30))
		if op.kind == opRead {
			sqe.PrepReadAt(fd, addr, n, op.off+op.done, 0, uint64(i))
		} else {
			var flags uint32
			if op.kind == opWriteFUA {
				flags = uring.RWFDsync
			}
			sqe.PrepWriteAt(fd, addr, n, op.off+op.done, flags, uint64(i))
		}
	case opFlush:
		sqe.PrepFsync(f.bfd, uring.FsyncDatasync, uint64(i))
	case opZero:
		sqe.PrepFallocate(f.bfd, f.zeroMode, op.off, op.n, uint64(i))
	case opDiscard:
		sqe.PrepFallocate(f.bfd, f.discMode, op.off, op.n, uint64(i))
	}
	return true, nil
}

// reap is the engine's one completion goroutine. It completes the CQEs
// there as one pass, whose batch it flushes at the end (the responses of
// the pass leave together), then waits for the next completion.
func (e *engine) reap() {
	defer close(e.reaped)
	defer e.flush() // a stop in the middle of a pass holds nothing back
	for {
		for {
			c, ok := e.ring.PeekCQE()
			if !ok {
				break
			}
			e.ring.Advance()
			if c.UserData == stopTag {
				return // sent by close once nothing is in flight
			}
			e.complete(uint32(c.UserData), c.Res)
		}
		e.flush()
		// An error here would be a broken ring (EBADF, EFAULT); the
		// kernel still owns the slots' buffers, so keep reaping.
		_ = e.ring.Wait()
	}
}

// flush ends the reaper's pass: what its completions left in the batch
// goes out.
func (e *engine) flush() {
	if e.batch != nil {
		e.batch.Flush()
	}
}

// bounceBuf returns slot i's bounce buffer with room for n bytes, aligned
// to a page (more than any O_DIRECT needs). It allocates only to grow.
func (e *engine) bounceBuf(i uint32, n int) []byte {
	if cap(e.bounce[i]) < n {
		n = (n + 4095) &^ 4095
		b := make([]byte, n+4096)
		off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b)))) & 4095
		e.bounce[i] = b[off : off+n : off+n]
	}
	return e.bounce[i]
}

// complete handles the completion of slot i with result res: it resubmits
// the rest of a short transfer, retries once through the bounce buffer an
// O_DIRECT transfer the device refused (EINVAL: a device that wants more
// memory alignment than it says), hands a refused fallocate to the
// fallback, and otherwise finishes the slot. O_DIRECT and buffered I/O are
// never mixed on one file: a buffered write to part of a page that races
// an O_DIRECT write to another part of it can write the page's stale copy
// back over the direct write.
func (e *engine) complete(i uint32, res int32) {
	e.mu.Lock()
	op := &e.slots[i]
	var err error
	retry := false
	switch {
	case res < 0:
		errno := syscall.Errno(-res)
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN:
			retry = true
		case errno == unix.EINVAL && op.direct && !op.bounce && op.done == 0:
			op.bounce = true
			retry = true
		case (op.kind == opZero || op.kind == opDiscard) && fallocateUnsupported(errno):
			if op.kind == opZero {
				e.noZero.Store(true)
			} else {
				e.noDiscard.Store(true)
			}
			e.mu.Unlock()
			e.slow <- i
			return
		default:
			err = e.opError(op, errno)
		}
	case op.kind <= opWriteFUA:
		op.done += int64(res)
		switch {
		case op.done >= int64(len(op.p)):
			if op.bounce && op.kind == opRead {
				copy(op.p, e.bounce[i])
			}
		case res == 0 && op.kind == opRead:
			// The file shrank under us: report it rather than return
			// stale bytes from the caller's buffer.
			err = e.opError(op, io.ErrUnexpectedEOF)
		case res == 0:
			err = e.opError(op, io.ErrShortWrite)
		default:
			retry = true
		}
	}
	if retry {
		if err = e.submitLocked(i); err == nil {
			e.unlock(true)
			return
		}
	}
	e.mu.Unlock()
	e.finish(i, err, true)
}

func (e *engine) opError(op *ringOp, err error) error {
	return fmt.Errorf("bdev: %s: %s of %d bytes at %d: %w", e.files.what, opNames[op.kind], max(int64(len(op.p)), op.n), op.off, err)
}

// finish completes slot i with err, frees the slot and starts the oldest
// pending operations in the free slots. reaped: called by the reaper in
// a pass, whose batch a BatchCompletion joins.
func (e *engine) finish(i uint32, err error, reaped bool) {
	e.mu.Lock()
	op := &e.slots[i]
	c, kind := op.c, op.kind
	if kind == opFlush {
		err = e.latch.check(err)
	}
	*op = ringOp{}
	e.inflight--
	e.free = append(e.free, i)
	failed, ferr := -1, error(nil)
	for e.phead < len(e.pending) && len(e.free) > 0 {
		next := e.pending[e.phead]
		e.pending[e.phead] = ringOp{}
		e.phead++
		j := e.free[len(e.free)-1]
		e.free = e.free[:len(e.free)-1]
		e.slots[j] = next
		e.inflight++
		if ferr = e.submitLocked(j); ferr != nil {
			failed = int(j)
			break
		}
	}
	if e.phead == len(e.pending) {
		e.pending, e.phead = e.pending[:0], 0
	}
	if e.closed && e.inflight == 0 {
		e.drained.Broadcast()
	}
	e.unlock(reaped)
	if bc, ok := c.(BatchCompletion); ok && reaped {
		if e.batch == nil {
			e.batch = bc.NewBatch()
		}
		bc.CompleteBatched(err, e.batch)
	} else {
		c.Complete(err)
	}
	if failed >= 0 {
		e.finish(uint32(failed), ferr, reaped)
	}
}

// flushLatch keeps the first failed flush of a device: after it, the
// kernel may have dropped dirty pages it could not write back (and marked
// them clean), so no later flush may report success for data acknowledged
// before it (docs/backends.md).
type flushLatch struct{ err atomic.Pointer[error] }

// check returns the flush error to report: err, or the first failure
// kept from before.
func (l *flushLatch) check(err error) error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	if err != nil {
		err = fmt.Errorf("%w (every later flush fails too: data written before it may be lost)", err)
		if !l.err.CompareAndSwap(nil, &err) {
			return *l.err.Load()
		}
	}
	return err
}

// slowLoop runs the blocking fallbacks of Write Zeroes and Discard where
// fallocate is refused: rare (a file system or device without the mode),
// so one goroutine per device serves them in order.
func (e *engine) slowLoop() {
	defer e.slowWG.Done()
	for i := range e.slow {
		e.mu.Lock()
		op := e.slots[i]
		e.mu.Unlock()
		var err error
		if op.kind == opZero {
			err = e.files.zero(op.off, op.n)
		} else {
			err = e.files.discard(op.off, op.n)
		}
		e.finish(i, err, false)
	}
}

// close completes the pending operations with ErrClosed, waits for those
// in flight and releases the ring. The device's descriptors stay open for
// the caller to close.
func (e *engine) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	pend := e.pending[e.phead:]
	e.pending, e.phead = nil, 0
	if len(e.held) > 0 {
		e.enterLocked() // a plug not flushed yet: what it holds runs now
	}
	e.unlock(false)
	for _, op := range pend {
		op.c.Complete(ErrClosed)
	}
	if !e.launched.Load() {
		_ = e.ring.Close()
		return
	}
	e.mu.Lock()
	for e.inflight > 0 {
		e.drained.Wait()
	}
	stopped := false
	if sqe := e.ring.SQE(); sqe != nil {
		sqe.PrepNop(stopTag)
		stopped = e.ring.Submit(0) == nil
	}
	e.mu.Unlock()
	if stopped {
		<-e.reaped
	}
	close(e.slow)
	e.slowWG.Wait()
	if stopped {
		_ = e.ring.Close()
	}
}

// errDirect explains a file system that refuses O_DIRECT.
func errDirect(what string, err error) error {
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("bdev: %s: the file system refuses O_DIRECT (tmpfs does); set buffered_io = true to use the page cache: %w", what, err)
	}
	return fmt.Errorf("bdev: %s: open O_DIRECT: %w", what, err)
}
