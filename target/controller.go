package target

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Controller limits and constants, as Linux nvmet has them.
const (
	asyncEvents    = 4   // outstanding AERs (Linux NVMET_ASYNC_EVENTS; AERL = 3)
	errLogSlots    = 128 // Error Information log entries (Linux NVMET_ERROR_LOG_SLOTS)
	maxChangedNS   = 1024
	kasUnits       = 10 // KAS: keep-alive granularity in 100 ms units (1 s, Linux NVMET_KAS)
	discAQDepth    = 32 // ASQSZ of discovery log entries (Linux NVME_AQ_DEPTH)
	capTimeout     = 15 // CAP.TO in 500 ms units (Linux)
	featureEXHID   = 1  // Host Identifier: 128-bit
	hostIDFeatSize = 16
)

// Asynchronous event configuration bits (Set Features 0Bh) and the event
// bit numbers Linux masks them with (NVME_AEN_BIT_*).
const (
	aenBitNSAttr   = 8
	aenBitANA      = 11
	aenBitDisc     = 31
	aenCfgSMART    = 0xff // SMART / Health critical warnings
	aenCfgOptional = 1<<aenBitNSAttr | 1<<aenBitANA
	aenCfgAll      = aenCfgSMART | aenCfgOptional
	aenCfgDisc     = 1 << aenBitDisc
)

// Asynchronous event completion dword 0 (type | info<<8 | log page<<16).
const (
	aerTypeNotice   = 2
	aerInfoNSChange = 0x00
	aerInfoDisc     = 0xf0
	logChangedNS    = 0x04
)

// controller is a dynamic controller a host created with an admin Connect.
type controller struct {
	t       *Target
	subsys  *Subsystem
	port    *Port
	cntlid  uint16
	hostNQN string
	hostID  [16]byte
	log     hclog.Logger
	// needAuth: the host has a DH-HMAC-CHAP key, every queue must
	// authenticate (decided at the admin Connect; auth.go).
	needAuth bool

	cap       fabrics.CAP
	mqes      uint16
	mdts      uint8 // Identify MDTS (0: no limit)
	maxXfer   int   // MDTS in bytes (0: no limit)
	maxIOQs   uint16
	created   time.Time
	readyFlag atomic.Bool // CC.EN = 1 and CSTS.RDY = 1
	traffic   atomic.Bool // a command since the keep-alive timer was armed (TBKAS)
	vwc       atomic.Bool // volatile write cache enabled (Set Features 06h)

	mu      sync.Mutex
	dead    bool
	cc      fabrics.CC
	csts    fabrics.CSTS
	kato    time.Duration // 0: keep-alive off
	kaTimer *time.Timer
	kaLast  time.Time
	queues  []*queue // by QID: the admin queue, and I/O queues that need no authentication or have authenticated
	// pending holds the I/O queues connected but not yet authenticated:
	// they hold no QID, so a peer without the key that connects one
	// keeps the host from nothing (installIOQueue).
	pending  map[*queue]struct{}
	grantedQ uint16 // I/O queues granted by Set Features 07h (0: not set)
	aen      uint32 // Asynchronous Event Configuration
	aenMask  uint32 // event kinds sent and not yet cleared by a log read
	aers     []pendingAER
	events   []uint32
	changed  []uint32 // Changed Namespace List; nil with changedOverflow
	overflow bool
	errCount uint64
	errLog   [errLogSlots][nvme.ErrorLogEntrySize]byte
	arb      uint32   // Arbitration feature value
	power    uint32   // Power Management feature value
	resv     ctrlResv // reservation notifications (reservation.go)
}

type pendingAER struct {
	q *queue
	r *fabrics.Request
}

func (c *controller) ready() bool { return c.readyFlag.Load() }

// touch records traffic for traffic-based keep-alive (Linux reset_tbkas).
func (c *controller) touch() {
	if !c.traffic.Load() {
		c.traffic.Store(true)
	}
}

// grantedIOQueues returns how many I/O queues the host may connect (c.mu
// held).
func (c *controller) grantedIOQueuesLocked() uint16 {
	if c.grantedQ != 0 {
		return c.grantedQ
	}
	return c.maxIOQs
}

// mdtsFor returns MDTS (log2 of 4 KiB pages) for a maximum transfer.
func mdtsFor(maxXfer int) uint8 {
	if maxXfer <= 0 {
		return 0
	}
	pages := maxXfer / 4096
	if pages <= 1 {
		// MDTS cannot say 4 KiB (0 means no limit): report the smallest
		// limit, 8 KiB; the transport refuses what it cannot carry.
		return 1
	}
	return uint8(min(bits.Len(uint(pages))-1, 255))
}

// startKALocked (re)arms the keep-alive timer (c.mu held).
func (c *controller) startKALocked() {
	if c.kato == 0 {
		if c.kaTimer != nil {
			c.kaTimer.Stop()
		}
		return
	}
	c.kaLast = time.Now()
	c.traffic.Store(false)
	if c.kaTimer == nil {
		c.kaTimer = time.AfterFunc(c.kato, c.keepAliveExpired)
		return
	}
	c.kaTimer.Reset(c.kato)
}

// keepAliveExpired runs when the keep-alive timer fires: traffic since it
// was armed re-arms it (TBKAS), else the controller is torn down.
func (c *controller) keepAliveExpired() {
	c.mu.Lock()
	if c.dead || c.kato == 0 {
		c.mu.Unlock()
		return
	}
	if c.traffic.Swap(false) {
		c.kaLast = time.Now()
		c.kaTimer.Reset(c.kato)
		c.mu.Unlock()
		return
	}
	if rem := c.kato - time.Since(c.kaLast); rem > 0 {
		c.kaTimer.Reset(rem)
		c.mu.Unlock()
		return
	}
	c.csts |= fabrics.CSTSCFS
	c.readyFlag.Store(false)
	kato := c.kato
	c.mu.Unlock()
	c.subsys.stats.kaTimeouts.Add(1)
	c.log.Error("keep-alive timer expired", "kato", kato)
	c.shutdown("keep-alive timeout")
}

// setKATO sets the keep-alive timeout from milliseconds, rounded up to
// seconds as Linux does (c.mu held). It returns the value in seconds.
func (c *controller) setKATOLocked(ms uint32) uint32 {
	secs := (uint64(ms) + 999) / 1000
	c.kato = time.Duration(secs) * time.Second
	c.startKALocked()
	return uint32(secs)
}

// shutdown tears the controller down: its queues are closed, outstanding
// AERs fail, and its controller ID is freed. It is idempotent.
func (c *controller) shutdown(reason string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.readyFlag.Store(false)
	if c.kaTimer != nil {
		c.kaTimer.Stop()
	}
	var qs []*queue
	for _, q := range c.queues {
		if q != nil {
			qs = append(qs, q)
		}
	}
	for q := range c.pending {
		qs = append(qs, q)
	}
	c.pending = nil
	aers := c.aers
	c.aers = nil
	c.mu.Unlock()
	c.subsys.stats.ctrlRemoved.Add(1)

	c.t.mu.Lock()
	if c.subsys.ctrls[c.cntlid] == c {
		delete(c.subsys.ctrls, c.cntlid)
	}
	c.t.mu.Unlock()

	for _, q := range qs {
		q.tq.Close()
	}
	// As Linux (nvmet_async_events_failall), AERs fail once their queue
	// is going away: the transport completes them towards nobody. Every
	// clean disconnect does this, so they are counted apart from errors.
	for _, a := range aers {
		c.subsys.stats.aersAborted.Add(1)
		a.q.completeCounted(a.r, dnr(nvme.StatusInternalError), noLoc, 0, false)
	}
	c.log.Info("controller removed", "reason", reason)
}

// fatal sets CSTS.CFS and tears the controller down (Linux
// nvmet_ctrl_fatal_error); a controller torn down already is left alone
// (its other queues, lost together, each report it).
func (c *controller) fatal(reason string) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.csts |= fabrics.CSTSCFS
	c.mu.Unlock()
	c.log.Error("controller fatal error", "reason", reason)
	c.shutdown(reason)
}

// ioQueueClosed forgets an I/O queue the transport closed. It reports
// whether the queue held its QID (it was not waiting to authenticate).
func (c *controller) ioQueueClosed(q *queue) bool {
	c.mu.Lock()
	held := int(q.qid) < len(c.queues) && c.queues[q.qid] == q
	if held {
		c.queues[q.qid] = nil
	}
	delete(c.pending, q)
	c.mu.Unlock()
	c.log.Debug("I/O queue closed", "qid", q.qid, "held_qid", held)
	return held
}

// addPendingLocked records an I/O queue that must authenticate before it
// takes its QID (c.mu held).
func (c *controller) addPendingLocked(q *queue) {
	if c.pending == nil {
		c.pending = map[*queue]struct{}{}
	}
	c.pending[q] = struct{}{}
}

// installIOQueue gives a pending I/O queue that has just authenticated
// its QID. It fails when the controller is gone or another queue holds
// the QID; the other pending queues of the QID are then closed: their
// peers never authenticated for it.
func (c *controller) installIOQueue(q *queue) bool {
	c.mu.Lock()
	if _, ok := c.pending[q]; !ok || c.dead || c.queues[q.qid] != nil {
		c.mu.Unlock()
		return false
	}
	delete(c.pending, q)
	c.queues[q.qid] = q
	var rivals []*queue
	for p := range c.pending {
		if p.qid == q.qid {
			rivals = append(rivals, p)
			delete(c.pending, p)
		}
	}
	c.mu.Unlock()
	for _, p := range rivals {
		c.log.Warn("unauthenticated I/O queue closed: the host authenticated its QID on another queue",
			"qid", p.qid, "remote", p.tq.Remote().String())
		// Not on this goroutine: it serves q's authentication, and a
		// transport's Close may wait for teardown work of its own.
		go p.tq.Close()
	}
	return true
}

// takeIOQueuesLocked returns the connected I/O queues, pending ones
// included, and forgets them.
func (c *controller) takeIOQueuesLocked() []*queue {
	var qs []*queue
	for i := 1; i < len(c.queues); i++ {
		if c.queues[i] != nil {
			qs = append(qs, c.queues[i])
			c.queues[i] = nil
		}
	}
	for q := range c.pending {
		qs = append(qs, q)
	}
	c.pending = nil
	return qs
}

// setCC applies a Property Set of CC (Linux nvmet_update_cc). Disabling
// or shutting down the controller also tears its I/O queues down.
func (c *controller) setCC(v fabrics.CC) {
	c.mu.Lock()
	old := c.cc
	c.cc = v
	var drop []*queue
	if v.EN() && !old.EN() {
		c.startLocked()
	}
	if !v.EN() && old.EN() {
		c.clearLocked()
		drop = c.takeIOQueuesLocked()
	}
	if v.SHN() != fabrics.SHNNone && old.SHN() == fabrics.SHNNone {
		c.clearLocked()
		c.csts = c.csts.WithSHST(fabrics.SHSTComplete)
		drop = append(drop, c.takeIOQueuesLocked()...)
	}
	if v.SHN() == fabrics.SHNNone && old.SHN() != fabrics.SHNNone {
		c.csts = c.csts.WithSHST(fabrics.SHSTNormal)
	}
	c.readyFlag.Store(c.cc.EN() && c.csts.RDY())
	cc, csts := c.cc, c.csts
	c.mu.Unlock()
	for _, q := range drop {
		q.tq.Close()
	}
	c.log.Debug("CC set", "cc", uint32(v), "now_cc", uint32(cc), "csts", uint32(csts))
}

// startLocked enables the controller (Linux nvmet_start_ctrl).
func (c *controller) startLocked() {
	cc := c.cc
	if !c.subsys.disc && (cc.IOSQES() != 6 || cc.IOCQES() != 4) {
		c.log.Warn("enable refused: I/O queue entry sizes", "iosqes", cc.IOSQES(), "iocqes", cc.IOCQES())
		c.csts = fabrics.CSTSCFS
		return
	}
	if cc.MPS() != 0 || cc.AMS() != 0 || (cc.CSS() != fabrics.CCCSSNVM && cc.CSS() != fabrics.CCCSSAllIOCS) {
		c.log.Warn("enable refused", "mps", cc.MPS(), "ams", cc.AMS(), "css", cc.CSS())
		c.csts = fabrics.CSTSCFS
		return
	}
	c.csts = fabrics.CSTSRDY
	c.startKALocked()
	c.log.Debug("controller enabled")
}

// clearLocked disables the controller (Linux nvmet_clear_ctrl); features
// the host set go back to their defaults.
func (c *controller) clearLocked() {
	c.csts &^= fabrics.CSTSRDY
	c.cc = 0
	c.grantedQ = 0
}

// nsChanged adds nsid to the Changed Namespace List and raises a
// Namespace Attribute Changed event when enabled (Linux nvmet_ns_changed).
func (c *controller) nsChanged(nsid uint32) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.addChangedLocked(nsid)
	if c.aenAllowedLocked(aenBitNSAttr) {
		c.events = append(c.events, aerTypeNotice|aerInfoNSChange<<8|logChangedNS<<16)
	}
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}

// discoveryChanged raises a Discovery Log Page Change event.
func (c *controller) discoveryChanged() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if c.aenAllowedLocked(aenBitDisc) {
		c.events = append(c.events, aerTypeNotice|aerInfoDisc<<8|fabrics.LogPageDiscovery<<16)
	}
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}

func (c *controller) addChangedLocked(nsid uint32) {
	if c.overflow {
		return
	}
	for _, n := range c.changed {
		if n == nsid {
			return
		}
	}
	if len(c.changed) == maxChangedNS {
		c.changed = nil
		c.overflow = true
		return
	}
	c.changed = append(c.changed, nsid)
}

// aenAllowedLocked reports whether an event of kind bit may be sent: it is
// enabled and none of its kind waits for the host to read the log page
// (Linux nvmet_aen_bit_disabled); the kind is then masked.
func (c *controller) aenAllowedLocked(bit uint) bool {
	if c.aen&(1<<bit) == 0 || c.aenMask&(1<<bit) != 0 {
		return false
	}
	c.aenMask |= 1 << bit
	return true
}

// clearAENLocked unmasks an event kind after its log page was read
// without RAE.
func (c *controller) clearAENLocked(bit uint) { c.aenMask &^= 1 << bit }

type aerDone struct {
	a   pendingAER
	dw0 uint32
}

// matchEventsLocked pairs queued events with outstanding AERs.
func (c *controller) matchEventsLocked() []aerDone {
	var out []aerDone
	for len(c.events) > 0 && len(c.aers) > 0 {
		a := c.aers[len(c.aers)-1]
		c.aers = c.aers[:len(c.aers)-1]
		out = append(out, aerDone{a: a, dw0: c.events[0]})
		c.events = c.events[1:]
	}
	return out
}

func (c *controller) completeAERs(done []aerDone) {
	for _, d := range done {
		nvme.CQE(d.a.r.CQE[:]).SetDW0(d.dw0)
		c.log.Debug("asynchronous event", "dw0", d.dw0)
		d.a.q.ok(d.a.r)
	}
}

// logError records a failed command in the Error Information log (Linux
// nvmet_set_error). statusField is the CQE status field (phase tag and
// More clear).
func (c *controller) logError(qid uint16, r *fabrics.Request, statusField uint16, loc uint16, lba uint64) {
	sqe := nvme.SQE(r.SQE[:])
	c.mu.Lock()
	c.errCount++
	e := nvme.ErrorLogEntry(c.errLog[c.errCount%errLogSlots][:])
	clear(e)
	e.SetErrorCount(c.errCount)
	e.SetSQID(qid)
	e.SetCID(sqe.CID())
	e.SetStatusRaw(statusField)
	e.SetParameterErrorLocation(loc)
	e.SetLBA(lba)
	if sqe.Opcode() != fabrics.OpcodeFabrics {
		e.SetNSID(sqe.NSID())
	}
	c.mu.Unlock()
}
