package tcp

import (
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
)

var _ fabrics.Poller = (*hostQueue)(nil)

// hostPollMax bounds the PDUs one Poll reads, so that a busy queue does
// not keep its poller from its own work.
const hostPollMax = 64

// Poll implements fabrics.Poller: it reads, on the caller's goroutine, the
// PDUs that have arrived (without waiting for the socket), running the
// Done callbacks of the commands they complete, and reports whether there
// were any. From the first Poll until PollDone the reader goroutine leaves
// the socket alone: a caller that spins on Poll while its command is out
// (fio's busy_poll) gets the response with no goroutine woken on either
// side of the socket. Concurrent pollers do not wait for each other: the
// one that finds the socket taken returns false.
func (q *hostQueue) Poll() bool {
	if !q.polling.Load() {
		q.polling.Store(true)
	}
	if q.dead.Load() || !q.rmu.TryLock() {
		return false
	}
	n := q.pdus
	err := q.drain(hostPollMax)
	got := q.pdus != n
	q.rmu.Unlock()
	if err != nil {
		q.shutdown(fmt.Errorf("nvme-tcp: queue %d: connection lost: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
	}
	return got
}

// PollDone implements fabrics.Poller: the reader goroutine reads the
// socket again.
func (q *hostQueue) PollDone() {
	if q.polling.Swap(false) {
		select {
		case q.unpoll <- struct{}{}:
		default:
		}
	}
}

// CanPoll implements fabrics.Poller: a TCP queue can always be polled.
func (q *hostQueue) CanPoll() bool { return true }
