package ibcm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// recvSlot is the size of one receive buffer: the GRH and a MAD.
const recvSlot = rdma.GRHLen + wire.MADLen

// sendWRID marks send work requests; the low bits are the buffer index.
const sendWRID = 1 << 63

// Manager is the connection manager of one device. It implements
// rdma.ConnManager; its methods are safe for concurrent use.
type Manager struct {
	dev  rdma.Device
	opts Options
	log  hclog.Logger
	addr netip.Addr
	guid uint64
	mtu  rdma.MTU
	// hiTID is the high half of the TIDs of the requests sent here.
	hiTID uint32

	pd     rdma.PD
	cq     rdma.CQ
	qp     rdma.QP
	recvMR rdma.MR
	sendMR rdma.MR

	sendMu   sync.Mutex
	sendFree []int

	mu          sync.Mutex
	closed      bool // Close was called: no new listeners or connections
	destroyed   bool
	listeners   map[uint16]*listener
	byLocalID   map[uint32]*conn
	byRemote    map[remoteKey]*conn
	byRemoteQPN map[remoteKey]*conn
	byLocalQPN  map[uint32]*conn
	ports       map[uint16]bool

	done     chan struct{}
	loopDone chan struct{}
}

// remoteKey identifies a peer's communication ID or QP by its CA GUID.
type remoteKey struct {
	id   uint32 // communication ID or QP number
	guid uint64
}

var _ rdma.ConnManager = (*Manager)(nil)

// New creates the connection manager of dev: a PD, a CQ, a GSI QP in RTS
// with its receive buffers posted, and the goroutine that serves it.
func New(dev rdma.Device, opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	m := &Manager{
		dev:         dev,
		opts:        opts,
		log:         opts.Logger,
		addr:        dev.Addr(),
		guid:        opts.CAGUID,
		mtu:         dev.Port().ActiveMTU,
		hiTID:       rand.Uint32(),
		listeners:   make(map[uint16]*listener),
		byLocalID:   make(map[uint32]*conn),
		byRemote:    make(map[remoteKey]*conn),
		byRemoteQPN: make(map[remoteKey]*conn),
		byLocalQPN:  make(map[uint32]*conn),
		ports:       make(map[uint16]bool),
		done:        make(chan struct{}),
		loopDone:    make(chan struct{}),
	}
	if m.guid == 0 {
		m.guid = DeriveCAGUID(m.addr)
	}
	if !m.mtu.Valid() {
		m.mtu = rdma.MTU1024
	}
	if err := m.setup(); err != nil {
		m.release()
		return nil, fmt.Errorf("ibcm: %s: %w", dev.Name(), err)
	}
	go m.loop()
	m.log.Debug("connection manager up", "device", dev.Name(), "addr", m.addr, "ca_guid", fmt.Sprintf("%#016x", m.guid))
	return m, nil
}

// DeriveCAGUID returns the CA GUID this package uses for a device
// address: for IPv4 a.b.c.d the EUI-64 of the locally administered MAC
// address 02:00:a:b:c:d (as rxe derives its node GUID from the MAC), for
// IPv6 an FNV-1a hash of the address.
func DeriveCAGUID(a netip.Addr) uint64 {
	if a.Is4() {
		b := a.As4()
		mac := [6]byte{0x02, 0x00, b[0], b[1], b[2], b[3]}
		return uint64(mac[0]^0x02)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xff<<32 | 0xfe<<24 |
			uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
	}
	h := fnv.New64a()
	b := a.As16()
	h.Write(b[:])
	return h.Sum64()
}

func (m *Manager) setup() error {
	var err error
	if m.pd, err = m.dev.AllocPD(); err != nil {
		return fmt.Errorf("PD: %w", err)
	}
	if m.cq, err = m.dev.CreateCQ(m.opts.RecvDepth + m.opts.SendDepth); err != nil {
		return fmt.Errorf("CQ: %w", err)
	}
	m.qp, err = m.pd.CreateQP(&rdma.QPInitAttr{
		Type:   rdma.QPTypeGSI,
		SendCQ: m.cq,
		RecvCQ: m.cq,
		Cap:    rdma.QPCap{MaxSendWR: m.opts.SendDepth, MaxRecvWR: m.opts.RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
		SigAll: true,
	})
	if err != nil {
		return fmt.Errorf("GSI QP: %w", err)
	}
	if m.recvMR, err = m.pd.RegMR(make([]byte, m.opts.RecvDepth*recvSlot), rdma.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	if m.sendMR, err = m.pd.RegMR(make([]byte, m.opts.SendDepth*wire.MADLen), 0); err != nil {
		return fmt.Errorf("send buffers: %w", err)
	}
	for i := m.opts.SendDepth - 1; i >= 0; i-- {
		m.sendFree = append(m.sendFree, i)
	}
	if m.qp.State() == rdma.QPSReset {
		if err := m.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, PKeyIndex: 0, Port: 1, QKey: rdma.QKeyGSI},
			rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrQKey); err != nil {
			return fmt.Errorf("GSI QP to INIT: %w", err)
		}
	}
	for i := range m.opts.RecvDepth {
		if err := m.postRecv(i); err != nil {
			return err
		}
	}
	if m.qp.State() == rdma.QPSInit {
		if err := m.qp.Modify(&rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState); err != nil {
			return fmt.Errorf("GSI QP to RTR: %w", err)
		}
	}
	if m.qp.State() == rdma.QPSRTR {
		if err := m.qp.Modify(&rdma.QPAttr{State: rdma.QPSRTS, SQPSN: 0}, rdma.QPAttrState|rdma.QPAttrSQPSN); err != nil {
			return fmt.Errorf("GSI QP to RTS: %w", err)
		}
	}
	return nil
}

// release frees what setup created (in reverse order), ignoring errors.
func (m *Manager) release() {
	if m.qp != nil {
		m.qp.Destroy()
	}
	if m.recvMR != nil {
		m.recvMR.Deregister()
	}
	if m.sendMR != nil {
		m.sendMR.Deregister()
	}
	if m.cq != nil {
		m.cq.Destroy()
	}
	if m.pd != nil {
		m.pd.Dealloc()
	}
}

func (m *Manager) postRecv(i int) error {
	wr := rdma.RecvWR{WRID: uint64(i), SGL: []rdma.SGE{{Addr: m.recvMR.Addr() + uint64(i*recvSlot), Length: recvSlot, LKey: m.recvMR.LKey()}}}
	if err := m.qp.PostRecv(&wr); err != nil {
		return fmt.Errorf("post GSI receive: %w", err)
	}
	return nil
}

// loop polls the CQ: it recycles send buffers and hands received MADs
// to dispatch.
func (m *Manager) loop() {
	defer close(m.loopDone)
	wcs := make([]rdma.WorkCompletion, 32)
	notify := m.cq.Notify()
	for {
		n := m.cq.Poll(wcs)
		if n == 0 {
			select {
			case <-notify:
				continue
			case <-m.done:
				return
			}
		}
		for i := range wcs[:n] {
			m.complete(&wcs[i])
		}
	}
}

func (m *Manager) complete(wc *rdma.WorkCompletion) {
	if wc.WRID&sendWRID != 0 {
		if wc.Status != rdma.Success && wc.Status != rdma.WRFlushError {
			m.log.Warn("MAD send failed", "status", wc.Status)
		}
		m.sendMu.Lock()
		m.sendFree = append(m.sendFree, int(wc.WRID&^sendWRID))
		m.sendMu.Unlock()
		return
	}
	i := int(wc.WRID)
	if wc.Status != rdma.Success {
		if wc.Status != rdma.WRFlushError {
			m.log.Warn("MAD receive failed", "status", wc.Status)
			m.repost(i)
		}
		return
	}
	slot := m.recvMR.Bytes()[i*recvSlot : (i+1)*recvSlot]
	var buf [recvSlot]byte
	n := copy(buf[:], slot[:min(int(wc.ByteLen), recvSlot)])
	m.repost(i)
	if n < recvSlot {
		m.log.Debug("short MAD dropped", "bytes", wc.ByteLen)
		return
	}
	src, _, err := rdma.GRHAddrs(buf[:rdma.GRHLen])
	if err != nil {
		m.log.Debug("MAD with a bad GRH dropped", "error", err)
		return
	}
	m.dispatch(src, wire.MAD(buf[rdma.GRHLen:]))
}

func (m *Manager) repost(i int) {
	select {
	case <-m.done:
		return
	default:
	}
	if err := m.postRecv(i); err != nil {
		m.log.Warn("cannot repost GSI receive", "error", err)
	}
}

// send posts a copy of a MAD to QP 1 of dst.
func (m *Manager) send(dst netip.Addr, mad []byte) { m.sendTC(dst, 0, mad) }

// sendConn posts a copy of a MAD of connection c to its peer with the
// connection's traffic class: ib_cm sends a connection's MADs with the AV
// of its path (cm_alloc_msg), which carries it (RDMA_OPTION_ID_TOS on the
// active side, the REQ's on the passive side).
func (m *Manager) sendConn(c *conn, mad []byte) { m.sendTC(c.peer, c.trafficClass, mad) }

// sendTC posts a copy of a MAD to QP 1 of dst with traffic class tc.
func (m *Manager) sendTC(dst netip.Addr, tc uint8, mad []byte) {
	m.sendMu.Lock()
	if len(m.sendFree) == 0 {
		m.sendMu.Unlock()
		m.log.Warn("no free MAD send buffer; MAD dropped", "dst", dst, "mad", wire.MAD(mad).String())
		return
	}
	i := m.sendFree[len(m.sendFree)-1]
	m.sendFree = m.sendFree[:len(m.sendFree)-1]
	m.sendMu.Unlock()
	copy(m.sendMR.Bytes()[i*wire.MADLen:(i+1)*wire.MADLen], mad)
	wr := rdma.SendWR{
		WRID:       sendWRID | uint64(i),
		SGL:        []rdma.SGE{{Addr: m.sendMR.Addr() + uint64(i*wire.MADLen), Length: wire.MADLen, LKey: m.sendMR.LKey()}},
		Opcode:     rdma.WRSend,
		Flags:      rdma.SendSignaled,
		AH:         rdma.AH{DGID: rdma.GIDFromAddr(dst), HopLimit: 64, TrafficClass: tc},
		RemoteQPN:  wire.GSIQPN,
		RemoteQKey: wire.GSIQKey,
	}
	if m.log.IsTrace() {
		m.log.Trace("send", "dst", dst, "mad", wire.MAD(mad).String())
	}
	if err := m.qp.PostSend(&wr); err != nil {
		m.log.Warn("MAD send failed", "dst", dst, "error", err)
		m.sendMu.Lock()
		m.sendFree = append(m.sendFree, i)
		m.sendMu.Unlock()
	}
}

// dispatch handles one received MAD from src.
func (m *Manager) dispatch(src netip.Addr, mad wire.MAD) {
	if err := mad.CheckCM(); err != nil {
		m.log.Trace("non-CM MAD dropped", "src", src, "mad", mad.String())
		return
	}
	if mad.Method() != wire.MethodSend {
		m.log.Debug("CM MAD with unsupported method dropped", "src", src, "mad", mad.String())
		return
	}
	if m.log.IsTrace() {
		m.log.Trace("recv", "src", src, "mad", mad.String())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.destroyed {
		return
	}
	switch wire.CMAttr(mad.AttrID()) {
	case wire.CMAttrREQ:
		m.onREQ(src, mad)
	case wire.CMAttrMRA:
		m.onMRA(mad)
	case wire.CMAttrREJ:
		m.onREJ(mad)
	case wire.CMAttrREP:
		m.onREP(src, mad)
	case wire.CMAttrRTU:
		m.onRTU(mad)
	case wire.CMAttrDREQ:
		m.onDREQ(src, mad)
	case wire.CMAttrDREP:
		m.onDREP(mad)
	default:
		m.log.Debug("CM MAD ignored", "src", src, "mad", mad.String())
	}
}

// CommEstablished tells the manager that the RC QP qpn, in state RTR,
// received its first packet (IB_EVENT_COMM_EST). If the QP belongs to a
// passive connection waiting for its RTU, the connection is established
// now. It does not block and may be called from a provider's receive path.
func (m *Manager) CommEstablished(qpn uint32) {
	go func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		c := m.byLocalQPN[qpn]
		if c == nil || m.destroyed || (c.state != stRepSent && c.state != stMRARepRcvd) {
			return
		}
		m.log.Debug("communication established before RTU", "qpn", qpn, "local_id", c.localID)
		c.establishPassive()
	}()
}

// Addr returns the device address the manager serves.
func (m *Manager) Addr() netip.Addr { return m.addr }

// CAGUID returns the CA GUID the manager sends.
func (m *Manager) CAGUID() uint64 { return m.guid }

// Listen starts accepting connection requests for an RDMA_PS_TCP port.
func (m *Manager) Listen(port uint16) (rdma.Listener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("ibcm: listen on port %d: %w", port, rdma.ErrClosed)
	}
	if m.listeners[port] != nil {
		return nil, fmt.Errorf("ibcm: listen on port %d: %w", port, rdma.ErrBusy)
	}
	if m.opts.LocalIDPrefix != 0 {
		return nil, fmt.Errorf("ibcm: listen on port %d: a shared device only initiates connections: %w", port, rdma.ErrInvalidArgument)
	}
	l := &listener{m: m, port: port, ready: make(chan struct{}, 1), closedCh: make(chan struct{})}
	m.listeners[port] = l
	m.log.Debug("listening", "port", port, "service_id", fmt.Sprintf("%#016x", wire.ServiceID(port)))
	return l, nil
}

// Close stops all listeners; later Listen and Connect calls fail with
// rdma.ErrClosed. Established connections are not touched.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, l := range m.listeners {
		l.closeLocked()
	}
	return nil
}

// Destroy stops the manager: listeners close, connections in progress
// fail with rdma.ErrClosed, established connections get
// EventDisconnected (their QPs are moved to Err) and their event
// channels close, and the GSI QP, CQ, buffers and PD are released.
func (m *Manager) Destroy() error {
	m.Close()
	m.mu.Lock()
	if m.destroyed {
		m.mu.Unlock()
		return nil
	}
	m.destroyed = true
	conns := make([]*conn, 0, len(m.byLocalID))
	for _, c := range m.byLocalID {
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.abort(fmt.Errorf("ibcm: connection manager destroyed: %w", rdma.ErrClosed))
	}
	m.mu.Unlock()
	close(m.done)
	<-m.loopDone
	var errs []error
	if err := m.qp.Destroy(); err != nil {
		errs = append(errs, err)
	}
	if err := m.recvMR.Deregister(); err != nil {
		errs = append(errs, err)
	}
	if err := m.sendMR.Deregister(); err != nil {
		errs = append(errs, err)
	}
	if err := m.cq.Destroy(); err != nil {
		errs = append(errs, err)
	}
	if err := m.pd.Dealloc(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ibcm: destroy: %w", err)
	}
	return nil
}

// newLocalID returns an unused, non-zero local communication ID (m.mu held).
func (m *Manager) newLocalID() uint32 {
	for {
		id := rand.Uint32()
		if p := m.opts.LocalIDPrefix; p != 0 {
			id = uint32(p)<<24 | id&0xffffff
		}
		if id != 0 && m.byLocalID[id] == nil {
			return id
		}
	}
}

// newPort returns an unused ephemeral rdma_cm port for an active
// connection (m.mu held), from Linux's default local port range.
func (m *Manager) newPort() uint16 {
	for {
		p := uint16(32768 + rand.IntN(60999-32768+1))
		if !m.ports[p] {
			m.ports[p] = true
			return p
		}
	}
}

// formTID returns the TID of a request sent by the connection whose local
// ID is id, as cm_form_tid: the manager's high half and the local ID.
func (m *Manager) formTID(id uint32) uint64 { return uint64(m.hiTID)<<32 | uint64(id) }

// reqTimeout is how long the active side waits for an answer to its REQ
// or DREQ: 2 × packet life time + the remote CM response timeout.
func (m *Manager) reqTimeout() time.Duration {
	return 2*cmTimeout(m.opts.PacketLifeTime) + cmTimeout(m.opts.CMResponseTimeout)
}
