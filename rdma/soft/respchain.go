package soft

import (
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// The responder's handling of one request packet, as rxe_resp.c's state
// machine (rxe_responder): a chain of steps, each one rule, each
// returning the next step. The checks come first (QP state, PSN, opcode
// sequence, opcode allowed, receive WQE, length, rkey), then execute
// carries the request out, a READ's responses or the receive WQE's
// completion follow, and the acknowledgement last. A check that fails
// returns an error step, which names the NAK and the completion status
// the packet draws (respError).

// respStep is one step of the responder's chain.
type respStep uint8

const (
	respOK respStep = iota // a data step went well (writeDataIn, sendDataIn)
	respCheckQPState
	respCheckPSN
	respCheckOpSeq
	respCheckOpValid
	respCheckResource
	respCheckLength
	respCheckRKey
	respExecute
	respReadReply
	respComplete
	respAcknowledge
	respDuplicate
	respDone

	// The errors (respError).
	respErrPSNOutOfSeq    // a gap before the packet: NAK it once (class B)
	respErrRNR            // no receive WQE: RNR NAK
	respErrInvalidRequest // opcode, length or IETH rkey wrong: NAK Invalid Request
	respErrRKeyViolation  // the remote buffer's rkey, rights or bounds: NAK Remote Access Error
	respErrRecvWQE        // the receive WQE was bad when posted: completed with its status
	respErrRecvLength     // the SEND is longer than its receive WQE
	respErrMalformedWQE   // the receive WQE's buffers cannot take the payload
	respErrCQOverflow     // the receive CQ is full
)

// respPacket is what the chain learns of the packet it handles; it lives
// on responderInput's stack. The packet itself is not in it: the steps
// store pointers from it (the region, into the responder), and escape
// analysis would then move every packet to the heap.
type respPacket struct {
	rx       *rxState
	op       wire.Opcode
	psn      uint32
	payload  []byte
	rw       *recvWQE // the receive WQE of the packet's message, once known
	needRecv bool     // the message consumes a receive WQE
	// The remote buffer of a RETH, once its rkey checked out: region,
	// offset, the generation the check holds for, and length.
	m   *mr
	off int
	gen uint64
	n   int
	inv uint32 // the rkey an IETH invalidated
}

// responderInput handles a request packet (q.mu held, receive goroutine).
func (q *qp) responderInput(p *wire.Packet, rx *rxState) {
	c := respPacket{rx: rx, op: p.Opcode(), psn: p.BTH.PSN(), payload: p.Payload}
	for st := respCheckQPState; st != respDone; {
		switch st {
		case respCheckQPState:
			st = q.checkQPState()
		case respCheckPSN:
			st = q.checkPSN(&c)
		case respCheckOpSeq:
			st = q.checkOpSeq(&c)
		case respCheckOpValid:
			st = q.checkOpValid(&c)
		case respCheckResource:
			st = q.checkResource(&c)
		case respCheckLength:
			st = q.checkLength(p, &c)
		case respCheckRKey:
			st = q.checkRKey(p, &c)
		case respExecute:
			st = q.execute(p, &c)
		case respReadReply:
			st = q.readReply(&c)
		case respComplete:
			st = q.completeMessage(p, &c)
		case respAcknowledge:
			st = q.acknowledge(p, &c)
		case respDuplicate:
			q.duplicate(p, c.psn, rx)
			st = respDone
		default:
			st = q.respError(st, &c)
		}
	}
}

// checkQPState drops a request the QP cannot receive in its state, and
// reports the first packet an RTR QP receives as communication
// established (the connection manager's RTU may have been lost).
func (q *qp) checkQPState() respStep {
	if q.state != rdma.QPSRTR && q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		q.dev.stats.dropped.Add(1)
		return respDone
	}
	if q.state == rdma.QPSRTR && !q.commEst {
		q.commEst = true
		if f := q.dev.commEst.Load(); f != nil {
			(*f)(q.qpn)
		}
	}
	return respCheckPSN
}

// checkPSN takes the expected PSN on; an earlier one is a duplicate, a
// later one a gap, NAKed once until the expected PSN arrives.
func (q *qp) checkPSN(c *respPacket) respStep {
	r := &q.resp
	diff := wire.PSNDiff(c.psn, r.psn)
	switch {
	case diff > 0:
		q.dev.stats.outOfSequence.Add(1)
		q.stats.outOfSequence.Add(1)
		if r.nakSent {
			return respDone
		}
		r.nakSent = true
		return respErrPSNOutOfSeq
	case diff < 0:
		q.dev.stats.duplicates.Add(1)
		q.stats.duplicates.Add(1)
		return respDuplicate
	}
	r.nakSent = false
	return respCheckOpSeq
}

// checkOpSeq checks that the opcode goes on with the SEND or RDMA WRITE
// in progress, or starts a message when none is.
func (q *qp) checkOpSeq(c *respPacket) respStep {
	r := &q.resp
	op := c.op
	if r.inSend {
		c.rw = q.recvHead() // a failure completes it in error
	}
	switch {
	case r.inSend && (!op.IsSend() || op.IsFirst()),
		r.inWrite && (!op.IsWrite() || op.IsFirst()),
		!r.inSend && !r.inWrite && !op.IsFirst():
		return respErrInvalidRequest
	}
	return respCheckOpValid
}

// checkOpValid checks that the QP allows the operation: no atomics,
// RDMA WRITE and READ only with the remote access rights, READ only with
// responder resources.
func (q *qp) checkOpValid(c *respPacket) respStep {
	op, access := c.op, q.attr.AccessFlags
	switch {
	case op.IsAtomic(),
		op.IsWrite() && access&rdma.AccessRemoteWrite == 0,
		op.IsReadRequest() && (access&rdma.AccessRemoteRead == 0 || q.attr.MaxDestRdAtomic == 0):
		return respErrInvalidRequest
	}
	return respCheckResource
}

// checkResource finds the receive WQE a SEND or an RDMA WRITE with
// immediate consumes; without one the requester is told to retry later.
func (q *qp) checkResource(c *respPacket) respStep {
	c.needRecv = c.op.IsSend() || (c.op.IsWrite() && c.op.HasImmDt())
	if c.needRecv {
		if c.rw = q.recvHead(); c.rw == nil {
			return respErrRNR
		}
	}
	return respCheckLength
}

// checkLength checks the payload against the packet's place in its
// message (a FIRST or MIDDLE packet carries one MTU, a LAST one 1 to
// MTU bytes, an ONLY one at most MTU) and a RETH's length.
func (q *qp) checkLength(p *wire.Packet, c *respPacket) respStep {
	op, n, mtu := c.op, len(c.payload), q.mtu
	var bad bool
	switch {
	case op.IsOnly():
		bad = n > mtu
	case op.IsLast():
		bad = n == 0 || n > mtu
	default:
		bad = n != mtu
	}
	if bad || op.HasRETH() && p.RETH.DMALen() > 1<<31 {
		return respErrInvalidRequest
	}
	return respCheckRKey
}

// checkRKey checks a RETH's rkey, access rights and bounds (a zero-length
// access needs none); the first packet of an RDMA WRITE sets where the
// message goes, and each of its packets must fit what is left of it.
func (q *qp) checkRKey(p *wire.Packet, c *respPacket) respStep {
	r := &q.resp
	op := c.op
	if op.HasRETH() {
		n := p.RETH.DMALen()
		need := rdma.AccessRemoteWrite
		if op.IsReadRequest() {
			need = rdma.AccessRemoteRead
		}
		if n > 0 {
			var ok bool
			if c.m, c.off, c.gen, ok = q.dev.mrs.checkRemote(q.pd, p.RETH.RKey(), p.RETH.VA(), n, need); !ok {
				return respErrRKeyViolation
			}
		}
		c.n = int(n)
		if op.IsReadRequest() {
			return respExecute
		}
		r.wm, r.wgen, r.woff, r.wresid, r.wlen = c.m, c.gen, c.off, c.n, c.n
	}
	if op.IsWrite() && (len(c.payload) > r.wresid || (op.IsLast() && len(c.payload) != r.wresid)) {
		return respErrInvalidRequest
	}
	return respExecute
}

// execute carries out a request that passed the checks: a READ goes on
// to its responses; a WRITE's payload goes to the region, a SEND's to the
// receive WQE; an IETH invalidates its rkey. Then the expected PSN moves
// on, and the last packet of a message ends it.
func (q *qp) execute(p *wire.Packet, c *respPacket) respStep {
	r := &q.resp
	op := c.op
	switch {
	case op.IsReadRequest():
		r.msn = (r.msn + 1) & 0xffffff // a READ counts when it arrives (C9-148)
		return respReadReply
	case op.IsWrite():
		if st := q.writeDataIn(c); st != respOK {
			return st
		}
	case op.IsSend():
		if st := q.sendDataIn(c); st != respOK {
			return st
		}
	}
	if op.HasIETH() {
		c.inv = p.InvalidateRKey()
		if !q.dev.mrs.invalidate(q.pd, c.inv, false) {
			return respErrInvalidRequest
		}
	}
	r.inSend = op.IsSend() && !op.IsLast()
	r.inWrite = op.IsWrite() && !op.IsLast()
	r.psn = wire.PSNAdd(c.psn, 1)
	if !op.IsLast() {
		return respAcknowledge
	}
	r.msn = (r.msn + 1) & 0xffffff
	if op.IsWrite() {
		r.wm = nil
	}
	if c.needRecv {
		return respComplete
	}
	return respAcknowledge
}

// writeDataIn copies an RDMA WRITE packet's payload to its region.
func (q *qp) writeDataIn(c *respPacket) respStep {
	r := &q.resp
	if len(c.payload) == 0 {
		return respOK
	}
	// The rkey was checked in the FIRST packet only: check again that
	// it still holds, as rxe looks the key up for every packet, through
	// the generation, which also keeps a Remap off the buffer while it
	// is written.
	if !r.wm.enter(r.wgen) {
		return respErrRKeyViolation
	}
	copy(r.wm.buf[r.woff:], c.payload)
	r.wm.leave()
	r.woff += len(c.payload)
	r.wresid -= len(c.payload)
	return respOK
}

// sendDataIn scatters a SEND packet's payload over its receive WQE.
func (q *qp) sendDataIn(c *respPacket) respStep {
	r := &q.resp
	switch {
	case c.rw.status != rdma.Success:
		return respErrRecvWQE
	case r.recvOff+len(c.payload) > c.rw.length:
		return respErrRecvLength
	case !scatter(c.rw.segs, r.recvOff, c.payload):
		return respErrMalformedWQE
	}
	r.recvOff += len(c.payload)
	return respOK
}

// readReply sends a READ's responses. ACKs wait behind them: one sent
// before would cover the READ's PSNs (holdAcks).
func (q *qp) readReply(c *respPacket) respStep {
	r := &q.resp
	q.flushAck(c.rx.tx)
	q.holdAcks(c.rx)
	if !q.sendReadResponses(c.rx, c.psn, c.m, c.gen, c.off, c.n) {
		return respErrRKeyViolation
	}
	r.psn = wire.PSNAdd(c.psn, npackets(c.n, q.mtu))
	r.unacked = 0
	return respDone
}

// completeMessage completes the receive WQE of a message that ended.
func (q *qp) completeMessage(p *wire.Packet, c *respPacket) respStep {
	r := &q.resp
	op := c.op
	wc := rdma.WorkCompletion{Opcode: rdma.WCRecv, ByteLen: uint32(r.recvOff)}
	if op.IsWrite() {
		wc.Opcode, wc.ByteLen = rdma.WCRecvRDMAWithImm, uint32(r.wlen)
	}
	if op.HasImmDt() {
		wc.Flags |= rdma.WCWithImm
		wc.Imm = p.Imm()
	}
	if op.HasIETH() {
		wc.Flags |= rdma.WCWithInvalidate
		wc.InvalidatedRKey = c.inv
	}
	r.recvOff = 0
	if !q.completeRecv(&wc) {
		return respErrCQOverflow
	}
	return respAcknowledge
}

// acknowledge queues the ACK the packet asks for, or that AckReqEvery
// packets without one call for; only the ACK of a message's last packet
// may wait for the QP's next packets (delayAck).
func (q *qp) acknowledge(p *wire.Packet, c *respPacket) respStep {
	r := &q.resp
	r.unacked++
	every := q.dev.cfg.AckReqEvery
	if p.BTH.AckReq() || r.unacked >= every {
		q.queueAck(c.rx, r.unacked >= every || !c.op.IsLast())
	}
	return respDone
}

// respError answers a packet that failed a step: a PSN gap draws a
// sequence NAK and an empty receive queue an RNR NAK, both of which leave
// the QP as it is; the other errors NAK the packet, complete the
// message's receive WQE in error and move the QP to the error state
// (respFail), a full receive CQ moves it there at once.
func (q *qp) respError(st respStep, c *respPacket) respStep {
	d, tx := q.dev, c.rx.tx
	switch st {
	case respErrPSNOutOfSeq:
		q.flushAck(tx)
		q.sendAck(tx, wire.Syndrome(wire.SyndromeNAK|wire.NAKPSNSequenceError), q.resp.psn)
		d.stats.seqNAKsSent.Add(1)
		q.stats.seqNAKsSent.Add(1)
	case respErrRNR:
		q.flushAck(tx)
		q.sendAck(tx, wire.Syndrome(wire.SyndromeRNR|q.attr.MinRNRTimer&0x1f), c.psn)
		d.stats.rnrNAKsSent.Add(1)
		q.stats.rnrNAKsSent.Add(1)
	case respErrInvalidRequest:
		q.respFail(c.rx, c.psn, wire.NAKInvalidRequest, rdma.RemoteInvalidRequestError, c.rw)
	case respErrRKeyViolation:
		q.respFail(c.rx, c.psn, wire.NAKRemoteAccessError, rdma.RemoteAccessError, c.rw)
	case respErrRecvWQE:
		q.respFail(c.rx, c.psn, wire.NAKRemoteOperationalErr, c.rw.status, c.rw)
	case respErrRecvLength:
		q.respFail(c.rx, c.psn, wire.NAKInvalidRequest, rdma.LocalLengthError, c.rw)
	case respErrMalformedWQE:
		q.respFail(c.rx, c.psn, wire.NAKRemoteOperationalErr, rdma.LocalProtectionError, c.rw)
	case respErrCQOverflow:
		q.enterError()
	}
	return respDone
}
