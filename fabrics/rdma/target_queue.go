package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
)

// targetQueue is one NVMe queue on an RC QP. Its goroutine (run) polls
// the CQ, except for an I/O queue on a CQ that runs handlers
// (rdma.HandlerCQ): there the provider's goroutine handles the
// completions and the queue's goroutine only waits for the close.
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

	// slots are indexed by WRID; those beyond preConnectSlots are nil
	// until the Fabrics Connect succeeds.
	slots    []*targetSlot
	recvSize int // of the slots' own receive buffers: 0 with the SRQ

	// With the port's SRQ (rpool) a command takes a free slot when its
	// capsule arrives, and gives it back with its receive buffer when
	// its response SEND has completed.
	rpool  *recvPool
	freeMu sync.Mutex
	free   []int

	// Set once by grow, when the Fabrics Connect succeeded.
	connected atomic.Bool
	// slotMu guards the slots' buffer ownership (dataBuf, inHandler)
	// against the teardown (released: the QP is gone).
	slotMu   sync.Mutex
	released bool
	// Under slotMu: a goroutine is in the handler's HandleCommand, and
	// the slots whose commands wait for it to finish (deliver).
	delivering bool
	deferred   []int

	ticket *pendingTicket // the queue's place among the pending ones

	// Liveness: commands received, the count the last probe saw (probe
	// timer only), a probe in flight.
	recvs     atomic.Uint64
	probeSeen atomic.Uint64
	probing   atomic.Bool
	probeWR   rdma.SendWR

	// mu guards the teardown against grow and Serve.
	mu         sync.Mutex
	finished   bool // torn down
	connTimer  *time.Timer
	probeTimer *time.Timer
	ringMR     rdma.MR // the receive ring beyond the pre-Connect slots
	bufBytes   int64   // counted in l.bufBytes

	// reads limits the RDMA READs in flight; waiting holds slots whose
	// READ could not be posted yet, in arrival order (under readMu: a
	// slot whose buffer came from the pool's waiters starts its READ
	// from the goroutine that returned the buffer).
	readMu   sync.Mutex
	readsMax int
	reads    int
	waiting  []int

	// While a batch of completions is handled (begin to end), the work
	// requests it produces collect in chains and leave as one PostSend
	// at its end: the RDMA READs, then the RDMA WRITEs, then the response
	// SENDs, so that packets of equal size sit together (a provider can
	// send such runs as one datagram burst, GSO on loopback). Batches
	// may overlap (the CQ's and a backend's reaping pass, which hands
	// its responses over in CompleteRequests): plugged counts the open
	// ones, and the last to end posts what they all collected.
	postMu  sync.Mutex
	plugged int
	chains  [3]wrChain
	// hplug holds the backend submissions of the commands a CQ batch
	// delivers; only the goroutine running the CQ's handler uses it
	// (handler calls never overlap), and flushes it at the batch's end.
	hplug fabrics.SubmitPlug

	handler  fabrics.CommandHandler
	serveCh  chan struct{}
	closed   atomic.Bool
	closeErr error
	closing  chan struct{}
	once     sync.Once

	// Draining (target_close.go): the response SENDs posted and not yet
	// completed, whether the queue is closing and waits for them, and
	// the end of that wait. held counts the slots the handler still had
	// when the queue was released (under slotMu): the port's shared
	// resources stay referenced until it gives them back.
	sendsOut  atomic.Int64
	draining  atomic.Bool
	drainOnce sync.Once
	held      int
	done      chan struct{}
}

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
	q.plugged++
	q.postMu.Unlock()
}

// flushPlug makes the backends submit what the CQ batch's commands
// started (batcher; on the handler's goroutine).
func (q *targetQueue) flushPlug() { q.hplug.Flush() }

// end closes the batch; the last open one posts what was collected
// (batcher).
func (q *targetQueue) end() {
	q.postMu.Lock()
	if q.plugged--; q.plugged > 0 {
		q.postMu.Unlock()
		return
	}
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
			q.endDrain() // what was not posted never completes
		}
	}
}

var _ fabrics.BatchCompleter = (*targetQueue)(nil)

// CompleteRequests implements fabrics.BatchCompleter: the work requests
// of all of rs leave in one PostSend (with those of a CQ batch open
// meanwhile).
func (q *targetQueue) CompleteRequests(rs []*fabrics.Request) {
	q.begin()
	for _, r := range rs {
		q.CompleteRequest(r)
	}
	q.end()
}

// post posts one or two work requests (a may be nil) in that order, or
// adds them to their chains while a batch is open. ka and kb name the
// chains.
func (q *targetQueue) post(a *rdma.SendWR, ka int, b *rdma.SendWR, kb int, what string) {
	q.postMu.Lock()
	if q.plugged > 0 {
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
		q.endDrain() // what was not posted never completes
	}
}

func newTargetQueue(l *Listener, qr queueRequest, req rdma.ConnRequest, ticket *pendingTicket) (*targetQueue, error) {
	dev := l.cfg.Device
	// Twice the host's queue depth in receive buffers and requests, as
	// nvmet-rdma allocates twice its responses: a slot returns to the
	// receive queue only when its response SEND has completed (the
	// host's ACK), and by then the host may already have sent the next
	// commands. Without the slack such a command meets no receive buffer
	// and draws an RNR NAK.
	nslots := 2 * qr.depth
	q := &targetQueue{
		l:        l,
		log:      l.log.With("qid", qr.qid, "host", req.RemoteAddr().Addr()), // log calls on q.log add neither again
		qid:      qr.qid,
		depth:    qr.depth,
		inline:   qr.inline,
		maxXfer:  l.cfg.MaxTransfer,
		readsMax: qr.reads,
		params: fabrics.QueueParams{
			QID:    qr.qid,
			SQSize: qr.depth,
			RQSize: int(qr.hrqsize),
			CntlID: qr.cntlid,
		},
		remote:   fabrics.Address{Transport: fabrics.TransportRDMA, Addr: req.RemoteAddr().Addr(), ServiceID: l.cfg.ServiceID},
		ticket:   ticket,
		slots:    make([]*targetSlot, nslots),
		recvSize: nvme.SQESize + qr.inline,
		rpool:    l.rpool,
		waiting:  make([]int, 0, nslots),
		deferred: make([]int, 0, nslots),
		serveCh:  make(chan struct{}),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	var err error
	// The port's PD (l.pd): the queue's QP and regions live in it, with
	// the data pool its commands take their buffers from. The embedded
	// verbs.pd stays nil: verbs.destroy must not deallocate it (unref
	// does, after the last queue).
	l.ref()
	// Each command takes one receive, at most one RDMA READ or WRITE and
	// one SEND.
	if q.cq, err = dev.CreateCQ(3*nslots + 1); err != nil {
		q.release()
		return nil, fmt.Errorf("create CQ: %w", err)
	}
	qa := rdma.QPInitAttr{
		Type:   rdma.QPTypeRC,
		SendCQ: q.cq,
		RecvCQ: q.cq,
		Cap:    rdma.QPCap{MaxSendWR: 2*nslots + 1, MaxRecvWR: nslots, MaxSendSGE: 1, MaxRecvSGE: 1},
	}
	if l.gather {
		qa.Cap.MaxSendSGE = maxGatherSGE
	}
	if q.rpool != nil {
		// Receives from the port's SRQ: the queue holds no receive
		// buffers of its own, before its Connect or after.
		qa.SRQ = q.rpool.srq
		qa.Cap.MaxRecvWR, qa.Cap.MaxRecvSGE = 0, 0
		q.recvSize = 0
		q.free = make([]int, 0, nslots)
	}
	q.qp, err = l.pd.CreateQP(&qa)
	if err != nil {
		q.release()
		return nil, fmt.Errorf("create QP: %w", err)
	}
	pre := min(nslots, preConnectSlots)
	per := q.recvSize + nvme.CQESize
	mem := make([]byte, per*pre)
	if q.mr, err = l.pd.RegMR(mem, rdma.AccessLocalWrite); err != nil {
		q.release()
		return nil, fmt.Errorf("register %d bytes: %w", len(mem), err)
	}
	q.account(len(mem))
	slots := make([]targetSlot, pre)
	for i := range slots {
		s := &slots[i]
		off := i * per
		q.initSlot(s, i, mem[off:off+per], q.mr.Addr()+uint64(off), q.mr.LKey())
		q.slots[i] = s
		q.pushFree(i)
	}
	// Receives may be posted from Init on, before the host's first
	// capsule can arrive; rdma_cm does the same (rdma_create_qp leaves
	// the QP in INIT).
	init := rdma.QPAttr{State: rdma.QPSInit, AccessFlags: rdma.AccessRemoteRead | rdma.AccessRemoteWrite}
	if err := q.qp.Modify(&init, rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags); err != nil {
		q.release()
		return nil, fmt.Errorf("QP to INIT: %w", err)
	}
	if err := q.postRecvs(q.slots[:pre]); err != nil {
		q.release()
		return nil, fmt.Errorf("post receive: %w", err)
	}
	go q.run()
	return q, nil
}

// account adds n bytes of buffers to the queue's and the port's count.
func (q *targetQueue) account(n int) {
	q.bufBytes += int64(n)
	q.l.bufBytes.Add(int64(n))
}

// grow gives a queue whose Fabrics Connect succeeded the rest of its
// receive ring and its data buffers, and ends its pending state. It runs
// before the Connect's response is posted, so that the receives are
// there before the host can send its next command.
func (q *targetQueue) grow() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.finished || q.connected.Load() {
		return nil
	}
	if q.connTimer != nil {
		q.connTimer.Stop()
	}
	nslots := len(q.slots)
	pre := min(nslots, preConnectSlots)
	rest := nslots - pre
	per := q.recvSize + nvme.CQESize
	mem := make([]byte, rest*per)
	if rest > 0 {
		mr, err := q.l.pd.RegMR(mem, rdma.AccessLocalWrite)
		if err != nil {
			return fmt.Errorf("nvme-rdma: queue %d: register %d bytes after Connect: %w", q.qid, len(mem), err)
		}
		q.ringMR = mr
		q.account(len(mem))
		base, lkey := mr.Addr(), mr.LKey()
		slots := make([]targetSlot, rest)
		for j := range slots {
			s := &slots[j]
			i := pre + j
			q.initSlot(s, i, mem[j*per:(j+1)*per], base+uint64(j*per), lkey)
			q.slots[i] = s
			q.pushFree(i)
		}
	}
	q.connected.Store(true)
	q.ticket.release()
	if iv := q.l.cfg.LivenessInterval; iv > 0 {
		q.probeWR = rdma.SendWR{WRID: wrProbe, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled}
		q.probeTimer = time.AfterFunc(iv, q.probe)
	}
	if err := q.postRecvs(q.slots[pre:]); err != nil {
		return fmt.Errorf("nvme-rdma: queue %d: post receive: %w", q.qid, err)
	}
	q.log.Debug("receive ring allocated", "bytes", len(mem))
	return nil
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
	q.mu.Lock()
	if q.finished {
		// Torn down before Serve: h still hears of it, once.
		q.mu.Unlock()
		h.QueueClosed(q.closeErr)
		return
	}
	q.handler = h
	close(q.serveCh)
	q.mu.Unlock()
}

// String describes the queue for logs.
func (q *targetQueue) String() string {
	return fmt.Sprintf("nvme-rdma queue %d from %s", q.qid, q.remote.Addr)
}
