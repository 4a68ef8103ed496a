package soft

import (
	"time"

	"github.com/nvmeof/nvmeof/internal/monoclock"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// responder is the receiving side of an RC QP (rxe_resp.c's job): it
// checks PSNs, executes SEND, RDMA WRITE and RDMA READ requests against
// posted receives and registered memory, and acknowledges. Each request
// packet goes through the chain of respchain.go.
type responder struct {
	psn     uint32 // expected PSN (ePSN)
	msn     uint32 // message sequence number (24 bits)
	nakSent bool   // a NAK sequence error was sent since the last in-order packet
	inSend  bool   // in the middle of a multi-packet SEND
	inWrite bool   // in the middle of a multi-packet RDMA WRITE
	recvOff int    // bytes of the current SEND written to the head receive WQE
	// The RDMA WRITE in progress: region and the generation its rkey
	// was checked under (every packet enters with it: an Invalidate or
	// Remap since fails the rest), offset of the next byte, remaining
	// and total length.
	wm     *mr
	wgen   uint64
	woff   int
	wresid int
	wlen   int
	// Acknowledgement coalescing: an ACK of psn-1 is due at the end of
	// the receive batch, or, if it may wait (ackUrgent unset), with the
	// QP's next packets or at a tick of ackTimer (ackArmed) past ackDue.
	// ackDelayed: an ACK was held since the timer's last tick. ackHold:
	// READ responses built in the current receive batch are not sent
	// yet, so no ACK may leave before the batch's end (it would cover
	// the READ's PSNs ahead of its responses).
	ackPending bool
	ackUrgent  bool
	ackArmed   bool
	ackDelayed bool
	ackHold    bool
	ackDue     time.Duration // monoclock time the held ACK is due; 0: none held (yet)
	unacked    int
}

// ackSyndrome is the AETH syndrome of a positive acknowledgement: ACK
// with the "no credit information" credit code, as rxe sends.
const ackSyndrome = wire.Syndrome(wire.SyndromeACK | 0x1f)

// duplicate handles a request with a PSN before the expected one: SENDs
// and WRITEs are acknowledged again (when they ask for it), READs are
// executed again from the memory region (C9-105, C9-106).
func (q *qp) duplicate(p *wire.Packet, psn uint32, rx *rxState) {
	r := &q.resp
	op := p.Opcode()
	if !op.IsReadRequest() {
		if p.BTH.AckReq() {
			q.queueAck(rx, true) // the requester is retrying: answer now
		}
		return
	}
	if q.attr.AccessFlags&rdma.AccessRemoteRead == 0 {
		return
	}
	n := p.RETH.DMALen()
	np := npackets(int(n), q.mtu)
	if n > 1<<31 || wire.PSNDiff(wire.PSNAdd(psn, np-1), r.psn) >= 0 {
		return // would use PSNs not executed yet
	}
	var m *mr
	var off int
	var gen uint64
	if n > 0 {
		var ok bool
		if m, off, gen, ok = q.dev.mrs.checkRemote(q.pd, p.RETH.RKey(), p.RETH.VA(), n, rdma.AccessRemoteRead); !ok {
			return
		}
	}
	q.flushAck(rx.tx)
	q.holdAcks(rx)
	if !q.sendReadResponses(rx, psn, m, gen, off, int(n)) {
		q.respFail(rx, psn, wire.NAKRemoteAccessError, rdma.RemoteAccessError, nil)
	}
}

// sendReadResponses sends the READ response packets for n bytes at
// offset off of m, whose rkey was checked under generation gen, starting
// at PSN psn. It stops and returns false when the region changed
// (Invalidate, Remap) since: the caller NAKs with Remote Access Error. A
// response already built with its payload in place is dropped at the
// flush if the region changed by then (txBatch.flush), so that no byte
// of a buffer bound later leaves under the old key.
func (q *qp) sendReadResponses(rx *rxState, psn uint32, m *mr, gen uint64, off, n int) bool {
	mtu := q.mtu
	np := npackets(n, mtu)
	for i := 0; i < np; i++ {
		cn := min(mtu, n-i*mtu)
		var op wire.Opcode
		switch {
		case np == 1:
			op = wire.RCRDMAReadResponseOnly
		case i == 0:
			op = wire.RCRDMAReadResponseFirst
		case i == np-1:
			op = wire.RCRDMAReadResponseLast
		default:
			op = wire.RCRDMAReadResponseMiddle
		}
		pad := wire.PadFor(cn)
		pk := rx.tx.next()
		if cn > 0 && !m.enter(gen) {
			return false
		}
		b := pk.buf[:]
		writeBTH(b, op, false, pad, q.attr.DestQPN, wire.PSNAdd(psn, i), false)
		o := wire.BTHLen
		if op.HasAETH() {
			wire.AETH(b[o:o+wire.AETHLen]).Set(ackSyndrome, q.resp.msn)
			o += wire.AETHLen
		}
		if cn >= zeroCopyMin {
			pk.ext, pk.hn = m.buf[off+i*mtu:off+i*mtu+cn], o
			pk.src, pk.gen = m, gen
		} else {
			if cn > 0 {
				copy(b[o:o+cn], m.buf[off+i*mtu:off+i*mtu+cn])
			}
			o += cn
		}
		if cn > 0 {
			m.leave()
		}
		clear(b[o : o+pad])
		pk.n = o + pad + wire.ICRCLen + len(pk.ext)
		pk.dst = q.dst
		rx.tx.commit()
	}
	return true
}

// respFail handles a request the responder must refuse (class B/C
// errors): NAK it, complete the receive WQE its message uses (rw, or nil)
// with status, and move the QP to the error state. No memory was touched
// for the failing packet.
func (q *qp) respFail(rx *rxState, psn uint32, nak uint8, status rdma.WCStatus, rw *recvWQE) {
	q.flushAck(rx.tx)
	q.sendAck(rx.tx, wire.Syndrome(wire.SyndromeNAK|nak), psn)
	q.dev.stats.errNAKsSent.Add(1)
	q.stats.errNAKsSent.Add(1)
	if rw != nil {
		wc := rdma.WorkCompletion{Status: status, Opcode: rdma.WCRecv}
		q.completeRecv(&wc)
	}
	q.enterError()
}

// queueAck schedules an acknowledgement for the end of the receive batch;
// unless urgent, it may wait there for the QP's next packets (AckDelay).
func (q *qp) queueAck(rx *rxState, urgent bool) {
	q.resp.ackPending = true
	q.resp.ackUrgent = q.resp.ackUrgent || urgent
	if !q.ackQueued {
		q.ackQueued = true
		rx.acks = append(rx.acks, q)
	}
}

// flushAck adds the pending acknowledgement, if any, to tx.
func (q *qp) flushAck(tx *txBatch) {
	r := &q.resp
	if !r.ackPending {
		return
	}
	r.ackPending, r.ackUrgent = false, false
	r.ackDue = 0
	r.unacked = 0
	q.sendAck(tx, ackSyndrome, wire.PSNAdd(r.psn, -1))
}

// holdAcks keeps acknowledgements from leaving outside the receive
// goroutine until the end of the batch, whose READ responses are not
// sent yet (q.mu held).
func (q *qp) holdAcks(rx *rxState) {
	if !q.resp.ackHold {
		q.resp.ackHold = true
		rx.holds = append(rx.holds, q)
	}
}

// flushAckOutside is flushAck for the QP's own sends and the ACK timer,
// which run beside the receive goroutine: held back while a READ's
// responses wait in the receive batch (holdAcks). It reports whether
// nothing was held back.
func (q *qp) flushAckOutside(tx *txBatch) bool {
	if q.resp.ackHold {
		return false
	}
	q.flushAck(tx)
	return true
}

// delayAck keeps the pending acknowledgement for the QP's next packets
// (PostSend and the requester runs carry it along) or the delayed-ACK
// timer, and reports whether it did (q.mu held). An application that
// answers each message (an NVMe host's next command, a target's response)
// so carries the ACK in the same sendmmsg, and the peer wakes once
// instead of twice.
//
// The timer is not stopped when something carries the ACK. Arming a
// runtime timer wakes another thread (the netpoller, to shorten its
// sleep), which at one message per arm cost more than the ACK saves. It
// ticks instead, every ackTick while ACKs are held, sends an ACK held for
// AckDelay at the tick after, and stops after a tick with none held: an
// ACK nothing carries leaves after AckDelay, and at most ackTick later.
func (q *qp) delayAck() bool {
	r := &q.resp
	delay := q.dev.cfg.AckDelay
	if delay <= 0 || r.ackUrgent {
		return false
	}
	if r.ackDue == 0 {
		r.ackDue = monoclock.Now() + delay
	}
	r.ackDelayed = true
	if !r.ackArmed {
		r.ackArmed = true
		q.ackTimer.Reset(delay)
		q.dev.stats.ackTimerArms.Add(1)
	}
	return true
}

// ackTick is the delayed-ACK timer's period: 1/32 of the QP's local ACK
// timeout (the peer's, on a path both ends set up alike), at most
// maxAckTick, and at least ackTicks AckDelays. Each tick wakes a thread:
// at 2 ms, 500 a second per busy QP, against one per message when the
// timer was started per held ACK.
func (q *qp) ackTick() time.Duration {
	t := maxAckTick
	if q.rto > 0 {
		t = min(t, q.rto/32)
	}
	return max(t, ackTicks*q.dev.cfg.AckDelay)
}

const (
	maxAckTick = 2 * time.Millisecond
	ackTicks   = 4
)

// onAckTimer is the delayed-ACK timer's tick: it sends the held
// acknowledgement that is due and nothing carried, and ticks again while
// ACKs are held (delayAck).
func (q *qp) onAckTimer() {
	q.mu.Lock()
	r := &q.resp
	if q.destroyed || q.state == rdma.QPSErr || q.state == rdma.QPSReset {
		r.ackArmed = false
		q.mu.Unlock()
		return
	}
	delay := q.dev.cfg.AckDelay
	var tx *txBatch
	if r.ackPending && r.ackDue != 0 && monoclock.Now() >= r.ackDue {
		tx = q.dev.getTx()
		tx.forQP(q)
		if !q.flushAckOutside(tx) {
			q.ackTimer.Reset(delay) // after the receive batch's READ responses
			q.mu.Unlock()
			q.dev.putTx(tx)
			return
		}
	}
	if r.ackPending || r.ackDelayed {
		r.ackDelayed = false
		q.ackTimer.Reset(q.ackTick())
	} else {
		r.ackArmed = false
	}
	q.mu.Unlock()
	if tx != nil {
		tx.flush()
		q.dev.putTx(tx)
	}
}

// sendAck adds an Acknowledge packet with syndrome s for PSN psn to tx.
func (q *qp) sendAck(tx *txBatch, s wire.Syndrome, psn uint32) {
	pk := tx.next()
	b := pk.buf[:]
	writeBTH(b, wire.RCAcknowledge, false, 0, q.attr.DestQPN, psn, false)
	wire.AETH(b[wire.BTHLen:wire.BTHLen+wire.AETHLen]).Set(s, q.resp.msn)
	pk.n = wire.BTHLen + wire.AETHLen + wire.ICRCLen
	pk.dst = q.dst
	tx.commit()
	q.dev.stats.acksSent.Add(1)
}
