package soft

import (
	"time"

	"github.com/nvmeof/nvmeof/internal/monoclock"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// completer handles what comes back to an RC requester (rxe_comp.c's
// job): ACKs, NAKs and READ responses. It completes send WQEs in order,
// scatters READ data, and asks the requester to go back N on a NAK
// sequence error, a lost READ response or a timeout, and to wait on an
// RNR NAK.
type completer struct {
	psn          uint32 // oldest unacknowledged PSN
	retryLeft    uint8  // retries left before RetryExceeded
	rnrLeft      uint8  // RNR retries left (7 = infinite)
	retrying     bool   // a retry from retryPSN is under way
	retryPSN     uint32
	rtoArmed     bool
	lastProgress time.Duration // monoclock time psn last advanced, or of the first send after idle
}

// completerInput handles an acknowledgement or READ response (q.mu held,
// receive goroutine).
func (q *qp) completerInput(p *wire.Packet, rx *rxState) {
	d := q.dev
	if q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		d.stats.dropped.Add(1)
		return
	}
	psn := p.BTH.PSN()
	op := p.Opcode()
	if op.IsReadResponse() {
		q.onReadResponse(psn, p)
	} else {
		d.stats.acksReceived.Add(1)
		if op != wire.RCAcknowledge {
			d.stats.staleResponses.Add(1) // atomics are not supported
			return
		}
		s := p.AETH.Syndrome()
		switch s.Kind() {
		case wire.SyndromeACK:
			if q.ackThrough(psn) {
				q.startRetry(false)
			}
		case wire.SyndromeRNR:
			q.onRNR(psn, s.Value())
		case wire.SyndromeNAK:
			q.onNAK(psn, s.Value())
		default:
			d.stats.staleResponses.Add(1)
		}
	}
	q.syncRequester()
	if q.req.cur != q.sqTail && !q.kickQueued && (q.state == rdma.QPSRTS || q.state == rdma.QPSSQD) {
		q.kickQueued = true
		rx.kicks = append(rx.kicks, q)
	}
}

// progress records that every PSN before psn was acknowledged.
func (q *qp) progress(psn uint32) {
	c := &q.comp
	if wire.PSNDiff(psn, c.psn) <= 0 {
		return
	}
	c.psn = psn
	c.retryLeft = q.attr.RetryCount
	c.rnrLeft = q.attr.RNRRetry
	c.retrying = false
	c.lastProgress = monoclock.Now()
}

// ackThrough handles an acknowledgement of every PSN up to and including
// a: it completes the WQEs it covers. It returns true when it covers a
// READ whose responses did not all arrive (they were lost): the caller
// starts a retry.
func (q *qp) ackThrough(a uint32) (retry bool) {
	c := &q.comp
	if wire.PSNDiff(a, c.psn) < 0 || wire.PSNDiff(a, q.req.high) >= 0 {
		// Older than what is outstanding, or beyond anything sent.
		q.dev.stats.staleResponses.Add(1)
		return false
	}
	n := uint64(len(q.sq))
	for q.sqHead != q.sqTail {
		w := &q.sq[q.sqHead%n]
		switch w.state {
		case wqePosted:
			return false
		case wqeDone:
			if !q.completeHead(w.status) {
				q.enterError()
				return false
			}
			continue
		}
		if wire.PSNDiff(a, w.last) >= 0 {
			if w.opcode == rdma.WRRDMARead {
				return true
			}
			q.progress(wire.PSNAdd(w.last, 1))
			if !q.completeHead(rdma.Success) {
				q.enterError()
				return false
			}
			continue
		}
		if w.opcode != rdma.WRRDMARead {
			q.progress(wire.PSNAdd(a, 1)) // part of a multi-packet message
		}
		return false
	}
	return false
}

// onReadResponse handles an RDMA READ response packet.
func (q *qp) onReadResponse(psn uint32, p *wire.Packet) {
	c := &q.comp
	d := q.dev
	if wire.PSNDiff(psn, c.psn) < 0 || wire.PSNDiff(psn, q.req.high) >= 0 {
		d.stats.staleResponses.Add(1)
		return
	}
	if psn != c.psn {
		// A response implicitly acknowledges every earlier request.
		if q.ackThrough(wire.PSNAdd(psn, -1)) || psn != c.psn {
			if q.state == rdma.QPSRTS || q.state == rdma.QPSSQD {
				q.startRetry(false) // a response before this one was lost
			}
			return
		}
	}
	if q.sqHead == q.sqTail {
		d.stats.staleResponses.Add(1)
		return
	}
	w := &q.sq[q.sqHead%uint64(len(q.sq))]
	if w.state != wqeInflight || w.opcode != rdma.WRRDMARead || wire.PSNDiff(psn, w.last) > 0 {
		d.stats.staleResponses.Add(1)
		return
	}
	idx := int(wire.PSNDiff(psn, w.first))
	off := idx * q.mtu
	want := min(q.mtu, w.length-off)
	// Each READ request covers one chunk of ReadChunk packets of the
	// WQE (a retried one, the rest of a chunk): its last response ends
	// the chunk.
	chunkEnd := (idx+1)%d.cfg.ReadChunk == 0 || psn == w.last
	if len(p.Payload) != want || chunkEnd != p.Opcode().IsLast() {
		d.stats.staleResponses.Add(1)
		return
	}
	if want > 0 && !scatter(w.segs, off, p.Payload) {
		w.status = rdma.LocalProtectionError
	}
	q.progress(wire.PSNAdd(psn, 1))
	if chunkEnd && q.req.readsOut > 0 {
		q.req.readsOut--
	}
	if psn == w.last {
		if !q.completeHead(rdma.Success) {
			q.enterError()
			return
		}
		q.completeDone()
	}
}

// onRNR handles an RNR NAK for PSN psn: wait the timer the responder
// named, then resend from psn.
func (q *qp) onRNR(psn uint32, timer uint8) {
	c := &q.comp
	q.dev.stats.rnrNAKsReceived.Add(1)
	q.stats.rnrNAKsReceived.Add(1)
	if psn != c.psn {
		if q.ackThrough(wire.PSNAdd(psn, -1)) {
			q.startRetry(false)
			return
		}
		if psn != c.psn || q.state == rdma.QPSErr {
			return
		}
	}
	if q.sqHead == q.sqTail || q.req.rnrWait {
		return
	}
	if c.rnrLeft == 0 {
		q.completeHead(rdma.RNRRetryExceeded)
		q.enterError()
		return
	}
	if c.rnrLeft != 7 {
		c.rnrLeft--
	}
	q.req.rnrWait = true
	q.rnrTimer.Reset(rdma.RNRTimerDuration(timer))
}

// onRNRTimer resends after an RNR wait.
func (q *qp) onRNRTimer() {
	defer q.dev.runHandlers()
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.req.rnrWait || q.destroyed {
		return
	}
	q.req.rnrWait = false
	if q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		return
	}
	q.reposition()
	q.kick()
}

// nakStatus maps a NAK code to the requester's completion status.
func nakStatus(code uint8) rdma.WCStatus {
	switch code {
	case wire.NAKInvalidRequest:
		return rdma.RemoteInvalidRequestError
	case wire.NAKRemoteAccessError:
		return rdma.RemoteAccessError
	case wire.NAKInvalidRDRequest:
		return rdma.RemoteInvalidRDRequest
	}
	return rdma.RemoteOperationError
}

// onNAK handles a NAK: a PSN sequence error asks to go back to psn; the
// others fail the request at psn and the QP.
func (q *qp) onNAK(psn uint32, code uint8) {
	d := q.dev
	if code == wire.NAKPSNSequenceError {
		d.stats.seqNAKsReceived.Add(1)
		q.stats.seqNAKsReceived.Add(1)
		if psn != q.comp.psn {
			q.ackThrough(wire.PSNAdd(psn, -1))
		}
		if q.req.rnrWait || (q.state != rdma.QPSRTS && q.state != rdma.QPSSQD) {
			return
		}
		q.startRetry(false)
		return
	}
	d.stats.errNAKsReceived.Add(1)
	q.stats.errNAKsReceived.Add(1)
	if psn != q.comp.psn {
		q.ackThrough(wire.PSNAdd(psn, -1))
	}
	if q.state == rdma.QPSErr || q.sqHead == q.sqTail {
		return
	}
	q.completeHead(nakStatus(code))
	q.enterError()
}

// hasInflight reports whether requests await acknowledgement.
func (q *qp) hasInflight() bool {
	return q.sqHead != q.sqTail && q.sq[q.sqHead%uint64(len(q.sq))].state == wqeInflight
}

// startRetry goes back to the oldest unacknowledged PSN, unless a retry
// from there is already under way (timeout forces one), or fails the QP
// when the retry count is exhausted.
func (q *qp) startRetry(timeout bool) {
	c := &q.comp
	if !q.hasInflight() {
		return
	}
	if !timeout && c.retrying && c.retryPSN == c.psn {
		return
	}
	if c.retryLeft == 0 {
		q.completeHead(rdma.RetryExceeded)
		q.enterError()
		return
	}
	c.retryLeft--
	c.retrying = true
	c.retryPSN = c.psn
	q.reposition()
}

// armRTO starts the retransmission timer if it is not running.
func (q *qp) armRTO() {
	c := &q.comp
	if q.rto == 0 || c.rtoArmed {
		return
	}
	c.rtoArmed = true
	q.rtoTimer.Reset(q.rto)
}

// onRTO runs when the retransmission timer fires: if no progress was
// made for the timeout, go back N.
func (q *qp) onRTO() {
	defer q.dev.runHandlers()
	q.mu.Lock()
	defer q.mu.Unlock()
	c := &q.comp
	c.rtoArmed = false
	if q.destroyed || (q.state != rdma.QPSRTS && q.state != rdma.QPSSQD) || !q.hasInflight() || q.rto == 0 {
		return
	}
	if q.req.rnrWait {
		q.armRTO()
		return
	}
	if el := monoclock.Now() - c.lastProgress; el < q.rto {
		c.rtoArmed = true
		q.rtoTimer.Reset(q.rto - el)
		return
	}
	q.dev.stats.timeouts.Add(1)
	q.stats.timeouts.Add(1)
	q.startRetry(true)
	c.lastProgress = monoclock.Now()
	q.kick()
	if q.hasInflight() {
		q.armRTO()
	}
}
