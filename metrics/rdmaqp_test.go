package metrics

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// qpEnd is one side of an RC connection between two soft devices.
type qpEnd struct {
	pd       rdma.PD
	scq, rcq rdma.CQ
	qp       rdma.QP
}

func newQPEnd(t *testing.T, d rdma.Device) *qpEnd {
	t.Helper()
	e := &qpEnd{}
	var err error
	e.pd, err = d.AllocPD()
	must(t, err)
	e.scq, err = d.CreateCQ(256)
	must(t, err)
	e.rcq, err = d.CreateCQ(256)
	must(t, err)
	e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: rdma.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return e
}

// up moves e's QP to RTS towards QP peerQPN at peer.
func (e *qpEnd) up(t *testing.T, peer netip.Addr, peerQPN uint32) {
	t.Helper()
	for _, s := range []struct {
		a rdma.QPAttr
		m rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, Port: 1}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags},
		{rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: rdma.GIDFromAddr(peer)}, PathMTU: rdma.MTU1024, DestQPN: peerQPN, MinRNRTimer: 12},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer},
		{rdma.QPAttr{State: rdma.QPSRTS, Timeout: 12, RetryCount: 7, RNRRetry: 7},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic},
	} {
		if err := e.qp.Modify(&s.a, s.m); err != nil {
			t.Fatalf("QP to %s: %v", s.a.State, err)
		}
	}
}

// TestRDMAQPMetrics sends one-packet SENDs over a soft RC connection
// whose receiver drops a fifth of the packets: the per-QP series show each live QP's
// counters as QPStats has them (retransmissions among them), labelled
// with its peer, and go when the QP is destroyed.
func TestRDMAQPMetrics(t *testing.T) {
	addrA, addrB := netip.MustParseAddr("127.61.9.2"), netip.MustParseAddr("127.61.9.3")
	a, err := soft.Open(soft.Config{Addr: addrA})
	if err != nil {
		t.Skipf("soft RoCE device on a loopback address: %v", err)
	}
	defer a.Close()
	b, err := soft.Open(soft.Config{Addr: addrB, RecvFaults: &soft.FaultConfig{Drop: 0.2, Seed: 5}})
	if err != nil {
		t.Skipf("soft RoCE device on a loopback address: %v", err)
	}
	defer b.Close()
	ea, eb := newQPEnd(t, a), newQPEnd(t, b)
	ea.up(t, addrB, eb.qp.QPN())
	eb.up(t, addrA, ea.qp.QPN())
	const n, size = 30, 512
	src, err := ea.pd.RegMR(make([]byte, size), 0)
	must(t, err)
	dst, err := eb.pd.RegMR(make([]byte, n*size), rdma.AccessLocalWrite)
	must(t, err)
	for k := 0; k < n; k++ {
		must(t, eb.qp.PostRecv(&rdma.RecvWR{WRID: uint64(k), SGL: []rdma.SGE{{Addr: dst.Addr() + uint64(k*size), Length: size, LKey: dst.LKey()}}}))
		must(t, ea.qp.PostSend(&rdma.SendWR{WRID: uint64(k), Opcode: rdma.WRSend, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: src.Addr(), Length: size, LKey: src.LKey()}}}))
	}
	wcs := make([]rdma.WorkCompletion, n)
	for got, deadline := 0, time.Now().Add(30*time.Second); got < n; {
		for _, wc := range wcs[:ea.scq.Poll(wcs)] {
			if wc.Status != rdma.Success {
				t.Fatalf("send completion %+v", wc)
			}
			got++
		}
		if got < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d SENDs completed", got, n)
			}
			select {
			case <-ea.scq.Notify():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return []rdma.Device{a, b} }})
	must(t, err)
	// A's QP sent everything and got every ACK: its counters are still.
	qs := a.QPStats(nil)
	fams, body := scrape(t, Handler(reg, false))
	if len(qs) != 1 {
		t.Fatalf("A has %d QPs: %+v", len(qs), qs)
	}
	s := qs[0]
	if s.Retransmissions == 0 {
		t.Errorf("20 %% of the packets dropped and no retransmission: %+v", s)
	}
	l := map[string]string{"device": a.Name(), "qpn": strconv.Itoa(int(s.QPN)), "peer": "127.61.9.3"}
	wantValue(t, fams, "nvmeof_rdma_qp_retransmissions_total", l, float64(s.Retransmissions))
	wantValue(t, fams, "nvmeof_rdma_qp_packets_sent_total", l, float64(s.PacketsSent))
	wantValue(t, fams, "nvmeof_rdma_qp_bytes_sent_total", l, float64(s.BytesSent))
	wantValue(t, fams, "nvmeof_rdma_qp_retransmission_timeouts_total", l, float64(s.Timeouts))
	wantValue(t, fams, "nvmeof_rdma_qp_info", map[string]string{"device": a.Name(), "qpn": l["qpn"], "peer_qpn": strconv.Itoa(int(eb.qp.QPN())), "type": "RC", "state": "RTS"}, 1)
	if s.PacketsSent != n+s.Retransmissions {
		t.Errorf("%d packets sent for %d SENDs and %d retransmissions", s.PacketsSent, n, s.Retransmissions)
	}
	wantValue(t, fams, "nvmeof_rdma_qp_info", map[string]string{"device": b.Name(), "peer": "127.61.9.2"}, 1)
	checkPromtool(t, body)

	must(t, ea.qp.Destroy())
	fams, _ = scrape(t, Handler(reg, false))
	if _, ok := value(fams, "nvmeof_rdma_qp_packets_sent_total", map[string]string{"device": a.Name()}); ok {
		t.Error("a destroyed QP's series are still exported")
	}
	if _, ok := value(fams, "nvmeof_rdma_qp_packets_sent_total", map[string]string{"device": b.Name()}); !ok {
		t.Error("the live QP of B is not exported")
	}
}

// TestRDMAQPRate exports a QP's DCQCN rate: its device's line rate with
// congestion control on and no CNP, 0 with it off.
func TestRDMAQPRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		addr string
		cc   *soft.CongestionConfig
		want float64
	}{
		{"on", "127.61.9.4", &soft.CongestionConfig{Enabled: true, LineRate: 2.5e9}, 2.5e9},
		{"off", "127.61.9.5", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := netip.MustParseAddr(tc.addr)
			d, err := soft.Open(soft.Config{Addr: addr, Congestion: tc.cc})
			if err != nil {
				t.Skipf("soft RoCE device on a loopback address: %v", err)
			}
			defer d.Close()
			e := newQPEnd(t, d)
			e.up(t, netip.MustParseAddr("127.61.9.6"), 17)
			reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return []rdma.Device{d} }})
			must(t, err)
			fams, body := scrape(t, Handler(reg, false))
			l := map[string]string{"device": d.Name(), "qpn": strconv.Itoa(int(e.qp.QPN()))}
			wantValue(t, fams, "nvmeof_rdma_qp_rp_rate_bytes_per_second", l, tc.want/8)
			wantValue(t, fams, "nvmeof_rdma_qp_rp_limited", l, 0)
			wantValue(t, fams, "nvmeof_rdma_qp_np_cnp_sent_total", l, 0)
			checkPromtool(t, body)
		})
	}
}
