package tcp

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"unsafe"

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

// hostWriter is the writer goroutine's state: the batch it took and the
// iovecs, headers and digests of the PDUs it sends with one writev.
// Nothing in it is allocated per command.
type hostWriter struct {
	batch   [hostBatch]hostWriteItem
	fin     [hostBatch]*fabrics.HostCommand
	hdrs    []byte // hostMaxPDUs * hostHdrRoom
	ddg     [hostMaxPDUs][DigestLen]byte
	iov     []syscall.Iovec
	npdu    int
	wpos    int   // the first iovec not yet written
	werr    error // writev's error
	writeFn func(fd uintptr) bool
}

func (q *hostQueue) initWriter() {
	q.hdrs = make([]byte, hostMaxPDUs*hostHdrRoom)
	q.iov = make([]syscall.Iovec, 0, hostMaxIOV)
	q.writeFn = q.writev // bound once: a method value per write would allocate
}

// writeLoop sends what the ring holds until the queue closes, then tears
// the queue down.
func (q *hostQueue) writeLoop() {
	defer q.teardown()
	for {
		n, closed, term := q.take()
		if closed {
			if term != nil {
				q.sendTerm(term)
			}
			return
		}
		if n == 0 {
			select {
			case <-q.kick:
			case <-q.closing:
			}
			continue
		}
		err := q.sendBatch(n)
		q.finishBatch(n)
		if err != nil {
			q.shutdown(fmt.Errorf("nvme-tcp: queue %d: send: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
		}
	}
}

// take moves up to hostBatch items from the ring to the batch.
func (q *hostQueue) take() (n int, closed bool, term PDU) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, true, q.term
	}
	for n < hostBatch && q.ringLen > 0 {
		i := q.ring[q.ringHead]
		q.ringHead = (q.ringHead + 1) % len(q.ring)
		q.ringLen--
		s := &q.slots[i]
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
	return n, false, nil
}

// finishBatch completes the batch's commands whose CQE came while their
// PDUs were being written.
func (q *hostQueue) finishBatch(n int) {
	k := 0
	q.mu.Lock()
	for j := range n {
		it := &q.batch[j]
		s := &q.slots[it.slot]
		s.writing--
		if c := q.complete(s); c != nil {
			q.fin[k] = c
			k++
		}
		it.cmd = nil
	}
	q.mu.Unlock()
	for j := range k {
		c := q.fin[j]
		q.fin[j] = nil
		c.Done(c)
	}
}

// sendBatch writes the PDUs of the batch's n items, hostMaxPDUs per writev.
func (q *hostQueue) sendBatch(n int) error {
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
				if q.npdu == hostMaxPDUs {
					if err := q.flush(); err != nil {
						return err
					}
				}
			}
		}
		if q.npdu == hostMaxPDUs {
			if err := q.flush(); err != nil {
				return err
			}
		}
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
	v := syscall.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	q.iov = append(q.iov, v)
}

// flush writes the iovecs laid out so far with writev, waiting in the
// netpoller while the socket is full (the write deadline bounds it once
// the queue is closing).
func (q *hostQueue) flush() error {
	if len(q.iov) == 0 {
		return nil
	}
	q.wpos, q.werr = 0, nil
	err := q.raw.Write(q.writeFn)
	if err == nil {
		err = q.werr
	}
	clear(q.iov) // drop the references to the commands' data
	q.iov, q.npdu = q.iov[:0], 0
	return err
}

// writev is the raw write function of flush: it writes the iovecs from
// wpos on, and reports false when the socket is full.
func (q *hostQueue) writev(fd uintptr) bool {
	for q.wpos < len(q.iov) {
		n := min(len(q.iov)-q.wpos, 1024) // IOV_MAX
		w, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&q.iov[q.wpos])), uintptr(n))
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
