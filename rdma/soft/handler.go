package soft

import (
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma"
)

// Completion handlers (rdma.HandlerCQ). A push to a CQ with a handler
// queues the CQ on the device's drain list; every place that can push
// completions runs the list once it has released its QP lock: the receive
// goroutine at the end of each batch (finishBatch), and the verbs and
// timers that complete work (PostSend, PostRecv, Modify, the
// retransmission and RNR timers). A drain holds the CQ's drainMu, so
// handler calls never overlap; a nested drain (a handler's PostSend
// completing work on the same CQ) finds drainMu held and leaves the
// completions to the outer drain, which polls until the ring is empty.
//
// While the receive goroutine runs handlers, PostSend does not send: it
// defers the QP's requester to the end of the batch, where the QP's
// coalesced ACK and its new request packets leave in one sendmmsg (an
// NVMe target's ACK of a command capsule, its RDMA WRITE of the data and
// the SEND of the response).
type handlerState struct {
	pending atomic.Int32 // len(list), read without mu
	mu      sync.Mutex
	list    []*cq
	// deferring counts the receive goroutines running handlers;
	// deferred lists the QPs whose requester one of them must run: the
	// first to finish takes the list.
	deferring int
	deferred  []*qp
	// deferOn mirrors deferring for a lock-free check in PostSend: a stale
	// false only means the QP's requester runs at once, which is always
	// correct.
	deferOn atomic.Bool
}

// add queues c for draining.
func (h *handlerState) add(c *cq) {
	h.mu.Lock()
	h.list = append(h.list, c)
	h.pending.Store(int32(len(h.list)))
	h.mu.Unlock()
}

// runHandlers drains every CQ on the device's list. It must be called
// without any QP or CQ lock held.
func (d *Device) runHandlers() {
	h := &d.handlers
	for h.pending.Load() != 0 {
		h.mu.Lock()
		n := len(h.list)
		if n == 0 {
			h.mu.Unlock()
			return
		}
		c := h.list[n-1]
		h.list[n-1] = nil
		h.list = h.list[:n-1]
		h.pending.Store(int32(n - 1))
		h.mu.Unlock()
		c.mu.Lock()
		c.queued = false
		c.mu.Unlock()
		c.drain()
	}
}

// drain runs the handler on the CQ's completions until the ring is empty.
// If another goroutine is draining, it leaves the work to it: that
// drainer checks the ring again after it lets go of drainMu.
func (c *cq) drain() {
	for {
		if !c.drainMu.TryLock() {
			return
		}
		for {
			c.mu.Lock()
			h := c.handler
			k := 0
			if h != nil {
				k = c.pollLocked(c.drained[:])
			}
			c.mu.Unlock()
			if k == 0 {
				break
			}
			h(c.drained[:k])
		}
		c.drainMu.Unlock()
		c.mu.Lock()
		again := c.n > 0 && c.handler != nil
		c.mu.Unlock()
		if !again {
			return
		}
	}
}

// SetHandler implements rdma.HandlerCQ.
func (c *cq) SetHandler(h func([]rdma.WorkCompletion)) {
	c.drainMu.Lock() // wait out a running drain
	c.mu.Lock()
	c.handler = h
	queue := h != nil && c.n > 0 && !c.queued
	if queue {
		c.queued = true
	}
	notify := h == nil && c.n > 0
	c.mu.Unlock()
	c.drainMu.Unlock()
	if queue {
		c.dev.handlers.add(c)
		c.dev.runHandlers()
	}
	if notify {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// deferKick is called by PostSend with q.mu held: while the receive
// goroutine runs handlers it queues q's requester for the end of the
// batch and reports true.
func (h *handlerState) deferKick(q *qp) bool {
	if !h.deferOn.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.deferring == 0 {
		return false
	}
	if !q.kickQueued {
		q.kickQueued = true
		h.deferred = append(h.deferred, q)
	}
	return true
}

// runDeferring runs the handlers with PostSend deferred, and appends the
// QPs whose requester must run to kicks.
func (d *Device) runDeferring(kicks []*qp) []*qp {
	h := &d.handlers
	if h.pending.Load() == 0 {
		return kicks
	}
	h.mu.Lock()
	h.deferring++
	h.deferOn.Store(true)
	h.mu.Unlock()
	d.runHandlers()
	h.mu.Lock()
	h.deferring--
	h.deferOn.Store(h.deferring > 0)
	kicks = append(kicks, h.deferred...)
	clear(h.deferred)
	h.deferred = h.deferred[:0]
	h.mu.Unlock()
	return kicks
}
