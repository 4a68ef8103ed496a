package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// The delivery path of a target queue: a completion, a command capsule,
// its data buffer and RDMA READ, the handler, and the response with its
// RDMA WRITE.

// complete handles one work completion on the goroutine that runs the
// CQ's handler, one at a time: the commands it delivers may wait in the
// queue's plug (hplug), flushed at the end of the batch (flushPlug).
func (q *targetQueue) complete(wc *rdma.WorkCompletion) {
	plug := &q.hplug
	if wc.WRID&wrKind == wrSend {
		defer q.sendDone() // whatever its status: a close may wait for it
	}
	if q.rpool != nil && wc.WRID&wrKind == wrRecv {
		q.onSRQRecv(wc, plug)
		return
	}
	i := int(wc.WRID &^ wrKind)
	probe := wc.WRID == wrProbe
	if !probe && (i >= len(q.slots) || q.slots[i] == nil) {
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: completion for unknown WR %#x", q.qid, wc.WRID))
		return
	}
	switch {
	case wc.Status == rdma.WRFlushError:
		// The QP is in the error state: whatever put it there (a
		// disconnect, a teardown, an earlier failed work request)
		// came first and gave the reason.
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: work requests flushed: %w", q.qid, fabrics.ErrQueueClosed))
		return
	case wc.Status != rdma.Success:
		if probe {
			q.log.Warn("liveness probe failed: host unreachable", "status", wc.Status)
		} else {
			q.log.Warn("work request failed", "wr", wc.WRID>>56, "slot", i, "status", wc.Status)
		}
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, wc.Err()))
		return
	case probe:
		q.probing.Store(false)
		return
	}
	s := q.slots[i]
	switch wc.WRID & wrKind {
	case wrRecv:
		q.recvs.Add(1)
		s.recvLen = int(wc.ByteLen)
		q.onCapsule(i, plug)
	case wrRead:
		q.readMu.Lock()
		q.reads--
		q.readMu.Unlock()
		q.deliver(s, plug)
		q.startWaitingReads()
	case wrSend:
		// The response is out, and the RDMA WRITE before it is done:
		// the data buffer goes back to the pool, the slot's receive
		// buffer takes the next capsule.
		q.putBufs(s)
		if q.rpool != nil {
			q.pushFree(i)
			return
		}
		if err := q.qp.PostRecv(&s.recvWR); err != nil {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: repost receive: %w", q.qid, err))
		}
	}
}

// onCapsule parses a received command capsule and starts its data
// transfer or hands it to the handler (with plug, as deliver).
func (q *targetQueue) onCapsule(i int, plug *fabrics.SubmitPlug) {
	s := q.slots[i]
	if s.recvLen < nvme.SQESize {
		// As nvmet-rdma: a capsule without a whole SQE ends the queue.
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %d-byte command capsule", q.qid, s.recvLen))
		return
	}
	r := &s.req
	copy(r.SQE[:], s.recvBuf[:nvme.SQESize])
	r.CQE = [16]byte{}
	r.Data = nil
	r.InCapsule = false
	s.keyed, s.inval, s.dataLen = false, false, 0
	sqe := nvme.SQE(r.SQE[:])
	if op := sqe.Opcode(); op == fabricsOpcode {
		s.dir = fabrics.FCType(r.SQE[4]).Direction()
	} else {
		s.dir = fabrics.DataDirection(op & 3)
	}
	r.Refused = nvme.Error{}
	if st := q.mapSGL(s); st != 0 {
		// The target completes it, as nvmet_req_complete does for Linux:
		// the SQ head advances and the error is logged.
		r.Refused = nvme.Error{Status: st, DNR: true}
		r.Data = nil
		s.keyed, s.dataLen = false, 0
		q.deliver(s, plug)
		return
	}
	if !s.keyed || s.dataLen == 0 {
		q.deliver(s, plug)
		return
	}
	// Keyed data: a staging buffer from the pool, now or when one comes
	// back.
	s.w.size = s.dataLen
	ok, err := q.l.pool.get(&s.w)
	switch {
	case err != nil:
		q.log.Error("no data buffer", "error", err)
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, err))
	case ok:
		q.withData(s, plug)
	}
}

// grantedData runs when the pool gives a waiting slot its buffer, on the
// goroutine that returned one.
func grantedData(w *poolWaiter) {
	w.slot.q.withData(w.slot, nil)
}

// withData sets the slot's staging up in its pool buffer (w.buf) and
// moves the command on: the RDMA READ of its data, or the handler (with
// plug, as deliver).
func (q *targetQueue) withData(s *targetSlot, plug *fabrics.SubmitPlug) {
	q.slotMu.Lock()
	if q.released {
		// Torn down while it waited.
		q.slotMu.Unlock()
		q.l.pool.put(s.w.buf)
		return
	}
	buf, addr, lkey := q.l.pool.bytes(s.w.buf)
	s.setData(buf, addr, lkey)
	r := &s.req
	r.Data = buf[:s.dataLen:s.dataLen]
	if s.dir != fabrics.DirHostToCtrl && (q.qid == 0 || r.SQE[0] != byte(nvme.IORead)) {
		// No stale bytes of an earlier command reach the host if a
		// handler fills less than the buffer. An I/O queue's Read
		// either fills all of it (the target requires the SGL length
		// to equal the transfer length) or fails without a data
		// transfer, so it needs no clearing.
		clear(r.Data)
	}
	q.slotMu.Unlock()
	if s.dir != fabrics.DirHostToCtrl {
		q.deliver(s, plug)
		return
	}
	q.readMu.Lock()
	if q.reads >= q.readsMax {
		q.waiting = append(q.waiting, s.req.Slot)
		q.readMu.Unlock()
		return
	}
	q.reads++
	q.readMu.Unlock()
	q.postRead(s)
}

// fabricsOpcode is the opcode of every Fabrics command.
const fabricsOpcode = 0x7f

// mapSGL reads SGL1 of the command as nvmet-rdma does and sets the
// request's data buffer; it returns a non-zero status for a bad descriptor.
func (q *targetQueue) mapSGL(s *targetSlot) nvme.Status {
	r := &s.req
	if psdt := r.SQE[1] >> 6; psdt != 1 {
		return nvme.StatusInvalidField
	}
	sgl := fabrics.SGL(r.SQE[24:40])
	switch sgl.Identifier() >> 4 {
	case 0x4: // keyed data block
		sub := sgl.Identifier() & 0xf
		if sub != 0x0 && sub != 0xf {
			return nvme.StatusSGLDescriptorTypeInvalid
		}
		n := int(sgl.KeyedLength())
		if n > q.maxXfer {
			// More than MDTS allows: Invalid Field in Command (NVMe base
			// specification, MDTS).
			return nvme.StatusInvalidField
		}
		if n > preConnectData && !q.connected.Load() {
			// Before the Connect: more than the Connect's data.
			return nvme.StatusDataSGLLengthInvalid
		}
		s.keyed = true
		s.inval = sub == 0xf
		s.rkey = sgl.Key()
		s.raddr = sgl.Address()
		s.dataLen = n
	case 0x0: // data block: only the offset subtype, in-capsule
		if sgl.Identifier()&0xf != 0x1 {
			return nvme.StatusSGLDescriptorTypeInvalid
		}
		if s.dir != fabrics.DirHostToCtrl {
			return nvme.StatusInvalidField
		}
		off, n := sgl.Address(), uint64(sgl.Length())
		if off+n > uint64(q.inline) || off+n < off {
			return nvme.StatusSGLOffsetInvalid
		}
		if int(off+n) > s.recvLen-nvme.SQESize {
			return nvme.StatusDataSGLLengthInvalid
		}
		start := nvme.SQESize + int(off)
		r.Data = s.recvBuf[start : start+int(n) : start+int(n)]
		r.InCapsule = true
		s.dataLen = int(n)
	default:
		return nvme.StatusSGLDescriptorTypeInvalid
	}
	return 0
}

// postRead posts the slot's RDMA READ (counted in q.reads).
func (q *targetQueue) postRead(s *targetSlot) {
	s.readSGE[0].Length = uint32(s.dataLen)
	s.readWR.RemoteAddr = s.raddr
	s.readWR.RKey = s.rkey
	q.post(nil, 0, &s.readWR, chainRead, "RDMA READ")
}

// startWaitingReads posts the READs that waited for room, in order.
func (q *targetQueue) startWaitingReads() {
	for {
		q.readMu.Lock()
		if len(q.waiting) == 0 || q.reads >= q.readsMax {
			q.readMu.Unlock()
			return
		}
		i := q.waiting[0]
		copy(q.waiting, q.waiting[1:])
		q.waiting = q.waiting[:len(q.waiting)-1]
		q.reads++
		q.readMu.Unlock()
		q.postRead(q.slots[i])
	}
}

// deliver hands the command to the handler, unless the queue is gone.
// The handler sees a queue's commands one at a time (the TargetQueue
// contract): a command resumed by a pool buffer comes back on whichever
// goroutine returned that buffer, possibly another queue's or a backend
// worker, possibly inside this queue's own HandleCommand (a handler that
// completes at once). A delivery that finds another one running leaves
// its slot to that one, which hands it over before it stops. plug is the
// delivering goroutine's: the commands it hands over (its own and those
// left to it) may wait there; nil submits at once.
func (q *targetQueue) deliver(s *targetSlot, plug *fabrics.SubmitPlug) {
	q.slotMu.Lock()
	if q.released {
		q.slotMu.Unlock()
		return
	}
	if q.delivering {
		q.deferred = append(q.deferred, s.req.Slot)
		q.slotMu.Unlock()
		return
	}
	q.delivering = true
	for {
		s.inHandler = true
		s.req.Plug = plug
		q.slotMu.Unlock()
		q.handler.HandleCommand(&s.req)
		q.slotMu.Lock()
		if len(q.deferred) == 0 || q.released {
			// Torn down: the teardown took the buffers of the deferred
			// slots, which were not with the handler.
			q.deferred = q.deferred[:0]
			q.delivering = false
			q.slotMu.Unlock()
			return
		}
		s = q.slots[q.deferred[0]]
		n := copy(q.deferred, q.deferred[1:])
		q.deferred = q.deferred[:n]
	}
}

// CompleteRequest implements fabrics.Completer: the RDMA WRITE of read
// data (on success) and the SEND of the CQE, with Invalidate when the host
// asked for it. It may be called from any goroutine.
func (q *targetQueue) CompleteRequest(r *fabrics.Request) {
	s := q.slots[r.Slot]
	q.slotMu.Lock()
	s.inHandler = false
	counted := q.released // the teardown left this slot to us (held)
	q.slotMu.Unlock()
	if !q.sendPosting() {
		// Nothing more is sent: the data buffer, which no RDMA uses
		// now (the READ is done, no WRITE was posted), goes back, and
		// so does the SRQ buffer the capsule came in (unless the
		// teardown, seeing the slot out of the handler, took them).
		q.putBufs(s)
		if counted {
			q.handlerDone()
		}
		return
	}
	cqe := nvme.CQE(r.CQE[:])
	cqe.SetCID(binary.LittleEndian.Uint16(r.SQE[2:]))
	cqe.SetSQID(q.qid)
	if !q.connected.Load() && r.SQE[0] == fabricsOpcode && fabrics.FCType(r.SQE[4]) == fabrics.FCTypeConnect && cqe.Status().Success() {
		if err := q.grow(); err != nil {
			q.log.Error("cannot allocate the queue's buffers after its Connect", "error", err)
			q.shutdown(err)
			q.sendDone()
			return
		}
	}
	copy(s.respBuf, r.CQE[:])
	send := &s.sendWR
	if s.inval {
		send.Opcode = rdma.WRSendWithInv
		send.InvalidateRKey = s.rkey
	} else {
		send.Opcode = rdma.WRSend
	}
	var w *rdma.SendWR
	if s.keyed && s.dir == fabrics.DirCtrlToHost && s.dataLen > 0 && cqe.Status() == 0 {
		w = &s.writeWR
		if len(r.Gather) == 0 || !q.gatherSGL(s, r) {
			if len(r.Gather) > 0 {
				copyGather(s, r)
			}
			w.SGL = s.writeSGE[:1]
			s.writeSGE[0] = s.dataSGE
			s.writeSGE[0].Length = uint32(s.dataLen)
		}
		w.RemoteAddr = s.raddr
		w.RKey = s.rkey
	} else {
		// Without an RDMA WRITE the data has moved (or will not): the
		// buffer goes back before the response can free the slot.
		q.putData(s)
	}
	q.post(w, chainWrite, send, chainSend, "response")
}
