package rdma

import (
	"context"
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/rdma"
)

// The end of a target queue: the liveness probe and the connect timeout
// that can close it, its shutdown, the teardown on its goroutine and the
// release of its verbs objects and buffers.

// probe runs when a connected queue's liveness interval has passed: if no
// command came since the last time, it sends a zero-length RDMA WRITE
// (the SQ has room for it: MaxSendWR is two per slot plus one). Its
// completion is all that matters: success, or the error that closes the
// queue.
func (q *targetQueue) probe() {
	if q.closed.Load() {
		return
	}
	n := q.recvs.Load()
	if n == q.probeSeen.Load() && q.probing.CompareAndSwap(false, true) {
		q.post(nil, 0, &q.probeWR, chainSend, "liveness probe")
	}
	q.probeSeen.Store(n)
	q.mu.Lock()
	if !q.finished {
		q.probeTimer.Reset(q.l.cfg.LivenessInterval)
	}
	q.mu.Unlock()
}

// connectExpired closes a queue whose Fabrics Connect has not succeeded
// within the connect timeout.
func (q *targetQueue) connectExpired() {
	if q.connected.Load() {
		return
	}
	q.log.Warn("no Fabrics Connect within the connect timeout: queue closed", "timeout", q.l.cfg.ConnectTimeout)
	q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, ErrConnectTimeout))
}

// release destroys the verbs objects and frees the buffers (once the
// queue goroutine is done, or when setup fails).
func (q *targetQueue) release() {
	q.mu.Lock()
	q.finished = true
	if q.connTimer != nil {
		q.connTimer.Stop()
	}
	if q.probeTimer != nil {
		q.probeTimer.Stop()
	}
	ringMR := q.ringMR
	q.mu.Unlock()
	var recvs []int
	if q.rpool != nil && q.qp != nil {
		// The receives the QP consumed from the SRQ and nobody handled
		// are in the CQ: once the QP is gone (destroyed here, which
		// verbs.destroy then finds done) they go back to the SRQ.
		q.qp.Destroy()
		wcs := make([]rdma.WorkCompletion, 32)
		for n := q.cq.Poll(wcs); n > 0; n = q.cq.Poll(wcs) {
			for _, wc := range wcs[:n] {
				if wc.WRID&wrKind == wrRecv && int(wc.WRID&^wrKind) < len(q.rpool.bufs) {
					q.rpool.taken()
					recvs = append(recvs, int(wc.WRID&^wrKind))
				}
			}
		}
	}
	q.verbs.destroy(ringMR)
	q.l.bufBytes.Add(-q.bufBytes)
	q.ticket.release()
	// The QP is gone: no RDMA touches the slots' buffers any more. Those
	// of commands still with the handler go back when it completes them
	// (CompleteRequest); a slot waiting for one leaves the waiters, and
	// one granted meanwhile sees released and gives it back.
	var bufs []poolBuf
	q.slotMu.Lock()
	q.released = true
	for _, s := range q.slots {
		if s == nil {
			continue
		}
		// A slot waiting for a pool buffer leaves the waiters (it holds
		// none, but may hold its capsule's SRQ buffer).
		q.l.pool.cancel(&s.w)
		if s.inHandler {
			q.held++
			continue
		}
		if b, ok := s.takeData(); ok {
			bufs = append(bufs, b)
		}
		if b := s.takeRecv(); b >= 0 {
			recvs = append(recvs, b)
		}
	}
	held := q.held
	q.slotMu.Unlock()
	for _, b := range bufs {
		q.l.pool.put(b)
	}
	for _, b := range recvs {
		q.repostRecv(b)
	}
	// The pool and the SRQ stay until the handler has given back the
	// buffers of the commands it still has (handlerDone): their SRQ
	// buffers go back to an SRQ that is still there.
	if held == 0 {
		q.l.unref()
	}
	if f := q.l.released; f != nil {
		f()
	}
}

// Close implements fabrics.TargetQueue.
func (q *targetQueue) Close() error {
	q.shutdown(fabrics.ErrQueueClosed)
	<-q.done
	return nil
}

// shutdown starts the teardown once; the queue goroutine finishes it.
// Responses already posted are given up to sendDrainTimeout to complete
// first (a reply followed by a close, as an AUTH_Failure1 before the
// queue of a failed authentication is closed, would otherwise be
// flushed by the disconnect); nothing new is sent meanwhile (closed).
func (q *targetQueue) shutdown(err error) {
	q.once.Do(func() {
		q.closeErr = err
		q.closed.Store(true)
		q.draining.Store(true)
		if q.sendsOut.Load() == 0 {
			q.endDrain()
			return
		}
		// A host that is gone leaves its SENDs to the RC retries: the
		// wait is bounded, the timer harmless once the drain is over.
		time.AfterFunc(sendDrainTimeout, q.endDrain)
	})
}

// sendDrainTimeout bounds the wait for the responses posted before a
// close.
const sendDrainTimeout = time.Second

// endDrain lets the queue goroutine tear the queue down.
func (q *targetQueue) endDrain() { q.drainOnce.Do(func() { close(q.closing) }) }

// sendPosting counts a response SEND about to be posted; it reports
// false, not counting it, when the queue is closing (nothing more is
// sent). Counting before the check means a close either sees the SEND
// and waits for it, or the SEND sees the close.
func (q *targetQueue) sendPosting() bool {
	q.sendsOut.Add(1)
	if q.closed.Load() {
		q.sendDone()
		return false
	}
	return true
}

// sendDone counts a response SEND completed (or never posted); the last
// one of a draining queue ends the drain.
func (q *targetQueue) sendDone() {
	if q.sendsOut.Add(-1) == 0 && q.draining.Load() {
		q.endDrain()
	}
}

// handlerDone drops the reference to the port's shared resources a slot
// still with the handler held when the queue was released; the last one
// lets them go (its SRQ buffer has been reposted by then).
func (q *targetQueue) handlerDone() {
	q.slotMu.Lock()
	q.held--
	last := q.held == 0
	q.slotMu.Unlock()
	if last {
		q.l.unref()
	}
}

func (q *targetQueue) watchConn() {
	select {
	case <-q.conn.Done():
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: host disconnected: %w", q.qid, fabrics.ErrQueueClosed))
	case <-q.closing:
	}
}

// run is the queue's goroutine: it waits for Serve, then handles the
// CQ's completions until the close (verbs.poll: it polls, or, for an I/O
// queue on an rdma.HandlerCQ, waits while the provider calls complete).
func (q *targetQueue) run() {
	select {
	case <-q.serveCh:
	case <-q.closing:
		q.teardown()
		return
	}
	q.poll(q.closing, q.qid != 0, q.complete, q)
	q.teardown()
}

func (q *targetQueue) teardown() {
	if q.conn != nil {
		// The DREQ moves the QP to the error state and is retried by the
		// connection manager on its own; waiting for the DREP would only
		// make a host that vanished cost 5 s per queue
		// (nvmetd's SIGTERM took 10 s to a minute), as Linux's
		// rdma_disconnect does not wait either.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		q.conn.Disconnect(ctx)
	}
	q.release()
	q.mu.Lock()
	h := q.handler
	q.mu.Unlock()
	// Done before the handler hears of it: a handler may Close the queue
	// from QueueClosed, and Close waits for done.
	close(q.done)
	if h != nil {
		h.QueueClosed(q.closeErr)
	}
	q.log.Debug("queue closed", "reason", q.closeErr)
}
