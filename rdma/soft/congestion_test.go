//go:build linux

package soft

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// ccPair opens two devices with cfg (Congestion set) on 127.0.last.1
// and .2 in GSO or raw mode, or on ::1.
func ccPair(t *testing.T, mode string, last byte, a, b Config) (*Device, *Device) {
	t.Helper()
	if mode == "IPv6" {
		return openPair6(t, a, b)
	}
	a.Addr = netip.AddrFrom4([4]byte{127, 0, last, 1})
	b.Addr = netip.AddrFrom4([4]byte{127, 0, last, 2})
	a.DisableGSO, b.DisableGSO = mode == "raw", mode == "raw"
	return openPairAt(t, a, b)
}

// sendAndRead runs a 5000-byte SEND and a 5000-byte RDMA READ from ea
// to eb and checks the data.
func sendAndRead(t *testing.T, ea, eb *end, seed int) {
	t.Helper()
	src := regMR(t, ea.pd, 8192, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	dst := regMR(t, ea.pd, 8192, rdma.AccessLocalWrite)
	fill(src.Bytes(), seed)
	fill(mem.Bytes(), seed+7)
	postRecv(t, eb.qp, 1, sge(mem, 0, 8192))
	// Signaled, and waited for before the READ: its ACK is a packet of
	// its own, not implied by the READ response.
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 5000)}})
	checkWC(t, poll(t, eb.rcq, 1, 5*time.Second)[0], 1, rdma.Success)
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 1, rdma.Success)
	if !bytes.Equal(src.Bytes()[:5000], mem.Bytes()[:5000]) {
		t.Fatal("SEND data differs")
	}
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(dst, 0, 5000)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 2, rdma.Success)
	if !bytes.Equal(dst.Bytes()[:5000], mem.Bytes()[:5000]) {
		t.Fatal("READ data differs")
	}
}

// TestECNOnWire: with congestion control on, every SEND, READ request
// READ response and ACK leaves ECT(0) (ECT(1) if configured), keeping
// the QP's DSCP. Seen on lo by a packet socket, in GSO
// mode, raw mode and on IPv6; no ICRC errors.
func TestECNOnWire(t *testing.T) {
	const dscp = 0xb8 // EF
	for _, tc := range []struct {
		mode string
		ect1 bool
		last byte
	}{{"GSO", false, 90}, {"raw", false, 91}, {"IPv6", false, 0}, {"GSO", true, 92}} {
		name := tc.mode
		if tc.ect1 {
			name += "/ECT1"
		}
		t.Run(name, func(t *testing.T) {
			tap := openTapLo(t, tc.mode == "IPv6")
			cfg := Config{Congestion: &CongestionConfig{Enabled: true, ECT1: tc.ect1}}
			a, b := ccPair(t, tc.mode, tc.last, cfg, cfg)
			o := qpOpts{mtu: rdma.MTU1024}
			o.defaults()
			ea, eb := newEnd(t, a, &o), newEnd(t, b, &o)
			bringUpAV(t, ea, b.Addr(), eb.qp.QPN(), rdma.AH{TrafficClass: dscp}, &o)
			bringUp(t, eb, a.Addr(), ea.qp.QPN(), 0, 0, &o)
			sendAndRead(t, ea, eb, 3)
			ect := uint8(ecnECT0)
			if tc.ect1 {
				ect = ecnECT1
			}
			kinds := map[string]int{}
			for _, d := range tap.drain(t, 100000) {
				ip, _, pkt, err := wire.SplitIPUDP(d)
				if err != nil || len(pkt) < wire.BTHLen {
					continue
				}
				bth := wire.BTH(pkt)
				var want uint8
				switch qpn := bth.DestQP(); {
				case qpn == eb.qp.QPN():
					want = ect | dscp
				case qpn == ea.qp.QPN() && (bth.Opcode().IsReadResponse() || bth.Opcode().IsAck()):
					want = ect // b's QP has no traffic class
				default:
					continue
				}
				if got := ipTOS(ip); got != want {
					t.Errorf("%s to QP %#x: TOS %#x, want %#x", bth.Opcode(), bth.DestQP(), got, want)
				}
				switch op := bth.Opcode(); {
				case op.IsAck():
					kinds["ack"]++
				case op.IsReadResponse():
					kinds["read response"]++
				default:
					kinds["request"]++
				}
			}
			if len(kinds) != 3 {
				t.Fatalf("packets seen: %v, want requests, ACKs and READ responses", kinds)
			}
			for name, d := range map[string]*Device{"a": a, "b": b} {
				if s := d.Stats(); s.ICRCErrors != 0 || s.NPECNMarkedRoCEPackets != 0 || s.NPCNPSent != 0 {
					t.Errorf("%s: %+v", name, s)
				}
			}
		})
	}
}

// TestCEMarkSendsCNP: b's fault injector marks every packet it receives
// CE, which b can only do if it learned they are ECN-capable (raw socket:
// the header; UDP socket: the TOS control message). Each CE-marked
// request makes b's QP send a CNP to a's, at most one per
// MinCNPInterval (an hour here: exactly one), which a's reaction point
// handles: its rate halves (α starts at 1). READ responses marked at a make a send one
// to b the same way. Without congestion control at b nothing is marked
// (UDP modes: the TOS is not learned; raw: nothing ECN-capable is sent).
func TestCEMarkSendsCNP(t *testing.T) {
	for _, tc := range []struct {
		mode string
		last byte
	}{{"GSO", 93}, {"raw", 94}, {"IPv6", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			// The rate increase timer is held off so that the cut stays.
			cfg := Config{Congestion: &CongestionConfig{Enabled: true, MinCNPInterval: time.Hour, LineRate: 1e9, IncreasePeriod: time.Hour},
				RecvFaults: &FaultConfig{CEMark: 1}}
			var capB bytes.Buffer
			cfgB := cfg
			cfgB.Pcap = &capB
			a, b := ccPair(t, tc.mode, tc.last, cfg, cfgB)
			ea, eb := connect(t, a, b, qpOpts{})
			for i := range 3 {
				sendAndRead(t, ea, eb, i)
			}
			sa, sb := a.Stats(), b.Stats()
			// b got SENDs and READ requests marked, a READ responses.
			if sb.NPECNMarkedRoCEPackets == 0 || sb.NPCNPSent != 1 || sa.NPECNMarkedRoCEPackets == 0 || sa.NPCNPSent != 1 {
				t.Fatalf("notification points: a %+v\nb %+v", sa, sb)
			}
			if sb.FaultCEMarks != sb.NPECNMarkedRoCEPackets {
				t.Errorf("b: %d CE marks injected, %d counted", sb.FaultCEMarks, sb.NPECNMarkedRoCEPackets)
			}
			// The CNPs themselves are Not-ECT: never marked, never counted.
			waitUntil(t, 5*time.Second, "CNPs handled", func() bool {
				return a.Stats().RPCNPHandled == 1 && b.Stats().RPCNPHandled == 1
			})
			qs := a.QPStats(nil)
			if len(qs) == 0 {
				t.Fatal("no QP stats")
			}
			for _, q := range qs {
				if q.QPN != ea.qp.QPN() {
					continue
				}
				if q.NPCNPSent != 1 || q.RPCNPHandled != 1 || !q.RPLimited || q.RPRate != 5e8 {
					t.Fatalf("a's QP: %+v", q)
				}
			}
			if sa.RPCNPIgnored != 0 || sb.RPCNPIgnored != 0 || sa.ICRCErrors != 0 || sb.ICRCErrors != 0 {
				t.Fatalf("a %+v\nb %+v", sa, sb)
			}
			// b's capture shows the CNP it sent and the one it received:
			// DSCP 48, Not-ECT, the annex layout, a good ICRC.
			b.Close()
			cnps := map[uint32]int{}
			for i, r := range readPcap(t, capB.Bytes()) {
				ip, _, pkt, err := wire.SplitIPUDP(r)
				if err != nil || len(pkt) < wire.BTHLen || wire.BTH(pkt).Opcode() != wire.OpCNP {
					continue
				}
				c, err := wire.ParseCNP(pkt)
				if err != nil || !c.BTH().BECN() || ipTOS(ip) != 48<<2 || wire.CheckICRC(r) != nil {
					t.Fatalf("capture record %d: CNP % x (TOS %#x): %v, ICRC %v", i, pkt, ipTOS(ip), err, wire.CheckICRC(r))
				}
				cnps[c.DestQP()]++
			}
			if len(cnps) != 2 || cnps[ea.qp.QPN()] != 1 || cnps[eb.qp.QPN()] != 1 {
				t.Fatalf("CNPs in b's capture by destination QP: %v, want one to each", cnps)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		a, b := ccPair(t, "GSO", 95, Config{}, Config{RecvFaults: &FaultConfig{CEMark: 1}})
		ea, eb := connect(t, a, b, qpOpts{})
		sendAndRead(t, ea, eb, 1)
		if s := b.Stats(); s.FaultCEMarks != 0 || s.NPECNMarkedRoCEPackets != 0 || s.NPCNPSent != 0 {
			t.Fatalf("b: %+v", s)
		}
		if q := a.QPStats(nil); len(q) == 0 || q[0].RPRate != 0 || q[0].RPLimited {
			t.Fatalf("a's QPs: %+v", q)
		}
	})
}

// sendCNP sends a CNP for QP qpn from d to peer, through d's send path.
func sendCNP(d *Device, peer netip.Addr, qpn uint32) {
	tx := d.getTx()
	p := tx.next()
	n, _ := wire.PutCNP(p.buf[:], qpn, wire.DefaultPKey)
	p.n, p.dst = n, peer.As16()
	tx.commit()
	d.putTx(tx)
}

// TestCNPIgnored: a CNP for a QP number not in use, for a QP of a device
// without congestion control, or from another address than the QP's
// peer is counted in RPCNPIgnored and changes nothing.
func TestCNPIgnored(t *testing.T) {
	on := Config{Congestion: &CongestionConfig{Enabled: true}}
	for _, tc := range []struct {
		name       string
		b          Config
		target     func(eb *end, a *Device) uint32
		unknownQP  uint64
		fromStrang bool
	}{
		{"unknown QP", on, func(eb *end, _ *Device) uint32 { return eb.qp.QPN() ^ 0x5a5a }, 1, false},
		{"congestion off", Config{}, func(eb *end, _ *Device) uint32 { return eb.qp.QPN() }, 0, false},
		{"not the peer", on, func(eb *end, _ *Device) uint32 { return eb.qp.QPN() }, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := ccPair(t, "GSO", 96, on, tc.b)
			ea, eb := connect(t, a, b, qpOpts{})
			from := a
			if tc.fromStrang {
				from = openDev(t, Config{Addr: netip.MustParseAddr("127.0.96.3")})
			}
			before := b.Stats()
			sendCNP(from, b.Addr(), tc.target(eb, a))
			waitUntil(t, 5*time.Second, "the CNP ignored", func() bool { return b.Stats().RPCNPIgnored == 1 })
			s := b.Stats()
			if s.RPCNPHandled != 0 || s.UnknownQP-before.UnknownQP != tc.unknownQP {
				t.Fatalf("b: %+v", s)
			}
			for _, q := range b.QPStats(nil) {
				if q.RPLimited {
					t.Fatalf("b's QP limited: %+v", q)
				}
			}
			sendAndRead(t, ea, eb, 1)
		})
	}
}

// qpStat returns d's QP stats for QP qpn.
func qpStat(t *testing.T, d *Device, qpn uint32) QPStats {
	t.Helper()
	for _, q := range d.QPStats(nil) {
		if q.QPN == qpn {
			return q
		}
	}
	t.Fatalf("no stats for QP %#x", qpn)
	return QPStats{}
}

// TestCongestionEndToEnd: two soft devices on loopback, congestion
// control on; b marks CE on 1 % of what it receives (as a switch past
// its threshold would), so CNPs flow back and a's RDMA WRITE stream is
// paced below its line rate; once the marking stops, a's rate recovers
// to the line rate. Every byte arrives intact, nothing is lost.
func TestCongestionEndToEnd(t *testing.T) {
	const line = 2e9
	// A rate increase timer slower than the default 55 µs keeps the cuts
	// visible between two completions.
	cc := &CongestionConfig{Enabled: true, LineRate: line, IncreasePeriod: 300 * time.Microsecond}
	a, b := ccPair(t, "GSO", 97, Config{Congestion: cc}, Config{Congestion: cc})
	ea, eb := connect(t, a, b, qpOpts{})
	const size, chunk = 4 << 20, 256 << 10
	src := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	// pass writes the whole of src to mem in chunks, one WR each, at most
	// 8 outstanding, and returns a's lowest DCQCN rate seen meanwhile.
	var moved int
	pass := func(seed int) (minRate uint64, limited bool) {
		fill(src.Bytes(), seed)
		moved += size
		minRate = ^uint64(0)
		posted, done := 0, 0
		for done < size/chunk {
			for posted < size/chunk && posted-done < 8 {
				off := posted * chunk
				postSend(t, ea.qp, &rdma.SendWR{WRID: uint64(posted), Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{sge(src, off, chunk)}, RemoteAddr: mem.Addr() + uint64(off), RKey: mem.RKey()})
				posted++
			}
			wc := poll(t, ea.scq, 1, 10*time.Second)[0]
			checkWC(t, wc, uint64(done), rdma.Success)
			done++
			q := qpStat(t, a, ea.qp.QPN())
			minRate = min(minRate, q.RPRate)
			limited = limited || q.RPLimited
		}
		if !bytes.Equal(src.Bytes(), mem.Bytes()) {
			t.Fatalf("pass %d: data differs", seed)
		}
		return minRate, limited
	}
	pass(99) // warm up (page faults, pools) before the marking starts
	if s := a.Stats(); s.RPCNPHandled != 0 {
		t.Fatalf("CNPs without marks: %+v", s)
	}
	b.SetFaults(nil, &FaultConfig{CEMark: 0.01, Seed: 26})
	var lowest uint64 = ^uint64(0)
	marked := false
	start := time.Now()
	phase, moved0 := start, 0
	goodput := func() float64 {
		g := float64(moved-moved0) * 8 / time.Since(phase).Seconds()
		phase, moved0 = time.Now(), moved
		return g
	}
	for i := 0; i < 50 && time.Since(start) < 20*time.Second; i++ {
		r, lim := pass(i)
		lowest = min(lowest, r)
		marked = marked || lim
		if marked && a.Stats().RPCNPHandled >= 10 {
			break
		}
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("marking: b %d CE marks, %d CNPs sent; a %d CNPs handled, lowest rate %.0f Mb/s, goodput %.0f Mb/s", sb.NPECNMarkedRoCEPackets, sb.NPCNPSent, sa.RPCNPHandled, float64(lowest)/1e6, goodput()/1e6)
	if !marked || lowest >= line || sb.NPCNPSent == 0 || sa.RPCNPHandled == 0 || sa.RPCNPHandled > sb.NPCNPSent {
		t.Fatalf("no rate cut: lowest %d b/s, a %+v\nb %+v", lowest, sa, sb)
	}
	b.SetFaults(nil, nil)
	recovered := false
	for i := 0; i < 50 && time.Since(start) < 40*time.Second; i++ {
		pass(100 + i)
		if q := qpStat(t, a, ea.qp.QPN()); !q.RPLimited && q.RPRate == line {
			recovered = true
			break
		}
	}
	if !recovered {
		t.Fatalf("rate not recovered: %+v", qpStat(t, a, ea.qp.QPN()))
	}
	t.Logf("after: recovered to %.0f Mb/s, goodput %.0f Mb/s", line/1e6, goodput()/1e6)
	// Marks are not loss: no NAK sequence error. (Timeouts of a starved
	// receiver, as under the race detector, may still resend.)
	sa, sb = a.Stats(), b.Stats()
	t.Logf("retransmissions %d, timeouts %d", sa.Retransmissions, sa.Timeouts)
	if sa.SeqNAKsReceived != 0 || sb.OutOfSequence != 0 || sa.ICRCErrors != 0 || sb.ICRCErrors != 0 {
		t.Fatalf("a %+v\nb %+v", sa, sb)
	}
}

// TestCongestionNoAllocs: with congestion control on and CE marks
// arriving (so CNPs are sent and handled and the requester is paced),
// the data path still allocates nothing, on IPv4 (GSO and raw) and IPv6.
func TestCongestionNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		mode string
		last byte
	}{{"GSO", 98}, {"raw", 99}, {"IPv6", 0}} {
		t.Run(tc.mode, func(t *testing.T) {
			cc := &CongestionConfig{Enabled: true, LineRate: 4e9}
			a, b := ccPair(t, tc.mode, tc.last, Config{Congestion: cc}, Config{Congestion: cc, RecvFaults: &FaultConfig{CEMark: 0.05, Seed: 1}})
			ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU4096})
			if allocs := writeAllocs(t, ea, eb, 64<<10); allocs > 0.05 {
				t.Fatalf("%v allocations per 64 KiB RDMA WRITE", allocs)
			}
			if s := a.Stats(); s.RPCNPHandled == 0 {
				t.Fatalf("no CNP handled: %+v", s)
			}
		})
	}
}

// TestCongestionWithLoss: pacing and go-back-N together. Both devices
// drop, duplicate, reorder and corrupt what they receive (the loss
// tests' mix) and mark 5 % of the rest CE; RDMA WRITEs and READs of
// 64 KiB, each read back and compared, all complete intact while CNPs cut
// and pace both QPs.
func TestCongestionWithLoss(t *testing.T) {
	rounds := 40
	if raceEnabled {
		rounds = 10
	}
	cc := &CongestionConfig{Enabled: true, LineRate: 1e9}
	fa, fb := lossy(3), lossy(4)
	fa.CEMark, fb.CEMark = 0.05, 0.05
	a, b := ccPair(t, "GSO", 100, Config{Congestion: cc, RecvFaults: fa}, Config{Congestion: cc, RecvFaults: fb})
	ea, eb := connect(t, a, b, qpOpts{timeout: lossTimeout})
	const n = 64 << 10
	src := regMR(t, ea.pd, n, rdma.AccessLocalWrite)
	back := regMR(t, ea.pd, n, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	for k := range rounds {
		fill(src.Bytes(), k)
		postSend(t, ea.qp, &rdma.SendWR{WRID: uint64(2 * k), Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
		postSend(t, ea.qp, &rdma.SendWR{WRID: uint64(2*k + 1), Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{sge(back, 0, n)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
		wcs := poll(t, ea.scq, 2, 30*time.Second)
		checkWC(t, wcs[0], uint64(2*k), rdma.Success)
		checkWC(t, wcs[1], uint64(2*k+1), rdma.Success)
		if !bytes.Equal(src.Bytes(), back.Bytes()) {
			t.Fatalf("round %d: data read back differs", k)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("a: %d retransmissions, %d CNPs handled, %d sent; b: %d CNPs handled, %d sent", sa.Retransmissions, sa.RPCNPHandled, sa.NPCNPSent, sb.RPCNPHandled, sb.NPCNPSent)
	if sa.RPCNPHandled == 0 || sb.NPCNPSent == 0 || sa.Retransmissions == 0 || sb.FaultDrops == 0 {
		t.Fatalf("no congestion or no loss: a %+v\nb %+v", sa, sb)
	}
}

// TestPacingHoldsRate: after a CNP cuts a QP to 40 Mb/s (its rate
// increase held off), 512 KiB it sends take at least the time that rate
// allows beyond the pacer's burst, and arrive intact: RDMA WRITE data
// from its requester, and READ responses from its responder (the paced
// queue). The pacing timer, not only returning ACKs, restarts the
// sending: without it the transfer stalls once every packet sent is
// acknowledged, until a retransmission timeout (4.3 s here).
func TestPacingHoldsRate(t *testing.T) {
	const line, size = 80e6, 512 << 10
	for _, tc := range []struct {
		name string
		op   rdma.WROpcode
		last byte
	}{{"WRITE", rdma.WRRDMAWrite, 101}, {"READ responses", rdma.WRRDMARead, 102}} {
		t.Run(tc.name, func(t *testing.T) {
			cc := &CongestionConfig{Enabled: true, LineRate: line, IncreasePeriod: time.Hour, ByteCounter: 1 << 40}
			a, b := ccPair(t, "GSO", tc.last, Config{Congestion: cc}, Config{Congestion: cc})
			ea, eb := connect(t, a, b, qpOpts{timeout: 20})
			local := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
			remote := regMR(t, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			fill(local.Bytes(), 5)
			fill(remote.Bytes(), 6)
			// The data's sender is cut: a for a WRITE, b for a READ.
			sender, sq, peer := a, ea.qp.QPN(), b
			if tc.op == rdma.WRRDMARead {
				sender, sq, peer = b, eb.qp.QPN(), a
			}
			sendCNP(peer, sender.Addr(), sq)
			waitUntil(t, 5*time.Second, "the CNP handled", func() bool { return sender.Stats().RPCNPHandled == 1 })
			rate := qpStat(t, sender, sq).RPRate
			if rate != line/2 {
				t.Fatalf("rate %d after one CNP, want %g", rate, line/2)
			}
			want := bytes.Clone(local.Bytes())
			if tc.op == rdma.WRRDMARead {
				want = bytes.Clone(remote.Bytes())
			}
			start := time.Now()
			postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: tc.op, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{sge(local, 0, size)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()})
			checkWC(t, poll(t, ea.scq, 1, 3*time.Second)[0], 1, rdma.Success)
			el := time.Since(start)
			// The payload beyond the burst, at the rate (headers make it
			// longer).
			least := time.Duration(float64(size-ccBurst) * 8 / float64(rate) * float64(time.Second))
			t.Logf("512 KiB in %v at %d b/s (at least %v)", el, rate, least)
			if el < least {
				t.Fatalf("512 KiB in %v, faster than %d b/s allows (%v)", el, rate, least)
			}
			got := local.Bytes()
			if tc.op == rdma.WRRDMAWrite {
				got = remote.Bytes()
			}
			if !bytes.Equal(got, want) {
				t.Fatal("data differs")
			}
			if s := sender.Stats(); s.PacedDrops != 0 || s.Retransmissions != 0 || a.Stats().Retransmissions != 0 {
				t.Fatalf("sender %+v", s)
			}
		})
	}
}
