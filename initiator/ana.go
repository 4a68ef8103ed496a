package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// Asymmetric Namespace Access on the host (Linux drivers/nvme/host/
// multipath.c: nvme_read_ana_log, nvme_update_ana_state): a controller
// that reports ANA (CMIC bit 3) has its ANA log page (LID 0Ch) read after
// every (re)connect, on the ANA Change notice and after an I/O completed
// with an ANA status; each namespace keeps its group's state for the
// multipath path selection (multipath.go). A controller without ANA
// reporting counts as optimized.

// maxANALogSize bounds the ANA log page the host reads (Linux refuses a
// log larger than the controller's transfer size; this bounds memory).
const maxANALogSize = 1 << 20

// anaReadTimeout bounds one read of the ANA log page in the background.
const anaReadTimeout = 10 * time.Second

// anaInfo is the last ANA log page read from a controller.
type anaInfo struct {
	log    nvme.ANALog
	groups map[uint32]nvme.ANAState // by ANAGRPID
	nsids  map[uint32]nvme.ANAState // by NSID, for logs that list them
	read   time.Time
}

// stateOf returns the ANA state of namespace nsid in group grpid.
func (ai *anaInfo) stateOf(nsid, grpid uint32) nvme.ANAState {
	if s, ok := ai.nsids[nsid]; ok {
		return s
	}
	if s, ok := ai.groups[grpid]; ok && grpid != 0 {
		return s
	}
	// A namespace in no group the controller reports cannot be reached
	// through it.
	return nvme.ANAInaccessible
}

// anaSupported reports whether association a's controller reports ANA.
func anaSupported(a *assoc) bool {
	return len(a.id) > 0 && a.id.CMIC()&nvme.CMICANAReporting != 0
}

// anaLogSize is the size of the ANA log page of association a's
// controller: the header, NANAGRPID group descriptors and an NSID per
// namespace (Linux nvme_mpath_init_identify: MNAN, else NN).
func anaLogSize(a *assoc) int {
	ngrps := uint64(a.id.NANAGRPID())
	nns := uint64(a.id.MNAN())
	if nns == 0 {
		nns = uint64(a.id.NN())
	}
	n := uint64(nvme.ANALogHeaderSize) + ngrps*nvme.ANAGroupHeaderSize + nns*4
	if n > maxANALogSize {
		n = maxANALogSize
	}
	return int(n+3) &^ 3
}

// readANA reads the ANA log page of association a and applies it to the
// namespaces. A controller without ANA reporting clears the host's ANA
// state (every namespace optimized).
func (c *Controller) readANA(ctx context.Context, a *assoc) error {
	if !anaSupported(a) {
		c.ana.Store(nil)
		c.anaPending.Store(false)
		c.applyANA()
		return nil
	}
	buf := make([]byte, anaLogSize(a))
	if err := c.getLogPage(ctx, a, nvme.LIDANA, 0, 0, false, buf); err != nil {
		return fmt.Errorf("initiator: reading the ANA log: %w", err)
	}
	l, err := nvme.DecodeANALog(buf)
	if err != nil {
		return fmt.Errorf("initiator: ANA log: %w", err)
	}
	ai := &anaInfo{log: l, groups: make(map[uint32]nvme.ANAState, len(l.Groups)), nsids: map[uint32]nvme.ANAState{}, read: time.Now()}
	for _, g := range l.Groups {
		ai.groups[g.GroupID] = g.State
		for _, id := range g.NSIDs {
			ai.nsids[id] = g.State
		}
	}
	old := c.ana.Load()
	c.ana.Store(ai)
	c.anaPending.Store(false)
	for _, g := range l.Groups {
		if old == nil || old.groups[g.GroupID] != g.State {
			c.log.Info("ANA state", "anagrpid", g.GroupID, "state", g.State.String(), "chgcnt", g.ChangeCount)
		}
	}
	c.applyANA()
	c.updateANATT(a, l)
	return nil
}

// updateANA reads the ANA log and logs a failure: the path then stays
// pending (not used while another is) until a later read succeeds.
func (c *Controller) updateANA(ctx context.Context, a *assoc) {
	if err := c.readANA(ctx, a); err != nil {
		c.anaPending.Store(true)
		c.log.Warn("ANA log not read", "error", err)
		c.notifyChange()
	}
}

// requestANA marks the controller's ANA state stale after an ANA status
// and re-reads the log in the background (nvme_failover_req setting
// NVME_NS_ANA_PENDING and queueing ana_work). Nothing happens for a
// controller without ANA reporting.
func (c *Controller) requestANA() {
	a := c.cur.Load()
	if a == nil || !anaSupported(a) || !c.anaPending.CompareAndSwap(false, true) {
		return
	}
	c.notifyChange()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), anaReadTimeout)
		defer cancel()
		a, err := c.liveAssoc(ctx)
		if err != nil {
			return // a reconnect reads the log again
		}
		c.updateANA(ctx, a)
	}()
}

// applyANA copies the controller's ANA state into each namespace and tells
// the multipath layer.
func (c *Controller) applyANA() {
	ai := c.ana.Load()
	c.nsMu.Lock()
	for _, ns := range c.ns {
		ns.setANA(ai)
	}
	c.nsMu.Unlock()
	c.notifyChange()
}

// setANA sets the namespace's ANA state from ai (nil: no ANA reporting).
func (ns *Namespace) setANA(ai *anaInfo) {
	if ai == nil {
		ns.ana.Store(uint32(nvme.ANAOptimized))
		return
	}
	var grp uint32
	if info := ns.info.Load(); info != nil && len(info.id) > 0 {
		grp = info.id.ANAGRPID()
	}
	ns.ana.Store(uint32(ai.stateOf(ns.nsid, grp)))
}

// ANAState returns the namespace's Asymmetric Namespace Access state
// through its controller as last read from the ANA log page; optimized
// for a controller that does not report ANA.
func (ns *Namespace) ANAState() nvme.ANAState { return nvme.ANAState(ns.ana.Load()) }

// ANAGroupID returns the namespace's ANA group (ANAGRPID; 0 if none).
func (ns *Namespace) ANAGroupID() uint32 {
	if info := ns.info.Load(); info != nil && len(info.id) > 0 {
		return info.id.ANAGRPID()
	}
	return 0
}

// ANALog returns the ANA log page last read from the controller, and
// false when the controller does not report ANA (or it was never read).
func (c *Controller) ANALog() (nvme.ANALog, bool) {
	ai := c.ana.Load()
	if ai == nil {
		return nvme.ANALog{}, false
	}
	return ai.log, true
}

// ANAReporting reports whether the controller reports Asymmetric
// Namespace Access (Identify Controller CMIC bit 3).
func (c *Controller) ANAReporting() bool {
	a := c.cur.Load()
	return a != nil && anaSupported(a)
}

// setOnChange sets the function called when the controller's state,
// namespaces or ANA states change (the multipath layer's hook).
func (c *Controller) setOnChange(f func()) {
	if f == nil {
		c.onChange.Store(nil)
		return
	}
	c.onChange.Store(&f)
}

// notifyChange calls the change hook, if any. It must not block.
func (c *Controller) notifyChange() {
	if f := c.onChange.Load(); f != nil {
		(*f)()
	}
}

// isANAError reports an ANA status (Linux nvme_is_ana_error).
func isANAError(st nvme.Status) bool {
	switch st {
	case nvme.StatusANAPersistentLoss, nvme.StatusANAInaccessible, nvme.StatusANATransition:
		return true
	}
	return false
}

// errPathDown is how a command of a controller used as a multipath path
// ends when the path cannot carry it (the controller is not live or the
// command's queue went away): the multipath layer sends it on another
// path. A package variable so that no error is allocated for it.
var errPathDown = errors.New("path down")

// pathFailure reports whether a command that ended with err on this
// controller must be sent on another path (Linux nvme_decide_disposition
// and nvme_failover_req): the path is down or went away under it, it
// timed out, or the controller answered with a path-related status
// (SCT 3) without DNR. An ANA status also requests an ANA log read.
func (c *Controller) pathFailure(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errPathDown) || isReset(err) || errors.Is(err, ErrTimeout) ||
		errors.Is(err, ErrControllerLost) || errors.Is(err, ErrClosed) || errors.Is(err, ErrFastIOFail) ||
		errors.Is(err, ErrNoNamespace) {
		return true
	}
	var ce *CommandError
	if errors.As(err, &ce) && ce.Err != nil && ce.Err.Status.SCT() == nvme.SCTPathRelated && !ce.Err.DNR {
		if isANAError(ce.Err.Status) {
			c.requestANA()
		}
		return true
	}
	return false
}
