package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// hostReadBuffer is the reader's buffer: one read takes many small PDUs;
// data of half its size or more is read straight into the command's
// buffer by the reader goroutine. A poller gathers a PDU in it before it
// begins it (so that it never waits): 128 KiB of data and headers fit.
const hostReadBuffer = 256 << 10

// hostReader is the state of whoever reads the socket: the reader
// goroutine or a caller of Poll, one at a time (hostQueue.rmu).
type hostReader struct {
	rbuf []byte // hostReadBuffer bytes: rbuf[rpos:rend] are read and not yet taken
	rpos int
	rend int
	rhdr [hostHdrRoom]byte // the PDU header being read, and a C2HTermReq's data
	rpfd [1]unix.PollFd    // for waits under rmu (the rest of a PDU begun)
	need int               // bytes the next PDU still needs from the socket (drain with whole)
	// emptied: during this drain a read found the socket empty (EAGAIN,
	// or fewer bytes than asked for), so another read would find
	// nothing; what came since is found by the next drain.
	emptied bool
	// lastEmpty: the last read found the socket empty; reads counts
	// the reads (both for tests).
	lastEmpty bool
	reads     uint64
	pdus      uint64 // PDUs read (work found, for Poll)
	rdPDUs    uint64 // of which the reader goroutine read (for tests)
}

// errFatal is returned by the reader after it has ended the connection
// itself (fatal): the PDU it read breaks the protocol.
var errFatal = errors.New("nvme-tcp: protocol error")

func (q *hostQueue) initReader() {
	q.rbuf = make([]byte, hostReadBuffer)
}

// readLoop reads the controller's PDUs until the connection ends. While a
// caller polls the queue (Poll, until PollDone) it leaves the socket to
// the poller: it neither reads nor waits on the socket, so a completion
// wakes no goroutine here. Otherwise it waits in the netpoller for the
// socket (hostSock.waitReadable), woken by the controller's segments or by
// shut.
func (q *hostQueue) readLoop() {
	defer close(q.rdone)
	for {
		if err := q.readStep(); err != nil {
			// A no-op when the queue is closing already (Close, a
			// fatal error): the first reason stays.
			q.shutdown(fmt.Errorf("nvme-tcp: queue %d: connection lost: %w: %w", q.qid, err, fabrics.ErrQueueClosed), nil)
			return
		}
	}
}

// readStep reads and acts on what the socket holds, or waits for it.
func (q *hostQueue) readStep() error {
	if q.polling.Load() {
		q.parked.Store(true)
		defer q.parked.Store(false)
		select {
		case <-q.unpoll:
		case <-q.closing:
			return fabrics.ErrQueueClosed
		}
		return nil
	}
	q.rmu.Lock()
	n := q.pdus
	err := q.drain(hostBatch, false)
	got := q.pdus != n
	q.rdPDUs += q.pdus - n
	q.rmu.Unlock()
	if err != nil || got {
		return err
	}
	// Nothing there: wait until the socket is readable (the read lock
	// is not held meanwhile, so that a poller can take the data).
	q.rwaits.Add(1)
	return q.sock.waitReadable()
}

// drain reads up to max PDUs that have arrived, without waiting for the
// socket when it is empty at a PDU's start (a PDU begun is read to its
// end, waiting for the rest); under rmu. With whole, it begins a PDU only
// when all of it has arrived (in the buffer and the socket), so that it
// never waits: a poller on fio's thread must not park there (waking a
// locked thread costs two switches); it leaves in need the bytes still to
// come, for PollWait.
func (q *hostQueue) drain(max int, whole bool) error {
	q.need, q.emptied = 0, false
	for range max {
		if whole {
			ok, err := q.whole()
			if err != nil || !ok {
				return err
			}
		} else if q.rpos == q.rend {
			if q.emptied {
				return nil
			}
			if err := q.fillMore(); err != nil || q.rpos == q.rend {
				return err
			}
		}
		if err := q.readPDU(); err != nil {
			return err
		}
		q.pdus++
	}
	return nil
}

// fillMore reads what the socket holds after the buffered bytes (moved to
// the buffer's start), without waiting.
func (q *hostQueue) fillMore() error {
	if q.rpos > 0 {
		q.rend = copy(q.rbuf, q.rbuf[q.rpos:q.rend])
		q.rpos = 0
	}
	return q.fill()
}

// whole reports whether the next PDU has arrived whole, reading what the
// socket holds into the buffer; when not, q.need is the number of bytes
// the socket has yet to receive for it. A PDU larger than the buffer is
// begun at once (and waited for).
func (q *hostQueue) whole() (bool, error) {
	if !q.emptied && (q.rend-q.rpos < CommonHeaderLen || int(Header(q.rbuf[q.rpos:q.rend]).PLen()) > q.rend-q.rpos) {
		if err := q.fillMore(); err != nil {
			return false, err
		}
	}
	have := q.rend - q.rpos
	if have < CommonHeaderLen {
		q.need = CommonHeaderLen - have
		return false, nil
	}
	plen := int(Header(q.rbuf[q.rpos:q.rend]).PLen())
	if plen <= have || plen > len(q.rbuf) {
		return true, nil
	}
	q.need = plen - have
	return false, nil
}

// fill is one non-blocking read into the buffer after its bytes.
func (q *hostQueue) fill() error {
	for {
		room := len(q.rbuf) - q.rend
		q.reads++
		n, _, e := syscall.Syscall(syscall.SYS_READ, uintptr(q.sock.fd), uintptr(unsafe.Pointer(&q.rbuf[q.rend])), uintptr(room))
		switch e {
		case 0:
			if n == 0 {
				return io.EOF
			}
			q.rend += int(n)
			q.emptied, q.lastEmpty = int(n) < room, false
			return nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			q.emptied, q.lastEmpty = true, true
			return nil
		default:
			return e
		}
	}
}

// readFull fills b from the buffer, then from the socket (waiting for
// it): straight into b when b is large.
func (q *hostQueue) readFull(b []byte) error {
	for len(b) > 0 {
		if q.rpos < q.rend {
			n := copy(b, q.rbuf[q.rpos:q.rend])
			q.rpos += n
			b = b[n:]
			continue
		}
		q.rpos, q.rend = 0, 0
		if len(b) >= len(q.rbuf)/2 {
			n, err := q.sock.readSome(&q.rpfd, b)
			b = b[n:]
			if err != nil && len(b) > 0 {
				return err
			}
			continue
		}
		n, err := q.sock.readSome(&q.rpfd, q.rbuf)
		q.rend = n
		if err != nil && n == 0 {
			return err
		}
	}
	return nil
}

// discard skips n bytes of the stream.
func (q *hostQueue) discard(n int) error {
	for n > 0 {
		if q.rpos == q.rend {
			q.rpos, q.rend = 0, 0
			m, err := q.sock.readSome(&q.rpfd, q.rbuf[:min(n, len(q.rbuf))])
			q.rend = m
			if err != nil && m == 0 {
				return err
			}
		}
		k := min(n, q.rend-q.rpos)
		q.rpos += k
		n -= k
	}
	return nil
}

// hostPDUCheck is what the reader's header checks found wrong with a PDU:
// the fatal error status and information to answer it with.
type hostPDUCheck struct {
	fes uint16
	fei uint32
	err error
}

// checkHostPDUHeader checks the header of a PDU a host receives (its
// common header and, when hdr holds them, the rest of its header and its
// digest) against the connection's digests: the type is one a controller
// sends after ICResp, HLEN is the type's, the digest flags are the ones
// negotiated, PLEN and PDO agree with them. It is the reader's parser,
// apart so that it can be fuzzed.
func checkHostPDUHeader(hdr []byte, hp hostParams) *hostPDUCheck {
	bad := func(fes uint16, fei uint32, format string, args ...any) *hostPDUCheck {
		return &hostPDUCheck{fes: fes, fei: fei, err: fmt.Errorf(format, args...)}
	}
	if len(hdr) < CommonHeaderLen {
		return bad(FESInvalidHeaderField, 0, "%d bytes for a common header", len(hdr))
	}
	ch := Header(hdr)
	t := ch.Type()
	switch t {
	case TypeCapsuleResp, TypeC2HData, TypeR2T, TypeC2HTermReq:
	default:
		return bad(FESInvalidHeaderField, 0, "unexpected %s", t)
	}
	hlen := t.HeaderLen()
	if int(ch.HLen()) != hlen {
		return bad(FESInvalidHeaderField, 2, "%s with HLEN %d, want %d", t, ch.HLen(), hlen)
	}
	plen := ch.PLen()
	if t == TypeC2HTermReq {
		if plen < TermReqHLen || plen > MaxTermReqLen {
			return bad(FESInvalidHeaderField, 4, "%s with PLEN %d", t, plen)
		}
		return nil
	}
	hd := 0
	if hp.hdgst {
		hd = DigestLen
	}
	if (ch.Flags()&FlagHDGST != 0) != hp.hdgst {
		return bad(FESInvalidHeaderField, 1, "%s with header digest flag %s, negotiated %s", t, onOff(ch.Flags()&FlagHDGST != 0), onOff(hp.hdgst))
	}
	hend := uint32(hlen + hd)
	if t != TypeC2HData {
		if plen != hend || ch.PDO() != 0 || ch.Flags()&FlagDDGST != 0 {
			return bad(FESInvalidHeaderField, 4, "%s with PLEN %d, PDO %d, flags %#x", t, plen, ch.PDO(), ch.Flags())
		}
	} else {
		if (ch.Flags()&FlagDDGST != 0) != hp.ddgst {
			return bad(FESInvalidHeaderField, 1, "%s with data digest flag %s, negotiated %s", t, onOff(ch.Flags()&FlagDDGST != 0), onOff(hp.ddgst))
		}
		if pdo := uint32(ch.PDO()); pdo < hend || pdo%4 != 0 {
			return bad(FESInvalidHeaderField, 3, "%s with PDO %d", t, pdo)
		}
		if ch.Flags()&FlagDataSuccess != 0 && ch.Flags()&FlagDataLast == 0 {
			return bad(FESInvalidHeaderField, 1, "%s with SUCCESS but not LAST", t)
		}
	}
	if len(hdr) < int(hend) {
		return nil // the rest is checked once read
	}
	if hd > 0 {
		got := binary.LittleEndian.Uint32(hdr[hlen:])
		if want := Digest(hdr[:hlen]); got != want {
			return bad(FESHeaderDigestError, 0, "%s header digest %#08x, computed %#08x", t, got, want)
		}
	}
	if t == TypeC2HData {
		d := DataPDU(hdr)
		dd := uint32(0)
		if hp.ddgst {
			dd = DigestLen
		}
		if d.DataL() == 0 || uint64(plen) != uint64(ch.PDO())+uint64(d.DataL())+uint64(dd) {
			return bad(FESInvalidHeaderField, 16, "%s with DATAL %d in PLEN %d (PDO %d)", t, d.DataL(), plen, ch.PDO())
		}
	}
	return nil
}

// readPDU reads and acts on one PDU.
func (q *hostQueue) readPDU() error {
	h := q.rhdr[:CommonHeaderLen]
	if err := q.readFull(h); err != nil {
		return err
	}
	if c := checkHostPDUHeader(h, q.hp); c != nil {
		return q.protoErr(c, CommonHeaderLen)
	}
	ch := Header(h)
	t := ch.Type()
	if t == TypeC2HTermReq {
		return q.readTerm(ch.PLen())
	}
	hlen := t.HeaderLen()
	hend := hlen
	if q.hp.hdgst {
		hend += DigestLen
	}
	if err := q.readFull(q.rhdr[CommonHeaderLen:hend]); err != nil {
		return err
	}
	if c := checkHostPDUHeader(q.rhdr[:hend], q.hp); c != nil {
		return q.protoErr(c, hlen)
	}
	switch t {
	case TypeCapsuleResp:
		q.onResp(nvme.CQE(q.rhdr[CommonHeaderLen:CapsuleRespHLen]))
		return nil
	case TypeR2T:
		return q.onR2T(R2T(q.rhdr[:hlen]))
	default:
		return q.onC2HData(DataPDU(q.rhdr[:hlen]), hend)
	}
}

// protoErr ends the connection over a PDU whose first n header bytes are
// in rhdr.
func (q *hostQueue) protoErr(c *hostPDUCheck, n int) error {
	q.fatal(c.fes, c.fei, q.rhdr[:n], c.err)
	return errFatal
}

// readTerm reads the rest of a C2HTermReq of PLEN plen and ends the queue.
func (q *hostQueue) readTerm(plen uint32) error {
	if err := q.readFull(q.rhdr[CommonHeaderLen:plen]); err != nil {
		return err
	}
	tr := TermReq(q.rhdr[:plen])
	q.log.Error("controller terminated the connection", "fes", tr.FES(), "fei", tr.FEI())
	q.shutdown(fmt.Errorf("nvme-tcp: queue %d: FES %#x FEI %#x: %w: %w", q.qid, tr.FES(), tr.FEI(), ErrTerminated, fabrics.ErrQueueClosed), nil)
	return ErrTerminated
}

// slotOf returns the slot of the outstanding command cid names, under
// q.mu, or nil (an unknown CID, an earlier generation, answered already).
func (q *hostQueue) slotOf(cid uint16) *hostSlot {
	i := int(fabrics.CIDTag(cid))
	if i >= len(q.slots) {
		return nil
	}
	s := &q.slots[i]
	if s.cmd == nil || s.cid != cid || s.replied {
		return nil
	}
	return s
}

// onResp takes a response capsule: a CQE naming no outstanding command is
// dropped and counted (fabrics.StrayCounter).
func (q *hostQueue) onResp(cqe nvme.CQE) {
	q.mu.Lock()
	s := q.slotOf(cqe.CID())
	if s == nil {
		q.mu.Unlock()
		n := q.stray.Add(1)
		q.log.Debug("completion dropped: no such command outstanding", "cid", cqe.CID(), "dropped", n)
		return
	}
	copy(s.cmd.CQE[:], cqe)
	if s.badDig {
		nvme.CQE(s.cmd.CQE[:]).SetStatus(nvme.StatusDataTransferError)
	}
	s.replied = true
	c := q.complete(s)
	q.mu.Unlock()
	if c != nil {
		c.Done(c)
	}
}

// onR2T queues the H2CData that an R2T asks for. With MAXR2T 0 a command
// has one R2T at a time, each asking for the data after the previous one's.
func (q *hostQueue) onR2T(r R2T) error {
	q.mu.Lock()
	s := q.slotOf(r.CCCID())
	var c *hostPDUCheck
	switch {
	case s == nil:
		c = &hostPDUCheck{FESInvalidHeaderField, 8, fmt.Errorf("R2T for command %#x, not outstanding", r.CCCID())}
	case s.cmd.Direction == fabrics.DirCtrlToHost:
		c = &hostPDUCheck{FESInvalidHeaderField, 8, fmt.Errorf("R2T for command %#x, which reads", r.CCCID())}
	case s.queued:
		c = &hostPDUCheck{FESR2TLimitExceeded, 8, fmt.Errorf("R2T for command %#x before the previous one was answered", r.CCCID())}
	case r.R2TO() != s.r2tEnd:
		c = &hostPDUCheck{FESDataOutOfRange, 12, fmt.Errorf("R2T for command %#x at offset %d, expected %d", r.CCCID(), r.R2TO(), s.r2tEnd)}
	case r.R2TL() == 0 || uint64(r.R2TO())+uint64(r.R2TL()) > uint64(len(s.cmd.Data)):
		c = &hostPDUCheck{FESDataOutOfRange, 16, fmt.Errorf("R2T for command %#x of %d bytes at %d, data %d", r.CCCID(), r.R2TL(), r.R2TO(), len(s.cmd.Data))}
	}
	if c != nil {
		q.mu.Unlock()
		return q.protoErr(c, DataHLen)
	}
	s.item, s.ttag, s.r2to, s.r2tl = hostItemData, r.TTag(), r.R2TO(), r.R2TL()
	s.r2tEnd += r.R2TL()
	i := int(fabrics.CIDTag(r.CCCID()))
	q.push(i)
	q.mu.Unlock()
	q.send()
	return nil
}

// onC2HData reads the data of a C2HData PDU (its header, hend bytes with
// the digest, read) into the command's buffer.
func (q *hostQueue) onC2HData(d DataPDU, hend int) error {
	ch := Header(d)
	q.mu.Lock()
	s := q.slotOf(d.CCCID())
	var c *hostPDUCheck
	switch {
	case s == nil:
		c = &hostPDUCheck{FESInvalidHeaderField, 8, fmt.Errorf("C2HData for command %#x, not outstanding", d.CCCID())}
	case s.cmd.Direction == fabrics.DirHostToCtrl:
		c = &hostPDUCheck{FESInvalidHeaderField, 8, fmt.Errorf("C2HData for command %#x, which writes", d.CCCID())}
	case d.DataO() != uint32(s.recvd):
		c = &hostPDUCheck{FESDataOutOfRange, 12, fmt.Errorf("C2HData for command %#x at offset %d, expected %d", d.CCCID(), d.DataO(), s.recvd)}
	case uint64(d.DataO())+uint64(d.DataL()) > uint64(len(s.cmd.Data)):
		c = &hostPDUCheck{FESDataOutOfRange, 16, fmt.Errorf("C2HData for command %#x of %d bytes at %d, data %d", d.CCCID(), d.DataL(), d.DataO(), len(s.cmd.Data))}
	}
	var cmd *fabrics.HostCommand
	if s != nil {
		cmd = s.cmd
	}
	q.mu.Unlock()
	if c != nil {
		return q.protoErr(c, DataHLen)
	}
	// The command cannot complete meanwhile (no CQE yet, and teardown
	// waits for this goroutine): its buffer is ours to fill.
	if pad := int(ch.PDO()) - hend; pad > 0 {
		if err := q.discard(pad); err != nil {
			return err
		}
	}
	dst := cmd.Data[d.DataO() : d.DataO()+d.DataL()]
	if err := q.readFull(dst); err != nil {
		return err
	}
	if q.hp.ddgst {
		var b [DigestLen]byte
		if err := q.readFull(b[:]); err != nil {
			return err
		}
		if got, want := binary.LittleEndian.Uint32(b[:]), Digest(dst); got != want {
			// As Linux: the command fails with Data Transfer Error,
			// the connection goes on.
			q.log.Warn("data digest error", "cid", d.CCCID(), "received", got, "computed", want)
			s.badDig = true
		}
	}
	s.recvd += int(d.DataL())
	if ch.Flags()&FlagDataSuccess == 0 {
		return nil
	}
	// SUCCESS: no response capsule follows.
	q.mu.Lock()
	cqe := nvme.CQE(cmd.CQE[:])
	clear(cqe)
	cqe.SetCID(d.CCCID())
	cqe.SetSQID(q.qid)
	if s.badDig {
		cqe.SetStatus(nvme.StatusDataTransferError)
	}
	s.replied = true
	done := q.complete(s)
	q.mu.Unlock()
	if done != nil {
		done.Done(done)
	}
	return nil
}
