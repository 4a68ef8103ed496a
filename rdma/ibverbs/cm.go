//go:build ibverbs && cgo

package ibverbs

/*
#include <stdlib.h>
#include "ibverbs.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
)

// The connection manager runs on librdmacm: the kernel's rdma_cm speaks
// the InfiniBand CM in MADs, and this side drives it through an event
// channel whose file descriptor the Go netpoller watches. One dispatcher
// goroutine reads every event, copies it out of librdmacm's memory,
// acknowledges it at once (so rdma_destroy_id never waits on us) and hands
// it to the id it belongs to. QPs are ours, not rdma_create_qp's: their
// transitions use rdma_init_qp_attr's values, as librdmacm does for its
// own QPs, with the responder resources, initiator depth and path MTU of
// the caller's ConnParam.

// minRNRTimer is the RNR NAK timer code the QPs we connect advertise
// (1.28 ms): rdma_cm's 0 means 655 ms per RNR NAK.
const minRNRTimer = 14

// resolveTimeoutMS bounds address resolution (ARP or neighbour
// discovery) and route resolution, each, as Linux's
// NVME_RDMA_CM_TIMEOUT_MS.
const resolveTimeoutMS = 3000

// resolveContext is the context of one resolution step: like Linux's
// nvme-rdma, each step has its own timeout, so the caller's deadline
// (meant for the CM exchange) does not cut a slow first ARP short; the
// caller's cancellation still ends it.
func resolveContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return phaseContext(ctx, resolveTimeoutMS*time.Millisecond+time.Second)
}

// phaseContext is a context with its own timeout d that the caller's
// cancellation (not its deadline) also ends.
func phaseContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	return rctx, func() { stop(); cancel() }
}

type connManager struct {
	dev     *device
	log     hclog.Logger
	ch      *C.struct_rdma_event_channel
	file    *os.File
	ev      *C.struct_gevent
	stopped chan struct{}

	mu        sync.Mutex
	ids       map[uintptr]*cmID
	next      uintptr
	listeners map[uint16]*listener
	down      bool
}

// cmID is one rdma_cm_id and what waits on its events.
type cmID struct {
	h  uintptr
	id *C.struct_rdma_cm_id

	mu    sync.Mutex // held while one of its events is handled and while it is destroyed
	dead  bool
	setup chan cmEvent // events while connecting
	lst   *listener
	conn  *conn
	act   *setupState // active side: waiting for CONNECT_RESPONSE
	pas   *setupState // passive side: waiting for ESTABLISHED
}

type setupState struct {
	qp    *qp
	param rdma.ConnParam
}

type cmEvent struct {
	typ    int
	status int
	priv   []byte
	param  rdma.ConnParam
	conn   *conn
	err    error
}

func newConnManager(d *device) (*connManager, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("ibverbs: rdma_create_event_channel (is rdma_ucm loaded?): %w", errnoErr(err))
	}
	m := &connManager{dev: d, log: d.log.Named("cm"), ch: ch, stopped: make(chan struct{}),
		ids: map[uintptr]*cmID{}, listeners: map[uint16]*listener{}}
	fd := int(ch.fd)
	if C.nv_set_nonblock(C.int(fd)) != 0 {
		C.rdma_destroy_event_channel(ch)
		return nil, errors.New("ibverbs: rdma_cm event channel: O_NONBLOCK failed")
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, fmt.Errorf("ibverbs: rdma_cm event channel: dup: %w", err)
	}
	syscall.CloseOnExec(dup)
	m.file = os.NewFile(uintptr(dup), "rdma_cm")
	m.ev = (*C.struct_gevent)(C.calloc(1, C.sizeof_struct_gevent))
	go m.run()
	return m, nil
}

// createID makes an rdma_cm_id (RDMA_PS_TCP) registered for dispatch.
func (m *connManager) createID() (*cmID, error) {
	m.mu.Lock()
	if m.down {
		m.mu.Unlock()
		return nil, fmt.Errorf("ibverbs: connection manager: %w", rdma.ErrClosed)
	}
	m.next++
	x := &cmID{h: m.next, setup: make(chan cmEvent, 8)}
	m.ids[x.h] = x
	m.mu.Unlock()
	var id *C.struct_rdma_cm_id
	if r, err := C.rdma_create_id(m.ch, &id, nil, C.RDMA_PS_TCP); r != 0 {
		m.mu.Lock()
		delete(m.ids, x.h)
		m.mu.Unlock()
		return nil, fmt.Errorf("ibverbs: rdma_create_id: %w", errnoErr(err))
	}
	C.nv_set_ctx(id, C.uintptr_t(x.h))
	x.id = id
	return x, nil
}

// adopt registers the id of an incoming connection request.
func (m *connManager) adopt(id *C.struct_rdma_cm_id) *cmID {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	x := &cmID{h: m.next, id: id, setup: make(chan cmEvent, 8)}
	m.ids[x.h] = x
	C.nv_set_ctx(id, C.uintptr_t(x.h))
	return x
}

// destroy destroys the id once no event of it is being handled.
func (m *connManager) destroy(x *cmID) {
	x.mu.Lock()
	if x.dead {
		x.mu.Unlock()
		return
	}
	x.dead = true
	x.mu.Unlock()
	m.mu.Lock()
	delete(m.ids, x.h)
	m.mu.Unlock()
	C.rdma_destroy_id(x.id)
}

// run is the dispatcher.
func (m *connManager) run() {
	defer close(m.stopped)
	rc, err := m.file.SyscallConn()
	if err != nil {
		return
	}
	got := false
	read := func(uintptr) bool {
		if C.nv_get_event(m.ch, m.ev) == 0 {
			got = true
			return true
		}
		return false
	}
	for {
		got = false
		err := rc.Read(read)
		if err != nil || !got {
			return
		}
		m.handle(m.ev)
	}
}

func (m *connManager) handle(g *C.struct_gevent) {
	e := cmEvent{typ: int(g.event), status: int(g.status)}
	if g.priv_len > 0 {
		e.priv = C.GoBytes(unsafe.Pointer(&g.priv[0]), C.int(g.priv_len))
	}
	// The kernel reports REQ and REP resources from the receiver's point
	// of view (ib_cm swaps them); the rdma API gives the peer's values,
	// as they are in its message.
	e.param = rdma.ConnParam{
		ResponderResources: uint8(g.initiator_depth),
		InitiatorDepth:     uint8(g.responder_resources),
		RetryCount:         uint8(g.retry_count),
		RNRRetryCount:      uint8(g.rnr_retry_count),
		FlowControl:        g.flow_control != 0,
		SRQ:                g.srq != 0,
		QPN:                uint32(g.qp_num),
	}
	m.mu.Lock()
	x := m.ids[uintptr(g.ctx)]
	m.mu.Unlock()
	m.log.Trace("event", "event", C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(g.event))), "status", e.status)
	if e.typ == C.RDMA_CM_EVENT_CONNECT_REQUEST {
		m.request(x, g.id, e)
		return
	}
	if x == nil {
		return
	}
	x.mu.Lock()
	destroy := false
	if !x.dead {
		destroy = m.dispatch(x, e)
	}
	x.mu.Unlock()
	if destroy {
		m.destroy(x)
	}
}

// dispatch handles an event of x (x.mu held); it returns true when x
// is to be destroyed.
func (m *connManager) dispatch(x *cmID, e cmEvent) bool {
	switch {
	case x.conn != nil:
		switch e.typ {
		case C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL:
			x.conn.disconnected(e, e.typ == C.RDMA_CM_EVENT_DEVICE_REMOVAL)
		case C.RDMA_CM_EVENT_TIMEWAIT_EXIT:
			x.conn.disconnected(e, false)
			x.conn.timewaitExit()
			return true
		}
		return false
	case x.act != nil && e.typ == C.RDMA_CM_EVENT_CONNECT_RESPONSE:
		st := x.act
		x.act = nil
		c, err := m.completeActive(x, st, e)
		if err != nil {
			e.err = err
		} else {
			x.conn = c
			e.conn = c
		}
	case x.pas != nil && e.typ == C.RDMA_CM_EVENT_ESTABLISHED:
		st := x.pas
		x.pas = nil
		c := m.newConn(x, st.qp, st.param, nil)
		x.conn = c
		e.conn = c
	}
	select {
	case x.setup <- e:
	default:
		m.log.Warn("connection setup event dropped", "event", e.typ)
	}
	return false
}

// request handles a CONNECT_REQUEST for listener x on the new id.
func (m *connManager) request(x *cmID, id *C.struct_rdma_cm_id, e cmEvent) {
	var l *listener
	if x != nil {
		x.mu.Lock()
		l = x.lst
		x.mu.Unlock()
	}
	if l == nil {
		C.rdma_reject(id, nil, 0)
		C.rdma_destroy_id(id)
		return
	}
	c := m.adopt(id)
	e.param.PathMTU = m.dev.port.ActiveMTU
	r := &connRequest{m: m, x: c, priv: e.priv, param: e.param, local: localAddr(id), remote: peerAddr(id)}
	if !l.push(r) {
		m.log.Warn("connection request rejected: listener closed or backlog full", "port", l.port, "from", r.remote)
		C.rdma_reject(id, nil, 0)
		m.destroy(c)
	}
}

func localAddr(id *C.struct_rdma_cm_id) netip.AddrPort {
	var ip [16]byte
	var port C.uint16_t
	return toAddrPort(C.nv_local_addr(id, (*C.uint8_t)(&ip[0]), &port), ip, port)
}

func peerAddr(id *C.struct_rdma_cm_id) netip.AddrPort {
	var ip [16]byte
	var port C.uint16_t
	return toAddrPort(C.nv_peer_addr(id, (*C.uint8_t)(&ip[0]), &port), ip, port)
}

func toAddrPort(n C.int, ip [16]byte, port C.uint16_t) netip.AddrPort {
	switch n {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port))
	case 16:
		return netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), uint16(port))
	}
	return netip.AddrPort{}
}

// sockaddr builds a C sockaddr_storage for a:port.
func sockaddr(a netip.Addr, port uint16) *C.struct_sockaddr_storage {
	ss := (*C.struct_sockaddr_storage)(C.calloc(1, C.sizeof_struct_sockaddr_storage))
	if a.Is4() {
		b := a.As4()
		C.nv_sockaddr(ss, (*C.uint8_t)(&b[0]), 4, C.uint16_t(port), 0)
	} else {
		b := a.As16()
		C.nv_sockaddr(ss, (*C.uint8_t)(&b[0]), 16, C.uint16_t(port), 0)
	}
	return ss
}

// connParam builds an rdma_conn_param in C memory; free releases it.
func connParam(priv []byte, p rdma.ConnParam, qpn uint32) (param *C.struct_rdma_conn_param, free func()) {
	param = (*C.struct_rdma_conn_param)(C.calloc(1, C.sizeof_struct_rdma_conn_param))
	var data unsafe.Pointer
	if len(priv) > 0 {
		data = C.CBytes(priv)
	}
	fc := 0
	if p.FlowControl {
		fc = 1
	}
	C.nv_conn_param(param, data, C.int(len(priv)), C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
		C.uint8_t(fc), C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount), C.uint32_t(qpn))
	if p.SRQ {
		param.srq = 1 // the REP's SRQ bit (rdma_accept without an rdma_cm QP takes it from here)
	}
	return param, func() { C.free(data); C.free(unsafe.Pointer(param)) }
}

// setOptions applies the configured TOS and ACK timeout to an id.
func (m *connManager) setOptions(x *cmID) {
	if m.dev.cfg.SetTOS {
		if r := C.nv_set_u8_option(x.id, C.RDMA_OPTION_ID_TOS, C.uint8_t(m.dev.cfg.TOS)); r != 0 {
			m.log.Warn("setting the TOS failed", "tos", m.dev.cfg.TOS)
		}
	}
	if t := m.dev.cfg.ACKTimeout; t != 0 {
		if r := C.nv_set_u8_option(x.id, C.RDMA_OPTION_ID_ACK_TIMEOUT, C.uint8_t(t)); r != 0 {
			m.log.Debug("setting the ACK timeout is not supported here", "timeout", t)
		}
	}
}

// toInit brings q to INIT with the CM's attributes (Init→Init when the
// caller already moved it there to post receives).
func (m *connManager) toInit(x *cmID, q *qp) error {
	var a C.struct_ibv_qp_attr
	var mask C.int
	a.qp_state = C.IBV_QPS_INIT
	if r, err := C.rdma_init_qp_attr(x.id, &a, &mask); r != 0 {
		return fmt.Errorf("rdma_init_qp_attr(INIT): %w", errnoErr(err))
	}
	// Before rdma_connect the kernel has no ib_cm id yet and gives access
	// flags 0 (cma_ib_init_qp_attr), and after a REQ it grants remote
	// read only when the peer asked for RDMA READs: the rdma API promises
	// remote read and write, which the NVMe target's READs of host memory
	// need.
	a.qp_access_flags |= C.IBV_ACCESS_REMOTE_READ | C.IBV_ACCESS_REMOTE_WRITE
	mask |= C.IBV_QP_ACCESS_FLAGS
	return q.modify(&a, mask)
}

// toRTR brings q to RTR with the CM's attributes and our responder
// resources and path MTU.
func (m *connManager) toRTR(x *cmID, q *qp, p rdma.ConnParam) (rdma.MTU, error) {
	var a C.struct_ibv_qp_attr
	var mask C.int
	a.qp_state = C.IBV_QPS_RTR
	if r, err := C.rdma_init_qp_attr(x.id, &a, &mask); r != 0 {
		return 0, fmt.Errorf("rdma_init_qp_attr(RTR): %w", errnoErr(err))
	}
	if mask&C.IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
		a.max_dest_rd_atomic = C.uint8_t(min(int(p.ResponderResources), m.dev.attr.MaxQPRdAtom))
	}
	if mask&C.IBV_QP_MIN_RNR_TIMER != 0 {
		a.min_rnr_timer = minRNRTimer
	}
	if p.PathMTU.Valid() && mask&C.IBV_QP_PATH_MTU != 0 && C.enum_ibv_mtu(p.PathMTU) < a.path_mtu {
		a.path_mtu = C.enum_ibv_mtu(p.PathMTU)
	}
	return rdma.MTU(a.path_mtu), q.modify(&a, mask)
}

// toRTS brings q to RTS with the CM's attributes and an initiator depth
// of at most depth.
func (m *connManager) toRTS(x *cmID, q *qp, depth int) error {
	var a C.struct_ibv_qp_attr
	var mask C.int
	a.qp_state = C.IBV_QPS_RTS
	if r, err := C.rdma_init_qp_attr(x.id, &a, &mask); r != 0 {
		return fmt.Errorf("rdma_init_qp_attr(RTS): %w", errnoErr(err))
	}
	if mask&C.IBV_QP_MAX_QP_RD_ATOMIC != 0 {
		a.max_rd_atomic = C.uint8_t(min(depth, m.dev.attr.MaxQPInitRdAtom))
	}
	return q.modify(&a, mask)
}

func (m *connManager) ownQP(q rdma.QP) (*qp, error) {
	x, ok := q.(*qp)
	if !ok || x.pd.dev != m.dev {
		return nil, fmt.Errorf("ibverbs: QP of another device or provider: %w", rdma.ErrInvalidArgument)
	}
	if s := x.State(); s != rdma.QPSReset && s != rdma.QPSInit {
		return nil, fmt.Errorf("ibverbs: connect a QP in %v: %w", s, rdma.ErrInvalidState)
	}
	return x, nil
}

// Listen implements rdma.ConnManager.
func (m *connManager) Listen(port uint16) (rdma.Listener, error) {
	m.mu.Lock()
	if m.listeners[port] != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("ibverbs: listen on port %d: %w", port, syscall.EADDRINUSE)
	}
	m.mu.Unlock()
	x, err := m.createID()
	if err != nil {
		return nil, err
	}
	l := &listener{m: m, x: x, port: port, reqs: make(chan *connRequest, 128), closed: make(chan struct{})}
	x.lst = l
	m.setOptions(x)
	ss := sockaddr(m.dev.cfg.Addr, port)
	defer C.free(unsafe.Pointer(ss))
	if r, err := C.nv_bind_addr(x.id, ss); r != 0 {
		m.destroy(x)
		return nil, fmt.Errorf("ibverbs: rdma_bind_addr %s: %w", netip.AddrPortFrom(m.dev.cfg.Addr, port), errnoErr(err))
	}
	if r, err := C.rdma_listen(x.id, 128); r != 0 {
		m.destroy(x)
		return nil, fmt.Errorf("ibverbs: rdma_listen %s: %w", netip.AddrPortFrom(m.dev.cfg.Addr, port), errnoErr(err))
	}
	l.addr = netip.AddrPortFrom(m.dev.cfg.Addr, port)
	m.mu.Lock()
	if m.listeners[port] != nil || m.down {
		m.mu.Unlock()
		m.destroy(x)
		return nil, fmt.Errorf("ibverbs: listen on port %d: %w", port, syscall.EADDRINUSE)
	}
	m.listeners[port] = l
	m.mu.Unlock()
	m.log.Debug("listening", "addr", l.addr, "device", C.GoString(C.nv_cm_dev_name(x.id)), "port", int(C.nv_port_num(x.id)))
	return l, nil
}

// Connect implements rdma.ConnManager.
func (m *connManager) Connect(ctx context.Context, addr netip.Addr, port uint16, qpi rdma.QP, privateData []byte, param rdma.ConnParam) (rdma.Conn, error) {
	q, err := m.ownQP(qpi)
	if err != nil {
		return nil, err
	}
	if len(privateData) > rdma.MaxConnectPrivateData {
		return nil, fmt.Errorf("ibverbs: %d bytes of connect private data (max %d): %w", len(privateData), rdma.MaxConnectPrivateData, rdma.ErrInvalidArgument)
	}
	dst := netip.AddrPortFrom(addr.Unmap(), port)
	// The caller's deadline bounds the CM exchange; address and route
	// resolution before it have their own (resolveContext).
	budget := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d)
	}
	x, err := m.createID()
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			m.destroy(x)
		}
	}()
	m.setOptions(x)
	src, dsa := sockaddr(m.dev.cfg.Addr, 0), sockaddr(dst.Addr(), port)
	r, cerr := C.nv_resolve_addr(x.id, src, dsa, resolveTimeoutMS)
	C.free(unsafe.Pointer(src))
	C.free(unsafe.Pointer(dsa))
	if r != 0 {
		return nil, fmt.Errorf("ibverbs: connect %s: rdma_resolve_addr: %w", dst, errnoErr(cerr))
	}
	rctx, rcancel := resolveContext(ctx)
	_, err = m.await(rctx, x, C.RDMA_CM_EVENT_ADDR_RESOLVED)
	rcancel()
	if err != nil {
		return nil, fmt.Errorf("ibverbs: connect %s: resolve address: %w", dst, err)
	}
	if r, err := C.rdma_resolve_route(x.id, resolveTimeoutMS); r != 0 {
		return nil, fmt.Errorf("ibverbs: connect %s: rdma_resolve_route: %w", dst, errnoErr(err))
	}
	rctx, rcancel = resolveContext(ctx)
	_, err = m.await(rctx, x, C.RDMA_CM_EVENT_ROUTE_RESOLVED)
	rcancel()
	if err != nil {
		return nil, fmt.Errorf("ibverbs: connect %s: resolve route: %w", dst, err)
	}
	if err := m.toInit(x, q); err != nil {
		return nil, fmt.Errorf("ibverbs: connect %s: %w", dst, err)
	}
	param.ResponderResources = uint8(min(int(param.ResponderResources), m.dev.attr.MaxQPRdAtom))
	param.InitiatorDepth = uint8(min(int(param.InitiatorDepth), m.dev.attr.MaxQPInitRdAtom))
	x.mu.Lock()
	x.act = &setupState{qp: q, param: param}
	x.mu.Unlock()
	cp, free := connParam(privateData, param, q.QPN())
	r, cerr = C.rdma_connect(x.id, cp)
	free()
	if r != 0 {
		return nil, fmt.Errorf("ibverbs: connect %s: rdma_connect: %w", dst, errnoErr(cerr))
	}
	cctx, ccancel := ctx, context.CancelFunc(func() {})
	if budget >= 0 {
		cctx, ccancel = phaseContext(ctx, budget)
	}
	e, err := m.await(cctx, x, C.RDMA_CM_EVENT_CONNECT_RESPONSE)
	ccancel()
	if err != nil {
		q.toErr()
		return nil, fmt.Errorf("ibverbs: connect %s: %w", dst, err)
	}
	ok = true
	return e.conn, nil
}

// completeActive finishes the active side on CONNECT_RESPONSE: RTR, RTS
// and the RTU (rdma_establish).
func (m *connManager) completeActive(x *cmID, st *setupState, e cmEvent) (*conn, error) {
	p := st.param
	mtu, err := m.toRTR(x, st.qp, p)
	if err != nil {
		return nil, err
	}
	if err := m.toRTS(x, st.qp, min(int(p.InitiatorDepth), int(e.param.ResponderResources))); err != nil {
		return nil, err
	}
	if r, err := C.rdma_establish(x.id); r != 0 {
		return nil, fmt.Errorf("rdma_establish: %w", errnoErr(err))
	}
	peer := e.param
	peer.PathMTU = mtu
	return m.newConn(x, st.qp, peer, e.priv), nil
}

// await waits for the event want on x; a failure event, the context or
// shutdown end it with an error.
func (m *connManager) await(ctx context.Context, x *cmID, want int) (cmEvent, error) {
	for {
		select {
		case e := <-x.setup:
			if e.err != nil {
				return e, e.err
			}
			switch e.typ {
			case want:
				return e, nil
			case C.RDMA_CM_EVENT_ESTABLISHED:
				if e.conn != nil {
					return e, nil
				}
			case C.RDMA_CM_EVENT_REJECTED:
				return e, &rdma.RejectError{Reason: rdma.RejectReason(e.status), PrivateData: e.priv}
			case C.RDMA_CM_EVENT_UNREACHABLE, C.RDMA_CM_EVENT_ADDR_ERROR, C.RDMA_CM_EVENT_ROUTE_ERROR:
				return e, fmt.Errorf("%s (%v): %w", C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(e.typ))), syscall.Errno(-e.status), rdma.ErrUnreachable)
			case C.RDMA_CM_EVENT_CONNECT_ERROR, C.RDMA_CM_EVENT_DISCONNECTED, C.RDMA_CM_EVENT_DEVICE_REMOVAL:
				return e, fmt.Errorf("%s (status %d)", C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(e.typ))), e.status)
			}
		case <-ctx.Done():
			return cmEvent{}, ctx.Err()
		case <-m.stopped:
			return cmEvent{}, fmt.Errorf("connection manager: %w", rdma.ErrClosed)
		}
	}
}

// Close implements rdma.ConnManager: it stops the listeners.
func (m *connManager) Close() error {
	m.mu.Lock()
	ls := make([]*listener, 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	return nil
}

// shutdown stops everything: listeners, connections and the dispatcher.
func (m *connManager) shutdown() {
	m.Close()
	m.mu.Lock()
	m.down = true
	ids := make([]*cmID, 0, len(m.ids))
	for _, x := range m.ids {
		ids = append(ids, x)
	}
	m.mu.Unlock()
	for _, x := range ids {
		x.mu.Lock()
		if c := x.conn; c != nil && !x.dead {
			c.disconnected(cmEvent{typ: C.RDMA_CM_EVENT_DEVICE_REMOVAL}, true)
			c.timewaitExit()
		}
		x.mu.Unlock()
		m.destroy(x)
	}
	m.file.Close()
	<-m.stopped
	C.rdma_destroy_event_channel(m.ch)
	C.free(unsafe.Pointer(m.ev))
}

// listener is a listening id.
type listener struct {
	m      *connManager
	x      *cmID
	port   uint16
	addr   netip.AddrPort
	mu     sync.Mutex
	reqs   chan *connRequest
	closed chan struct{}
	done   bool
}

func (l *listener) push(r *connRequest) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return false
	}
	select {
	case l.reqs <- r:
		return true
	default:
		return false
	}
}

// Next implements rdma.Listener.
func (l *listener) Next(ctx context.Context) (rdma.ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		return nil, fmt.Errorf("ibverbs: listener %s: %w", l.addr, rdma.ErrClosed)
	}
}

// Addr implements rdma.Listener.
func (l *listener) Addr() netip.AddrPort { return l.addr }

// Close implements rdma.Listener: pending requests are rejected.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	close(l.closed)
	l.mu.Unlock()
	l.m.mu.Lock()
	if l.m.listeners[l.port] == l {
		delete(l.m.listeners, l.port)
	}
	l.m.mu.Unlock()
	l.m.destroy(l.x)
	for {
		select {
		case r := <-l.reqs:
			r.Reject(nil)
		default:
			return nil
		}
	}
}

// connRequest is an incoming request on its own id.
type connRequest struct {
	m      *connManager
	x      *cmID
	local  netip.AddrPort
	remote netip.AddrPort
	priv   []byte
	param  rdma.ConnParam

	mu       sync.Mutex
	answered bool
}

// RemoteAddr implements rdma.ConnRequest.
func (r *connRequest) RemoteAddr() netip.AddrPort { return r.remote }

// LocalAddr implements rdma.ConnRequest.
func (r *connRequest) LocalAddr() netip.AddrPort { return r.local }

// PrivateData implements rdma.ConnRequest: the requester's data after
// the rdma_cm header.
func (r *connRequest) PrivateData() []byte { return r.priv }

// Param implements rdma.ConnRequest.
func (r *connRequest) Param() rdma.ConnParam { return r.param }

func (r *connRequest) answer() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return fmt.Errorf("ibverbs: connection request from %s already answered: %w", r.remote, rdma.ErrInvalidState)
	}
	r.answered = true
	return nil
}

// Accept implements rdma.ConnRequest.
func (r *connRequest) Accept(ctx context.Context, qpi rdma.QP, privateData []byte, param rdma.ConnParam) (rdma.Conn, error) {
	m := r.m
	q, err := m.ownQP(qpi)
	if err != nil {
		return nil, err
	}
	if len(privateData) > rdma.MaxAcceptPrivateData {
		return nil, fmt.Errorf("ibverbs: %d bytes of accept private data (max %d): %w", len(privateData), rdma.MaxAcceptPrivateData, rdma.ErrInvalidArgument)
	}
	if err := r.answer(); err != nil {
		return nil, err
	}
	x := r.x
	ok := false
	defer func() {
		if !ok {
			q.toErr()
			m.destroy(x)
		}
	}()
	m.setOptions(x)
	param.ResponderResources = uint8(min(int(param.ResponderResources), m.dev.attr.MaxQPRdAtom, int(r.param.InitiatorDepth)))
	param.InitiatorDepth = uint8(min(int(param.InitiatorDepth), m.dev.attr.MaxQPInitRdAtom, int(r.param.ResponderResources)))
	if err := m.toInit(x, q); err != nil {
		return nil, fmt.Errorf("ibverbs: accept %s: %w", r.remote, err)
	}
	mtu, err := m.toRTR(x, q, param)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: accept %s: %w", r.remote, err)
	}
	if err := m.toRTS(x, q, int(param.InitiatorDepth)); err != nil {
		return nil, fmt.Errorf("ibverbs: accept %s: %w", r.remote, err)
	}
	peer := r.param
	peer.PathMTU = mtu
	x.mu.Lock()
	x.pas = &setupState{qp: q, param: peer}
	x.mu.Unlock()
	cp, free := connParam(privateData, param, q.QPN())
	rc, cerr := C.rdma_accept(x.id, cp)
	free()
	if rc != 0 {
		return nil, fmt.Errorf("ibverbs: accept %s: rdma_accept: %w", r.remote, errnoErr(cerr))
	}
	e, err := m.await(ctx, x, C.RDMA_CM_EVENT_ESTABLISHED)
	if err != nil {
		return nil, fmt.Errorf("ibverbs: accept %s: %w", r.remote, err)
	}
	e.conn.priv = r.priv
	ok = true
	return e.conn, nil
}

// Reject implements rdma.ConnRequest.
func (r *connRequest) Reject(privateData []byte) error {
	if len(privateData) > rdma.MaxRejectPrivateData {
		return fmt.Errorf("ibverbs: %d bytes of reject private data (max %d): %w", len(privateData), rdma.MaxRejectPrivateData, rdma.ErrInvalidArgument)
	}
	if err := r.answer(); err != nil {
		return err
	}
	var data unsafe.Pointer
	if len(privateData) > 0 {
		data = C.CBytes(privateData)
		defer C.free(data)
	}
	rc, err := C.rdma_reject(r.x.id, data, C.uint8_t(len(privateData)))
	r.m.destroy(r.x)
	if rc != 0 {
		return fmt.Errorf("ibverbs: reject %s: %w", r.remote, errnoErr(err))
	}
	return nil
}

// conn is an established connection.
type conn struct {
	m      *connManager
	x      *cmID
	qp     *qp
	local  netip.AddrPort
	remote netip.AddrPort
	param  rdma.ConnParam
	priv   []byte
	events chan rdma.ConnEvent
	done   chan struct{}

	mu     sync.Mutex
	isDown bool
	exited bool
}

func (m *connManager) newConn(x *cmID, q *qp, param rdma.ConnParam, priv []byte) *conn {
	c := &conn{m: m, x: x, qp: q, local: localAddr(x.id), remote: peerAddr(x.id), param: param, priv: priv,
		events: make(chan rdma.ConnEvent, 4), done: make(chan struct{})}
	c.events <- rdma.ConnEvent{Type: rdma.EventEstablished}
	return c
}

// disconnected handles the end of the connection (x.mu held): the QP goes
// to Err, a DREQ is answered, and Done closes.
func (c *conn) disconnected(e cmEvent, removal bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isDown {
		return
	}
	c.isDown = true
	c.qp.toErr()
	C.rdma_disconnect(c.x.id) // sends the DREP to a DREQ; harmless otherwise
	t := rdma.EventDisconnected
	if removal {
		t = rdma.EventDeviceRemoval
	}
	c.events <- rdma.ConnEvent{Type: t, PrivateData: e.priv}
	close(c.done)
}

func (c *conn) timewaitExit() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exited {
		return
	}
	c.exited = true
	c.events <- rdma.ConnEvent{Type: rdma.EventTimeWaitExit}
	close(c.events)
}

// QP implements rdma.Conn.
func (c *conn) QP() rdma.QP { return c.qp }

// LocalAddr implements rdma.Conn.
func (c *conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr implements rdma.Conn.
func (c *conn) RemoteAddr() netip.AddrPort { return c.remote }

// Param implements rdma.Conn.
func (c *conn) Param() rdma.ConnParam { return c.param }

// PrivateData implements rdma.Conn.
func (c *conn) PrivateData() []byte { return c.priv }

// Events implements rdma.Conn.
func (c *conn) Events() <-chan rdma.ConnEvent { return c.events }

// Done implements rdma.Conn.
func (c *conn) Done() <-chan struct{} { return c.done }

// Disconnect implements rdma.Conn: a DREQ, the QP to Err, and a wait for
// the DREP (the DISCONNECTED event).
func (c *conn) Disconnect(ctx context.Context) error {
	c.x.mu.Lock()
	c.mu.Lock()
	down := c.isDown
	c.mu.Unlock()
	if !down && !c.x.dead {
		c.qp.toErr()
		C.rdma_disconnect(c.x.id)
	}
	c.x.mu.Unlock()
	if down {
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
