package rdma

import (
	"fmt"
	"sync"

	"github.com/nvmeof/nvmeof/rdma"
)

// dataPool is a port's data staging buffers: the local side of the RDMA
// READs (host-to-controller data) and RDMA WRITEs (controller-to-host
// data) of the commands in flight on all of its queues. It replaces a
// MaxTransfer buffer per receive slot (issue #12: 2 × depth × 128 KiB,
// 32 MiB per 128-deep queue, all of it pinned by a hardware device).
//
// Memory is registered in chunks of units, each unit MaxTransfer bytes
// (rounded up to 4 KiB), as the pool grows, up to its cap; it is never
// given back before the pool closes. A unit serves one buffer of the
// largest class or is split into buffers of one smaller class (4 KiB,
// 32 KiB, ...: a slab), so that a 4 KiB command does not hold 128 KiB;
// a slab whose buffers are all back is a free unit again, for any class.
//
// A command that finds no buffer waits in FIFO order and gets one when a
// buffer comes back (never dropped): new requests queue behind waiting
// ones, so a large request is not starved by small ones, and since a
// command holds at most one buffer and every command in flight ends and
// returns its own without needing another, the pool always drains to
// the head waiter. Nothing is allocated per command: the waiter is the
// slot's.
type dataPool struct {
	pd       rdma.PD
	unitSize int
	classes  []int // buffer sizes, ascending; the last is unitSize
	chunk    int   // units registered at once
	capUnits int

	mu       sync.Mutex
	mrs      []rdma.MR
	units    int         // registered
	free     *poolUnit   // free units (linked by next)
	partial  []*poolUnit // per class below the last: slabs with free buffers (doubly linked)
	wait     waitList    // FIFO of commands without a buffer
	closed   bool
	regBytes int64 // registered bytes
	inUse    int64 // bytes of buffers handed out
}

// poolUnit is one unit of registered memory.
type poolUnit struct {
	mem        []byte
	addr       uint64
	lkey       uint32
	class      int // the slab's class, -1 when free or whole
	nfree      int
	freeIdx    []uint16 // free buffer indices of the slab (a stack)
	next, prev *poolUnit
	inPartial  bool
}

// poolBuf is one buffer handed out: unit u, index idx of its class.
type poolBuf struct {
	u     *poolUnit
	idx   int
	class int
}

// poolWaiter is a command waiting for a buffer (one per slot). granted
// runs, outside the pool's lock, once the buffer is the waiter's.
type poolWaiter struct {
	size    int
	next    *poolWaiter
	queued  bool
	buf     poolBuf
	granted func(w *poolWaiter)
	slot    *targetSlot // whose waiter it is
}

// waitList is a FIFO of waiters linked by next.
type waitList struct{ head, tail *poolWaiter }

func (l *waitList) push(w *poolWaiter) {
	w.next = nil
	if l.tail == nil {
		l.head = w
	} else {
		l.tail.next = w
	}
	l.tail = w
	w.queued = true
}

func (l *waitList) pop() *poolWaiter {
	w := l.head
	l.head = w.next
	if l.head == nil {
		l.tail = nil
	}
	w.next, w.queued = nil, false
	return w
}

// remove takes w out of the list, if it is in it.
func (l *waitList) remove(w *poolWaiter) bool {
	if !w.queued {
		return false
	}
	var prev *poolWaiter
	for x := l.head; x != nil; prev, x = x, x.next {
		if x != w {
			continue
		}
		if prev == nil {
			l.head = x.next
		} else {
			prev.next = x.next
		}
		if l.tail == x {
			l.tail = prev
		}
		w.next, w.queued = nil, false
		return true
	}
	return false
}

// minPoolClass is the smallest buffer: a page.
const minPoolClass = 4096

// poolChunkBytes is how much the pool registers at once (at least a unit).
const poolChunkBytes = 1 << 20

// newDataPool creates an empty pool on pd for buffers of up to maxXfer
// bytes, registering at most capBytes (at least one unit).
func newDataPool(pd rdma.PD, maxXfer int, capBytes int64) *dataPool {
	unit := (maxXfer + minPoolClass - 1) / minPoolClass * minPoolClass
	p := &dataPool{pd: pd, unitSize: unit}
	for c := minPoolClass; c < unit; c *= 8 {
		p.classes = append(p.classes, c)
	}
	p.classes = append(p.classes, unit)
	p.partial = make([]*poolUnit, len(p.classes)-1)
	p.capUnits = max(int(capBytes/int64(unit)), 1)
	p.chunk = max(poolChunkBytes/unit, 1)
	return p
}

// classOf returns the smallest class that holds n bytes (n <= unitSize).
func (p *dataPool) classOf(n int) int {
	for c, sz := range p.classes {
		if n <= sz {
			return c
		}
	}
	return len(p.classes) - 1
}

// bytes returns the buffer's memory, its address and lkey.
func (p *dataPool) bytes(b poolBuf) ([]byte, uint64, uint32) {
	sz := p.classes[b.class]
	off := b.idx * sz
	return b.u.mem[off : off+sz : off+sz], b.u.addr + uint64(off), b.u.lkey
}

// get hands w a buffer of at least w.size bytes now (true), or queues w
// (false): w.granted runs when it has one, unless cancel takes it back
// first.
func (p *dataPool) get(w *poolWaiter) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, fmt.Errorf("data pool: %w", rdma.ErrClosed)
	}
	if p.wait.head == nil {
		ok, err := p.take(w)
		if ok || err != nil {
			return ok, err
		}
	}
	p.wait.push(w)
	return false, nil
}

// take gives w a buffer if one is free or the pool may grow (p.mu held).
func (p *dataPool) take(w *poolWaiter) (bool, error) {
	c := p.classOf(w.size)
	last := len(p.classes) - 1
	if c < last {
		if u := p.partial[c]; u != nil {
			p.takeFromSlab(u, c, w)
			return true, nil
		}
	}
	if p.free == nil {
		if p.units >= p.capUnits {
			return false, nil
		}
		if err := p.grow(); err != nil {
			return false, err
		}
	}
	u := p.free
	p.free = u.next
	u.next = nil
	if c == last {
		u.class = -1
		w.buf = poolBuf{u: u, idx: 0, class: c}
		p.inUse += int64(p.unitSize)
		return true, nil
	}
	// A new slab of class c.
	n := p.unitSize / p.classes[c]
	u.class = c
	u.freeIdx = u.freeIdx[:0]
	for i := n - 1; i >= 0; i-- {
		u.freeIdx = append(u.freeIdx, uint16(i))
	}
	u.nfree = n
	p.linkPartial(u, c)
	p.takeFromSlab(u, c, w)
	return true, nil
}

func (p *dataPool) takeFromSlab(u *poolUnit, c int, w *poolWaiter) {
	u.nfree--
	i := u.freeIdx[u.nfree]
	u.freeIdx = u.freeIdx[:u.nfree]
	if u.nfree == 0 {
		p.unlinkPartial(u, c)
	}
	w.buf = poolBuf{u: u, idx: int(i), class: c}
	p.inUse += int64(p.classes[c])
}

func (p *dataPool) linkPartial(u *poolUnit, c int) {
	u.prev, u.next = nil, p.partial[c]
	if u.next != nil {
		u.next.prev = u
	}
	p.partial[c] = u
	u.inPartial = true
}

func (p *dataPool) unlinkPartial(u *poolUnit, c int) {
	if u.prev != nil {
		u.prev.next = u.next
	} else {
		p.partial[c] = u.next
	}
	if u.next != nil {
		u.next.prev = u.prev
	}
	u.next, u.prev, u.inPartial = nil, nil, false
}

// grow registers the next chunk of units (p.mu held).
func (p *dataPool) grow() error {
	n := min(p.chunk, p.capUnits-p.units)
	mem := make([]byte, n*p.unitSize)
	mr, err := p.pd.RegMR(mem, rdma.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("data pool: register %d bytes: %w", len(mem), err)
	}
	p.mrs = append(p.mrs, mr)
	units := make([]poolUnit, n)
	idx := make([]uint16, n*(p.unitSize/minPoolClass))
	per := p.unitSize / minPoolClass
	for i := range units {
		u := &units[i]
		off := i * p.unitSize
		u.mem = mem[off : off+p.unitSize : off+p.unitSize]
		u.addr = mr.Addr() + uint64(off)
		u.lkey = mr.LKey()
		u.class = -1
		u.freeIdx = idx[i*per : i*per : (i+1)*per]
		u.next = p.free
		p.free = u
	}
	p.units += n
	p.regBytes += int64(len(mem))
	return nil
}

// put returns a buffer and serves the waiters it can, in order; their
// granted callbacks run before put returns, outside the lock.
func (p *dataPool) put(b poolBuf) {
	p.mu.Lock()
	p.release(b)
	var granted waitList
	for p.wait.head != nil && !p.closed {
		w := p.wait.head
		ok, err := p.take(w)
		if !ok || err != nil {
			// A failed registration: the buffers in flight will come
			// back and try again.
			break
		}
		p.wait.pop()
		granted.push(w)
	}
	p.mu.Unlock()
	for granted.head != nil {
		w := granted.pop()
		w.granted(w)
	}
}

// release puts b back on its free list (p.mu held).
func (p *dataPool) release(b poolBuf) {
	u, c := b.u, b.class
	p.inUse -= int64(p.classes[c])
	if c == len(p.classes)-1 {
		u.next = p.free
		p.free = u
		return
	}
	u.freeIdx = append(u.freeIdx, uint16(b.idx))
	u.nfree++
	switch {
	case u.nfree == p.unitSize/p.classes[c]:
		if u.inPartial {
			p.unlinkPartial(u, c)
		}
		u.class = -1
		u.next = p.free
		p.free = u
	case !u.inPartial:
		p.linkPartial(u, c)
	}
}

// cancel takes w out of the waiters; false if it is not waiting (it
// was granted a buffer, or never waited).
func (p *dataPool) cancel(w *poolWaiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wait.remove(w)
}

// stats returns the bytes registered and handed out.
func (p *dataPool) stats() (registered, inUse int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.regBytes, p.inUse
}

// close deregisters the pool's memory; every buffer must be back.
func (p *dataPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, mr := range p.mrs {
		mr.Deregister()
	}
	p.mrs = nil
}
