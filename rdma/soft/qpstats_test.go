package soft

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// qpStatsOf returns the snapshot of QP qpn on d, or fails.
func qpStatsOf(t testing.TB, d *Device, qpn uint32) QPStats {
	t.Helper()
	for _, s := range d.QPStats(nil) {
		if s.QPN == qpn {
			return s
		}
	}
	t.Fatalf("QP %#x not in %s's QPStats", qpn, d.Name())
	return QPStats{}
}

// TestQPStatsSends sends known traffic over two QP pairs at once: each
// QP counts its own packets (N SENDs of three packets each: 3N request
// packets, plus any retransmission), the receiving QP counts what the
// sending one sent, the sums over QPs equal the device's counters, and a
// destroyed QP leaves the snapshot.
func TestQPStatsSends(t *testing.T) {
	for _, tc := range []struct {
		name string
		msgs []int // SENDs per QP pair
		size int   // bytes each
		pkts int   // request packets each (MTU 1024)
	}{
		{"one-packet", []int{40, 7}, 100, 1},
		{"three-packets", []int{25, 60}, 3000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, Config{}, Config{})
			var as, bs []*end
			for range tc.msgs {
				ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024})
				as, bs = append(as, ea), append(bs, eb)
			}
			for i, n := range tc.msgs {
				ea, eb := as[i], bs[i]
				src := regMR(t, ea.pd, tc.size, 0)
				dst := regMR(t, eb.pd, n*tc.size, rdma.AccessLocalWrite)
				for k := 0; k < n; k++ {
					postRecv(t, eb.qp, uint64(k), sge(dst, k*tc.size, tc.size))
				}
				for k := 0; k < n; k++ {
					postSend(t, ea.qp, &rdma.SendWR{WRID: uint64(k), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, tc.size)}})
				}
				for _, wc := range poll(t, ea.scq, n, 20*time.Second) {
					if wc.Status != rdma.Success {
						t.Fatalf("send completion %+v", wc)
					}
				}
				poll(t, eb.rcq, n, 20*time.Second)
			}
			// Counters of received packets are added at the end of
			// a receive batch, after its completions: wait until both
			// sides agree (loopback loses nothing).
			waitUntil(t, 10*time.Second, "receivers count what senders sent", func() bool {
				for i := range tc.msgs {
					sa, sb := qpStatsOf(t, a, as[i].qp.QPN()), qpStatsOf(t, b, bs[i].qp.QPN())
					if sa.PacketsSent != sb.PacketsReceived || sb.PacketsSent != sa.PacketsReceived || sa.BytesSent != sb.BytesReceived {
						return false
					}
				}
				return true
			})
			var sumA, sumB QPStats
			for i, n := range tc.msgs {
				sa, sb := qpStatsOf(t, a, as[i].qp.QPN()), qpStatsOf(t, b, bs[i].qp.QPN())
				if want := uint64(n*tc.pkts) + sa.Retransmissions; sa.PacketsSent != want {
					t.Errorf("QP %d: %d packets sent, want %d SENDs × %d + %d retransmitted", i, sa.PacketsSent, n, tc.pkts, sa.Retransmissions)
				}
				if sb.PacketsSent == 0 || sb.PacketsSent > sa.PacketsSent {
					t.Errorf("QP %d: the responder sent %d ACKs for %d request packets", i, sb.PacketsSent, sa.PacketsSent)
				}
				if sa.Type != rdma.QPTypeRC || sa.State != rdma.QPSRTS || sa.DestQPN != bs[i].qp.QPN() || sa.Peer != b.Addr() {
					t.Errorf("QP %d on A: %+v, want RC, RTS, peer QP %#x at %v", i, sa, bs[i].qp.QPN(), b.Addr())
				}
				if sb.DestQPN != as[i].qp.QPN() || sb.Peer != a.Addr() {
					t.Errorf("QP %d on B: peer QP %#x at %v, want %#x at %v", i, sb.DestQPN, sb.Peer, as[i].qp.QPN(), a.Addr())
				}
				for _, p := range []struct {
					sum *QPStats
					s   QPStats
				}{{&sumA, sa}, {&sumB, sb}} {
					p.sum.PacketsSent += p.s.PacketsSent
					p.sum.BytesSent += p.s.BytesSent
					p.sum.PacketsReceived += p.s.PacketsReceived
					p.sum.BytesReceived += p.s.BytesReceived
					p.sum.Retransmissions += p.s.Retransmissions
				}
			}
			for _, c := range []struct {
				name string
				d    *Device
				sum  QPStats
			}{{"A", a, sumA}, {"B", b, sumB}} {
				st := c.d.Stats()
				if st.PacketsSent != c.sum.PacketsSent || st.BytesSent != c.sum.BytesSent ||
					st.PacketsReceived != c.sum.PacketsReceived || st.BytesReceived != c.sum.BytesReceived ||
					st.Retransmissions != c.sum.Retransmissions {
					t.Errorf("%s: QPs sum to %+v, device %+v", c.name, c.sum, st)
				}
			}
			gone := as[0].qp.QPN()
			if err := as[0].qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			buf := make([]QPStats, 0, 4)
			got := a.QPStats(buf)
			if len(got) != len(tc.msgs)-1 || &got[:1][0] != &buf[:1][0] {
				t.Errorf("after a Destroy: %d QPs (in the caller's slice: %v), want %d", len(got), &got[:1][0] == &buf[:1][0], len(tc.msgs)-1)
			}
			for _, s := range got {
				if s.QPN == gone {
					t.Errorf("destroyed QP %#x still listed", gone)
				}
			}
		})
	}
}
