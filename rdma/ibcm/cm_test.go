package ibcm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// testOpts keep the CM timers short: REQ every ~19 ms, REP every ~17 ms,
// 3 retries, 20 ms TimeWait.
func testOpts() Options {
	return Options{
		Logger:            hclog.New(&hclog.LoggerOptions{Name: "ibcm", Level: hclog.Warn}),
		CMResponseTimeout: 12,
		PacketLifeTime:    8,
		MaxCMRetries:      3,
		MRAServiceTimeout: 14,
		TimeWait:          20 * time.Millisecond,
	}
}

type testPair struct {
	net              *fakeNet
	srvDev, cliDev   *fakeDev
	srv, cli         *Manager
	srvAddr, cliAddr netip.Addr
}

func newPair(t *testing.T, srvOpts, cliOpts Options) *testPair {
	t.Helper()
	n := newFakeNet()
	p := &testPair{net: n, srvDev: n.newDev("192.0.2.1"), cliDev: n.newDev("192.0.2.2")}
	p.srvAddr, p.cliAddr = p.srvDev.addr, p.cliDev.addr
	var err error
	if p.srv, err = New(p.srvDev, srvOpts); err != nil {
		t.Fatal(err)
	}
	if p.cli, err = New(p.cliDev, cliOpts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cli.Destroy()
		p.srv.Destroy()
		p.cliDev.Close()
		p.srvDev.Close()
	})
	return p
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// acceptResult is what the server goroutine of a test saw.
type acceptResult struct {
	req  rdma.ConnRequest
	conn rdma.Conn
	qp   *fakeQP
	err  error
}

// serveOne accepts (or, with reject set, rejects) one request, delay
// after it arrived (a test that delays runs in a synctest bubble, where
// the delay is virtual time).
func (p *testPair) serveOne(t *testing.T, l rdma.Listener, data []byte, param rdma.ConnParam, delay time.Duration, reject bool) <-chan acceptResult {
	ch := make(chan acceptResult, 1)
	go func() {
		var r acceptResult
		r.req, r.err = l.Next(ctxT(t, 5*time.Second))
		if r.err != nil {
			ch <- r
			return
		}
		time.Sleep(delay)
		if reject {
			r.err = r.req.Reject(data)
			ch <- r
			return
		}
		r.qp = p.srvDev.newRCQP()
		r.conn, r.err = r.req.Accept(ctxT(t, 5*time.Second), r.qp, data, param)
		ch <- r
	}()
	return ch
}

func nextEvent(t *testing.T, c rdma.Conn) rdma.ConnEvent {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		if !ok {
			t.Fatal("event channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no connection event")
	}
	return rdma.ConnEvent{}
}

func TestConnectAccept(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	l, err := p.srv.Listen(4420)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.srv.Listen(4420); !errors.Is(err, rdma.ErrBusy) {
		t.Errorf("second Listen on a port: %v, want ErrBusy", err)
	}
	reqData := []byte("hello from the host, 32 bytes..!")
	repData := []byte("welcome")
	srvParam := rdma.ConnParam{ResponderResources: 8, InitiatorDepth: 1, RNRRetryCount: 6, FlowControl: true}
	srvCh := p.serveOne(t, l, repData, srvParam, 0, false)

	cqp := p.cliDev.newRCQP()
	cliParam := rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 2, RetryCount: 5, RNRRetryCount: 7, FlowControl: true}
	conn, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, cqp, reqData, cliParam)
	if err != nil {
		t.Fatal(err)
	}
	sr := <-srvCh
	if sr.err != nil {
		t.Fatal(sr.err)
	}

	// What each side learned of the other.
	if got := sr.req.PrivateData(); len(got) != rdma.MaxConnectPrivateData || !bytes.HasPrefix(got, reqData) {
		t.Errorf("server private data %q", got)
	}
	if got := conn.PrivateData(); len(got) != rdma.MaxAcceptPrivateData || !bytes.HasPrefix(got, repData) {
		t.Errorf("client private data %q", got)
	}
	rp := sr.req.Param()
	if rp.ResponderResources != 4 || rp.InitiatorDepth != 2 || rp.RetryCount != 5 || rp.RNRRetryCount != 7 ||
		!rp.FlowControl || rp.QPN != cqp.QPN() || rp.PathMTU != rdma.MTU1024 || rp.LocalACKTimeout != ACKTimeout(DefaultACKDelay, 8) {
		t.Errorf("request param %+v", rp)
	}
	if got, want := sr.req.LocalAddr(), netip.AddrPortFrom(p.srvAddr, 4420); got != want {
		t.Errorf("request local addr %v, want %v", got, want)
	}
	if got := sr.req.RemoteAddr(); got.Addr() != p.cliAddr || got != conn.LocalAddr() || got.Port() < 32768 {
		t.Errorf("request remote addr %v, client local addr %v", got, conn.LocalAddr())
	}
	cp := conn.Param()
	if cp.ResponderResources != 2 || cp.InitiatorDepth != 1 || cp.RNRRetryCount != 6 || !cp.FlowControl || cp.QPN != sr.qp.QPN() {
		t.Errorf("client's view of the REP %+v", cp)
	}
	for _, c := range []rdma.Conn{conn, sr.conn} {
		if ev := nextEvent(t, c); ev.Type != rdma.EventEstablished {
			t.Errorf("first event %v", ev.Type)
		}
	}

	// QP transitions and the negotiated attributes on both sides.
	for _, side := range []struct {
		name   string
		qp     *fakeQP
		peer   *fakeQP
		rr, id uint8
		retry  uint8
		rnr    uint8
	}{
		{"client", cqp, sr.qp, 1, 2, 5, 6},
		{"server", sr.qp, cqp, 2, 1, 5, 7},
	} {
		calls := side.qp.calls()
		var states []rdma.QPState
		for _, c := range calls {
			states = append(states, c.attr.State)
		}
		if len(states) != 3 || states[0] != rdma.QPSInit || states[1] != rdma.QPSRTR || states[2] != rdma.QPSRTS {
			t.Fatalf("%s: QP states %v", side.name, states)
		}
		ini, rtr, rts := calls[0], calls[1], calls[2]
		if ini.attr.AccessFlags&rdma.AccessRemoteRead == 0 || ini.attr.AccessFlags&rdma.AccessRemoteWrite == 0 || ini.attr.Port != 1 {
			t.Errorf("%s INIT %+v", side.name, ini.attr)
		}
		peerRTS, _ := side.peer.call(rdma.QPSRTS)
		if rtr.attr.DestQPN != side.peer.QPN() || rtr.attr.RQPSN != peerRTS.attr.SQPSN || rtr.attr.PathMTU != rdma.MTU1024 ||
			rtr.attr.MaxDestRdAtomic != side.rr || rtr.attr.AH.DGID.Addr() != side.peer.d.addr {
			t.Errorf("%s RTR %+v (peer QPN %#x, peer SQPSN %#x)", side.name, rtr.attr, side.peer.QPN(), peerRTS.attr.SQPSN)
		}
		if rts.attr.MaxRdAtomic != side.id || rts.attr.RetryCount != side.retry || rts.attr.RNRRetry != side.rnr || rts.attr.Timeout == 0 {
			t.Errorf("%s RTS %+v", side.name, rts.attr)
		}
	}
	// The flow label of the path is rdma_cm's hash of the ports, on both QPs.
	crtr, _ := cqp.call(rdma.QPSRTR)
	srtr, _ := sr.qp.call(rdma.QPSRTR)
	if fl := roceFlowLabel(conn.LocalAddr().Port(), 4420); crtr.attr.AH.FlowLabel != fl || srtr.attr.AH.FlowLabel != fl {
		t.Errorf("flow labels %#x %#x, want %#x", crtr.attr.AH.FlowLabel, srtr.attr.AH.FlowLabel, fl)
	}

	// One REQ, REP and RTU, all with the REQ's TID.
	reqs, reps, rtus := p.net.sent(wire.CMAttrREQ), p.net.sent(wire.CMAttrREP), p.net.sent(wire.CMAttrRTU)
	if len(reqs) != 1 || len(reps) != 1 || len(rtus) != 1 {
		t.Fatalf("%d REQ, %d REP, %d RTU", len(reqs), len(reps), len(rtus))
	}
	tid := reqs[0].mad.TID()
	if reps[0].mad.TID() != tid || rtus[0].mad.TID() != tid || uint32(tid) != wire.REQ(reqs[0].mad.Data()).LocalCommID() {
		t.Errorf("TIDs REQ %#x REP %#x RTU %#x", tid, reps[0].mad.TID(), rtus[0].mad.TID())
	}
	for _, s := range p.net.sent(0) {
		m := s.mad
		if m.BaseVersion() != 1 || m.MgmtClass() != 7 || m.ClassVersion() != 2 || m.Method() != 3 || len(m) != 256 {
			t.Errorf("MAD header %v", m)
		}
	}
}

func TestReject(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	l, _ := p.srv.Listen(4420)
	rejData := []byte{0x00, 0x00, 0x03, 0x00} // NVMe/RDMA: recfmt 0, status 3
	srvCh := p.serveOne(t, l, rejData, rdma.ConnParam{}, 0, true)
	_, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	var rej *rdma.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("Connect: %v, want a RejectError", err)
	}
	if rej.Reason != rdma.RejectConsumer || len(rej.PrivateData) != wire.REJPrivateDataLen || !bytes.HasPrefix(rej.PrivateData, rejData) {
		t.Errorf("reject %v, data %x", rej.Reason, rej.PrivateData)
	}
	if sr := <-srvCh; sr.err != nil {
		t.Fatal(sr.err)
	}
	rejs := p.net.sent(wire.CMAttrREJ)
	if len(rejs) != 1 {
		t.Fatalf("%d REJs", len(rejs))
	}
	r := wire.REJ(rejs[0].mad.Data())
	req := wire.REQ(p.net.sent(wire.CMAttrREQ)[0].mad.Data())
	if r.LocalCommID() != 0 || r.RemoteCommID() != req.LocalCommID() || r.MessageRejected() != wire.CMMessageREQ {
		t.Errorf("REJ local %#x remote %#x message %v", r.LocalCommID(), r.RemoteCommID(), r.MessageRejected())
	}
	if rejs[0].mad.TID() != p.net.sent(wire.CMAttrREQ)[0].mad.TID() {
		t.Error("REJ TID differs from the REQ's")
	}
	if p.cli.byLocalIDLen() != 0 || p.srv.byLocalIDLen() != 0 {
		t.Errorf("connections left: client %d, server %d", p.cli.byLocalIDLen(), p.srv.byLocalIDLen())
	}
}

func (m *Manager) byLocalIDLen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byLocalID)
}

func TestNoListener(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	_, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4421, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
	var rej *rdma.RejectError
	if !errors.As(err, &rej) || rej.Reason != rdma.RejectInvalidServiceID {
		t.Fatalf("Connect: %v, want REJ invalid service ID", err)
	}
	if n := p.net.count(wire.CMAttrREQ); n != 1 {
		t.Errorf("%d REQs sent", n)
	}
}

func TestLostMessagesRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attr  wire.CMAttr
		drops int
		want  map[wire.CMAttr]int
	}{
		{"REQ", wire.CMAttrREQ, 1, map[wire.CMAttr]int{wire.CMAttrREQ: 2, wire.CMAttrREP: 1, wire.CMAttrRTU: 1}},
		{"two REQs", wire.CMAttrREQ, 2, map[wire.CMAttr]int{wire.CMAttrREQ: 3, wire.CMAttrREP: 1, wire.CMAttrRTU: 1}},
		{"REP", wire.CMAttrREP, 1, map[wire.CMAttr]int{wire.CMAttrREQ: 1, wire.CMAttrREP: 2, wire.CMAttrRTU: 1}},
		// A lost RTU: the REP is resent, the client answers the
		// duplicate REP with the RTU again.
		{"RTU", wire.CMAttrRTU, 1, map[wire.CMAttr]int{wire.CMAttrREQ: 1, wire.CMAttrREP: 2, wire.CMAttrRTU: 2}},
	} {
		// In a synctest bubble the timers fire only once everything
		// else has settled: which side retransmits first (the REQ after
		// its timeout against the REP after the server's, which starts
		// a little later) does not depend on the machine's load.
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t, testOpts(), testOpts())
				var mu sync.Mutex
				left := tc.drops
				p.net.setFilter(func(s sentMAD) int {
					mu.Lock()
					defer mu.Unlock()
					if s.attr() == tc.attr && left > 0 {
						left--
						return 0
					}
					return 1
				})
				l, _ := p.srv.Listen(4420)
				srvCh := p.serveOne(t, l, nil, rdma.ConnParam{}, 0, false)
				conn, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
				if err != nil {
					t.Fatal(err)
				}
				sr := <-srvCh
				if sr.err != nil {
					t.Fatal(sr.err)
				}
				if sr.qp.State() != rdma.QPSRTS || conn.QP().State() != rdma.QPSRTS {
					t.Errorf("QP states %v %v", sr.qp.State(), conn.QP().State())
				}
				for attr, n := range tc.want {
					if got := p.net.count(attr); got != n {
						t.Errorf("%d %v sent, want %d", got, attr, n)
					}
				}
			})
		})
	}
}

func TestDuplicateREQAnsweredOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Slow timers: no retransmission may blur the count.
		o := testOpts()
		o.CMResponseTimeout = 17
		p := newPair(t, o, o)
		p.net.setFilter(func(s sentMAD) int {
			if s.attr() == wire.CMAttrREQ {
				return 2
			}
			return 1
		})
		l, _ := p.srv.Listen(4420)
		srvCh := p.serveOne(t, l, nil, rdma.ConnParam{}, 0, false)
		if _, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{}); err != nil {
			t.Fatal(err)
		}
		if sr := <-srvCh; sr.err != nil {
			t.Fatal(sr.err)
		}
		if req, err := l.Next(ctxT(t, 100*time.Millisecond)); err == nil {
			t.Errorf("a second request from one REQ: %v", req.RemoteAddr())
		}
		if n := p.net.count(wire.CMAttrREP); n != 1 {
			t.Errorf("%d REPs for a duplicated REQ", n)
		}
		if n := p.srv.byLocalIDLen(); n != 1 {
			t.Errorf("server has %d connections", n)
		}
	})
}

func TestDuplicateREQAfterAcceptResendsREP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The client's REQ asks for REP retries every 268 ms, once.
		co := testOpts()
		co.CMResponseTimeout = 16
		co.MaxCMRetries = 1
		p := newPair(t, testOpts(), co)
		// Drop every RTU: the server stays in REP_SENT, so a retransmitted
		// REQ (replayed here) is answered with the REP again.
		p.net.setFilter(func(s sentMAD) int {
			if s.attr() == wire.CMAttrRTU {
				return 0
			}
			return 1
		})
		l, _ := p.srv.Listen(4420)
		srvCh := p.serveOne(t, l, nil, rdma.ConnParam{}, 0, false)
		if _, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{}); err != nil {
			t.Fatal(err)
		}
		req := p.net.sent(wire.CMAttrREQ)[0]
		time.Sleep(cmTimeout(co.CMResponseTimeout)/2 + 10*time.Millisecond)
		before := p.net.count(wire.CMAttrREP)
		p.net.transmit(req.src, req.dst, req.mad)
		synctest.Wait() // the REQ is handled, well before the REP timer
		if p.net.count(wire.CMAttrREP) == before {
			t.Error("no REP for the duplicate REQ")
		}
		// Without RTUs, Accept ends unreachable after the REP retries.
		if sr := <-srvCh; !errors.Is(sr.err, rdma.ErrUnreachable) {
			t.Errorf("Accept without RTU: %v", sr.err)
		}
	})
}

func TestUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, testOpts(), testOpts())
		start := time.Now()
		_, err := p.cli.Connect(ctxT(t, 5*time.Second), netip.MustParseAddr("192.0.2.99"), 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
		if !errors.Is(err, rdma.ErrUnreachable) {
			t.Fatalf("Connect: %v, want ErrUnreachable", err)
		}
		budget := time.Duration(testOpts().MaxCMRetries+1) * p.cli.reqTimeout()
		if el := time.Since(start); el < budget || el > budget+time.Second {
			t.Errorf("gave up after %v, budget %v", el, budget)
		}
		if n := p.net.count(wire.CMAttrREQ); n != int(testOpts().MaxCMRetries)+1 {
			t.Errorf("%d REQs sent", n)
		}
		if p.cli.byLocalIDLen() != 0 {
			t.Error("connection left behind")
		}
	})
}

// connected returns an established pair of connections.
func connected(t *testing.T, p *testPair) (cli, srv rdma.Conn, cqp, sqp *fakeQP) {
	t.Helper()
	l, _ := p.srv.Listen(4420)
	t.Cleanup(func() { l.Close() })
	srvCh := p.serveOne(t, l, nil, rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1}, 0, false)
	cqp = p.cliDev.newRCQP()
	conn, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, cqp, nil, rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	sr := <-srvCh
	if sr.err != nil {
		t.Fatal(sr.err)
	}
	for _, c := range []rdma.Conn{conn, sr.conn} {
		if ev := nextEvent(t, c); ev.Type != rdma.EventEstablished {
			t.Fatalf("first event %v", ev.Type)
		}
	}
	return conn, sr.conn, cqp, sr.qp
}

func TestDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fromSrv   bool
		dropDREQs int
	}{
		{"client", false, 0},
		{"server", true, 0},
		{"client, DREQ lost", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, testOpts(), testOpts())
			cli, srv, cqp, sqp := connected(t, p)
			var mu sync.Mutex
			left := tc.dropDREQs
			p.net.setFilter(func(s sentMAD) int {
				mu.Lock()
				defer mu.Unlock()
				if s.attr() == wire.CMAttrDREQ && left > 0 {
					left--
					return 0
				}
				return 1
			})
			a, b := cli, srv
			if tc.fromSrv {
				a, b = srv, cli
			}
			if err := a.Disconnect(ctxT(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			for _, c := range []rdma.Conn{a, b} {
				if ev := nextEvent(t, c); ev.Type != rdma.EventDisconnected {
					t.Errorf("event %v, want DISCONNECTED", ev.Type)
				}
				select {
				case <-c.Done():
				case <-time.After(time.Second):
					t.Error("Done not closed")
				}
			}
			if cqp.State() != rdma.QPSErr || sqp.State() != rdma.QPSErr {
				t.Errorf("QP states %v %v, want ERR", cqp.State(), sqp.State())
			}
			for _, c := range []rdma.Conn{a, b} {
				if ev := nextEvent(t, c); ev.Type != rdma.EventTimeWaitExit {
					t.Errorf("event %v, want TIMEWAIT_EXIT", ev.Type)
				}
				if _, ok := <-c.Events(); ok {
					t.Error("event channel not closed after TIMEWAIT_EXIT")
				}
			}
			if err := b.Disconnect(ctxT(t, time.Second)); err != nil {
				t.Errorf("Disconnect after the peer's: %v", err)
			}
			if n := p.net.count(wire.CMAttrDREQ); n != 1+tc.dropDREQs {
				t.Errorf("%d DREQs", n)
			}
			dreq := p.net.sent(wire.CMAttrDREQ)[0]
			dreps := p.net.sent(wire.CMAttrDREP)
			if len(dreps) != 1 || dreps[0].mad.TID() != dreq.mad.TID() {
				t.Errorf("%d DREPs, TID match %v", len(dreps), len(dreps) > 0 && dreps[0].mad.TID() == dreq.mad.TID())
			}
			if p.cli.byLocalIDLen() != 0 || p.srv.byLocalIDLen() != 0 {
				t.Error("connections left after TimeWait")
			}
		})
	}
}

func TestDisconnectPeerGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, testOpts(), testOpts())
		cli, _, cqp, _ := connected(t, p)
		p.net.setFilter(func(s sentMAD) int { return 0 })
		start := time.Now()
		if err := cli.Disconnect(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < time.Duration(testOpts().MaxCMRetries+1)*p.cli.reqTimeout() {
			t.Errorf("Disconnect returned after %v, before the DREQ retries", el)
		}
		if ev := nextEvent(t, cli); ev.Type != rdma.EventDisconnected || cqp.State() != rdma.QPSErr {
			t.Errorf("event %v, QP %v", ev.Type, cqp.State())
		}
	})
}

func TestTimeWaitAnswersStaleMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := testOpts()
		o.TimeWait = 10 * time.Second
		p := newPair(t, o, testOpts())
		cli, _, _, _ := connected(t, p)
		if err := cli.Disconnect(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The old REQ again: the server is in TimeWait and calls it stale.
		req := p.net.sent(wire.CMAttrREQ)[0]
		p.net.transmit(req.src, req.dst, req.mad)
		// The old DREQ again: answered with a DREP.
		dreq := p.net.sent(wire.CMAttrDREQ)[0]
		p.net.transmit(dreq.src, dreq.dst, dreq.mad)
		synctest.Wait()
		rejs := p.net.sent(wire.CMAttrREJ)
		if len(rejs) != 1 || wire.REJ(rejs[0].mad.Data()).Reason() != wire.REJStaleConn {
			t.Errorf("REJs %v, want one with reason stale connection", rejs)
		}
		if n := p.net.count(wire.CMAttrDREP); n != 2 {
			t.Errorf("%d DREPs, want 2", n)
		}
	})
}

func TestStaleQP(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	_, srv, _, sqp := connected(t, p)
	// A new REQ (new communication ID) from the client's connected QP.
	old := p.net.sent(wire.CMAttrREQ)[0]
	mad := wire.MAD(append([]byte(nil), old.mad...))
	wire.REQ(mad.Data()).SetLocalCommID(wire.REQ(mad.Data()).LocalCommID() + 1)
	p.net.transmit(old.src, old.dst, mad)
	if ev := nextEvent(t, srv); ev.Type != rdma.EventDisconnected || sqp.State() != rdma.QPSErr {
		t.Errorf("old connection: event %v, QP %v", ev.Type, sqp.State())
	}
	var stale bool
	for _, s := range p.net.sent(wire.CMAttrREJ) {
		stale = stale || wire.REJ(s.mad.Data()).Reason() == wire.REJStaleConn
	}
	if !stale {
		t.Error("no REJ stale connection")
	}
}

func TestMRAForSlowAccept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, testOpts(), testOpts())
		l, _ := p.srv.Listen(4420)
		// Without the MRA the client gives up after 4 × 19 ms.
		srvCh := p.serveOne(t, l, nil, rdma.ConnParam{}, 150*time.Millisecond, false)
		conn, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
		if err != nil {
			t.Fatal(err)
		}
		if sr := <-srvCh; sr.err != nil {
			t.Fatal(sr.err)
		}
		mras := p.net.sent(wire.CMAttrMRA)
		if len(mras) == 0 {
			t.Fatal("no MRA")
		}
		m := wire.MRA(mras[0].mad.Data())
		if m.MessageMRAed() != wire.CMMessageREQ || m.ServiceTimeout() != 14 || mras[0].mad.TID() != p.net.sent(wire.CMAttrREQ)[0].mad.TID() {
			t.Errorf("MRA %v service timeout %d", m.MessageMRAed(), m.ServiceTimeout())
		}
		if conn.QP().State() != rdma.QPSRTS {
			t.Error("client QP not in RTS")
		}
	})
}

func TestConnectCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, testOpts(), testOpts())
		l, _ := p.srv.Listen(4420)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := p.cli.Connect(ctx, p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
			errc <- err
		}()
		synctest.Wait() // the REQ is queued at the listener; Connect waits for the REP
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Connect: %v", err)
		}
		req, err := l.Next(ctxT(t, time.Second))
		if err != nil {
			// The REJ may have removed the request before Next saw it.
			return
		}
		synctest.Wait() // the REJ is handled
		if n := p.srv.byLocalIDLen(); n != 0 {
			t.Errorf("%d connections after the REJ", n)
		}
		_, err = req.Accept(ctxT(t, time.Second), p.srvDev.newRCQP(), nil, rdma.ConnParam{})
		var rej *rdma.RejectError
		if !errors.As(err, &rej) || rej.Reason != rdma.RejectTimeout {
			t.Errorf("Accept of an abandoned request: %v", err)
		}
		rejs := p.net.sent(wire.CMAttrREJ)
		if len(rejs) != 1 || binaryARI(rejs[0]) != p.cli.CAGUID() {
			t.Errorf("REJ timeout with our CA GUID expected: %v", rejs)
		}
	})
}

func binaryARI(s sentMAD) uint64 {
	ari := wire.REJ(s.mad.Data()).ARI()
	var v uint64
	for _, b := range ari[:8] {
		v = v<<8 | uint64(b)
	}
	return v
}

func TestListenerClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t, testOpts(), testOpts())
		l, _ := p.srv.Listen(4420)
		errCh := make(chan error, 1)
		go func() {
			_, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
			errCh <- err
		}()
		// Wait until the REQ is queued, then close without taking it.
		synctest.Wait()
		if p.srv.byLocalIDLen() == 0 {
			t.Fatal("no request pending")
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		var rej *rdma.RejectError
		if err := <-errCh; !errors.As(err, &rej) || rej.Reason != rdma.RejectConsumer {
			t.Errorf("pending request: %v, want REJ consumer defined", err)
		}
		if _, err := l.Next(ctxT(t, time.Second)); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("Next after Close: %v", err)
		}
		_, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
		if !errors.As(err, &rej) || rej.Reason != rdma.RejectInvalidServiceID {
			t.Errorf("Connect after Close: %v, want REJ invalid service ID", err)
		}
		// The port is free again.
		l2, err := p.srv.Listen(4420)
		if err != nil {
			t.Fatal(err)
		}
		l2.Close()
		// Manager.Close: no more listeners.
		p.srv.Close()
		if _, err := p.srv.Listen(4420); !errors.Is(err, rdma.ErrClosed) {
			t.Errorf("Listen after Close: %v", err)
		}
	})
}

func TestCommEstablished(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	p.net.setFilter(func(s sentMAD) int {
		if s.attr() == wire.CMAttrRTU {
			return 0
		}
		return 1
	})
	l, _ := p.srv.Listen(4420)
	type res struct {
		conn rdma.Conn
		err  error
	}
	ch := make(chan res, 1)
	qpCh := make(chan *fakeQP, 1)
	go func() {
		req, err := l.Next(ctxT(t, 5*time.Second))
		if err != nil {
			ch <- res{nil, err}
			return
		}
		qp := p.srvDev.newRCQP()
		qpCh <- qp
		c, err := req.Accept(ctxT(t, 5*time.Second), qp, nil, rdma.ConnParam{})
		ch <- res{c, err}
	}()
	if _, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	qp := <-qpCh
	p.srv.CommEstablished(qp.QPN()) // the first packet on the server's QP
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if qp.State() != rdma.QPSRTS {
		t.Errorf("server QP %v", qp.State())
	}
}

func TestAcceptQPFailure(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	l, _ := p.srv.Listen(4420)
	go func() {
		req, err := l.Next(ctxT(t, 5*time.Second))
		if err != nil {
			return
		}
		qp := p.srvDev.newRCQP()
		qp.failRTR = true
		req.Accept(ctxT(t, 5*time.Second), qp, nil, rdma.ConnParam{})
	}()
	_, err := p.cli.Connect(ctxT(t, 5*time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{})
	var rej *rdma.RejectError
	if !errors.As(err, &rej) || rej.Reason != rdma.RejectConsumer {
		t.Errorf("Connect to a failing Accept: %v", err)
	}
}

func TestArgumentChecks(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	ctx := ctxT(t, time.Second)
	if _, err := p.cli.Connect(ctx, p.srvAddr, 1, p.cliDev.newRCQP(), make([]byte, 57), rdma.ConnParam{}); !errors.Is(err, rdma.ErrInvalidArgument) {
		t.Errorf("57 bytes of private data: %v", err)
	}
	qp := p.cliDev.newRCQP()
	qp.Modify(&rdma.QPAttr{State: rdma.QPSInit}, rdma.QPAttrState)
	qp.Modify(&rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState)
	if _, err := p.cli.Connect(ctx, p.srvAddr, 1, qp, nil, rdma.ConnParam{}); !errors.Is(err, rdma.ErrInvalidState) {
		t.Errorf("QP in RTR: %v", err)
	}
	if _, err := p.cli.Connect(ctx, netip.MustParseAddr("2001:db8::1"), 1, p.cliDev.newRCQP(), nil, rdma.ConnParam{}); !errors.Is(err, rdma.ErrInvalidArgument) {
		t.Errorf("IPv6 peer of an IPv4 device: %v", err)
	}
}

func TestLoopbackOnOneDevice(t *testing.T) {
	n := newFakeNet()
	d := n.newDev("192.0.2.7")
	m, err := New(d, testOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Destroy()
	l, _ := m.Listen(7174)
	p := &testPair{net: n, srvDev: d}
	srvCh := p.serveOne(t, l, []byte("pong"), rdma.ConnParam{}, 0, false)
	c, err := m.Connect(ctxT(t, 5*time.Second), d.addr, 7174, d.newRCQP(), []byte("ping"), rdma.ConnParam{})
	if err != nil {
		t.Fatal(err)
	}
	sr := <-srvCh
	if sr.err != nil {
		t.Fatal(sr.err)
	}
	if !bytes.HasPrefix(c.PrivateData(), []byte("pong")) || !bytes.HasPrefix(sr.conn.PrivateData(), []byte("ping")) {
		t.Error("private data")
	}
	if err := c.Disconnect(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestDestroy(t *testing.T) {
	p := newPair(t, testOpts(), testOpts())
	cli, _, cqp, _ := connected(t, p)
	if err := p.cli.Destroy(); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, cli); ev.Type != rdma.EventDisconnected || cqp.State() != rdma.QPSErr {
		t.Errorf("after Destroy: event %v, QP %v", ev.Type, cqp.State())
	}
	if _, err := p.cli.Connect(ctxT(t, time.Second), p.srvAddr, 4420, p.cliDev.newRCQP(), nil, rdma.ConnParam{}); !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("Connect after Destroy: %v", err)
	}
}

func TestACKTimeout(t *testing.T) {
	for _, tc := range []struct{ delay, life, want uint8 }{
		{15, 18, 19}, // Linux 6.1 over rxe: the REQ of the capture
		{15, 16, 17},
		{15, 14, 16}, // within 50 %: rounded up
		{15, 10, 15},
		{0, 0, 2},
		{31, 31, 31},
	} {
		if got := ACKTimeout(tc.delay, tc.life); got != tc.want {
			t.Errorf("ACKTimeout(%d, %d) = %d, want %d", tc.delay, tc.life, got, tc.want)
		}
	}
}
