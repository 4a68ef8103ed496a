package initiator

import (
	"errors"
	"sync"
	"time"
)

// ErrFastIOFail is returned for commands issued or waiting while the
// controller reconnects, once Options.FastIOFailTimeout has passed since
// it lost its association (Linux NVME_CTRL_FAILFAST_EXPIRED).
var ErrFastIOFail = errors.New("fast_io_fail_tmo expired: controller not connected")

// failFast is the fast_io_fail_tmo timer of a controller
// (nvme_start_failfast_work, nvme_failfast_work).
type failFast struct {
	mu      sync.Mutex
	timer   *time.Timer
	ch      chan struct{} // closed when the timer fires; nil when not armed
	expired bool
}

// armFailFast starts the fast_io_fail_tmo timer when the controller leaves
// the live state (c.mu held, so that a waiter that sees the state sees
// the timer), unless it runs already or the option is off. Linux starts it
// on the move to connecting, right after the queues' teardown.
func (c *Controller) armFailFast() {
	d := c.opts.FastIOFailTimeout
	if d <= 0 {
		return
	}
	f := &c.ff
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch != nil {
		return
	}
	ch := make(chan struct{})
	f.ch = ch
	f.timer = time.AfterFunc(d, func() {
		f.mu.Lock()
		fire := f.ch == ch && !f.expired
		if fire {
			f.expired = true
			close(ch)
		}
		f.mu.Unlock()
		if fire {
			c.notifyChange() // the path no longer counts as available
			c.log.Warn("fast_io_fail_tmo expired: failing I/O until the controller is back", "fast_io_fail_tmo", d)
		}
	})
}

// disarmFailFast stops the timer once the controller is live again (or
// gone): I/O waits again on the next connection loss.
func (c *Controller) disarmFailFast() {
	f := &c.ff
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer, f.ch, f.expired = nil, nil, false
}

// failFastState returns the channel closed when the timer fires (nil when
// not armed) and whether it has fired.
func (c *Controller) failFastState() (<-chan struct{}, bool) {
	f := &c.ff
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch, f.expired
}
