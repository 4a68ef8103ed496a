package tcp

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/fabrics"
)

var (
	_ fabrics.Poller     = (*hostQueue)(nil)
	_ fabrics.WaitPoller = (*hostQueue)(nil)
)

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
	got, _ := q.poll()
	return got
}

// poll is Poll; need is what the next PDU, begun, still needs from the
// socket (0: none begun).
func (q *hostQueue) poll() (got bool, need int) {
	if !q.polling.Load() {
		q.polling.Store(true)
	}
	if q.dead.Load() || !q.rmu.TryLock() {
		return false, 0
	}
	if q.dead.Load() { // the socket may be closed (teardown)
		q.rmu.Unlock()
		return false, 0
	}
	n := q.pdus
	err := q.drain(hostPollMax, true)
	got, need = q.pdus != n, q.need
	q.rmu.Unlock()
	if err != nil {
		q.shutdown(fmt.Errorf("nvme-tcp: queue %d: connection lost: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
	}
	return got, need
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

// CanWait implements fabrics.WaitPoller: PollWait sleeps on the socket.
func (q *hostQueue) CanWait() bool { return true }

// hostPollWaiter is PollWait's state (one waiter at a time: pollMu).
type hostPollWaiter struct {
	pfd    [1]unix.PollFd
	ts     unix.Timespec
	sleeps atomic.Uint64 // sleeps begun (for tests)
}

// PollWait implements fabrics.WaitPoller: Poll, and when nothing was
// there, a sleep of up to d in ppoll(2) on the socket, on the caller's
// thread (woken by the response's segment, as fio's nbd engine is), then
// Poll again. When a PDU has begun to arrive, the socket's SO_RCVLOWAT
// is its remaining bytes for the sleep: one wake-up for a 128 KiB
// C2HData, not one per segment. It does not wait while another caller
// does.
func (q *hostQueue) PollWait(d time.Duration) bool {
	// The last poll emptied the socket and left no whole PDU: a read
	// now would most likely find nothing, and ppoll reports at once
	// what came since.
	need, skip := q.pollEmptied()
	if !skip {
		var got bool
		if got, need = q.poll(); got {
			return true
		}
	}
	if d <= 0 || !q.pollMu.TryLock() {
		return false
	}
	if q.dead.Load() { // the socket may be closed (teardown)
		q.pollMu.Unlock()
		return false
	}
	q.pw.ts = unix.NsecToTimespec(int64(d))
	q.pw.sleeps.Add(1)
	lowat := 0
	if need > 1 {
		lowat = need
	}
	q.ppollOnce(lowat)
	q.pollMu.Unlock()
	return q.Poll()
}

// pollEmptied reports whether this poller's last drain left the socket
// empty and the buffer without a whole PDU (and what the begun one still
// needs), so that PollWait can sleep without reading first. False while
// another reads, or before the first poll.
func (q *hostQueue) pollEmptied() (need int, ok bool) {
	if !q.polling.Load() || !q.rmu.TryLock() {
		return 0, false
	}
	have := q.rend - q.rpos
	whole := have >= CommonHeaderLen && int(Header(q.rbuf[q.rpos:q.rend]).PLen()) <= have
	need, ok = q.need, q.emptied && !whole && !q.dead.Load()
	q.rmu.Unlock()
	return need, ok
}

// ppollOnce is PollWait's sleep: one ppoll for readability (with
// SO_RCVLOWAT at lowat when above 0), its outcome left to the Poll that
// follows.
func (q *hostQueue) ppollOnce(lowat int) {
	fd := q.sock.fd
	if lowat > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, lowat)
	}
	q.sock.wait(&q.pw.pfd, unix.POLLIN|unix.POLLRDHUP, &q.pw.ts)
	if lowat > 0 {
		// Back to the default, for the reader goroutine.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
	}
}
