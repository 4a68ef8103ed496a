package soft

import (
	"fmt"
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// wqeState is the progress of a send work queue entry.
type wqeState uint8

const (
	wqePosted   wqeState = iota // not sent yet (or reset for a retransmission)
	wqeInflight                 // PSNs assigned, some or all packets sent, not acknowledged
	wqeDone                     // executed locally (LOCAL_INV, UD, a request that failed at post), awaiting its turn to complete
)

// sendWQE is a send work request as the QP keeps it. Its slices are
// allocated with the QP and reused.
type sendWQE struct {
	wrid    uint64
	opcode  rdma.WROpcode
	flags   rdma.SendFlags
	imm     uint32
	invRKey uint32
	raddr   uint64
	rkey    uint32
	segs    []seg  // cap: MaxSendSGE
	inline  []byte // cap: MaxInlineData
	isInl   bool
	length  int
	status  rdma.WCStatus // an error found at post time or while sending
	// UD destination.
	dst        [16]byte // IPv4-mapped for IPv4
	tos        uint8    // the AH's traffic class: the datagram's IP TOS / IPv6 traffic class
	rqpn, qkey uint32
	// Progress.
	state       wqeState
	first, last uint32 // PSN range (READ: of the responses)
}

// recvWQE is a receive work request.
type recvWQE struct {
	wrid   uint64
	segs   []seg
	length int
	status rdma.WCStatus
}

// qp is a queue pair; it implements rdma.QP. All mutable state is
// guarded by mu; the requester, completer and responder run under it.
type qp struct {
	dev    *Device
	pd     *pd
	typ    rdma.QPType
	qpn    uint32
	scq    *cq
	rcq    *cq
	sigAll bool
	cap    rdma.QPCap

	mu        sync.Mutex
	state     rdma.QPState
	destroyed bool
	attr      rdma.QPAttr
	mtu       int           // path MTU in bytes
	dst       [16]byte      // RC: the peer's address (IPv4-mapped for IPv4)
	rto       time.Duration // local ACK timeout, 0 = none

	sq             []sendWQE
	sqHead, sqTail uint64 // completer and producer counters; the requester's is req.cur
	rq             []recvWQE
	rqHead, rqTail uint64
	// With an SRQ (rq empty): the WQE taken from it for the message
	// being received (see srq.go).
	srq       *srq
	rqOwn     recvWQE
	rqOwnHeld bool

	req  requester
	comp completer
	resp responder

	// txMu orders the QP's request packets on the wire. The requester
	// takes it with mu held and keeps it until the packets it built are
	// sent; PostSend and the end of a receive batch release mu first, so
	// that no one waits for their sendmmsg to use the QP, while a later
	// run of the requester still sends after them.
	txMu sync.Mutex

	rtoTimer *time.Timer
	rnrTimer *time.Timer
	// ackTimer sends a delayed acknowledgement (Config.AckDelay) that
	// nothing the QP sent in the meantime carried along.
	ackTimer *time.Timer
	// Receive-goroutine bookkeeping: queued for an ACK or a requester run
	// at the end of the current batch.
	ackQueued  bool
	kickQueued bool
	// commEst is set once the first request arrived in RTR.
	commEst bool
	// src is the socket of the QP's UDP source port (sport.go; nil: the
	// device's own).
	src *srcSock
	// tos is the traffic class of the QP's address vector (RC): the IP
	// TOS / IPv6 traffic class of every datagram it sends, as rxe's
	// prepare4/prepare6 take it from the AV's GRH (tos.go).
	tos uint8
	// stats are the QP's own counters (qpstats.go).
	stats qpCounters
	// cc is the QP's congestion control (congestion.go; nil: off, or
	// not RC).
	cc *qpCC
}

var _ rdma.QP = (*qp)(nil)

// CreateQP creates a queue pair in state Reset.
func (p *pd) CreateQP(a *rdma.QPInitAttr) (rdma.QP, error) {
	d := p.dev
	switch a.Type {
	case rdma.QPTypeRC, rdma.QPTypeUD, rdma.QPTypeGSI:
	default:
		return nil, fmt.Errorf("soft: QP type %s: %w", a.Type, rdma.ErrNotSupported)
	}
	scq, ok1 := a.SendCQ.(*cq)
	rcq, ok2 := a.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("soft: QP needs send and receive CQs of this provider: %w", rdma.ErrInvalidArgument)
	}
	c := a.Cap
	var sq *srq
	if a.SRQ != nil {
		var ok bool
		if sq, ok = a.SRQ.(*srq); !ok || sq.pd.dev != d {
			return nil, fmt.Errorf("soft: QP needs an SRQ of this device: %w", rdma.ErrInvalidArgument)
		}
		c.MaxRecvWR, c.MaxRecvSGE = 1, sq.maxSGE // checked, not allocated
	}
	if c.MaxSendWR <= 0 || c.MaxRecvWR <= 0 || c.MaxSendWR > maxQPWR || c.MaxRecvWR > maxQPWR ||
		c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE ||
		c.MaxInlineData < 0 || c.MaxInlineData > maxInline {
		return nil, fmt.Errorf("soft: QP capabilities %+v: %w", c, rdma.ErrInvalidArgument)
	}
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	q := &qp{dev: d, pd: p, typ: a.Type, scq: scq, rcq: rcq, sigAll: a.SigAll, cap: c, state: rdma.QPSReset}
	q.sq = make([]sendWQE, c.MaxSendWR)
	sgeBuf := make([]seg, c.MaxSendWR*c.MaxSendSGE)
	var inl []byte
	if c.MaxInlineData > 0 {
		inl = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	for i := range q.sq {
		q.sq[i].segs = sgeBuf[i*c.MaxSendSGE : i*c.MaxSendSGE : (i+1)*c.MaxSendSGE]
		if inl != nil {
			q.sq[i].inline = inl[i*c.MaxInlineData : i*c.MaxInlineData : (i+1)*c.MaxInlineData]
		}
	}
	if sq != nil {
		q.srq = sq
		q.rqOwn.segs = make([]seg, 0, sq.maxSGE)
		q.cap.MaxRecvWR = 0
	} else {
		q.rq = make([]recvWQE, c.MaxRecvWR)
		rsgeBuf := make([]seg, c.MaxRecvWR*c.MaxRecvSGE)
		for i := range q.rq {
			q.rq[i].segs = rsgeBuf[i*c.MaxRecvSGE : i*c.MaxRecvSGE : (i+1)*c.MaxRecvSGE]
		}
	}
	if a.Type == rdma.QPTypeGSI {
		q.attr.QKey = rdma.QKeyGSI
	}
	q.rtoTimer = time.AfterFunc(time.Hour, q.onRTO)
	q.rtoTimer.Stop()
	q.rnrTimer = time.AfterFunc(time.Hour, q.onRNRTimer)
	q.rnrTimer.Stop()
	q.ackTimer = time.AfterFunc(time.Hour, q.onAckTimer)
	q.ackTimer.Stop()
	if sq != nil {
		if err := sq.attach(); err != nil {
			return nil, err
		}
	}
	if err := p.use(false); err != nil {
		q.detachSRQ()
		return nil, err
	}
	if err := scq.attach(); err != nil {
		q.detachSRQ()
		p.release(false)
		return nil, err
	}
	if err := rcq.attach(); err != nil {
		q.detachSRQ()
		scq.detach()
		p.release(false)
		return nil, err
	}
	if err := d.addQP(q); err != nil {
		q.detachSRQ()
		rcq.detach()
		scq.detach()
		p.release(false)
		return nil, err
	}
	return q, nil
}

// QPN returns the QP number.
func (q *qp) QPN() uint32 { return q.qpn }

// Type returns the QP type.
func (q *qp) Type() rdma.QPType { return q.typ }

// State returns the current state.
func (q *qp) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Query fills attr with the current attributes.
func (q *qp) Query(attr *rdma.QPAttr) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("soft: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	*attr = q.attr
	attr.State, attr.CurState, attr.Cap = q.state, q.state, q.cap
	return nil
}

// requiredMask returns the attributes a transition needs.
func (q *qp) requiredMask(cur, next rdma.QPState) rdma.QPAttrMask {
	ud := q.typ != rdma.QPTypeRC
	switch {
	case cur == rdma.QPSReset && next == rdma.QPSInit:
		if q.typ == rdma.QPTypeUD {
			return rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrQKey
		}
		if ud {
			return rdma.QPAttrPKeyIndex | rdma.QPAttrPort
		}
		return rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags
	case cur == rdma.QPSInit && next == rdma.QPSRTR:
		if ud {
			return 0
		}
		return rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer
	case cur == rdma.QPSRTR && next == rdma.QPSRTS:
		if ud {
			return rdma.QPAttrSQPSN
		}
		return rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic
	}
	return 0
}

// Modify applies the attributes selected by mask.
func (q *qp) Modify(attr *rdma.QPAttr, mask rdma.QPAttrMask) error {
	defer q.dev.runHandlers()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("soft: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	cur, next := q.state, q.state
	if mask&rdma.QPAttrState != 0 {
		next = attr.State
	}
	if mask&rdma.QPAttrCurState != 0 && attr.CurState != cur {
		return fmt.Errorf("soft: QP %#x is %s, not %s: %w", q.qpn, cur, attr.CurState, rdma.ErrInvalidState)
	}
	if !rdma.CanTransition(cur, next) {
		return fmt.Errorf("soft: QP %#x: %s to %s: %w", q.qpn, cur, next, rdma.ErrInvalidState)
	}
	if need := q.requiredMask(cur, next); mask&need != need {
		return fmt.Errorf("soft: QP %#x: %s to %s needs attribute mask %#x, got %#x: %w", q.qpn, cur, next, uint32(need), uint32(mask), rdma.ErrInvalidArgument)
	}
	if err := q.checkAttr(attr, mask); err != nil {
		return err
	}
	a := &q.attr
	if mask&rdma.QPAttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&rdma.QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&rdma.QPAttrPort != 0 {
		a.Port = attr.Port
	}
	if mask&rdma.QPAttrQKey != 0 && q.typ == rdma.QPTypeUD {
		a.QKey = attr.QKey
	}
	if mask&rdma.QPAttrAV != 0 {
		a.AH = attr.AH
		q.dst = attr.AH.DGID.Addr().As16()
		q.tos = attr.AH.TrafficClass
	}
	if mask&rdma.QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&rdma.QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
		q.rto = rdma.TimeoutDuration(attr.Timeout)
	}
	if mask&rdma.QPAttrRetryCount != 0 {
		a.RetryCount = attr.RetryCount
	}
	if mask&rdma.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&rdma.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN & wire.PSNMask
	}
	if mask&rdma.QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN & wire.PSNMask
	}
	if mask&rdma.QPAttrMaxRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&rdma.QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&rdma.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&rdma.QPAttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN & wire.QPNMask
	}
	if mask&rdma.QPAttrAV != 0 && q.typ == rdma.QPTypeRC {
		q.setSourcePort(rcSourcePort(a.AH.FlowLabel, q.qpn, a.DestQPN)) // as rxe_modify_qp
	}
	if next == cur {
		if cur == rdma.QPSRTS {
			q.kick()
		}
		return nil
	}
	switch next {
	case rdma.QPSReset:
		q.reset()
	case rdma.QPSErr:
		q.enterError()
	case rdma.QPSRTR:
		q.state = next
		if q.typ == rdma.QPTypeRC {
			q.mtu = a.PathMTU.Bytes()
		} else {
			q.mtu = q.dev.mtu.Bytes()
		}
		q.resp = responder{psn: a.RQPSN}
		q.commEst = false
	case rdma.QPSRTS:
		q.state = next
		if cur == rdma.QPSRTR {
			q.req = requester{psn: a.SQPSN, high: a.SQPSN, cur: q.sqHead}
			q.comp = completer{psn: a.SQPSN, retryLeft: a.RetryCount, rnrLeft: a.RNRRetry}
		}
		q.kick()
	default:
		q.state = next
	}
	return nil
}

// checkAttr validates the attribute values selected by mask.
func (q *qp) checkAttr(a *rdma.QPAttr, mask rdma.QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("soft: QP %#x: %s %v: %w", q.qpn, what, v, rdma.ErrInvalidArgument)
	}
	if mask&rdma.QPAttrPathMTU != 0 && (!a.PathMTU.Valid() || a.PathMTU > q.dev.mtu) {
		return bad("path MTU", a.PathMTU)
	}
	if mask&rdma.QPAttrAV != 0 && !q.dev.sameFamily(a.AH.DGID) {
		return bad(fmt.Sprintf("destination GID (not of the family of %v)", q.dev.addr), a.AH.DGID)
	}
	if mask&rdma.QPAttrRetryCount != 0 && a.RetryCount > 7 {
		return bad("retry count", a.RetryCount)
	}
	if mask&rdma.QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("RNR retry", a.RNRRetry)
	}
	if mask&rdma.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min RNR timer", a.MinRNRTimer)
	}
	if mask&rdma.QPAttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout", a.Timeout)
	}
	if mask&rdma.QPAttrMaxRdAtomic != 0 && int(a.MaxRdAtomic) > maxRdAtomic {
		return bad("max_rd_atomic", a.MaxRdAtomic)
	}
	if mask&rdma.QPAttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > maxRdAtomic {
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	}
	if mask&rdma.QPAttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return bad("P_Key index", a.PKeyIndex)
	}
	return nil
}

// kick runs the requester if the QP can send (q.mu held).
func (q *qp) kick() {
	if !q.canSend() {
		return
	}
	q.txMu.Lock()
	tx := q.dev.getTx()
	tx.forQP(q)
	q.runRequester(tx)
	tx.flush()
	q.txMu.Unlock()
	q.dev.putTx(tx)
}

// canSend reports whether the requester has work it may send now.
func (q *qp) canSend() bool {
	return (q.state == rdma.QPSRTS || q.state == rdma.QPSSQD) && q.req.cur != q.sqTail
}

// Destroy releases the QP.
func (q *qp) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return fmt.Errorf("soft: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	q.destroyed = true
	q.stopTimers()
	q.state = rdma.QPSReset
	q.srqReturn()
	q.mu.Unlock()
	q.detachSRQ()
	q.dev.removeQP(q)
	q.scq.detach()
	q.rcq.detach()
	q.pd.release(false)
	return nil
}

func (q *qp) stopTimers() {
	q.rtoTimer.Stop()
	q.rnrTimer.Stop()
	q.ackTimer.Stop()
	q.stopPaceTimer()
	q.resp.ackArmed = false
	q.comp.rtoArmed = false
	q.req.rnrWait = false
}

// reset empties both queues without completions (Modify to Reset).
func (q *qp) reset() {
	q.stopTimers()
	q.state = rdma.QPSReset
	q.sqHead, q.sqTail, q.rqHead, q.rqTail = 0, 0, 0, 0
	q.srqReturn()
	q.req, q.comp, q.resp = requester{}, completer{}, responder{}
	if q.cc != nil {
		q.cc.lastCNP, q.cc.rp = time.Time{}, newDCQCN(q.cc.rp.p)
	}
}

// enterError moves the QP to the error state and flushes both queues.
func (q *qp) enterError() {
	if q.state == rdma.QPSErr {
		return
	}
	q.state = rdma.QPSErr
	q.stopTimers()
	q.flushSQ()
	q.flushRQ()
	q.resp = responder{psn: q.resp.psn}
}

// flushSQ completes every outstanding send WQE with WRFlushError.
func (q *qp) flushSQ() {
	for q.sqHead != q.sqTail {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		wc := rdma.WorkCompletion{WRID: w.wrid, Status: rdma.WRFlushError, Opcode: wcOpcode(w.opcode), QPN: q.qpn}
		q.scq.push(&wc)
		q.sqHead++
	}
	q.req = requester{cur: q.sqHead, psn: q.req.psn, high: q.req.high}
}

// flushRQ completes every outstanding receive WQE with WRFlushError.
func (q *qp) flushRQ() {
	if q.srq != nil {
		// Only the WQE of a message begun: the SRQ's are not the QP's.
		if q.rqOwnHeld {
			wc := rdma.WorkCompletion{Status: rdma.WRFlushError, Opcode: rdma.WCRecv}
			q.completeRecv(&wc)
		}
		return
	}
	for q.rqHead != q.rqTail {
		w := &q.rq[q.rqHead%uint64(len(q.rq))]
		wc := rdma.WorkCompletion{WRID: w.wrid, Status: rdma.WRFlushError, Opcode: rdma.WCRecv, QPN: q.qpn}
		q.rcq.push(&wc)
		q.rqHead++
	}
}

// wcOpcode maps a send opcode to its completion opcode.
func wcOpcode(op rdma.WROpcode) rdma.WCOpcode {
	switch op {
	case rdma.WRRDMAWrite, rdma.WRRDMAWriteWithImm:
		return rdma.WCRDMAWrite
	case rdma.WRRDMARead:
		return rdma.WCRDMARead
	case rdma.WRLocalInv:
		return rdma.WCLocalInv
	case rdma.WRAtomicCmpSwp:
		return rdma.WCCompSwap
	case rdma.WRAtomicFetchAdd:
		return rdma.WCFetchAdd
	case rdma.WRBindMW:
		return rdma.WCBindMW
	}
	return rdma.WCSend
}

// completeHead completes the send WQE at the head of the queue with
// status (a status recorded in the WQE takes precedence over Success).
// It returns false when the completion was an error: the caller moves
// the QP to the error state.
func (q *qp) completeHead(status rdma.WCStatus) bool {
	w := &q.sq[q.sqHead%uint64(len(q.sq))]
	if status == rdma.Success {
		status = w.status
	}
	if w.opcode == rdma.WRRDMARead && w.state == wqeInflight && q.req.readWQEs > 0 {
		q.req.readWQEs--
	}
	if status != rdma.Success || w.flags&rdma.SendSignaled != 0 || q.sigAll {
		wc := rdma.WorkCompletion{WRID: w.wrid, Status: status, Opcode: wcOpcode(w.opcode), ByteLen: uint32(w.length), QPN: q.qpn}
		if !q.scq.push(&wc) {
			status = rdma.GeneralError // CQ overflow: the QP goes to the error state
		}
	}
	w.state = wqePosted
	q.sqHead++
	if q.req.cur < q.sqHead {
		// The requester was still (re)sending this WQE when a later
		// acknowledgement covered it: continue after it.
		q.req.cur = q.sqHead
		q.req.curOff = 0
		if next := wire.PSNAdd(w.last, 1); wire.PSNDiff(q.req.psn, next) < 0 {
			q.req.psn = next
		}
	}
	return status == rdma.Success
}

// completeDone completes, in order, the WQEs at the head of the send
// queue that need no acknowledgement (local operations, UD sends and
// requests that failed before being sent).
func (q *qp) completeDone() {
	for q.sqHead != q.req.cur {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		if w.state != wqeDone {
			return
		}
		if !q.completeHead(w.status) {
			if q.typ == rdma.QPTypeRC {
				q.enterError()
				return
			}
		}
	}
}

// PostSend queues a chain of send work requests.
func (q *qp) PostSend(wr *rdma.SendWR) error {
	q.mu.Lock()
	var err error
	n := 0
	for w := wr; w != nil; w = w.Next {
		if err = q.postSend(w); err != nil {
			err = &rdma.PostError{Index: n, Err: err}
			break
		}
		n++
	}
	var tx *txBatch
	if n > 0 {
		switch q.state {
		case rdma.QPSErr:
			q.flushSQ()
		default:
			if !q.dev.handlers.deferKick(q) && q.canSend() {
				q.txMu.Lock()
				tx = q.dev.getTx()
				tx.forQP(q)
				q.runRequester(tx)
				// A delayed ACK leaves with the requests, after them: a
				// shorter packet ends their GSO run (one datagram).
				q.flushAckOutside(tx)
			}
		}
	}
	q.mu.Unlock()
	if tx != nil {
		// Sent without the QP lock: the receive goroutine need not wait
		// for this sendmmsg to handle the QP's incoming packets.
		tx.flush()
		q.txMu.Unlock()
		q.dev.putTx(tx)
	}
	q.dev.runHandlers()
	return err
}

func (q *qp) postSend(wr *rdma.SendWR) error {
	if q.destroyed {
		return fmt.Errorf("soft: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	if q.state != rdma.QPSRTS && q.state != rdma.QPSSQD && q.state != rdma.QPSErr {
		return fmt.Errorf("soft: post send on QP %#x in state %s: %w", q.qpn, q.state, rdma.ErrInvalidState)
	}
	if q.sqTail-q.sqHead >= uint64(len(q.sq)) {
		return fmt.Errorf("soft: QP %#x send queue: %w", q.qpn, rdma.ErrQueueFull)
	}
	if len(wr.SGL) > q.cap.MaxSendSGE {
		return fmt.Errorf("soft: %d SGEs, QP %#x allows %d: %w", len(wr.SGL), q.qpn, q.cap.MaxSendSGE, rdma.ErrInvalidArgument)
	}
	switch wr.Opcode {
	case rdma.WRSend, rdma.WRSendWithImm:
	case rdma.WRSendWithInv, rdma.WRRDMAWrite, rdma.WRRDMAWriteWithImm, rdma.WRRDMARead, rdma.WRLocalInv:
		if q.typ != rdma.QPTypeRC {
			return fmt.Errorf("soft: %s on a %s QP: %w", wr.Opcode, q.typ, rdma.ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("soft: opcode %s: %w", wr.Opcode, rdma.ErrNotSupported)
	}
	w := &q.sq[q.sqTail%uint64(len(q.sq))]
	w.wrid, w.opcode, w.flags, w.imm, w.invRKey = wr.WRID, wr.Opcode, wr.Flags, wr.Imm, wr.InvalidateRKey
	w.raddr, w.rkey = wr.RemoteAddr, wr.RKey
	w.segs = w.segs[:0]
	w.isInl = false
	w.length = 0
	w.status = rdma.Success
	w.state = wqePosted
	if q.typ != rdma.QPTypeRC {
		if !q.dev.sameFamily(wr.AH.DGID) {
			return fmt.Errorf("soft: UD destination %s (not of the family of %v): %w", wr.AH.DGID, q.dev.addr, rdma.ErrInvalidArgument)
		}
		w.dst, w.rqpn, w.qkey = wr.AH.DGID.Addr().As16(), wr.RemoteQPN&wire.QPNMask, wr.RemoteQKey
		w.tos = wr.AH.TrafficClass
		if wr.RemoteQKey&0x80000000 != 0 && q.typ == rdma.QPTypeUD {
			w.qkey = q.attr.QKey
		}
	}
	var total uint64
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if wr.Flags&rdma.SendInline != 0 && wr.Opcode != rdma.WRRDMARead && wr.Opcode != rdma.WRLocalInv {
		if total > uint64(q.cap.MaxInlineData) {
			return fmt.Errorf("soft: %d bytes inline, QP %#x allows %d: %w", total, q.qpn, q.cap.MaxInlineData, rdma.ErrInvalidArgument)
		}
		w.isInl = true
		w.inline = w.inline[:total]
		off := 0
		for _, s := range wr.SGL {
			sg, ok := q.dev.mrs.resolveSGE(q.pd, s, 0)
			if !ok {
				return fmt.Errorf("soft: inline SGE (addr %#x, lkey %#x): %w", s.Addr, s.LKey, rdma.ErrInvalidArgument)
			}
			if sg.n > 0 {
				b, ok := sg.enter()
				if !ok {
					return fmt.Errorf("soft: inline SGE (addr %#x, lkey %#x): %w", s.Addr, s.LKey, rdma.ErrInvalidArgument)
				}
				off += copy(w.inline[off:], b)
				sg.m.leave()
			}
		}
	} else if wr.Opcode != rdma.WRLocalInv {
		need := rdma.Access(0)
		if wr.Opcode == rdma.WRRDMARead {
			need = rdma.AccessLocalWrite
		}
		for _, s := range wr.SGL {
			sg, ok := q.dev.mrs.resolveSGE(q.pd, s, need)
			if !ok {
				w.status = rdma.LocalProtectionError
				continue
			}
			if sg.n > 0 {
				w.segs = append(w.segs, sg)
			}
		}
	}
	switch {
	case wr.Opcode == rdma.WRLocalInv:
		total = 0
	case total > maxMsgSize:
		w.status = rdma.LocalLengthError
	case q.typ != rdma.QPTypeRC && total > uint64(q.mtu):
		w.status = rdma.LocalLengthError
	case wr.Opcode == rdma.WRRDMARead && q.attr.MaxRdAtomic == 0:
		w.status = rdma.LocalQPOperationError
	}
	w.length = int(total)
	q.sqTail++
	return nil
}

// PostRecv queues a chain of receive work requests.
func (q *qp) PostRecv(wr *rdma.RecvWR) error {
	defer q.dev.runHandlers()
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	var err error
	for w := wr; w != nil; w = w.Next {
		if err = q.postRecv(w); err != nil {
			err = &rdma.PostError{Index: n, Err: err}
			break
		}
		n++
	}
	if n > 0 && q.state == rdma.QPSErr {
		q.flushRQ()
	}
	return err
}

func (q *qp) postRecv(wr *rdma.RecvWR) error {
	if q.destroyed {
		return fmt.Errorf("soft: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	if q.srq != nil {
		return fmt.Errorf("soft: QP %#x takes its receives from an SRQ: %w", q.qpn, rdma.ErrInvalidArgument)
	}
	if q.state == rdma.QPSReset {
		return fmt.Errorf("soft: post receive on QP %#x in state RESET: %w", q.qpn, rdma.ErrInvalidState)
	}
	if q.rqTail-q.rqHead >= uint64(len(q.rq)) {
		return fmt.Errorf("soft: QP %#x receive queue: %w", q.qpn, rdma.ErrQueueFull)
	}
	if len(wr.SGL) > q.cap.MaxRecvSGE {
		return fmt.Errorf("soft: %d SGEs, QP %#x allows %d: %w", len(wr.SGL), q.qpn, q.cap.MaxRecvSGE, rdma.ErrInvalidArgument)
	}
	q.rq[q.rqTail%uint64(len(q.rq))].fill(q.pd, wr)
	q.rqTail++
	return nil
}

// fill makes w the receive WQE of wr, its SGEs resolved in pd's MRs; an
// SGE that does not resolve marks it for a local protection error.
func (w *recvWQE) fill(pd *pd, wr *rdma.RecvWR) {
	w.wrid = wr.WRID
	w.segs = w.segs[:0]
	w.length = 0
	w.status = rdma.Success
	for _, s := range wr.SGL {
		sg, ok := pd.dev.mrs.resolveSGE(pd, s, rdma.AccessLocalWrite)
		if !ok {
			w.status = rdma.LocalProtectionError
			continue
		}
		if sg.n > 0 {
			w.segs = append(w.segs, sg)
			w.length += sg.n
		}
	}
}

// recvHead returns the receive WQE at the head of the queue, or nil.
func (q *qp) recvHead() *recvWQE {
	if q.srq != nil {
		return q.srqRecvHead()
	}
	if q.rqHead == q.rqTail {
		return nil
	}
	return &q.rq[q.rqHead%uint64(len(q.rq))]
}

// completeRecv completes the receive WQE at the head of the queue.
func (q *qp) completeRecv(wc *rdma.WorkCompletion) bool {
	w := q.recvHead()
	wc.WRID, wc.QPN = w.wrid, q.qpn
	if q.srq != nil {
		q.rqOwnHeld = false
		return q.rcq.push(wc)
	}
	q.rqHead++
	return q.rcq.push(wc)
}
