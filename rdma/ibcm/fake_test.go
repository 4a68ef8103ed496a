package ibcm

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// A test double of the rdma API: devices on a fakeNet exchange the MADs
// of their GSI QPs through a delivery goroutine per device; a filter can
// drop or duplicate MADs; RC QPs only record their Modify calls.

// sentMAD is a MAD seen on the fake network.
type sentMAD struct {
	src, dst netip.Addr
	mad      wire.MAD
}

func (s sentMAD) attr() wire.CMAttr { return wire.CMAttr(s.mad.AttrID()) }

// fakeNet connects fake devices by address.
type fakeNet struct {
	mu   sync.Mutex
	devs map[netip.Addr]*fakeDev
	log  []sentMAD
	// filter decides the fate of a MAD: 0 drop, 1 deliver, 2 deliver twice.
	filter func(s sentMAD) int
	// sentCh is closed (and replaced) when a MAD is sent.
	sentCh chan struct{}
}

func newFakeNet() *fakeNet {
	return &fakeNet{devs: make(map[netip.Addr]*fakeDev), sentCh: make(chan struct{})}
}

// waitSent waits up to d for the count-th MAD of attr and returns it.
func (n *fakeNet) waitSent(attr wire.CMAttr, count int, d time.Duration) (sentMAD, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		n.mu.Lock()
		ch := n.sentCh // taken before the look: a MAD sent after it closes ch
		n.mu.Unlock()
		if s := n.sent(attr); len(s) >= count {
			return s[count-1], true
		}
		select {
		case <-ch:
		case <-timer.C:
			return sentMAD{}, false
		}
	}
}

// sent returns the MADs of attribute attr sent so far (all when attr is 0).
func (n *fakeNet) sent(attr wire.CMAttr) []sentMAD {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []sentMAD
	for _, s := range n.log {
		if attr == 0 || s.attr() == attr {
			out = append(out, s)
		}
	}
	return out
}

func (n *fakeNet) count(attr wire.CMAttr) int { return len(n.sent(attr)) }

func (n *fakeNet) setFilter(f func(s sentMAD) int) {
	n.mu.Lock()
	n.filter = f
	n.mu.Unlock()
}

// transmit records a MAD and queues it for dst's GSI QP.
func (n *fakeNet) transmit(src, dst netip.Addr, mad []byte) {
	s := sentMAD{src: src, dst: dst, mad: wire.MAD(append([]byte(nil), mad...))}
	n.mu.Lock()
	n.log = append(n.log, s)
	close(n.sentCh)
	n.sentCh = make(chan struct{})
	copies := 1
	if n.filter != nil {
		copies = n.filter(s)
	}
	d := n.devs[dst]
	n.mu.Unlock()
	if d == nil {
		return
	}
	for range copies {
		select {
		case d.inbox <- s:
		default: // a full link drops
		}
	}
}

type fakeDev struct {
	net   *fakeNet
	addr  netip.Addr
	mtu   rdma.MTU
	inbox chan sentMAD
	stop  chan struct{}

	mu      sync.Mutex
	gsi     *fakeQP
	nextQPN uint32
	mrs     map[uint32]*fakeMR
	nextKey uint32
	qps     []*fakeQP
}

func (n *fakeNet) newDev(addr string) *fakeDev {
	d := &fakeDev{net: n, addr: netip.MustParseAddr(addr), mtu: rdma.MTU1024, inbox: make(chan sentMAD, 256),
		stop: make(chan struct{}), nextQPN: 0x11, mrs: make(map[uint32]*fakeMR), nextKey: 0x100}
	n.mu.Lock()
	n.devs[d.addr] = d
	n.mu.Unlock()
	go d.deliver()
	return d
}

// deliver puts inbound MADs into the GSI QP's receives.
func (d *fakeDev) deliver() {
	for {
		select {
		case <-d.stop:
			return
		case s := <-d.inbox:
			d.mu.Lock()
			q := d.gsi
			d.mu.Unlock()
			if q != nil {
				q.receive(s)
			}
		}
	}
}

func (d *fakeDev) Name() string     { return "fake-" + d.addr.String() }
func (d *fakeDev) Addr() netip.Addr { return d.addr }
func (d *fakeDev) GID() rdma.GID    { return rdma.GIDFromAddr(d.addr) }
func (d *fakeDev) Attr() rdma.DeviceAttr {
	return rdma.DeviceAttr{MaxQP: 1024, MaxQPWR: 1024, MaxSGE: 4, MaxCQE: 4096}
}
func (d *fakeDev) Port() rdma.PortAttr {
	return rdma.PortAttr{State: rdma.PortActive, MaxMTU: rdma.MTU4096, ActiveMTU: d.mtu, GIDTblLen: 1, PKeyTblLen: 1, MaxMsgSize: 1 << 31}
}
func (d *fakeDev) AllocPD() (rdma.PD, error) { return &fakePD{d: d}, nil }
func (d *fakeDev) CreateCQ(n int) (rdma.CQ, error) {
	return &fakeCQ{notify: make(chan struct{}, 1)}, nil
}
func (d *fakeDev) ConnManager() (rdma.ConnManager, error) { return nil, rdma.ErrNotSupported }
func (d *fakeDev) Close() error {
	close(d.stop)
	d.net.mu.Lock()
	delete(d.net.devs, d.addr)
	d.net.mu.Unlock()
	return nil
}

type fakePD struct{ d *fakeDev }

func (p *fakePD) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	p.d.nextKey++
	mr := &fakeMR{buf: buf, key: p.d.nextKey, addr: uint64(p.d.nextKey) << 32, access: access}
	p.d.mrs[mr.key] = mr
	return mr, nil
}

func (p *fakePD) CreateQP(a *rdma.QPInitAttr) (rdma.QP, error) {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	q := &fakeQP{d: d, typ: a.Type, sendCQ: a.SendCQ.(*fakeCQ), recvCQ: a.RecvCQ.(*fakeCQ)}
	if a.Type == rdma.QPTypeGSI {
		if d.gsi != nil {
			return nil, rdma.ErrBusy
		}
		q.qpn = 1
		d.gsi = q
	} else {
		q.qpn = d.nextQPN
		d.nextQPN++
	}
	d.qps = append(d.qps, q)
	return q, nil
}

func (p *fakePD) Dealloc() error { return nil }

// gather copies the bytes an SGL names.
func (d *fakeDev) gather(sgl []rdma.SGE) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []byte
	for _, s := range sgl {
		mr := d.mrs[s.LKey]
		off := s.Addr - mr.addr
		out = append(out, mr.buf[off:off+uint64(s.Length)]...)
	}
	return out
}

func (d *fakeDev) scatter(s rdma.SGE, b []byte) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	mr := d.mrs[s.LKey]
	off := s.Addr - mr.addr
	return copy(mr.buf[off:off+uint64(s.Length)], b)
}

type fakeMR struct {
	buf    []byte
	key    uint32
	addr   uint64
	access rdma.Access
}

func (m *fakeMR) LKey() uint32           { return m.key }
func (m *fakeMR) RKey() uint32           { return m.key }
func (m *fakeMR) Addr() uint64           { return m.addr }
func (m *fakeMR) Len() int               { return len(m.buf) }
func (m *fakeMR) Bytes() []byte          { return m.buf }
func (m *fakeMR) Access() rdma.Access    { return m.access }
func (m *fakeMR) RKeyValid() bool        { return true }
func (m *fakeMR) Invalidate() error      { return nil }
func (m *fakeMR) Rekey() (uint32, error) { return m.key, nil }
func (m *fakeMR) Deregister() error      { return nil }

// modifyCall is one recorded QP Modify.
type modifyCall struct {
	attr rdma.QPAttr
	mask rdma.QPAttrMask
}

type fakeQP struct {
	d      *fakeDev
	typ    rdma.QPType
	qpn    uint32
	sendCQ *fakeCQ
	recvCQ *fakeCQ

	mu       sync.Mutex
	state    rdma.QPState
	attr     rdma.QPAttr
	modifies []modifyCall
	recvs    []rdma.RecvWR
	failRTR  bool
}

func (q *fakeQP) QPN() uint32       { return q.qpn }
func (q *fakeQP) Type() rdma.QPType { return q.typ }
func (q *fakeQP) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *fakeQP) Modify(a *rdma.QPAttr, mask rdma.QPAttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := q.state
	if mask&rdma.QPAttrState != 0 {
		next = a.State
	}
	ok := next == rdma.QPSErr || next == rdma.QPSReset ||
		(q.state == rdma.QPSReset && next == rdma.QPSInit) ||
		(q.state == rdma.QPSInit && next == rdma.QPSInit) ||
		(q.state == rdma.QPSInit && next == rdma.QPSRTR) ||
		(q.state == rdma.QPSRTR && next == rdma.QPSRTS)
	if !ok {
		return fmt.Errorf("fake QP %#x: %s to %s: %w", q.qpn, q.state, next, rdma.ErrInvalidState)
	}
	if next == rdma.QPSRTR && q.failRTR {
		return fmt.Errorf("fake QP %#x: RTR refused: %w", q.qpn, rdma.ErrInvalidArgument)
	}
	q.modifies = append(q.modifies, modifyCall{*a, mask})
	q.state = next
	if next == rdma.QPSErr && q.typ == rdma.QPTypeGSI {
		q.recvs = nil
	}
	return nil
}

// calls returns the recorded Modify calls.
func (q *fakeQP) calls() []modifyCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]modifyCall(nil), q.modifies...)
}

// call returns the recorded Modify that moved the QP to st.
func (q *fakeQP) call(st rdma.QPState) (modifyCall, bool) {
	for _, c := range q.calls() {
		if c.mask&rdma.QPAttrState != 0 && c.attr.State == st {
			return c, true
		}
	}
	return modifyCall{}, false
}

func (q *fakeQP) Query(a *rdma.QPAttr) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	*a = q.attr
	a.State, a.CurState = q.state, q.state
	return nil
}

func (q *fakeQP) PostSend(wr *rdma.SendWR) error {
	for ; wr != nil; wr = wr.Next {
		if q.typ != rdma.QPTypeGSI {
			continue
		}
		data := q.d.gather(wr.SGL)
		q.sendCQ.push(rdma.WorkCompletion{WRID: wr.WRID, Opcode: rdma.WCSend, QPN: q.qpn})
		if wr.RemoteQPN == 1 && wr.RemoteQKey == rdma.QKeyGSI {
			q.d.net.transmit(q.d.addr, wr.AH.DGID.Addr(), data)
		}
	}
	return nil
}

func (q *fakeQP) PostRecv(wr *rdma.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for ; wr != nil; wr = wr.Next {
		w := *wr
		w.Next = nil
		w.SGL = append([]rdma.SGE(nil), wr.SGL...)
		q.recvs = append(q.recvs, w)
	}
	return nil
}

// receive puts a MAD from s.src into the next receive, after a GRH with
// the IPv4 header in its last 20 bytes.
func (q *fakeQP) receive(s sentMAD) {
	q.mu.Lock()
	if len(q.recvs) == 0 || (q.state != rdma.QPSRTR && q.state != rdma.QPSRTS) {
		q.mu.Unlock()
		return
	}
	w := q.recvs[0]
	q.recvs = q.recvs[1:]
	q.mu.Unlock()
	buf := make([]byte, rdma.GRHLen+len(s.mad))
	ip := buf[20:40]
	ip[0] = 0x45
	ip[8] = 64
	ip[9] = 17
	src4, dst4 := s.src.As4(), s.dst.As4()
	copy(ip[12:16], src4[:])
	copy(ip[16:20], dst4[:])
	copy(buf[rdma.GRHLen:], s.mad)
	q.d.scatter(w.SGL[0], buf)
	q.recvCQ.push(rdma.WorkCompletion{WRID: w.WRID, Opcode: rdma.WCRecv, ByteLen: uint32(len(buf)), Flags: rdma.WCGRH, SrcQP: 1, QPN: q.qpn})
}

func (q *fakeQP) Destroy() error { return nil }

type fakeCQ struct {
	mu     sync.Mutex
	wcs    []rdma.WorkCompletion
	notify chan struct{}
	polls  atomic.Int64
}

func (c *fakeCQ) push(wc rdma.WorkCompletion) {
	c.mu.Lock()
	c.wcs = append(c.wcs, wc)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *fakeCQ) Poll(wc []rdma.WorkCompletion) int {
	c.polls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(wc, c.wcs)
	c.wcs = c.wcs[n:]
	return n
}

func (c *fakeCQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n := len(c.wcs)
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *fakeCQ) Notify() <-chan struct{} { return c.notify }
func (c *fakeCQ) Destroy() error          { return nil }

// newRCQP creates an RC QP on d.
func (d *fakeDev) newRCQP() *fakeQP {
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	qp, _ := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq})
	return qp.(*fakeQP)
}
