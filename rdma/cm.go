package rdma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// This file is the connection manager contract: rdma_cm's connected model
// (RDMA_PS_TCP port space) as Go interfaces. On RoCEv2 a provider speaks
// the InfiniBand CM protocol (REQ, MRA, REJ, REP, RTU, DREQ, DREP) in MADs
// on QP1; the libibverbs provider maps these calls onto librdmacm.
//
// Passive side (a target):
//
//	cm, _ := dev.ConnManager()
//	l, _ := cm.Listen(4420)
//	for {
//		req, err := l.Next(ctx)                  // a ConnectRequest
//		...                                      // inspect req.PrivateData(), req.Param()
//		qp, _ := pd.CreateQP(...)                // in state Reset
//		conn, err := req.Accept(ctx, qp, acceptData, param)
//		// or: req.Reject(rejectData)
//		go watch(conn.Events())                  // Disconnected, TimeWaitExit
//	}
//
// Active side (a host):
//
//	qp, _ := pd.CreateQP(...)
//	conn, err := cm.Connect(ctx, addr, 4420, qp, reqData, param)
//	var rej *rdma.RejectError
//	if errors.As(err, &rej) { ... rej.PrivateData ... }
//	... conn.PrivateData() is the peer's accept private data ...
//	conn.Disconnect(ctx)
//
// The connection manager owns the QP's state transitions while it
// connects: Reset→Init (with remote read and write access; a QP the
// caller already moved to Init, to post receives before the peer can
// send, goes Init→Init), →RTR with the peer's QP number, starting PSN and
// the negotiated path MTU and responder resources, →RTS with the
// negotiated initiator depth, retry and RNR retry counts. On disconnect (either side) it moves the QP to
// Err, so outstanding work requests complete with WRFlushError. Destroying
// the QP stays the caller's job, after Done is closed.

// ServiceIDTCPBase is the InfiniBand service ID of RDMA_PS_TCP port 0;
// a listener on port p listens on ServiceIDTCPBase + p.
const ServiceIDTCPBase = 0x0000000001060000

// ServiceID returns the RDMA_PS_TCP service ID of a port.
func ServiceID(port uint16) uint64 { return ServiceIDTCPBase + uint64(port) }

// Private data limits in bytes: the CM message's private data minus the
// 36-byte rdma_cm header, where rdma_cm adds one (REQ).
const (
	MaxConnectPrivateData    = 56  // REQ: 92 − 36
	MaxAcceptPrivateData     = 196 // REP
	MaxRejectPrivateData     = 148 // REJ
	MaxDisconnectPrivateData = 220 // DREQ, DREP
)

// ConnParam carries the connection parameters of rdma_conn_param plus
// what the REQ and REP tell about the peer's QP.
//
// As input (Connect, Accept): ResponderResources is how many RDMA READs
// this side accepts at once (the QP's MaxDestRdAtomic), InitiatorDepth
// how many it issues at once (MaxRdAtomic), RetryCount and RNRRetryCount
// what the peer should use when sending to this side, FlowControl and SRQ
// as in the REQ/REP. QPN and StartingPSN are ignored (the QP's number and
// a random PSN are used); PathMTU 0 means the device's active MTU.
//
// As output (ConnRequest.Param, Conn.Param): the peer's values from its
// REQ or REP, and the negotiated path MTU.
type ConnParam struct {
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 0..7
	RNRRetryCount      uint8 // 0..7, 7 = infinite
	FlowControl        bool
	SRQ                bool
	QPN                uint32 // the peer's QP number
	// StartingPSN is the starting PSN of the peer's REQ or REP. Linux's
	// ib_cm (and so every rdma_cm peer) advertises there the first PSN
	// it expects to receive: the first PSN this side sends.
	StartingPSN uint32
	PathMTU     MTU
	// LocalACKTimeout is the peer's local ACK timeout code (REQ only; see TimeoutDuration).
	LocalACKTimeout uint8
}

// ConnManager establishes RC connections over a device.
type ConnManager interface {
	// Listen starts accepting connection requests for an RDMA_PS_TCP port
	// on the device's address. A second listener on the same port fails.
	Listen(port uint16) (Listener, error)
	// Connect connects qp (in state Reset or Init, created on this device) to the
	// listener at addr:port: it sends a REQ with privateData (at most
	// MaxConnectPrivateData bytes, after the rdma_cm header the provider
	// prepends) and param, and returns once the connection is
	// established. The returned Conn's PrivateData is the peer's accept
	// private data. A reject yields a *RejectError (with the peer's reject
	// private data); no answer after the CM's retries yields an error
	// wrapping ErrUnreachable; ctx bounds the whole exchange.
	Connect(ctx context.Context, addr netip.Addr, port uint16, qp QP, privateData []byte, param ConnParam) (Conn, error)
	// Close stops all listeners; established connections are not touched.
	Close() error
}

// Listener yields the connection requests that arrive for one port.
type Listener interface {
	// Next waits for the next connection request. Each request must be
	// answered with Accept or Reject; unanswered requests time out at the
	// peer.
	Next(ctx context.Context) (ConnRequest, error)
	// Addr returns the local address and port listened on.
	Addr() netip.AddrPort
	// Close stops listening; later REQs for the port are rejected with
	// RejectInvalidServiceID. Pending requests are rejected.
	Close() error
}

// ConnRequest is one incoming connection request (RDMA_CM_EVENT_CONNECT_REQUEST).
type ConnRequest interface {
	// RemoteAddr returns the peer's address and source port from the rdma_cm header.
	RemoteAddr() netip.AddrPort
	// LocalAddr returns the address and port the request was sent to.
	LocalAddr() netip.AddrPort
	// PrivateData returns the requester's private data after the rdma_cm header.
	PrivateData() []byte
	// Param returns the requester's connection parameters.
	Param() ConnParam
	// Accept connects qp (in state Reset or Init, created on the listening device)
	// to the requester: the CM brings it to RTR, sends a REP with
	// privateData (at most MaxAcceptPrivateData bytes) and param, and
	// returns once the RTU (or the first packet on qp) arrived and qp is
	// in RTS. A REJ from the peer gives a *RejectError, no RTU an error
	// wrapping ErrUnreachable.
	Accept(ctx context.Context, qp QP, privateData []byte, param ConnParam) (Conn, error)
	// Reject answers with a REJ (reason RejectConsumer) carrying
	// privateData (at most MaxRejectPrivateData bytes).
	Reject(privateData []byte) error
}

// Conn is an established connection.
type Conn interface {
	// QP returns the connected queue pair.
	QP() QP
	// LocalAddr returns this side's address and port.
	LocalAddr() netip.AddrPort
	// RemoteAddr returns the peer's address and port.
	RemoteAddr() netip.AddrPort
	// Param returns the peer's parameters and the negotiated path MTU.
	Param() ConnParam
	// PrivateData returns the peer's private data: its REQ's on the
	// passive side, its REP's on the active side.
	PrivateData() []byte
	// Events delivers EventEstablished first, then EventDisconnected when
	// either side disconnects (or the QP fails), then EventTimeWaitExit;
	// the channel is closed after the last event. Events are not lost:
	// the channel is buffered for all of them.
	Events() <-chan ConnEvent
	// Disconnect sends a DREQ, moves the QP to Err and waits for the DREP
	// (or the CM timeout, or ctx). Calling it again, or after the peer
	// disconnected, returns nil.
	Disconnect(ctx context.Context) error
	// Done is closed when the connection is disconnected.
	Done() <-chan struct{}
}

// ConnEventType names a connection event (enum rdma_cm_event_type).
type ConnEventType uint8

// Connection events.
const (
	EventConnectRequest ConnEventType = iota + 1 // a REQ arrived (Listener.Next)
	EventConnectError                            // the exchange failed locally (bad REP, QP error)
	EventUnreachable                             // no answer to REQ or REP
	EventRejected                                // the peer sent a REJ
	EventEstablished                             // REP (active) or RTU (passive) arrived; the QP is in RTS
	EventDisconnected                            // a DREQ arrived or ours was answered; the QP is in Err
	EventTimeWaitExit                            // the QP number may be reused
	EventDeviceRemoval                           // the device went away
)

// String names the event as rdma_event_str does.
func (t ConnEventType) String() string {
	switch t {
	case EventConnectRequest:
		return "RDMA_CM_EVENT_CONNECT_REQUEST"
	case EventConnectError:
		return "RDMA_CM_EVENT_CONNECT_ERROR"
	case EventUnreachable:
		return "RDMA_CM_EVENT_UNREACHABLE"
	case EventRejected:
		return "RDMA_CM_EVENT_REJECTED"
	case EventEstablished:
		return "RDMA_CM_EVENT_ESTABLISHED"
	case EventDisconnected:
		return "RDMA_CM_EVENT_DISCONNECTED"
	case EventTimeWaitExit:
		return "RDMA_CM_EVENT_TIMEWAIT_EXIT"
	case EventDeviceRemoval:
		return "RDMA_CM_EVENT_DEVICE_REMOVAL"
	}
	return fmt.Sprintf("ConnEventType(%d)", uint8(t))
}

// ConnEvent is one event on a connection.
type ConnEvent struct {
	Type ConnEventType
	// PrivateData is the private data of the message that caused the
	// event (REP, REJ, DREQ), if any.
	PrivateData []byte
	// Err holds the cause of EventConnectError, EventUnreachable and
	// EventRejected (a *RejectError).
	Err error
}

// ErrUnreachable is wrapped by Connect and Accept when the peer did not
// answer within the CM's timeouts and retries.
var ErrUnreachable = errors.New("rdma: peer unreachable")

// RejectReason is the reason code of a CM REJ (IBA vol. 1 table 112).
type RejectReason uint16

// Reject reasons a connection manager sends or reports.
const (
	RejectNoQP             RejectReason = 1
	RejectNoResources      RejectReason = 3
	RejectTimeout          RejectReason = 4
	RejectUnsupportedReq   RejectReason = 5
	RejectInvalidCommID    RejectReason = 6
	RejectInvalidServiceID RejectReason = 8
	RejectInvalidTransport RejectReason = 9
	RejectStaleConn        RejectReason = 10
	RejectInvalidGID       RejectReason = 12
	RejectInvalidMTU       RejectReason = 26
	RejectInsufficientResp RejectReason = 27
	RejectConsumer         RejectReason = 28 // rejected by the application (rdma_reject)
	RejectInvalidRNRRetry  RejectReason = 29
	RejectInvalidClassVer  RejectReason = 31
)

// String names the reason as ib_cm's ibcm_reject_msg does.
func (r RejectReason) String() string {
	switch r {
	case RejectNoQP:
		return "no QP"
	case RejectNoResources:
		return "no resources"
	case RejectTimeout:
		return "timeout"
	case RejectUnsupportedReq:
		return "unsupported request"
	case RejectInvalidCommID:
		return "invalid comm ID"
	case RejectInvalidServiceID:
		return "invalid service ID"
	case RejectInvalidTransport:
		return "invalid transport type"
	case RejectStaleConn:
		return "stale connection"
	case RejectInvalidGID:
		return "invalid GID"
	case RejectInvalidMTU:
		return "invalid MTU"
	case RejectInsufficientResp:
		return "insufficient responder resources"
	case RejectConsumer:
		return "consumer defined"
	case RejectInvalidRNRRetry:
		return "invalid RNR retry"
	case RejectInvalidClassVer:
		return "invalid class version"
	}
	return fmt.Sprintf("reject reason %d", uint16(r))
}

// RejectError is returned by Connect and Accept when the peer rejected
// the connection; PrivateData is the REJ's private data (for an NVMe-oF
// target: recfmt and status).
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
}

// Error describes the rejection.
func (e *RejectError) Error() string {
	return fmt.Sprintf("rdma: connection rejected: %s (%d bytes of private data)", e.Reason, len(e.PrivateData))
}
