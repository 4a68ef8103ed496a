package rdma

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// fuzzReq is a connection request made from a fuzzed REQ, as the CM hands
// it to the transport; Accept fails (no RTU).
type fuzzReq struct {
	remote   netip.AddrPort
	pd       []byte
	param    rdma.ConnParam
	rejected CMReject
	accepted bool
}

func (r *fuzzReq) RemoteAddr() netip.AddrPort { return r.remote }
func (r *fuzzReq) LocalAddr() netip.AddrPort  { return netip.AddrPort{} }
func (r *fuzzReq) PrivateData() []byte        { return r.pd }
func (r *fuzzReq) Param() rdma.ConnParam      { return r.param }
func (r *fuzzReq) Accept(ctx context.Context, qp rdma.QP, pd []byte, p rdma.ConnParam) (rdma.Conn, error) {
	r.accepted = true
	if _, err := ParseCMAccept(pd); err != nil {
		return nil, err
	}
	return nil, rdma.ErrUnreachable
}
func (r *fuzzReq) Reject(pd []byte) error {
	r.rejected = append(CMReject(nil), pd...)
	return nil
}

// FuzzCMREQ feeds arbitrary CM MADs to the target's REQ path as they
// arrive: the ibcm parse of the MAD, the REQ and its rdma_cm header, the
// NVMe/RDMA private data and the transport's accept decision (limits,
// queue resources, reject status). No input may panic it, leave a
// pending count or a buffer behind, or be rejected without a status.
func FuzzCMREQ(f *testing.F) {
	// Each fuzzing worker is a process with a device of its own.
	to := pidAddr(21)
	dev := openSoft(f, to)
	cfg := TargetConfig{Device: dev, ServiceID: 4420, MaxPendingPerHost: 1, Logger: hclog.NewNullLogger()}
	if err := cfg.normalize(); err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	l := &Listener{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, pendingBy: map[netip.Addr]int{}}
	if err := l.openShared(); err != nil {
		f.Fatal(err)
	}
	for i, depth := range []int{32, 128, 1, 1025, 0} {
		mad := wire.MAD(make([]byte, wire.MADLen))
		mad.InitCM(wire.CMAttrREQ, uint64(i))
		formatSpoofedREQ(wire.REQ(mad.Data()), uint32(i+1), 4420, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), to, depth)
		f.Add([]byte(mad))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		mad := wire.MAD(make([]byte, wire.MADLen))
		copy(mad, b)
		// The ibcm listener's checks (Manager.dispatch, onREQ).
		if mad.CheckCM() != nil || mad.Method() != wire.MethodSend || wire.CMAttr(mad.AttrID()) != wire.CMAttrREQ {
			return
		}
		req := wire.REQ(mad.Data())
		if req.TransportServiceType() != wire.CMTransportRC {
			return
		}
		if _, ok := wire.PortFromServiceID(req.ServiceID()); !ok {
			return
		}
		hdr, err := wire.ParseCMAHdr(req.PrivateData())
		if err != nil {
			return
		}
		r := &fuzzReq{
			remote: netip.AddrPortFrom(hdr.SrcAddr(), hdr.Port()),
			pd:     append([]byte(nil), req.PrivateData()[wire.CMAHdrLen:]...),
			param:  rdma.ConnParam{ResponderResources: req.ResponderResources(), InitiatorDepth: req.InitiatorDepth()},
		}
		// Twice from one address: the second REQ exceeds MaxPendingPerHost.
		ticket, err := l.admit(r.remote.Addr())
		if err != nil {
			t.Fatalf("first REQ from %v refused: %v", r.remote.Addr(), err)
		}
		if _, err := l.admit(r.remote.Addr()); !errors.Is(err, errPendingLimit) {
			t.Fatalf("second REQ from %v: %v, want the pending limit", r.remote.Addr(), err)
		}
		qr, sts, cerr := l.cfg.checkRequest(r.pd, r.param.ResponderResources, dev.Attr().MaxQPRdAtom)
		q, err := l.setup(r, ticket, time.Now().Add(time.Second))
		if q != nil || err == nil {
			t.Fatalf("setup without an RTU: queue %v, error %v", q, err)
		}
		ticket.release()
		switch {
		case cerr != nil:
			if sts == 0 || r.accepted || r.rejected == nil || r.rejected.Status() != sts {
				t.Fatalf("bad request (%v): status %v, accepted %v, REJ %x", cerr, sts, r.accepted, r.rejected)
			}
		case qr.depth < 2 || qr.depth > cfg.MaxQueueSize || (qr.qid == 0 && (qr.depth > AdminQueueDepth || qr.inline != 0)) ||
			qr.reads < 1 || qr.reads > DefaultRDMAReads:
			t.Fatalf("accepted %+v", qr)
		case !r.accepted && (r.rejected == nil || r.rejected.Status() != CMNoResources):
			t.Fatalf("good request %+v neither accepted nor rejected for resources (REJ %x)", qr, r.rejected)
		}
		if n, by := l.Pending(), l.BufferBytes(); n != 0 || by != 0 {
			t.Fatalf("after the REQ: %d pending, %d buffer bytes", n, by)
		}
	})
}
