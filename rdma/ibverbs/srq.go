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
	rc     recvChain
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
	x.rc.alloc(n, x.maxSGE)
	x.rc.bad = (*C.int)(C.calloc(1, C.sizeof_int))
	return x, nil
}

// PostRecv implements rdma.SRQ.
func (s *srq) PostRecv(wr *rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: SRQ: %w", rdma.ErrClosed)}
	}
	return s.rc.post(wr, nil, s.srq)
}

// recvChain is the C memory that one post of receive work requests is
// built in, for a QP's receive queue or an SRQ.
type recvChain struct {
	id   []C.uint64_t
	n    []C.uint32_t
	sge  []C.struct_ibv_sge
	wr   *C.struct_ibv_recv_wr
	idp  *C.uint64_t
	np   *C.uint32_t
	sgep *C.struct_ibv_sge
	bad  *C.int // where the failing index goes; the owner allocates and frees it
	nsge int    // SGEs per work request
}

// alloc sizes the chain for n work requests of up to nsge SGEs each.
func (c *recvChain) alloc(n, nsge int) {
	c.nsge = nsge
	c.idp = (*C.uint64_t)(C.calloc(C.size_t(n), 8))
	c.np = (*C.uint32_t)(C.calloc(C.size_t(n), 4))
	c.sgep = (*C.struct_ibv_sge)(C.calloc(C.size_t(n*nsge), C.sizeof_struct_ibv_sge))
	c.wr = (*C.struct_ibv_recv_wr)(C.calloc(C.size_t(n), C.sizeof_struct_ibv_recv_wr))
	c.id = unsafe.Slice(c.idp, n)
	c.n = unsafe.Slice(c.np, n)
	c.sge = unsafe.Slice(c.sgep, n*nsge)
}

// free releases what alloc allocated (not bad).
func (c *recvChain) free() {
	for _, p := range []unsafe.Pointer{unsafe.Pointer(c.idp), unsafe.Pointer(c.np), unsafe.Pointer(c.sgep), unsafe.Pointer(c.wr)} {
		C.free(p)
	}
}

// post posts the chain wr to qp or, when qp is nil, to srq, in as many
// calls as the C memory needs.
func (c *recvChain) post(wr *rdma.RecvWR, qp *C.struct_ibv_qp, srq *C.struct_ibv_srq) error {
	who, verb := "QP", "ibv_post_recv"
	if qp == nil {
		who, verb = "SRQ", "ibv_post_srq_recv"
	}
	base := 0
	for wr != nil {
		n, nsge := 0, 0
		for ; wr != nil && n < len(c.id); wr = wr.Next {
			if len(wr.SGL) > c.nsge {
				if n > 0 {
					break
				}
				return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: %d SGEs, the %s takes %d: %w", len(wr.SGL), who, c.nsge, rdma.ErrInvalidArgument)}
			}
			if nsge+len(wr.SGL) > len(c.sge) {
				break
			}
			c.id[n] = C.uint64_t(wr.WRID)
			c.n[n] = C.uint32_t(len(wr.SGL))
			nsge += putSGEs(c.sge[nsge:], wr.SGL)
			n++
		}
		var r C.int
		if qp != nil {
			r = C.nv_post_recv(qp, c.idp, c.np, C.int(n), c.sgep, c.wr, c.bad)
		} else {
			r = C.nv_post_srq_recv(srq, c.idp, c.np, C.int(n), c.sgep, c.wr, c.bad)
		}
		if r != 0 {
			return &rdma.PostError{Index: base + int(*c.bad), Err: fmt.Errorf("ibverbs: %s: %w", verb, errnoErr(syscall.Errno(r)))}
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
	s.rc.free()
	C.free(unsafe.Pointer(s.rc.bad))
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
