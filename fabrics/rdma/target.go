package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// Defaults of a target port, as the Linux nvmet-rdma target has them where
// it has them.
const (
	// AdminQueueDepth is the largest admin queue (NVME_AQ_DEPTH).
	AdminQueueDepth = 32
	// DefaultInlineDataSize is the in-capsule data an I/O queue command may carry.
	DefaultInlineDataSize = 8192
	// MaxInlineDataSize bounds the configurable in-capsule data size.
	MaxInlineDataSize = 16384
	// DefaultMaxQueueSize is the largest I/O queue a host may open
	// (NVME_RDMA_MAX_QUEUE_SIZE is 128 in Linux 6.1).
	DefaultMaxQueueSize = 128
	// DefaultMaxTransfer is the most data one command moves (MDTS 5 with
	// 4 KiB pages).
	DefaultMaxTransfer = 128 << 10
	// DefaultRDMAReads is the most RDMA READs a queue issues at once.
	DefaultRDMAReads = 16
)

// TargetConfig configures an NVMe/RDMA target port.
type TargetConfig struct {
	Device    rdma.Device
	ServiceID uint16 // RDMA_PS_TCP port, 4420 by default
	// InlineDataSize is the in-capsule data size of I/O queues (0 means
	// DefaultInlineDataSize; negative means none).
	InlineDataSize int
	MaxQueueSize   int // 0 means DefaultMaxQueueSize
	MaxTransfer    int // 0 means DefaultMaxTransfer
	Logger         hclog.Logger
}

// Listener is an NVMe/RDMA target port: it accepts the queues hosts open
// through the RDMA connection manager. It implements fabrics.Listener.
type Listener struct {
	cfg      TargetConfig
	log      hclog.Logger
	cml      rdma.Listener
	addr     fabrics.Address
	accepted chan *targetQueue
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Listen starts an NVMe/RDMA target port on cfg.Device.
func Listen(cfg TargetConfig) (*Listener, error) {
	if cfg.Device == nil {
		return nil, errors.New("nvme-rdma: target: no RDMA device")
	}
	if cfg.ServiceID == 0 {
		cfg.ServiceID = fabrics.DefaultServiceID
	}
	switch {
	case cfg.InlineDataSize == 0:
		cfg.InlineDataSize = DefaultInlineDataSize
	case cfg.InlineDataSize < 0:
		cfg.InlineDataSize = 0
	case cfg.InlineDataSize > MaxInlineDataSize:
		return nil, fmt.Errorf("nvme-rdma: target: inline data size %d exceeds %d", cfg.InlineDataSize, MaxInlineDataSize)
	}
	if cfg.MaxQueueSize == 0 {
		cfg.MaxQueueSize = DefaultMaxQueueSize
	}
	if cfg.MaxQueueSize < 2 || cfg.MaxQueueSize > 1024 {
		return nil, fmt.Errorf("nvme-rdma: target: max queue size %d outside 2..1024", cfg.MaxQueueSize)
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = DefaultMaxTransfer
	}
	if cfg.MaxTransfer < 4096 || cfg.MaxTransfer > 1<<24-1 {
		return nil, fmt.Errorf("nvme-rdma: target: max transfer %d outside 4 KiB..16 MiB", cfg.MaxTransfer)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cm, err := cfg.Device.ConnManager()
	if err != nil {
		return nil, fmt.Errorf("nvme-rdma: target: %w", err)
	}
	cml, err := cm.Listen(cfg.ServiceID)
	if err != nil {
		return nil, fmt.Errorf("nvme-rdma: target: listen on %s port %d: %w", cfg.Device.Addr(), cfg.ServiceID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{
		cfg:      cfg,
		log:      cfg.Logger,
		cml:      cml,
		addr:     fabrics.Address{Transport: fabrics.TransportRDMA, Addr: cfg.Device.Addr(), ServiceID: cfg.ServiceID},
		accepted: make(chan *targetQueue),
		ctx:      ctx,
		cancel:   cancel,
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Accept implements fabrics.Listener.
func (l *Listener) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	select {
	case q := <-l.accepted:
		return q, nil
	case <-l.ctx.Done():
		return nil, fmt.Errorf("nvme-rdma: %s: %w", l.addr, rdma.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Address implements fabrics.Listener.
func (l *Listener) Address() fabrics.Address { return l.addr }

// Close implements fabrics.Listener.
func (l *Listener) Close() error {
	l.cancel()
	err := l.cml.Close()
	l.wg.Wait()
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		req, err := l.cml.Next(l.ctx)
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Error("connection manager listener failed", "error", err)
			}
			return
		}
		// Set up each queue on its own goroutine: Accept waits for the
		// host's RTU.
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			q, err := l.setup(req)
			if err != nil {
				l.log.Warn("queue refused", "host", req.RemoteAddr(), "error", err)
				return
			}
			select {
			case l.accepted <- q:
			case <-l.ctx.Done():
				q.Close()
			}
		}()
	}
}

// reject answers a connection request with an NVMe/RDMA reject status.
func (l *Listener) reject(req rdma.ConnRequest, sts CMRejectStatus, why error) error {
	b := make(CMReject, CMRejectLen)
	b.Set(sts)
	if err := req.Reject(b); err != nil {
		return fmt.Errorf("%w (and the reject failed: %v)", why, err)
	}
	return fmt.Errorf("rejected (%s): %w", sts, why)
}

// setup validates a connection request, creates the queue's resources and
// accepts the connection.
func (l *Listener) setup(req rdma.ConnRequest) (*targetQueue, error) {
	cr, err := ParseCMRequest(req.PrivateData())
	if err != nil {
		return nil, l.reject(req, CMInvalidLength, err)
	}
	if cr.Recfmt() != CMRecfmt {
		return nil, l.reject(req, CMInvalidRecfmt, fmt.Errorf("record format %d", cr.Recfmt()))
	}
	qid := cr.QID()
	depth := int(cr.HSQSize()) + 1 // commands the host may send at once
	switch {
	case cr.HSQSize() == 0:
		return nil, l.reject(req, CMInvalidHSQSize, errors.New("HSQSIZE 0"))
	case qid == 0 && depth > AdminQueueDepth:
		return nil, l.reject(req, CMInvalidHSQSize, fmt.Errorf("admin queue of %d entries exceeds %d", depth, AdminQueueDepth))
	case depth > l.cfg.MaxQueueSize:
		return nil, l.reject(req, CMInvalidHSQSize, fmt.Errorf("queue of %d entries exceeds %d", depth, l.cfg.MaxQueueSize))
	case cr.HRQSize() == 0:
		return nil, l.reject(req, CMInvalidHRQSize, errors.New("HRQSIZE 0"))
	}
	inline := l.cfg.InlineDataSize
	if qid == 0 {
		inline = 0 // as nvmet-rdma: no in-capsule data on the admin queue
	}
	peer := req.Param()
	reads := min(int(peer.ResponderResources), DefaultRDMAReads, l.cfg.Device.Attr().MaxQPRdAtom)
	if reads < 1 {
		reads = 1
	}
	q, err := newTargetQueue(l, qid, depth, inline, reads, req)
	if err != nil {
		return nil, l.reject(req, CMNoResources, err)
	}
	acc := make(CMAccept, CMAcceptLen)
	acc.Set(uint16(depth))
	param := rdma.ConnParam{
		ResponderResources: 0,
		InitiatorDepth:     uint8(reads),
		RetryCount:         7,
		RNRRetryCount:      7,
		FlowControl:        true,
	}
	ctx, cancel := context.WithTimeout(l.ctx, acceptTimeout)
	defer cancel()
	conn, err := req.Accept(ctx, q.qp, acc, param)
	if err != nil {
		q.Close() // the queue goroutine releases the resources
		return nil, fmt.Errorf("nvme-rdma: accept queue %d from %s: %w", qid, req.RemoteAddr(), err)
	}
	q.conn = conn
	q.log.Debug("queue connected", "qid", qid, "depth", depth, "inline", inline, "rdma_reads", reads)
	go q.watchConn()
	return q, nil
}

// WRIDs: the kind of work request in the top byte, the slot below.
const (
	wrRecv  = 1 << 56
	wrRead  = 2 << 56
	wrWrite = 3 << 56
	wrSend  = 4 << 56
	wrKind  = 0xff << 56
)

type targetSlot struct {
	req      fabrics.Request
	recvBuf  []byte // 64-byte SQE + in-capsule data, as received
	respBuf  []byte // 16-byte CQE, as sent
	dataBuf  []byte // RDMA READ/WRITE staging, MaxTransfer bytes
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
	writeSGE [1]rdma.SGE
	writeWR  rdma.SendWR
	sendSGE  [1]rdma.SGE
	sendWR   rdma.SendWR
}

// targetQueue is one NVMe queue on an RC QP. Its goroutine polls the CQ.
type targetQueue struct {
	l       *Listener
	log     hclog.Logger
	qid     uint16
	depth   int
	inline  int
	maxXfer int
	params  fabrics.QueueParams
	remote  fabrics.Address

	verbs
	conn rdma.Conn

	slots []targetSlot

	// reads limits the RDMA READs in flight; waiting holds slots whose
	// READ could not be posted yet, in arrival order.
	readsMax int
	reads    int
	waiting  []int

	// While a batch of completions is handled (begin to end), the work
	// requests it produces collect in chains and leave as one PostSend
	// at its end: the RDMA READs, then the RDMA WRITEs, then the response
	// SENDs, so that packets of equal size sit together (a provider can
	// send such runs as one datagram burst, GSO on loopback).
	postMu  sync.Mutex
	plugged bool
	chains  [3]wrChain

	handler  fabrics.CommandHandler
	serveCh  chan struct{}
	closed   atomic.Bool
	closeErr error
	closing  chan struct{}
	once     sync.Once
	done     chan struct{}
}

const acceptTimeout = 30e9 // 30 s for the host's RTU

// wrChain is a list of send work requests linked by Next.
type wrChain struct{ head, tail *rdma.SendWR }

func (c *wrChain) add(wr *rdma.SendWR) {
	wr.Next = nil
	if c.tail == nil {
		c.head = wr
	} else {
		c.tail.Next = wr
	}
	c.tail = wr
}

// The chains of a batch, in the order they are posted.
const (
	chainRead = iota
	chainWrite
	chainSend
)

// begin opens a batch of completions (batcher).
func (q *targetQueue) begin() {
	q.postMu.Lock()
	q.plugged = true
	q.postMu.Unlock()
}

// end closes the batch and posts what it collected (batcher).
func (q *targetQueue) end() {
	q.postMu.Lock()
	q.plugged = false
	var all wrChain
	for k := range q.chains {
		c := &q.chains[k]
		if c.head == nil {
			continue
		}
		if all.tail == nil {
			all.head = c.head
		} else {
			all.tail.Next = c.head
		}
		all.tail = c.tail
		*c = wrChain{}
	}
	q.postMu.Unlock()
	if all.head != nil {
		if err := q.qp.PostSend(all.head); err != nil {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: post send: %w", q.qid, err))
		}
	}
}

// post posts one or two work requests (a may be nil) in that order, or
// adds them to their chains while a batch is open. ka and kb name the
// chains.
func (q *targetQueue) post(a *rdma.SendWR, ka int, b *rdma.SendWR, kb int, what string) {
	q.postMu.Lock()
	if q.plugged {
		if a != nil {
			q.chains[ka].add(a)
		}
		q.chains[kb].add(b)
		q.postMu.Unlock()
		return
	}
	q.postMu.Unlock()
	b.Next = nil
	first := b
	if a != nil {
		a.Next = b
		first = a
	}
	if err := q.qp.PostSend(first); err != nil {
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: post %s: %w", q.qid, what, err))
	}
}

func newTargetQueue(l *Listener, qid uint16, depth, inline, reads int, req rdma.ConnRequest) (*targetQueue, error) {
	dev := l.cfg.Device
	q := &targetQueue{
		l:        l,
		log:      l.log.With("qid", qid, "host", req.RemoteAddr().Addr()),
		qid:      qid,
		depth:    depth,
		inline:   inline,
		maxXfer:  l.cfg.MaxTransfer,
		readsMax: reads,
		params: fabrics.QueueParams{
			QID:    qid,
			SQSize: depth,
			RQSize: 0,
		},
		remote: fabrics.Address{Transport: fabrics.TransportRDMA, Addr: req.RemoteAddr().Addr(), ServiceID: l.cfg.ServiceID},
		// Twice the host's queue depth in receive buffers and requests,
		// as nvmet-rdma allocates twice its responses: a slot returns to
		// the receive queue only when its response SEND has completed
		// (the host's ACK), and by then the host may already have sent
		// the next commands. Without the slack such a command meets no
		// receive buffer and draws an RNR NAK.
		slots:   make([]targetSlot, 2*depth),
		waiting: make([]int, 0, 2*depth),
		serveCh: make(chan struct{}),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if cr, err := ParseCMRequest(req.PrivateData()); err == nil {
		q.params.RQSize = int(cr.HRQSize())
		q.params.CntlID = cr.CntlID()
	}
	var err error
	if q.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("allocate PD: %w", err)
	}
	// Each command takes one receive, at most one RDMA READ or WRITE and
	// one SEND.
	nslots := len(q.slots)
	if q.cq, err = dev.CreateCQ(3*nslots + 1); err != nil {
		q.destroy()
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	q.qp, err = q.pd.CreateQP(&rdma.QPInitAttr{
		Type:   rdma.QPTypeRC,
		SendCQ: q.cq,
		RecvCQ: q.cq,
		Cap:    rdma.QPCap{MaxSendWR: 2*nslots + 1, MaxRecvWR: nslots, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		q.destroy()
		return nil, fmt.Errorf("create QP: %w", err)
	}
	recvSize := nvme.SQESize + inline
	per := recvSize + nvme.CQESize + q.maxXfer
	mem := make([]byte, per*nslots)
	if q.mr, err = q.pd.RegMR(mem, rdma.AccessLocalWrite); err != nil {
		q.destroy()
		return nil, fmt.Errorf("register %d bytes: %w", len(mem), err)
	}
	base := q.mr.Addr()
	lkey := q.mr.LKey()
	for i := range q.slots {
		s := &q.slots[i]
		off := i * per
		s.recvBuf = mem[off : off+recvSize : off+recvSize]
		s.respBuf = mem[off+recvSize : off+recvSize+nvme.CQESize : off+recvSize+nvme.CQESize]
		s.dataBuf = mem[off+recvSize+nvme.CQESize : off+per : off+per]
		s.recvSGE[0] = rdma.SGE{Addr: base + uint64(off), Length: uint32(recvSize), LKey: lkey}
		s.recvWR = rdma.RecvWR{WRID: wrRecv | uint64(i), SGL: s.recvSGE[:]}
		s.sendSGE[0] = rdma.SGE{Addr: base + uint64(off+recvSize), Length: nvme.CQESize, LKey: lkey}
		s.sendWR = rdma.SendWR{WRID: wrSend | uint64(i), SGL: s.sendSGE[:], Opcode: rdma.WRSend, Flags: rdma.SendSignaled}
		dataAddr := base + uint64(off+recvSize+nvme.CQESize)
		s.readSGE[0] = rdma.SGE{Addr: dataAddr, LKey: lkey}
		s.readWR = rdma.SendWR{WRID: wrRead | uint64(i), SGL: s.readSGE[:], Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled}
		s.writeSGE[0] = rdma.SGE{Addr: dataAddr, LKey: lkey}
		s.writeWR = rdma.SendWR{WRID: wrWrite | uint64(i), SGL: s.writeSGE[:], Opcode: rdma.WRRDMAWrite}
		s.req.Slot = i
		s.req.Completer = q
		s.req.Queue = q
	}
	// Receives may be posted from Init on, before the host's first
	// capsule can arrive; rdma_cm does the same (rdma_create_qp leaves
	// the QP in INIT).
	init := rdma.QPAttr{State: rdma.QPSInit, AccessFlags: rdma.AccessRemoteRead | rdma.AccessRemoteWrite}
	if err := q.qp.Modify(&init, rdma.QPAttrState|rdma.QPAttrAccessFlags|rdma.QPAttrPKeyIndex|rdma.QPAttrPort); err != nil {
		q.destroy()
		return nil, fmt.Errorf("QP to INIT: %w", err)
	}
	for i := range q.slots {
		if err := q.qp.PostRecv(&q.slots[i].recvWR); err != nil {
			q.destroy()
			return nil, fmt.Errorf("post receive: %w", err)
		}
	}
	go q.run()
	return q, nil
}

// Params implements fabrics.TargetQueue.
func (q *targetQueue) Params() fabrics.QueueParams { return q.params }

// Depth implements fabrics.TargetQueue.
func (q *targetQueue) Depth() int { return q.depth }

// Remote implements fabrics.TargetQueue.
func (q *targetQueue) Remote() fabrics.Address { return q.remote }

// MaxTransfer implements fabrics.TargetQueue.
func (q *targetQueue) MaxTransfer() int { return q.maxXfer }

// InCapsuleDataSize implements fabrics.TargetQueue.
func (q *targetQueue) InCapsuleDataSize() int { return q.inline }

// Serve implements fabrics.TargetQueue.
func (q *targetQueue) Serve(h fabrics.CommandHandler) {
	q.handler = h
	close(q.serveCh)
}

// Close implements fabrics.TargetQueue.
func (q *targetQueue) Close() error {
	q.shutdown(fabrics.ErrQueueClosed)
	<-q.done
	return nil
}

// shutdown starts the teardown once; the queue goroutine finishes it.
func (q *targetQueue) shutdown(err error) {
	q.once.Do(func() {
		q.closeErr = err
		q.closed.Store(true)
		close(q.closing)
	})
}

func (q *targetQueue) watchConn() {
	select {
	case <-q.conn.Done():
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: host disconnected: %w", q.qid, fabrics.ErrQueueClosed))
	case <-q.closing:
	}
}

// run is the queue's goroutine: it waits for Serve, then polls the CQ.
func (q *targetQueue) run() {
	select {
	case <-q.serveCh:
	case <-q.closing:
		q.teardown()
		return
	}
	q.poll(q.closing, q.qid != 0, q.complete, q)
	q.teardown()
}

func (q *targetQueue) teardown() {
	if q.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
		q.conn.Disconnect(ctx)
		cancel()
	}
	q.destroy()
	// Done before the handler hears of it: a handler may Close the queue
	// from QueueClosed, and Close waits for done.
	close(q.done)
	if q.handler != nil {
		q.handler.QueueClosed(q.closeErr)
	}
	q.log.Debug("queue closed", "reason", q.closeErr)
}

const disconnectTimeout = 5e9

// complete handles one work completion on the queue goroutine.
func (q *targetQueue) complete(wc *rdma.WorkCompletion) {
	i := int(wc.WRID &^ wrKind)
	if i >= len(q.slots) {
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: completion for unknown WR %#x", q.qid, wc.WRID))
		return
	}
	if wc.Status != rdma.Success {
		if wc.Status != rdma.WRFlushError {
			q.log.Warn("work request failed", "wr", wc.WRID>>56, "slot", i, "status", wc.Status)
		}
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, wc.Err()))
		return
	}
	s := &q.slots[i]
	switch wc.WRID & wrKind {
	case wrRecv:
		s.recvLen = int(wc.ByteLen)
		q.onCapsule(i)
	case wrRead:
		q.reads--
		q.deliver(i)
		q.startWaitingReads()
	case wrSend:
		// The response is out: the slot's receive buffer takes the next capsule.
		if err := q.qp.PostRecv(&s.recvWR); err != nil {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: repost receive: %w", q.qid, err))
		}
	}
}

// onCapsule parses a received command capsule and starts its data
// transfer or hands it to the handler.
func (q *targetQueue) onCapsule(i int) {
	s := &q.slots[i]
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
		q.deliver(i)
		return
	}
	if s.keyed && s.dir == fabrics.DirHostToCtrl && s.dataLen > 0 {
		if q.reads >= q.readsMax {
			q.waiting = append(q.waiting, i)
			return
		}
		q.postRead(i)
		return
	}
	q.deliver(i)
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
		s.keyed = true
		s.inval = sub == 0xf
		s.rkey = sgl.Key()
		s.raddr = sgl.Address()
		s.dataLen = n
		r.Data = s.dataBuf[:n]
		if s.dir != fabrics.DirHostToCtrl && (q.qid == 0 || r.SQE[0] != byte(nvme.IORead)) {
			// No stale bytes of an earlier command reach the host if a
			// handler fills less than the buffer. An I/O queue's Read
			// either fills all of it (the target requires the SGL length
			// to equal the transfer length) or fails without a data
			// transfer, so its 128 KiB need no clearing.
			clear(r.Data)
		}
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

func (q *targetQueue) postRead(i int) {
	s := &q.slots[i]
	s.readSGE[0].Length = uint32(s.dataLen)
	s.readWR.RemoteAddr = s.raddr
	s.readWR.RKey = s.rkey
	q.reads++
	q.post(nil, 0, &s.readWR, chainRead, "RDMA READ")
}

func (q *targetQueue) startWaitingReads() {
	for len(q.waiting) > 0 && q.reads < q.readsMax {
		i := q.waiting[0]
		copy(q.waiting, q.waiting[1:])
		q.waiting = q.waiting[:len(q.waiting)-1]
		q.postRead(i)
	}
}

func (q *targetQueue) deliver(i int) {
	q.handler.HandleCommand(&q.slots[i].req)
}

// CompleteRequest implements fabrics.Completer: the RDMA WRITE of read
// data (on success) and the SEND of the CQE, with Invalidate when the host
// asked for it. It may be called from any goroutine.
func (q *targetQueue) CompleteRequest(r *fabrics.Request) {
	if q.closed.Load() {
		return
	}
	s := &q.slots[r.Slot]
	cqe := nvme.CQE(r.CQE[:])
	cqe.SetCID(binary.LittleEndian.Uint16(r.SQE[2:]))
	cqe.SetSQID(q.qid)
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
		s.writeSGE[0].Length = uint32(s.dataLen)
		w.RemoteAddr = s.raddr
		w.RKey = s.rkey
	}
	q.post(w, chainWrite, send, chainSend, "response")
}

// String describes the queue for logs.
func (q *targetQueue) String() string {
	return fmt.Sprintf("nvme-rdma queue %d from %s", q.qid, q.remote.Addr)
}
