package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Tests of the connection manager.

// cms returns the devices' connection managers, skipping the test when
// the provider has none.
func (e *env) cms(t *testing.T) (a, b rdma.ConnManager) {
	t.Helper()
	a, err := e.a.ConnManager()
	unsupported(t, "a connection manager", err)
	b, err = e.b.ConnManager()
	unsupported(t, "a connection manager", err)
	return a, b
}

// listen listens on a fresh port of device b.
func (e *env) listen(t *testing.T, cm rdma.ConnManager) (rdma.Listener, uint16) {
	t.Helper()
	port := e.nextPort()
	l, err := cm.Listen(port)
	if err != nil {
		t.Fatalf("Listen(%d) on %s: %v", port, e.b.Name(), err)
	}
	t.Cleanup(func() { l.Close() })
	if want := netip.AddrPortFrom(e.b.Addr(), port); l.Addr() != want {
		t.Errorf("listener address %v, want %v", l.Addr(), want)
	}
	return l, port
}

// checkPrivateData checks that got carries want: the provider may pad
// the message's private data with zeros up to max bytes.
func checkPrivateData(t testing.TB, what string, got, want []byte, max int) {
	t.Helper()
	if len(got) < len(want) || len(got) > max || !bytes.Equal(got[:len(want)], want) || !allZero(got[len(want):]) {
		t.Errorf("%s: %d bytes %x, want the %d bytes %x (zero padding up to %d bytes allowed)", what, len(got), got, len(want), want, max)
	}
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// connParam is what both sides ask for.
func (e *env) connParam() rdma.ConnParam {
	return rdma.ConnParam{ResponderResources: e.rdAtomic, InitiatorDepth: e.rdAtomic, RetryCount: 7, RNRRetryCount: 7}
}

// accepted is what the passive side's goroutine hands back.
type accepted struct {
	req  rdma.ConnRequest
	conn rdma.Conn
	err  error
}

// serveOne answers the next request on l with answer, in a goroutine.
func (e *env) serveOne(t *testing.T, l rdma.Listener, answer func(ctx context.Context, req rdma.ConnRequest) (rdma.Conn, error)) <-chan accepted {
	ch := make(chan accepted, 1)
	ctx := e.ctx(t)
	go func() {
		req, err := l.Next(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		c, err := answer(ctx, req)
		ch <- accepted{req: req, conn: c, err: err}
	}()
	return ch
}

// cmConn is one connection set up by the connection manager.
type cmConn struct {
	a, b   *end      // active and passive ends
	ca, cb rdma.Conn // active and passive connections
	req    rdma.ConnRequest
	port   uint16
}

// cmConnect connects an end of device a to an end of device b through
// the connection managers, with the given private data, and checks that
// the first event on both sides is EventEstablished. The passive QP is
// moved to INIT before it accepts, and early (if not nil) runs then, to
// post receives.
func (e *env) cmConnect(t *testing.T, reqData, accData []byte, early func(b *end)) *cmConn {
	t.Helper()
	cmA, cmB := e.cms(t)
	l, port := e.listen(t, cmB)
	c := &cmConn{a: newEnd(t, e.a, qpConfig{}), b: newEnd(t, e.b, qpConfig{}), port: port}
	initA, initM := e.initAttr()
	modify(t, c.b.qp, initA, initM)
	if early != nil {
		early(c.b)
	}
	ch := e.serveOne(t, l, func(ctx context.Context, req rdma.ConnRequest) (rdma.Conn, error) {
		return req.Accept(ctx, c.b.qp, accData, e.connParam())
	})
	ca, err := cmA.Connect(e.ctx(t), e.b.Addr(), port, c.a.qp, reqData, e.connParam())
	if err != nil {
		t.Fatalf("Connect to %v:%d: %v", e.b.Addr(), port, err)
	}
	c.ca = ca
	r := <-ch
	if r.err != nil {
		t.Fatalf("passive side: %v", r.err)
	}
	c.cb, c.req = r.conn, r.req
	// Release in order: disconnect (if the test did not), then the QPs.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
		defer cancel()
		c.ca.Disconnect(ctx)
		c.cb.Disconnect(ctx)
		for _, x := range []rdma.Conn{c.ca, c.cb} {
			select {
			case <-x.Done():
			case <-ctx.Done():
			}
		}
	})
	for _, x := range []struct {
		name string
		c    rdma.Conn
	}{{"active", c.ca}, {"passive", c.cb}} {
		if ev := e.nextEvent(t, x.c); ev.Type != rdma.EventEstablished {
			t.Errorf("%s side: first event %v, want %v", x.name, ev.Type, rdma.EventEstablished)
		}
	}
	return c
}

// nextEvent waits for the connection's next event.
func (e *env) nextEvent(t *testing.T, c rdma.Conn) rdma.ConnEvent {
	t.Helper()
	select {
	case ev, ok := <-c.Events():
		if !ok {
			t.Fatalf("events channel closed, want another event")
		}
		return ev
	case <-time.After(e.o.Timeout):
		t.Fatalf("no connection event within %v", e.o.Timeout)
	}
	return rdma.ConnEvent{}
}

// disconnected checks what follows a disconnect on one side: the events
// Disconnected and TimeWaitExit and the channel closed, Done closed, the
// QP in ERR with its posted receive wrid flushed.
func (e *env) disconnected(t *testing.T, name string, c rdma.Conn, x *end, wrid uint64) {
	t.Helper()
	for _, want := range []rdma.ConnEventType{rdma.EventDisconnected, rdma.EventTimeWaitExit} {
		if ev := e.nextEvent(t, c); ev.Type != want {
			t.Errorf("%s side: event %v, want %v", name, ev.Type, want)
		}
	}
	select {
	case ev, ok := <-c.Events():
		if ok {
			t.Errorf("%s side: event %v after TimeWaitExit, want the channel closed", name, ev.Type)
		}
	case <-time.After(e.o.Timeout):
		t.Errorf("%s side: events channel not closed within %v of TimeWaitExit", name, e.o.Timeout)
	}
	select {
	case <-c.Done():
	case <-time.After(e.o.Timeout):
		t.Errorf("%s side: Done not closed", name)
	}
	if s := x.qp.State(); s != rdma.QPSErr {
		t.Errorf("%s side: QP in %s after the disconnect, want ERR", name, s)
	}
	checkWC(t, e.waitWC(t, x.rcq, 1, name+" side's posted receive")[0], wrid, rdma.WRFlushError, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	if err := c.Disconnect(ctx); err != nil {
		t.Errorf("%s side: Disconnect after the disconnect: %v", name, err)
	}
}

// testCMConnectAccept: a connection with private data both ways (the
// largest each message takes), the request's and the connections'
// addresses and parameters, data both ways over it, then a disconnect
// from the active side and the events on both.
func testCMConnectAccept(t *testing.T, e *env) {
	reqData, accData := pattern(rdma.MaxConnectPrivateData, 90), pattern(rdma.MaxAcceptPrivateData, 91)
	// Receives posted in INIT, before the passive side accepts.
	var early rdma.MR
	c := e.cmConnect(t, reqData, accData, func(b *end) {
		early = b.reg(8192, rdma.AccessLocalWrite, 92)
		postRecv(t, b.qp, 1, sge(early, 0, 4096))
		postRecv(t, b.qp, 2, sge(early, 4096, 4096))
	})
	port := c.port
	// The request.
	checkPrivateData(t, "request private data", c.req.PrivateData(), reqData, rdma.MaxConnectPrivateData)
	if want := netip.AddrPortFrom(e.b.Addr(), port); c.req.LocalAddr() != want {
		t.Errorf("request LocalAddr %v, want %v", c.req.LocalAddr(), want)
	}
	if c.req.RemoteAddr().Addr() != e.a.Addr() {
		t.Errorf("request RemoteAddr %v, want address %v", c.req.RemoteAddr(), e.a.Addr())
	}
	if p := c.req.Param(); p.QPN != c.a.qp.QPN() {
		t.Errorf("request parameters %+v: QPN, want %#x", p, c.a.qp.QPN())
	}
	// The connections.
	checkPrivateData(t, "active side's PrivateData (the accept's)", c.ca.PrivateData(), accData, rdma.MaxAcceptPrivateData)
	checkPrivateData(t, "passive side's PrivateData (the request's)", c.cb.PrivateData(), reqData, rdma.MaxConnectPrivateData)
	if c.ca.QP() != c.a.qp || c.cb.QP() != c.b.qp {
		t.Error("Conn.QP is not the QP connected")
	}
	if want := netip.AddrPortFrom(e.b.Addr(), port); c.ca.RemoteAddr() != want || c.cb.LocalAddr() != want {
		t.Errorf("active RemoteAddr %v, passive LocalAddr %v, want %v", c.ca.RemoteAddr(), c.cb.LocalAddr(), want)
	}
	if c.ca.LocalAddr().Addr() != e.a.Addr() || c.cb.RemoteAddr().Addr() != e.a.Addr() || c.ca.LocalAddr() != c.cb.RemoteAddr() {
		t.Errorf("active LocalAddr %v, passive RemoteAddr %v, want the same address %v", c.ca.LocalAddr(), c.cb.RemoteAddr(), e.a.Addr())
	}
	if p := c.ca.Param(); p.QPN != c.b.qp.QPN() || !p.PathMTU.Valid() {
		t.Errorf("active side's Param %+v: want QPN %#x and a valid path MTU", p, c.b.qp.QPN())
	}
	if p := c.cb.Param(); p.QPN != c.a.qp.QPN() || !p.PathMTU.Valid() {
		t.Errorf("passive side's Param %+v: want QPN %#x and a valid path MTU", p, c.a.qp.QPN())
	}
	for _, x := range []*end{c.a, c.b} {
		if s := x.qp.State(); s != rdma.QPSRTS {
			t.Errorf("connected QP %#x in %s, want RTS", x.qp.QPN(), s)
		}
	}
	// Data both ways: the active side SENDs into the early receives at
	// once; the passive side WRITEs and READs the active side's memory.
	a, b := c.a, c.b
	n := 3000
	src := a.reg(2*n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead, 93)
	wr2 := rdma.SendWR{WRID: 2, Opcode: rdma.WRSendWithImm, Imm: 0x5a5a, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, n, n)}}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, n)}, Next: &wr2})
	sc := e.waitWC(t, a.scq, 2, "SENDs over the connection")
	checkWC(t, sc[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, sc[1], 2, rdma.Success, rdma.WCSend, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 2, "receives over the connection")
	checkRecv(t, rc[0], 1, rdma.WCRecv, b.qp.QPN(), n)
	if checkWC(t, rc[1], 2, rdma.Success, rdma.WCRecv, b.qp.QPN()) && (rc[1].Imm != 0x5a5a || rc[1].ByteLen != uint32(n)) {
		t.Errorf("SEND with immediate over the connection: %s", wcString(rc[1]))
	}
	checkBytes(t, "first message", early.Bytes()[:n], src.Bytes()[:n])
	checkBytes(t, "second message", early.Bytes()[4096:4096+n], src.Bytes()[n:])
	bsrc := b.reg(n, 0, 94)
	back := b.reg(2*n, rdma.AccessLocalWrite, 95)
	rd := rdma.SendWR{WRID: 4, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(back, 0, 2*n)}, RemoteAddr: src.Addr(), RKey: src.RKey()}
	postSend(t, b.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(bsrc, 0, n)},
		RemoteAddr: src.Addr() + uint64(n), RKey: src.RKey(), Next: &rd})
	sc = e.waitWC(t, b.scq, 2, "the passive side's WRITE and READ")
	checkWC(t, sc[0], 3, rdma.Success, rdma.WCRDMAWrite, b.qp.QPN())
	checkWC(t, sc[1], 4, rdma.Success, rdma.WCRDMARead, b.qp.QPN())
	checkBytes(t, "written by the passive side", src.Bytes()[n:], bsrc.Bytes())
	checkPattern(t, "read by the passive side", back.Bytes()[:n], 93, 0)
	checkBytes(t, "read back what the passive side wrote", back.Bytes()[n:], bsrc.Bytes())
	e.disconnectFrom(t, c, false, 96, 50)
}

// disconnectFrom posts a receive on each side (WRIDs wrid and wrid+1, so
// that the flush shows), disconnects from the passive or the active side
// and checks that both see the disconnect.
func (e *env) disconnectFrom(t *testing.T, c *cmConn, passive bool, seed, wrid uint64) {
	t.Helper()
	abuf := c.a.reg(64, rdma.AccessLocalWrite, seed)
	bbuf := c.b.reg(64, rdma.AccessLocalWrite, seed+1)
	postRecv(t, c.a.qp, wrid, sge(abuf, 0, 64))
	postRecv(t, c.b.qp, wrid+1, sge(bbuf, 0, 64))
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	from, name := c.ca, "active"
	if passive {
		from, name = c.cb, "passive"
	}
	if err := from.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect from the %s side: %v", name, err)
	}
	if passive {
		e.disconnected(t, "passive", c.cb, c.b, wrid+1)
		e.disconnected(t, "active", c.ca, c.a, wrid)
		return
	}
	e.disconnected(t, "active", c.ca, c.a, wrid)
	e.disconnected(t, "passive", c.cb, c.b, wrid+1)
}

// testCMDisconnectPassive: the passive side disconnects; both sides see
// Disconnected and TimeWaitExit, their QPs go to ERR.
func testCMDisconnectPassive(t *testing.T, e *env) {
	c := e.cmConnect(t, []byte("request"), []byte("accept"), nil)
	e.disconnectFrom(t, c, true, 98, 60)
}

// testCMReject: a rejected Connect returns a *RejectError with reason
// RejectConsumer and the reject's private data; the listener then
// accepts the next request.
func testCMReject(t *testing.T, e *env) {
	cmA, cmB := e.cms(t)
	l, port := e.listen(t, cmB)
	rejData := pattern(rdma.MaxRejectPrivateData, 100)
	ch := e.serveOne(t, l, func(ctx context.Context, req rdma.ConnRequest) (rdma.Conn, error) {
		return nil, req.Reject(rejData)
	})
	a := newEnd(t, e.a, qpConfig{})
	_, err := cmA.Connect(e.ctx(t), e.b.Addr(), port, a.qp, []byte("please"), e.connParam())
	var rej *rdma.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("Connect to a listener that rejects: %v, want a *rdma.RejectError", err)
	}
	if rej.Reason != rdma.RejectConsumer {
		t.Errorf("reject reason %v (%d), want %v", rej.Reason, uint16(rej.Reason), rdma.RejectConsumer)
	}
	checkPrivateData(t, "reject private data", rej.PrivateData, rejData, rdma.MaxRejectPrivateData)
	if r := <-ch; r.err != nil {
		t.Errorf("Reject: %v", r.err)
	}
	// The listener goes on.
	b := newEnd(t, e.b, qpConfig{})
	ch = e.serveOne(t, l, func(ctx context.Context, req rdma.ConnRequest) (rdma.Conn, error) {
		return req.Accept(ctx, b.qp, nil, e.connParam())
	})
	a2 := newEnd(t, e.a, qpConfig{})
	ca, err := cmA.Connect(e.ctx(t), e.b.Addr(), port, a2.qp, nil, e.connParam())
	if err != nil {
		t.Fatalf("Connect after a reject: %v", err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatalf("Accept after a reject: %v", r.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	if err := ca.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect: %v", err)
	}
	for _, c := range []rdma.Conn{ca, r.conn} {
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("Done not closed after Disconnect")
		}
	}
}

// testCMNoListener: connecting to a port nobody listens on fails within
// the timeout, with a reject or as unreachable.
func testCMNoListener(t *testing.T, e *env) {
	cmA, _ := e.cms(t)
	port := e.nextPort()
	a := newEnd(t, e.a, qpConfig{})
	start := time.Now()
	_, err := cmA.Connect(e.ctx(t), e.b.Addr(), port, a.qp, nil, e.connParam())
	var rej *rdma.RejectError
	switch {
	case errors.As(err, &rej):
		t.Logf("rejected after %v: %v", time.Since(start), err)
	case errors.Is(err, rdma.ErrUnreachable):
		t.Logf("unreachable after %v: %v", time.Since(start), err)
	case err == nil:
		t.Fatalf("Connect to %v:%d, where nobody listens, succeeded", e.b.Addr(), port)
	default:
		t.Fatalf("Connect to %v:%d, where nobody listens: %v after %v; want a *rdma.RejectError or ErrUnreachable within %v", e.b.Addr(), port, err, time.Since(start), e.o.Timeout)
	}
}

// testCMListen: a second listener on a port fails; Next waits for its
// context; a closed listener's Next fails at once and its port can be
// listened on again.
func testCMListen(t *testing.T, e *env) {
	_, cmB := e.cms(t)
	l, port := e.listen(t, cmB)
	if l2, err := cmB.Listen(port); err == nil {
		l2.Close()
		t.Errorf("a second Listen(%d) succeeded", port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := l.Next(ctx)
	cancel()
	wantErr(t, "Next without requests", err, context.DeadlineExceeded)
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	if _, err := l.Next(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Next on a closed listener: %v, want an error at once", err)
	}
	l3, err := cmB.Listen(port)
	if err != nil {
		t.Fatalf("Listen(%d) after the listener closed: %v", port, err)
	}
	if err := l3.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// testCMPrivateDataLimits: private data beyond what each message takes
// is refused by Connect, Accept and Reject; a Reject within the limit
// still answers the request.
func testCMPrivateDataLimits(t *testing.T, e *env) {
	cmA, cmB := e.cms(t)
	l, port := e.listen(t, cmB)
	a := newEnd(t, e.a, qpConfig{})
	// To a port nobody listens on, in case the request goes out anyway.
	if _, err := cmA.Connect(e.ctx(t), e.b.Addr(), e.nextPort(), a.qp, make([]byte, rdma.MaxConnectPrivateData+1), e.connParam()); err == nil {
		t.Fatalf("Connect with %d bytes of private data succeeded", rdma.MaxConnectPrivateData+1)
	} else if errors.As(err, new(*rdma.RejectError)) {
		t.Errorf("Connect with %d bytes of private data: %v, want it refused before sending", rdma.MaxConnectPrivateData+1, err)
	}
	b := newEnd(t, e.b, qpConfig{})
	ch := e.serveOne(t, l, func(ctx context.Context, req rdma.ConnRequest) (rdma.Conn, error) {
		if c, err := req.Accept(ctx, b.qp, make([]byte, rdma.MaxAcceptPrivateData+1), e.connParam()); err == nil {
			return c, errors.New("accept with too much private data succeeded")
		}
		if err := req.Reject(make([]byte, rdma.MaxRejectPrivateData+1)); err == nil {
			return nil, errors.New("reject with too much private data succeeded")
		}
		return nil, req.Reject([]byte("no"))
	})
	a2 := newEnd(t, e.a, qpConfig{})
	_, err := cmA.Connect(e.ctx(t), e.b.Addr(), port, a2.qp, make([]byte, rdma.MaxConnectPrivateData), e.connParam())
	var rej *rdma.RejectError
	if !errors.As(err, &rej) {
		t.Errorf("Connect: %v, want a *rdma.RejectError", err)
	} else {
		checkPrivateData(t, "reject private data", rej.PrivateData, []byte("no"), rdma.MaxRejectPrivateData)
	}
	if r := <-ch; r.err != nil {
		t.Errorf("passive side: %v", r.err)
	}
}
