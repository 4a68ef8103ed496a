package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// targetReadBufSize is the per-connection receive buffer: PDU headers and small
// in-capsule data come through it in few reads; larger data is read
// straight into the slot's buffer.
const targetReadBufSize = 32 << 10

// targetHdrRoom holds a C2HData header, its digest and the padding up to the
// largest HPDA alignment (128 bytes).
const targetHdrRoom = 128

// slot states.
const (
	tslotFree    = iota
	tslotH2C     // waiting for the host's H2CData (R2T queued or sent)
	tslotHandler // with the handler
	tslotSending // response queued for the writer
)

// targetSlot is the state of one command in flight: the request, its data
// buffer (grown once to the largest transfer it has seen) and the PDU
// headers the writer sends from.
type targetSlot struct {
	req     fabrics.Request
	state   atomic.Uint32 // tslotFree, …: the reader checks it against H2CData
	dir     fabrics.DataDirection
	dataLen int // bytes the command's SGL describes
	got     int // H2CData bytes received
	buf     []byte
	hdrLen  int // C2HData header bytes in hdr (with digest and padding)
	send    uint8
	hdr     [targetHdrRoom]byte
	resp    [CapsuleRespHLen + DigestLen]byte
	r2t     [DataHLen + DigestLen]byte
	ddgst   [DigestLen]byte
}

// What the writer sends for a slot (slot.send and targetSendItem.kind bits).
const (
	tsendR2T  = 1 << iota
	tsendData // C2HData
	tsendResp // CapsuleResp
)

type targetSendItem struct {
	slot int32
	kind uint8
}

// TargetQueue is one NVMe/TCP connection (an admin or I/O queue) seen from the
// target. It implements fabrics.TargetQueue: one goroutine reads PDUs and
// delivers commands, another writes R2Ts, data and responses in batches.
type TargetQueue struct {
	l      *Listener
	c      *net.TCPConn
	br     *bufio.Reader
	log    hclog.Logger
	remote fabrics.Address

	params    fabrics.QueueParams
	depth     int
	inline    int // in-capsule data accepted once connected
	maxXfer   int
	hpda      uint8
	hdgst     bool
	ddgst     bool
	sqflowOff bool // Connect CATTR: SQ flow control disabled
	connectBy time.Time
	connected atomic.Bool

	// Reader state.
	hbuf  [CapsuleCmdHLen + DigestLen]byte // the PDU header being read
	first bool                             // hbuf holds the first capsule, not yet handled
	slots []*targetSlot                    // allocated on first use
	// Free slot indexes, a stack: the slots (and buffers) in use are as
	// many as the commands the host keeps outstanding, not the depth.
	// It holds slot 0 only until the Connect succeeds.
	freeMu   sync.Mutex
	freeList []int32
	freeWake chan struct{} // a slot came back (the reader may wait for one)
	handler  fabrics.CommandHandler
	dgst     [DigestLen]byte
	// plug holds the backend submissions of the commands of one burst
	// (Request.Plug of every slot): the reader flushes it before it
	// waits (beforeWait).
	plug fabrics.SubmitPlug

	// Send state, under mu.
	mu      sync.Mutex
	cond    sync.Cond
	pending []targetSendItem
	busy    bool   // someone (an inline sender, the writer) sends sending
	handoff bool   // an inline send left the rest of bufs to the writer
	corked  bool   // the reader is in a burst: it sends what is queued at its end
	term    []byte // a C2HTermReq to send before closing
	closed  bool
	// Of the sender (busy).
	sending []targetSendItem
	iov     [][]byte
	iovLen  int
	bufs    net.Buffers
	tiov    []syscall.Iovec
	wrote   int
	werr    error
	tryFn   func(fd uintptr) // bound once: a method value per send would allocate
	freed   []int32          // the list of slots a send frees
	inlined uint64           // sends done whole inline, under mu (for tests)
	sent    uint64           // sends by the writer goroutine, under mu (for tests)

	raw        syscall.RawConn
	rcorked    bool          // the reader's view of corked
	hdrRead    int           // header bytes of the PDU being read (with digest)
	dead       chan struct{} // closed by shutdown
	writerDone chan struct{}
	timer      *time.Timer
	closeOnce  sync.Once
	closeErr   error // why the queue closed first (set once by shutdown)
}

var _ fabrics.TargetQueue = (*TargetQueue)(nil)
var _ fabrics.Completer = (*TargetQueue)(nil)

func newTargetQueue(l *Listener, c *net.TCPConn, hpda uint8, hdgst, ddgst bool, log hclog.Logger) *TargetQueue {
	q := &TargetQueue{
		l:          l,
		c:          c,
		log:        log,
		maxXfer:    l.cfg.MaxTransfer,
		hpda:       hpda,
		hdgst:      hdgst,
		ddgst:      ddgst,
		dead:       make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	q.cond.L = &q.mu
	q.raw, _ = c.SyscallConn() // fails only on a closed connection, whose sends fail anyway
	q.br = bufio.NewReaderSize(newTargetRawReader(q), targetReadBufSize)
	q.tryFn = q.tryWrite
	q.remote = fabrics.Address{Transport: fabrics.TransportTCP}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		q.remote.Addr, q.remote.ServiceID = ap.Addr().Unmap(), ap.Port()
	}
	return q
}

// readFirstCapsule reads the first PDU's header, which must be a command
// capsule holding a Connect, and takes the queue's parameters from it.
// Its data stays in the stream for the reader.
func (q *TargetQueue) readFirstCapsule() error {
	if err := q.readHeader(); err != nil {
		return err
	}
	h := Header(q.hbuf[:CommonHeaderLen])
	sqe := q.hbuf[CommonHeaderLen:CapsuleCmdHLen]
	if h.Type() != TypeCapsuleCmd || sqe[0] != fabrics.OpcodeFabrics || fabrics.FCType(sqe[4]) != fabrics.FCTypeConnect {
		targetSendTermReq(q.c, FESPDUSequenceError, 0, q.hbuf[:h.HLen()])
		return fmt.Errorf("first capsule is %s opcode %#x, want a Connect", h.Type(), sqe[0])
	}
	cmd := fabrics.ConnectCommand(sqe)
	q.params = fabrics.QueueParams{QID: cmd.QID(), SQSize: int(cmd.SQSize()) + 1}
	q.params.RQSize = q.params.SQSize
	q.sqflowOff = cmd.CAttr()&(1<<2) != 0
	limit := q.l.cfg.MaxQueueSize
	q.inline = q.l.cfg.InlineDataSize
	if q.params.QID == 0 {
		limit = AdminQueueDepth
		q.inline = AdminInlineDataSize
	}
	// A larger queue than the port takes is refused by the target's
	// Connect (MQES); the transport never holds more slots than that.
	q.depth = min(max(q.params.SQSize, 1), limit)
	q.slots = make([]*targetSlot, q.depth)
	// Small until the Connect succeeds (a connection that never sends
	// one holds little); the lists grow to the largest batch once and
	// keep their capacity.
	q.freeList = make([]int32, 1, 4)
	q.freeWake = make(chan struct{}, 1)
	q.pending = make([]targetSendItem, 0, 4)
	q.sending = make([]targetSendItem, 0, 4)
	q.iov = make([][]byte, 0, 8)
	q.freed = make([]int32, 0, 4)
	q.first = true
	return nil
}

// Params implements fabrics.TargetQueue.
func (q *TargetQueue) Params() fabrics.QueueParams { return q.params }

// Depth implements fabrics.TargetQueue.
func (q *TargetQueue) Depth() int { return q.depth }

// Remote implements fabrics.TargetQueue.
func (q *TargetQueue) Remote() fabrics.Address { return q.remote }

// MaxTransfer implements fabrics.TargetQueue.
func (q *TargetQueue) MaxTransfer() int { return q.maxXfer }

// InCapsuleDataSize implements fabrics.TargetQueue.
func (q *TargetQueue) InCapsuleDataSize() int { return q.inline }

// Digests reports whether header and data digests are on.
func (q *TargetQueue) Digests() (header, data bool) { return q.hdgst, q.ddgst }

// Close implements fabrics.TargetQueue.
func (q *TargetQueue) Close() error {
	q.shutdown(fabrics.ErrQueueClosed)
	return nil
}

// Serve implements fabrics.TargetQueue.
func (q *TargetQueue) Serve(h fabrics.CommandHandler) {
	q.handler = h
	q.c.SetDeadline(time.Time{})
	if d := time.Until(q.connectBy); !q.connectBy.IsZero() {
		q.timer = time.AfterFunc(d, func() {
			if !q.connected.Load() {
				q.log.Warn("no Connect within the connect timeout: queue closed")
				q.shutdown(ErrConnectTimeout)
			}
		})
	}
	go q.writeLoop()
	go q.readLoop()
}

// shutdown closes the connection once; the reader then stops and calls
// the handler's QueueClosed.
func (q *TargetQueue) shutdown(err error) {
	q.closeOnce.Do(func() {
		q.closeErr = err
		q.mu.Lock()
		q.closed = true
		q.cond.Broadcast()
		q.mu.Unlock()
		close(q.dead)
		if q.timer != nil {
			q.timer.Stop()
		}
		q.c.Close()
		if err != nil && !errors.Is(err, fabrics.ErrQueueClosed) {
			q.log.Warn("queue closed", "qid", q.params.QID, "error", err)
		}
	})
}

func (q *TargetQueue) readLoop() {
	q.shutdown(q.readPDUs())
	<-q.writerDone
	q.handler.QueueClosed(q.closeErr)
}

// targetFatalError is a protocol error that ends the queue with a C2HTermReq.
type targetFatalError struct {
	fes uint16
	fei uint32
	err error
}

func (e *targetFatalError) Error() string { return e.err.Error() }
func (e *targetFatalError) Unwrap() error { return e.err }

func targetFatal(fes uint16, fei uint32, format string, args ...any) error {
	return &targetFatalError{fes: fes, fei: fei, err: fmt.Errorf("nvme-tcp: "+format, args...)}
}

// readPDUs reads and handles PDUs until the connection fails or the host
// breaks the protocol; then it sends the C2HTermReq a fatal error asks for.
func (q *TargetQueue) readPDUs() error {
	err := q.readPDULoop()
	var fe *targetFatalError
	if errors.As(err, &fe) && fe.fes != 0 {
		h := Header(q.hbuf[:CommonHeaderLen])
		n := min(int(h.HLen()), CapsuleCmdHLen)
		if h.Type().HeaderLen() == 0 {
			n = CommonHeaderLen
		}
		q.mu.Lock()
		if !q.closed {
			q.term = AppendTermReq(nil, TypeC2HTermReq, fe.fes, fe.fei, q.hbuf[:n])
			q.c.SetWriteDeadline(time.Now().Add(time.Second))
			q.cond.Broadcast()
		}
		q.mu.Unlock()
		select {
		case <-q.writerDone:
		case <-q.dead:
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("nvme-tcp: queue %d: connection closed: %w", q.params.QID, fabrics.ErrQueueClosed)
	}
	return err
}

func (q *TargetQueue) readPDULoop() error {
	defer q.plug.Flush() // nothing held back stays unsubmitted
	if q.first {
		q.first = false
		if err := q.onPDU(); err != nil {
			return err
		}
	}
	for {
		// The buffer empty: what is queued goes now, before the reader
		// waits for the socket. More PDUs in it than the one read: the
		// backend operations and the responses of a burst of commands
		// go together once the reader has taken the last.
		if q.br.Buffered() == 0 {
			q.beforeWait()
		}
		if err := q.readHeader(); err != nil {
			return err
		}
		if q.br.Buffered() > int(Header(q.hbuf[:CommonHeaderLen]).PLen())-q.hdrRead {
			q.cork()
		}
		if err := q.onPDU(); err != nil {
			return err
		}
	}
}

// readHeader reads one PDU header (and its digest) into hbuf and checks
// it: a type the host may send, the type's HLEN, digest flags as
// negotiated, a matching header digest.
func (q *TargetQueue) readHeader() error {
	var r io.Reader = q.br
	if q.params.SQSize == 0 {
		r = q.c // the first capsule, read before the queue has its reader
	}
	if _, err := io.ReadFull(r, q.hbuf[:CommonHeaderLen]); err != nil {
		return err
	}
	h := Header(q.hbuf[:CommonHeaderLen])
	hlen, err := q.checkHeader(h)
	if err != nil {
		return err
	}
	end := hlen
	if q.hdgst && h.Type() != TypeH2CTermReq {
		end += DigestLen
	}
	if _, err := io.ReadFull(r, q.hbuf[CommonHeaderLen:end]); err != nil {
		return err
	}
	q.hdrRead = end
	if h.Type() == TypeH2CTermReq {
		t := TermReq(q.hbuf[:hlen])
		return fmt.Errorf("nvme-tcp: queue %d: the host terminated the connection: FES %#x FEI %#x", q.params.QID, t.FES(), t.FEI())
	}
	if q.hdgst {
		got := binary.LittleEndian.Uint32(q.hbuf[hlen:])
		if want := Digest(q.hbuf[:hlen]); got != want {
			// nvmet-tcp ends the queue (and its controller) too; it
			// sends no termination request, the specification asks for
			// one with Header Digest Error.
			return targetFatal(FESHeaderDigestError, 0, "queue %d: %s header digest %#08x, computed %#08x: %w", q.params.QID, h.Type(), got, want, ErrDigest)
		}
	}
	return nil
}

// checkHeader checks a common header against what the queue negotiated
// and returns the type's HLEN.
func (q *TargetQueue) checkHeader(h Header) (int, error) {
	t := h.Type()
	switch t {
	case TypeCapsuleCmd, TypeH2CData, TypeH2CTermReq:
	default:
		return 0, targetFatal(FESInvalidHeaderField, 0, "queue %d: unexpected %s", q.params.QID, t)
	}
	hlen := t.HeaderLen()
	if int(h.HLen()) != hlen {
		return 0, targetFatal(FESInvalidHeaderField, 2, "queue %d: %s with HLEN %d, want %d", q.params.QID, t, h.HLen(), hlen)
	}
	if t == TypeH2CTermReq {
		// Carries no digests; the header alone is all we read.
		if h.PLen() < TermReqHLen || h.PLen() > MaxTermReqLen {
			return 0, targetFatal(FESInvalidHeaderField, 4, "queue %d: H2CTermReq PLEN %d", q.params.QID, h.PLen())
		}
		return hlen, nil
	}
	f := h.Flags()
	if (f&FlagHDGST != 0) != q.hdgst {
		// nvmet-tcp: "header digest enabled but no header digest".
		return 0, targetFatal(FESInvalidHeaderField, 1, "queue %d: %s header digest flag %v, negotiated %v", q.params.QID, t, f&FlagHDGST != 0, q.hdgst)
	}
	hend := uint32(hlen)
	if q.hdgst {
		hend += DigestLen
	}
	plen := h.PLen()
	if plen < hend {
		return 0, targetFatal(FESInvalidHeaderField, 4, "queue %d: %s PLEN %d shorter than its header", q.params.QID, t, plen)
	}
	if plen > hend && (f&FlagDDGST != 0) != q.ddgst {
		return 0, targetFatal(FESInvalidHeaderField, 1, "queue %d: %s data digest flag %v, negotiated %v", q.params.QID, t, f&FlagDDGST != 0, q.ddgst)
	}
	return hlen, nil
}

// dataLayout returns the padding before a PDU's data and the data length
// (digest excluded), from PDO and PLEN of the checked header.
func (q *TargetQueue) dataLayout(h Header) (pad, n int, err error) {
	hend := int(h.HLen())
	if q.hdgst {
		hend += DigestLen
	}
	plen := int(h.PLen())
	if plen == hend {
		return 0, 0, nil
	}
	pdo := int(h.PDO())
	if pdo < hend || pdo > plen {
		return 0, 0, targetFatal(FESInvalidHeaderField, 3, "queue %d: %s PDO %d outside %d..%d", q.params.QID, h.Type(), pdo, hend, plen)
	}
	n = plen - pdo
	if q.ddgst {
		n -= DigestLen
	}
	if n < 0 {
		return 0, 0, targetFatal(FESInvalidHeaderField, 4, "queue %d: %s PLEN %d leaves no room for the data digest", q.params.QID, h.Type(), plen)
	}
	return pdo - hend, n, nil
}

func (q *TargetQueue) onPDU() error {
	h := Header(q.hbuf[:CommonHeaderLen])
	pad, n, err := q.dataLayout(h)
	if err != nil {
		return err
	}
	if pad > 0 {
		if _, err := q.br.Discard(pad); err != nil {
			return err
		}
	}
	if h.Type() == TypeCapsuleCmd {
		return q.onCapsule(n)
	}
	return q.onH2CData(n)
}

// readData reads n data bytes into b (len n) and checks the data digest.
func (q *TargetQueue) readData(b []byte, what string) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := io.ReadFull(q.br, b); err != nil {
		return err
	}
	if !q.ddgst {
		return nil
	}
	if _, err := io.ReadFull(q.br, q.dgst[:]); err != nil {
		return err
	}
	got, want := binary.LittleEndian.Uint32(q.dgst[:]), Digest(b)
	if got != want {
		// As nvmet-tcp: the queue ends (its controller with it) and the
		// command gets no completion.
		return fmt.Errorf("nvme-tcp: queue %d: %s data digest %#08x, computed %#08x: %w", q.params.QID, what, got, want, ErrDigest)
	}
	return nil
}

// takeSlot returns a free slot, waiting for the writer to free one when a
// host sends a command as soon as it sees a response the writer has not
// yet accounted for (or, before the Connect succeeded, a second command).
func (q *TargetQueue) takeSlot() (*targetSlot, error) {
	var i int32
	for {
		q.freeMu.Lock()
		if n := len(q.freeList); n > 0 {
			i = q.freeList[n-1]
			q.freeList = q.freeList[:n-1]
			q.freeMu.Unlock()
			break
		}
		q.freeMu.Unlock()
		q.beforeWait() // the I/O and responses that free slots must not wait for the reader
		select {
		case <-q.freeWake:
		case <-q.dead:
			return nil, fabrics.ErrQueueClosed
		}
	}
	s := q.slots[i]
	if s == nil {
		s = &targetSlot{}
		s.req.Slot = int(i)
		s.req.Completer = q
		s.req.Queue = q
		s.req.Plug = &q.plug // the handler runs on the reader (deliver)
		q.slots[i] = s
	}
	return s, nil
}

// putSlots returns slots to the free stack.
func (q *TargetQueue) putSlots(idx ...int32) {
	q.freeMu.Lock()
	q.freeList = append(q.freeList, idx...)
	q.freeMu.Unlock()
	select {
	case q.freeWake <- struct{}{}:
	default:
	}
}

// data returns the slot's buffer of n bytes, grown when needed.
func (s *targetSlot) data(n int) []byte {
	if cap(s.buf) < n {
		s.buf = make([]byte, n)
	}
	return s.buf[:n:n]
}

func (q *TargetQueue) onCapsule(n int) error {
	limit := q.inline
	if !q.connected.Load() {
		limit = targetPreConnectData
	}
	if n > limit {
		return targetFatal(FESDataLimitExceeded, 4, "queue %d: %d bytes of in-capsule data exceed %d", q.params.QID, n, limit)
	}
	s, err := q.takeSlot()
	if err != nil {
		return err
	}
	r := &s.req
	copy(r.SQE[:], q.hbuf[CommonHeaderLen:CapsuleCmdHLen])
	r.CQE = [16]byte{}
	r.Data = nil
	r.InCapsule = false
	r.Refused = nvme.Error{}
	s.dataLen, s.got, s.send = 0, 0, 0
	in := s.data(n)
	if err := q.readData(in, "capsule"); err != nil {
		return err
	}
	if op := r.SQE[0]; op == fabrics.OpcodeFabrics {
		s.dir = fabrics.FCType(r.SQE[4]).Direction()
	} else {
		s.dir = fabrics.DataDirection(op & 3)
	}
	if st := q.mapSGL(s, n); st != 0 {
		// The target completes it (as nvmet_req_complete does for
		// Linux): the SQ head advances and the error is logged.
		r.Refused = nvme.Error{Status: st, DNR: true}
		r.Data, r.InCapsule, s.dataLen = nil, false, 0
	}
	if s.dir == fabrics.DirHostToCtrl && !r.InCapsule && s.dataLen > 0 {
		s.state.Store(tslotH2C)
		q.queueR2T(s)
		return nil
	}
	q.deliver(s)
	return nil
}

// mapSGL checks SGL1 and sets the request's data; it returns a non-zero
// status for a command the queue cannot carry out.
func (q *TargetQueue) mapSGL(s *targetSlot, inCapsule int) nvme.Status {
	r := &s.req
	if psdt := r.SQE[1] >> 6; psdt != 1 {
		return nvme.StatusInvalidField
	}
	sgl := fabrics.SGL(r.SQE[24:40])
	if err := sgl.Validate(fabrics.TCPSGLLimits(inCapsule, q.maxXfer), s.dir); err != nil {
		if e := nvme.AsError(err); e != nil {
			return e.Status
		}
		return nvme.StatusInvalidField
	}
	n := int(sgl.Length())
	if n == 0 {
		return 0
	}
	if s.dir == fabrics.DirBidirectional {
		return nvme.StatusInvalidField
	}
	if !q.connected.Load() && n > targetPreConnectData {
		return nvme.StatusDataSGLLengthInvalid
	}
	s.dataLen = n
	if sgl.Type() == fabrics.SGLTypeDataBlock {
		off := int(sgl.Address())
		r.Data = s.buf[off : off+n : off+n]
		r.InCapsule = true
		return 0
	}
	r.Data = s.data(n)
	if s.dir == fabrics.DirCtrlToHost && (q.params.QID == 0 || r.SQE[0] != byte(nvme.IORead)) {
		// No stale bytes of an earlier command reach the host when a
		// handler fills less than the buffer; an I/O Read fills it all
		// or fails without data.
		clear(r.Data)
	}
	return 0
}

func (q *TargetQueue) onH2CData(n int) error {
	d := DataPDU(q.hbuf[:DataHLen])
	tag := int(d.TTag())
	var s *targetSlot
	if tag < len(q.slots) {
		s = q.slots[tag]
	}
	if s == nil || s.state.Load() != tslotH2C || d.CCCID() != binary.LittleEndian.Uint16(s.req.SQE[2:]) {
		return targetFatal(FESInvalidHeaderField, 10, "queue %d: H2CData for CID %#x TTAG %d: no R2T outstanding", q.params.QID, d.CCCID(), tag)
	}
	off, l := int(d.DataO()), int(d.DataL())
	if off != s.got {
		return targetFatal(FESDataOutOfRange, 12, "queue %d: H2CData offset %d, expected %d", q.params.QID, off, s.got)
	}
	if l != n || l == 0 || l > MaxH2CData || off+l > s.dataLen {
		return targetFatal(FESDataOutOfRange, 16, "queue %d: H2CData length %d (PDU data %d) at %d of %d", q.params.QID, l, n, off, s.dataLen)
	}
	if err := q.readData(s.req.Data[off:off+l], "H2CData"); err != nil {
		return err
	}
	s.got += l
	if s.got == s.dataLen {
		q.deliver(s)
	}
	return nil
}

// deliver hands the command to the handler on the reader goroutine.
func (q *TargetQueue) deliver(s *targetSlot) {
	s.state.Store(tslotHandler)
	q.handler.HandleCommand(&s.req)
}

// targetRawReader reads the connection with non-blocking read(2)s made as
// raw system calls, waiting in the netpoller when the socket is empty (the
// deadlines of the connection apply). net.Conn's Read enters the system
// call through entersyscall, which wakes sysmon from the sleep it takes
// while the process is idle: once per QD1 command, the first read after
// the netpoller's wake-up (docs/tcp.md, "Host wake-ups at QD1").
type targetRawReader struct {
	q   *TargetQueue
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool // bound once: a method value per read would allocate
}

func newTargetRawReader(q *TargetQueue) *targetRawReader {
	r := &targetRawReader{q: q}
	r.fn = r.read
	return r
}

// Read implements io.Reader.
func (r *targetRawReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.b, r.n, r.err = b, 0, nil
	err := r.q.raw.Read(r.fn)
	r.b = nil
	if err != nil {
		return 0, err
	}
	return r.n, r.err
}

// read is Read's raw function: one read, false when the socket is empty.
func (r *targetRawReader) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.b[0])), uintptr(len(r.b)))
		switch e {
		case 0:
			if n == 0 {
				r.err = io.EOF
			}
			r.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			r.err = e
			return true
		}
	}
}
