package rdma

import (
	"context"
	"fmt"

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
		if !s.inHandler {
			if b, ok := s.takeData(); ok {
				bufs = append(bufs, b)
			}
			if b := s.takeRecv(); b >= 0 {
				recvs = append(recvs, b)
			}
		}
	}
	q.slotMu.Unlock()
	for _, b := range bufs {
		q.l.pool.put(b)
	}
	for _, b := range recvs {
		q.repostRecv(b)
	}
	q.l.unref()
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
func (q *targetQueue) shutdown(err error) {
	q.once.Do(func() {
		q.closeErr = err
		q.closed.Store(true)
		close(q.closing)
	})
}

func (q *targetQueue) watchConn() {
	select {
	case <-q.conn.Done():
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: host disconnected: %w", q.qid, fabrics.ErrQueueClosed))
	case <-q.closing:
	}
}

// run is the queue's goroutine: it waits for Serve, then polls the CQ.
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
		ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
		q.conn.Disconnect(ctx)
		cancel()
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

const disconnectTimeout = 5e9
