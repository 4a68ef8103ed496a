package soft

import "github.com/nvmeof/nvmeof/rdma"

// finishBatch ends a receive batch. It runs the completion handlers of
// the batch first, with PostSend deferred (handler.go); then it sends the
// responder's packets (READ responses, NAKs), then, QP by QP under the
// QP's send lock (txMu) so that request packets leave in PSN order, the
// coalesced ACK together with the requester's packets (those whose window
// opened and those the handlers posted), sent after the QP's lock is
// released, then the remaining ACKs in one sendmmsg.
func (d *Device) finishBatch(rx *rxState) {
	rx.kicks = d.runDeferring(rx.kicks)
	rx.tx.flush()
	for i, q := range rx.holds {
		q.mu.Lock()
		q.resp.ackHold = false // the READ responses are sent
		q.mu.Unlock()
		rx.holds[i] = nil
	}
	rx.holds = rx.holds[:0]
	for i, q := range rx.kicks {
		rx.kicks[i] = nil
		q.mu.Lock()
		q.kickQueued = false
		if q.destroyed {
			q.mu.Unlock()
			continue
		}
		q.txMu.Lock()
		rx.reqTx.forQP(q)
		q.ackQueued = false
		if q.state != rdma.QPSErr && q.state != rdma.QPSReset {
			q.flushAck(rx.reqTx) // with the requester's packets
		}
		q.runRequester(rx.reqTx)
		q.mu.Unlock()
		rx.reqTx.flush()
		q.txMu.Unlock()
	}
	rx.kicks = rx.kicks[:0]
	for i, q := range rx.acks {
		q.mu.Lock()
		if q.ackQueued {
			q.ackQueued = false
			if !q.destroyed && q.state != rdma.QPSErr && q.state != rdma.QPSReset && !q.delayAck() {
				rx.tx.forQP(q)
				q.flushAck(rx.tx)
			}
		}
		q.mu.Unlock()
		rx.acks[i] = nil
	}
	rx.acks = rx.acks[:0]
	rx.tx.flush()
	// Completions of the requesters run above (UD sends, errors).
	d.runHandlers()
}
