package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// ErrNotLive is wrapped by Reset when the controller is not live (it is
// already resetting, reconnecting or being disconnected).
var ErrNotLive = errors.New("controller not live")

// Reset resets the controller as `nvme reset` does for a fabrics
// controller (nvme_reset_ctrl, nvme_rdma_reset_ctrl_work): keep-alive and
// asynchronous events stop, the I/O queues close, CC.EN is cleared and
// CSTS.RDY awaited at 0 (nvme_disable_ctrl), the admin queue closes, and a
// new association is made (Connect, CC.EN, Identify, I/O queues,
// namespaces). I/O issued meanwhile waits and runs on the new association.
// When the new association cannot be made the controller goes on
// reconnecting every ReconnectDelay as after a connection loss, and Reset
// returns why the first attempt failed.
func (c *Controller) Reset(ctx context.Context) error { return c.reset(ctx, nil) }

// reset is Reset; with want set, only while want is the controller's
// association (ErrNotLive otherwise): a reset decided on an association,
// as after an ANATT timeout, must not hit the one a reconnect made since.
func (c *Controller) reset(ctx context.Context, want *assoc) error {
	c.mu.Lock()
	select {
	case <-c.closing:
		c.mu.Unlock()
		return fmt.Errorf("initiator: %s: reset: %w", c.addr, ErrClosed)
	default:
	}
	a := c.cur.Load()
	if st := State(c.state.Load()); st != StateLive {
		c.mu.Unlock()
		return fmt.Errorf("initiator: %s: reset: controller is %s: %w", c.addr, st, ErrNotLive)
	}
	if want != nil && a != want {
		c.mu.Unlock()
		return fmt.Errorf("initiator: %s: reset: the association was replaced: %w", c.addr, ErrNotLive)
	}
	c.leaveLive()
	c.mu.Unlock()
	c.log.Info("resetting the controller", "cntlid", a.cntlid)

	a.cancel()
	a.wg.Wait()
	for i := range a.io {
		if q := a.io[i].Load(); q != nil {
			q.close()
		}
	}
	if err := c.disable(ctx, a); err != nil {
		// The new association does not depend on the old one's state.
		c.log.Warn("reset: disabling the controller failed; reconnecting anyway", "error", err)
	}
	c.teardown(a)

	na, err := c.reassociate(ctx, "reset")
	if err != nil {
		c.log.Error("reset: reconnecting failed; retrying every reconnect delay", "error", err, "reconnect_delay", c.opts.ReconnectDelay)
		go c.reconnect(a) // takes over the recovery count
		return fmt.Errorf("initiator: %s: reset: %w", c.addr, err)
	}
	defer c.recovery.Done()
	if !c.goLive(na) {
		return fmt.Errorf("initiator: %s: reset: %w", c.addr, ErrClosed)
	}
	c.log.Info("controller reset", "cntlid", na.cntlid, "io_queues", len(na.io))
	return nil
}

// disable clears CC.EN and waits for CSTS.RDY to clear within CAP.TO
// (nvme_disable_ctrl).
func (c *Controller) disable(ctx context.Context, a *assoc) error {
	if err := c.propSet(ctx, a, fabrics.PropCC, uint64(a.cc.WithEN(false))); err != nil {
		return fmt.Errorf("initiator: disable: %w", err)
	}
	timeout := a.cap.Timeout() + 500*time.Millisecond
	return c.waitCSTS(ctx, a, timeout, "disabled", func(s fabrics.CSTS) bool { return !s.RDY() })
}
