package rdma

import (
	"errors"
	"fmt"
	"sync"
)

// DefaultHostBounceBytes is the default cap of the process's host bounce
// buffers (SetHostBounceLimit).
const DefaultHostBounceBytes = 1 << 30

// ErrBounceExhausted is wrapped by Dial when the process's bounce buffers
// are at their cap (SetHostBounceLimit).
var ErrBounceExhausted = errors.New("host bounce buffers exhausted")

// bouncePool holds the bounce buffers of the host queues that need them
// (devices with memory windows but no remapping, or with neither: see
// hostSlot), one MaxTransfer buffer per slot. They used to be allocated
// with each queue, again at every reconnect attempt (issue 22: 20
// controllers against a stopped target went from 13 to 237 MB of RSS).
// The pool is the process's, shared by all its controllers, and bounded:
// a queue takes its buffers when it is created and gives them back when
// it is destroyed (its QP and regions gone first, so no rkey reaches them
// any more), and the next queue, a reconnect attempt's or another
// controller's, takes them again, cleared. A queue whose provider remaps
// regions (rdma/soft) needs none.
type bouncePool struct {
	mu    sync.Mutex
	limit int64
	total int64            // bytes allocated, free or held
	held  int64            // bytes held by queues
	free  map[int][][]byte // by size
}

var hostBounce = &bouncePool{limit: DefaultHostBounceBytes, free: map[int][][]byte{}}

// SetHostBounceLimit sets the cap of the process's host bounce buffers,
// in bytes (DefaultHostBounceBytes until set). Buffers already allocated
// beyond a lower cap are freed as they come back.
func SetHostBounceLimit(n int64) {
	hostBounce.mu.Lock()
	hostBounce.limit = n
	hostBounce.mu.Unlock()
}

// HostBounceBytes reports the process's host bounce buffers: the bytes
// allocated (held by queues or free for the next) and those queues hold.
func HostBounceBytes() (allocated, held int64) {
	hostBounce.mu.Lock()
	defer hostBounce.mu.Unlock()
	return hostBounce.total, hostBounce.held
}

// get returns n buffers of size bytes, all or none: free ones (cleared,
// as they held another queue's data) first, then new ones up to the cap.
func (p *bouncePool) get(size, n int) ([][]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	free := p.free[size]
	reuse := min(n, len(free))
	need := int64(n-reuse) * int64(size)
	if p.total+need > p.limit {
		return nil, fmt.Errorf("%d of %d bytes allocated, %d more needed: %w", p.total, p.limit, need, ErrBounceExhausted)
	}
	out := make([][]byte, 0, n)
	for _, b := range free[len(free)-reuse:] {
		clear(b)
		out = append(out, b)
	}
	p.free[size] = free[:len(free)-reuse]
	for len(out) < n {
		out = append(out, make([]byte, size))
	}
	p.total += need
	p.held += int64(n) * int64(size)
	return out, nil
}

// put gives back buffers get returned.
func (p *bouncePool) put(bufs [][]byte) {
	if len(bufs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range bufs {
		p.held -= int64(len(b))
		if p.total > p.limit {
			p.total -= int64(len(b)) // over a lowered cap: let it go
			continue
		}
		p.free[len(b)] = append(p.free[len(b)], b)
	}
}

// remapPlaceholders are what the regions of a remapping queue are
// registered over, one per size for the whole process: a region is
// invalidated before its queue connects and remapped to each command's
// own buffer, so the placeholder is never reached, and registering over
// it costs the queue no memory.
var remapPlaceholders struct {
	mu  sync.Mutex
	buf map[int][]byte
}

func remapPlaceholder(size int) []byte {
	remapPlaceholders.mu.Lock()
	defer remapPlaceholders.mu.Unlock()
	if remapPlaceholders.buf == nil {
		remapPlaceholders.buf = map[int][]byte{}
	}
	b := remapPlaceholders.buf[size]
	if b == nil {
		b = make([]byte, size)
		remapPlaceholders.buf[size] = b
	}
	return b
}
