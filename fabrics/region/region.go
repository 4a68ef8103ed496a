// Package region lends a backend's memory to transports, so that a READ's
// data goes to the host from the namespace's own pages instead of through a
// copy into the transport's buffers (SPDK's zcopy; docs/backends.md).
//
// A Region is memory outside the Go heap that its owner (a backend) keeps
// mapped while anyone holds a reference: the owner's own, taken by New and
// dropped by Close, and one per Segment lent to a transport, dropped when
// the transport has sent the data (or will not). When the last goes, the
// hooks transports registered (OnRelease: deregister the memory from their
// devices) run, then the owner's release (munmap). A transport registers a
// region once and keeps that registration for as long as the region lives.
package region

import (
	"sync"
	"sync/atomic"
)

// Region is a span of memory lent to transports by reference.
type Region struct {
	buf     []byte
	refs    atomic.Int64
	release func()

	mu    sync.Mutex
	hooks []func()
	gone  bool
}

// New makes a region of buf, with the owner's reference. release (which
// may be nil) runs once after the last reference is dropped and the hooks
// have run: only then may the owner unmap buf.
func New(buf []byte, release func()) *Region {
	r := &Region{buf: buf, release: release}
	r.refs.Store(1)
	return r
}

// Bytes returns the region's memory.
func (r *Region) Bytes() []byte { return r.buf }

// Acquire takes a reference. The caller must already hold one (or know
// that the owner's is held), as the owner does while it lends segments.
func (r *Region) Acquire() { r.refs.Add(1) }

// Release drops a reference; the last one runs the hooks and the owner's
// release.
func (r *Region) Release() {
	n := r.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("region: reference count below zero")
	}
	r.mu.Lock()
	r.gone = true
	hooks := r.hooks
	r.hooks = nil
	r.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	if r.release != nil {
		r.release()
	}
}

// Close drops the owner's reference: the memory goes once every lent
// segment has been released.
func (r *Region) Close() { r.Release() }

// OnRelease registers f to run once, when the region goes (before the
// owner unmaps it). The caller must hold a reference, so that the region
// cannot go while f is registered; it reports false if it is gone
// already, which a caller holding a reference never sees.
func (r *Region) OnRelease(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return false
	}
	r.hooks = append(r.hooks, f)
	return true
}

// Refs returns the number of references held (for tests and statistics).
func (r *Region) Refs() int64 { return r.refs.Load() }

// Segment is Len bytes at offset Off of a region: a piece of a command's
// controller-to-host data that a backend lends from its own memory, with
// a reference on the region that its holder must Release.
type Segment struct {
	Region *Region
	Off    int
	Len    int
}

// Bytes returns the segment's memory.
func (s Segment) Bytes() []byte { return s.Region.buf[s.Off : s.Off+s.Len] }

// Release drops the segment's reference on its region.
func (s Segment) Release() { s.Region.Release() }

// ReleaseAll releases every segment of segs and returns segs emptied, its
// capacity kept for the next command.
func ReleaseAll(segs []Segment) []Segment {
	for i := range segs {
		segs[i].Release()
		segs[i] = Segment{}
	}
	return segs[:0]
}

// Len returns the bytes segs hold in all.
func Len(segs []Segment) int {
	n := 0
	for _, s := range segs {
		n += s.Len
	}
	return n
}
