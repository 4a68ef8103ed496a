package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// HostConfig configures the host side of NVMe/RDMA.
type HostConfig struct {
	Device rdma.Device
	// MaxTransfer is the most data one command moves (0 means
	// DefaultMaxTransfer); the initiator also splits at the controller's MDTS.
	MaxTransfer int
	// MaxInlineDataSize caps the in-capsule data a command carries, below
	// what the controller's IOCCSZ allows (0 means MaxInlineDataSize).
	MaxInlineDataSize int
	Logger            hclog.Logger
}

// Dialer opens NVMe/RDMA queues from a host. It implements fabrics.Dialer.
type Dialer struct{ Config HostConfig }

// NewDialer returns a dialer for cfg.
func NewDialer(cfg HostConfig) *Dialer { return &Dialer{Config: cfg} }

// Dial implements fabrics.Dialer: it opens one RC connection to addr with
// the NVMe/RDMA CM private data for p.
func (d *Dialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	cfg := d.Config
	if cfg.Device == nil {
		return nil, errors.New("nvme-rdma: host: no RDMA device")
	}
	if cfg.MaxTransfer == 0 {
		cfg.MaxTransfer = DefaultMaxTransfer
	}
	if cfg.MaxInlineDataSize == 0 {
		cfg.MaxInlineDataSize = MaxInlineDataSize
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if p.SQSize < 2 || p.SQSize > 1024 {
		return nil, fmt.Errorf("nvme-rdma: queue %d: SQ size %d outside 2..1024", p.QID, p.SQSize)
	}
	if p.RQSize == 0 {
		p.RQSize = p.SQSize
	}
	if addr.ServiceID == 0 {
		addr.ServiceID = fabrics.DefaultServiceID
	}
	cm, err := cfg.Device.ConnManager()
	if err != nil {
		return nil, fmt.Errorf("nvme-rdma: %w", err)
	}
	q, err := newHostQueue(cfg, addr, p)
	if err != nil {
		return nil, fmt.Errorf("nvme-rdma: queue %d to %s: %w", p.QID, addr, err)
	}
	req := make(CMRequest, CMRequestLen)
	req.Set(p.QID, uint16(p.RQSize), uint16(p.SQSize-1), p.CntlID)
	param := rdma.ConnParam{
		ResponderResources: DefaultRDMAReads, // the target RDMA-READs write data from us
		InitiatorDepth:     0,
		RetryCount:         7,
		RNRRetryCount:      7,
		FlowControl:        true,
	}
	conn, err := cm.Connect(ctx, addr.Addr, addr.ServiceID, q.qp, req, param)
	if err != nil {
		q.destroy()
		var rej *rdma.RejectError
		if errors.As(err, &rej) {
			if j, perr := ParseCMReject(rej.PrivateData); perr == nil && rej.Reason == rdma.RejectConsumer {
				return nil, fmt.Errorf("nvme-rdma: queue %d to %s: %w", p.QID, addr, &RejectError{Status: j.Status()})
			}
		}
		return nil, fmt.Errorf("nvme-rdma: queue %d to %s: %w", p.QID, addr, err)
	}
	q.conn = conn
	if acc, err := ParseCMAccept(conn.PrivateData()); err == nil && acc.CRQSize() > 0 {
		q.depth = min(q.depth, int(acc.CRQSize()))
	}
	q.free = q.free[:0]
	for i := q.depth - 1; i >= 0; i-- {
		q.free = append(q.free, i)
	}
	go q.run()
	go q.watchConn()
	return q, nil
}

type hostSlot struct {
	cmd      *fabrics.HostCommand
	capsule  []byte // SQE + in-capsule data
	data     []byte // bounce buffer for keyed transfers, registered
	dataAddr uint64
	sendSGE  [1]rdma.SGE
	sendWR   rdma.SendWR
	sent     bool // SEND completed
	answered bool // CQE received
	keyed    bool
	// dmr maps the command's own buffer for a large keyed transfer
	// (direct), so that the data moves without the bounce copy; nil
	// when the device cannot remap regions.
	dmr    rdma.RemappableMR
	direct bool
}

// directMin is the smallest keyed transfer that goes straight to and
// from the command's buffer through the slot's remapped region; below
// it the copy through the bounce buffer costs less than the remap.
const directMin = 16 << 10

// hostQueue is one NVMe queue on an RC QP, seen from the host.
type hostQueue struct {
	log     hclog.Logger
	qid     uint16
	addr    fabrics.Address
	maxXfer int
	maxInl  int

	verbs
	conn rdma.Conn

	mu       sync.Mutex
	depth    int
	inline   int
	slots    []hostSlot
	free     []int
	closed   bool
	closeErr error

	recvBufs [][]byte
	recvSGE  []rdma.SGE
	recvWR   []rdma.RecvWR

	closing chan struct{}
	once    sync.Once
	done    chan struct{}
}

func newHostQueue(cfg HostConfig, addr fabrics.Address, p fabrics.QueueParams) (*hostQueue, error) {
	depth := p.SQSize - 1
	capsuleSize := nvme.SQESize + cfg.MaxInlineDataSize
	q := &hostQueue{
		log:      cfg.Logger.With("qid", p.QID, "target", addr.Addr),
		qid:      p.QID,
		addr:     addr,
		maxXfer:  cfg.MaxTransfer,
		maxInl:   cfg.MaxInlineDataSize,
		depth:    depth,
		slots:    make([]hostSlot, depth),
		free:     make([]int, 0, depth),
		recvBufs: make([][]byte, p.RQSize),
		recvSGE:  make([]rdma.SGE, p.RQSize),
		recvWR:   make([]rdma.RecvWR, p.RQSize),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	dev := cfg.Device
	var err error
	if q.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("allocate PD: %w", err)
	}
	if q.cq, err = dev.CreateCQ(depth + p.RQSize + 1); err != nil {
		q.destroy()
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	q.qp, err = q.pd.CreateQP(&rdma.QPInitAttr{
		Type:   rdma.QPTypeRC,
		SendCQ: q.cq,
		RecvCQ: q.cq,
		Cap:    rdma.QPCap{MaxSendWR: depth + 1, MaxRecvWR: p.RQSize, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		q.destroy()
		return nil, fmt.Errorf("create QP: %w", err)
	}
	per := capsuleSize + cfg.MaxTransfer
	mem := make([]byte, per*depth+nvme.CQESize*p.RQSize)
	q.mr, err = q.pd.RegMR(mem, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	if err != nil {
		q.destroy()
		return nil, fmt.Errorf("register %d bytes: %w", len(mem), err)
	}
	base, lkey := q.mr.Addr(), q.mr.LKey()
	for i := range q.slots {
		s := &q.slots[i]
		off := i * per
		s.capsule = mem[off : off+capsuleSize : off+capsuleSize]
		s.data = mem[off+capsuleSize : off+per : off+per]
		s.dataAddr = base + uint64(off+capsuleSize)
		s.sendSGE[0] = rdma.SGE{Addr: base + uint64(off), LKey: lkey}
		s.sendWR = rdma.SendWR{WRID: wrSend | uint64(i), SGL: s.sendSGE[:], Opcode: rdma.WRSend, Flags: rdma.SendSignaled}
	}
	roff := per * depth
	for i := range q.recvWR {
		o := roff + i*nvme.CQESize
		q.recvBufs[i] = mem[o : o+nvme.CQESize : o+nvme.CQESize]
		q.recvSGE[i] = rdma.SGE{Addr: base + uint64(o), Length: nvme.CQESize, LKey: lkey}
		q.recvWR[i] = rdma.RecvWR{WRID: wrRecv | uint64(i), SGL: q.recvSGE[i : i+1 : i+1]}
	}
	init := rdma.QPAttr{State: rdma.QPSInit, AccessFlags: rdma.AccessRemoteRead | rdma.AccessRemoteWrite}
	if err := q.qp.Modify(&init, rdma.QPAttrState|rdma.QPAttrAccessFlags|rdma.QPAttrPKeyIndex|rdma.QPAttrPort); err != nil {
		q.destroy()
		return nil, fmt.Errorf("QP to INIT: %w", err)
	}
	for i := range q.recvWR {
		if err := q.qp.PostRecv(&q.recvWR[i]); err != nil {
			q.destroy()
			return nil, fmt.Errorf("post receive: %w", err)
		}
	}
	if q.qid != 0 && cfg.MaxTransfer >= directMin {
		for i := range q.slots {
			s := &q.slots[i]
			m, err := q.pd.RegMR(s.data, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
			if err != nil {
				q.destroy()
				return nil, fmt.Errorf("register %d bytes: %w", len(s.data), err)
			}
			rm, ok := m.(rdma.RemappableMR)
			if !ok {
				m.Deregister()
				break // the device cannot remap: bounce buffers only
			}
			s.dmr = rm
			if _, err := rm.Remap(s.data); err != nil { // and invalidate until used
				q.destroy()
				return nil, fmt.Errorf("remap: %w", err)
			}
			rm.Invalidate()
		}
	}
	return q, nil
}

// destroy releases the verbs objects, the slots' remapped regions
// included (after the QP, before the PD).
func (q *hostQueue) destroy() {
	if q.qp != nil {
		q.qp.Destroy()
	}
	for i := range q.slots {
		if m := q.slots[i].dmr; m != nil {
			m.Deregister()
		}
	}
	q.verbs.destroy()
}

// Depth implements fabrics.HostQueue.
func (q *hostQueue) Depth() int { return q.depth }

// MaxTransfer implements fabrics.HostQueue.
func (q *hostQueue) MaxTransfer() int { return q.maxXfer }

// InCapsuleDataSize implements fabrics.HostQueue.
func (q *hostQueue) InCapsuleDataSize() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inline
}

// SetInCapsuleDataSize implements fabrics.HostQueue; it is capped by the
// configured maximum.
func (q *hostQueue) SetInCapsuleDataSize(n int) {
	q.mu.Lock()
	q.inline = max(0, min(n, q.maxInl))
	q.mu.Unlock()
}

// Close implements fabrics.HostQueue.
func (q *hostQueue) Close() error {
	q.shutdown(fabrics.ErrQueueClosed)
	<-q.done
	return nil
}

func (q *hostQueue) shutdown(err error) {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.closeErr = err
		q.mu.Unlock()
		close(q.closing)
	})
}

func (q *hostQueue) watchConn() {
	select {
	case <-q.conn.Done():
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: target disconnected: %w", q.qid, fabrics.ErrQueueClosed))
	case <-q.closing:
	}
}

// Submit implements fabrics.HostQueue.
func (q *hostQueue) Submit(cmd *fabrics.HostCommand) error {
	n := len(cmd.Data)
	if n > q.maxXfer {
		return fmt.Errorf("nvme-rdma: %d-byte transfer exceeds %d", n, q.maxXfer)
	}
	if cmd.Done == nil {
		return errors.New("nvme-rdma: command without Done")
	}
	q.mu.Lock()
	if q.closed {
		err := q.closeErr
		q.mu.Unlock()
		return err
	}
	if len(q.free) == 0 {
		q.mu.Unlock()
		return fmt.Errorf("nvme-rdma: queue %d full (%d outstanding)", q.qid, q.depth)
	}
	i := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	inline := q.inline
	s := &q.slots[i]
	s.cmd, s.sent, s.answered, s.direct = cmd, false, false, false
	q.mu.Unlock()

	cmd.Slot = i
	cmd.Err = nil
	binary.LittleEndian.PutUint16(cmd.SQE[2:], uint16(i))
	cmd.SQE[1] = cmd.SQE[1]&0x3f | 0x40 // PSDT: SGL, MPTR is an address
	sgl := fabrics.SGL(cmd.SQE[24:40])
	length := nvme.SQESize
	switch {
	case cmd.Direction == fabrics.DirHostToCtrl && n > 0 && n <= inline:
		sgl.PutInCapsule(0, uint32(n))
		copy(s.capsule[nvme.SQESize:], cmd.Data)
		length += n
		s.keyed = false
	case n >= directMin && s.dmr != nil:
		rkey, err := s.dmr.Remap(cmd.Data)
		if err != nil {
			q.release(i)
			return fmt.Errorf("nvme-rdma: queue %d: map %d-byte buffer: %w", q.qid, n, err)
		}
		sgl.PutKeyed(s.dmr.Addr(), uint32(n), rkey, false)
		s.keyed, s.direct = true, true
	case n > 0:
		if cmd.Direction == fabrics.DirHostToCtrl {
			copy(s.data, cmd.Data)
		}
		sgl.PutKeyed(s.dataAddr, uint32(n), q.mr.RKey(), false)
		s.keyed = true
	default:
		sgl.PutKeyed(0, 0, 0, false)
		s.keyed = false
	}
	copy(s.capsule, cmd.SQE[:])
	s.sendSGE[0].Length = uint32(length)
	if err := q.qp.PostSend(&s.sendWR); err != nil {
		q.release(i)
		return fmt.Errorf("nvme-rdma: queue %d: post SEND: %w", q.qid, err)
	}
	return nil
}

// release returns slot i, whose command was not sent, to the free list.
func (q *hostQueue) release(i int) {
	s := &q.slots[i]
	if s.direct {
		s.dmr.Invalidate()
		s.direct = false
	}
	q.mu.Lock()
	s.cmd = nil
	q.free = append(q.free, i)
	q.mu.Unlock()
}

// run polls the CQ until the queue closes, then fails what is outstanding.
func (q *hostQueue) run() {
	q.poll(q.closing, q.qid != 0, q.complete, nil)
	q.teardown()
}

func (q *hostQueue) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), disconnectTimeout)
	q.conn.Disconnect(ctx)
	cancel()
	q.destroy()
	q.mu.Lock()
	err := q.closeErr
	var pending []*fabrics.HostCommand
	for i := range q.slots {
		if c := q.slots[i].cmd; c != nil {
			pending = append(pending, c)
			q.slots[i].cmd = nil
		}
	}
	q.mu.Unlock()
	// Done before the commands complete: their callbacks may Close the
	// queue, and Close waits for done.
	close(q.done)
	for _, c := range pending {
		c.Err = err
		c.Done(c)
	}
}

func (q *hostQueue) complete(wc *rdma.WorkCompletion) {
	if wc.Status != rdma.Success {
		if wc.Status != rdma.WRFlushError {
			q.log.Warn("work request failed", "wr", wc.WRID>>56, "status", wc.Status)
		}
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: %w", q.qid, wc.Err()))
		return
	}
	i := int(wc.WRID &^ wrKind)
	switch wc.WRID & wrKind {
	case wrSend:
		if i < len(q.slots) {
			q.slots[i].sent = true
			q.finish(i)
		}
	case wrRecv:
		if i >= len(q.recvWR) {
			return
		}
		if wc.ByteLen >= nvme.CQESize {
			q.onCQE(q.recvBufs[i])
		} else {
			q.log.Warn("short response capsule", "bytes", wc.ByteLen)
		}
		if err := q.qp.PostRecv(&q.recvWR[i]); err != nil {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: repost receive: %w", q.qid, err))
		}
	}
}

func (q *hostQueue) onCQE(b []byte) {
	cqe := nvme.CQE(b)
	i := int(cqe.CID())
	if i >= len(q.slots) {
		q.log.Warn("completion for unknown command", "cid", i)
		return
	}
	s := &q.slots[i]
	q.mu.Lock()
	cmd := s.cmd
	q.mu.Unlock()
	if cmd == nil || s.answered {
		q.log.Warn("completion for a command not outstanding", "cid", i)
		return
	}
	copy(cmd.CQE[:], b)
	switch {
	case s.direct:
		// The target is done with the buffer (its RDMA WRITEs precede
		// the response; its RDMA READs finished before it): take the
		// mapping away before the buffer goes back to the caller.
		s.dmr.Invalidate()
		s.direct = false
	case s.keyed && cmd.Direction == fabrics.DirCtrlToHost:
		copy(cmd.Data, s.data)
	}
	s.answered = true
	q.finish(i)
}

// finish completes a command once both its SEND and its CQE are done.
func (q *hostQueue) finish(i int) {
	s := &q.slots[i]
	if !s.sent || !s.answered {
		return
	}
	q.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	q.free = append(q.free, i)
	q.mu.Unlock()
	if cmd != nil {
		cmd.Done(cmd)
	}
}
