package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// TestSourcePortFormulas checks the source port functions against values
// worked out by hand from the kernel's definitions (hash_32_generic,
// rdma_calc_flow_label, rdma_flow_label_to_udp_sport).
func TestSourcePortFormulas(t *testing.T) {
	// 0x61c88647 >> 18 = 0x1872; 2 × 0x61c88647 = 0xc3910c8e, >> 18 = 0x30e4.
	for qpn, want := range map[uint32]uint16{1: 0xc000 + 0x1872, 2: 0xc000 + 0x30e4} {
		if got := qpSourcePort(qpn); got != want {
			t.Errorf("qpSourcePort(%d) = %#x, want %#x", qpn, got, want)
		}
	}
	// 0x11 × 0x12 = 0x132, nothing above bit 20 to fold.
	if got := rcSourcePort(0, 0x11, 0x12); got != 0xc132 {
		t.Errorf("rcSourcePort(0, 0x11, 0x12) = %#x, want 0xc132", got)
	}
	// 0x123456 × 0x654321 = 0x7336bf94116; folded (^ >>20, ^ >>40) and
	// masked to 20 bits: 0xa77ae; to a port: 0x37ae ^ (0xa4000 >> 14 =
	// 0x29) = 0x3787.
	if got := rcSourcePort(0, 0x123456, 0x654321); got != 0xc000|0x3787 {
		t.Errorf("rcSourcePort(0, 0x123456, 0x654321) = %#x, want %#x", got, 0xc000|0x3787)
	}
	if a, b := rcSourcePort(0, 0x1234, 0x5678), rcSourcePort(0, 0x5678, 0x1234); a != b {
		t.Errorf("not symmetric: %#x and %#x", a, b)
	}
	// A flow label wins over the QP numbers: 0xfffff → 0x3fff ^ 0x3f.
	if got := rcSourcePort(0xfffff, 0x11, 0x12); got != 0xc000|0x3fc0 {
		t.Errorf("rcSourcePort(0xfffff, ...) = %#x, want %#x", got, 0xc000|0x3fc0)
	}
}

// TestSourcePortsCapture: two RC QPs, one RC QP whose address vector
// carries a flow label, and a UD QP of one device each send; the device's
// capture shows each QP's packets (ACKs and READ responses included)
// leaving from its own source port, the one rxe would use, to 4791, and
// the peer gets everything.
func TestSourcePortsCapture(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noGSO bool
	}{{"GSO", false}, {"raw", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var capA bytes.Buffer
			a, b := openPair(t, Config{Pcap: &capA, DisableGSO: tc.noGSO}, Config{DisableGSO: tc.noGSO})
			want := map[uint32]uint16{} // destination QPN (on b) → a's source port
			var ends []*end
			for range 2 {
				ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024})
				want[eb.qp.QPN()] = rcSourcePort(0, ea.qp.QPN(), eb.qp.QPN())
				ends = append(ends, ea, eb)
			}
			// With a flow label (as the CM sets): a connection whose
			// a side has it.
			const fl = 0x9a5c3
			o := qpOpts{mtu: rdma.MTU1024}
			o.defaults()
			ea, eb := newEnd(t, a, &o), newEnd(t, b, &o)
			bringUp(t, eb, a.Addr(), ea.qp.QPN(), 0, 0, &o)
			bringUpFlow(t, ea, b.Addr(), eb.qp.QPN(), fl, &o)
			want[eb.qp.QPN()] = flowLabelSourcePort(fl)
			ends = append(ends, ea, eb)

			for i := 0; i < len(ends); i += 2 {
				ea, eb := ends[i], ends[i+1]
				src := regMR(t, ea.pd, 3000, rdma.AccessLocalWrite)
				mem := regMR(t, eb.pd, 3000, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
				fill(src.Bytes(), i)
				postRecv(t, eb.qp, 1, sge(mem, 0, 3000))
				postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 2500)}})
				checkWC(t, poll(t, eb.rcq, 1, 5*time.Second)[0], 1, rdma.Success)
				postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{sge(src, 0, 2500)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
				checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 2, rdma.Success)
			}
			// UD: the QP's creation port.
			ua, ub := newUD(t, a), newUD(t, b)
			want[ub.qp.QPN()] = qpSourcePort(ua.qp.QPN())
			postRecv(t, ub.qp, 1, sge(ub.mr, 0, 256))
			postSend(t, ua.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(ua.mr, 0, 100)},
				AH: rdma.AH{DGID: rdma.GIDFromAddr(b.Addr())}, RemoteQPN: ub.qp.QPN(), RemoteQKey: udQKey})
			checkWC(t, poll(t, ub.rcq, 1, 5*time.Second)[0], 1, rdma.Success)

			if s := a.Stats(); s.SourcePortFallbacks != 0 {
				t.Fatalf("%d QPs could not bind their source port", s.SourcePortFallbacks)
			}
			ports := map[uint16]bool{}
			for _, p := range want {
				ports[p] = true
			}
			if len(ports) < 3 {
				t.Logf("source ports collide: %v", want) // possible (14 bits), not a failure
			}
			a.Close()
			seen := map[uint32]int{}
			for i, r := range readPcap(t, capA.Bytes()) {
				ip, udp, pkt, err := wire.SplitIPUDP(r)
				if err != nil {
					t.Fatal(err)
				}
				if [4]byte(ip[12:16]) != a.Addr().As4() {
					continue // received
				}
				if err := wire.CheckICRC(r); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				qpn := wire.BTH(pkt).DestQP()
				sport, dport := binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:])
				if w, ok := want[qpn]; !ok || sport != w || dport != wire.UDPPort {
					t.Fatalf("record %d (%s to QP %#x): ports %d -> %d, want %d -> 4791", i, wire.BTH(pkt).Opcode(), qpn, sport, dport, w)
				}
				seen[qpn]++
			}
			if len(seen) != len(want) {
				t.Fatalf("packets sent to %d QPs, want %d: %v", len(seen), len(want), seen)
			}
		})
	}
}

// bringUpFlow is bringUp (PSNs 0) with flow label fl in the address vector.
func bringUpFlow(t *testing.T, e *end, peer netip.Addr, peerQPN, fl uint32, o *qpOpts) {
	t.Helper()
	if err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, AccessFlags: o.access, Port: 1},
		rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: rdma.GIDFromAddr(peer), FlowLabel: fl}, PathMTU: o.mtu,
		DestQPN: peerQPN, MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNRTimer},
		rdma.QPAttrState|rdma.QPAttrAV|rdma.QPAttrPathMTU|rdma.QPAttrDestQPN|rdma.QPAttrRQPSN|rdma.QPAttrMaxDestRdAtomic|rdma.QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSRTS, Timeout: o.timeout, RetryCount: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic},
		rdma.QPAttrState|rdma.QPAttrSQPSN|rdma.QPAttrTimeout|rdma.QPAttrRetryCount|rdma.QPAttrRNRRetry|rdma.QPAttrMaxRdAtomic); err != nil {
		t.Fatal(err)
	}
}

// udEnd is a UD QP in RTS with a 4 KiB region.
type udEnd struct {
	end
	mr rdma.MR
}

const udQKey = 0x1234

// newUD creates a UD QP in RTS on d.
func newUD(t *testing.T, d *Device) *udEnd {
	t.Helper()
	o := qpOpts{}
	o.defaults()
	e := &udEnd{end: end{dev: d}}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeUD, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: rdma.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a rdma.QPAttr
		m rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, Port: 1, QKey: udQKey}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrQKey},
		{rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState},
		{rdma.QPAttr{State: rdma.QPSRTS}, rdma.QPAttrState | rdma.QPAttrSQPSN},
	} {
		if err := e.qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	e.mr = regMR(t, e.pd, 4096, rdma.AccessLocalWrite)
	return e
}

// TestRecvQueues: with two receive queues, each of two QPs of a device is
// served by the queue of its QP number (both queues read packets, none
// for the other queue's QPs), in GSO mode, raw mode and on IPv6; and a
// second device cannot open on the address of a device with several
// queues.
func TestRecvQueues(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		cfg  Config
	}{
		{"GSO", false, Config{RecvQueues: 2}},
		{"raw", false, Config{RecvQueues: 2, DisableGSO: true}},
		{"IPv6", true, Config{RecvQueues: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b *Device
			if tc.v6 {
				a, b = openPair6(t, tc.cfg, tc.cfg)
			} else {
				a, b = openPair(t, tc.cfg, tc.cfg)
			}
			for _, d := range []*Device{a, b} {
				if len(d.rxqPackets) != 2 {
					t.Fatalf("%s: %d receive queues", d.Name(), len(d.rxqPackets))
				}
			}
			var ends [2][2]*end
			for i := range ends {
				ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024})
				ends[i] = [2]*end{ea, eb}
			}
			if ends[0][1].qp.QPN()%2 == ends[1][1].qp.QPN()%2 {
				t.Fatalf("QP numbers %#x and %#x on one queue", ends[0][1].qp.QPN(), ends[1][1].qp.QPN())
			}
			for i, e := range ends {
				ea, eb := e[0], e[1]
				src := regMR(t, ea.pd, 64<<10, 0)
				dst := regMR(t, eb.pd, 64<<10, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
				fill(src.Bytes(), i)
				postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{sge(src, 0, 64<<10)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
				checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 1, rdma.Success)
				if !bytes.Equal(src.Bytes(), dst.Bytes()) {
					t.Fatalf("connection %d: data differs", i)
				}
			}
			for _, d := range []*Device{a, b} {
				// A queue counts its batch after handling it: the
				// completion may come first.
				waitFor(5*time.Second, func() bool { return d.rxqPackets[0].Load() > 0 && d.rxqPackets[1].Load() > 0 })
				if n0, n1 := d.rxqPackets[0].Load(), d.rxqPackets[1].Load(); n0 == 0 || n1 == 0 {
					t.Errorf("%s: queues read %d and %d packets", d.Name(), n0, n1)
				}
				if m := d.stats.steerMisses.Load(); m != 0 {
					t.Errorf("%s: %d packets on another queue than their QP's", d.Name(), m)
				}
			}
			if tc.cfg.DisableGSO || tc.v6 {
				return
			}
			cfg := tc.cfg
			cfg.Addr = a.Addr()
			if d, err := Open(cfg); !errors.Is(err, syscall.EADDRINUSE) {
				if err == nil {
					d.Close()
				}
				t.Fatalf("second device on %v: %v, want EADDRINUSE", a.Addr(), err)
			}
		})
	}
}
