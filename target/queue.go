package target

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// queue serves one transport queue: it is the fabrics.CommandHandler the
// transport delivers the queue's commands to.
type queue struct {
	t    *Target
	port *Port
	tq   fabrics.TargetQueue
	log  hclog.Logger
	// trace: log every command and completion (log level trace when the
	// queue was made; trace.go).
	trace bool

	// Set by a successful Connect, before ctrl is published; read-only
	// afterwards.
	qid     uint16
	size    uint32 // SQ entries (SQSIZE + 1)
	sqhdOff bool   // SQ flow control disabled (Connect CATTR bit 2)

	ctrl atomic.Pointer[controller]
	sqhd atomic.Uint32
	auth atomic.Pointer[queueAuth] // nil: no authentication on this queue (auth.go)

	freeMu   sync.Mutex
	free     []*ioCmd
	inflight atomic.Int32 // I/O commands handed to the backend (stats.go)

	// inline runs the I/O of non-blocking backends on the transport's
	// goroutine, which delivers this queue's commands one at a time.
	inline worker
	// gather: the transport sends a READ's data from the backend's own
	// memory (fabrics.GatherSender).
	gather bool
}

var _ fabrics.CommandHandler = (*queue)(nil)

func newQueue(p *Port, tq fabrics.TargetQueue) *queue {
	log := p.t.log.With("port", p.id)
	q := &queue{t: p.t, port: p, tq: tq, log: log, trace: log.IsTrace()}
	if g, ok := tq.(fabrics.GatherSender); ok {
		q.gather = g.SendsGather()
	}
	return q
}

// Parameter error locations (byte offsets in the SQE, for the Error
// Information log page; Linux req->error_loc).
const (
	locOpcode  = 0
	locFlags   = 1
	locFCType  = 4 // Fabrics commands
	locNSID    = 4
	locDPTR    = 24
	locCDW10   = 40
	locCDW11   = 44
	locSLBA    = 40 // Read, Write, Compare, Write Zeroes
	locLength  = 48 // NLB
	locLPO     = 48 // Get Log Page offset
	locRecFmt  = fabrics.ConnectOffRecFmt
	locQID     = fabrics.ConnectOffQID
	locSQSize  = fabrics.ConnectOffSQSize
	locAttrib  = 40 // Property Get/Set
	locPropOff = 44
	noLoc      = 0xffff
)

// Commands complete with an nvme.Error value (its zero value is success):
// passed by value, never as an error interface, it costs no allocation.
// dnr returns s with Do Not Retry; st returns s without.
func dnr(s nvme.Status) nvme.Error { return nvme.Error{Status: s, DNR: true} }
func st(s nvme.Status) nvme.Error  { return nvme.Error{Status: s} }

// HandleCommand implements fabrics.CommandHandler. It does not wait for
// a backend that may block: admin commands run here, and so does the I/O
// of a backend that never blocks (bdev.NonBlocking); an asynchronous
// backend's I/O starts here without waiting (bdev.Async); other I/O goes
// to the namespace's workers (namespace.submit).
func (q *queue) HandleCommand(r *fabrics.Request) {
	// The transport owns CID and SQID (bytes 13:10); the rest is ours.
	clear(r.CQE[:10])
	r.CQE[14], r.CQE[15] = 0, 0
	if q.trace {
		q.traceCommand(r)
	}

	if r.Refused.Status != 0 {
		// The transport could not carry the command out (a bad SGL).
		q.complete(r, r.Refused, locDPTR, 0)
		return
	}
	c := q.ctrl.Load()
	if c == nil {
		q.handleUnconnected(r)
		return
	}
	if q.authOK() {
		// Only a queue that may act for the controller keeps it alive.
		c.touch()
	}
	if nvme.SQE(r.SQE[:]).Fuse() != nvme.FuseNone {
		// No fused operations (Linux nvmet_req_init).
		q.complete(r, dnr(nvme.StatusInvalidField), locFlags, 0)
		return
	}
	if q.authBlocks(r) {
		return
	}
	if r.SQE[0] == fabrics.OpcodeFabrics {
		c.handleFabrics(q, r)
		return
	}
	if q.qid == 0 {
		c.handleAdmin(q, r)
		return
	}
	c.handleIO(q, r)
}

// QueueClosed implements fabrics.CommandHandler.
func (q *queue) QueueClosed(err error) {
	q.port.detach(q)
	c := q.ctrl.Load()
	if c == nil {
		q.log.Debug("unconnected queue closed", "err", err)
		return
	}
	q.authQueueClosed(c)
	if q.qid == 0 {
		// q is gone already: shutdown must not Close it again, as this
		// runs on the transport's teardown of q, and a transport's Close
		// may wait for that teardown to finish (fabrics/rdma does).
		c.mu.Lock()
		if c.queues[0] == q {
			c.queues[0] = nil
		}
		c.mu.Unlock()
		c.shutdown("admin queue closed")
		return
	}
	held := c.ioQueueClosed(q)
	if err != nil && !errors.Is(err, fabrics.ErrQueueClosed) && held {
		// The transport lost the queue (a host gone, the RC retries
		// exhausted): as Linux nvmet_rdma_error_comp, a fatal error of
		// the controller, which goes with its other queues. Otherwise a
		// host without keep-alive (KATO 0) that vanished would leave its
		// controller and admin queue behind for good. Not for a queue
		// that never authenticated: its peer may not be the host.
		c.fatal(fmt.Sprintf("I/O queue %d lost: %v", q.qid, err))
	}
}

// advanceSQHD moves the SQ head pointer past one command and returns it
// (Linux nvmet_update_sq_head: per completion, modulo the queue size).
func (q *queue) advanceSQHD() uint32 {
	for {
		old := q.sqhd.Load()
		n := (old + 1) % q.size
		if q.sqhd.CompareAndSwap(old, n) {
			return n
		}
	}
}

// complete finishes r with status s (the zero value is success): it sets SQHD and the
// status, records an error in the controller's Error Information log, and
// hands r back to the transport. loc is the parameter error location and
// lba the LBA the error concerns.
func (q *queue) complete(r *fabrics.Request, s nvme.Error, loc uint16, lba uint64) {
	q.completeCounted(r, s, loc, lba, true)
}

// completeCounted is complete; count false leaves an error status out of
// the statistics and the error log (an AER failed at teardown).
func (q *queue) completeCounted(r *fabrics.Request, s nvme.Error, loc uint16, lba uint64, count bool) {
	q.settle(r, s, loc, lba, count)
	r.Complete()
}

// settle is complete without the hand-back to the transport: the CQE and
// the accounting (io.go batches the hand-back of a backend's pass).
func (q *queue) settle(r *fabrics.Request, s nvme.Error, loc uint16, lba uint64, count bool) {
	cqe := nvme.CQE(r.CQE[:])
	if !q.sqhdOff && q.size != 0 {
		cqe.SetSQHD(uint16(q.advanceSQHD()))
	}
	if !s.Status.Success() {
		cqe.SetStatusRaw(0)
		cqe.SetStatus(s.Status)
		cqe.SetDNR(s.DNR)
		if c := q.ctrl.Load(); c != nil && count {
			c.subsys.stats.status[s.Status&0x7ff].Add(1)
			if q.qid == 0 || q.authOK() {
				// An I/O queue not yet authenticated may be a peer
				// without the key: it does not write the host's log.
				c.logError(q.qid, r, cqe.StatusRaw(), loc, lba)
				cqe.SetMore(true)
			}
		}
	}
	if c := q.ctrl.Load(); c != nil && q.authOK() {
		// A completion is traffic too: the host's Traffic Based Keep
		// Alive skips Keep Alive on completions it sees, which may be
		// of commands that arrived before the timer was last armed.
		c.touch()
	}
	if q.trace {
		q.traceCompletion(r, s)
	}
}

// ok completes r successfully.
func (q *queue) ok(r *fabrics.Request) { q.complete(r, nvme.Error{}, noLoc, 0) }

// getCmd takes an I/O command context from the queue's free list.
func (q *queue) getCmd() *ioCmd {
	q.freeMu.Lock()
	n := len(q.free)
	if n == 0 {
		q.freeMu.Unlock()
		return &ioCmd{q: q}
	}
	c := q.free[n-1]
	q.free = q.free[:n-1]
	q.freeMu.Unlock()
	return c
}

func (q *queue) putCmd(c *ioCmd) {
	*c = ioCmd{q: q}
	q.freeMu.Lock()
	q.free = append(q.free, c)
	q.freeMu.Unlock()
}

// preallocate fills the free list for a queue of depth commands.
func (q *queue) preallocate(depth int) {
	depth = min(max(depth, 1), 4096)
	cmds := make([]ioCmd, depth)
	q.freeMu.Lock()
	q.free = make([]*ioCmd, 0, depth)
	for i := range cmds {
		cmds[i].q = q
		q.free = append(q.free, &cmds[i])
	}
	q.freeMu.Unlock()
}
