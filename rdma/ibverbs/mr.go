//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"github.com/nvmeof/nvmeof/rdma"
)

// Memory the NIC is given: ibv_reg_mr hands the NIC the buffer's address,
// and the NIC reads and writes it by DMA until ibv_dereg_mr, long after
// the call returned. cgo lets C keep a pointer only to memory Go does not
// manage or to a pinned Go object. RegMR therefore pins a Go buffer with a
// runtime.Pinner for the region's life (Deregister unpins it); memory from
// AllocBuffer or AllocMR is mmap'd, outside the Go heap, and pinning it
// is a no-op.

// mrVerbs are the two verbs of a registration, with the C types hidden so
// that tests without a device can stand in for them.
type mrVerbs struct {
	// reg registers n bytes at addr in pd (ibv_reg_mr) and returns the
	// struct ibv_mr.
	reg func(pd, addr unsafe.Pointer, n int, access rdma.Access) (unsafe.Pointer, error)
	// dereg deregisters it (ibv_dereg_mr).
	dereg func(mr unsafe.Pointer) error
}

// verbs are rdma-core's; only tests change them.
var verbs = mrVerbs{
	reg: func(pd, addr unsafe.Pointer, n int, access rdma.Access) (unsafe.Pointer, error) {
		m, err := C.ibv_reg_mr((*C.struct_ibv_pd)(pd), addr, C.size_t(n), C.int(access))
		if m == nil {
			return nil, errnoErr(err)
		}
		return unsafe.Pointer(m), nil
	},
	dereg: func(m unsafe.Pointer) error {
		if r := C.ibv_dereg_mr((*C.struct_ibv_mr)(m)); r != 0 {
			return errnoErr(syscall.Errno(r))
		}
		return nil
	},
}

// RegMR implements rdma.PD. A buffer in Go memory stays pinned until
// Deregister (see above); the PD keeps the region, so a region never
// deregistered keeps its buffer pinned rather than leaving a pin for the
// garbage collector to find.
func (p *pd) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	return p.regMR(buf, access, nil)
}

// regMR registers buf; free, when set, releases buf after Deregister
// (AllocMR's munmap).
func (p *pd) regMR(buf []byte, access rdma.Access, free func([]byte) error) (*mr, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("ibverbs: register empty buffer: %w", rdma.ErrInvalidArgument)
	}
	if access&(rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic) != 0 && access&rdma.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("ibverbs: register with %v: remote write needs LocalWrite: %w", access, rdma.ErrInvalidArgument)
	}
	m := &mr{pd: p, buf: buf, access: access, free: free}
	// Pinning &buf[0] pins the whole object holding buf; on memory Go
	// does not manage it does nothing.
	m.pin.Pin(&buf[0])
	h, err := verbs.reg(unsafe.Pointer(p.pd), unsafe.Pointer(&buf[0]), len(buf), access)
	if err != nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("ibverbs: ibv_reg_mr %d bytes: %w", len(buf), err)
	}
	m.mr = (*C.struct_ibv_mr)(h)
	p.mu.Lock()
	if p.mrs == nil {
		p.mrs = make(map[*mr]struct{})
	}
	p.mrs[m] = struct{}{}
	p.mu.Unlock()
	return m, nil
}

var _ MRAllocator = (*pd)(nil)

// AllocMR implements MRAllocator: it allocates n bytes of memory Go does not manage (AllocBuffer:
// mmap, on huge pages where it can) and registers them; Deregister
// unmaps them. It is the way to registered memory where the caller does
// not already own a buffer: nothing is pinned, the garbage collector
// never scans or moves it, and it is not inherited by a fork.
func (p *pd) AllocMR(n int, access rdma.Access) (rdma.MR, error) {
	buf, err := AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	m, err := p.regMR(buf, access, FreeBuffer)
	if err != nil {
		FreeBuffer(buf)
		return nil, err
	}
	return m, nil
}

// mr is a memory region registered with ibv_reg_mr.
type mr struct {
	mr     *C.struct_ibv_mr
	pd     *pd
	buf    []byte
	access rdma.Access
	free   func([]byte) error // AllocMR's buffer: unmap after dereg
	mu     sync.Mutex
	dead   bool
	pin    runtime.Pinner // buf, while registered (see RegMR)
}

// LKey implements rdma.MR.
func (m *mr) LKey() uint32 { return uint32(m.mr.lkey) }

// RKey implements rdma.MR.
func (m *mr) RKey() uint32 { return uint32(m.mr.rkey) }

// Addr implements rdma.MR: the buffer's virtual address.
func (m *mr) Addr() uint64 { return uint64(uintptr(m.mr.addr)) }

// Len implements rdma.MR.
func (m *mr) Len() int { return len(m.buf) }

// Bytes implements rdma.MR.
func (m *mr) Bytes() []byte { return m.buf }

// Access implements rdma.MR.
func (m *mr) Access() rdma.Access { return m.access }

// RKeyValid implements rdma.MR: a plain registration's rkey stays valid
// until it is deregistered.
func (m *mr) RKeyValid() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.dead && m.access&(rdma.AccessRemoteRead|rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic) != 0
}

// Invalidate implements rdma.MR: a region from ibv_reg_mr cannot be
// invalidated (that takes a memory window or a fast-registration MR).
func (m *mr) Invalidate() error {
	return fmt.Errorf("ibverbs: invalidate a plain registration: %w", rdma.ErrNotSupported)
}

// Rekey implements rdma.MR; see Invalidate.
func (m *mr) Rekey() (uint32, error) {
	return 0, fmt.Errorf("ibverbs: rekey a plain registration: %w", rdma.ErrNotSupported)
}

// Deregister implements rdma.MR. The buffer is unpinned (or unmapped,
// from AllocMR) only once the NIC has let go of it.
func (m *mr) Deregister() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dead {
		return nil
	}
	if err := verbs.dereg(unsafe.Pointer(m.mr)); err != nil {
		return fmt.Errorf("ibverbs: ibv_dereg_mr: %w", err)
	}
	m.dead = true
	m.pin.Unpin()
	m.pd.mu.Lock()
	delete(m.pd.mrs, m)
	m.pd.mu.Unlock()
	var err error
	if m.free != nil {
		if err = m.free(m.buf); err != nil {
			err = fmt.Errorf("ibverbs: deregistered, but free its buffer: %w", err)
		}
	}
	m.buf = nil
	return err
}
