package initiator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// The host's command engine (docs/host-engine.md). Every command, admin
// or I/O, synchronous or asynchronous, runs on a slot of its queue: the
// slot's index is the command's tag (fabrics.HostCommand.Tag, the CID's
// low bits), so the transport keeps its per-command state by the same
// index and neither side has a second pool. A slot's state word holds a
// sequence number (bumped per command) and a phase; the phase moves
// only by atomic operations, and whoever moves it decides who finishes
// the command:
//
//	idle ──submit──▶ submitting ──Submit ok──▶ busy
//	submitting, busy ──transport's Done──▶ done        (the completion finishes it)
//	busy ──timeout scan──▶ timedOut ──policy──▶ done   (the timeout handler finishes it)
//	done ──result consumed──▶ idle (back in the free list)
//
// The abandoned flag says that a synchronous waiter gave up (its context
// ended): whoever finishes the command then frees the slot.
const (
	phIdle uint32 = iota
	phSubmitting
	phBusy
	phTimedOut
	phDone

	phMask      uint32 = 0x0f
	flAbandoned uint32 = 0x10
	seqShift           = 8
)

// cmdSlot is one reusable command of a queue: the HostCommand with its
// Done callback bound once and the state of the command it carries.
// Nothing is allocated per command.
type cmdSlot struct {
	q     *queue
	cmd   fabrics.HostCommand // cmd.Tag is the slot's index
	state atomic.Uint32       // seq<<seqShift | flags | phase
	// done signals a synchronous waiter that its command finished
	// (capacity 1); tdone signals the timeout handler that the transport
	// completed a timed-out command (capacity 1).
	done, tdone chan struct{}

	// The command's timeout in scan ticks (0: none), set before the
	// command is submitted; atomic as the scanner reads it.
	ticks atomic.Int32
	// Set before the command is submitted (prep): the timeout, whether
	// it is aborted on timeout, and its name for errors.
	timeout time.Duration
	noAbort bool
	op      string
	// aio is the I/O an asynchronous command carries (Namespace.Start).
	aio *IO
	// start is when an I/O command was submitted, for its latency
	// (stats.go; 0: not measured).
	start int64
	// terr, set by the timeout handler, is the command's result in place
	// of its completion.
	terr error
	// dead marks a slot whose queue was reset under a command that timed
	// out: the transport may still complete it late, so it is never
	// handed out again.
	dead bool

	// seenSeq and seenTick are the scanner's: the command it last saw
	// in flight on the slot and the tick it first saw it at.
	seenSeq  uint32
	seenTick int64

	// own is the slot's own data buffer for commands run by exec: a
	// caller that gives up (its context ends) returns while the command
	// may still be in flight, so the transport must not hold the
	// caller's buffer. Grown as needed and kept.
	own []byte
}

// queue is one host queue (admin or I/O) with its command slots.
type queue struct {
	c     *Controller
	a     *assoc
	qid   uint16
	hq    fabrics.HostQueue
	slots []cmdSlot
	// The free slots: a stack (the most recently freed slot is reused
	// first, its transport state still warm) with one token in avail per
	// slot on it.
	freeMu sync.Mutex
	free   []*cmdSlot
	avail  chan struct{}

	// The timeout scanner (scan): its tick, and how it is woken when
	// it sleeps for want of timed commands.
	tick     time.Duration
	scanIdle atomic.Bool
	scanKick chan struct{}
	scanStop chan struct{}

	closing   atomic.Bool   // the host is tearing the queue down on purpose
	resetting atomic.Bool   // a reset of this queue has been started
	closed    chan struct{} // closed when the queue is torn down
	hqClosed  chan struct{} // closed when the transport's Close has returned
	gone      chan struct{} // closed when the queue is no longer in use (replaced or its association torn down)
	goneOnce  sync.Once
}

// scanTicksPerTimeout is how many scans the shortest timeout of a queue
// spans: a command times out between its timeout and an eighth more.
const scanTicksPerTimeout = 8

// newQueue wraps hq with depth command slots (the transport's depth) and
// starts its timeout scanner.
func newQueue(c *Controller, a *assoc, qid uint16, hq fabrics.HostQueue) *queue {
	depth := min(max(hq.Depth(), 1), fabrics.MaxTags)
	shortest := c.opts.CommandTimeout
	if qid == 0 && a.kato > 0 {
		shortest = min(shortest, a.kato)
	}
	q := &queue{
		c:        c,
		a:        a,
		qid:      qid,
		hq:       hq,
		slots:    make([]cmdSlot, depth),
		free:     make([]*cmdSlot, 0, depth),
		avail:    make(chan struct{}, depth),
		tick:     min(max(shortest/scanTicksPerTimeout, 100*time.Microsecond), time.Second),
		scanKick: make(chan struct{}, 1),
		scanStop: make(chan struct{}),
		closed:   make(chan struct{}),
		hqClosed: make(chan struct{}),
		gone:     make(chan struct{}),
	}
	for i := range q.slots {
		s := &q.slots[i]
		s.q = q
		s.cmd.Tag = uint16(i)
		s.done = make(chan struct{}, 1)
		s.tdone = make(chan struct{}, 1)
		s.cmd.Done = s.complete
	}
	for i := depth - 1; i >= 0; i-- {
		q.push(&q.slots[i])
	}
	go q.scan()
	return q
}

// get takes a free slot, waiting while the queue is full.
func (q *queue) get(ctx context.Context) (*cmdSlot, error) {
	select {
	case <-q.avail:
		return q.pop(), nil
	default:
	}
	select {
	case <-q.avail:
		return q.pop(), nil
	case <-q.closed:
		return nil, errQueueReset
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tryGet takes a free slot if there is one.
func (q *queue) tryGet() *cmdSlot {
	select {
	case <-q.avail:
		return q.pop()
	default:
		return nil
	}
}

// pop takes the slot on top of the free stack, for a token taken from
// avail (there is one).
func (q *queue) pop() *cmdSlot {
	q.freeMu.Lock()
	n := len(q.free) - 1
	s := q.free[n]
	q.free = q.free[:n]
	q.freeMu.Unlock()
	return s
}

// push puts s on the free stack and its token in avail.
func (q *queue) push(s *cmdSlot) {
	q.freeMu.Lock()
	q.free = append(q.free, s)
	q.freeMu.Unlock()
	q.avail <- struct{}{}
}

// put returns a slot whose command has finished to the free list.
func (q *queue) put(s *cmdSlot) {
	s.cmd.Data = nil
	s.aio = nil
	w := s.state.Load()
	s.state.Store(w &^ (phMask | flAbandoned)) // phase idle (0), sequence kept
	if !s.dead {
		q.push(s)
	}
}

// prep sets the slot up for a command: its SQE, data and direction, and
// how it is timed out.
func (s *cmdSlot) prep(sqe *[64]byte, data []byte, dir fabrics.DataDirection, op string, wo waitOpts) {
	s.cmd.SQE = *sqe
	s.cmd.Data = data
	s.cmd.Direction = dir
	s.op = op
	s.setTimeout(wo)
}

// setTimeout records the command's timeout policy.
func (s *cmdSlot) setTimeout(wo waitOpts) {
	if wo.timeout == s.timeout && wo.noAbort == s.noAbort {
		return // as for the slot's previous command
	}
	s.timeout, s.noAbort = wo.timeout, wo.noAbort
	var ticks int32
	if wo.timeout > 0 {
		ticks = int32(min((wo.timeout+s.q.tick-1)/s.q.tick, 1<<30))
	}
	s.ticks.Store(ticks)
}

// submit sends the slot's command. On failure the slot is back in the
// free list and the error wraps errQueueReset when the transport failed.
func (s *cmdSlot) submit() error {
	q := s.q
	if mx := q.hq.MaxTransfer(); mx > 0 && len(s.cmd.Data) > mx {
		n := len(s.cmd.Data)
		q.put(s)
		return fmt.Errorf("initiator: queue %d: %d-byte transfer exceeds the transport's %d", q.qid, n, mx)
	}
	s.cmd.Err = nil
	s.cmd.CQE = [16]byte{}
	s.terr = nil
	if q.qid != 0 {
		s.start = q.c.ioStart()
	}
	seq := s.state.Load()>>seqShift + 1
	w := seq<<seqShift | phSubmitting
	s.state.Store(w)
	if err := q.hq.Submit(&s.cmd); err != nil {
		// The transport took nothing and calls no Done.
		q.put(s)
		q.transportFailed(err)
		// The transport's error names its queue: say it once.
		return fmt.Errorf("%w: %w", errQueueReset, err)
	}
	// The command may already be done (and the slot reused): then the
	// state is no longer w and the CAS fails.
	if s.state.CompareAndSwap(w, seq<<seqShift|phBusy) && q.scanIdle.Load() && s.ticks.Load() > 0 {
		q.wakeScanner()
	}
	return nil
}

// complete is the HostCommand's Done callback, run on a transport
// goroutine (or inline in Submit): it must not block.
func (s *cmdSlot) complete(cmd *fabrics.HostCommand) {
	q := s.q
	if !q.c.compSeen.Load() {
		q.c.compSeen.Store(true)
	}
	if cmd.Err != nil {
		q.transportFailed(cmd.Err)
	}
	for {
		w := s.state.Load()
		switch w & phMask {
		case phSubmitting, phBusy:
			if s.state.CompareAndSwap(w, w&^phMask|phDone) {
				if q.qid != 0 {
					q.c.recordIO(cmd, s.start)
				}
				s.finish(w&flAbandoned != 0)
				return
			}
		case phTimedOut:
			// The timeout handler owns the command: tell it.
			select {
			case s.tdone <- struct{}{}:
			default:
			}
			return
		default:
			return // nothing outstanding: a duplicate completion
		}
	}
}

// finish hands a command whose phase just became done to whoever
// consumes it: the asynchronous I/O's completion, the synchronous waiter,
// or nobody (the waiter gave up) when the slot is freed at once.
func (s *cmdSlot) finish(abandoned bool) {
	switch {
	case s.aio != nil:
		s.completeAsync()
	case abandoned:
		s.q.put(s)
	default:
		s.done <- struct{}{}
	}
}

// transportFailed handles a command the transport failed (no CQE): unless
// the host is closing the queue itself, the association has failed.
func (q *queue) transportFailed(err error) {
	if q.closing.Load() {
		return
	}
	q.c.startRecovery(q.a, fmt.Errorf("queue %d: %w", q.qid, err))
}

// cid returns the command identifier the transport gave the command.
func (s *cmdSlot) cid() uint16 { return binary.LittleEndian.Uint16(s.cmd.SQE[2:]) }

// abandon gives up waiting for the slot's command. It reports false when
// the command finished meanwhile (its signal is then consumed and the
// slot is the caller's).
func (s *cmdSlot) abandon() bool {
	for {
		w := s.state.Load()
		switch w & phMask {
		case phSubmitting, phBusy, phTimedOut:
			if s.state.CompareAndSwap(w, w|flAbandoned) {
				return true
			}
		default:
			<-s.done
			return false
		}
	}
}

// result turns a finished slot into an error: a timeout, a transport
// failure, a status error, or nil.
func (s *cmdSlot) result(op string) error {
	if s.terr != nil {
		return s.terr
	}
	if s.cmd.Err != nil {
		return fmt.Errorf("%w: %w", errQueueReset, s.cmd.Err) // as in submit: the transport's error names the queue
	}
	return statusError(s.cmd.CQE[:], op, s.q.qid, binary.LittleEndian.Uint32(s.cmd.SQE[4:]))
}

// waitOpts say how a command is timed out.
type waitOpts struct {
	timeout time.Duration // 0: never
	// noAbort skips the Abort on timeout and resets at once (keep-alive,
	// Connect, Abort itself and commands run while connecting).
	noAbort bool
}

// wait waits for the slot's synchronous command to finish. It returns nil
// when it did (read the slot, then put it back), or the context's error
// when the waiter gave up first (the slot is then no longer the
// caller's). Timeouts are the engine's (scan): they finish the command.
func (s *cmdSlot) wait(ctxDone <-chan struct{}, ctxErr func() error) error {
	select {
	case <-s.done:
		return nil
	case <-ctxDone:
		if s.abandon() {
			return ctxErr()
		}
		return nil
	}
}

// run submits the slot's prepared command and waits for it, without a
// context: the result is in the slot, to be put back by the caller.
func (s *cmdSlot) run() error {
	if err := s.submit(); err != nil {
		return err
	}
	return s.wait(nil, nil)
}

// exec runs one command synchronously and returns its completion. The
// error is a transport or timeout error, or a *CommandError for a status.
func (q *queue) exec(ctx context.Context, sqe *[64]byte, data []byte, dir fabrics.DataDirection, op string, wo waitOpts) ([16]byte, error) {
	s, err := q.get(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	s.prep(sqe, s.ownData(data, dir), dir, op, wo)
	if err := s.submit(); err != nil {
		return [16]byte{}, err
	}
	if err := s.wait(ctx.Done(), ctx.Err); err != nil {
		return [16]byte{}, err
	}
	cqe := s.cmd.CQE
	err = s.result(op)
	if dir != fabrics.DirHostToCtrl && s.terr == nil && s.cmd.Err == nil {
		copy(data, s.cmd.Data)
	}
	q.put(s)
	return cqe, err
}

// ownData returns the slot's own buffer of len(data) bytes, holding data
// unless the data only comes from the controller (zeroed then, so that no
// stale bytes of an earlier command reach the caller). As the transports
// do, data of a command whose direction is bidirectional or unsaid (a
// passthrough) is taken to move both ways: exec copies it in here and
// back out on completion.
func (s *cmdSlot) ownData(data []byte, dir fabrics.DataDirection) []byte {
	if len(data) == 0 {
		return nil
	}
	if cap(s.own) < len(data) {
		s.own = make([]byte, len(data))
	}
	b := s.own[:len(data)]
	if dir == fabrics.DirCtrlToHost {
		clear(b)
	} else {
		copy(b, data)
	}
	return b
}

// wakeScanner wakes the timeout scanner if it sleeps.
func (q *queue) wakeScanner() {
	if q.scanIdle.CompareAndSwap(true, false) {
		select {
		case q.scanKick <- struct{}{}:
		default:
		}
	}
}

// scan is the queue's timeout scanner (as blk-mq's timeout work): every
// tick it looks at the slots, and a command seen in flight for its
// timeout's worth of ticks times out. Submitting a command costs no
// timer: the scanner notes when it first sees each command (by its
// sequence number). It sleeps while no timed command is in flight.
func (q *queue) scan() {
	t := time.NewTimer(q.tick)
	defer t.Stop()
	var tick int64
	for {
		if !q.scanOnce(tick) {
			// Nothing timed in flight: sleep until a submit wakes us. A
			// submit that made a command busy before it saw scanIdle
			// set is caught by the second look.
			q.scanIdle.Store(true)
			if !q.scanOnce(tick) {
				select {
				case <-q.scanKick:
				case <-q.scanStop:
					return
				}
			}
			q.scanIdle.Store(false)
			t.Reset(q.tick)
		}
		select {
		case <-t.C:
			tick++
			t.Reset(q.tick)
		case <-q.scanStop:
			return
		}
	}
}

// scanOnce looks at every slot at tick now, times out the commands whose
// time is up and reports whether a timed command is in flight.
func (q *queue) scanOnce(now int64) bool {
	active := false
	for i := range q.slots {
		s := &q.slots[i]
		w := s.state.Load()
		if w&phMask != phBusy {
			continue
		}
		ticks := s.ticks.Load()
		if ticks <= 0 {
			continue // an untimed command (Asynchronous Event Request)
		}
		active = true
		if seq := w >> seqShift; seq != s.seenSeq {
			s.seenSeq, s.seenTick = seq, now
			continue
		}
		if now-s.seenTick < int64(ticks) {
			continue
		}
		// The command's time is up, unless it finished meanwhile (the
		// CAS fails: another phase, or another command).
		if s.state.CompareAndSwap(w, w&^phMask|phTimedOut) {
			go q.timedOut(s)
		}
	}
	return active
}

// timedOut carries out the timeout policy for the command on slot s,
// which the scanner moved to timedOut (the transport still has it):
//
//  1. Unless the command is one that must not be aborted (Connect,
//     Keep Alive, Abort itself, commands run while connecting) or the
//     queue is going away, send Abort for its SQID and CID on the admin
//     queue and give it a further timeout to complete (aborted, or
//     late). If it does, it finishes with its completion: success, or a
//     *TimeoutError for any other status.
//  2. Otherwise reset its queue (an I/O queue is reconnected alone; the
//     admin queue takes the association with it), wait until the queue
//     is closed (the transport then no longer touches the command's
//     buffer) and finish the command with a *TimeoutError.
//
// The Linux fabrics hosts skip step 1 (nvme_rdma_timeout goes straight
// to error recovery); nvme-pci sends the Abort first, as this does.
func (q *queue) timedOut(s *cmdSlot) {
	c := q.c
	op := s.op
	cid := s.cid()
	terr := &TimeoutError{Op: op, QID: q.qid, CID: cid, After: s.timeout}
	c.stats.timeouts.Add(1)
	c.log.Warn("command timeout", "op", op, "qid", q.qid, "cid", cid, "timeout", s.timeout)
	if !s.noAbort && !q.closing.Load() {
		if aborted, err := c.abort(q.a, q.qid, cid, s.timeout); err != nil {
			c.log.Warn("abort failed", "qid", q.qid, "cid", cid, "error", err)
		} else {
			c.stats.aborts.Add(1)
			c.log.Debug("abort sent", "qid", q.qid, "cid", cid, "aborted", aborted)
			t := time.NewTimer(s.timeout)
			select {
			case <-s.tdone:
				t.Stop()
				if s.cmd.Err == nil && nvme.CQE(s.cmd.CQE[:]).Status().Success() {
					s.finishTimedOut(nil) // it completed after all
				} else {
					s.finishTimedOut(terr)
				}
				return
			case <-t.C:
			}
		}
	}
	if q.qid == 0 || s.noAbort {
		c.startRecovery(q.a, terr)
	} else {
		c.resetIOQueue(q, terr)
	}
	// Whoever resets or tears the queue down closes it: wait for that,
	// so that the transport is done with the buffer before the command
	// finishes. A completion may still come late: the slot is dead.
	q.close()
	s.dead = true
	s.finishTimedOut(terr)
}

// finishTimedOut finishes a timed-out command with result terr (nil: its
// completion is the result).
func (s *cmdSlot) finishTimedOut(terr error) {
	s.terr = terr
	for {
		w := s.state.Load()
		if s.state.CompareAndSwap(w, w&^phMask|phDone) {
			s.finish(w&flAbandoned != 0)
			return
		}
	}
}

// close tears the queue down on purpose: outstanding commands complete
// with a transport error, which does not start recovery. It returns when
// the transport has closed the queue (and so holds no command's buffer
// any more), also when another goroutine is closing it.
func (q *queue) close() {
	if !q.closing.CompareAndSwap(false, true) {
		<-q.hqClosed
		return
	}
	close(q.closed)
	_ = q.hq.Close()
	close(q.hqClosed)
	close(q.scanStop)
	if sc, ok := q.hq.(fabrics.StrayCounter); ok {
		if n := sc.StrayCompletions(); n > 0 {
			q.c.log.Debug("completions for no outstanding command dropped", "qid", q.qid, "count", n)
		}
	}
}

// retire marks the queue as no longer in use, releasing waiters that wait
// for its replacement.
func (q *queue) retire() { q.goneOnce.Do(func() { close(q.gone) }) }

// isReset reports whether err means the command's queue went away (the
// command may be retried elsewhere).
func isReset(err error) bool { return errors.Is(err, errQueueReset) }
