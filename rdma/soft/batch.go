package soft

import "github.com/nvmeof/nvmeof/rdma"

// finishBatch sends the coalesced ACKs and the responder's packets, then
// runs the requesters whose window opened.
func (d *Device) finishBatch(rx *rxState) {
	for i, q := range rx.acks {
		q.mu.Lock()
		q.ackQueued = false
		if !q.destroyed && q.state != rdma.QPSErr && q.state != rdma.QPSReset {
			q.flushAck(rx)
		}
		q.mu.Unlock()
		rx.acks[i] = nil
	}
	rx.acks = rx.acks[:0]
	rx.tx.flush()
	for i, q := range rx.kicks {
		q.mu.Lock()
		q.kickQueued = false
		if !q.destroyed {
			q.runRequester(rx.reqTx)
			rx.reqTx.flush()
		}
		q.mu.Unlock()
		rx.kicks[i] = nil
	}
	rx.kicks = rx.kicks[:0]
}
