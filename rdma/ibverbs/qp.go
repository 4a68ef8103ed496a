//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/nvmeof/nvmeof/rdma"
)

// maxChain is the most work requests one ibv_post_send or ibv_post_recv
// call takes; longer chains are posted in pieces.
const maxChain = 64

// qp is a queue pair. Its C arrays hold the work requests of one post.
type qp struct {
	pd     *pd
	qp     *C.struct_ibv_qp
	typ    rdma.QPType
	scq    *cq
	rcq    *cq
	cap    rdma.QPCap
	sigAll bool
	srq    *srq // receives from an SRQ (srq.go), or nil
	state  atomic.Uint32
	qpn    uint32

	smu    sync.Mutex
	sg     []C.struct_gsend
	ssge   []C.struct_ibv_sge
	swr    *C.struct_ibv_send_wr
	sgp    *C.struct_gsend
	ssgep  *C.struct_ibv_sge
	rmu    sync.Mutex
	rc     recvChain
	sbad   *C.int // where ibv_post_send's failing index goes (C memory: a Go variable would escape per post)
	closed bool   // under smu and rmu
}

func newQP(p *pd, attr *rdma.QPInitAttr) (*qp, error) {
	if attr == nil {
		return nil, fmt.Errorf("ibverbs: create QP: no attributes: %w", rdma.ErrInvalidArgument)
	}
	switch attr.Type {
	case rdma.QPTypeRC, rdma.QPTypeUC:
	default:
		return nil, fmt.Errorf("ibverbs: create %v QP: %w (RC and UC only)", attr.Type, rdma.ErrNotSupported)
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("ibverbs: create QP: CQs of another provider: %w", rdma.ErrInvalidArgument)
	}
	c := attr.Cap
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	if c.MaxSendWR < 1 || c.MaxRecvWR < 0 {
		return nil, fmt.Errorf("ibverbs: create QP with %d send and %d receive WRs: %w", c.MaxSendWR, c.MaxRecvWR, rdma.ErrInvalidArgument)
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	ia.qp_type = C.enum_ibv_qp_type(attr.Type)
	ia.cap.max_send_wr = C.uint32_t(c.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(max(c.MaxRecvWR, 1))
	ia.cap.max_send_sge = C.uint32_t(c.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(c.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(c.MaxInlineData)
	if attr.SigAll {
		ia.sq_sig_all = 1
	}
	sq, err := srqOf(attr)
	if err != nil {
		return nil, err
	}
	if sq != nil {
		if err := sq.attach(); err != nil {
			return nil, err
		}
		ia.srq = sq.srq
		ia.cap.max_recv_wr, ia.cap.max_recv_sge = 0, 0
	}
	q, err := C.ibv_create_qp(p.pd, &ia)
	if q == nil {
		if sq != nil {
			sq.detach()
		}
		return nil, fmt.Errorf("ibverbs: ibv_create_qp (%d/%d WRs, %d/%d SGEs, %d inline): %w",
			c.MaxSendWR, c.MaxRecvWR, c.MaxSendSGE, c.MaxRecvSGE, c.MaxInlineData, errnoErr(err))
	}
	// What the device granted (rxe rounds queues up to 2^n - 1).
	c = capOf(&ia.cap)
	var qa C.struct_ibv_qp_attr
	var qia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(q, &qa, C.IBV_QP_CAP, &qia) == 0 {
		c = capOf(&qia.cap)
	}
	x := &qp{pd: p, qp: q, qpn: uint32(q.qp_num), typ: attr.Type, scq: scq, rcq: rcq, cap: c, sigAll: attr.SigAll, srq: sq}
	ns := min(c.MaxSendWR, maxChain)
	nr := min(max(c.MaxRecvWR, 1), maxChain)
	x.sgp = (*C.struct_gsend)(C.calloc(C.size_t(ns), C.sizeof_struct_gsend))
	x.ssgep = (*C.struct_ibv_sge)(C.calloc(C.size_t(ns*c.MaxSendSGE), C.sizeof_struct_ibv_sge))
	x.swr = (*C.struct_ibv_send_wr)(C.calloc(C.size_t(ns), C.sizeof_struct_ibv_send_wr))
	x.sg = unsafe.Slice(x.sgp, ns)
	x.ssge = unsafe.Slice(x.ssgep, ns*c.MaxSendSGE)
	x.rc.alloc(nr, c.MaxRecvSGE)
	x.sbad = (*C.int)(C.calloc(2, C.sizeof_int))
	x.rc.bad = (*C.int)(unsafe.Add(unsafe.Pointer(x.sbad), C.sizeof_int))
	scq.users.Add(1)
	rcq.users.Add(1)
	p.dev.addQP(x)
	return x, nil
}

// QPN implements rdma.QP.
func (q *qp) QPN() uint32 { return q.qpn }

// Type implements rdma.QP.
func (q *qp) Type() rdma.QPType { return q.typ }

// State implements rdma.QP: the state of the last transition (a QP the
// device moved to Err on a failed completion shows Err in Query).
func (q *qp) State() rdma.QPState { return rdma.QPState(q.state.Load()) }

// Modify implements rdma.QP.
func (q *qp) Modify(attr *rdma.QPAttr, mask rdma.QPAttrMask) error {
	if err := checkAttr(attr, mask); err != nil {
		return err
	}
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.State)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurState)
	a.qp_access_flags = C.uint(attr.AccessFlags)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port_num = C.uint8_t(attr.Port)
	if mask&rdma.QPAttrPort != 0 && attr.Port == 0 {
		a.port_num = C.uint8_t(q.pd.dev.info.Port)
	}
	a.qkey = C.uint32_t(attr.QKey)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCount)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.dest_qp_num = C.uint32_t(attr.DestQPN)
	if mask&rdma.QPAttrAV != 0 {
		ah := &a.ah_attr
		ah.is_global = 1
		ah.port_num = C.uint8_t(q.pd.dev.info.Port)
		g := attr.AH.DGID
		C.memcpy(unsafe.Pointer(&ah.grh.dgid), unsafe.Pointer(&g[0]), 16)
		ah.grh.sgid_index = C.uint8_t(attr.AH.SGIDIndex)
		if attr.AH.SGIDIndex == 0 {
			ah.grh.sgid_index = C.uint8_t(q.pd.dev.info.GIDIndex)
		}
		ah.grh.flow_label = C.uint32_t(attr.AH.FlowLabel)
		ah.grh.hop_limit = C.uint8_t(attr.AH.HopLimit)
		if attr.AH.HopLimit == 0 {
			ah.grh.hop_limit = 64
		}
		ah.grh.traffic_class = C.uint8_t(attr.AH.TrafficClass)
	}
	return q.modify(&a, C.int(mask))
}

// modify applies a C attribute set (also the connection manager's).
func (q *qp) modify(a *C.struct_ibv_qp_attr, mask C.int) error {
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.closed {
		return fmt.Errorf("ibverbs: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	if mask&C.IBV_QP_STATE != 0 {
		from, to := q.State(), rdma.QPState(a.qp_state)
		if !rdma.CanTransition(from, to) {
			return fmt.Errorf("ibverbs: QP %#x %v -> %v: %w", q.QPN(), from, to, rdma.ErrInvalidState)
		}
	}
	if r := C.ibv_modify_qp(q.qp, a, mask); r != 0 {
		err := errnoErr(syscall.Errno(r))
		return fmt.Errorf("ibverbs: QP %#x modify to %v (mask %#x): %w", q.QPN(), rdma.QPState(a.qp_state), uint32(mask), err)
	}
	if mask&C.IBV_QP_STATE != 0 {
		q.state.Store(uint32(a.qp_state))
	}
	return nil
}

// Query implements rdma.QP.
func (q *qp) Query(attr *rdma.QPAttr) error {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	mask := C.IBV_QP_STATE | C.IBV_QP_CUR_STATE | C.IBV_QP_ACCESS_FLAGS | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT |
		C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY |
		C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_MIN_RNR_TIMER | C.IBV_QP_SQ_PSN |
		C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_DEST_QPN | C.IBV_QP_CAP
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.closed {
		return fmt.Errorf("ibverbs: QP %#x: %w", q.qpn, rdma.ErrClosed)
	}
	if r := C.ibv_query_qp(q.qp, &a, C.int(mask), &ia); r != 0 {
		return fmt.Errorf("ibverbs: QP %#x query: %w", q.QPN(), errnoErr(syscall.Errno(r)))
	}
	var g rdma.GID
	C.memcpy(unsafe.Pointer(&g[0]), unsafe.Pointer(&a.ah_attr.grh.dgid), 16)
	*attr = rdma.QPAttr{
		State:       rdma.QPState(a.qp_state),
		CurState:    rdma.QPState(a.cur_qp_state),
		AccessFlags: rdma.Access(a.qp_access_flags),
		PKeyIndex:   uint16(a.pkey_index),
		Port:        uint8(a.port_num),
		QKey:        uint32(a.qkey),
		AH: rdma.AH{DGID: g, SGIDIndex: uint8(a.ah_attr.grh.sgid_index), FlowLabel: uint32(a.ah_attr.grh.flow_label),
			HopLimit: uint8(a.ah_attr.grh.hop_limit), TrafficClass: uint8(a.ah_attr.grh.traffic_class)},
		PathMTU:         rdma.MTU(a.path_mtu),
		Timeout:         uint8(a.timeout),
		RetryCount:      uint8(a.retry_cnt),
		RNRRetry:        uint8(a.rnr_retry),
		RQPSN:           uint32(a.rq_psn),
		SQPSN:           uint32(a.sq_psn),
		MaxRdAtomic:     uint8(a.max_rd_atomic),
		MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
		MinRNRTimer:     uint8(a.min_rnr_timer),
		DestQPN:         uint32(a.dest_qp_num),
		Cap:             capOf(&ia.cap),
	}
	// The device may have moved the QP to Err on its own.
	if attr.State == rdma.QPSErr {
		q.state.Store(uint32(rdma.QPSErr))
	}
	return nil
}

// PostSend implements rdma.QP.
func (q *qp) PostSend(wr *rdma.SendWR) error {
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.closed {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: %w", rdma.ErrClosed)}
	}
	if s := q.State(); s != rdma.QPSRTS && s != rdma.QPSSQD && s != rdma.QPSErr {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: post send in %v: %w", s, rdma.ErrInvalidState)}
	}
	base := 0
	for wr != nil {
		n, nsge := 0, 0
		for ; wr != nil && n < len(q.sg); wr = wr.Next {
			if len(wr.SGL) > q.cap.MaxSendSGE && wr.Flags&rdma.SendInline == 0 {
				if n > 0 {
					break
				}
				return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: %d SGEs, QP takes %d: %w", len(wr.SGL), q.cap.MaxSendSGE, rdma.ErrInvalidArgument)}
			}
			// rdma.SendWR carries no atomic operands.
			if op := wr.Opcode; op == rdma.WRAtomicCmpSwp || op == rdma.WRAtomicFetchAdd {
				if n > 0 {
					break
				}
				return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: %v: %w", op, rdma.ErrNotSupported)}
			}
			g := &q.sg[n]
			g.mw, g.bind_mr = nil, nil
			if wr.Opcode == rdma.WRBindMW {
				w, ok1 := wr.Bind.MW.(*mw)
				m, ok2 := wr.Bind.MR.(*mr)
				if !ok1 || !ok2 || w == nil || m == nil || len(wr.SGL) != 0 {
					if n > 0 {
						break
					}
					return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: BIND_MW without an ibverbs window and region, or with an SGL: %w", rdma.ErrInvalidArgument)}
				}
				g.mw, g.bind_mr = w.mw, m.mr
				g.bind_rkey = C.uint32_t(wr.Bind.RKey)
				g.bind_addr = C.uint64_t(wr.Bind.Addr)
				g.bind_len = C.uint64_t(wr.Bind.Length)
				g.bind_access = C.uint32_t(wr.Bind.Access)
			}
			if nsge+len(wr.SGL) > len(q.ssge) {
				if n == 0 {
					return &rdma.PostError{Index: base, Err: fmt.Errorf("ibverbs: %d SGEs: %w", len(wr.SGL), rdma.ErrInvalidArgument)}
				}
				break
			}
			g.wr_id = C.uint64_t(wr.WRID)
			g.remote_addr = C.uint64_t(wr.RemoteAddr)
			g.rkey = C.uint32_t(wr.RKey)
			g.imm = C.uint32_t(wr.Imm)
			g.inv_rkey = C.uint32_t(wr.InvalidateRKey)
			g.opcode = C.uint32_t(wr.Opcode)
			flags := wr.Flags
			if q.sigAll {
				flags |= rdma.SendSignaled
			}
			g.flags = C.uint32_t(flags)
			g.num_sge = C.uint32_t(len(wr.SGL))
			g.sge_off = C.uint32_t(nsge)
			nsge += putSGEs(q.ssge[nsge:], wr.SGL)
			n++
		}
		if r := C.nv_post_send(q.qp, q.sgp, C.int(n), q.ssgep, q.swr, q.sbad); r != 0 {
			return &rdma.PostError{Index: base + int(*q.sbad), Err: fmt.Errorf("ibverbs: ibv_post_send: %w", errnoErr(syscall.Errno(r)))}
		}
		base += n
	}
	return nil
}

// PostRecv implements rdma.QP.
func (q *qp) PostRecv(wr *rdma.RecvWR) error {
	if q.srq != nil {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: QP %#x takes its receives from an SRQ: %w", q.QPN(), rdma.ErrInvalidArgument)}
	}
	if q.State() == rdma.QPSErr {
		return q.flushRecv(wr)
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.closed {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: %w", rdma.ErrClosed)}
	}
	if q.State() == rdma.QPSReset {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: post receive in RESET: %w", rdma.ErrInvalidState)}
	}
	return q.rc.post(wr, q.qp, nil)
}

// Destroy implements rdma.QP.
func (q *qp) Destroy() error {
	q.smu.Lock()
	defer q.smu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.closed {
		return nil
	}
	if r := C.ibv_destroy_qp(q.qp); r != 0 {
		return fmt.Errorf("ibverbs: QP %#x: ibv_destroy_qp: %w", q.QPN(), errnoErr(syscall.Errno(r)))
	}
	q.closed = true
	if q.srq != nil {
		q.srq.detach()
	}
	q.pd.dev.removeQP(q)
	q.scq.users.Add(-1)
	q.rcq.users.Add(-1)
	for _, p := range []unsafe.Pointer{unsafe.Pointer(q.sgp), unsafe.Pointer(q.ssgep), unsafe.Pointer(q.swr), unsafe.Pointer(q.sbad)} {
		C.free(p)
	}
	q.rc.free()
	return nil
}

// toErr moves the QP to Err, flushing its work requests.
func (q *qp) toErr() {
	if q.State() == rdma.QPSErr {
		return
	}
	var a C.struct_ibv_qp_attr
	a.qp_state = C.IBV_QPS_ERR
	q.modify(&a, C.IBV_QP_STATE)
}

func capOf(c *C.struct_ibv_qp_cap) rdma.QPCap {
	return rdma.QPCap{MaxSendWR: int(c.max_send_wr), MaxRecvWR: int(c.max_recv_wr), MaxSendSGE: int(c.max_send_sge),
		MaxRecvSGE: int(c.max_recv_sge), MaxInlineData: int(c.max_inline_data)}
}

// checkAttr rejects attribute values outside what the verbs encode.
func checkAttr(attr *rdma.QPAttr, mask rdma.QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("ibverbs: %s %v: %w", what, v, rdma.ErrInvalidArgument)
	}
	switch {
	case mask&rdma.QPAttrState != 0 && attr.State > rdma.QPSErr:
		return bad("state", attr.State)
	case mask&rdma.QPAttrRetryCount != 0 && attr.RetryCount > 7:
		return bad("retry count", attr.RetryCount)
	case mask&rdma.QPAttrRNRRetry != 0 && attr.RNRRetry > 7:
		return bad("RNR retry", attr.RNRRetry)
	case mask&rdma.QPAttrPathMTU != 0 && !attr.PathMTU.Valid():
		return bad("path MTU", attr.PathMTU)
	case mask&rdma.QPAttrTimeout != 0 && attr.Timeout > 31:
		return bad("timeout", attr.Timeout)
	case mask&rdma.QPAttrMinRNRTimer != 0 && attr.MinRNRTimer > 31:
		return bad("min RNR timer", attr.MinRNRTimer)
	case mask&(rdma.QPAttrRQPSN|rdma.QPAttrSQPSN) != 0 && (attr.RQPSN|attr.SQPSN)>>24 != 0:
		return bad("PSN", max(attr.RQPSN, attr.SQPSN))
	case mask&rdma.QPAttrDestQPN != 0 && attr.DestQPN>>24 != 0:
		return bad("destination QPN", attr.DestQPN)
	}
	return nil
}

// markErr records that the device moved the QP to Err on its own (a
// completion with an error status).
func (q *qp) markErr() { q.state.Store(uint32(rdma.QPSErr)) }

// flushRecv completes receives posted to a QP in Err with WRFlushError:
// rxe (Linux 6.1) leaves them on the ring forever, and the verbs say they
// flush.
func (q *qp) flushRecv(wr *rdma.RecvWR) error {
	q.rmu.Lock()
	closed := q.closed
	q.rmu.Unlock()
	if closed {
		return &rdma.PostError{Err: fmt.Errorf("ibverbs: %w", rdma.ErrClosed)}
	}
	var flushed []rdma.WorkCompletion
	for ; wr != nil; wr = wr.Next {
		flushed = append(flushed, rdma.WorkCompletion{WRID: wr.WRID, Status: rdma.WRFlushError, Opcode: rdma.WCRecv, QPN: q.qpn})
	}
	q.rcq.addSoft(flushed)
	return nil
}

// putSGEs copies sgl into the C array dst and returns how many it wrote.
func putSGEs(dst []C.struct_ibv_sge, sgl []rdma.SGE) int {
	for i, s := range sgl {
		d := &dst[i]
		d.addr = C.uint64_t(s.Addr)
		d.length = C.uint32_t(s.Length)
		d.lkey = C.uint32_t(s.LKey)
	}
	return len(sgl)
}
