package rdma

import (
	"errors"
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// A target queue's slots and their buffers: a slot's layout and work
// requests, the free slots and the SRQ receives (with the port's SRQ),
// the data pool's buffers.

// WRIDs: the kind of work request in the top byte, the slot below.
const (
	wrRecv  = 1 << 56
	wrRead  = 2 << 56
	wrWrite = 3 << 56
	wrSend  = 4 << 56
	wrProbe = 5 << 56
	wrKind  = 0xff << 56
)

type targetSlot struct {
	q       *targetQueue
	req     fabrics.Request
	recvBuf []byte // 64-byte SQE + in-capsule data, as received
	respBuf []byte // 16-byte CQE, as sent
	// The RDMA READ/WRITE staging of a command with keyed data: the
	// pool buffer w.buf, nil when the slot holds none (under the queue's
	// slotMu). w is the slot's place among the pool's waiters.
	dataBuf []byte
	w       poolWaiter
	// Under slotMu: the command is with the handler (delivered,
	// CompleteRequest not yet called). The data buffer goes back when
	// both the handler and the transport are done with it.
	inHandler bool
	// With the port's SRQ: the index of the receive buffer (recvBuf)
	// the slot's command arrived in, -1 for none (under slotMu).
	recvIdx  int
	recvLen  int
	dir      fabrics.DataDirection
	keyed    bool
	inval    bool
	rkey     uint32
	raddr    uint64
	dataLen  int
	recvSGE  [1]rdma.SGE
	recvWR   rdma.RecvWR
	readSGE  [1]rdma.SGE
	readWR   rdma.SendWR
	dataSGE  rdma.SGE // the staging buffer (setData)
	writeSGE [maxGatherSGE]rdma.SGE
	writeWR  rdma.SendWR
	sendSGE  [1]rdma.SGE
	sendWR   rdma.SendWR
}

// initSlot lays slot i out over buf (the receive buffer, then the CQE) at
// addr in the region of lkey.
func (q *targetQueue) initSlot(s *targetSlot, i int, buf []byte, addr uint64, lkey uint32) {
	rs := q.recvSize
	s.recvBuf = buf[:rs:rs]
	s.respBuf = buf[rs : rs+nvme.CQESize : rs+nvme.CQESize]
	s.recvSGE[0] = rdma.SGE{Addr: addr, Length: uint32(rs), LKey: lkey}
	s.recvWR = rdma.RecvWR{WRID: wrRecv | uint64(i), SGL: s.recvSGE[:]}
	s.sendSGE[0] = rdma.SGE{Addr: addr + uint64(rs), Length: nvme.CQESize, LKey: lkey}
	s.sendWR = rdma.SendWR{WRID: wrSend | uint64(i), SGL: s.sendSGE[:], Opcode: rdma.WRSend, Flags: rdma.SendSignaled}
	s.readWR = rdma.SendWR{WRID: wrRead | uint64(i), SGL: s.readSGE[:], Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled}
	s.writeWR = rdma.SendWR{WRID: wrWrite | uint64(i), SGL: s.writeSGE[:1], Opcode: rdma.WRRDMAWrite}
	s.req.Slot = i
	s.req.Completer = q
	s.req.Queue = q
	s.q = q
	s.w.slot = s
	s.w.granted = grantedData
	s.recvIdx = -1
}

// postRecvs posts the receive buffers of the slots (the queue's receive
// ring); with the port's SRQ the queue has none of its own.
func (q *targetQueue) postRecvs(slots []*targetSlot) error {
	if q.rpool != nil {
		return nil
	}
	for _, s := range slots {
		if err := q.qp.PostRecv(&s.recvWR); err != nil {
			return err
		}
	}
	return nil
}

// pushFree makes slot i free for the next capsule (SRQ only).
func (q *targetQueue) pushFree(i int) {
	if q.rpool == nil {
		return
	}
	q.freeMu.Lock()
	q.free = append(q.free, i)
	q.freeMu.Unlock()
}

// popFree takes a free slot, -1 if there is none (SRQ only).
func (q *targetQueue) popFree() int {
	q.freeMu.Lock()
	defer q.freeMu.Unlock()
	n := len(q.free)
	if n == 0 {
		return -1
	}
	i := q.free[n-1]
	q.free = q.free[:n-1]
	return i
}

// takeRecv hands the slot's SRQ buffer back to the caller, who reposts
// it (q.slotMu held).
func (s *targetSlot) takeRecv() int {
	b := s.recvIdx
	s.recvIdx = -1
	s.recvBuf = nil
	return b
}

// repostRecv gives SRQ buffer b (if any) back to the SRQ.
func (q *targetQueue) repostRecv(b int) {
	if b < 0 {
		return
	}
	if err := q.rpool.repost(b); err != nil {
		if errors.Is(err, rdma.ErrClosed) {
			// The port's device is closed (nvmetd stopping): the SRQ
			// goes with it, nothing is lost.
			q.log.Debug("SRQ buffer not reposted: device closed", "error", err)
			return
		}
		q.log.Error("SRQ buffer lost", "error", err)
	}
}

// onSRQRecv handles a receive completion from the port's SRQ: the
// capsule takes a free slot. The host sends at most depth commands at a
// time, and the slots are twice that (the slack for responses whose
// SEND has not completed yet), so a capsule without a slot is a host
// that exceeded its queue depth, or sent more than its Connect before
// the Connect succeeded (a pending queue has preConnectSlots slots):
// the queue is closed, as a receive queue overrun would close it.
func (q *targetQueue) onSRQRecv(wc *rdma.WorkCompletion, plug *fabrics.SubmitPlug) {
	b := int(wc.WRID &^ wrKind)
	if b >= len(q.rpool.bufs) {
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: completion for unknown SRQ buffer %#x", q.qid, wc.WRID))
		return
	}
	q.rpool.taken()
	if wc.Status != rdma.Success {
		q.repostRecv(b)
		if wc.Status == rdma.WRFlushError {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: work requests flushed: %w", q.qid, fabrics.ErrQueueClosed))
			return
		}
		q.log.Warn("receive failed", "status", wc.Status)
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, wc.Err()))
		return
	}
	q.recvs.Add(1)
	if n := int(wc.ByteLen); n > nvme.SQESize+q.inline {
		// The SRQ's buffers take the port's in-capsule data; a queue
		// takes less (none on the admin queue). A capsule larger than
		// its own would have overrun a receive buffer of its ring: the
		// queue ends the same way, with or without the SRQ.
		q.repostRecv(b)
		q.log.Warn("command capsule larger than the queue's receive size", "bytes", n, "max", nvme.SQESize+q.inline)
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %d-byte command capsule exceeds %d: %w", q.qid, n, nvme.SQESize+q.inline,
			&rdma.WCError{Status: rdma.LocalLengthError, WRID: wc.WRID, QPN: wc.QPN}))
		return
	}
	i := q.popFree()
	if i < 0 {
		q.repostRecv(b)
		what := "more commands than its queue depth"
		if !q.connected.Load() {
			what = "a command before its Connect succeeded"
		}
		q.log.Warn("host sent "+what+": queue closed", "slots", len(q.slots))
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: the host sent %s", q.qid, what))
		return
	}
	s := q.slots[i]
	q.slotMu.Lock()
	s.recvIdx = b
	s.recvBuf = q.rpool.bufs[b].buf
	q.slotMu.Unlock()
	s.recvLen = int(wc.ByteLen)
	q.onCapsule(i, plug)
}

// setData points the slot's RDMA READ and WRITE staging at buf.
func (s *targetSlot) setData(buf []byte, addr uint64, lkey uint32) {
	s.dataBuf = buf
	s.readSGE[0] = rdma.SGE{Addr: addr, LKey: lkey}
	s.dataSGE = rdma.SGE{Addr: addr, LKey: lkey}
}

// takeData hands the slot's pool buffer back to the caller, who puts it
// in the pool (q.slotMu held): the buffer is no longer the slot's. The
// backend memory a READ lent goes back too.
func (s *targetSlot) takeData() (poolBuf, bool) {
	if len(s.req.Gather) > 0 {
		s.req.Gather = region.ReleaseAll(s.req.Gather)
	}
	if s.dataBuf == nil {
		return poolBuf{}, false
	}
	s.dataBuf = nil
	s.req.Data = nil
	return s.w.buf, true
}

// putData returns the slot's pool buffer, if it holds one.
func (q *targetQueue) putData(s *targetSlot) {
	q.slotMu.Lock()
	b, ok := s.takeData()
	q.slotMu.Unlock()
	if ok {
		q.l.pool.put(b)
	}
}

// putBufs gives back what slot s holds once its command is over: its
// data buffer to the pool and, with the SRQ, its capsule's receive
// buffer to the SRQ.
func (q *targetQueue) putBufs(s *targetSlot) {
	q.slotMu.Lock()
	b, ok := s.takeData()
	rb := -1
	if q.rpool != nil {
		rb = s.takeRecv()
	}
	q.slotMu.Unlock()
	if ok {
		q.l.pool.put(b)
	}
	q.repostRecv(rb)
}
