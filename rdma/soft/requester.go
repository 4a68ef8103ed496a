package soft

import (
	"encoding/binary"
	"time"

	"github.com/nvmeof/nvmeof/internal/monoclock"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// requester is the sending side of an RC QP (rxe_req.c's job): it turns
// send WQEs into request packets, assigns PSNs and goes back to the oldest
// unacknowledged PSN when the completer asks for a retry.
type requester struct {
	cur      uint64 // send WQE being sent
	curOff   int    // bytes of it sent (READ: requested)
	psn      uint32 // next PSN to send
	high     uint32 // one past the highest PSN ever sent (to count retransmissions)
	noAck    int    // packets since the last AckReq
	readsOut int    // READ requests outstanding (≤ max_rd_atomic)
	readWQEs int    // READ WQEs in flight (for SendFence)
	rnrWait  bool   // waiting for the RNR timer
	stalled  bool   // reached a WQE that failed at post time
}

// writeBTH fills the BTH at b.
func writeBTH(b []byte, op wire.Opcode, se bool, pad int, dqpn, psn uint32, ackReq bool) {
	h := wire.BTH(b[:wire.BTHLen])
	h.SetOpcode(op)
	h.SetFlags(se, false, pad, 0)
	h.SetPKey(wire.DefaultPKey)
	h.SetDestQP(dqpn)
	h.SetPSN(psn, ackReq)
}

// npackets returns the number of packets (PSNs) of a message of n bytes.
func npackets(n, mtu int) int {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// runRequester sends what the send queue, the window and the read credits
// allow. It runs with q.mu held; the caller flushes tx before unlocking.
func (q *qp) runRequester(tx *txBatch) {
	if q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		return
	}
	if q.typ != rdma.QPTypeRC {
		q.runUDRequester(tx)
		return
	}
	r := &q.req
	if r.rnrWait || r.stalled {
		return
	}
	d := q.dev
	n := uint64(len(q.sq))
	wasIdle := r.psn == q.comp.psn
	sent := 0
	maxRd := max(int(q.attr.MaxRdAtomic), 1)
	var now time.Time // read once, by pace, when the QP is rate limited
	for r.cur != q.sqTail {
		w := &q.sq[r.cur%n]
		if w.state == wqeDone {
			if w.status != rdma.Success {
				r.stalled = true
				break
			}
			r.cur++
			continue
		}
		if w.state == wqePosted {
			if q.state == rdma.QPSSQD {
				break
			}
			if w.status != rdma.Success {
				// Failed at post: completes with its error in turn.
				w.state = wqeDone
				r.cur++
				r.stalled = true
				q.completeDone()
				break
			}
			if w.opcode == rdma.WRLocalInv {
				if !d.mrs.invalidate(q.pd, w.invRKey, true) {
					w.status = rdma.LocalQPOperationError
				}
				w.state = wqeDone
				r.cur++
				q.completeDone()
				if q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
					return
				}
				continue
			}
			if w.flags&rdma.SendFence != 0 && r.readWQEs > 0 {
				break
			}
			if wire.PSNDiff(r.psn, q.comp.psn) >= int32(d.cfg.MaxUnacked) {
				break
			}
			w.first = r.psn
			w.last = wire.PSNAdd(r.psn, npackets(w.length, q.mtu)-1)
			w.state = wqeInflight
			r.curOff = 0
			if w.opcode == rdma.WRRDMARead {
				r.readWQEs++
			}
		}
		out := int(wire.PSNDiff(r.psn, q.comp.psn))
		if q.cc != nil && !q.pace(&now) {
			break
		}
		if w.opcode == rdma.WRRDMARead {
			if r.readsOut >= maxRd {
				break
			}
			chunk := d.cfg.ReadChunk * q.mtu
			end := min((r.curOff/chunk+1)*chunk, w.length)
			np := npackets(end-r.curOff, q.mtu)
			if out > 0 && out+np > d.cfg.MaxUnacked {
				break
			}
			q.buildReadRequest(tx, w, r.curOff, end-r.curOff, np)
			r.readsOut++
			r.curOff = end
		} else {
			if out >= d.cfg.MaxUnacked {
				break
			}
			q.buildData(tx, w, r.curOff)
		}
		sent++
		if q.cc != nil {
			q.paced(tx.last().n)
		}
		if r.curOff >= w.length {
			r.cur++
			r.curOff = 0
		}
	}
	if sent == 0 {
		return
	}
	// The last packet of a burst asks for an acknowledgement, so that a
	// burst cut by the window or by go-back-N is acknowledged promptly.
	if p := tx.last(); p != nil {
		b := wire.BTH(p.buf[:wire.BTHLen])
		if !b.AckReq() {
			b.SetPSN(b.PSN(), true)
			r.noAck = 0
		}
	}
	if wasIdle {
		q.comp.lastProgress = monoclock.Now()
	}
	q.armRTO()
}

// countPSN records the transmission of PSN psn.
func (q *qp) countPSN(psn uint32, n int) {
	r := &q.req
	if wire.PSNDiff(psn, r.high) < 0 {
		q.dev.stats.retransmissions.Add(1)
		q.stats.retransmissions.Add(1)
	}
	if end := wire.PSNAdd(psn, n); wire.PSNDiff(end, r.high) > 0 {
		r.high = end
	}
}

// dataOpcode returns the opcode of a SEND or RDMA WRITE packet.
func dataOpcode(op rdma.WROpcode, first, last bool) wire.Opcode {
	switch op {
	case rdma.WRRDMAWrite, rdma.WRRDMAWriteWithImm:
		imm := op == rdma.WRRDMAWriteWithImm
		switch {
		case first && last && imm:
			return wire.RCRDMAWriteOnlyWithImmed
		case first && last:
			return wire.RCRDMAWriteOnly
		case first:
			return wire.RCRDMAWriteFirst
		case last && imm:
			return wire.RCRDMAWriteLastWithImmed
		case last:
			return wire.RCRDMAWriteLast
		}
		return wire.RCRDMAWriteMiddle
	}
	switch {
	case first && last:
		switch op {
		case rdma.WRSendWithImm:
			return wire.RCSendOnlyWithImmediate
		case rdma.WRSendWithInv:
			return wire.RCSendOnlyWithInvalidate
		}
		return wire.RCSendOnly
	case first:
		return wire.RCSendFirst
	case last:
		switch op {
		case rdma.WRSendWithImm:
			return wire.RCSendLastWithImmediate
		case rdma.WRSendWithInv:
			return wire.RCSendLastWithInvalidate
		}
		return wire.RCSendLast
	}
	return wire.RCSendMiddle
}

// buildData builds the SEND or RDMA WRITE packet of w at byte offset off.
func (q *qp) buildData(tx *txBatch, w *sendWQE, off int) {
	r := &q.req
	n := min(q.mtu, w.length-off)
	first, last := off == 0, off+n >= w.length
	op := dataOpcode(w.opcode, first, last)
	ack := last || r.noAck+1 >= q.dev.cfg.AckReqEvery
	if ack {
		r.noAck = 0
	} else {
		r.noAck++
	}
	se := last && w.flags&rdma.SendSolicited != 0 && (op.IsSend() || op.HasImmDt())
	pad := wire.PadFor(n)
	p := tx.next()
	b := p.buf[:]
	writeBTH(b, op, se, pad, q.attr.DestQPN, r.psn, ack)
	o := wire.BTHLen
	if op.HasRETH() {
		wire.RETH(b[o:o+wire.RETHLen]).Set(w.raddr, w.rkey, uint32(w.length))
		o += wire.RETHLen
	}
	if op.HasImmDt() {
		binary.BigEndian.PutUint32(b[o:], w.imm)
		o += wire.ImmDtLen
	}
	if op.HasIETH() {
		binary.BigEndian.PutUint32(b[o:], w.invRKey)
		o += wire.IETHLen
	}
	switch ext, ok := inPlace(w.segs, off, n); {
	case w.isInl:
		copy(b[o:o+n], w.inline[off:off+n])
		o += n
	case ok:
		p.ext, p.hn = ext, o
	default:
		if !gather(b[o:o+n], w.segs, off) {
			w.status = rdma.LocalProtectionError
		}
		o += n
	}
	clear(b[o : o+pad])
	p.n = o + pad + wire.ICRCLen + len(p.ext)
	p.dst = q.dst
	tx.commit()
	q.countPSN(r.psn, 1)
	r.psn = wire.PSNAdd(r.psn, 1)
	r.curOff = off + n
}

// buildReadRequest builds an RDMA READ request for n bytes at offset off
// of w's remote buffer; its responses use np PSNs.
func (q *qp) buildReadRequest(tx *txBatch, w *sendWQE, off, n, np int) {
	r := &q.req
	p := tx.next()
	b := p.buf[:]
	writeBTH(b, wire.RCRDMAReadRequest, false, 0, q.attr.DestQPN, r.psn, true)
	r.noAck = 0
	wire.RETH(b[wire.BTHLen:wire.BTHLen+wire.RETHLen]).Set(w.raddr+uint64(off), w.rkey, uint32(n))
	p.n = wire.BTHLen + wire.RETHLen + wire.ICRCLen
	p.dst = q.dst
	tx.commit()
	q.countPSN(r.psn, np)
	r.psn = wire.PSNAdd(r.psn, np)
}

// reposition makes the requester go back to the oldest unacknowledged
// PSN (go-back-N): the WQE holding it is resent from that packet on
// (a READ is requested again for its remaining part) and every later
// WQE from its first packet.
func (q *qp) reposition() {
	r := &q.req
	n := uint64(len(q.sq))
	if q.sqHead == q.sqTail {
		return
	}
	w := &q.sq[q.sqHead%n]
	if w.state != wqeInflight {
		return
	}
	old := r.cur
	r.cur = q.sqHead
	r.curOff = int(wire.PSNDiff(q.comp.psn, w.first)) * q.mtu
	r.psn = q.comp.psn
	for i := q.sqHead + 1; i < old && i != q.sqTail; i++ {
		x := &q.sq[i%n]
		if x.state == wqeInflight {
			if x.opcode == rdma.WRRDMARead && r.readWQEs > 0 {
				r.readWQEs--
			}
			x.state = wqePosted
		}
	}
	r.readsOut = 0
	r.noAck = 0
	r.stalled = false
}

// syncRequester moves the requester forward when acknowledgements or
// READ responses went past the PSN it is about to (re)send.
func (q *qp) syncRequester() {
	r := &q.req
	if r.cur != q.sqHead || r.cur == q.sqTail || wire.PSNDiff(r.psn, q.comp.psn) >= 0 {
		return
	}
	w := &q.sq[r.cur%uint64(len(q.sq))]
	if w.state != wqeInflight {
		return
	}
	r.psn = q.comp.psn
	r.curOff = int(wire.PSNDiff(q.comp.psn, w.first)) * q.mtu
}

// runUDRequester sends UD datagrams; each completes once handed to the kernel.
func (q *qp) runUDRequester(tx *txBatch) {
	r := &q.req
	n := uint64(len(q.sq))
	for r.cur != q.sqTail {
		w := &q.sq[r.cur%n]
		if w.status == rdma.Success {
			q.buildUD(tx, w)
		}
		w.state = wqeDone
		r.cur++
	}
	q.completeDone()
}

// buildUD builds a UD SEND Only packet for w.
func (q *qp) buildUD(tx *txBatch, w *sendWQE) {
	op := wire.UDSendOnly
	if w.opcode == rdma.WRSendWithImm {
		op = wire.UDSendOnlyWithImmediate
	}
	pad := wire.PadFor(w.length)
	p := tx.next()
	b := p.buf[:]
	writeBTH(b, op, w.flags&rdma.SendSolicited != 0, pad, w.rqpn, q.req.psn, false)
	o := wire.BTHLen
	wire.DETH(b[o:o+wire.DETHLen]).Set(w.qkey, q.qpn)
	o += wire.DETHLen
	if op.HasImmDt() {
		binary.BigEndian.PutUint32(b[o:], w.imm)
		o += wire.ImmDtLen
	}
	if w.isInl {
		copy(b[o:o+w.length], w.inline)
	} else if !gather(b[o:o+w.length], w.segs, 0) {
		w.status = rdma.LocalProtectionError
	}
	o += w.length
	clear(b[o : o+pad])
	p.n = o + pad + wire.ICRCLen
	p.dst = w.dst
	tx.tos = w.tos // a UD WR's own address vector (the batch is this QP's: forQP)
	tx.commit()
	q.req.psn = wire.PSNAdd(q.req.psn, 1)
}
