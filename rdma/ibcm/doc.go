// Package ibcm is the InfiniBand communication manager (IBA vol. 1
// chapter 12) with the rdma_cm conventions of Linux (drivers/infiniband/
// core/cm.c and cma.c), for RoCEv2 providers that have a GSI QP: it
// implements rdma.ConnManager with REQ, MRA, REJ, REP, RTU, DREQ and DREP
// MADs sent as UD SENDs to QP 1 (Q_Key 0x80010000).
//
// # Construction
//
//	m, err := ibcm.New(dev, ibcm.Options{Logger: log})
//
// New creates what it needs through the public rdma API of dev: a
// protection domain, one completion queue, a QP of type rdma.QPTypeGSI
// (brought Reset→Init→RTR→RTS), registered send and receive buffers, and
// one goroutine that waits on the CQ. A provider's Device.ConnManager
// returns the manager; the provider's Device.Close calls Destroy (Close
// only stops the listeners, as rdma.ConnManager says).
//
// A provider should call CommEstablished(qpn) when an RC QP in state RTR
// receives its first valid packet (IB_EVENT_COMM_EST): the passive side of
// a connection whose RTU was lost then becomes established at once
// instead of after the REP retries. It does not block.
//
// # Behaviour
//
// Active side (Connect): the QP goes Reset→Init, a REQ is sent with a
// random local communication ID and starting PSN, the 36-byte rdma_cm
// header and the caller's private data, and is retried every CM response
// timeout + 2 × packet life time (6.4 s with the defaults, as Linux) up to
// MaxCMRetries times. On the REP the QP goes Init→RTR→RTS with the
// negotiated values, then the RTU is sent. An MRA extends the wait; a REJ
// becomes a *rdma.RejectError; silence becomes rdma.ErrUnreachable.
// Cancelling ctx while waiting sends a REJ with reason timeout, as
// cm_destroy_id does.
//
// Passive side (Listener.Next, Accept, Reject): a REQ for an RDMA_PS_TCP
// service ID with a listener is queued; without one it is answered with
// REJ reason 8 (invalid service ID). Accept moves the QP Reset→Init→RTR,
// sends the REP (responder resources = min(ours, the requester's
// initiator depth), initiator depth = min(ours, its responder resources)),
// retries it with the requester's CM response timeout and retry budget,
// and moves the QP to RTS on the RTU or on CommEstablished. Reject sends
// REJ reason 28 with the caller's private data. Duplicate REQs (same
// communication ID and CA GUID) create no second connection: while the
// application has not answered for half the requester's timeout they get
// an MRA (service timeout Options.MRAServiceTimeout), after Accept the
// REP is sent again, in TimeWait a REJ "stale connection". A REQ from a
// QP (number and CA GUID) that is still connected here is rejected as
// stale and the old connection is disconnected.
//
// Disconnect moves the QP to Err and sends a DREQ (retried like the
// REQ/REP); a DREQ from the peer moves the QP to Err and is answered with
// a DREP. Both sides then spend TimeWait (4.096 µs × 2^local ACK timeout,
// as Linux) answering retransmitted DREQs and stale REQs before
// EventTimeWaitExit.
//
// Responses reuse the transaction ID of the request they answer (REP,
// RTU, MRA and REJ carry the REQ's TID; a DREP the DREQ's); requests carry
// a TID made of a per-manager random high half and the local
// communication ID, as cm_form_tid builds it.
//
// Private data is returned at the fixed size of its CM message field, as
// rdma_cm does: 56 bytes after the rdma_cm header of a REQ, 196 bytes of a
// REP, 148 of a REJ (the protocol carries no length).
package ibcm
