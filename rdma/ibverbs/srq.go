//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"

// nv_post_srq_recv is nv_post_recv for a shared receive queue.
static int nv_post_srq_recv(struct ibv_srq *srq, uint64_t *wrid, uint32_t *nsge, int n, struct ibv_sge *sge, struct ibv_recv_wr *wr, int *bad) {
	int off = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wr[i];
		w->wr_id = wrid[i];
		w->next = i + 1 < n ? &wr[i + 1] : NULL;
		w->sg_list = nsge[i] ? &sge[off] : NULL;
		w->num_sge = nsge[i];
		off += nsge[i];
	}
	struct ibv_recv_wr *badwr = NULL;
	int r = ibv_post_srq_recv(srq, wr, &badwr);
	*bad = r && badwr ? (int)(badwr - wr) : (r ? 0 : n);
	return r;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"github.com/nvmeof/nvmeof/rdma"
)

// srq is a shared receive queue (ibv_create_srq). Like a QP's receive
// side, its C arrays hold the work requests of one post.
type srq struct {
	pd     *pd
	srq    *C.struct_ibv_srq
	maxSGE int

	mu     sync.Mutex
	rid    []C.uint64_t
	rn     []C.uint32_t
	rsge   []C.struct_ibv_sge
	ridp   *C.uint64_t
	rnp    *C.uint32_t
	rsgep  *C.struct_ibv_sge
	rwr    *C.struct_ibv_recv_wr
	rbad   *C.int
	users  int // QPs created with it
	closed bool
}

var _ rdma.SRQCreator = (*pd)(nil)

// CreateSRQ implements rdma.SRQCreator.
func (p *pd) CreateSRQ(a *rdma.SRQAttr) (rdma.SRQ, error) {
	if a == nil || a.MaxWR <= 0 || a.MaxSGE < 0 {
		return nil, fmt.Errorf("ibverbs: SRQ attributes %+v: %w", a, rdma.ErrInvalidArgument)
	}
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(a.MaxWR)
	ia.attr.max_sge = C.uint32_t(max(a.MaxSGE, 1))
	s, err := C.ibv_create_srq(p.pd, &ia)
	if s == nil {
		e := errnoErr(err)
		if err == syscall.EOPNOTSUPP || err == syscall.ENOSYS {
			e = fmt.Errorf("%w (%v)", rdma.ErrNotSupported, err)
		}
		return nil, fmt.Errorf("ibverbs: %s: ibv_create_srq (%d WRs, %d SGEs): %w", p.dev.info.Name, a.MaxWR, a.MaxSGE, e)
	}
	x := &srq{pd: p, srq: s, maxSGE: int(ia.attr.max_sge)}
	n := min(a.MaxWR, maxChain)
	x.ridp = (*C.uint64_t)(C.calloc(C.size_t(n), 8))
	x.rnp = (*C.uint32_t)(C.calloc(C.size_t(n), 4))
	x.rsgep = (*C.struct_ibv_sge)(C.calloc(C.size_t(n*x.maxSGE), C.sizeof_struct_ibv_sge))
	x.rwr = (*C.struct_ibv_recv_wr)(C.calloc(C.size_t(n), C.sizeof_struct_ibv_recv_wr))
	x.rbad = (*C.int)(C.calloc(1, C.sizeof_int))
	x.rid = unsafe.Slice(x.ridp, n)
	x.rn = unsafe.Slice(x.rnp, n)
	x.rsge = unsafe.Slice(x.rsgep, n*x.maxSGE)
	return x, nil
}

// PostRecv implements rdma.SRQ.
func (s *srq) PostRecv(wr *rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: SRQ: %w", rdma.ErrClosed)}
	}
	base := 0
	for wr != nil {
		n, nsge := 0, 0
		for ; wr != nil && n < len(s.rid); wr = wr.Next {
			if len(wr.SGL) > s.maxSGE {
				if n > 0 {
					break
				}
				return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: %d SGEs, the SRQ takes %d: %w", len(wr.SGL), s.maxSGE, rdma.ErrInvalidArgument)}
			}
			if nsge+len(wr.SGL) > len(s.rsge) {
				break
			}
			s.rid[n] = C.uint64_t(wr.WRID)
			s.rn[n] = C.uint32_t(len(wr.SGL))
			nsge += putSGEs(s.rsge[nsge:], wr.SGL)
			n++
		}
		if r := C.nv_post_srq_recv(s.srq, s.ridp, s.rnp, C.int(n), s.rsgep, s.rwr, s.rbad); r != 0 {
			return &rdma.PostError{Index: base + int(*s.rbad), Err: fmt.Errorf("ibverbs: ibv_post_srq_recv: %w", errnoErr(syscall.Errno(r)))}
		}
		base += n
	}
	return nil
}

// attach and detach count the QPs created with the SRQ.
func (s *srq) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("ibverbs: SRQ: %w", rdma.ErrClosed)
	}
	s.users++
	return nil
}

func (s *srq) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// Close implements rdma.SRQ.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("ibverbs: SRQ: %w", rdma.ErrClosed)
	}
	if s.users > 0 {
		return fmt.Errorf("ibverbs: SRQ with %d QPs: %w", s.users, rdma.ErrBusy)
	}
	if r := C.ibv_destroy_srq(s.srq); r != 0 {
		return fmt.Errorf("ibverbs: ibv_destroy_srq: %w", errnoErr(syscall.Errno(r)))
	}
	s.closed = true
	C.free(unsafe.Pointer(s.ridp))
	C.free(unsafe.Pointer(s.rnp))
	C.free(unsafe.Pointer(s.rsgep))
	C.free(unsafe.Pointer(s.rwr))
	C.free(unsafe.Pointer(s.rbad))
	return nil
}

// srqOf returns the provider's SRQ of a QP's attributes, nil for none.
func srqOf(a *rdma.QPInitAttr) (*srq, error) {
	if a.SRQ == nil {
		return nil, nil
	}
	s, ok := a.SRQ.(*srq)
	if !ok {
		return nil, fmt.Errorf("ibverbs: create QP: SRQ of another provider: %w", rdma.ErrInvalidArgument)
	}
	return s, nil
}
