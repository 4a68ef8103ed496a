package target

import (
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// checkLen completes r with Data SGL Length Invalid unless the host's
// buffer is exactly want bytes (Linux nvmet_check_transfer_len).
func (q *queue) checkLen(r *fabrics.Request, want int) bool {
	if len(r.Data) != want {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return false
	}
	return true
}

// handleAdmin runs an admin command of the NVMe command set. Everything
// here works on memory and never blocks, except what it hands to a
// goroutine (SMART data from a disk).
func (c *controller) handleAdmin(q *queue, r *fabrics.Request) {
	if !c.ready() {
		c.log.Debug("admin command while not ready", "opcode", r.SQE[0])
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locOpcode, 0)
		return
	}
	op := nvme.AdminOpcode(r.SQE[0])
	switch {
	case c.subsys.disc && op == nvme.AdminAbort:
		// A discovery controller runs the same commands but Abort (Linux
		// nvmet_parse_discovery_cmd).
		q.complete(r, dnr(nvme.StatusInvalidOpcode), locOpcode, 0)
	case op == nvme.AdminGetLogPage:
		c.getLogPage(q, r)
	case op == nvme.AdminIdentify:
		c.identify(q, r)
	case op == nvme.AdminAbort:
		c.abort(q, r)
	case op == nvme.AdminSetFeatures:
		c.setFeatures(q, r)
	case op == nvme.AdminGetFeatures:
		c.getFeatures(q, r)
	case op == nvme.AdminAsyncEventRequest:
		c.asyncEventRequest(q, r)
	case op == nvme.AdminKeepAlive:
		c.keepAlive(q, r)
	default:
		q.complete(r, dnr(nvme.StatusInvalidOpcode), locOpcode, 0)
	}
}

// abort answers Abort as Linux does: nothing is aborted (DW0 bit 0 set).
func (c *controller) abort(q *queue, r *fabrics.Request) {
	if !q.checkLen(r, 0) {
		return
	}
	nvme.CQE(r.CQE[:]).SetDW0(1)
	q.ok(r)
}

// keepAlive restarts the keep-alive timer.
func (c *controller) keepAlive(q *queue, r *fabrics.Request) {
	if !q.checkLen(r, 0) {
		return
	}
	c.mu.Lock()
	if c.kato == 0 {
		c.mu.Unlock()
		q.complete(r, st(nvme.StatusKeepAliveTimeoutInvalid), noLoc, 0)
		return
	}
	c.startKALocked()
	c.mu.Unlock()
	q.ok(r)
}

// asyncEventRequest queues an AER until an event completes it.
func (c *controller) asyncEventRequest(q *queue, r *fabrics.Request) {
	if !q.checkLen(r, 0) {
		return
	}
	c.mu.Lock()
	if len(c.aers) >= asyncEvents {
		c.mu.Unlock()
		q.complete(r, dnr(nvme.StatusAsyncEventRequestLimitExceeded), noLoc, 0)
		return
	}
	c.aers = append(c.aers, pendingAER{q: q, r: r})
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}
