//go:build ibverbs && cgo

package ibverbs

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/rdmatest"
)

// openEnv opens the device NVMEOF_IBVERBS_ADDR (and NVMEOF_IBVERBS_DEVICE)
// name, or skips: the tests need an RDMA device (rxe in a kernel-peer guest).
func openEnv(t *testing.T) Device {
	t.Helper()
	s := os.Getenv("NVMEOF_IBVERBS_ADDR")
	if s == "" {
		t.Skip("NVMEOF_IBVERBS_ADDR not set: no RDMA device to test on")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(Config{Addr: a, Name: os.Getenv("NVMEOF_IBVERBS_DEVICE")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

type smokeEnd struct {
	pd rdma.PD
	cq rdma.CQ
	qp rdma.QP
	mr rdma.MR
}

func newSmokeEnd(t *testing.T, d rdma.Device) *smokeEnd {
	t.Helper()
	e := &smokeEnd{}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: rdma.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, 1<<20), rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *smokeEnd) wait(t *testing.T, ctx context.Context) rdma.WorkCompletion {
	t.Helper()
	var wc [1]rdma.WorkCompletion
	for {
		if e.cq.Poll(wc[:]) == 1 {
			if wc[0].Status != rdma.Success {
				t.Fatalf("completion %+v: %v", wc[0], wc[0].Status)
			}
			return wc[0]
		}
		if err := e.cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// smokeConnect connects a client QP to a server QP of d through the CM
// on port: the server accepts with accData, the client sends reqData.
// It returns both ends and both connections; the request's private data
// is handed to checkReq.
func smokeConnect(t *testing.T, ctx context.Context, d Device, port uint16, reqData, accData []byte, checkReq func([]byte)) (srv, cli *smokeEnd, sc, cc rdma.Conn) {
	t.Helper()
	cm, err := d.ConnManager()
	if err != nil {
		t.Fatal(err)
	}
	l, err := cm.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv, cli = newSmokeEnd(t, d), newSmokeEnd(t, d)
	type acc struct {
		c   rdma.Conn
		err error
	}
	accepted := make(chan acc, 1)
	go func() {
		r, err := l.Next(ctx)
		if err != nil {
			accepted <- acc{err: err}
			return
		}
		checkReq(r.PrivateData())
		c, err := r.Accept(ctx, srv.qp, accData, rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7})
		accepted <- acc{c, err}
	}()
	cc, err = cm.Connect(ctx, d.Addr(), port, cli.qp, reqData, rdma.ConnParam{ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a.err != nil {
		t.Fatal(a.err)
	}
	return srv, cli, a.c, cc
}

// TestSmokeLoopback connects two QPs of one device through the CM and
// moves data with SEND, RDMA WRITE and RDMA READ.
func TestSmokeLoopback(t *testing.T) {
	d := openEnv(t)
	t.Logf("device %+v", d.Info())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, cli, sc, cc := smokeConnect(t, ctx, d, 7471, []byte("hello"), []byte("welcome"), func(p []byte) {
		if !bytes.HasPrefix(p, []byte("hello")) {
			t.Errorf("request private data %q", p)
		}
	})
	rbuf := srv.mr.Bytes()[:4096]
	if !bytes.HasPrefix(cc.PrivateData(), []byte("welcome")) {
		t.Errorf("accept private data %q", cc.PrivateData())
	}
	t.Logf("connected: %v -> %v, param %+v", cc.LocalAddr(), cc.RemoteAddr(), cc.Param())
	if err := srv.qp.PostRecv(&rdma.RecvWR{WRID: 1, SGL: []rdma.SGE{{Addr: srv.mr.Addr(), Length: 4096, LKey: srv.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	msg := cli.mr.Bytes()[:3000]
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	if err := cli.qp.PostSend(&rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: cli.mr.Addr(), Length: 3000, LKey: cli.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := srv.wait(t, ctx); wc.Opcode != rdma.WCRecv || wc.ByteLen != 3000 || !bytes.Equal(rbuf[:3000], msg) {
		t.Fatalf("receive %+v", wc)
	}
	cli.wait(t, ctx)
	// RDMA WRITE 512 KiB from the client into the server, then READ it back.
	big := cli.mr.Bytes()[:512<<10]
	for i := range big {
		big[i] = byte(i*13 + 1)
	}
	if err := cli.qp.PostSend(&rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: cli.mr.Addr(), Length: uint32(len(big)), LKey: cli.mr.LKey()}}, RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	cli.wait(t, ctx)
	if !bytes.Equal(srv.mr.Bytes()[:len(big)], big) {
		t.Fatal("RDMA WRITE data differs")
	}
	dst := cli.mr.Bytes()[512<<10:]
	if err := cli.qp.PostSend(&rdma.SendWR{WRID: 4, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: cli.mr.Addr() + 512<<10, Length: 512 << 10, LKey: cli.mr.LKey()}}, RemoteAddr: srv.mr.Addr(), RKey: srv.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	cli.wait(t, ctx)
	if !bytes.Equal(dst, big) {
		t.Fatal("RDMA READ data differs")
	}
	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-ctx.Done():
		t.Fatal("server side not disconnected")
	}
	var types []rdma.ConnEventType
	for ev := range cc.Events() {
		types = append(types, ev.Type)
	}
	t.Logf("client events %v", types)
}

// TestSmokeNoAllocs: a SEND and its receive, posted and completed through
// Poll and Wait, allocate nothing.
func TestSmokeNoAllocs(t *testing.T) {
	d := openEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, cli, _, cc := smokeConnect(t, ctx, d, 7472, nil, nil, func([]byte) {})
	defer cc.Disconnect(ctx)
	rwr := &rdma.RecvWR{WRID: 1, SGL: []rdma.SGE{{Addr: srv.mr.Addr(), Length: 4096, LKey: srv.mr.LKey()}}}
	swr := &rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: cli.mr.Addr(), Length: 4096, LKey: cli.mr.LKey()}}}
	var wc [4]rdma.WorkCompletion
	waitOne := func(cq rdma.CQ) {
		for cq.Poll(wc[:1]) == 0 {
			if err := cq.Wait(ctx); err != nil {
				panic(err)
			}
		}
		if wc[0].Status != rdma.Success {
			panic(wc[0].Status.String())
		}
	}
	allocs := testing.AllocsPerRun(200, func() {
		if err := srv.qp.PostRecv(rwr); err != nil {
			panic(err)
		}
		if err := cli.qp.PostSend(swr); err != nil {
			panic(err)
		}
		waitOne(srv.cq)
		waitOne(cli.cq)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per SEND", allocs)
	}
}

// TestConformancePollMode runs the provider-conformance suite with the
// device in poll mode (Config.Poll: one poller goroutine, no completion
// channels).
func TestConformancePollMode(t *testing.T) {
	s := os.Getenv("NVMEOF_IBVERBS_ADDR")
	if s == "" {
		t.Skip("NVMEOF_IBVERBS_ADDR not set: no RDMA device to test on")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]string{} // filled by the opener, which RunOptions calls first
	rdmatest.RunOptions(t, func(t testing.TB) (rdma.Device, rdma.Device) {
		d, err := Open(Config{Addr: a, Name: os.Getenv("NVMEOF_IBVERBS_DEVICE"), Poll: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		for k, v := range KnownFailures(d) {
			known[k] = v
		}
		return d, d
	}, rdmatest.Options{LargeSize: 1 << 20, KnownFailures: known})
}
