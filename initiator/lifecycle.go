package initiator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// startBackground starts keep-alive and the Asynchronous Event Request of
// association a.
func (c *Controller) startBackground(a *assoc) {
	if a.kato > 0 {
		a.wg.Add(1)
		go c.keepAlive(a)
	}
	if a.aen != 0 {
		if s := a.admin.tryGet(); s != nil {
			a.wg.Add(1)
			go c.asyncEvents(a, s) // reports a.missed first
			return
		}
	}
	if len(a.missed) > 0 {
		c.reportMissed(a.missed)
	}
}

// keepAlive sends Keep Alive every KATO/2 (KATO/4 with Traffic Based Keep
// Alive, skipping the command when other completions were seen), as
// nvme_keep_alive_work. A failure or a timeout of KATO starts recovery.
func (c *Controller) keepAlive(a *assoc) {
	defer a.wg.Done()
	period := a.kato / 2
	if a.tbkas {
		period /= 2
	}
	t := time.NewTimer(period)
	defer t.Stop()
	var cdw [64]byte
	nvme.SQE(cdw[:]).SetOpcode(uint8(nvme.AdminKeepAlive))
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-t.C:
		}
		if a.tbkas && c.compSeen.Swap(false) {
			t.Reset(period)
			continue
		}
		start := time.Now()
		_, err := c.adminExec(a.ctx, a, &cdw, nil, fabrics.DirNone, "Keep Alive", waitOpts{timeout: a.kato, noAbort: true})
		if a.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.startRecovery(a, fmt.Errorf("keep-alive failed: %w", err))
			return
		}
		c.compSeen.Store(false)
		next := period - time.Since(start)
		if next < 0 {
			c.log.Warn("long keep-alive RTT", "rtt", time.Since(start))
			next = 0
		}
		t.Reset(next)
	}
}

// asyncEvents keeps one Asynchronous Event Request outstanding on slot s
// and handles the events it reports.
func (c *Controller) asyncEvents(a *assoc, s *cmdSlot) {
	defer a.wg.Done()
	var sqe [64]byte
	sq := nvme.SQE(sqe[:])
	sq.SetOpcode(uint8(nvme.AdminAsyncEventRequest))
	sq.SetFlags(byte(nvme.PSDTSGLMPTRAddress) << 6)
	if len(a.missed) > 0 {
		c.reportMissed(a.missed)
	}
	for {
		// No timeout: the controller answers when it has an event.
		s.prep(&sqe, nil, fabrics.DirNone, "Asynchronous Event Request", waitOpts{})
		if err := s.submit(); err != nil {
			return
		}
		if err := s.wait(a.ctx.Done(), a.ctx.Err); err != nil {
			return // abandoned: the queue's teardown frees the slot
		}
		if s.cmd.Err != nil {
			a.admin.put(s)
			return
		}
		cqe := nvme.CQE(s.cmd.CQE[:])
		if !cqe.Status().Success() {
			// nvme_complete_async_event: no new request after an error
			// (e.g. Abort SQ Deletion or AER limit exceeded).
			c.log.Debug("asynchronous event request failed", "status", cqe.Status())
			a.admin.put(s)
			return
		}
		c.handleEvent(a, nvme.AsyncEvent(cqe.DW0())) // the slot stays ours for the next request
	}
}

// handleEvent reacts to one asynchronous event (nvme_handle_aen_notice):
// a namespace attribute change re-reads the Changed Namespace List (which
// clears the event) and the namespaces. The user's callback runs last.
func (c *Controller) handleEvent(a *assoc, ev nvme.AsyncEvent) {
	c.log.Info("asynchronous event", "event", ev.String())
	out := AsyncEvent{Event: ev}
	if ev.Type() == nvme.AsyncEventNotice && ev.Info() == nvme.AsyncNoticeNamespaceChanged {
		buf := make([]byte, nvme.ChangedNSListLogSize)
		if err := c.getLogPage(a.ctx, a, nvme.LIDChangedNSList, nvme.NSIDAll, 0, false, buf); err != nil {
			c.log.Warn("reading the Changed Namespace List failed", "error", err)
		} else if ids, overflow, err := nvme.DecodeChangedNSList(buf); err == nil && !overflow {
			out.ChangedNSIDs = ids
		}
		if err := c.scan(a.ctx, a); err != nil {
			c.log.Warn("namespace rescan failed", "error", err)
		}
		c.notifyChange()
	}
	if ev.Type() == nvme.AsyncEventNotice && ev.Info() == nvme.AsyncNoticeANAChange {
		// nvme_handle_aen_notice: re-read the ANA log (which, read
		// without RAE, also clears the event).
		c.updateANA(a.ctx, a)
	}
	if f := c.opts.OnAsyncEvent; f != nil {
		f(out)
	}
}

// reportMissed tells the user of namespace changes a rescan after a reset
// or reconnect found, as the Namespace Attribute Changed notice the
// controller would have sent (AsyncEvent.Rescan set).
func (c *Controller) reportMissed(nsids []uint32) {
	c.log.Info("namespaces changed while disconnected", "nsids", nsids)
	c.notifyChange()
	if f := c.opts.OnAsyncEvent; f != nil {
		f(AsyncEvent{Event: nvme.AENNamespaceChanged, ChangedNSIDs: nsids, Rescan: true})
	}
}

// abort sends Abort for command cid of queue qid and reports whether the
// controller aborted it (DW0 bit 0 clear; Linux nvmet never does).
func (c *Controller) abort(a *assoc, qid, cid uint16, timeout time.Duration) (bool, error) {
	var cdw [64]byte
	s := nvme.SQE(cdw[:])
	s.SetOpcode(uint8(nvme.AdminAbort))
	ab := nvme.AbortCommand{SQE: s}
	ab.SetSQID(qid)
	ab.SetAbortCID(cid)
	cqe, err := c.adminExec(a.ctx, a, &cdw, nil, fabrics.DirNone, "Abort", waitOpts{timeout: timeout, noAbort: true})
	if err != nil {
		return false, err
	}
	return nvme.CQE(cqe[:]).DW0()&1 == 0, nil
}

// teardown stops association a's background work and closes its queues.
func (c *Controller) teardown(a *assoc) {
	a.stopANATT()
	a.downOnce.Do(func() {
		a.cancel()
		// The I/O queues close side by side, then the admin queue (as
		// nvme_rdma_teardown_io_queues comes first): a transport's close
		// may wait for a dead peer (fabrics/rdma: up to 5 s for the DREP)
		// before it fails the commands in flight, which a multipath path
		// then sends on another path. One after the other, the last
		// queue's commands waited that long once per queue (issue 24).
		var wg sync.WaitGroup
		for i := range a.io {
			if q := a.io[i].Load(); q != nil {
				wg.Go(func() {
					q.close()
					q.retire()
				})
			}
		}
		wg.Wait()
		if a.admin != nil {
			a.admin.close()
			a.admin.retire()
		}
	})
}

// startRecovery moves a live controller whose association a failed to
// resetting and starts reconnecting (nvme_rdma_error_recovery). It is
// called from transport goroutines and must not block.
func (c *Controller) startRecovery(a *assoc, reason error) {
	c.mu.Lock()
	if c.cur.Load() != a || State(c.state.Load()) != StateLive {
		c.mu.Unlock()
		return
	}
	c.leaveLive()
	c.mu.Unlock()
	c.stats.recoveries.Add(1)
	c.log.Error("controller failed, reconnecting", "reason", reason, "reconnect_delay", c.opts.ReconnectDelay)
	go c.reconnect(a)
}

// reconnect tears association a down and reconnects every ReconnectDelay
// until it succeeds, CtrlLossTimeout expires (nvmf_should_reconnect), the
// target refuses the host with DNR, or Disconnect is called.
func (c *Controller) reconnect(a *assoc) {
	defer c.recovery.Done()
	c.teardown(a)
	a.wg.Wait()
	maxRec := c.opts.maxReconnects()
	t := time.NewTimer(c.opts.ReconnectDelay)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-c.closing:
			return
		case <-t.C:
		}
		c.state.CompareAndSwap(int32(StateResetting), int32(StateConnecting))
		na, err := c.reassociate(context.Background(), "reconnect")
		if err == nil {
			if !c.goLive(na) {
				return
			}
			c.stats.reconnects.Add(1)
			c.log.Info("reconnected", "attempt", n, "cntlid", na.cntlid, "io_queues", len(na.io))
			return
		}
		select {
		case <-c.closing:
			return
		default:
		}
		var ce *ConnectError
		permanent := errors.As(err, &ce) && ce.Err.DNR
		c.stats.recFails.Add(1)
		c.log.Warn("reconnect failed", "attempt", n, "max", maxRec, "error", err)
		if permanent || (maxRec >= 0 && n >= maxRec) {
			c.end(StateDead, fmt.Errorf("initiator: %s: %w (last error: %v)", c.addr, ErrControllerLost, err))
			c.log.Error("giving up on the controller", "attempts", n)
			return
		}
		t.Reset(c.opts.ReconnectDelay)
	}
}

// end moves the controller to a final state and releases every waiter.
func (c *Controller) end(s State, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	c.ended = true
	c.state.Store(int32(s))
	c.endErr = err
	close(c.endCh)
	c.disarmFailFast()
	c.notifyChange()
}

// waitLive waits until the controller is live, or returns why it never
// will be.
func (c *Controller) waitLive(ctxDone <-chan struct{}, ctxErr func() error) error {
	for {
		if State(c.state.Load()) == StateLive {
			return nil
		}
		c.mu.Lock()
		st, live, end, endErr := State(c.state.Load()), c.liveCh, c.endCh, c.endErr
		c.mu.Unlock()
		switch st {
		case StateLive:
			return nil
		case StateDead, StateDeleted:
			return endErr
		case StateDeleting:
			return fmt.Errorf("initiator: %s: %w", c.addr, ErrClosed)
		}
		failed, expired := c.failFastState()
		if expired {
			return fmt.Errorf("initiator: %s: %w", c.addr, ErrFastIOFail)
		}
		select {
		case <-failed:
		case <-live:
		case <-end:
		case <-c.closing:
		case <-ctxDone:
			return ctxErr()
		}
	}
}

// liveAssoc returns the current association once the controller is live.
func (c *Controller) liveAssoc(ctx context.Context) (*assoc, error) {
	if err := c.waitLive(ctx.Done(), ctx.Err); err != nil {
		return nil, err
	}
	return c.cur.Load(), nil
}

// resetIOQueue closes I/O queue q at once (so that no late completion
// touches the buffers of commands that timed out) and connects a new queue
// with the same QID in its place in the background; if that fails the
// whole association is recovered.
func (c *Controller) resetIOQueue(q *queue, reason error) {
	a := q.a
	idx := int(q.qid) - 1
	if idx < 0 || idx >= len(a.io) || a.io[idx].Load() != q || a.ctx.Err() != nil {
		return
	}
	if c.cur.Load() != a || State(c.state.Load()) != StateLive {
		return // the association is being recovered: its teardown closes q
	}
	if !q.resetting.CompareAndSwap(false, true) {
		return
	}
	c.stats.queueResets.Add(1)
	c.log.Warn("resetting I/O queue", "qid", q.qid, "reason", reason)
	q.close()
	go c.replaceIOQueue(a, idx, q)
}

// replaceIOQueue connects a new I/O queue in the place of q, which has
// been closed.
func (c *Controller) replaceIOQueue(a *assoc, idx int, q *queue) {
	var nq *queue
	var err error
	for attempt := range 3 {
		ctx, cancel := context.WithTimeout(a.ctx, c.opts.CommandTimeout)
		nq, err = c.connectIOQueue(ctx, a, q.qid)
		cancel()
		if err == nil || a.ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
	if err != nil {
		c.startRecovery(a, fmt.Errorf("reset of queue %d failed: %w", q.qid, err))
		q.retire()
		return
	}
	a.io[idx].Store(nq)
	q.retire()
	if a.ctx.Err() != nil {
		nq.close()
		nq.retire()
		return
	}
	c.log.Info("I/O queue reconnected", "qid", q.qid)
}
