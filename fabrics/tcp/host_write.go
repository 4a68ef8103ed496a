package tcp

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Sizes of the writer's batch.
const (
	hostBatch   = 64  // items the writer takes from the ring at once
	hostMaxPDUs = 64  // PDUs per writev
	hostHdrRoom = 256 // room per PDU for its header, header digest and padding (PDO < 256)
	hostMaxIOV  = 3 * hostMaxPDUs
)

// hostWriteItem is one item the writer took from the ring: a capsule, or
// the H2CData answering one R2T.
type hostWriteItem struct {
	slot   uint16
	kind   uint8
	ttag   uint16
	off, n uint32
	cmd    *fabrics.HostCommand
}

// hostWriter is the state of whoever writes the socket (hostQueue.wmu):
// the batch it took and the iovecs, headers and digests of the PDUs it
// sends with one writev. Nothing in it is allocated per command.
type hostWriter struct {
	batch    [hostBatch]hostWriteItem
	hdrs     []byte // hostMaxPDUs * hostHdrRoom
	ddg      [hostMaxPDUs][DigestLen]byte
	iov      []unix.Iovec
	npdu     int
	wpos     int   // the first iovec not yet written
	werr     error // writev's error
	msg      unix.Msghdr
	wpfd     [1]unix.PollFd // for the waits on a full socket
	rest     int            // items of a batch an inline send left to the writer goroutine
	inlined  uint64         // batches sent whole by an inline send (for tests)
	handedTo uint64         // batches the writer goroutine sent or finished (for tests)
}

func (q *hostQueue) initWriter() {
	q.hdrs = make([]byte, hostMaxPDUs*hostHdrRoom)
	q.iov = make([]unix.Iovec, 0, hostMaxIOV)
}

// send writes what the ring holds from the calling goroutine when nobody
// else is writing, with a writev that does not wait (what the socket does
// not take goes to the writer goroutine), or wakes the writer goroutine.
// Saving the writer's wake-up is most of a QD1 command's cost on a
// machine where wake-ups are dear.
func (q *hostQueue) send() {
	if !q.wmu.TryLock() {
		q.wake()
		return
	}
	if q.rest > 0 {
		q.wmu.Unlock()
		q.wake()
		return
	}
	n, more, closed := q.take(hostMaxPDUs)
	if closed || n == 0 {
		q.wmu.Unlock()
		if closed || more {
			q.wake()
		}
		return
	}
	q.layout(n)
	q.wpos, q.werr = 0, nil
	q.writev()
	err := q.werr
	if err == nil && q.wpos < len(q.iov) {
		q.rest = n // the writer goroutine writes the rest
		q.wmu.Unlock()
		q.wake()
		return
	}
	q.inlined++
	q.endWrite()
	var fin [hostBatch]*fabrics.HostCommand
	k := q.finishBatch(n, &fin)
	q.wmu.Unlock()
	q.runDone(fin[:k])
	if err != nil {
		q.shutdown(fmt.Errorf("nvme-tcp: queue %d: send: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
		return
	}
	if more {
		q.wake()
	}
}

// writeLoop sends what the ring holds, and what inline sends left, until
// the queue closes, then tears the queue down.
func (q *hostQueue) writeLoop() {
	defer q.teardown()
	var fin [hostBatch]*fabrics.HostCommand
	for {
		select {
		case <-q.kick:
		case <-q.closing:
		}
		q.wmu.Lock()
		if q.rest > 0 {
			n := q.rest
			q.rest = 0
			q.handedTo++
			err := q.flushFrom(q.wpos)
			k := q.finishBatch(n, &fin)
			q.wmu.Unlock()
			q.runDone(fin[:k])
			if err != nil {
				q.shutdown(fmt.Errorf("nvme-tcp: queue %d: send: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
			}
			q.wmu.Lock()
		}
		for {
			n, _, closed := q.take(0)
			if closed {
				q.mu.Lock()
				term := q.term
				q.mu.Unlock()
				if term != nil {
					q.sendTerm(term)
				}
				q.wmu.Unlock()
				return
			}
			if n == 0 {
				break
			}
			q.handedTo++
			err := q.sendBatch(n)
			k := q.finishBatch(n, &fin)
			q.wmu.Unlock()
			q.runDone(fin[:k])
			if err != nil {
				q.shutdown(fmt.Errorf("nvme-tcp: queue %d: send: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
			}
			q.wmu.Lock()
		}
		q.wmu.Unlock()
	}
}

// itemPDUs is how many PDUs slot s's queued item is.
func (q *hostQueue) itemPDUs(s *hostSlot) int {
	if s.item == hostItemData {
		return int((s.r2tl + q.hp.maxH2CData - 1) / q.hp.maxH2CData)
	}
	return 1
}

// take moves up to hostBatch items from the ring to the batch (under
// wmu); with maxPDUs > 0, only as many as make that many PDUs, so that
// they go in one writev. more reports items left in the ring.
func (q *hostQueue) take(maxPDUs int) (n int, more, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, false, true
	}
	pdus := 0
	for n < hostBatch && q.ringLen > 0 {
		i := q.ring[q.ringHead]
		s := &q.slots[i]
		if maxPDUs > 0 {
			if pdus += q.itemPDUs(s); pdus > maxPDUs {
				break
			}
		}
		q.ringHead = (q.ringHead + 1) % len(q.ring)
		q.ringLen--
		s.queued = false
		s.writing++
		it := &q.batch[n]
		*it = hostWriteItem{slot: i, kind: s.item, cmd: s.cmd}
		if s.item == hostItemData {
			it.ttag, it.off, it.n = s.ttag, s.r2to, s.r2tl
		} else {
			it.n = uint32(s.inline)
		}
		n++
	}
	return n, q.ringLen > 0, false
}

// finishBatch completes the batch's commands whose CQE came while their
// PDUs were being written: it puts them in fin for runDone, to be called
// once wmu is released (a Done may submit).
func (q *hostQueue) finishBatch(n int, fin *[hostBatch]*fabrics.HostCommand) int {
	k := 0
	q.mu.Lock()
	for j := range n {
		it := &q.batch[j]
		s := &q.slots[it.slot]
		s.writing--
		if c := q.complete(s); c != nil {
			fin[k] = c
			k++
		}
		it.cmd = nil
	}
	q.mu.Unlock()
	return k
}

// runDone runs the Done callbacks of cmds and clears them.
func (q *hostQueue) runDone(cmds []*fabrics.HostCommand) {
	for j, c := range cmds {
		cmds[j] = nil
		c.Done(c)
	}
}

// sendBatch writes the PDUs of the batch's n items, hostMaxPDUs per
// writev, waiting for the socket when it is full.
func (q *hostQueue) sendBatch(n int) error {
	return q.layoutFrom(n, true)
}

// layout lays out the PDUs of the batch's n items (at most hostMaxPDUs,
// as take counted them) for one writev.
func (q *hostQueue) layout(n int) {
	q.layoutFrom(n, false)
}

// layoutFrom lays out the PDUs of the batch's n items; with flush, it
// writes them every hostMaxPDUs and at the end.
func (q *hostQueue) layoutFrom(n int, flush bool) error {
	q.iov, q.npdu = q.iov[:0], 0
	for j := range n {
		it := &q.batch[j]
		cid := binary.LittleEndian.Uint16(it.cmd.SQE[2:])
		switch it.kind {
		case hostItemCapsule:
			h := q.addPDU(TypeCapsuleCmd, CapsuleCmdHLen, it.cmd.Data[:it.n], 0)
			copy(h[CommonHeaderLen:CapsuleCmdHLen], it.cmd.SQE[:])
			q.sealPDU(h, CapsuleCmdHLen)
		case hostItemData:
			// H2CData PDUs of at most MAXH2CDATA bytes, the last one
			// of the R2T flagged.
			for off, end := it.off, it.off+it.n; off < end; {
				l := min(end-off, q.hp.maxH2CData)
				var fl uint8
				if off+l == end {
					fl = FlagDataLast
				}
				h := q.addPDU(TypeH2CData, DataHLen, it.cmd.Data[off:off+l], fl)
				d := DataPDU(h)
				d.SetCCCID(cid)
				d.SetTTag(it.ttag)
				d.SetDataO(off)
				d.SetDataL(l)
				q.sealPDU(h, DataHLen)
				off += l
				if flush && q.npdu == hostMaxPDUs {
					if err := q.flush(); err != nil {
						return err
					}
				}
			}
		}
		if flush && q.npdu == hostMaxPDUs {
			if err := q.flush(); err != nil {
				return err
			}
		}
	}
	if !flush {
		return nil
	}
	return q.flush()
}

// addPDU lays out one PDU of type t with header length hlen and data:
// its header room (returned, the common header filled in: flags, HLEN,
// PDO and PLEN, padding zeroed), the data in place and its data digest.
// The caller fills the PDU-specific header and then calls sealPDU.
func (q *hostQueue) addPDU(t PDUType, hlen int, data []byte, flags uint8) []byte {
	k := q.npdu
	q.npdu++
	room := q.hdrs[k*hostHdrRoom : (k+1)*hostHdrRoom]
	hd, dd := 0, 0
	if q.hp.hdgst {
		hd = DigestLen
		flags |= FlagHDGST
	}
	hend := hlen + hd
	pdo := 0
	if len(data) > 0 {
		align := (int(q.hp.cpda) + 1) * 4
		pdo = (hend + align - 1) / align * align
		if q.hp.ddgst {
			dd = DigestLen
			flags |= FlagDDGST
		}
	}
	hdrLen := max(hend, pdo)
	clear(room[:hdrLen])
	h := Header(room)
	h.SetType(t)
	h.SetFlags(flags)
	h.SetHLen(uint8(hlen))
	h.SetPDO(uint8(pdo))
	h.SetPLen(uint32(hdrLen + len(data) + dd))
	q.addIOV(room[:hdrLen])
	if len(data) > 0 {
		q.addIOV(data)
		if dd > 0 {
			binary.LittleEndian.PutUint32(q.ddg[k][:], Digest(data))
			q.addIOV(q.ddg[k][:])
		}
	}
	return room
}

// sealPDU writes the header digest of the header in room, once it is
// complete.
func (q *hostQueue) sealPDU(room []byte, hlen int) {
	if q.hp.hdgst {
		binary.LittleEndian.PutUint32(room[hlen:], Digest(room[:hlen]))
	}
}

func (q *hostQueue) addIOV(b []byte) {
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	q.iov = append(q.iov, v)
}

// flush writes the iovecs laid out so far with writev, waiting in ppoll
// while the socket is full (shut ends the wait once the queue is closing:
// at once, or a second later when an H2CTermReq is to go).
func (q *hostQueue) flush() error {
	return q.flushFrom(0)
}

// flushFrom is flush from iovec wpos on (what an inline send left).
func (q *hostQueue) flushFrom(wpos int) error {
	if len(q.iov) == 0 {
		return nil
	}
	q.wpos, q.werr = wpos, nil
	for !q.writev() {
		q.wwaits.Add(1)
		q.sock.wait(&q.wpfd, unix.POLLOUT, nil)
	}
	err := q.werr
	q.endWrite()
	return err
}

// endWrite drops the iovecs (and their references to the commands' data).
func (q *hostQueue) endWrite() {
	clear(q.iov)
	q.iov, q.npdu = q.iov[:0], 0
}

// writev writes the iovecs from wpos on without waiting, and reports
// false when the socket is full. It is sendmsg with MSG_NOSIGNAL: a write
// to a socket shut down (shut) or reset fails with EPIPE, raising no
// SIGPIPE in fio's process.
func (q *hostQueue) writev() bool {
	for q.wpos < len(q.iov) {
		n := min(len(q.iov)-q.wpos, 1024) // IOV_MAX
		q.msg.Iov = &q.iov[q.wpos]
		q.msg.SetIovlen(n)
		w, _, e := syscall.Syscall(syscall.SYS_SENDMSG, uintptr(q.sock.fd), uintptr(unsafe.Pointer(&q.msg)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			q.werr = e
			return true
		}
		q.advance(int(w))
	}
	return true
}

// advance consumes w written bytes from the iovecs at wpos.
func (q *hostQueue) advance(w int) {
	for w > 0 && q.wpos < len(q.iov) {
		v := &q.iov[q.wpos]
		if uint64(w) < uint64(v.Len) {
			v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), w))
			v.SetLen(int(v.Len) - w)
			return
		}
		w -= int(v.Len)
		q.wpos++
	}
}

// sendTerm writes the H2CTermReq term (the write deadline of shutdown
// bounds it).
func (q *hostQueue) sendTerm(term PDU) {
	q.iov = q.iov[:0]
	q.addIOV(term)
	if err := q.flush(); err != nil {
		q.log.Debug("H2CTermReq not sent", "error", err)
	}
}
