package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma"
)

// cq is a completion queue: a ring of completions under a mutex, and a
// one-token channel signalled after every push. With a handler set
// (SetHandler), a push instead queues the CQ on the device's list of CQs
// to drain, and the goroutine that pushed runs the handler once it has
// released the QP's lock (handler.go).
type cq struct {
	dev      *Device
	mu       sync.Mutex
	ring     []rdma.WorkCompletion
	head     int
	n        int
	users    int // QPs using the CQ
	overflow bool
	dead     bool
	notify   chan struct{}
	closed   chan struct{}

	// rxqMask has a bit for each receive queue the packets of the CQ's
	// QPs come to (Device.queueOf): Progress reads only those.
	rxqMask atomic.Uint32

	handler func([]rdma.WorkCompletion) // under mu
	queued  bool                        // on the device's drain list; under mu
	// drainMu is held while the handler runs: one drainer at a time.
	drainMu sync.Mutex
	drained [64]rdma.WorkCompletion // the drainer's batch, under drainMu
}

var _ rdma.HandlerCQ = (*cq)(nil)

func newCQ(d *Device, entries int) *cq {
	return &cq{dev: d, ring: make([]rdma.WorkCompletion, entries), notify: make(chan struct{}, 1), closed: make(chan struct{})}
}

// push appends a completion; it reports false when the CQ is full (the
// completion is lost and the CQ marked overflowed, as a CQ error).
func (c *cq) push(wc *rdma.WorkCompletion) bool {
	c.mu.Lock()
	if c.n == len(c.ring) || c.dead {
		c.overflow = true
		c.mu.Unlock()
		return false
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = *wc
	c.n++
	if c.handler != nil {
		enqueue := !c.queued
		c.queued = true
		c.mu.Unlock()
		if enqueue {
			c.dev.handlers.add(c)
		}
		return true
	}
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
}

// Poll moves up to len(wc) completions into wc.
func (c *cq) Poll(wc []rdma.WorkCompletion) int {
	c.mu.Lock()
	k := 0
	if c.handler == nil {
		k = c.pollLocked(wc)
	}
	c.mu.Unlock()
	return k
}

// pollLocked moves up to len(wc) completions into wc; c.mu is held.
func (c *cq) pollLocked(wc []rdma.WorkCompletion) int {
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
		c.n--
		k++
	}
	return k
}

// Wait blocks until the CQ holds a completion.
func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, dead := c.n, c.dead
		if c.handler != nil {
			n = 0
		}
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if dead {
			return fmt.Errorf("soft: CQ: %w", rdma.ErrClosed)
		}
		select {
		case <-c.notify:
		case <-c.closed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Notify returns the notification channel.
func (c *cq) Notify() <-chan struct{} { return c.notify }

// Destroy releases the CQ.
func (c *cq) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users > 0 {
		return fmt.Errorf("soft: CQ used by %d QPs: %w", c.users, rdma.ErrBusy)
	}
	if !c.dead {
		c.dead = true
		close(c.closed)
	}
	return nil
}

// attach and detach count the QPs that use the CQ.
func (c *cq) attach() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return fmt.Errorf("soft: CQ: %w", rdma.ErrClosed)
	}
	c.users++
	return nil
}

func (c *cq) detach() {
	c.mu.Lock()
	c.users--
	c.mu.Unlock()
}
