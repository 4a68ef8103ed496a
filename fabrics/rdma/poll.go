package rdma

import (
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Poll makes the queue's CQ progress on the caller's goroutine
// (fabrics.Poller): its handler runs the Done callbacks of the commands
// that completed. It reports false at once when the provider cannot be
// driven that way.
func (q *hostQueue) Poll() bool {
	p, ok := q.cq.(rdma.Progresser)
	return ok && p.Progress()
}

// PollDone hands the CQ back to the provider's goroutines
// (fabrics.Poller).
func (q *hostQueue) PollDone() {
	if p, ok := q.cq.(rdma.Progresser); ok {
		p.ProgressDone()
	}
}

// CanPoll reports whether the queue's CQ can be driven by Poll.
func (q *hostQueue) CanPoll() bool {
	_, ok := q.cq.(rdma.Progresser)
	return ok
}

// PollWait is Poll that waits for up to d for the queue's traffic when
// nothing is there (fabrics.WaitPoller); false at once where the provider
// cannot wait that way.
func (q *hostQueue) PollWait(d time.Duration) bool {
	if p, ok := q.cq.(rdma.ProgressWaiter); ok {
		return p.ProgressWait(d)
	}
	return q.Poll()
}

// CanWait reports whether PollWait can sleep: whether the provider's CQ
// can wait for its traffic (the soft provider's).
func (q *hostQueue) CanWait() bool {
	_, ok := q.cq.(rdma.ProgressWaiter)
	return ok
}
