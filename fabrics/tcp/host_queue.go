package tcp

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Work items a slot can have waiting for the writer.
const (
	hostItemCapsule = iota + 1 // the command capsule (with its in-capsule data)
	hostItemData               // H2CData PDUs answering an R2T
)

// hostSlot is the transport's state of one tag (fabrics.HostCommand.Tag).
type hostSlot struct {
	// Under the queue's lock.
	cmd     *fabrics.HostCommand
	cid     uint16 // CID of the tag's latest command
	inline  int    // in-capsule data bytes of the command
	queued  bool   // an item of the slot is in the send ring
	item    uint8  // which (hostItem*)
	ttag    uint16 // the R2T's transfer tag, offset and length
	r2to    uint32
	r2tl    uint32
	writing int  // items the writer has taken and not yet written
	replied bool // the CQE is in cmd.CQE (or C2HData said SUCCESS)

	// The reader's alone (set by Submit before the command is sent).
	recvd  int    // controller-to-host bytes received so far
	r2tEnd uint32 // host-to-controller bytes asked for so far
	badDig bool   // a C2HData of the command failed its data digest
}

// hostQueue is one NVMe queue on a TCP connection, seen from the host.
// Whoever queues PDUs (Submit, Unplug, an R2T's reader) writes them
// itself when the socket is free, with a writev that does not wait; a
// writer goroutine sends the rest (what found the socket busy or full),
// as many PDUs per writev as are waiting. A reader goroutine takes the
// controller's PDUs, unless a caller polls (Poll) and takes them itself.
// So a command at QD1 costs no goroutine wake-up in the transport.
type hostQueue struct {
	log     hclog.Logger
	qid     uint16
	addr    fabrics.Address
	sock    *hostSock
	hp      hostParams
	depth   int
	maxXfer int
	maxInl  int // cap of the in-capsule data size (-1: none)

	mu       sync.Mutex
	inline   int
	slots    []hostSlot
	ring     []uint16 // slots with an item for the writer, FIFO
	ringHead int
	ringLen  int
	closed   bool
	closeErr error
	term     PDU // the H2CTermReq to send before closing, if any

	kick    chan struct{} // wakes the writer (capacity 1)
	closing chan struct{}
	once    sync.Once
	rdone   chan struct{} // the reader has returned
	done    chan struct{} // the queue is torn down

	// rmu is held by whoever reads the socket (the reader goroutine or
	// a poller), wmu by whoever writes it (a caller sending inline, or
	// the writer goroutine), pollMu by PollWait's sleeper; teardown takes
	// all three before it closes the socket, and whoever takes one
	// afterwards finds dead set.
	rmu     sync.Mutex
	wmu     sync.Mutex
	polling atomic.Bool   // a caller polls: the reader goroutine waits on unpoll
	unpoll  chan struct{} // PollDone wakes the reader (capacity 1)
	dead    atomic.Bool   // shutdown has run
	parked  atomic.Bool   // the reader goroutine waits for PollDone (for tests)
	rwaits  atomic.Uint64 // the reader goroutine's sleeps on the socket (for tests)
	wwaits  atomic.Uint64 // the writer's sleeps on a full socket (for tests)
	pollMu  sync.Mutex    // held by PollWait's sleeper
	pw      hostPollWaiter

	plugged atomic.Bool
	stray   atomic.Uint64

	hostReader
	hostWriter
}

func newHostQueue(cfg HostConfig, addr fabrics.Address, p fabrics.QueueParams, sock *hostSock, hp hostParams) *hostQueue {
	depth := p.SQSize - 1
	q := &hostQueue{
		log:     cfg.Logger.With("qid", p.QID, "target", addr.Addr),
		qid:     p.QID,
		addr:    addr,
		sock:    sock,
		hp:      hp,
		depth:   depth,
		maxXfer: cfg.MaxTransfer,
		maxInl:  cfg.MaxInlineDataSize,
		slots:   make([]hostSlot, depth),
		ring:    make([]uint16, depth),
		kick:    make(chan struct{}, 1),
		unpoll:  make(chan struct{}, 1),
		closing: make(chan struct{}),
		rdone:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	if q.maxInl == 0 {
		q.maxInl = q.maxXfer
	}
	if p.QID == 0 {
		q.inline = min(AdminInCapsuleDataSize, max(q.maxInl, 0))
	}
	q.initReader()
	q.initWriter()
	return q
}

var (
	_ fabrics.HostQueue    = (*hostQueue)(nil)
	_ fabrics.StrayCounter = (*hostQueue)(nil)
	_ fabrics.Plugger      = (*hostQueue)(nil)
)

// StrayCompletions implements fabrics.StrayCounter.
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

// Plug implements fabrics.Plugger: commands submitted until Unplug wait
// for it, which then sends them in one writev.
func (q *hostQueue) Plug() { q.plugged.Store(true) }

// Unplug implements fabrics.Plugger.
func (q *hostQueue) Unplug() {
	q.plugged.Store(false)
	q.send()
}

func (q *hostQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Close implements fabrics.HostQueue: the connection is closed (NVMe/TCP
// has no disconnect PDU) and outstanding commands fail.
func (q *hostQueue) Close() error {
	q.shutdown(fabrics.ErrQueueClosed, nil)
	<-q.done
	return nil
}

// shutdown starts the queue's teardown with err, once; term, when not nil,
// is an H2CTermReq the writer sends first (within a second).
func (q *hostQueue) shutdown(err error, term PDU) {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.closeErr = err
		q.term = term
		q.mu.Unlock()
		q.dead.Store(true)
		// Sleepers on the socket wake and a writer stuck on a full
		// socket gives up: at once, or after the second the
		// termination request may take.
		if term != nil {
			q.sock.shutAfter(time.Second)
		} else {
			q.sock.shut()
		}
		close(q.closing)
	})
}

// fatal ends the connection after a protocol error in a PDU the controller
// sent, with an H2CTermReq of fes and fei carrying the PDU's header hdr,
// as the specification asks.
func (q *hostQueue) fatal(fes uint16, fei uint32, hdr []byte, err error) {
	q.log.Error("fatal transport error", "fes", fes, "fei", fei, "error", err)
	hdr = hdr[:min(len(hdr), MaxTermReqLen-TermReqHLen)]
	t := New(TypeH2CTermReq, len(hdr))
	tr := t.TermReq()
	tr.SetFES(fes)
	tr.SetFEI(fei)
	copy(t.Data(), hdr)
	q.shutdown(fmt.Errorf("nvme-tcp: queue %d: %w: %w", q.qid, err, fabrics.ErrQueueClosed), t)
}

// Submit implements fabrics.HostQueue.
func (q *hostQueue) Submit(cmd *fabrics.HostCommand) error {
	if err := fabrics.CheckHostCommand("nvme-tcp", cmd, q.maxXfer); err != nil {
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
		return fmt.Errorf("nvme-tcp: queue %d: tag %d outside the queue's %d", q.qid, i, q.depth)
	}
	s := &q.slots[i]
	if s.cmd != nil {
		q.mu.Unlock()
		return fmt.Errorf("nvme-tcp: queue %d: tag %d in use", q.qid, i)
	}
	s.cid = fabrics.NextCID(uint16(i), s.cid)
	cmd.Err = nil
	binary.LittleEndian.PutUint16(cmd.SQE[2:], s.cid)
	cmd.SQE[1] = cmd.SQE[1]&0x3f | 0x40 // PSDT: SGL
	sgl := fabrics.SGL(cmd.SQE[24:40])
	s.inline = 0
	if cmd.Direction == fabrics.DirHostToCtrl && n > 0 && n <= q.inline {
		sgl.PutInCapsule(0, uint32(n)) // Linux puts ICDOFF, 0 on every controller it meets
		s.inline = n
	} else {
		sgl.PutTransportDataBlock(uint32(n))
	}
	s.cmd, s.replied, s.writing = cmd, false, 0
	s.recvd, s.r2tEnd, s.badDig = 0, uint32(s.inline), false
	s.item = hostItemCapsule
	q.push(i)
	q.mu.Unlock()
	if !q.plugged.Load() {
		q.send()
	}
	return nil
}

// push puts slot i's item in the send ring (under q.mu; a slot has at
// most one there, so the ring never overflows).
func (q *hostQueue) push(i int) {
	q.slots[i].queued = true
	q.ring[(q.ringHead+q.ringLen)%len(q.ring)] = uint16(i)
	q.ringLen++
}

// complete finishes slot s's command when its CQE is in and the writer is
// done with its data; it reports the command to hand to Done (under q.mu).
func (q *hostQueue) complete(s *hostSlot) *fabrics.HostCommand {
	if !s.replied || s.writing > 0 || s.queued || s.cmd == nil {
		return nil
	}
	cmd := s.cmd
	s.cmd = nil
	return cmd
}

// teardown runs when the writer has stopped: the socket shuts down, the
// reader returns, a poller, sleeper or inline sender still at work
// finishes, the socket closes, and what was outstanding fails with the
// close error.
func (q *hostQueue) teardown() {
	q.sock.shut()
	<-q.rdone
	q.rmu.Lock()
	q.wmu.Lock()
	q.pollMu.Lock()
	q.sock.close()
	q.pollMu.Unlock()
	q.mu.Lock()
	err := q.closeErr
	var pending []*fabrics.HostCommand
	for i := range q.slots {
		s := &q.slots[i]
		if s.cmd != nil {
			pending = append(pending, s.cmd)
			s.cmd = nil
		}
		s.queued, s.writing = false, 0
	}
	q.ringLen = 0
	q.mu.Unlock()
	q.wmu.Unlock()
	q.rmu.Unlock()
	// done first: the callbacks may Close the queue, which waits for it.
	close(q.done)
	for _, c := range pending {
		c.Err = err
		c.Done(c)
	}
}
