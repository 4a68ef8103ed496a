package initiator

import (
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Poll runs, on the caller's goroutine, the completions that have arrived
// on the controller's I/O queues, where the transport can be driven that
// way (fabrics.Poller: RDMA over rdma/soft or rdma/ibverbs), and reports
// whether it found any. It never blocks. A caller that waits for its own
// I/Os (fio's completion loop, a block device's queue) may spin on it for
// a short window before it sleeps: the completion then runs on its thread
// instead of waking the provider's goroutine and, from there, the caller.
func (c *Controller) Poll() bool {
	a := c.cur.Load()
	if a == nil {
		return false
	}
	got := false
	for i := range a.io {
		q := a.io[i].Load()
		if q == nil {
			continue
		}
		if p, ok := q.hq.(fabrics.Poller); ok && p.Poll() {
			got = true
		}
	}
	return got
}

// PollWait is Poll that, when nothing has completed, sleeps for up to d
// until the controller's traffic arrives and polls again
// (fabrics.WaitPoller). It waits only when the controller has one I/O
// queue that can (the soft provider); otherwise it is Poll.
func (c *Controller) PollWait(d time.Duration) bool {
	if wp := c.waitPoller(); wp != nil {
		return wp.PollWait(d)
	}
	return c.Poll()
}

// waitPoller returns the controller's I/O queue when it has exactly one
// and it is a fabrics.WaitPoller, else nil.
func (c *Controller) waitPoller() fabrics.WaitPoller {
	a := c.cur.Load()
	if a == nil {
		return nil
	}
	var wp fabrics.WaitPoller
	for i := range a.io {
		q := a.io[i].Load()
		if q == nil {
			continue
		}
		p, ok := q.hq.(fabrics.WaitPoller)
		if !ok || wp != nil {
			return nil
		}
		wp = p
	}
	return wp
}

// CanPollWait reports whether PollWait can sleep: whether the controller
// has one I/O queue and its transport can wait for its traffic.
func (c *Controller) CanPollWait() bool {
	wp := c.waitPoller()
	return wp != nil && wp.CanWait()
}

// PollDone ends a caller's polling of the controller's I/O queues before
// it sleeps: their completions are run by the transport's goroutines again
// (fabrics.Poller). A caller that spins on Poll and then waits for a
// completion must call it before it waits.
func (c *Controller) PollDone() {
	a := c.cur.Load()
	if a == nil {
		return
	}
	for i := range a.io {
		if q := a.io[i].Load(); q != nil {
			if p, ok := q.hq.(fabrics.Poller); ok {
				p.PollDone()
			}
		}
	}
}

// CanPoll reports whether Poll can find completions: whether some I/O
// queue's transport can be driven on the caller's goroutine. A caller
// should not spin on a controller that cannot.
func (c *Controller) CanPoll() bool {
	a := c.cur.Load()
	if a == nil {
		return false
	}
	for i := range a.io {
		if q := a.io[i].Load(); q != nil {
			if p, ok := q.hq.(fabrics.Poller); ok && p.CanPoll() {
				return true
			}
		}
	}
	return false
}

// Plug holds the commands the caller submits to the controller's I/O
// queues until Unplug, which sends each queue's commands together (one
// doorbell, one UDP send on the soft provider, per queue) where the
// transport can (fabrics.Plugger). Commands submitted by others meanwhile
// wait for the Unplug too: the caller must unplug before it waits for
// completions.
func (c *Controller) Plug() {
	a := c.cur.Load()
	if a == nil {
		return
	}
	c.plugMu.Lock()
	defer c.plugMu.Unlock()
	if len(c.plugged) > 0 {
		return
	}
	for i := range a.io {
		if q := a.io[i].Load(); q != nil {
			if p, ok := q.hq.(fabrics.Plugger); ok {
				p.Plug()
				c.plugged = append(c.plugged, p)
			}
		}
	}
}

// Unplug sends the commands held since Plug, on the queues Plug plugged
// (also those a reconnect has replaced since).
func (c *Controller) Unplug() {
	c.plugMu.Lock()
	defer c.plugMu.Unlock()
	for _, p := range c.plugged {
		p.Unplug()
	}
	clear(c.plugged)
	c.plugged = c.plugged[:0]
}

// Plug is the controller's Plug (Controller.Plug).
func (ns *Namespace) Plug() { ns.c.Plug() }

// Unplug is the controller's Unplug (Controller.Unplug).
func (ns *Namespace) Unplug() { ns.c.Unplug() }

// Poll is the controller's Poll (Controller.Poll).
func (ns *Namespace) Poll() bool { return ns.c.Poll() }

// PollWait is the controller's PollWait (Controller.PollWait).
func (ns *Namespace) PollWait(d time.Duration) bool { return ns.c.PollWait(d) }

// CanPollWait is the controller's CanPollWait (Controller.CanPollWait).
func (ns *Namespace) CanPollWait() bool { return ns.c.CanPollWait() }

// PollDone is the controller's PollDone (Controller.PollDone).
func (ns *Namespace) PollDone() { ns.c.PollDone() }

// CanPoll is the controller's CanPoll (Controller.CanPoll).
func (ns *Namespace) CanPoll() bool { return ns.c.CanPoll() }
