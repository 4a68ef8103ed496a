package target

import (
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// connectAttrDisableSQFlow is Connect CATTR bit 2: SQ flow control
// disabled (Linux NVME_CONNECT_DISABLE_SQFLOW).
const connectAttrDisableSQFlow = 1 << 2

// handleUnconnected runs a command on a queue no Connect has succeeded on:
// only Connect is allowed. (Linux answers other commands with Invalid
// Command Opcode; the specification, which this follows, says Command
// Sequence Error.)
func (q *queue) handleUnconnected(r *fabrics.Request) {
	if r.SQE[0] != fabrics.OpcodeFabrics || fabrics.FCType(r.SQE[4]) != fabrics.FCTypeConnect {
		q.log.Debug("command before Connect", "opcode", r.SQE[0], "fctype", r.SQE[4])
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locOpcode, 0)
		return
	}
	cmd := fabrics.ConnectCommand(r.SQE[:])
	if len(r.Data) != fabrics.ConnectDataLen {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	if cmd.RecFmt() != 0 {
		q.log.Warn("Connect: unknown record format", "recfmt", cmd.RecFmt())
		q.complete(r, dnr(fabrics.StatusConnectIncompatibleFormat), locRecFmt, 0)
		return
	}
	d := fabrics.ConnectData(r.Data)
	if tqid := q.tq.Params().QID; cmd.QID() != tqid {
		q.log.Warn("Connect: QID differs from the transport's", "qid", cmd.QID(), "transport_qid", tqid)
		q.connectInvalid(r, fabrics.InvalidParam{Offset: fabrics.ConnectOffQID})
		return
	}
	if cmd.QID() == 0 {
		q.connectAdmin(r, cmd, d)
		return
	}
	q.connectIO(r, cmd, d)
}

// connectInvalid fails a Connect with Connect Invalid Parameters naming
// the bad field.
func (q *queue) connectInvalid(r *fabrics.Request, p fabrics.InvalidParam) {
	nvme.CQE(r.CQE[:]).SetDW0(p.DW0())
	q.complete(r, dnr(fabrics.StatusConnectInvalidParameters), noLoc, 0)
}

// lookupSubsystemLocked finds the subsystem a Connect names on this port:
// the discovery subsystem (under its NQN or the well-known one) or one
// the port exports (t.mu held).
func (q *queue) lookupSubsystemLocked(nqn string) *Subsystem {
	t := q.t
	if t.closed {
		return nil
	}
	if p := t.ports[q.port.id]; p != q.port {
		return nil // the port was removed
	}
	if nqn == fabrics.DiscoveryNQN || nqn == t.disc.nqn {
		return t.disc
	}
	if !q.port.exports(nqn) {
		return nil
	}
	return t.subsys[nqn]
}

func (q *queue) connectAdmin(r *fabrics.Request, cmd fabrics.ConnectCommand, d fabrics.ConnectData) {
	subnqn, hostnqn := d.SubNQN(), d.HostNQN()
	log := q.log.With("subsys", subnqn, "host", hostnqn, "remote", q.tq.Remote().String())
	if d.CntlID() != fabrics.CntlIDDynamic {
		log.Warn("admin Connect for a static controller ID", "cntlid", d.CntlID())
		q.connectInvalid(r, fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffCntlID})
		return
	}
	sqsize := cmd.SQSize()
	t := q.t
	t.mu.Lock()
	s := q.lookupSubsystemLocked(subnqn)
	if s == nil {
		t.mu.Unlock()
		log.Warn("Connect to an unknown subsystem")
		q.connectInvalid(r, fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffSubNQN})
		return
	}
	if !s.hostAllowedLocked(hostnqn) {
		t.mu.Unlock()
		log.Warn("Connect by a host not allowed")
		nvme.CQE(r.CQE[:]).SetDW0(fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffHostNQN}.DW0())
		q.complete(r, dnr(fabrics.StatusConnectInvalidHost), noLoc, 0)
		return
	}
	if sqsize == 0 {
		t.mu.Unlock()
		log.Warn("Connect with queue size 0")
		q.connectInvalid(r, fabrics.InvalidParam{Offset: fabrics.ConnectOffSQSize})
		return
	}
	if status, dw0, why, kv := s.admitLocked(hostnqn, d.HostID()); !status.Status.Success() {
		t.mu.Unlock()
		log.Warn(why, kv...)
		nvme.CQE(r.CQE[:]).SetDW0(dw0)
		q.complete(r, status, noLoc, 0)
		return
	}
	cntlid, ok := s.allocCntlIDLocked()
	if !ok {
		t.mu.Unlock()
		log.Warn("no free controller ID", "min", s.cfg.CntlIDMin, "max", s.cfg.CntlIDMax)
		q.complete(r, dnr(fabrics.StatusConnectControllerBusy), noLoc, 0)
		return
	}
	c := q.newController(s, cntlid, hostnqn, d.HostID())
	s.ctrls[cntlid] = c
	s.stats.ctrlCreated.Add(1) // with the registration: shutdown counts the removal of any registered controller
	t.mu.Unlock()

	kato := cmd.KATO()
	if s.disc && kato == 0 {
		kato = DiscoveryKATO
	}
	q.qid = 0
	q.size = uint32(sqsize) + 1
	q.sqhdOff = cmd.CAttr()&connectAttrDisableSQFlow != 0
	c.mu.Lock()
	if c.dead { // torn down (subsystem removed) before we got here
		c.mu.Unlock()
		q.complete(r, st(fabrics.StatusConnectControllerBusy), noLoc, 0)
		return
	}
	c.queues[0] = q
	c.setKATOLocked(kato)
	authreq := q.connectAuthReqLocked(c)
	q.ctrl.Store(c)
	c.mu.Unlock()

	c.log.Info("controller created", "kind", c.kind(), "kato", c.kato, "sqsize", sqsize, "remote", q.tq.Remote().String(), "auth", c.needAuth)
	cqe := nvme.CQE(r.CQE[:])
	cqe.SetDW0(fabrics.ConnectResultDW0(cntlid, authreq))
	if q.sqhdOff {
		cqe.SetSQHD(0xffff)
	}
	q.ok(r)
}

// newController builds a controller for an admin queue.
func (q *queue) newController(s *Subsystem, cntlid uint16, hostnqn string, hostID [16]byte) *controller {
	mqs := q.port.cfg.MaxQueueSize
	c := &controller{
		t:       q.t,
		subsys:  s,
		port:    q.port,
		cntlid:  cntlid,
		hostNQN: hostnqn,
		hostID:  hostID,
		mqes:    uint16(mqs - 1),
		created: time.Now(),
		aen:     aenCfgOptional,
	}
	c.log = q.t.log.With("cntlid", cntlid, "subsys", s.nqn, "host", hostnqn)
	c.needAuth = q.t.authRequired(s, hostnqn)
	css := uint8(fabrics.CAPCSSNVM | fabrics.CAPCSSIOCS)
	if s.disc {
		c.maxIOQs = 0
	} else {
		c.maxIOQs = uint16(s.cfg.MaxIOQueues)
	}
	c.cap = fabrics.MakeCAP(fabrics.CAPFields{MQES: c.mqes, CQR: true, TO: capTimeout, CSS: css})
	c.mdts = mdtsFor(q.tq.MaxTransfer())
	if c.mdts != 0 {
		c.maxXfer = 4096 << c.mdts
	}
	c.queues = make([]*queue, int(c.maxIOQs)+1)
	c.vwc.Store(true)
	if s.disc {
		c.aen = 0 // the host enables discovery log change events
	}
	return c
}

func (c *controller) kind() string {
	if c.subsys.disc {
		return "discovery"
	}
	return "nvm"
}

func (q *queue) connectIO(r *fabrics.Request, cmd fabrics.ConnectCommand, d fabrics.ConnectData) {
	subnqn, hostnqn, cntlid, qid := d.SubNQN(), d.HostNQN(), d.CntlID(), cmd.QID()
	log := q.log.With("subsys", subnqn, "host", hostnqn, "cntlid", cntlid, "qid", qid, "remote", q.tq.Remote().String())
	t := q.t
	t.mu.RLock()
	s := q.lookupSubsystemLocked(subnqn)
	if s == nil {
		t.mu.RUnlock()
		log.Warn("I/O Connect to an unknown subsystem")
		q.connectInvalid(r, fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffSubNQN})
		return
	}
	c := s.ctrls[cntlid]
	t.mu.RUnlock()
	if c == nil || c.hostNQN != hostnqn {
		log.Warn("I/O Connect for an unknown controller")
		q.connectInvalid(r, fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffCntlID})
		return
	}

	var authreq uint16
	c.mu.Lock()
	switch sqsize := cmd.SQSize(); {
	case c.dead:
		c.mu.Unlock()
		q.connectInvalid(r, fabrics.InvalidParam{InData: true, Offset: fabrics.ConnectDataOffCntlID})
		return
	case !c.cc.EN() || !c.csts.RDY():
		c.mu.Unlock()
		log.Warn("I/O Connect before the controller is enabled")
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locQID, 0)
		return
	case qid > c.grantedIOQueuesLocked():
		c.mu.Unlock()
		log.Warn("I/O Connect beyond the queues granted", "granted", c.grantedIOQueuesLocked())
		q.connectInvalid(r, fabrics.InvalidParam{Offset: fabrics.ConnectOffQID})
		return
	case sqsize == 0:
		c.mu.Unlock()
		log.Warn("I/O Connect with queue size 0")
		q.connectInvalid(r, fabrics.InvalidParam{Offset: fabrics.ConnectOffSQSize})
		return
	case c.queues[qid] != nil:
		c.mu.Unlock()
		log.Warn("I/O queue already connected")
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locQID, 0)
		return
	case c.needAuth && len(c.pending) >= 2*int(c.grantedIOQueuesLocked()):
		// Each host queue waits for its own transaction (twice the
		// granted queues leaves the host room next to a peer without the
		// key; AuthDeadline frees them).
		c.mu.Unlock()
		log.Warn("I/O Connect refused: too many queues waiting to authenticate", "pending", 2*int(c.grantedIOQueuesLocked()))
		q.complete(r, st(fabrics.StatusConnectControllerBusy), noLoc, 0)
		return
	case sqsize > c.mqes:
		c.mu.Unlock()
		log.Warn("I/O Connect larger than MQES", "sqsize", sqsize, "mqes", c.mqes)
		q.connectInvalid(r, fabrics.InvalidParam{Offset: fabrics.ConnectOffSQSize})
		return
	default:
		q.qid = qid
		q.size = uint32(sqsize) + 1
		q.sqhdOff = cmd.CAttr()&connectAttrDisableSQFlow != 0
		q.preallocate(q.tq.Depth())
		authreq = q.connectAuthReqLocked(c)
		if authreq != 0 {
			c.addPendingLocked(q) // its QID once it authenticates
		} else {
			c.queues[qid] = q
		}
		q.ctrl.Store(c)
	}
	c.mu.Unlock()
	log.Debug("I/O queue connected", "sqsize", cmd.SQSize())
	cqe := nvme.CQE(r.CQE[:])
	cqe.SetDW0(fabrics.ConnectResultDW0(cntlid, authreq))
	if q.sqhdOff {
		cqe.SetSQHD(0xffff)
	}
	q.ok(r)
}

// handleFabrics runs a Fabrics command on a connected queue.
func (c *controller) handleFabrics(q *queue, r *fabrics.Request) {
	switch t := fabrics.FCType(r.SQE[4]); {
	case t == fabrics.FCTypeConnect:
		q.complete(r, dnr(nvme.StatusCommandSequenceError), locFCType, 0)
	case t == fabrics.FCTypeDisconnect:
		if len(r.Data) != 0 {
			q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
			return
		}
		c.log.Debug("Disconnect", "qid", q.qid)
		if q.qid != 0 {
			// The qid is free once the host has the completion: a
			// Connect for it may follow before the transport's teardown.
			c.ioQueueClosed(q)
		}
		q.ok(r)
		go q.tq.Close()
	case t == fabrics.FCTypeAuthSend || t == fabrics.FCTypeAuthReceive:
		c.handleAuth(q, r)
	case q.qid != 0:
		q.complete(r, dnr(nvme.StatusInvalidOpcode), locFCType, 0)
	case t == fabrics.FCTypePropertyGet:
		c.propertyGet(q, r)
	case t == fabrics.FCTypePropertySet:
		c.propertySet(q, r)
	default:
		q.complete(r, dnr(nvme.StatusInvalidOpcode), locFCType, 0)
	}
}

// propertyGet answers Property Get (Linux nvmet_execute_prop_get): CAP as
// 8 bytes; VS, CC and CSTS as 4.
func (c *controller) propertyGet(q *queue, r *fabrics.Request) {
	if len(r.Data) != 0 {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	cmd := fabrics.PropertyGetCommand(r.SQE[:])
	var val uint64
	c.mu.Lock()
	cc, csts := c.cc, c.csts
	c.mu.Unlock()
	switch off := cmd.Offset(); {
	case cmd.Attrib()&1 == 1 && off == fabrics.PropCAP:
		val = uint64(c.cap)
	case cmd.Attrib()&1 == 0 && off == fabrics.PropVS:
		c.t.mu.RLock()
		val = uint64(c.subsys.cfg.Version)
		c.t.mu.RUnlock()
	case cmd.Attrib()&1 == 0 && off == fabrics.PropCC:
		val = uint64(cc)
	case cmd.Attrib()&1 == 0 && off == fabrics.PropCSTS:
		val = uint64(csts)
	default:
		q.complete(r, dnr(nvme.StatusInvalidField), locPropOff, 0)
		return
	}
	nvme.CQE(r.CQE[:]).SetResult64(val)
	q.ok(r)
}

// propertySet answers Property Set: only CC, as 4 bytes.
func (c *controller) propertySet(q *queue, r *fabrics.Request) {
	if len(r.Data) != 0 {
		q.complete(r, dnr(nvme.StatusDataSGLLengthInvalid), locDPTR, 0)
		return
	}
	cmd := fabrics.PropertySetCommand(r.SQE[:])
	if cmd.Attrib()&1 != 0 {
		q.complete(r, dnr(nvme.StatusInvalidField), locAttrib, 0)
		return
	}
	if cmd.Offset() != fabrics.PropCC {
		q.complete(r, dnr(nvme.StatusInvalidField), locPropOff, 0)
		return
	}
	c.setCC(fabrics.CC(uint32(cmd.Value())))
	q.ok(r)
}
