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

// Slot states. A slot is idle in the free list; busy from Submit until its
// Done callback; done once Done has signalled the waiter; abandoned when
// the waiter gave up (timeout, cancelled context, failed Submit), in which
// case the late Done returns the slot to the free list. A slot that
// carries an asynchronous I/O (aio set, see async.go) goes through the
// same states, but whoever moves it out of busy completes the I/O, and
// the slot is freed by the last of its references (unref).
const (
	slotIdle int32 = iota
	slotBusy
	slotDone
	slotAbandoned
)

// cmdSlot is one reusable command of a queue: the HostCommand with its Done
// callback bound once, a channel the callback signals and a timer for the
// command timeout. Nothing is allocated per command.
type cmdSlot struct {
	q     *queue
	cmd   fabrics.HostCommand
	done  chan struct{} // capacity 1
	timer *time.Timer
	state atomic.Int32

	// Asynchronous use (Namespace.Start, I/O queues only): the I/O the
	// command carries (nil for a synchronous command), a timer that runs
	// asyncTimeout (created once, armed per command), and the references
	// to the slot that are still out: the transport's completion, the
	// timer's run and the submission (see startAsync and unref).
	aio       *IO
	atimer    *time.Timer
	arefs     atomic.Int32
	submitted atomic.Bool // Submit has returned (the SQE's CID is set)

	// own is the slot's own data buffer for commands run by exec: a
	// caller that gives up (its context ends) returns while the command
	// may still be in flight, so the transport must not hold the
	// caller's buffer. Grown as needed and kept.
	own []byte
}

// queue is one host queue (admin or I/O) with its pool of command slots.
type queue struct {
	c     *Controller
	a     *assoc
	qid   uint16
	hq    fabrics.HostQueue
	slots []cmdSlot
	free  chan *cmdSlot

	closing   atomic.Bool   // the host is tearing the queue down on purpose
	resetting atomic.Bool   // a reset of this queue has been started
	closed    chan struct{} // closed when the queue is torn down
	hqClosed  chan struct{} // closed when the transport's Close has returned
	gone      chan struct{} // closed when the queue is no longer in use (replaced or its association torn down)
	goneOnce  sync.Once
}

// newQueue wraps hq with a pool of depth command slots (at most the
// transport's depth).
func newQueue(c *Controller, a *assoc, qid uint16, hq fabrics.HostQueue) *queue {
	depth := max(hq.Depth(), 1)
	q := &queue{
		c:        c,
		a:        a,
		qid:      qid,
		hq:       hq,
		slots:    make([]cmdSlot, depth),
		free:     make(chan *cmdSlot, depth),
		closed:   make(chan struct{}),
		hqClosed: make(chan struct{}),
		gone:     make(chan struct{}),
	}
	for i := range q.slots {
		s := &q.slots[i]
		s.q = q
		s.done = make(chan struct{}, 1)
		s.timer = time.NewTimer(time.Hour)
		s.timer.Stop()
		s.cmd.Done = s.complete
		if qid != 0 {
			s.atimer = time.AfterFunc(time.Hour, s.asyncTimeout)
			s.atimer.Stop()
		}
		q.free <- s
	}
	return q
}

// complete is the HostCommand's Done callback, run on a transport
// goroutine: it must not block.
func (s *cmdSlot) complete(cmd *fabrics.HostCommand) {
	q := s.q
	q.c.compSeen.Store(true)
	if cmd.Err != nil {
		q.transportFailed(cmd.Err)
	}
	if s.aio != nil {
		s.completeAsync()
		return
	}
	for {
		switch s.state.Load() {
		case slotBusy:
			if s.state.CompareAndSwap(slotBusy, slotDone) {
				s.done <- struct{}{}
				return
			}
		case slotAbandoned:
			if s.state.CompareAndSwap(slotAbandoned, slotIdle) {
				s.cmd.Data = nil
				q.free <- s
				return
			}
		default:
			return // a duplicate completion: ignore it
		}
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

// get takes a free slot, waiting while the queue is full.
func (q *queue) get(ctx context.Context) (*cmdSlot, error) {
	select {
	case s := <-q.free:
		return s, nil
	default:
	}
	select {
	case s := <-q.free:
		return s, nil
	case <-q.closed:
		return nil, errQueueReset
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tryGet takes a free slot if there is one.
func (q *queue) tryGet() *cmdSlot {
	select {
	case s := <-q.free:
		return s
	default:
		return nil
	}
}

// put returns a slot whose command has completed to the free list.
func (q *queue) put(s *cmdSlot) {
	s.cmd.Data = nil
	s.state.Store(slotIdle)
	q.free <- s
}

// start submits the slot's command. On failure the slot is either back in
// the free list or abandoned (to be freed by a late Done).
func (s *cmdSlot) start() error {
	if mx := s.q.hq.MaxTransfer(); mx > 0 && len(s.cmd.Data) > mx {
		n := len(s.cmd.Data)
		s.q.put(s)
		return fmt.Errorf("initiator: queue %d: %d-byte transfer exceeds the transport's %d", s.q.qid, n, mx)
	}
	s.cmd.Err = nil
	s.cmd.CQE = [16]byte{}
	s.state.Store(slotBusy)
	err := s.q.hq.Submit(&s.cmd)
	if err == nil {
		return nil
	}
	if !s.state.CompareAndSwap(slotBusy, slotAbandoned) {
		// The transport completed the command as it failed it.
		<-s.done
		s.q.put(s)
	}
	s.q.transportFailed(err)
	return fmt.Errorf("%w: queue %d: %w", errQueueReset, s.q.qid, err)
}

// cid returns the command identifier the transport gave the command.
func (s *cmdSlot) cid() uint16 { return binary.LittleEndian.Uint16(s.cmd.SQE[2:]) }

// abandon gives up waiting for the slot's command. It reports false when
// the command completed meanwhile (the slot is then done and its signal
// consumed).
func (s *cmdSlot) abandon() bool {
	if s.state.CompareAndSwap(slotBusy, slotAbandoned) {
		return true
	}
	<-s.done
	return false
}

// result turns a completed slot into an error: a transport failure, a
// status error, or nil.
func (s *cmdSlot) result(op string) error {
	if s.cmd.Err != nil {
		return fmt.Errorf("%w: queue %d: %w", errQueueReset, s.q.qid, s.cmd.Err)
	}
	return statusError(s.cmd.CQE[:], op, s.q.qid, binary.LittleEndian.Uint32(s.cmd.SQE[4:]))
}

// waitOpts tune how a command is waited for.
type waitOpts struct {
	timeout time.Duration
	// noAbort skips the Abort on timeout and fails the association at
	// once (keep-alive, Connect, and commands run while connecting).
	noAbort bool
}

// wait waits for the slot's command. It returns nil when the command
// completed (the slot is then done: read it, then put it back), or an error
// when the waiter gave up (the slot is then no longer the caller's).
func (s *cmdSlot) wait(ctxDone <-chan struct{}, ctxErr func() error, op string, wo waitOpts) error {
	s.timer.Reset(wo.timeout)
	select {
	case <-s.done:
		s.timer.Stop()
		return nil
	case <-ctxDone:
		s.timer.Stop()
		if s.abandon() {
			return ctxErr()
		}
		return nil
	case <-s.timer.C:
	}
	return s.timedOut(op, wo)
}

// timedOut handles a command timeout: send Abort for the command on the
// admin queue; if the command is still outstanding after a further
// timeout, reset its queue (an I/O queue is reconnected alone, the admin
// queue takes the whole association with it). The Linux fabrics hosts do
// not send Abort: they go straight to error recovery of the controller.
func (s *cmdSlot) timedOut(op string, wo waitOpts) error {
	q, c := s.q, s.q.c
	cid := s.cid()
	terr := &TimeoutError{Op: op, QID: q.qid, CID: cid, After: wo.timeout}
	c.log.Warn("command timeout", "op", op, "qid", q.qid, "cid", cid, "timeout", wo.timeout)
	if !wo.noAbort && !q.closing.Load() {
		if aborted, err := c.abort(q.a, q.qid, cid, wo.timeout); err != nil {
			c.log.Warn("abort failed", "qid", q.qid, "cid", cid, "error", err)
		} else {
			// Give the command a further timeout to complete (aborted, or
			// late) before the queue is reset.
			c.log.Debug("abort sent", "qid", q.qid, "cid", cid, "aborted", aborted)
			s.timer.Reset(wo.timeout)
			select {
			case <-s.done:
				s.timer.Stop()
				if s.cmd.Err == nil && nvme.CQE(s.cmd.CQE[:]).Status().Success() {
					return nil // it completed after all
				}
				q.put(s)
				return terr
			case <-s.timer.C:
			}
		}
	}
	if !s.abandon() {
		if s.cmd.Err == nil && nvme.CQE(s.cmd.CQE[:]).Status().Success() {
			return nil
		}
		q.put(s)
		return terr
	}
	if q.qid == 0 || wo.noAbort {
		c.startRecovery(q.a, terr)
	} else {
		c.resetIOQueue(q, terr)
	}
	// The transport may still hold the command's buffer (the caller's,
	// for I/O): return only once the queue is closed, when it no longer
	// does. Another command's timeout may be closing it: wait for that.
	q.close()
	return terr
}

// exec runs one command synchronously and returns its completion. The
// error is a transport or timeout error, or a *CommandError for a status.
func (q *queue) exec(ctx context.Context, sqe *[64]byte, data []byte, dir fabrics.DataDirection, op string, wo waitOpts) ([16]byte, error) {
	s, err := q.get(ctx)
	if err != nil {
		return [16]byte{}, err
	}
	s.cmd.SQE = *sqe
	s.cmd.Data = s.ownData(data, dir)
	s.cmd.Direction = dir
	if err := s.start(); err != nil {
		return [16]byte{}, err
	}
	if err := s.wait(ctx.Done(), ctx.Err, op, wo); err != nil {
		return [16]byte{}, err
	}
	cqe := s.cmd.CQE
	err = s.result(op)
	if dir != fabrics.DirHostToCtrl && s.cmd.Err == nil {
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
