package ibcm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// connState is the state of a connection (enum ib_cm_state).
type connState uint8

// Connection states. stRepRcvd is held only while Connect moves the QP to
// RTS; stDone means the connection left every table.
const (
	stIdle connState = iota
	stReqSent
	stMRAReqRcvd
	stRepRcvd
	stReqRcvd
	stMRAReqSent
	stRepSent
	stMRARepRcvd
	stEstablished
	stDreqSent
	stTimeWait
	stDone
)

var stateNames = [...]string{
	stIdle: "IDLE", stReqSent: "REQ_SENT", stMRAReqRcvd: "MRA_REQ_RCVD", stRepRcvd: "REP_RCVD",
	stReqRcvd: "REQ_RCVD", stMRAReqSent: "MRA_REQ_SENT", stRepSent: "REP_SENT", stMRARepRcvd: "MRA_REP_RCVD",
	stEstablished: "ESTABLISHED", stDreqSent: "DREQ_SENT", stTimeWait: "TIMEWAIT", stDone: "DONE",
}

func (s connState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("connState(%d)", uint8(s))
}

// conn is one connection, active or passive. All fields are protected by
// m.mu except the channels' own synchronisation.
type conn struct {
	m      *Manager
	active bool
	state  connState

	localID, remoteID uint32
	remoteGUID        uint64
	tid               uint64     // the REQ's TID, reused by REP, RTU, MRA and REJ
	peer              netip.Addr // the peer's address, where CM MADs go
	local, remote     netip.AddrPort

	qp        rdma.QP
	localQPN  uint32
	remoteQPN uint32
	// Starting PSNs. As Linux's ib_cm uses them, the starting PSN of a
	// REQ or REP is the first PSN its sender expects to receive: the
	// active side sends from the REP's PSN on, the passive side from the
	// REQ's (cm_req_handler/cm_rep_handler set sq_psn from the peer's
	// message, rq_psn from their own; the kernel capture shows it).
	rqPSN uint32 // the first PSN this side receives: the one it advertises
	sqPSN uint32 // the first PSN this side sends: the peer's advertised one

	// QP attributes of the connection.
	mtu          rdma.MTU
	rr           uint8 // responder resources: max_dest_rd_atomic
	id           uint8 // initiator depth: max_rd_atomic
	retryCount   uint8
	rnrRetry     uint8
	avTimeout    uint8 // packet life time + 1 (the path's av.timeout)
	ackTimeout   uint8 // local ACK timeout of the QP
	flowLabel    uint32
	hopLimit     uint8
	trafficClass uint8

	peerParam   rdma.ConnParam // the peer's REQ or REP values
	privateData []byte         // the peer's REQ or REP private data

	// Passive side: when the REQ came, and the requester's timing.
	reqArrived      time.Time
	peerRespTimeout uint8 // the requester's remote CM response timeout (how long it waits for us)
	listener        *listener
	answered        bool // Accept or Reject was called

	// Retransmission of the outstanding request (REQ, REP, DREQ).
	msg        []byte
	timeout    time.Duration // between retransmissions
	respTime   time.Duration // the connection's CM response timeout for REQ/REP/DREQ
	maxRetries int
	retries    int       // retransmissions left
	lastSent   time.Time // when msg was last sent
	timer      *time.Timer
	timerGen   uint64
	twTimer    *time.Timer

	lastRTU []byte // answers duplicate REPs
	mra     []byte // answers duplicate REQs
	lastREJ error  // why the connection was abandoned before Accept/Reject

	result     chan error // cap 1: the end of Connect's or Accept's wait
	resolved   bool
	events     chan rdma.ConnEvent
	eventsOpen bool
	handedOut  bool          // returned to the application as a Conn
	done       chan struct{} // closed at disconnect
	disconn    bool
	dreqDone   chan struct{} // closed when this side's disconnect has finished
	dreqClosed bool
}

var _ rdma.Conn = (*conn)(nil)

func (m *Manager) newConn(active bool) *conn {
	return &conn{
		m:          m,
		active:     active,
		result:     make(chan error, 1),
		events:     make(chan rdma.ConnEvent, 4),
		eventsOpen: true,
		done:       make(chan struct{}),
		dreqDone:   make(chan struct{}),
		hopLimit:   defaultHopLimit,
	}
}

// randPSN returns a random 24-bit starting PSN.
func randPSN() uint32 { return rand.Uint32() & wire.PSNMask }

// QP returns the connected queue pair.
func (c *conn) QP() rdma.QP { return c.qp }

// LocalAddr returns this side's address and rdma_cm port.
func (c *conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr returns the peer's address and rdma_cm port.
func (c *conn) RemoteAddr() netip.AddrPort { return c.remote }

// Param returns the peer's parameters and the negotiated path MTU.
func (c *conn) Param() rdma.ConnParam { return c.peerParam }

// PrivateData returns the peer's REQ (passive) or REP (active) private data.
func (c *conn) PrivateData() []byte { return c.privateData }

// Events returns the connection's event channel.
func (c *conn) Events() <-chan rdma.ConnEvent { return c.events }

// Done is closed when the connection is disconnected.
func (c *conn) Done() <-chan struct{} { return c.done }

// Disconnect sends a DREQ, moves the QP to Err and waits for the DREP,
// the CM timeout or ctx.
func (c *conn) Disconnect(ctx context.Context) error {
	m := c.m
	m.mu.Lock()
	if c.state == stEstablished {
		c.startDisconnect()
	}
	ch := c.dreqDone
	wait := c.state == stDreqSent
	m.mu.Unlock()
	if !wait {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ibcm: disconnect %v: %w", c.remote, ctx.Err())
	}
}

// startDisconnect moves the QP to Err and sends the DREQ (m.mu held,
// state Established).
func (c *conn) startDisconnect() {
	c.qpToErr()
	c.state = stDreqSent
	c.m.log.Debug("sending DREQ", "local_id", c.localID, "remote", c.remote)
	c.sendAndArm(c.m.formatDREQ(c), c.respTime, c.maxRetries)
}

// emit queues an event (m.mu held).
func (c *conn) emit(t rdma.ConnEventType, pd []byte) {
	if !c.eventsOpen {
		return
	}
	select {
	case c.events <- rdma.ConnEvent{Type: t, PrivateData: pd}:
	default:
		c.m.log.Warn("connection event dropped", "event", t)
	}
}

// resolve ends Connect's or Accept's wait (m.mu held); only the first call counts.
func (c *conn) resolve(err error) {
	if c.resolved {
		return
	}
	c.resolved = true
	c.result <- err
}

// disconnected reports the disconnect (m.mu held): EventDisconnected and Done.
func (c *conn) disconnected(pd []byte) {
	if c.disconn {
		return
	}
	c.disconn = true
	if c.handedOut {
		c.emit(rdma.EventDisconnected, pd)
	}
	close(c.done)
	c.finishDREQ()
}

func (c *conn) finishDREQ() {
	if !c.dreqClosed {
		c.dreqClosed = true
		close(c.dreqDone)
	}
}

// qpToErr moves the connection's QP to Err (m.mu held).
func (c *conn) qpToErr() {
	if c.qp == nil {
		return
	}
	if err := c.qp.Modify(&rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState); err != nil {
		c.m.log.Debug("cannot move QP to ERR", "qpn", c.localQPN, "error", err)
	}
}

// sendAndArm sends msg and retransmits it every timeout, retries times,
// until stopTimer (m.mu held).
func (c *conn) sendAndArm(msg []byte, timeout time.Duration, retries int) {
	c.msg, c.timeout, c.retries = msg, timeout, retries
	c.m.sendConn(c, msg)
	c.lastSent = time.Now()
	c.arm()
}

func (c *conn) arm() {
	c.stopTimer()
	gen := c.timerGen
	c.timer = time.AfterFunc(c.timeout, func() { c.m.onTimer(c, gen) })
}

func (c *conn) stopTimer() {
	c.timerGen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// onTimer retransmits c's outstanding message or gives up.
func (m *Manager) onTimer(c *conn, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != c.timerGen || m.destroyed {
		return
	}
	c.timer = nil
	if c.retries > 0 {
		c.retries--
		m.log.Debug("retransmitting", "mad", wire.MAD(c.msg).String(), "state", c.state, "retries_left", c.retries)
		m.sendConn(c, c.msg)
		c.lastSent = time.Now()
		c.arm()
		return
	}
	tries := c.maxRetries + 1
	switch c.state {
	case stReqSent, stMRAReqRcvd:
		m.log.Debug("no answer to REQ", "remote", c.remote, "tries", tries)
		m.removeConn(c)
		c.resolve(fmt.Errorf("ibcm: connect to %v: no answer to %d REQs: %w", c.remote, tries, rdma.ErrUnreachable))
	case stRepSent, stMRARepRcvd:
		m.log.Debug("no RTU", "remote", c.remote, "tries", tries)
		c.qpToErr()
		m.removeConn(c)
		c.resolve(fmt.Errorf("ibcm: accept from %v: no RTU after %d REPs: %w", c.remote, tries, rdma.ErrUnreachable))
	case stDreqSent:
		m.log.Debug("no DREP", "remote", c.remote, "tries", tries)
		c.disconnected(nil)
		c.enterTimeWait()
	}
}

// enterTimeWait starts TimeWait (m.mu held): the connection keeps
// answering retransmitted DREQs and stale REQs, then leaves.
func (c *conn) enterTimeWait() {
	c.stopTimer()
	c.state = stTimeWait
	m := c.m
	delete(m.byRemoteQPN, remoteKey{c.remoteQPN, c.remoteGUID})
	delete(m.byLocalQPN, c.localQPN)
	d := m.opts.TimeWait
	if d == 0 {
		d = cmTimeout(c.ackTimeout)
	}
	c.twTimer = time.AfterFunc(d, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if c.state == stTimeWait {
			m.removeConn(c)
		}
	})
}

// removeConn takes c out of every table and ends it (m.mu held): a
// handed-out connection gets EventTimeWaitExit and its channel closes.
func (m *Manager) removeConn(c *conn) {
	c.stopTimer()
	if c.twTimer != nil {
		c.twTimer.Stop()
	}
	c.state = stDone
	if m.byLocalID[c.localID] == c {
		delete(m.byLocalID, c.localID)
	}
	k := remoteKey{c.remoteID, c.remoteGUID}
	if m.byRemote[k] == c {
		delete(m.byRemote, k)
	}
	k = remoteKey{c.remoteQPN, c.remoteGUID}
	if m.byRemoteQPN[k] == c {
		delete(m.byRemoteQPN, k)
	}
	if m.byLocalQPN[c.localQPN] == c {
		delete(m.byLocalQPN, c.localQPN)
	}
	if c.active {
		delete(m.ports, c.local.Port())
	}
	if c.eventsOpen {
		if c.handedOut && c.disconn {
			c.emit(rdma.EventTimeWaitExit, nil)
		}
		c.eventsOpen = false
		close(c.events)
	}
}

// abort ends c because the manager is destroyed (m.mu held).
func (c *conn) abort(err error) {
	switch c.state {
	case stEstablished, stDreqSent, stRepRcvd:
		c.qpToErr()
		c.disconnected(nil)
	case stRepSent, stMRARepRcvd:
		c.qpToErr()
	}
	c.lastREJ = err
	c.m.removeConn(c)
	c.resolve(err)
	c.finishDREQ()
}

// toInit moves a fresh QP to Init with remote read and write access:
// Reset→Init, or Init→Init for a QP the caller already moved to Init to
// post receives before the connection exists (as librdmacm's
// rdma_create_qp leaves it).
func toInit(qp rdma.QP) error {
	if st := qp.State(); st != rdma.QPSReset && st != rdma.QPSInit {
		return fmt.Errorf("QP %#x is in state %s, not RESET or INIT: %w", qp.QPN(), st, rdma.ErrInvalidState)
	}
	err := qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, PKeyIndex: 0, Port: 1, AccessFlags: rdma.AccessRemoteWrite | rdma.AccessRemoteRead},
		rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags)
	if err != nil {
		return fmt.Errorf("QP %#x to INIT: %w", qp.QPN(), err)
	}
	return nil
}

// toRTR moves c's QP Init→RTR with the negotiated values (cm_init_qp_rtr_attr).
func (c *conn) toRTR() error {
	attr := rdma.QPAttr{
		State:           rdma.QPSRTR,
		AH:              rdma.AH{DGID: rdma.GIDFromAddr(c.peer), FlowLabel: c.flowLabel, HopLimit: c.hopLimit, TrafficClass: c.trafficClass},
		PathMTU:         c.mtu,
		DestQPN:         c.remoteQPN,
		RQPSN:           c.rqPSN,
		MaxDestRdAtomic: c.rr,
		MinRNRTimer:     c.m.opts.MinRNRTimer,
	}
	err := c.qp.Modify(&attr, rdma.QPAttrState|rdma.QPAttrAV|rdma.QPAttrPathMTU|rdma.QPAttrDestQPN|rdma.QPAttrRQPSN|
		rdma.QPAttrMaxDestRdAtomic|rdma.QPAttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("QP %#x to RTR: %w", c.localQPN, err)
	}
	return nil
}

// toRTS moves c's QP RTR→RTS (cm_init_qp_rts_attr).
func (c *conn) toRTS() error {
	attr := rdma.QPAttr{
		State:       rdma.QPSRTS,
		SQPSN:       c.sqPSN,
		Timeout:     c.ackTimeout,
		RetryCount:  c.retryCount,
		RNRRetry:    c.rnrRetry,
		MaxRdAtomic: c.id,
	}
	err := c.qp.Modify(&attr, rdma.QPAttrState|rdma.QPAttrSQPSN|rdma.QPAttrTimeout|rdma.QPAttrRetryCount|
		rdma.QPAttrRNRRetry|rdma.QPAttrMaxRdAtomic)
	if err != nil {
		return fmt.Errorf("QP %#x to RTS: %w", c.localQPN, err)
	}
	return nil
}

// Connect connects qp to the listener at addr:port.
func (m *Manager) Connect(ctx context.Context, addr netip.Addr, port uint16, qp rdma.QP, privateData []byte, p rdma.ConnParam) (rdma.Conn, error) {
	dst := netip.AddrPortFrom(addr, port)
	fail := func(err error) (rdma.Conn, error) { return nil, fmt.Errorf("ibcm: connect to %v: %w", dst, err) }
	switch {
	case len(privateData) > rdma.MaxConnectPrivateData:
		return fail(fmt.Errorf("%d bytes of private data exceed %d: %w", len(privateData), rdma.MaxConnectPrivateData, rdma.ErrInvalidArgument))
	case qp == nil || qp.Type() != rdma.QPTypeRC:
		return fail(fmt.Errorf("need an RC QP: %w", rdma.ErrInvalidArgument))
	case !addr.IsValid() || addr.Unmap().Is4() != m.addr.Is4():
		return fail(fmt.Errorf("address family differs from the device's %v: %w", m.addr, rdma.ErrInvalidArgument))
	case p.RetryCount > 7 || p.RNRRetryCount > 7:
		return fail(fmt.Errorf("retry count %d, RNR retry count %d: %w", p.RetryCount, p.RNRRetryCount, rdma.ErrInvalidArgument))
	}
	addr = addr.Unmap()
	if err := toInit(qp); err != nil {
		return fail(err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fail(rdma.ErrClosed)
	}
	c := m.newConn(true)
	c.qp, c.localQPN = qp, qp.QPN()
	c.localID = m.newLocalID()
	c.tid = m.formTID(c.localID)
	c.peer = addr
	c.local = netip.AddrPortFrom(m.addr, m.newPort())
	c.remote = dst
	c.rqPSN = randPSN()
	c.mtu = m.mtu
	if p.PathMTU.Valid() && p.PathMTU < c.mtu {
		c.mtu = p.PathMTU
	}
	c.flowLabel = roceFlowLabel(c.local.Port(), port)
	c.trafficClass = m.opts.TrafficClass
	c.avTimeout = m.opts.PacketLifeTime + 1
	c.ackTimeout = ACKTimeout(m.opts.ACKDelay, m.opts.PacketLifeTime)
	c.retryCount = p.RetryCount
	c.rr, c.id = p.ResponderResources, p.InitiatorDepth
	c.respTime = m.reqTimeout()
	c.maxRetries = int(m.opts.MaxCMRetries)
	req, err := m.formatREQ(c, p, privateData)
	if err != nil {
		delete(m.ports, c.local.Port())
		m.mu.Unlock()
		return fail(err)
	}
	m.byLocalID[c.localID] = c
	c.state = stReqSent
	m.log.Debug("sending REQ", "dst", dst, "local_id", c.localID, "qpn", c.localQPN, "sport", c.local.Port())
	c.sendAndArm(req, c.respTime, c.maxRetries)
	m.mu.Unlock()

	var res error
	select {
	case res = <-c.result:
	case <-ctx.Done():
		m.mu.Lock()
		if c.state == stReqSent || c.state == stMRAReqRcvd {
			// cm_destroy_id: give up with a REJ "timeout" naming our CA GUID.
			var ari [8]byte
			binary.BigEndian.PutUint64(ari[:], m.guid)
			m.sendConn(c, formatREJ(c, c.state, wire.REJTimeout, ari[:], nil))
			m.removeConn(c)
			m.mu.Unlock()
			return fail(ctx.Err())
		}
		m.mu.Unlock()
		res = <-c.result
	}
	if res != nil {
		return nil, res
	}

	// REP received (stRepRcvd): RTR, RTS, then the RTU.
	err = c.toRTR()
	if err == nil {
		err = c.toRTS()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != stRepRcvd {
		c.qpToErr()
		if c.lastREJ != nil {
			return nil, c.lastREJ
		}
		return fail(fmt.Errorf("connection ended in state %s after the REP", c.state))
	}
	if err != nil {
		m.sendConn(c, formatREJ(c, stRepRcvd, wire.REJConsumerDefined, nil, nil))
		c.qpToErr()
		m.removeConn(c)
		return fail(err)
	}
	c.lastRTU = formatRTU(c)
	m.sendConn(c, c.lastRTU)
	c.state = stEstablished
	c.handedOut = true
	c.emit(rdma.EventEstablished, c.privateData)
	m.log.Debug("connected", "local", c.local, "remote", c.remote, "qpn", c.localQPN, "remote_qpn", c.remoteQPN)
	return c, nil
}

// findConn returns the connection whose local ID is localID and, unless
// remoteID is 0, whose remote ID is remoteID (cm_acquire_id).
func (m *Manager) findConn(localID, remoteID uint32) *conn {
	c := m.byLocalID[localID]
	if c == nil || (remoteID != 0 && c.remoteID != remoteID) {
		return nil
	}
	return c
}

func (m *Manager) onREP(src netip.Addr, mad wire.MAD) {
	rep := wire.REP(mad.Data())
	c := m.findConn(rep.RemoteCommID(), 0)
	if c == nil || !c.active {
		m.log.Debug("REP for no connection", "src", src, "remote_comm_id", rep.RemoteCommID())
		return
	}
	switch c.state {
	case stReqSent, stMRAReqRcvd:
	case stEstablished:
		if c.remoteID == rep.LocalCommID() {
			m.log.Debug("duplicate REP: resending RTU", "local_id", c.localID)
			m.sendConn(c, c.lastRTU)
		}
		return
	default:
		return
	}
	if mad.TID() != c.tid {
		m.log.Debug("REP with a TID other than the REQ's", "tid", mad.TID(), "want", c.tid)
	}
	guid := rep.LocalCAGUID()
	if o := m.byRemote[remoteKey{rep.LocalCommID(), guid}]; o != nil && o != c {
		m.log.Debug("REP duplicates another connection's remote ID; ignored", "remote_comm_id", rep.LocalCommID())
		return
	}
	if o := m.byRemoteQPN[remoteKey{rep.LocalQPN(), guid}]; o != nil && o != c {
		m.log.Info("stale connection: REP from a QP still connected", "remote_qpn", rep.LocalQPN())
		m.issueREJ(src, mad, wire.REJStaleConn, wire.CMMessageREP)
		if o.state == stEstablished {
			o.startDisconnect()
		}
		return
	}
	c.stopTimer()
	c.remoteID = rep.LocalCommID()
	c.remoteGUID = guid
	c.remoteQPN = rep.LocalQPN()
	c.sqPSN = rep.StartingPSN()
	m.byRemote[remoteKey{c.remoteID, guid}] = c
	m.byRemoteQPN[remoteKey{c.remoteQPN, guid}] = c
	c.peerParam = rdma.ConnParam{
		ResponderResources: rep.ResponderResources(),
		InitiatorDepth:     rep.InitiatorDepth(),
		RNRRetryCount:      rep.RNRRetryCount(),
		FlowControl:        rep.EndToEndFlowControl(),
		SRQ:                rep.SRQ(),
		QPN:                c.remoteQPN,
		StartingPSN:        c.sqPSN,
		PathMTU:            c.mtu,
	}
	c.privateData = append([]byte(nil), rep.PrivateData()...)
	// cm_rep_handler: our initiator depth is the peer's responder
	// resources and the other way round.
	c.id = min(c.id, rep.ResponderResources())
	c.rr = min(c.rr, rep.InitiatorDepth())
	c.rnrRetry = rep.RNRRetryCount()
	c.ackTimeout = ACKTimeout(rep.TargetACKDelay(), c.avTimeout-1)
	c.state = stRepRcvd
	c.resolve(nil)
}

func (m *Manager) onRTU(mad wire.MAD) {
	rtu := wire.RTU(mad.Data())
	c := m.findConn(rtu.RemoteCommID(), rtu.LocalCommID())
	if c == nil || (c.state != stRepSent && c.state != stMRARepRcvd) {
		return
	}
	c.establishPassive()
}

// establishPassive moves a passive connection to RTS and Established on
// its RTU or first packet (m.mu held).
func (c *conn) establishPassive() {
	m := c.m
	c.stopTimer()
	delete(m.byLocalQPN, c.localQPN)
	if err := c.toRTS(); err != nil {
		m.log.Warn("cannot establish the connection", "remote", c.remote, "error", err)
		c.state = stEstablished
		c.startDisconnect()
		c.resolve(fmt.Errorf("ibcm: accept from %v: %w", c.remote, err))
		return
	}
	c.state = stEstablished
	c.handedOut = true
	c.emit(rdma.EventEstablished, nil)
	m.log.Debug("accepted", "local", c.local, "remote", c.remote, "qpn", c.localQPN, "remote_qpn", c.remoteQPN)
	c.resolve(nil)
}

func (m *Manager) onREJ(mad wire.MAD) {
	rej := wire.REJ(mad.Data())
	var c *conn
	switch {
	case rej.Reason() == wire.REJTimeout:
		// cm_acquire_rejected_id: the ARI names the rejecting CA.
		c = m.byRemote[remoteKey{rej.LocalCommID(), binary.BigEndian.Uint64(rej.ARI())}]
	case rej.MessageRejected() == wire.CMMessageREQ:
		c = m.findConn(rej.RemoteCommID(), 0)
	default:
		c = m.findConn(rej.RemoteCommID(), rej.LocalCommID())
	}
	if c == nil {
		m.log.Debug("REJ for no connection", "reason", rej.Reason(), "remote_comm_id", rej.RemoteCommID())
		return
	}
	rerr := &rdma.RejectError{Reason: rdma.RejectReason(rej.Reason()), PrivateData: append([]byte(nil), rej.PrivateData()...)}
	m.log.Debug("REJ received", "reason", rej.Reason(), "state", c.state, "remote", c.remote)
	switch c.state {
	case stReqSent, stMRAReqRcvd, stRepSent, stMRARepRcvd:
		if c.state == stRepSent || c.state == stMRARepRcvd {
			c.qpToErr()
		}
		m.removeConn(c)
		c.resolve(rerr)
	case stReqRcvd, stMRAReqSent, stRepRcvd:
		// The peer gave up before Accept/Reject (or between REP and RTU).
		c.lastREJ = rerr
		m.removeConn(c)
	case stEstablished, stDreqSent:
		c.qpToErr()
		c.disconnected(append([]byte(nil), rej.PrivateData()...))
		c.enterTimeWait()
	}
}

func (m *Manager) onMRA(mad wire.MAD) {
	mra := wire.MRA(mad.Data())
	var c *conn
	if mra.MessageMRAed() == wire.CMMessageREQ {
		c = m.findConn(mra.RemoteCommID(), 0)
	} else {
		c = m.findConn(mra.RemoteCommID(), mra.LocalCommID())
	}
	if c == nil {
		return
	}
	var next connState
	var ackTO uint8
	switch {
	case c.state == stReqSent && mra.MessageMRAed() == wire.CMMessageREQ:
		next, ackTO = stMRAReqRcvd, c.avTimeout
	case c.state == stRepSent && mra.MessageMRAed() == wire.CMMessageREP:
		next, ackTO = stMRARepRcvd, c.ackTimeout
	default:
		return
	}
	// cm_mra_handler: wait the service timeout plus the path's timeout.
	c.state = next
	c.timeout = cmTimeout(mra.ServiceTimeout()) + cmTimeout(ackTO)
	m.log.Debug("MRA received", "state", next, "wait", c.timeout)
	c.arm()
}

func (m *Manager) onDREQ(src netip.Addr, mad wire.MAD) {
	dreq := wire.DREQ(mad.Data())
	c := m.findConn(dreq.RemoteCommID(), dreq.LocalCommID())
	if c == nil {
		m.log.Debug("DREQ for no connection: answering DREP", "src", src, "remote_comm_id", dreq.RemoteCommID())
		m.issueDREP(src, mad)
		return
	}
	if dreq.RemoteQPN() != c.localQPN {
		m.log.Debug("DREQ for another QP ignored", "qpn", dreq.RemoteQPN(), "want", c.localQPN)
		return
	}
	pd := append([]byte(nil), dreq.PrivateData()...)
	switch c.state {
	case stEstablished, stDreqSent:
		c.stopTimer()
		c.qpToErr()
		m.sendConn(c, formatDREP(c, mad.TID()))
		m.log.Debug("DREQ received", "remote", c.remote)
		c.disconnected(pd)
		c.enterTimeWait()
	case stRepSent, stMRARepRcvd:
		c.stopTimer()
		c.qpToErr()
		m.sendConn(c, formatDREP(c, mad.TID()))
		c.disconnected(pd)
		c.enterTimeWait()
		c.resolve(fmt.Errorf("ibcm: accept from %v: the peer disconnected before the connection was established", c.remote))
	case stTimeWait:
		m.sendConn(c, formatDREP(c, mad.TID()))
	}
}

func (m *Manager) onDREP(mad wire.MAD) {
	drep := wire.DREP(mad.Data())
	c := m.findConn(drep.RemoteCommID(), drep.LocalCommID())
	if c == nil || c.state != stDreqSent {
		return
	}
	c.disconnected(append([]byte(nil), drep.PrivateData()...))
	c.enterTimeWait()
}

var errNotPending = errors.New("ibcm: the request was already answered or abandoned")
