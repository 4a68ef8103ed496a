// Package loop is an in-memory NVMe-oF transport: a host queue and a target
// queue joined inside one process, with data copied between their buffers.
// It has no wire format; it lets the target and initiator be tested and run
// together without a network, as the kernel's nvme-loop does.
package loop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/nvmeof/nvmeof/fabrics"
)

// DefaultMaxTransfer is the largest transfer of one command.
const DefaultMaxTransfer = 1 << 20

// Network is a set of in-memory listeners, found by address.
type Network struct {
	mu        sync.Mutex
	listeners map[fabrics.Address]*Listener
}

// NewNetwork returns an empty network.
func NewNetwork() *Network { return &Network{listeners: map[fabrics.Address]*Listener{}} }

// Listen opens a listener at addr (Transport is forced to "loop").
func (n *Network) Listen(addr fabrics.Address) (*Listener, error) {
	addr.Transport = fabrics.TransportLoop
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[addr]; ok {
		return nil, fmt.Errorf("loop: %s: address in use", addr)
	}
	l := &Listener{net: n, addr: addr, incoming: make(chan *queue, 16), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Listener is a loop-transport listener. It implements fabrics.Listener.
type Listener struct {
	net      *Network
	addr     fabrics.Address
	incoming chan *queue
	done     chan struct{}
	once     sync.Once
}

// Accept implements fabrics.Listener.
func (l *Listener) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	select {
	case q := <-l.incoming:
		return q.target, nil
	case <-l.done:
		return nil, ErrListenerClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Address implements fabrics.Listener.
func (l *Listener) Address() fabrics.Address { return l.addr }

// Close implements fabrics.Listener.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.net.mu.Lock()
		delete(l.net.listeners, l.addr)
		l.net.mu.Unlock()
		close(l.done)
	})
	return nil
}

// ErrListenerClosed is returned by Accept after Close.
var ErrListenerClosed = errors.New("loop: listener closed")

// ErrRefused is returned by Dial when nothing listens at the address.
var ErrRefused = errors.New("loop: connection refused")

// Dialer opens host queues on a Network. It implements fabrics.Dialer.
type Dialer struct{ Net *Network }

// Dial implements fabrics.Dialer.
func (d Dialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	addr.Transport = fabrics.TransportLoop
	d.Net.mu.Lock()
	l := d.Net.listeners[addr]
	d.Net.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("loop: %s: %w", addr, ErrRefused)
	}
	if p.SQSize < 2 {
		return nil, fmt.Errorf("loop: queue size %d: at least 2 entries", p.SQSize)
	}
	depth := p.SQSize - 1
	q := &queue{
		params:   p,
		addr:     addr,
		depth:    depth,
		maxXfer:  DefaultMaxTransfer,
		slots:    make([]slot, depth),
		work:     make(chan int, depth),
		closedCh: make(chan struct{}),
	}
	q.target = &targetQueue{q}
	for i := range depth {
		q.slots[i].req.Slot = i
		q.slots[i].req.Completer = q
	}
	select {
	case l.incoming <- q:
	case <-l.done:
		return nil, fmt.Errorf("loop: %s: %w", addr, ErrRefused)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &hostQueue{q}, nil
}

// slot is the state of one tag (fabrics.HostCommand.Tag): the command
// outstanding under it and the target's request for it.
type slot struct {
	req  fabrics.Request
	cmd  *fabrics.HostCommand
	cid  uint16 // the CID of the tag's latest command
	busy bool   // a command holds the tag (until its Done)
	buf  []byte
}

// queue is the shared state of one host queue joined to one target queue.
type queue struct {
	params  fabrics.QueueParams
	addr    fabrics.Address
	depth   int
	maxXfer int

	mu        sync.Mutex
	slots     []slot // indexed by tag
	handler   fabrics.CommandHandler
	closed    bool
	closedCh  chan struct{}
	inCapsule int
	target    *targetQueue
	// copying counts completions moving data into host buffers; no new
	// one starts once closed is set.
	copying sync.WaitGroup

	work chan int
}

type targetQueue struct{ *queue }

func (t *targetQueue) Params() fabrics.QueueParams { return t.params }
func (t *targetQueue) Depth() int                  { return t.depth }
func (t *targetQueue) Remote() fabrics.Address {
	return fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.IPv6Loopback()}
}
func (t *targetQueue) MaxTransfer() int       { return t.maxXfer }
func (t *targetQueue) InCapsuleDataSize() int { return 0 }
func (t *targetQueue) Close() error           { t.shutdown(fabrics.ErrQueueClosed); return nil }

// Serve implements fabrics.TargetQueue: one goroutine delivers commands in
// submission order.
func (t *targetQueue) Serve(h fabrics.CommandHandler) {
	t.mu.Lock()
	t.handler = h
	t.mu.Unlock()
	go func() {
		for {
			select {
			case i := <-t.work:
				h.HandleCommand(&t.slots[i].req)
			case <-t.closedCh:
				h.QueueClosed(fabrics.ErrQueueClosed)
				return
			}
		}
	}()
}

// CompleteRequest implements fabrics.Completer: data back to the host
// buffer, then the CQE.
func (q *queue) CompleteRequest(r *fabrics.Request) {
	q.mu.Lock()
	s := &q.slots[r.Slot]
	cmd := s.cmd
	if cmd == nil || q.closed {
		q.mu.Unlock()
		return
	}
	s.cmd = nil
	// Close waits for this copy: the host's buffer is the caller's again
	// once Close has returned.
	q.copying.Add(1)
	q.mu.Unlock()
	if cmd.Direction == fabrics.DirCtrlToHost {
		copy(cmd.Data, r.Data)
	}
	cmd.CQE = r.CQE
	// CID (bytes 13:12) and SQID (11:10) come from the transport.
	cmd.CQE[12], cmd.CQE[13] = cmd.SQE[2], cmd.SQE[3]
	cmd.CQE[10], cmd.CQE[11] = byte(q.params.QID), byte(q.params.QID>>8)
	cmd.Err = nil
	q.copying.Done()
	// The tag is free only now: its next command reuses s.req.
	q.mu.Lock()
	s.busy = false
	q.mu.Unlock()
	cmd.Done(cmd)
}

func (q *queue) shutdown(err error) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	var pending []*fabrics.HostCommand
	for i := range q.slots {
		if c := q.slots[i].cmd; c != nil {
			pending = append(pending, c)
			q.slots[i].cmd = nil
		}
	}
	close(q.closedCh)
	q.mu.Unlock()
	q.copying.Wait()
	for _, c := range pending {
		c.Err = err
		c.Done(c)
	}
}

type hostQueue struct{ *queue }

func (h *hostQueue) Depth() int                 { return h.depth }
func (h *hostQueue) InCapsuleDataSize() int     { h.mu.Lock(); defer h.mu.Unlock(); return h.inCapsule }
func (h *hostQueue) SetInCapsuleDataSize(n int) { h.mu.Lock(); h.inCapsule = n; h.mu.Unlock() }
func (h *hostQueue) MaxTransfer() int           { return h.maxXfer }
func (h *hostQueue) Close() error               { h.shutdown(fabrics.ErrQueueClosed); return nil }
func (h *hostQueue) String() string             { return fmt.Sprintf("loop queue %d", h.params.QID) }
func (h *hostQueue) Submit(cmd *fabrics.HostCommand) error {
	if len(cmd.Data) > h.maxXfer {
		return fmt.Errorf("loop: %d-byte transfer exceeds %d", len(cmd.Data), h.maxXfer)
	}
	if cmd.Done == nil {
		return errors.New("loop: command without Done")
	}
	i := int(cmd.Tag)
	if i >= h.depth {
		return fmt.Errorf("loop: queue %d: tag %d outside the queue's %d", h.params.QID, i, h.depth)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return fabrics.ErrQueueClosed
	}
	s := &h.slots[i]
	if s.busy {
		h.mu.Unlock()
		return fmt.Errorf("loop: queue %d: tag %d in use", h.params.QID, i)
	}
	s.busy = true
	s.cmd = cmd
	s.cid = fabrics.NextCID(uint16(i), s.cid)
	h.mu.Unlock()

	cmd.SQE[2], cmd.SQE[3] = byte(s.cid), byte(s.cid>>8)
	r := &s.req
	r.SQE = cmd.SQE
	r.CQE = [16]byte{}
	r.Queue = h.target
	if cap(s.buf) < len(cmd.Data) {
		s.buf = make([]byte, len(cmd.Data))
	}
	r.Data = s.buf[:len(cmd.Data)]
	switch cmd.Direction {
	case fabrics.DirHostToCtrl:
		copy(r.Data, cmd.Data)
	default:
		clear(r.Data)
	}
	select {
	case h.work <- i:
		return nil
	case <-h.closedCh:
		// Fail the command here unless the shutdown took it (and
		// completes it): never both.
		h.mu.Lock()
		mine := s.cmd == cmd
		if mine {
			s.cmd, s.busy = nil, false
		}
		h.mu.Unlock()
		if !mine {
			return nil
		}
		return fabrics.ErrQueueClosed
	}
}
