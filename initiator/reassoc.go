package initiator

import "context"

// The steps a controller reset (Reset) and a reconnect after a connection
// loss (reconnect) share, as nvme_rdma_reset_ctrl_work and
// nvme_rdma_reconnect_ctrl_work share nvme_rdma_setup_ctrl.

// leaveLive moves the live controller to resetting: I/O issued from now on
// waits for the new association (a new liveCh), fail-fast is armed before
// any waiter can see the state, and the recovery is counted (Disconnect
// waits for it). c.mu is held.
func (c *Controller) leaveLive() {
	c.state.Store(int32(StateResetting))
	c.liveCh = make(chan struct{})
	c.armFailFast()
	c.recovery.Add(1)
	c.notifyChange()
}

// reassociate makes a new association and scans its namespaces (a failed
// scan is logged: the association stands). Disconnect or ctx stops it.
// after names what it follows in the log ("reset", "reconnect").
func (c *Controller) reassociate(ctx context.Context, after string) (*assoc, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	na, err := c.establish(ctx)
	if err != nil {
		return nil, err
	}
	changed, serr := c.scanChanges(ctx, na)
	if serr != nil {
		c.log.Warn("namespace rescan after "+after+" failed", "error", serr)
	}
	// A Namespace Attribute Changed notice the controller raised while no
	// association was there to receive it is lost: the host reports what
	// its rescan found instead, so that a user mapping the namespaces
	// still learns of it (the kernel's scan after a reconnect does the same
	// to its block devices).
	na.missed = changed
	if !c.opts.isDiscovery() {
		c.updateANA(ctx, na)
	}
	return na, nil
}

// goLive makes na the controller's association and the controller live
// again, releasing the I/O that waited. False when Disconnect came first:
// na is torn down.
func (c *Controller) goLive(na *assoc) bool {
	c.mu.Lock()
	select {
	case <-c.closing:
		c.mu.Unlock()
		c.teardown(na)
		return false
	default:
	}
	c.cur.Store(na)
	c.state.Store(int32(StateLive))
	close(c.liveCh)
	c.mu.Unlock()
	c.disarmFailFast()
	c.startBackground(na)
	c.notifyChange()
	return true
}
