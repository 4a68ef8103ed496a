package ibcm

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// maxBacklog bounds the requests a listener queues before Next takes them.
const maxBacklog = 1024

// listener queues the REQs for one port.
type listener struct {
	m        *Manager
	port     uint16
	pending  []*conn
	ready    chan struct{} // cap 1: pending grew
	closed   bool
	closedCh chan struct{}
}

var _ rdma.Listener = (*listener)(nil)

// Next waits for the next connection request.
func (l *listener) Next(ctx context.Context) (rdma.ConnRequest, error) {
	m := l.m
	for {
		m.mu.Lock()
		for len(l.pending) > 0 {
			c := l.pending[0]
			l.pending[0] = nil
			l.pending = l.pending[1:]
			if c.state == stReqRcvd || c.state == stMRAReqSent {
				m.mu.Unlock()
				return &request{c}, nil
			}
		}
		closed := l.closed
		m.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("ibcm: listener on port %d: %w", l.port, rdma.ErrClosed)
		}
		select {
		case <-l.ready:
		case <-l.closedCh:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Addr returns the local address and port listened on.
func (l *listener) Addr() netip.AddrPort { return netip.AddrPortFrom(l.m.addr, l.port) }

// Close stops listening and rejects the requests not yet taken by Next.
func (l *listener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *listener) closeLocked() {
	if l.closed {
		return
	}
	m := l.m
	l.closed = true
	close(l.closedCh)
	if m.listeners[l.port] == l {
		delete(m.listeners, l.port)
	}
	for _, c := range l.pending {
		if (c.state == stReqRcvd || c.state == stMRAReqSent) && !c.answered {
			m.sendConn(c, formatREJ(c, c.state, wire.REJConsumerDefined, nil, nil))
			c.lastREJ = fmt.Errorf("ibcm: listener on port %d closed: %w", l.port, rdma.ErrClosed)
			m.removeConn(c)
		}
	}
	l.pending = nil
	m.log.Debug("listener closed", "port", l.port)
}

// request is a connection request handed out by Next.
type request struct{ c *conn }

var _ rdma.ConnRequest = (*request)(nil)

// RemoteAddr returns the requester's address and port from the rdma_cm header.
func (r *request) RemoteAddr() netip.AddrPort { return r.c.remote }

// LocalAddr returns the address and port the request was sent to.
func (r *request) LocalAddr() netip.AddrPort { return r.c.local }

// PrivateData returns the 56 bytes of private data after the rdma_cm header.
func (r *request) PrivateData() []byte { return r.c.privateData }

// Param returns the requester's parameters; PathMTU is the negotiated MTU.
func (r *request) Param() rdma.ConnParam { return r.c.peerParam }

// claim marks the request answered, or says why it cannot be (m.mu held).
func (c *conn) claim() error {
	if c.answered {
		return errNotPending
	}
	if c.state != stReqRcvd && c.state != stMRAReqSent {
		if c.lastREJ != nil {
			return c.lastREJ
		}
		return errNotPending
	}
	c.answered = true
	return nil
}

// Accept connects qp to the requester.
func (r *request) Accept(ctx context.Context, qp rdma.QP, privateData []byte, p rdma.ConnParam) (rdma.Conn, error) {
	c := r.c
	m := c.m
	fail := func(err error) (rdma.Conn, error) { return nil, fmt.Errorf("ibcm: accept from %v: %w", c.remote, err) }
	switch {
	case len(privateData) > rdma.MaxAcceptPrivateData:
		return fail(fmt.Errorf("%d bytes of private data exceed %d: %w", len(privateData), rdma.MaxAcceptPrivateData, rdma.ErrInvalidArgument))
	case qp == nil || qp.Type() != rdma.QPTypeRC:
		return fail(fmt.Errorf("need an RC QP: %w", rdma.ErrInvalidArgument))
	case p.RNRRetryCount > 7:
		return fail(fmt.Errorf("RNR retry count %d: %w", p.RNRRetryCount, rdma.ErrInvalidArgument))
	}
	m.mu.Lock()
	if err := c.claim(); err != nil {
		m.mu.Unlock()
		return fail(err)
	}
	c.qp, c.localQPN = qp, qp.QPN()
	c.rqPSN = randPSN()
	c.rr = min(p.ResponderResources, c.peerParam.InitiatorDepth)
	c.id = min(p.InitiatorDepth, c.peerParam.ResponderResources)
	rep, ferr := m.formatREP(c, p, privateData)
	m.mu.Unlock()

	err := ferr
	if err == nil {
		err = toInit(qp)
	}
	if err == nil {
		err = c.toRTR()
	}
	m.mu.Lock()
	if c.state != stReqRcvd && c.state != stMRAReqSent {
		c.qpToErr()
		why := c.lastREJ
		m.mu.Unlock()
		if why == nil {
			why = errNotPending
		}
		return fail(why)
	}
	if err != nil {
		m.sendConn(c, formatREJ(c, c.state, wire.REJConsumerDefined, nil, nil))
		c.qpToErr()
		m.removeConn(c)
		m.mu.Unlock()
		return fail(err)
	}
	c.state = stRepSent
	m.byLocalQPN[c.localQPN] = c
	m.log.Debug("sending REP", "remote", c.remote, "local_id", c.localID, "qpn", c.localQPN, "rr", c.rr, "id", c.id)
	c.sendAndArm(rep, c.respTime, c.maxRetries)
	m.mu.Unlock()

	var res error
	select {
	case res = <-c.result:
	case <-ctx.Done():
		m.mu.Lock()
		if c.state == stRepSent || c.state == stMRARepRcvd {
			// cm_destroy_id in REP_SENT: REJ "consumer defined".
			m.sendConn(c, formatREJ(c, c.state, wire.REJConsumerDefined, nil, nil))
			c.qpToErr()
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
	return c, nil
}

// Reject answers the request with REJ reason 28 (consumer defined).
func (r *request) Reject(privateData []byte) error {
	c := r.c
	m := c.m
	if len(privateData) > rdma.MaxRejectPrivateData {
		return fmt.Errorf("ibcm: reject %v: %d bytes of private data exceed %d: %w", c.remote, len(privateData), rdma.MaxRejectPrivateData, rdma.ErrInvalidArgument)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := c.claim(); err != nil {
		return fmt.Errorf("ibcm: reject %v: %w", c.remote, err)
	}
	m.log.Debug("sending REJ (consumer defined)", "remote", c.remote, "private_data_len", len(privateData))
	m.sendConn(c, formatREJ(c, c.state, wire.REJConsumerDefined, nil, privateData))
	m.removeConn(c)
	return nil
}

// requestFromREQ builds the passive connection a REQ from src asks for,
// without registering it (m.mu held).
func (m *Manager) requestFromREQ(src netip.Addr, mad wire.MAD, port uint16) (*conn, error) {
	req := wire.REQ(mad.Data())
	hdr, err := wire.ParseCMAHdr(req.PrivateData())
	if err != nil {
		return nil, err
	}
	path := req.Primary()
	c := m.newConn(false)
	c.localID = m.newLocalID()
	c.remoteID = req.LocalCommID()
	c.remoteGUID = req.LocalCAGUID()
	c.tid = mad.TID()
	c.peer = src
	c.local = netip.AddrPortFrom(m.addr, port)
	c.remote = netip.AddrPortFrom(hdr.SrcAddr(), hdr.Port())
	c.remoteQPN = req.LocalQPN()
	c.sqPSN = req.StartingPSN()
	c.mtu = m.mtu
	if mtu := rdma.MTU(req.PathMTU()); mtu.Valid() && mtu < c.mtu {
		c.mtu = mtu
	}
	c.retryCount = min(req.RetryCount(), 7)
	c.rnrRetry = req.RNRRetryCount()
	c.ackTimeout = path.LocalACKTimeout()
	c.avTimeout = c.ackTimeout
	c.flowLabel = path.FlowLabel()
	if h := path.HopLimit(); h > 1 {
		c.hopLimit = h
	}
	c.trafficClass = path.TrafficClass()
	c.peerParam = rdma.ConnParam{
		ResponderResources: req.ResponderResources(),
		InitiatorDepth:     req.InitiatorDepth(),
		RetryCount:         req.RetryCount(),
		RNRRetryCount:      req.RNRRetryCount(),
		FlowControl:        req.EndToEndFlowControl(),
		SRQ:                req.SRQ(),
		QPN:                c.remoteQPN,
		StartingPSN:        c.sqPSN,
		PathMTU:            c.mtu,
		LocalACKTimeout:    c.ackTimeout,
	}
	c.privateData = append([]byte(nil), req.PrivateData()[wire.CMAHdrLen:]...)
	c.reqArrived = time.Now()
	c.peerRespTimeout = req.RemoteCMResponseTimeout()
	c.respTime = cmTimeout(req.LocalCMResponseTimeout())
	c.maxRetries = int(req.MaxCMRetries())
	c.state = stReqRcvd
	return c, nil
}

func (m *Manager) onREQ(src netip.Addr, mad wire.MAD) {
	req := wire.REQ(mad.Data())
	guid := req.LocalCAGUID()
	if c := m.byRemote[remoteKey{req.LocalCommID(), guid}]; c != nil {
		m.dupREQ(c)
		return
	}
	if t := req.TransportServiceType(); t != wire.CMTransportRC {
		m.log.Debug("REQ for an unsupported transport", "src", src, "transport", t)
		m.issueREJ(src, mad, wire.REJInvalidTransportType, wire.CMMessageREQ)
		return
	}
	if o := m.byRemoteQPN[remoteKey{req.LocalQPN(), guid}]; o != nil {
		// cm_match_req: a new REQ from a QP that is still connected.
		m.log.Info("stale connection: REQ from a QP still connected", "src", src, "remote_qpn", req.LocalQPN())
		m.issueREJ(src, mad, wire.REJStaleConn, wire.CMMessageREQ)
		if o.state == stEstablished {
			o.startDisconnect()
		}
		return
	}
	port, ok := wire.PortFromServiceID(req.ServiceID())
	l := m.listeners[port]
	if !ok || l == nil {
		m.log.Debug("REQ for a service nobody listens on", "src", src, "service_id", fmt.Sprintf("%#016x", req.ServiceID()))
		m.issueREJ(src, mad, wire.REJInvalidServiceID, wire.CMMessageREQ)
		return
	}
	if len(l.pending) >= maxBacklog {
		// Nobody takes the requests: drop, the requester retries.
		m.log.Warn("listener backlog full; REQ dropped", "port", port, "src", src)
		return
	}
	c, err := m.requestFromREQ(src, mad, port)
	if err != nil {
		m.log.Debug("REQ with a bad rdma_cm header rejected", "src", src, "error", err)
		m.issueREJ(src, mad, wire.REJConsumerDefined, wire.CMMessageREQ)
		return
	}
	c.listener = l
	m.byLocalID[c.localID] = c
	m.byRemote[remoteKey{c.remoteID, c.remoteGUID}] = c
	m.byRemoteQPN[remoteKey{c.remoteQPN, c.remoteGUID}] = c
	l.pending = append(l.pending, c)
	select {
	case l.ready <- struct{}{}:
	default:
	}
	m.log.Debug("REQ received", "remote", c.remote, "port", port, "remote_comm_id", c.remoteID, "remote_qpn", c.remoteQPN)
}

// dupREQ answers a REQ for a connection that exists (cm_dup_req_handler).
func (m *Manager) dupREQ(c *conn) {
	switch c.state {
	case stReqRcvd:
		// Not answered yet: acknowledge the REQ once the requester has
		// waited for a good part of its timeout (a duplicate arriving
		// earlier is the network's, not a retransmission).
		if time.Since(c.reqArrived) >= cmTimeout(c.peerRespTimeout)/2 {
			c.mra = formatMRA(c, wire.CMMessageREQ, m.opts.MRAServiceTimeout)
			c.state = stMRAReqSent
			m.log.Debug("duplicate REQ: sending MRA", "remote", c.remote)
			m.sendConn(c, c.mra)
		}
	case stMRAReqSent:
		m.sendConn(c, c.mra)
	case stRepSent, stMRARepRcvd:
		// A retransmitted REQ means the REP was lost: send it again
		// (Linux waits for its own REP timer instead).
		if time.Since(c.lastSent) >= cmTimeout(c.peerRespTimeout)/2 {
			m.log.Debug("duplicate REQ: resending REP", "remote", c.remote)
			m.sendConn(c, c.msg)
			c.lastSent = time.Now()
		}
	case stTimeWait:
		m.sendConn(c, formatREJ(c, stTimeWait, wire.REJStaleConn, nil, nil))
	default:
		m.log.Debug("duplicate REQ ignored", "remote", c.remote, "state", c.state)
	}
}
