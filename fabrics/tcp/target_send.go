package tcp

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/nvme"
)

// SendsGather implements fabrics.GatherSender: a READ's data goes out by
// writev straight from the backend's memory (Request.Gather), released
// once the socket has it.
func (q *TargetQueue) SendsGather() bool { return true }

var _ fabrics.GatherSender = (*TargetQueue)(nil)

// The send path of a target queue: completions and R2Ts are built in the
// slot's buffers by whoever has them (a handler's goroutine, the reader)
// and queued; one writer goroutine sends everything queued in one writev.

// CompleteRequest implements fabrics.Completer: C2HData with the data of
// a successful controller-to-host command (with the SUCCESS flag, and no
// CapsuleResp, when the host disabled SQ flow control and the CQE carries
// nothing else, as nvmet-tcp), then the CapsuleResp. It may be called from
// any goroutine.
func (q *TargetQueue) CompleteRequest(r *fabrics.Request) {
	s, kind := q.buildCompletion(r)
	q.enqueue(s, kind, false)
}

var _ fabrics.BatchCompleter = (*TargetQueue)(nil)

// CompleteRequests implements fabrics.BatchCompleter: the PDUs of all of
// rs are queued before one send takes them (one writev when the socket
// takes it all), instead of a send per response.
func (q *TargetQueue) CompleteRequests(rs []*fabrics.Request) {
	for i, r := range rs {
		s, kind := q.buildCompletion(r)
		q.enqueue(s, kind, i < len(rs)-1)
	}
}

// buildCompletion builds the PDUs that complete r in its slot and returns
// the slot and what to send.
func (q *TargetQueue) buildCompletion(r *fabrics.Request) (*targetSlot, uint8) {
	s := q.slots[r.Slot]
	cqe := nvme.CQE(r.CQE[:])
	cid := binary.LittleEndian.Uint16(r.SQE[2:])
	cqe.SetCID(cid)
	cqe.SetSQID(q.params.QID)
	ok := cqe.StatusRaw()>>1 == 0
	if ok && !q.connected.Load() && r.SQE[0] == fabrics.OpcodeFabrics && fabrics.FCType(r.SQE[4]) == fabrics.FCTypeConnect {
		q.connected.Store(true)
		if q.timer != nil {
			q.timer.Stop()
		}
		// The rest of the slots, before the host can see the response
		// and send its next command.
		q.freeMu.Lock()
		for i := q.depth - 1; i > 0; i-- {
			q.freeList = append(q.freeList, int32(i))
		}
		q.freeMu.Unlock()
	}
	kind := uint8(tsendResp)
	if len(r.Gather) > 0 && (!ok || s.dir != fabrics.DirCtrlToHost || region.Len(r.Gather) != len(r.Data)) {
		// Nothing to send, or not what the command asked for: the data
		// (if any) goes from the slot's buffer.
		if ok && s.dir == fabrics.DirCtrlToHost {
			n := 0
			for _, g := range r.Gather {
				n += copy(r.Data[n:], g.Bytes())
			}
		}
		r.Gather = region.ReleaseAll(r.Gather)
	}
	if ok && s.dir == fabrics.DirCtrlToHost && len(r.Data) > 0 {
		success := q.sqflowOff && cqe.DW0() == 0 && cqe.DW1() == 0
		var dg uint32
		if q.ddgst {
			if len(r.Gather) > 0 {
				for _, g := range r.Gather {
					dg = DigestUpdate(dg, g.Bytes())
				}
			} else {
				dg = Digest(r.Data)
			}
		}
		q.buildC2HData(s, len(r.Data), dg, cid, success)
		kind = tsendData
		if !success {
			kind |= tsendResp
		}
	}
	if kind&tsendResp != 0 {
		q.buildResp(s, r.CQE[:])
	}
	return s, kind
}

// queueR2T asks the host for all of the slot's data in one R2T (the TTAG
// is the slot; several commands may have theirs outstanding).
func (q *TargetQueue) queueR2T(s *targetSlot) {
	b := s.r2t[:]
	clear(b)
	h := Header(b)
	h.SetType(TypeR2T)
	h.SetHLen(DataHLen)
	plen := DataHLen
	if q.hdgst {
		h.SetFlags(FlagHDGST)
		plen += DigestLen
	}
	h.SetPLen(uint32(plen))
	t := R2T(b)
	t.SetCCCID(binary.LittleEndian.Uint16(s.req.SQE[2:]))
	t.SetTTag(uint16(s.req.Slot))
	t.SetR2TO(0)
	t.SetR2TL(uint32(s.dataLen))
	if q.hdgst {
		binary.LittleEndian.PutUint32(b[DataHLen:], Digest(b[:DataHLen]))
	}
	q.enqueue(s, tsendR2T, false)
}

// pdoFor returns the data offset of a C2H PDU: after the header and its
// digest, aligned to the host's HPDA.
func (q *TargetQueue) pdoFor(hlen int) int {
	if q.hdgst {
		hlen += DigestLen
	}
	a := (int(q.hpda) + 1) * 4
	return (hlen + a - 1) / a * a
}

// buildC2HData builds the header of a C2HData PDU carrying all n bytes of
// the command's data, whose CRC-32C is ddgst (used with data digests).
func (q *TargetQueue) buildC2HData(s *targetSlot, n int, ddgst uint32, cid uint16, success bool) {
	pdo := q.pdoFor(DataHLen)
	b := s.hdr[:pdo]
	clear(b)
	h := Header(b)
	h.SetType(TypeC2HData)
	f := uint8(FlagDataLast)
	if success {
		f |= FlagDataSuccess
	}
	if q.hdgst {
		f |= FlagHDGST
	}
	plen := pdo + n
	if q.ddgst {
		f |= FlagDDGST
		plen += DigestLen
		binary.LittleEndian.PutUint32(s.ddgst[:], ddgst)
	}
	h.SetFlags(f)
	h.SetHLen(DataHLen)
	h.SetPDO(uint8(pdo))
	h.SetPLen(uint32(plen))
	d := DataPDU(b)
	d.SetCCCID(cid)
	d.SetDataO(0)
	d.SetDataL(uint32(n))
	if q.hdgst {
		binary.LittleEndian.PutUint32(b[DataHLen:], Digest(b[:DataHLen]))
	}
	s.hdrLen = pdo
}

func (q *TargetQueue) buildResp(s *targetSlot, cqe []byte) {
	b := s.resp[:]
	h := Header(b)
	h.SetType(TypeCapsuleResp)
	h.SetHLen(CapsuleRespHLen)
	h.SetPDO(0)
	plen := CapsuleRespHLen
	f := uint8(0)
	if q.hdgst {
		f = FlagHDGST
		plen += DigestLen
	}
	h.SetFlags(f)
	h.SetPLen(uint32(plen))
	copy(b[CommonHeaderLen:], cqe)
	if q.hdgst {
		binary.LittleEndian.PutUint32(b[CapsuleRespHLen:], Digest(b[:CapsuleRespHLen]))
	}
}

// enqueue queues the slot's PDUs. When nobody is sending and the reader
// is not in the middle of a burst of commands, the caller sends them (and
// whatever else is queued) itself with a writev that does not wait, and
// hands what the socket did not take to the writer goroutine: a command
// at QD1 then wakes no goroutine on its way out. During a burst the
// reader sends everything queued at its end (uncork), in one writev. more:
// the caller queues more right after (CompleteRequests), and the last
// one sends them all. On a closed queue the PDUs are dropped.
func (q *TargetQueue) enqueue(s *targetSlot, kind uint8, more bool) {
	q.mu.Lock()
	if q.closed || q.term != nil {
		q.mu.Unlock()
		s.req.Gather = region.ReleaseAll(s.req.Gather)
		return
	}
	if kind&tsendR2T == 0 {
		s.state.Store(tslotSending)
	}
	q.pending = append(q.pending, targetSendItem{slot: int32(s.req.Slot), kind: kind})
	if q.busy || q.corked || more {
		// The sender, the reader at the burst's end, or the caller's
		// next enqueue takes it.
		q.mu.Unlock()
		return
	}
	q.sendInlineLocked()
}

// cork holds what is queued while the reader has more commands in its
// buffer; uncork sends it.
func (q *TargetQueue) cork() {
	if q.rcorked {
		return
	}
	q.rcorked = true
	q.mu.Lock()
	q.corked = true
	q.mu.Unlock()
}

// beforeWait ends the reader's burst before it may wait: the backends
// submit the operations its commands started (the plug), then what the
// burst left to send goes.
func (q *TargetQueue) beforeWait() {
	q.plug.Flush()
	q.uncork()
}

func (q *TargetQueue) uncork() {
	if !q.rcorked {
		return
	}
	q.rcorked = false
	q.mu.Lock()
	q.corked = false
	if q.busy || len(q.pending) == 0 || q.closed || q.term != nil {
		q.mu.Unlock()
		return
	}
	q.sendInlineLocked()
}

// sendInlineLocked sends what is pending from the calling goroutine
// (called under mu, with pending not empty and nobody sending; returns
// with mu released).
func (q *TargetQueue) sendInlineLocked() {
	q.busy = true
	q.pending, q.sending = q.sending[:0], q.pending
	q.mu.Unlock()
	q.buildIOV()
	q.wrote, q.werr = 0, nil
	var err error
	if q.raw != nil {
		if err = q.raw.Control(q.tryFn); err == nil {
			err = q.werr
		}
	}
	if err == nil && q.wrote < q.iovLen {
		// The socket is full: the writer goroutine sends the rest.
		q.consume(q.wrote)
		q.mu.Lock()
		q.handoff = true
		q.cond.Signal()
		q.mu.Unlock()
		return
	}
	q.finishSending(err, true)
}

// buildIOV lays out the PDUs of what is being sent in iov (and bufs).
func (q *TargetQueue) buildIOV() {
	iov := q.iov[:0]
	n := 0
	for _, it := range q.sending {
		s := q.slots[it.slot]
		if it.kind&tsendR2T != 0 {
			iov = append(iov, s.r2t[:len(s.r2t)-q.targetDigestPad()])
		}
		if it.kind&tsendData != 0 {
			iov = append(iov, s.hdr[:s.hdrLen])
			if len(s.req.Gather) > 0 {
				for _, g := range s.req.Gather {
					iov = append(iov, g.Bytes())
				}
			} else {
				iov = append(iov, s.req.Data)
			}
			if q.ddgst {
				iov = append(iov, s.ddgst[:])
			}
		}
		if it.kind&tsendResp != 0 {
			iov = append(iov, s.resp[:len(s.resp)-q.targetDigestPad()])
		}
	}
	for _, b := range iov {
		n += len(b)
	}
	q.iov = iov // grown, maybe
	q.bufs = iov
	q.iovLen = n
}

// tryWrite is the raw function of an inline send: writev until the
// socket is full, without waiting.
func (q *TargetQueue) tryWrite(fd uintptr) {
	for q.wrote < q.iovLen {
		q.tiov = q.tiov[:0]
		skip := q.wrote
		for _, b := range q.bufs {
			if skip >= len(b) { // written, or empty
				skip -= len(b)
				continue
			}
			b = b[skip:]
			skip = 0
			if len(q.tiov) == 1024 { // IOV_MAX
				break
			}
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			q.tiov = append(q.tiov, v)
		}
		// RawSyscall: a writev that does not wait needs no
		// entersyscall, which would wake sysmon from its idle sleep at
		// every QD1 response (docs/tcp.md, "Host wake-ups at QD1").
		w, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&q.tiov[0])), uintptr(len(q.tiov)))
		switch e {
		case 0:
			q.wrote += int(w)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			q.werr = e
		}
		break
	}
	clear(q.tiov) // no data buffer stays reachable from here
	q.tiov = q.tiov[:0]
}

// consume drops the first n bytes of bufs (written by an inline send).
func (q *TargetQueue) consume(n int) {
	for n > 0 && len(q.bufs) > 0 {
		if n < len(q.bufs[0]) {
			q.bufs[0] = q.bufs[0][n:]
			return
		}
		n -= len(q.bufs[0])
		q.bufs = q.bufs[1:]
	}
}

// finishSending ends the send of q.sending (done whole by an inline
// sender, or by the writer goroutine), written (err nil) or failed: the
// lent memory goes back, the slots are free, the next sender may go.
func (q *TargetQueue) finishSending(err error, inline bool) {
	clear(q.iov) // no data buffer stays reachable from here
	q.bufs = nil
	for _, it := range q.sending {
		if it.kind&tsendData != 0 {
			// Sent (in the socket) or never will be.
			s := q.slots[it.slot]
			s.req.Gather = region.ReleaseAll(s.req.Gather)
		}
	}
	if err != nil {
		q.shutdown(fmt.Errorf("nvme-tcp: queue %d: send: %w", q.params.QID, err))
	} else {
		freed := q.freed[:0]
		for _, it := range q.sending {
			if it.kind&tsendR2T == 0 {
				q.slots[it.slot].state.Store(tslotFree)
				freed = append(freed, it.slot)
			}
		}
		q.putSlots(freed...)
		q.freed = freed
	}
	q.mu.Lock()
	if inline {
		q.inlined++
	} else {
		q.sent++
	}
	q.busy = false
	if (len(q.pending) > 0 && !q.corked) || q.closed || q.term != nil {
		q.cond.Signal()
	}
	q.mu.Unlock()
}

// writeLoop sends what inline sends could not: the rest of a send the
// socket did not take, and what was queued meanwhile, everything queued
// at once, until the queue closes or a termination request has been
// sent.
func (q *TargetQueue) writeLoop() {
	defer close(q.writerDone)
	for {
		q.mu.Lock()
		for !q.handoff && (len(q.pending) == 0 || q.busy) && !q.closed && q.term == nil {
			q.cond.Wait()
		}
		if q.closed || q.term != nil {
			// An inline send ends first (it does not wait for the
			// socket): the C2HTermReq must not cut into its PDUs.
			for q.busy && !q.handoff {
				q.cond.Wait()
			}
			// What is queued is not sent: the lent memory goes back.
			for _, it := range q.pending {
				s := q.slots[it.slot]
				s.req.Gather = region.ReleaseAll(s.req.Gather)
			}
			q.pending = q.pending[:0]
			handoff := q.handoff
			q.handoff = false
			t, closed := q.term, q.closed
			q.mu.Unlock()
			if handoff {
				// The PDUs begun end first (the write deadline of a
				// termination bounds it; a closed socket fails it).
				_, err := q.bufs.WriteTo(q.c)
				q.finishSending(err, false)
			}
			if t != nil && !closed {
				q.c.Write(t)
			}
			return
		}
		if q.handoff {
			q.handoff = false
		} else {
			q.busy = true
			q.pending, q.sending = q.sending[:0], q.pending
			q.mu.Unlock()
			q.buildIOV()
			q.mu.Lock()
		}
		q.mu.Unlock()
		_, err := q.bufs.WriteTo(q.c)
		q.finishSending(err, false)
		if err != nil {
			return
		}
	}
}

// targetDigestPad is the header digest room left unused without header digests.
func (q *TargetQueue) targetDigestPad() int {
	if q.hdgst {
		return 0
	}
	return DigestLen
}
