package ibcm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibcm"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// End to end over the soft provider: two devices on loopback connect
// through their connection managers and exchange a SEND. The addresses
// differ from the soft package's own tests (127.0.0.1/2) so that both
// packages' tests can run at the same time.
var (
	softSrvAddr = netip.MustParseAddr("127.0.10.1")
	softCliAddr = netip.MustParseAddr("127.0.10.2")
)

func openSoft(t *testing.T, a netip.Addr) *soft.Device {
	t.Helper()
	d, err := soft.Open(soft.Config{Addr: a})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW: %v", err)
		}
		t.Fatalf("soft.Open(%v): %v", a, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// softEnd is one side's verbs objects.
type softEnd struct {
	pd  rdma.PD
	cq  rdma.CQ
	qp  rdma.QP
	mr  rdma.MR
	cm  *ibcm.Manager
	dev *soft.Device
}

// openSoft6 opens two devices on ::1, the only IPv6 loopback address:
// each binds a UDP port the kernel picks and sends to the other's, so
// that they coexist with each other and with the IPv6 devices of other
// test binaries (see the soft package's ipv6_test.go). cfgA may carry a
// capture.
func openSoft6(t *testing.T, cfgA soft.Config) (*soft.Device, *soft.Device) {
	t.Helper()
	cfgA.Addr, cfgA.UDPPort = netip.IPv6Loopback(), -1
	a, err := soft.Open(cfgA)
	if err != nil {
		t.Fatalf("soft.Open(::1): %v", err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := soft.Open(soft.Config{Addr: netip.IPv6Loopback(), UDPPort: -1, PeerUDPPort: a.UDPPort()})
	if err != nil {
		t.Fatalf("soft.Open(::1): %v", err)
	}
	t.Cleanup(func() { b.Close() })
	a.SetPeerUDPPort(b.UDPPort())
	return a, b
}

func newSoftEnd(t *testing.T, a netip.Addr) *softEnd {
	t.Helper()
	return newSoftEndOn(t, openSoft(t, a))
}

func newSoftEndOn(t *testing.T, d *soft.Device) *softEnd {
	t.Helper()
	e := &softEnd{dev: d}
	var err error
	if e.cm, err = ibcm.New(e.dev, ibcm.Options{Logger: hclog.New(&hclog.LoggerOptions{Name: d.Name(), Level: hclog.Warn}), CMResponseTimeout: 15, PacketLifeTime: 10, MaxCMRetries: 8, TimeWait: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.cm.Destroy() })
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(make([]byte, 4096), rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *softEnd) poll(t *testing.T) rdma.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]rdma.WorkCompletion
	for {
		if e.cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := e.cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// TestSoftConnectSend connects two soft devices through their connection
// managers, over IPv4 and over IPv6, and moves a SEND. Over IPv6 the REQ
// as sent must carry the rdma_cm header of an AF_INET6 ID (IP version 6,
// 16-byte addresses) and the IPv6 addresses as the path's GIDs.
func TestSoftConnectSend(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
	}{{"ipv4", false}, {"ipv6", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.v6 {
				srv, cli := newSoftEnd(t, softSrvAddr), newSoftEnd(t, softCliAddr)
				connectSend(t, srv, cli, softSrvAddr)
				return
			}
			var capture bytes.Buffer
			cliDev, srvDev := openSoft6(t, soft.Config{Pcap: &capture})
			srv, cli := newSoftEndOn(t, srvDev), newSoftEndOn(t, cliDev)
			connectSend(t, srv, cli, netip.IPv6Loopback())
			cli.cm.Destroy()
			cliDev.Close()
			checkREQ6(t, capture.Bytes())
		})
	}
}

// checkREQ6 finds the REQ in a capture of the client device (pcap,
// LINKTYPE_RAW) and checks its IPv6 parts.
func checkREQ6(t *testing.T, capture []byte) {
	t.Helper()
	lo := netip.IPv6Loopback()
	found := false
	for off := 24; off+16 <= len(capture); {
		n := int(binary.LittleEndian.Uint32(capture[off+8:]))
		dg := capture[off+16 : off+16+n]
		off += 16 + n
		if err := wire.CheckICRC(dg); err != nil {
			t.Fatalf("captured datagram: %v", err)
		}
		_, _, pkt, err := wire.SplitIPUDP(dg)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.Packet
		if p.Parse(pkt) != nil || p.Opcode() != wire.UDSendOnly || len(p.Payload) < wire.MADLen {
			continue
		}
		mad := wire.MAD(p.Payload[:wire.MADLen])
		if wire.CMAttr(mad.AttrID()) != wire.CMAttrREQ {
			continue
		}
		found = true
		req := wire.REQ(mad.Data())
		hdr, err := wire.ParseCMAHdr(req.PrivateData())
		if err != nil {
			t.Fatal(err)
		}
		if hdr.IPVersion() != 6 || hdr.SrcAddr() != lo || hdr.DstAddr() != lo {
			t.Errorf("REQ rdma_cm header %v", hdr)
		}
		path := req.Primary()
		if path.LocalGID() != wire.GIDFromAddr(lo) || path.RemoteGID() != wire.GIDFromAddr(lo) {
			t.Errorf("REQ path GIDs %v %v", path.LocalGID(), path.RemoteGID())
		}
		if !bytes.HasPrefix(req.PrivateData()[wire.CMAHdrLen:], []byte("hello")) {
			t.Errorf("REQ private data % x", req.PrivateData())
		}
	}
	if !found {
		t.Fatal("no REQ captured")
	}
}

func connectSend(t *testing.T, srv, cli *softEnd, srvAddr netip.Addr) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := srv.cm.Listen(7174)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	param := rdma.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, FlowControl: true}
	type res struct {
		c   rdma.Conn
		err error
	}
	srvCh := make(chan res, 1)
	go func() {
		req, err := l.Next(ctx)
		if err != nil {
			srvCh <- res{nil, err}
			return
		}
		// A receive for the client's SEND, posted before accepting: the
		// QP goes to INIT first (Accept takes it from RESET or INIT).
		if err := srv.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, Port: 1}, rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags); err != nil {
			srvCh <- res{nil, err}
			return
		}
		if err := srv.qp.PostRecv(&rdma.RecvWR{WRID: 1, SGL: []rdma.SGE{{Addr: srv.mr.Addr(), Length: 64, LKey: srv.mr.LKey()}}}); err != nil {
			srvCh <- res{nil, err}
			return
		}
		c, err := req.Accept(ctx, srv.qp, []byte("accepted"), param)
		srvCh <- res{c, err}
	}()
	conn, err := cli.cm.Connect(ctx, srvAddr, 7174, cli.qp, []byte("hello"), param)
	if err != nil {
		t.Fatal(err)
	}
	sr := <-srvCh
	if sr.err != nil {
		t.Fatal(sr.err)
	}
	if !bytes.HasPrefix(conn.PrivateData(), []byte("accepted")) || !bytes.HasPrefix(sr.c.PrivateData(), []byte("hello")) {
		t.Error("private data")
	}

	msg := []byte("a SEND over a CM-connected RC QP")
	copy(cli.mr.Bytes(), msg)
	if err := cli.qp.PostSend(&rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: cli.mr.Addr(), Length: uint32(len(msg)), LKey: cli.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if wc := cli.poll(t); wc.Status != rdma.Success || wc.WRID != 2 {
		t.Fatalf("send completion %+v", wc)
	}
	wc := srv.poll(t)
	if wc.Status != rdma.Success || wc.Opcode != rdma.WCRecv || int(wc.ByteLen) != len(msg) {
		t.Fatalf("receive completion %+v", wc)
	}
	if !bytes.Equal(srv.mr.Bytes()[:len(msg)], msg) {
		t.Fatalf("received %q", srv.mr.Bytes()[:len(msg)])
	}

	if err := conn.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sr.c.Done():
	case <-ctx.Done():
		t.Fatal("server not disconnected")
	}
	if srv.qp.State() != rdma.QPSErr || cli.qp.State() != rdma.QPSErr {
		t.Errorf("QP states %v %v", srv.qp.State(), cli.qp.State())
	}
}
