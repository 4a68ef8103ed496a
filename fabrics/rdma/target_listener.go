package rdma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

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
	// DefaultConnectTimeout bounds the time from a queue's CM REQ to the
	// success of its Fabrics Connect (Linux has no such bound; its host
	// connects within NVME_RDMA_CM_TIMEOUT_MS, 3 s, and then sends the
	// Connect at once).
	DefaultConnectTimeout = 10 * time.Second
	// DefaultLivenessInterval is how long a connected queue may see no
	// command before the target probes the host with a zero-length RDMA
	// WRITE (which the host's RDMA device answers, IBA C9-88, without
	// its software): a host that is gone fails the probe once the RC
	// retries are exhausted and the queue closes with that error, so the
	// controller of a host without keep-alive (KATO 0) is reclaimed too.
	DefaultLivenessInterval = 30 * time.Second
	// DefaultMaxPending bounds the queues of a port between CM REQ and
	// Fabrics Connect.
	DefaultMaxPending = 256
	// DefaultMaxPendingPerHost bounds them per host address: a Linux host
	// opens the CM connections of all its I/O queues (at most the 128 a
	// controller grants by default) before it connects any of them.
	DefaultMaxPendingPerHost = 128
	// DefaultDataPoolBytes caps a port's pool of data staging buffers
	// (the RDMA READ and WRITE buffers of the commands in flight).
	DefaultDataPoolBytes = 64 << 20
)

// Before its Fabrics Connect succeeds a queue holds only preConnectSlots
// receive buffers, and its commands may move at most preConnectData
// bytes: a host sends the Connect alone and waits for its response
// (Linux, SPDK and this module's initiator do), and the Connect's data is
// 1024 bytes. A host that sends more meets RNR NAKs until the Connect
// succeeds. The rest of the receive ring is allocated and posted when the
// Connect's response is sent, before the host can send its next command.
// Data staging buffers come from the port's pool (dataPool) while a
// command needs one, before and after the Connect alike.
const (
	preConnectSlots = 2
	preConnectData  = 4096
)

// maxSRQSize bounds TargetConfig.SRQSize (Linux's srq_size too).
const maxSRQSize = 65535

// ErrConnectTimeout is why the target closes a queue whose Fabrics
// Connect did not succeed within the connect timeout.
var ErrConnectTimeout = errors.New("nvme-rdma: no Fabrics Connect within the connect timeout")

// errPendingLimit is why a CM REQ is rejected without allocating anything.
var errPendingLimit = errors.New("too many queues waiting for their Fabrics Connect")

// TargetConfig configures an NVMe/RDMA target port.
type TargetConfig struct {
	Device    rdma.Device
	ServiceID uint16 // RDMA_PS_TCP port, 4420 by default
	// InlineDataSize is the in-capsule data size of I/O queues (0 means
	// DefaultInlineDataSize; negative means none).
	InlineDataSize int
	MaxQueueSize   int // 0 means DefaultMaxQueueSize
	MaxTransfer    int // 0 means DefaultMaxTransfer
	// ConnectTimeout bounds the time from a queue's CM REQ to the success
	// of its Fabrics Connect; the queue is closed when it expires. 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// MaxPending and MaxPendingPerHost bound the queues between CM REQ
	// and Fabrics Connect, in total and per host address; REQs beyond
	// them are rejected (NVMe/RDMA status "no resources") before anything
	// is allocated. 0 means DefaultMaxPending and DefaultMaxPendingPerHost.
	MaxPending        int
	MaxPendingPerHost int
	// LivenessInterval is how long a connected queue may be idle before
	// it is probed; 0 means DefaultLivenessInterval, negative none.
	LivenessInterval time.Duration
	// DataPoolBytes caps the port's registered data staging buffers,
	// shared by its queues and taken by the commands in flight that move
	// keyed (RDMA READ or WRITE) data; a command that finds none waits for
	// one. 0 means DefaultDataPoolBytes; it is raised to one MaxTransfer.
	DataPoolBytes int64
	// SRQSize is the number of command capsule buffers the port's queues
	// share through a shared receive queue, where the provider has SRQs
	// (elsewhere each queue has a receive ring of 2 × depth buffers).
	// 0 means DefaultSRQSize; negative, no SRQ.
	SRQSize int
	Logger  hclog.Logger
}

// normalize fills in the defaults and checks the limits.
func (c *TargetConfig) normalize() error {
	if c.ServiceID == 0 {
		c.ServiceID = fabrics.DefaultServiceID
	}
	switch {
	case c.InlineDataSize == 0:
		c.InlineDataSize = DefaultInlineDataSize
	case c.InlineDataSize < 0:
		c.InlineDataSize = 0
	case c.InlineDataSize > MaxInlineDataSize:
		return fmt.Errorf("nvme-rdma: target: inline data size %d exceeds %d", c.InlineDataSize, MaxInlineDataSize)
	}
	if c.MaxQueueSize == 0 {
		c.MaxQueueSize = DefaultMaxQueueSize
	}
	if c.MaxQueueSize < 2 || c.MaxQueueSize > 1024 {
		return fmt.Errorf("nvme-rdma: target: max queue size %d outside 2..1024", c.MaxQueueSize)
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = DefaultMaxTransfer
	}
	if c.MaxTransfer < 4096 || c.MaxTransfer > 1<<24-1 {
		return fmt.Errorf("nvme-rdma: target: max transfer %d outside 4 KiB..16 MiB", c.MaxTransfer)
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.LivenessInterval == 0 {
		c.LivenessInterval = DefaultLivenessInterval
	}
	if c.MaxPendingPerHost == 0 {
		c.MaxPendingPerHost = DefaultMaxPendingPerHost
	}
	switch {
	case c.DataPoolBytes == 0:
		c.DataPoolBytes = DefaultDataPoolBytes
	case c.DataPoolBytes < 0:
		return fmt.Errorf("nvme-rdma: target: negative data pool size %d", c.DataPoolBytes)
	}
	c.DataPoolBytes = max(c.DataPoolBytes, int64(c.MaxTransfer))
	switch {
	case c.SRQSize == 0:
		c.SRQSize = DefaultSRQSize
	case c.SRQSize > maxSRQSize:
		return fmt.Errorf("nvme-rdma: target: SRQ size %d exceeds %d", c.SRQSize, maxSRQSize)
	}
	if c.ConnectTimeout < 0 || c.MaxPending < 0 || c.MaxPendingPerHost < 0 {
		return fmt.Errorf("nvme-rdma: target: negative connect timeout %v or pending limits %d/%d", c.ConnectTimeout, c.MaxPending, c.MaxPendingPerHost)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return nil
}

// queueRequest is what an acceptable CM REQ asks for.
type queueRequest struct {
	qid     uint16
	depth   int // commands the host may send at once (HSQSIZE + 1)
	hrqsize uint16
	cntlid  uint16
	inline  int // in-capsule data the queue takes
	reads   int // RDMA READs in flight
}

// checkRequest decides on a CM REQ's NVMe/RDMA private data and the
// requester's RDMA READ depth (the transport's accept decision, before
// anything is allocated): the queue it asks for, or the reject status
// and why (c normalized; maxRdAtom is the device's limit).
func (c *TargetConfig) checkRequest(pd []byte, responderResources uint8, maxRdAtom int) (queueRequest, CMRejectStatus, error) {
	cr, err := ParseCMRequest(pd)
	if err != nil {
		return queueRequest{}, CMInvalidLength, err
	}
	if cr.Recfmt() != CMRecfmt {
		return queueRequest{}, CMInvalidRecfmt, fmt.Errorf("record format %d", cr.Recfmt())
	}
	qr := queueRequest{qid: cr.QID(), depth: int(cr.HSQSize()) + 1, hrqsize: cr.HRQSize(), cntlid: cr.CntlID()}
	switch {
	case cr.HSQSize() == 0:
		return queueRequest{}, CMInvalidHSQSize, errors.New("HSQSIZE 0")
	case qr.qid == 0 && qr.depth > AdminQueueDepth:
		return queueRequest{}, CMInvalidHSQSize, fmt.Errorf("admin queue of %d entries exceeds %d", qr.depth, AdminQueueDepth)
	case qr.depth > c.MaxQueueSize:
		return queueRequest{}, CMInvalidHSQSize, fmt.Errorf("queue of %d entries exceeds %d", qr.depth, c.MaxQueueSize)
	case cr.HRQSize() == 0:
		return queueRequest{}, CMInvalidHRQSize, errors.New("HRQSIZE 0")
	}
	qr.inline = c.InlineDataSize
	if qr.qid == 0 {
		qr.inline = 0 // as nvmet-rdma: no in-capsule data on the admin queue
	}
	qr.reads = max(min(int(responderResources), DefaultRDMAReads, maxRdAtom), 1)
	return qr, 0, nil
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

	// The queues between CM REQ and Fabrics Connect, in total and by
	// host address.
	pendMu    sync.Mutex
	pending   int
	pendingBy map[netip.Addr]int

	// REQs refused for the limits since the last log line (acceptLoop
	// only): a flood of REQs is logged once a second, not once a REQ.
	refused     int
	refusedLast time.Time

	bufBytes atomic.Int64 // registered queue buffers held (not the pool's)
	// released, when set (tests), is called after a queue released its
	// buffers.
	released func()

	// What the port's queues share: one PD (a region can serve only QPs
	// of its PD) and the data staging pool registered in it. The
	// listener holds a reference, and so does each queue; the last one
	// out closes the pool and deallocates the PD.
	pd   rdma.PD
	pool *dataPool
	// gather: READs go out of the backend's memory, registered once per
	// region (target_gather.go), on devices where that costs nothing.
	gather bool
	// regionMRs is apart from the listener: the hooks it leaves on
	// regions that outlive the port hold it, not the listener.
	regionMRs *regionMRs
	rpool     *recvPool // the SRQ and its buffers, nil without one
	refsMu    sync.Mutex
	refs      int
	closeOnce sync.Once
}

// openShared allocates the port's PD and its (empty) data pool.
func (l *Listener) openShared() error {
	pd, err := l.cfg.Device.AllocPD()
	if err != nil {
		return fmt.Errorf("nvme-rdma: target: allocate PD: %w", err)
	}
	l.pd = pd
	l.pool = newDataPool(pd, l.cfg.MaxTransfer, l.cfg.DataPoolBytes)
	l.regionMRs = new(regionMRs)
	if a := l.cfg.Device.Attr(); a.LazyMR && a.MaxSGE >= maxGatherSGE {
		l.gather = true
	}
	l.refs = 1
	if l.cfg.SRQSize > 0 {
		rp, err := newRecvPool(pd, l.cfg.SRQSize, nvme.SQESize+l.cfg.InlineDataSize)
		switch {
		case err == nil:
			l.rpool = rp
			l.log.Debug("shared receive queue", "buffers", l.cfg.SRQSize, "bytes", rp.bytes())
		case errors.Is(err, rdma.ErrNotSupported):
			l.log.Debug("no shared receive queue: a receive ring per queue", "reason", err)
		default:
			l.log.Warn("no shared receive queue: a receive ring per queue", "error", err)
		}
	}
	return nil
}

// ref takes a reference to the shared resources.
func (l *Listener) ref() {
	l.refsMu.Lock()
	l.refs++
	l.refsMu.Unlock()
}

// unref drops one; the last closes the pool and deallocates the PD.
func (l *Listener) unref() {
	l.refsMu.Lock()
	l.refs--
	last := l.refs == 0
	l.refsMu.Unlock()
	if !last {
		return
	}
	l.pool.close()
	l.regionMRs.close()
	if l.rpool != nil {
		if err := l.rpool.close(); err != nil {
			l.log.Warn("destroy the port's SRQ", "error", err)
		}
	}
	if err := l.pd.Dealloc(); err != nil {
		l.log.Warn("deallocate the port's PD", "error", err)
	}
}

// SharedBytes returns the bytes of buffers the port's queues share: the
// capsule buffers of the shared receive queue (0 without one, registered
// with the port), the data staging pool has registered so far, and the
// part of it the commands in flight hold.
func (l *Listener) SharedBytes() (srq, pool, poolInUse int64) {
	if l.rpool != nil {
		srq = l.rpool.bytes()
	}
	pool, poolInUse = l.pool.stats()
	return srq, pool, poolInUse
}

// UsesSRQ reports whether the port's queues take their receives from a
// shared receive queue.
func (l *Listener) UsesSRQ() bool { return l.rpool != nil }

// Pending returns the number of queues between CM REQ and a successful
// Fabrics Connect.
func (l *Listener) Pending() int {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	return l.pending
}

// BufferBytes returns the bytes of receive and response buffers the
// port's queues hold, each its own. What they share is SharedBytes.
func (l *Listener) BufferBytes() int64 { return l.bufBytes.Load() }

// admit counts a CM REQ from src as pending, unless a limit is reached.
func (l *Listener) admit(src netip.Addr) (*pendingTicket, error) {
	l.pendMu.Lock()
	defer l.pendMu.Unlock()
	if l.pending >= l.cfg.MaxPending {
		return nil, fmt.Errorf("%w: %d in total", errPendingLimit, l.pending)
	}
	if n := l.pendingBy[src]; n >= l.cfg.MaxPendingPerHost {
		return nil, fmt.Errorf("%w: %d from %s", errPendingLimit, n, src)
	}
	l.pending++
	l.pendingBy[src]++
	return &pendingTicket{l: l, src: src}, nil
}

// pendingTicket is one admitted queue's place in the pending counts.
type pendingTicket struct {
	l    *Listener
	src  netip.Addr
	done atomic.Bool
}

// release gives the place back; calls after the first do nothing.
func (t *pendingTicket) release() {
	if t == nil || !t.done.CompareAndSwap(false, true) {
		return
	}
	l := t.l
	l.pendMu.Lock()
	l.pending--
	if l.pendingBy[t.src]--; l.pendingBy[t.src] <= 0 {
		delete(l.pendingBy, t.src)
	}
	l.pendMu.Unlock()
}

// Listen starts an NVMe/RDMA target port on cfg.Device.
func Listen(cfg TargetConfig) (*Listener, error) {
	if cfg.Device == nil {
		return nil, errors.New("nvme-rdma: target: no RDMA device")
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
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

		pendingBy: make(map[netip.Addr]int),
	}
	if err := l.openShared(); err != nil {
		cancel()
		cml.Close()
		return nil, err
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
	l.closeOnce.Do(l.unref)
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
		// The limits apply before anything is allocated for the request.
		ticket, err := l.admit(req.RemoteAddr().Addr())
		if err != nil {
			err = l.reject(req, CMNoResources, err)
			if l.refused++; time.Since(l.refusedLast) >= time.Second {
				l.log.Warn("queue refused", "host", req.RemoteAddr(), "error", err, "refused_since_last_log", l.refused)
				l.refused, l.refusedLast = 0, time.Now()
			}
			continue
		}
		deadline := time.Now().Add(l.cfg.ConnectTimeout)
		// Set up each queue on its own goroutine: Accept waits for the
		// host's RTU.
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			q, err := l.setup(req, ticket, deadline)
			if err != nil {
				ticket.release()
				l.log.Warn("queue refused", "host", req.RemoteAddr(), "error", err)
				return
			}
			select {
			case l.accepted <- q:
			case <-q.closing: // closed before anyone took it
				q.Close()
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
// accepts the connection. The queue must see its Fabrics Connect succeed
// by deadline.
func (l *Listener) setup(req rdma.ConnRequest, ticket *pendingTicket, deadline time.Time) (*targetQueue, error) {
	qr, sts, err := l.cfg.checkRequest(req.PrivateData(), req.Param().ResponderResources, l.cfg.Device.Attr().MaxQPRdAtom)
	if err != nil {
		return nil, l.reject(req, sts, err)
	}
	q, err := newTargetQueue(l, qr, req, ticket)
	if err != nil {
		return nil, l.reject(req, CMNoResources, err)
	}
	acc := make(CMAccept, CMAcceptLen)
	acc.Set(uint16(qr.depth))
	param := rdma.ConnParam{
		ResponderResources: 0,
		InitiatorDepth:     uint8(qr.reads),
		RetryCount:         7,
		RNRRetryCount:      7,
		FlowControl:        true,
		SRQ:                l.rpool != nil, // as rdma_accept sets it for a QP with an SRQ
	}
	// The RTU, too, must come within the connect timeout: a spoofed REQ
	// holds its queue no longer than a silent host.
	ctx, cancel := context.WithDeadline(l.ctx, deadline)
	defer cancel()
	conn, err := req.Accept(ctx, q.qp, acc, param)
	if err != nil {
		q.Close() // the queue goroutine releases the resources
		return nil, fmt.Errorf("nvme-rdma: accept queue %d from %s: %w", qr.qid, req.RemoteAddr(), err)
	}
	q.conn = conn
	q.mu.Lock()
	if !q.finished && !q.connected.Load() {
		q.connTimer = time.AfterFunc(time.Until(deadline), q.connectExpired)
	}
	q.mu.Unlock()
	q.log.Debug("queue connected", "depth", qr.depth, "inline", qr.inline, "rdma_reads", qr.reads)
	go q.watchConn()
	return q, nil
}
