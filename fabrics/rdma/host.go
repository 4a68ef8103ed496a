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
	if p.SQSize < 2 || p.SQSize > 1024 { // at most fabrics.MaxTags commands
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
	go q.run()
	go q.watchConn()
	return q, nil
}

// hostSlot is the transport's state of one tag (fabrics.HostCommand.Tag):
// the command outstanding under it, its capsule and the regions its data
// goes through.
type hostSlot struct {
	cmd     *fabrics.HostCommand
	capsule []byte // SQE + in-capsule data
	sendSGE [1]rdma.SGE
	sendWR  rdma.SendWR
	// Under the queue's lock: the SEND completed; the CQE was taken for
	// the command; the CQE was processed (data unmapped); a LOCAL_INV of
	// the command's window is outstanding.
	sent, answered, replied, invalidating bool
	cid                                   uint16 // CID of the tag's latest command (under the queue's lock)
	// armed is set once Submit has set the slot up for its command,
	// before the SEND: a CQE for a slot that is not armed is stray.
	armed atomic.Bool

	// The regions the target reaches the command's data through: rmr
	// lets it RDMA READ (host-to-controller data), wmr RDMA WRITE
	// (controller-to-host data), each bound to nothing between commands.
	// With remap (a provider that can remap and invalidate regions) each
	// keyed command binds one of them to exactly its buffer under a fresh
	// rkey, and the rkey dies when the command completes: the target
	// never reaches other commands' memory nor this one's afterwards.
	// Without, both cover the slot's bounce buffer data for good. xmr
	// allows both, for a command whose data goes either way or whose
	// direction is not said (passthrough commands).
	rmr, wmr, xmr rdma.MR
	// With windows (a device that cannot remap but has type-2 memory
	// windows: rdma/ibverbs), bmr covers the bounce buffer with no remote
	// rights of its own and each keyed command binds mw to exactly its
	// bytes of it, with the rights of its direction, under a fresh rkey:
	// bindWR, chained before sendWR. invWR invalidates the window when
	// the target did not.
	bmr    rdma.MR
	mw     rdma.MW
	bindWR rdma.SendWR
	invWR  rdma.SendWR
	data   []byte // bounce buffer (without remap)
	cur    rdma.MR
	rkey   uint32 // cur's rkey (with windows: mw's) as the command carries it
	n      int    // the keyed transfer's length
}

// WRIDs of the host's memory-window requests (the kinds of target_slots.go
// go up to 5).
const (
	wrHostInv  = 6 << 56 // LOCAL_INV of a slot's window
	wrHostBind = 7 << 56 // BIND_MW of a slot's window (unsignaled: only failures complete)
)

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
	slots    []hostSlot // indexed by tag
	closed   bool
	closeErr error

	// bounce: the slots' bounce buffers, from the process's pool (none
	// with remap).
	bounce [][]byte

	recvBufs [][]byte
	recvSGE  []rdma.SGE
	recvWR   []rdma.RecvWR

	// remap: the slots' regions are remapped to each command's buffer
	// and invalidated after it (see hostSlot).
	remap bool
	// windows: each keyed command binds its slot's memory window to its
	// bytes of the bounce buffer, invalidated after it (see hostSlot).
	windows bool
	// stray counts the CQEs dropped because they name no outstanding
	// command (a slot not in use, an earlier generation, a repeat).
	stray atomic.Uint64

	closing chan struct{}
	once    sync.Once
	done    chan struct{}

	// Plugged submission (fabrics.Plugger): while plugged, Submit copies
	// its command's work requests into plugWRs, chained (the slots' own
	// requests keep Next as it was: a command may complete and its slot
	// be reused before PostSend returns), and records its tag and how
	// many requests it has; Unplug posts the chain.
	plugged  atomic.Bool
	plugMu   sync.Mutex
	plugWRs  []rdma.SendWR // 2 per slot: a BIND_MW and a SEND
	plugN    int
	plugTags []int32
	plugWRN  []uint8
}

func newHostQueue(cfg HostConfig, addr fabrics.Address, p fabrics.QueueParams) (*hostQueue, error) {
	depth := p.SQSize - 1
	capsuleSize := nvme.SQESize + cfg.MaxInlineDataSize
	if p.QID == 0 {
		// The admin queue carries no in-capsule data (the controller's
		// is 0 there, and SetInCapsuleDataSize is for I/O queues).
		capsuleSize = nvme.SQESize
	}
	q := &hostQueue{
		log:      cfg.Logger.With("qid", p.QID, "target", addr.Addr),
		qid:      p.QID,
		addr:     addr,
		maxXfer:  cfg.MaxTransfer,
		maxInl:   cfg.MaxInlineDataSize,
		depth:    depth,
		slots:    make([]hostSlot, depth),
		recvBufs: make([][]byte, p.RQSize),
		recvSGE:  make([]rdma.SGE, p.RQSize),
		recvWR:   make([]rdma.RecvWR, p.RQSize),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	if p.QID == 0 {
		q.maxInl = 0 // its capsules have no room for data
	}
	dev := cfg.Device
	var err error
	if q.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("allocate PD: %w", err)
	}
	if err := q.regData(cfg.MaxTransfer); err != nil {
		q.destroy()
		return nil, err
	}
	// With memory windows a command may have a BIND_MW, its SEND and a
	// LOCAL_INV on the send queue.
	sendWRs := depth + 1
	if q.windows {
		sendWRs = 3*depth + 1
	}
	if q.cq, err = dev.CreateCQ(sendWRs + p.RQSize); err != nil {
		q.destroy()
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	q.qp, err = q.pd.CreateQP(&rdma.QPInitAttr{
		Type:   rdma.QPTypeRC,
		SendCQ: q.cq,
		RecvCQ: q.cq,
		Cap:    rdma.QPCap{MaxSendWR: sendWRs, MaxRecvWR: p.RQSize, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		q.destroy()
		return nil, fmt.Errorf("create QP: %w", err)
	}
	// Capsules and response buffers: local access only, the target
	// reaches none of them.
	mem := make([]byte, capsuleSize*depth+nvme.CQESize*p.RQSize)
	q.mr, err = q.pd.RegMR(mem, rdma.AccessLocalWrite)
	if err != nil {
		q.destroy()
		return nil, fmt.Errorf("register %d bytes: %w", len(mem), err)
	}
	base, lkey := q.mr.Addr(), q.mr.LKey()
	for i := range q.slots {
		s := &q.slots[i]
		off := i * capsuleSize
		s.capsule = mem[off : off+capsuleSize : off+capsuleSize]
		s.sendSGE[0] = rdma.SGE{Addr: base + uint64(off), LKey: lkey}
		s.sendWR = rdma.SendWR{WRID: wrSend | uint64(i), SGL: s.sendSGE[:], Opcode: rdma.WRSend, Flags: rdma.SendSignaled}
	}
	roff := capsuleSize * depth
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
	return q, nil
}

// regData registers each slot's data regions (see hostSlot). On a PD with
// memory windows, each slot gets a window over its bounce buffer, in a
// region without remote rights, and q.windows is set. Otherwise, if the
// provider can remap and invalidate the regions, they start invalidated
// (registered over a shared placeholder: the queue needs no bounce
// buffers) and q.remap is set; failing both they stay as registered over
// the slot's bounce buffer (a plain registration has one rkey for good),
// which still confines the target to that buffer, readable or writable
// as the command's direction needs. Bounce buffers come from the
// process's pool (hostBounce) and go back to it with the queue.
func (q *hostQueue) regData(maxXfer int) error {
	if ok, err := q.regWindows(maxXfer); ok || err != nil {
		return err
	}
	if ok, err := q.regRemap(maxXfer); ok || err != nil {
		return err
	}
	q.log.Debug("device cannot remap or invalidate regions: each slot exposes its bounce buffer under fixed rkeys")
	if err := q.takeBounce(maxXfer); err != nil {
		return err
	}
	for i := range q.slots {
		s := &q.slots[i]
		if err := q.regSlot(s, s.data); err != nil {
			return err
		}
	}
	return nil
}

// takeBounce gives each slot a bounce buffer of maxXfer bytes from the
// process's pool.
func (q *hostQueue) takeBounce(maxXfer int) error {
	bufs, err := hostBounce.get(maxXfer, len(q.slots))
	if err != nil {
		return fmt.Errorf("%d bounce buffers of %d bytes: %w", len(q.slots), maxXfer, err)
	}
	q.bounce = bufs
	for i := range q.slots {
		q.slots[i].data = bufs[i]
	}
	return nil
}

// regSlot registers slot s's three regions over buf.
func (q *hostQueue) regSlot(s *hostSlot, buf []byte) error {
	var err error
	if s.rmr, err = q.pd.RegMR(buf, rdma.AccessRemoteRead); err != nil {
		return fmt.Errorf("register %d bytes: %w", len(buf), err)
	}
	if s.wmr, err = q.pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite); err != nil {
		return fmt.Errorf("register %d bytes: %w", len(buf), err)
	}
	if s.xmr, err = q.pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite); err != nil {
		return fmt.Errorf("register %d bytes: %w", len(buf), err)
	}
	return nil
}

// regRemap registers the slots' regions over the shared placeholder if
// the provider can remap and invalidate them (ok), invalidated until a
// command binds one; a provider that cannot is left with nothing
// registered.
func (q *hostQueue) regRemap(maxXfer int) (ok bool, err error) {
	ph := remapPlaceholder(maxXfer)
	for i := range q.slots {
		s := &q.slots[i]
		if err := q.regSlot(s, ph); err != nil {
			return false, err
		}
		if canRemap(s.rmr) && canRemap(s.wmr) && canRemap(s.xmr) {
			continue
		}
		if i > 0 {
			return false, fmt.Errorf("slot %d: region cannot be remapped or invalidated", i)
		}
		for _, m := range []rdma.MR{s.rmr, s.wmr, s.xmr} {
			m.Deregister()
		}
		s.rmr, s.wmr, s.xmr = nil, nil, nil
		return false, nil
	}
	q.remap = true
	return true, nil
}

// regWindows sets the slots up for memory windows (see hostSlot), if the
// PD has them: ok reports that it did. A device without windows leaves
// nothing behind.
func (q *hostQueue) regWindows(maxXfer int) (ok bool, err error) {
	mwa, has := q.pd.(rdma.MWAllocator)
	if !has {
		return false, nil
	}
	for i := range q.slots {
		s := &q.slots[i]
		if s.mw, err = mwa.AllocMW(); err != nil {
			if i == 0 {
				q.log.Debug("device has no memory windows", "error", err)
				return false, nil
			}
			return false, fmt.Errorf("allocate memory window: %w", err)
		}
		if i == 0 {
			if err := q.takeBounce(maxXfer); err != nil {
				return false, err
			}
		}
		if s.bmr, err = q.pd.RegMR(s.data, rdma.AccessLocalWrite|rdma.AccessMWBind); err != nil {
			if i == 0 {
				s.mw.Dealloc()
				s.mw = nil
				q.putBounce()
				q.log.Debug("device cannot bind memory windows to a region", "error", err)
				return false, nil
			}
			return false, fmt.Errorf("register %d bytes: %w", len(s.data), err)
		}
		s.bindWR = rdma.SendWR{WRID: wrHostBind | uint64(i), Opcode: rdma.WRBindMW, Next: &s.sendWR,
			Bind: rdma.MWBind{MW: s.mw, MR: s.bmr, Addr: s.bmr.Addr()}}
		s.invWR = rdma.SendWR{WRID: wrHostInv | uint64(i), Opcode: rdma.WRLocalInv, Flags: rdma.SendSignaled}
	}
	q.windows = true
	q.log.Debug("each keyed command binds a memory window to its bytes of the slot's bounce buffer")
	return true, nil
}

// putBounce gives the slots' bounce buffers back to the process's pool
// (no region covers them any more).
func (q *hostQueue) putBounce() {
	hostBounce.put(q.bounce)
	q.bounce = nil
	for i := range q.slots {
		q.slots[i].data = nil
	}
}

// canRemap reports whether m can be remapped and invalidates it: the
// first use it is put to is to have no valid rkey until a command needs
// one.
func canRemap(m rdma.MR) bool {
	_, ok := m.(rdma.RemappableMR)
	return ok && m.Invalidate() == nil
}

// destroy releases the verbs objects, the slots' data regions included
// (after the QP, before the PD); windows go first: a bound one holds its
// QP and region.
func (q *hostQueue) destroy() {
	for i := range q.slots {
		if s := &q.slots[i]; s.mw != nil {
			s.mw.Dealloc()
		}
	}
	var mrs []rdma.MR
	for i := range q.slots {
		s := &q.slots[i]
		mrs = append(mrs, s.bmr, s.rmr, s.wmr, s.xmr)
	}
	q.verbs.destroy(mrs...)
	q.putBounce()
}

var _ fabrics.StrayCounter = (*hostQueue)(nil)

// StrayCompletions implements fabrics.StrayCounter: the CQEs the queue
// dropped because they named no outstanding command (an unknown CID, an
// earlier command of a reused slot, a repeated CQE).
func (q *hostQueue) StrayCompletions() uint64 { return q.stray.Load() }

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
	if err := fabrics.CheckHostCommand("nvme-rdma", cmd, q.maxXfer); err != nil {
		return err
	}
	n := len(cmd.Data)
	i := int(cmd.Tag)
	q.mu.Lock()
	if q.closed {
		err := q.closeErr
		q.mu.Unlock()
		return err
	}
	if i >= q.depth {
		q.mu.Unlock()
		return fmt.Errorf("nvme-rdma: queue %d: tag %d outside the queue's %d", q.qid, i, q.depth)
	}
	s := &q.slots[i]
	if s.cmd != nil {
		q.mu.Unlock()
		return fmt.Errorf("nvme-rdma: queue %d: tag %d in use", q.qid, i)
	}
	inline := q.inline
	s.cmd, s.sent, s.answered, s.replied, s.invalidating = cmd, false, false, false, false
	s.cid = fabrics.NextCID(uint16(i), s.cid)
	cid := s.cid
	q.mu.Unlock()

	cmd.Err = nil
	binary.LittleEndian.PutUint16(cmd.SQE[2:], cid)
	cmd.SQE[1] = cmd.SQE[1]&0x3f | 0x40 // PSDT: SGL, MPTR is an address
	sgl := fabrics.SGL(cmd.SQE[24:40])
	length := nvme.SQESize
	s.cur = nil
	switch {
	case cmd.Direction == fabrics.DirHostToCtrl && n > 0 && n <= inline:
		sgl.PutInCapsule(0, uint32(n))
		copy(s.capsule[nvme.SQESize:], cmd.Data)
		length += n
	case n > 0:
		if err := q.mapData(s, cmd, sgl); err != nil {
			if !q.release(i) {
				return nil // the queue's teardown took the command: it completes it
			}
			return fmt.Errorf("nvme-rdma: queue %d: map %d-byte buffer: %w", q.qid, n, err)
		}
	default:
		sgl.PutKeyed(0, 0, 0, false)
	}
	copy(s.capsule, cmd.SQE[:])
	s.sendSGE[0].Length = uint32(length)
	s.armed.Store(true)
	wr := &s.sendWR
	if q.windows && s.cur != nil {
		wr = &s.bindWR // the window's bind, then the SEND: the send queue keeps them in order
	}
	if q.plugged.Load() && q.hold(wr, i) {
		return nil
	}
	if err := q.qp.PostSend(wr); err != nil {
		var pe *rdma.PostError
		if wr == &s.bindWR && (!errors.As(err, &pe) || pe.Index > 0) {
			// The window is bound but its command not sent: the queue
			// cannot take the slot back (a bound window cannot be bound
			// again before it is invalidated).
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: post SEND after BIND_MW: %w", q.qid, err))
		}
		if !q.release(i) {
			return nil // the queue's teardown took the command: it completes it
		}
		return fmt.Errorf("nvme-rdma: queue %d: post SEND: %w", q.qid, err)
	}
	return nil
}

// hold queues the work requests wr of tag i's command for Unplug, if the
// queue is still plugged.
func (q *hostQueue) hold(wr *rdma.SendWR, i int) bool {
	q.plugMu.Lock()
	defer q.plugMu.Unlock()
	if !q.plugged.Load() {
		return false
	}
	n := 0
	for w := wr; w != nil; w = w.Next {
		c := &q.plugWRs[q.plugN]
		*c = *w
		c.Next = nil
		if q.plugN > 0 {
			q.plugWRs[q.plugN-1].Next = c
		}
		q.plugN++
		n++
	}
	q.plugTags = append(q.plugTags, int32(i))
	q.plugWRN = append(q.plugWRN, uint8(n))
	return true
}

// Plug holds the commands submitted from now on until Unplug
// (fabrics.Plugger).
func (q *hostQueue) Plug() {
	if q.plugged.Load() {
		return
	}
	q.plugMu.Lock()
	if q.plugWRs == nil {
		// Room for every slot's command: at most a BIND_MW and a SEND.
		q.plugWRs = make([]rdma.SendWR, 2*q.depth)
		q.plugTags = make([]int32, 0, q.depth)
		q.plugWRN = make([]uint8, 0, q.depth)
	}
	q.plugged.Store(true)
	q.plugMu.Unlock()
}

// Unplug posts the commands held since Plug as one chain of work requests
// (fabrics.Plugger). Those the QP refuses complete with the error, as a
// refused Submit would have returned it.
func (q *hostQueue) Unplug() {
	q.plugMu.Lock()
	defer q.plugMu.Unlock()
	q.plugged.Store(false)
	if q.plugN == 0 {
		return
	}
	err := q.qp.PostSend(&q.plugWRs[0])
	posted := len(q.plugTags)
	if err != nil {
		posted = q.postedCommands(err)
	}
	for _, t := range q.plugTags[posted:] {
		q.failHeld(int(t), err)
	}
	q.plugN, q.plugTags, q.plugWRN = 0, q.plugTags[:0], q.plugWRN[:0]
}

// postedCommands returns how many held commands, in order, the QP took
// whole before PostSend failed with err; a command whose memory window was
// bound but whose SEND was refused shuts the queue down (see Submit).
func (q *hostQueue) postedCommands(err error) int {
	var pe *rdma.PostError
	if !errors.As(err, &pe) {
		return 0
	}
	n := 0
	for k, wrs := range q.plugWRN {
		if n+int(wrs) > pe.Index {
			if pe.Index > n {
				q.shutdown(fmt.Errorf("nvme-rdma: queue %d: post SEND after BIND_MW: %w", q.qid, err))
			}
			return k
		}
		n += int(wrs)
	}
	return len(q.plugWRN)
}

// failHeld completes tag i's held command, which PostSend refused, with err.
func (q *hostQueue) failHeld(i int, err error) {
	q.mu.Lock()
	cmd := q.slots[i].cmd
	q.mu.Unlock()
	if cmd == nil || !q.release(i) {
		return // the queue's teardown completes it
	}
	cmd.Err = fmt.Errorf("nvme-rdma: queue %d: post SEND: %w", q.qid, err)
	cmd.Done(cmd)
}

// mapData gives the target access to the data of cmd, a keyed transfer,
// through one of slot s's regions (see hostSlot) and writes the keyed
// SGL: with remap, the region bound to exactly cmd.Data under a fresh
// rkey that the target is asked to invalidate with its response;
// without, the slot's bounce buffer (with windows, under the slot's
// window bound to exactly the command's bytes of it, with the rights of
// its direction).
func (q *hostQueue) mapData(s *hostSlot, cmd *fabrics.HostCommand, sgl fabrics.SGL) error {
	m, access := s.xmr, rdma.AccessRemoteRead|rdma.AccessRemoteWrite
	switch cmd.Direction {
	case fabrics.DirHostToCtrl:
		m, access = s.rmr, rdma.AccessRemoteRead
	case fabrics.DirCtrlToHost:
		m, access = s.wmr, rdma.AccessRemoteWrite
	}
	n := len(cmd.Data)
	if q.remap {
		rkey, err := m.(rdma.RemappableMR).Remap(cmd.Data)
		if err != nil {
			return err
		}
		s.cur, s.rkey, s.n = m, rkey, n
		sgl.PutKeyed(m.Addr(), uint32(n), rkey, true)
		return nil
	}
	if access&rdma.AccessRemoteRead != 0 {
		copy(s.data, cmd.Data)
	}
	if q.windows {
		b := &s.bindWR.Bind
		b.RKey = rdma.IncRKey(s.mw.RKey())
		b.Length = uint64(n)
		b.Access = access
		s.cur, s.rkey, s.n = s.bmr, b.RKey, n
		sgl.PutKeyed(s.bmr.Addr(), uint32(n), b.RKey, true)
		return nil
	}
	s.cur, s.rkey, s.n = m, m.RKey(), n
	sgl.PutKeyed(m.Addr(), uint32(n), s.rkey, false)
	return nil
}

// unmapData ends the target's access to the command's data: with remap,
// the rkey is invalidated (unless the target did, by its SEND with
// Invalidate); without, data the target may have written is copied out
// of the bounce buffer and, with windows, unless the target invalidated
// the window, a LOCAL_INV is posted, whose completion the command then
// awaits.
func (q *hostQueue) unmapData(s *hostSlot, remoteInvalidated bool) {
	m := s.cur
	if m == nil {
		return
	}
	s.cur = nil
	if q.remap {
		if !remoteInvalidated {
			if err := m.Invalidate(); err != nil {
				q.log.Warn("invalidate failed", "rkey", s.rkey, "error", err)
			}
		}
		return
	}
	if s.cmd != nil && s.cmd.Direction != fabrics.DirHostToCtrl {
		copy(s.cmd.Data, s.data[:s.n])
	}
	if !q.windows || remoteInvalidated {
		return
	}
	s.invWR.InvalidateRKey = s.rkey
	q.mu.Lock()
	s.invalidating = true
	q.mu.Unlock()
	if err := q.qp.PostSend(&s.invWR); err != nil {
		q.mu.Lock()
		s.invalidating = false
		q.mu.Unlock()
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: post LOCAL_INV of rkey %#x: %w", q.qid, s.rkey, err))
	}
}

// release frees tag i, whose command was not sent. It reports false when
// the queue's teardown took the command meanwhile: the teardown then
// completes it (Done), and Submit must not fail it as well.
func (q *hostQueue) release(i int) bool {
	s := &q.slots[i]
	s.armed.Store(false)
	if q.remap && s.cur != nil {
		s.cur.Invalidate()
	}
	s.cur = nil
	q.mu.Lock()
	taken := s.cmd == nil
	s.cmd = nil
	q.mu.Unlock()
	return !taken
}

// run polls the CQ until the queue closes, then fails what is outstanding.
func (q *hostQueue) run() {
	q.poll(q.closing, q.qid != 0, q.complete, nil)
	q.teardown()
}

func (q *hostQueue) teardown() {
	// The DREQ moves the QP to the error state (no more data moves into
	// the commands' buffers) and the connection manager retries it on
	// its own; waiting for the DREP held the commands in flight 5 s
	// longer when the target died (a multipath I/O failed over 5 s
	// after keep-alive noticed), and Linux's rdma_disconnect does not
	// wait either (ib_drain_qp follows).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q.conn.Disconnect(ctx)
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
			q.finish(i, evSent)
		}
	case wrHostInv:
		if i < len(q.slots) {
			q.finish(i, evInvalidated)
		}
	case wrRecv:
		if i >= len(q.recvWR) {
			return
		}
		if wc.ByteLen >= nvme.CQESize {
			q.onCQE(q.recvBufs[i], wc)
		} else {
			q.log.Warn("short response capsule", "bytes", wc.ByteLen)
		}
		if err := q.qp.PostRecv(&q.recvWR[i]); err != nil {
			q.shutdown(fmt.Errorf("nvme-rdma: queue %d: repost receive: %w", q.qid, err))
		}
	}
}

// onCQE takes the response capsule b, received with completion wc.
func (q *hostQueue) onCQE(b []byte, wc *rdma.WorkCompletion) {
	cqe := nvme.CQE(b)
	cid := cqe.CID()
	i := int(fabrics.CIDTag(cid)) // a CID is its tag with a generation above (fabrics.NextCID)
	var s *hostSlot
	var cmd *fabrics.HostCommand
	if i < len(q.slots) {
		s = &q.slots[i]
		q.mu.Lock()
		if s.cmd != nil && !s.answered && s.cid == cid && s.armed.Load() {
			cmd = s.cmd
			s.answered = true
		}
		q.mu.Unlock()
	}
	if cmd == nil {
		n := q.stray.Add(1)
		q.log.Debug("completion dropped: no such command outstanding", "cid", cid, "dropped", n)
		return
	}
	inv := wc.Flags&rdma.WCWithInvalidate != 0
	if inv && (s.cur == nil || !(q.remap || q.windows) || wc.InvalidatedRKey != s.rkey) {
		// The target invalidated an rkey this command did not give it
		// (nvme_rdma_process_nvme_rsp: "Bogus remote invalidation").
		q.log.Error("bogus remote invalidation", "cid", cid, "rkey", wc.InvalidatedRKey)
		q.shutdown(fmt.Errorf("nvme-rdma: queue %d: target invalidated rkey %#x for command %#x: %w", q.qid, wc.InvalidatedRKey, cid, fabrics.ErrQueueClosed))
		return
	}
	copy(cmd.CQE[:], b)
	// The target is done with the data (its RDMA WRITEs precede the
	// response; its RDMA READs finished before it): end its access
	// before the buffer goes back to the caller.
	q.unmapData(s, inv)
	q.finish(i, evReplied)
}

// Events of a command's slot that finish counts.
const (
	evSent        = iota // the SEND completed
	evReplied            // the CQE was processed
	evInvalidated        // the LOCAL_INV of the command's window completed
)

// finish completes a command once its SEND and its CQE are done, and the
// LOCAL_INV of its window if one was posted: ev says which just did.
func (q *hostQueue) finish(i int, ev int) {
	s := &q.slots[i]
	q.mu.Lock()
	switch ev {
	case evSent:
		s.sent = true
	case evReplied:
		s.replied = true
	case evInvalidated:
		s.invalidating = false
	}
	cmd := s.cmd
	if !s.sent || !s.replied || s.invalidating || cmd == nil {
		q.mu.Unlock()
		return
	}
	s.armed.Store(false)
	s.cmd = nil
	q.mu.Unlock()
	cmd.Done(cmd)
}
