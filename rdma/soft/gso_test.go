package soft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// gsoMove moves one message of n bytes from ea to eb with op (SEND, RDMA
// WRITE or RDMA READ) and checks every byte and the guard bytes after it.
// The source of a READ is not refilled: a duplicate READ request that
// arrives late is executed again and reads it (its responses are
// discarded), which the race detector would see racing with a refill.
func gsoMove(t *testing.T, ea, eb *end, src, dst rdma.MR, op rdma.WROpcode, n int, wrid uint64) {
	t.Helper()
	const guard = 64
	if op != rdma.WRRDMARead {
		fill(src.Bytes()[:n], int(wrid))
	}
	fill(dst.Bytes()[:n+guard], -int(wrid))
	guardBefore := append([]byte(nil), dst.Bytes()[n:n+guard]...)
	wr := rdma.SendWR{WRID: wrid, Opcode: op, Flags: rdma.SendSignaled}
	switch op {
	case rdma.WRSend:
		postRecv(t, eb.qp, wrid, sge(dst, 0, n+guard))
		wr.SGL = []rdma.SGE{sge(src, 0, n)}
	case rdma.WRRDMAWrite:
		wr.SGL = []rdma.SGE{sge(src, 0, n)}
		wr.RemoteAddr, wr.RKey = dst.Addr(), dst.RKey()
	case rdma.WRRDMARead:
		// A READ brings src (remote, at eb) into dst (local, at ea).
		wr.SGL = []rdma.SGE{sge(dst, 0, n)}
		wr.RemoteAddr, wr.RKey = src.Addr(), src.RKey()
	}
	postSend(t, ea.qp, &wr)
	checkWC(t, poll(t, ea.scq, 1, 20*time.Second)[0], wrid, rdma.Success)
	if op == rdma.WRSend {
		wc := poll(t, eb.rcq, 1, 20*time.Second)[0]
		checkWC(t, wc, wrid, rdma.Success)
		if wc.ByteLen != uint32(n) {
			t.Fatalf("%s of %d bytes: received %d", op, n, wc.ByteLen)
		}
	}
	if !bytes.Equal(dst.Bytes()[:n], src.Bytes()[:n]) {
		t.Fatalf("%s of %d bytes: data differs", op, n)
	}
	if !bytes.Equal(dst.Bytes()[n:n+guard], guardBefore) {
		t.Fatalf("%s of %d bytes: written beyond the message", op, n)
	}
}

// TestGSODataPath moves SENDs, RDMA WRITEs and RDMA READs of 0 B to
// 16 MiB at path MTU 1024 and 4096 between two loopback devices, which
// send bulk runs with UDP GSO and split what they receive: without
// faults, and with loss, duplication, reordering and corruption on the
// send side of one device and the receive side of the other. Every byte
// must arrive; without faults no packet may fail its ICRC.
func TestGSODataPath(t *testing.T) {
	maxSize := 16 << 20
	if raceEnabled || testing.Short() {
		maxSize = 1 << 20
	}
	faulty := func(seed uint64) *FaultConfig {
		return &FaultConfig{Drop: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: seed}
	}
	for _, tc := range []struct {
		name string
		a, b Config
		max  int
	}{
		{"clean", Config{}, Config{}, maxSize},
		// A window of 64 packets with faults: at about 6 % of packets
		// lost or out of order, each go-back-N round of the default 256
		// resent a dozen packets for each one that got through (42000
		// of 46000 sent), and the stale ones queued at the responder
		// delayed the resent one past eight timeouts on a loaded machine.
		{"faults", Config{SendFaults: faulty(1), RecvFaults: faulty(2), MaxUnacked: 64}, Config{SendFaults: faulty(3), RecvFaults: faulty(4), MaxUnacked: 64}, min(maxSize, 4<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, tc.a, tc.b)
			if !a.socks.gsoMode || !b.socks.gsoMode {
				t.Fatal("loopback devices do not use GSO")
			}
			for _, mtu := range []rdma.MTU{rdma.MTU1024, rdma.MTU4096} {
				t.Run(fmt.Sprintf("mtu%d", mtu.Bytes()), func(t *testing.T) {
					m := mtu.Bytes()
					o := qpOpts{mtu: mtu, psnA: 0xffffff - 20, psnB: 0xfffff0, timeout: lossTimeout, sendWR: 64, recvWR: 64, cqe: 256}
					ea, eb := connect(t, a, b, o)
					const guard = 64
					srcA := regMR(t, ea.pd, tc.max, rdma.AccessLocalWrite)
					memB := regMR(t, eb.pd, tc.max+guard, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
					readA := regMR(t, ea.pd, tc.max+guard, rdma.AccessLocalWrite)
					readB := regMR(t, eb.pd, tc.max, rdma.AccessRemoteRead)
					fill(readB.Bytes(), 99)
					sizes := []int{0, 1, m - 1, m, m + 1, 2 * m, 2*m + 4, 15*m + 3, 16 * m, 64<<10 + 1, 1 << 20, tc.max}
					wrid := uint64(0)
					for _, n := range sizes {
						for _, op := range []rdma.WROpcode{rdma.WRSend, rdma.WRRDMAWrite, rdma.WRRDMARead} {
							if op == rdma.WRSend && n > 1<<20 {
								continue
							}
							wrid++
							if op == rdma.WRRDMARead {
								// READ brings readB into readA.
								gsoMove(t, ea, eb, readB, readA, op, n, wrid)
							} else {
								gsoMove(t, ea, eb, srcA, memB, op, n, wrid)
							}
						}
					}
				})
			}
			sa, sb := a.Stats(), b.Stats()
			ga, gb := &a.socks.gso, &b.socks.gso
			t.Logf("A: %d GSO sends (%d packets), %d split (%d packets); B: %d GSO sends (%d packets), %d split (%d packets)",
				ga.sends.Load(), ga.sentSegs.Load(), ga.supers.Load(), ga.recvSegs.Load(),
				gb.sends.Load(), gb.sentSegs.Load(), gb.supers.Load(), gb.recvSegs.Load())
			t.Logf("A %+v", sa)
			t.Logf("B %+v", sb)
			if ga.sends.Load() == 0 || gb.sends.Load() == 0 || ga.supers.Load() == 0 || gb.supers.Load() == 0 {
				t.Error("GSO unused")
			}
			if ga.disabled.Load() || gb.disabled.Load() {
				t.Error("GSO disabled after a send error")
			}
			if sa.SendErrors != 0 || sb.SendErrors != 0 {
				t.Errorf("send errors: %d, %d", sa.SendErrors, sb.SendErrors)
			}
			t.Logf("A %+v\nB %+v", sa, sb)
			if tc.a.SendFaults == nil && (sa.ICRCErrors != 0 || sb.ICRCErrors != 0 || sa.Malformed != 0 || sb.Malformed != 0) {
				t.Errorf("ICRC errors %d, %d; malformed %d, %d", sa.ICRCErrors, sb.ICRCErrors, sa.Malformed, sb.Malformed)
			}
		})
	}
}

// TestGSOKernelHeader checks on loopback what GSO mode relies on: runs
// sent with UDP_SEGMENT reach a raw socket as one datagram each, with IP
// ID 0, DF and the headers putIPv4UDPHeaderID writes; split at the
// segment size, every segment's ICRC verifies with IP ID k and the
// headers the splitter rebuilds.
func TestGSOKernelHeader(t *testing.T) {
	capture := captureAt(t, addrB.As4())
	a := openDev(t, Config{Addr: addrA})
	if !a.socks.gsoMode || a.socks.hasRaw() {
		t.Fatal("loopback device not in GSO mode, or with a raw socket")
	}
	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, a, &o)
	bringUp(t, e, addrB, 0x4242, 1000, 2000, &o)
	src := regMR(t, e.pd, 8192, 0)
	fill(src.Bytes(), 3)
	// WRITE First (1056 bytes) and Middle (1040) in one GSO send, then
	// Middle ×4 and Last (116) in another.
	postSend(t, e.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, 6*1024+100)}, RemoteAddr: 0x1000, RKey: 7})
	psn := uint32(1000)
	for i, want := range []struct{ seg, segs, n int }{{1056, 2, 1056 + 1040}, {1040, 5, 4*1040 + 116}} {
		super := capture()
		ip, udp, pkt, err := wire.SplitIPUDP(super)
		if err != nil {
			t.Fatal(err)
		}
		if len(ip) != wire.IPv4HeaderLen || len(pkt) != want.n {
			t.Fatalf("super-datagram %d: IP header %d bytes, UDP payload %d; want 20, %d", i, len(ip), len(pkt), want.n)
		}
		sport := rcSourcePort(0, e.qp.QPN(), 0x4242) // the QP's own (sport.go)
		kh := make([]byte, 28)
		putIPv4UDPHeaderPorts(kh, addrA.As4(), addrB.As4(), 0, sport, wire.UDPPort, len(pkt))
		got := append(append([]byte(nil), ip...), udp[:6]...)
		if !bytes.Equal(got, kh[:26]) {
			t.Errorf("super-datagram %d header\n% x\nwant\n% x", i, got, kh[:26])
		}
		var s gsoSplitter
		s.start(super, addrA.As4(), addrB.As4(), sport, want.seg)
		if s.segments() != want.segs {
			t.Fatalf("super-datagram %d: %d segments, want %d", i, s.segments(), want.segs)
		}
		for k := 0; ; k++ {
			dg, ok := s.next()
			if !ok {
				break
			}
			if err := wire.CheckICRC(dg); err != nil {
				t.Fatalf("super-datagram %d segment %d: %v", i, k, err)
			}
			want := make([]byte, 28)
			putIPv4UDPHeaderPorts(want, addrA.As4(), addrB.As4(), uint16(k), sport, wire.UDPPort, len(dg)-28)
			if !bytes.Equal(dg[:28], want) {
				t.Errorf("segment %d header\n% x\nwant\n% x", k, dg[:28], want)
			}
			if b := wire.BTH(dg[28:]); b.PSN() != psn {
				t.Errorf("segment %d: %s, want PSN %d", k, b, psn)
			}
			psn++
		}
	}
}

// gsoPayload builds a received buffer as rxLoop holds it: rxHeadroom
// bytes, then the packets (BTH through pad) with the ICRC of packet k
// computed for IP ID id0+k (0 for every packet if id0 < 0) and source
// src:sport, as a GSO send of them would carry.
func gsoPayload(src, dst [4]byte, sport uint16, id0 int, pkts ...[]byte) []byte {
	b := make([]byte, rxHeadroom)
	for k, p := range pkts {
		id := uint16(0)
		if id0 >= 0 {
			id = uint16(id0 + k)
		}
		c := wire.ICRCForIPv4(src, dst, id, true, sport, wire.UDPPort, p)
		b = binary.LittleEndian.AppendUint32(append(b, p...), c)
	}
	return b
}

// gsoPacket builds an RC packet without ICRC: opcode op, PSN psn, to QP
// qpn, with ext as extended headers and n payload bytes of pattern seed.
func gsoPacket(op wire.Opcode, qpn, psn uint32, ext []byte, n, seed int) []byte {
	b := make([]byte, wire.BTHLen, wire.BTHLen+len(ext)+n+3)
	writeBTH(b, op, false, wire.PadFor(n), qpn, psn, false)
	b = append(b, ext...)
	pl := make([]byte, n+wire.PadFor(n))
	fill(pl[:n], seed)
	return append(b, pl...)
}

// TestGSOReceive feeds hand-built payloads to the receive path of a
// loopback device whose RC QP (path MTU 1024) is connected to addrA:
// a good GSO run is split and its RDMA WRITE lands; runs of small SENDs
// and ACKs are split; a truncated run, a run cut at the wrong size, ICRCs
// computed for other IP IDs (a sender that does not number as the kernel
// does for our sockets), another source port, a corrupted segment and
// garbage are counted as ICRC errors or malformed, and nothing wrong is
// written.
func TestGSOReceive(t *testing.T) {
	b := openDev(t, Config{Addr: addrB})
	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, b, &o)
	const peerQPN, psn0 = 0x123, 500
	bringUp(t, e, addrA, peerQPN, 1, psn0, &o)
	mem := regMR(t, e.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	qpn := e.qp.QPN()
	src, dst := addrA.As4(), addrB.As4()
	const port = wire.UDPPort
	reth := make([]byte, wire.RETHLen)
	const n = 4*1024 + 10
	wire.RETH(reth).Set(mem.Addr(), mem.RKey(), n)
	first := gsoPacket(wire.RCRDMAWriteFirst, qpn, psn0, reth, 1024, 0)
	var mids [][]byte
	for k := 1; k <= 3; k++ {
		mids = append(mids, gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+uint32(k), nil, 1024, k))
	}
	last := gsoPacket(wire.RCRDMAWriteLast, qpn, psn0+4, nil, 10, 4)
	run := append(mids, last)
	good := gsoPayload(src, dst, port, 0, run...)
	const seg = 12 + 1024 + 4

	rx := &rxState{tx: newTxBatch(b), reqTx: newTxBatch(b), held: make([]byte, rxGSOBufSize)}
	feed := func(buf []byte, sport uint16, seg int) int {
		c := append([]byte(nil), buf...)
		rx.split.startPort(c, src, b.addr4, sport, b.port, seg)
		np, _ := b.receive(rx, nil)
		b.finishBatch(rx)
		return np
	}
	bad := func(name string, buf []byte, sport uint16, seg, wantPkts, wantErrs int) {
		t.Helper()
		before := b.Stats()
		memBefore := append([]byte(nil), mem.Bytes()...)
		if np := feed(buf, sport, seg); np != wantPkts {
			t.Errorf("%s: %d packets, want %d", name, np, wantPkts)
		}
		after := b.Stats()
		if errs := after.ICRCErrors + after.Malformed - before.ICRCErrors - before.Malformed; errs != uint64(wantErrs) {
			t.Errorf("%s: %d ICRC errors and malformed, want %d", name, errs, wantErrs)
		}
		if !bytes.Equal(mem.Bytes(), memBefore) {
			t.Errorf("%s: memory changed", name)
		}
	}
	// Before the WRITE First: the responder ignores the Middles whose ICRC
	// verifies (out of sequence).
	bad("truncated", good[:len(good)-100], port, seg, 3, 1)
	bad("wrong segment size", gsoPayload(src, dst, port, 0,
		gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+1, nil, 2048, 1), gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+2, nil, 2048, 2)), port, seg, 4, 4)
	bad("ICRCs for IP IDs 1..4", gsoPayload(src, dst, port, 1, run...), port, seg, 4, 4)
	bad("ICRCs for IP ID 0 in every segment", gsoPayload(src, dst, port, -1, run...), port, seg, 4, 3)
	bad("plain datagram, ICRC for IP ID 5", gsoPayload(src, dst, port, 5, mids[0]), port, 0, 1, 1)
	bad("another source port", good, port+1, seg, 4, 4)
	bad("corrupted second segment", func() []byte {
		d := append([]byte(nil), good...)
		d[rxHeadroom+seg+100] ^= 4
		return d
	}(), port, seg, 4, 1)
	bad("garbage", append(make([]byte, rxHeadroom), bytes.Repeat([]byte{0x45}, 3000)...), port, 0, 1, 1)
	bad("garbage in runs", append(make([]byte, rxHeadroom), bytes.Repeat([]byte{0x45}, 3000)...), port, 7, 429, 429)

	// The good run, after its WRITE First (a plain datagram: IP ID 0).
	if np := feed(gsoPayload(src, dst, port, 0, first), port, 0); np != 1 {
		t.Fatalf("WRITE First: %d packets", np)
	}
	before := b.Stats()
	supers := b.socks.gso.supers.Load()
	if np := feed(good, port, seg); np != 4 {
		t.Fatalf("good run: %d packets", np)
	}
	if s := b.Stats(); s.ICRCErrors != before.ICRCErrors || s.Malformed != before.Malformed || s.Dropped != before.Dropped {
		t.Fatalf("good run: %+v", s)
	}
	want := make([]byte, n)
	fill(want[:1024], 0)
	for k := 1; k <= 3; k++ {
		fill(want[k*1024:(k+1)*1024], k)
	}
	fill(want[4096:], 4)
	if !bytes.Equal(mem.Bytes()[:n], want) {
		t.Fatal("RDMA WRITE data differs")
	}
	if got := b.socks.gso.supers.Load(); got != supers+1 {
		t.Fatalf("%d super-datagrams counted, want 1", got-supers)
	}

	// Runs of small packets: SENDs of 16..200 bytes (a shorter one last)
	// and ACKs, 64 to a run. Without receives posted the SENDs are RNR
	// NAKed and the ACKs acknowledge nothing: what counts is that every
	// packet passes its ICRC and reaches the QP.
	aeth := make([]byte, wire.AETHLen)
	wire.AETH(aeth).Set(ackSyndrome, 0)
	for _, tc := range []struct {
		name string
		op   wire.Opcode
		ext  []byte
		size int
	}{
		{"SEND 16", wire.RCSendOnly, nil, 16},
		{"SEND 33", wire.RCSendOnly, nil, 33},
		{"SEND 64", wire.RCSendOnly, nil, 64},
		{"SEND 200", wire.RCSendOnly, nil, 200},
		{"ACK", wire.RCAcknowledge, aeth, 0},
	} {
		var pkts [][]byte
		for k := range 64 {
			n := tc.size
			if k == 63 && n > 0 {
				n-- // a shorter last packet
			}
			pkts = append(pkts, gsoPacket(tc.op, qpn, uint32(psn0+5+k), tc.ext, n, k))
		}
		seg := len(pkts[0]) + wire.ICRCLen
		before := b.Stats()
		if np := feed(gsoPayload(src, dst, port, 0, pkts...), port, seg); np != 64 {
			t.Errorf("%s: %d packets, want 64", tc.name, np)
		}
		after := b.Stats()
		if after.ICRCErrors != before.ICRCErrors || after.Malformed != before.Malformed || after.UnknownQP != before.UnknownQP {
			t.Errorf("%s: %+v", tc.name, after)
		}
		if tc.op == wire.RCAcknowledge && after.ACKsReceived-before.ACKsReceived != 64 {
			t.Errorf("%s: %d ACKs received", tc.name, after.ACKsReceived-before.ACKsReceived)
		}
	}
}

// TestGSOSplitter checks the splitter alone: packet boundaries, rebuilt
// headers (IP ID k, lengths, checksum, ports) and the ICRCs of runs built
// for IP IDs from 0.
func TestGSOSplitter(t *testing.T) {
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	mid := func(k, n int) []byte { return gsoPacket(wire.RCSendMiddle, 0x77, uint32(k), nil, n, k) }
	ack := func(k int) []byte {
		return gsoPacket(wire.RCAcknowledge, 0x77, uint32(k), []byte{0, 0, 0, byte(k)}, 0, 0)
	}
	for _, tc := range []struct {
		name  string
		buf   []byte
		sport uint16
		seg   int
		segs  int
		good  int // segments whose ICRC verifies
	}{
		{"two", gsoPayload(src, dst, 4791, 0, mid(0, 256), mid(1, 256)), 4791, 16 + 256, 2, 2},
		{"short last", gsoPayload(src, dst, 4791, 0, mid(0, 4096), mid(1, 4096), mid(2, 1)), 4791, 16 + 4096, 3, 3},
		{"64 ACKs", gsoPayload(src, dst, 4791, 0, func() (p [][]byte) {
			for k := range 64 {
				p = append(p, ack(k))
			}
			return p
		}()...), 4791, 20, 64, 64},
		{"SENDs of 17 bytes", gsoPayload(src, dst, 1234, 0, mid(0, 17), mid(1, 17), mid(2, 17)), 1234, 16 + 20, 3, 3},
		{"plain", gsoPayload(src, dst, 4791, 0, mid(0, 1024)), 4791, 0, 1, 1},
		{"segment size beyond the payload", gsoPayload(src, dst, 4791, 0, mid(0, 100)), 4791, 9000, 1, 1},
		{"segment size too small", gsoPayload(src, dst, 4791, 0, mid(0, 1024), mid(1, 1024)), 4791, 16 + 512, 4, 0},
		{"segment size too large", gsoPayload(src, dst, 4791, 0, mid(0, 1024), mid(1, 1024), mid(2, 1024)), 4791, 2 * (16 + 1024), 2, 0},
		{"ICRC for IDs from 1", gsoPayload(src, dst, 4791, 1, mid(0, 64), mid(1, 64)), 4791, 16 + 64, 2, 0},
		{"port differs", gsoPayload(src, dst, 4791, 0, mid(0, 64), mid(1, 64)), 4790, 16 + 64, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			payload := append([]byte(nil), tc.buf[rxHeadroom:]...)
			var s gsoSplitter
			s.start(tc.buf, src, dst, tc.sport, tc.seg)
			if s.segments() != tc.segs {
				t.Errorf("%d segments, want %d", s.segments(), tc.segs)
			}
			var joined []byte
			k, good := 0, 0
			for dg, ok := s.next(); ok; dg, ok = s.next() {
				sip, sudp, spkt, err := wire.SplitIPUDP(dg)
				if err != nil || len(sip)+len(sudp)+len(spkt) != len(dg) {
					t.Fatalf("segment %d: %v", k, err)
				}
				want := make([]byte, 28)
				putIPv4UDPHeaderPorts(want, src, dst, uint16(k), tc.sport, wire.UDPPort, len(spkt))
				if !bytes.Equal(dg[:28], want) {
					t.Errorf("segment %d header\n% x\nwant\n% x", k, dg[:28], want)
				}
				if ipv4Checksum(sip) != 0 {
					t.Errorf("segment %d: IP header checksum", k)
				}
				if wire.CheckICRC(dg) == nil {
					good++
				}
				joined = append(joined, spkt...)
				k++
			}
			if k != tc.segs || good != tc.good {
				t.Errorf("%d segments, %d with a good ICRC; want %d, %d", k, good, tc.segs, tc.good)
			}
			if !bytes.Equal(joined, payload) {
				t.Error("segments do not add up to the payload")
			}
		})
	}
}

// FuzzGSOSplit splits arbitrary payloads at arbitrary segment sizes: no
// panic, and the splitter gives complete IPv4 datagrams of at most the
// segment size, numbered from IP ID 0, whose payloads add up to the
// original UDP payload.
func FuzzGSOSplit(f *testing.F) {
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	// The input describes the super-datagram instead of being it: Go's
	// fuzzer minimizes every new input byte by byte, which stalls on
	// kilobyte inputs. size is its length, fill the byte repeated, patch
	// a few bytes written at off (a BTH, a short run), seg the segment
	// size the kernel reports.
	mid := gsoPacket(wire.RCRDMAWriteMiddle, 0x77, 1, nil, 16, 1)
	f.Add(uint16(3*1040), byte(0), uint16(0), mid, uint16(1040))
	f.Add(uint16(64), byte(0xa5), uint16(32), mid, uint16(32))
	f.Add(uint16(8192), byte(1), uint16(4096), mid, uint16(2048))
	f.Add(uint16(100), byte(0), uint16(0), mid, uint16(0))
	f.Add(uint16(1), byte(0x46), uint16(0), []byte{}, uint16(1))
	f.Add(uint16(65507), byte(0xff), uint16(65500), mid, uint16(1))
	f.Fuzz(func(t *testing.T, size uint16, fill byte, off uint16, patch []byte, seg uint16) {
		if size == 0 || int(size) > gsoMaxPayload || len(patch) > 64 {
			return
		}
		payload := bytes.Repeat([]byte{fill}, int(size))
		if int(off) < len(payload) {
			copy(payload[off:], patch)
		}
		buf := append(make([]byte, rxHeadroom), payload...)
		var s gsoSplitter
		s.start(buf, src, dst, 4791, int(seg))
		n := s.segments()
		segSize := int(seg)
		if segSize == 0 || segSize > len(payload) {
			segSize = len(payload)
		}
		if n != (len(payload)+segSize-1)/segSize {
			t.Fatalf("%d segments of %d bytes for %d bytes", n, segSize, len(payload))
		}
		var joined []byte
		k := 0
		for d, ok := s.next(); ok; d, ok = s.next() {
			sip, _, spkt, err := wire.SplitIPUDP(d)
			if err != nil || len(sip) != wire.IPv4HeaderLen {
				t.Fatalf("segment %d: %v", k, err)
			}
			if id := binary.BigEndian.Uint16(sip[4:]); id != uint16(k) {
				t.Fatalf("segment %d: IP ID %d", k, id)
			}
			if len(spkt) > segSize || (len(spkt) < segSize && k != n-1) {
				t.Fatalf("segment %d of %d: %d bytes, segment size %d", k, n, len(spkt), segSize)
			}
			_ = wire.CheckICRC(d)
			joined = append(joined, spkt...)
			k++
		}
		if k != n || !bytes.Equal(joined, payload) {
			t.Fatalf("%d of %d segments; payload rebuilt: %v", k, n, bytes.Equal(joined, payload))
		}
	})
}

// TestGSOSmallRuns moves what NVMe/RDMA at 4 KiB moves, over four RC
// connections between two loopback devices in GSO mode: chains of SENDs
// of 16..200 bytes (runs of equal-size packets, whose ACKs for several
// QPs form runs too), and chains of READs, WRITEs and SENDs (runs of
// READ requests, of WRITE Only packets ended by a SEND, of SENDs): clean,
// and with every fault on the send and receive sides of both devices.
// Every byte must arrive.
func TestGSOSmallRuns(t *testing.T) {
	faulty := func(seed uint64) *FaultConfig {
		return &FaultConfig{Drop: 0.02, Duplicate: 0.02, Reorder: 0.02, Corrupt: 0.02, Seed: seed}
	}
	for _, tc := range []struct {
		name string
		a, b Config
	}{
		{"clean", Config{}, Config{}},
		{"faults", Config{SendFaults: faulty(5), RecvFaults: faulty(6)}, Config{SendFaults: faulty(7), RecvFaults: faulty(8)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, tc.a, tc.b)
			const conns, chain, rsize = 4, 32, 256
			type conn struct {
				ea, eb           *end
				src, recv        rdma.MR // A's SEND source, B's receive buffers
				rdSrc, rdDst     rdma.MR // READ: B's memory into A's
				wrSrc, wrDst     rdma.MR // WRITE: A's memory into B's
				sendWRs          []rdma.SendWR
				recvWRs          []rdma.RecvWR
				sendSGE, recvSGE []rdma.SGE
			}
			cs := make([]*conn, conns)
			for i := range cs {
				c := &conn{}
				c.ea, c.eb = connect(t, a, b, qpOpts{mtu: rdma.MTU4096, timeout: lossTimeout, psnA: 0xffffff - uint32(i), psnB: 100 * uint32(i),
					sendWR: 3 * chain, recvWR: chain, cqe: 4 * chain})
				c.src = regMR(t, c.ea.pd, chain*rsize, 0)
				c.recv = regMR(t, c.eb.pd, chain*rsize, rdma.AccessLocalWrite)
				c.rdSrc = regMR(t, c.eb.pd, chain*4096, rdma.AccessRemoteRead)
				c.rdDst = regMR(t, c.ea.pd, chain*4096, rdma.AccessLocalWrite)
				c.wrSrc = regMR(t, c.ea.pd, chain*4096, 0)
				c.wrDst = regMR(t, c.eb.pd, chain*4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
				c.sendWRs = make([]rdma.SendWR, 3*chain)
				c.recvWRs = make([]rdma.RecvWR, chain)
				c.sendSGE = make([]rdma.SGE, 3*chain)
				c.recvSGE = make([]rdma.SGE, chain)
				cs[i] = c
			}
			// post posts on every connection n receives of rsize bytes and
			// one chain of work requests that make(c, k) fills, then waits
			// for every completion.
			post := func(n, sends int, mk func(c *conn, k int, wr *rdma.SendWR)) {
				t.Helper()
				for _, c := range cs {
					for k := range n {
						c.recvSGE[k] = sge(c.recv, k*rsize, rsize)
						c.recvWRs[k] = rdma.RecvWR{WRID: uint64(k), SGL: c.recvSGE[k : k+1]}
						if k > 0 {
							c.recvWRs[k-1].Next = &c.recvWRs[k]
						}
					}
					if n > 0 {
						if err := c.eb.qp.PostRecv(&c.recvWRs[0]); err != nil {
							t.Fatal(err)
						}
					}
				}
				for _, c := range cs {
					for k := range sends {
						c.sendWRs[k] = rdma.SendWR{WRID: uint64(k), Flags: rdma.SendSignaled}
						mk(c, k, &c.sendWRs[k])
						if k > 0 {
							c.sendWRs[k-1].Next = &c.sendWRs[k]
						}
					}
					postSend(t, c.ea.qp, &c.sendWRs[0])
				}
				for _, c := range cs {
					for _, wc := range poll(t, c.ea.scq, sends, 20*time.Second) {
						if wc.Status != rdma.Success {
							t.Fatalf("send completion %+v", wc)
						}
					}
					if n > 0 {
						for _, wc := range poll(t, c.eb.rcq, n, 20*time.Second) {
							if wc.Status != rdma.Success {
								t.Fatalf("receive completion %+v", wc)
							}
						}
					}
				}
			}
			for _, size := range []int{16, 17, 64, 100, 199, 200} {
				for i, c := range cs {
					for k := range chain {
						fill(c.src.Bytes()[k*rsize:k*rsize+size], size+i+k)
					}
					clear(c.recv.Bytes())
				}
				post(chain, chain, func(c *conn, k int, wr *rdma.SendWR) {
					c.sendSGE[k] = sge(c.src, k*rsize, size)
					wr.Opcode, wr.SGL = rdma.WRSend, c.sendSGE[k:k+1]
				})
				for i, c := range cs {
					for k := range chain {
						if !bytes.Equal(c.recv.Bytes()[k*rsize:k*rsize+size], c.src.Bytes()[k*rsize:k*rsize+size]) {
							t.Fatalf("SEND %d bytes, connection %d message %d: data differs", size, i, k)
						}
					}
				}
			}
			// The nvme-rdma target's chains: READs, then WRITEs, then SENDs.
			const ios = 8
			for i, c := range cs {
				fill(c.rdSrc.Bytes(), 1000+i)
				fill(c.wrSrc.Bytes(), 2000+i)
				fill(c.src.Bytes(), 3000+i)
				clear(c.recv.Bytes())
			}
			post(ios, 3*ios, func(c *conn, k int, wr *rdma.SendWR) {
				j := k % ios
				switch k / ios {
				case 0:
					c.sendSGE[k] = sge(c.rdDst, j*4096, 4096)
					wr.Opcode, wr.RemoteAddr, wr.RKey = rdma.WRRDMARead, c.rdSrc.Addr()+uint64(j*4096), c.rdSrc.RKey()
				case 1:
					c.sendSGE[k] = sge(c.wrSrc, j*4096, 4096)
					wr.Opcode, wr.RemoteAddr, wr.RKey = rdma.WRRDMAWrite, c.wrDst.Addr()+uint64(j*4096), c.wrDst.RKey()
				default:
					c.sendSGE[k] = sge(c.src, j*rsize, 32)
					wr.Opcode = rdma.WRSend
				}
				wr.SGL = c.sendSGE[k : k+1]
			})
			for i, c := range cs {
				if !bytes.Equal(c.rdDst.Bytes()[:ios*4096], c.rdSrc.Bytes()[:ios*4096]) {
					t.Fatalf("connection %d: READ data differs", i)
				}
				if !bytes.Equal(c.wrDst.Bytes()[:ios*4096], c.wrSrc.Bytes()[:ios*4096]) {
					t.Fatalf("connection %d: WRITE data differs", i)
				}
				for k := range ios {
					if !bytes.Equal(c.recv.Bytes()[k*rsize:k*rsize+32], c.src.Bytes()[k*rsize:k*rsize+32]) {
						t.Fatalf("connection %d: SEND %d differs", i, k)
					}
				}
			}
			sa, sb := a.Stats(), b.Stats()
			ga, gb := &a.socks.gso, &b.socks.gso
			t.Logf("A: %d GSO sends (%d packets), %d split (%d packets); B: %d GSO sends (%d packets), %d split (%d packets)",
				ga.sends.Load(), ga.sentSegs.Load(), ga.supers.Load(), ga.recvSegs.Load(),
				gb.sends.Load(), gb.sentSegs.Load(), gb.supers.Load(), gb.recvSegs.Load())
			if ga.sends.Load() == 0 || gb.supers.Load() == 0 {
				t.Error("no runs of small packets")
			}
			t.Logf("A %+v\nB %+v", sa, sb)
			if tc.a.SendFaults == nil && (sa.ICRCErrors != 0 || sb.ICRCErrors != 0 || sa.Malformed != 0 || sb.Malformed != 0 || sa.SendErrors != 0 || sb.SendErrors != 0) {
				t.Errorf("A %+v\nB %+v", sa, sb)
			}
		})
	}
}

// TestGSOKernelRuns sends hand-built runs with UDP_SEGMENT from a plain
// UDP socket (addrA, an ephemeral port) to a device in GSO mode, so
// that the kernel's UDP_GRO delivery, msg_name and the control message
// are exercised: a run of 64 ACKs and a run of 16 SENDs of 37 bytes are
// split and delivered; a plain datagram whose ICRC was computed for IP ID
// 5 and a run whose ICRCs were all computed for IP ID 0 are caught (a
// sender that numbers otherwise than the kernel does for our sockets).
func TestGSOKernelRuns(t *testing.T) {
	b := openDev(t, Config{Addr: addrB})
	if b.socks.hasRaw() {
		t.Fatal("a device in GSO mode opened a raw socket")
	}
	pc, sport := plainUDP(t)
	rc, err := pc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	m := newMmsg(1, true)
	send := func(buf []byte, seg int) {
		t.Helper()
		m.setIov(0, buf[rxHeadroom:])
		m.setMsg(0, 0, 1, addrB.As16(), wire.UDPPort, seg, 0)
		if _, _, err := m.sendBatch(rc, 1); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what string, cond func(Stats) bool) {
		t.Helper()
		waitUntil(t, 5*time.Second, what, func() bool { return cond(b.Stats()) })
	}

	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, b, &o)
	const psn0 = 700
	bringUp(t, e, addrA, 0x321, 1, psn0, &o)
	qpn := e.qp.QPN()
	src, dst := addrA.As4(), addrB.As4()

	aeth := make([]byte, wire.AETHLen)
	wire.AETH(aeth).Set(ackSyndrome, 0)
	var acks [][]byte
	for range 64 {
		acks = append(acks, gsoPacket(wire.RCAcknowledge, qpn, 0, aeth, 0, 0))
	}
	send(gsoPayload(src, dst, sport, 0, acks...), 20)
	wait("64 ACKs", func(s Stats) bool { return s.ACKsReceived == 64 })

	mem := regMR(t, e.pd, 16*64, rdma.AccessLocalWrite)
	for k := range 16 {
		postRecv(t, e.qp, uint64(k), sge(mem, 64*k, 64))
	}
	var sends [][]byte
	for k := range 16 {
		sends = append(sends, gsoPacket(wire.RCSendOnly, qpn, psn0+uint32(k), nil, 37, k))
	}
	send(gsoPayload(src, dst, sport, 0, sends...), len(sends[0])+wire.ICRCLen)
	for k, wc := range poll(t, e.rcq, 16, 5*time.Second) {
		checkWC(t, wc, uint64(k), rdma.Success)
		want := make([]byte, 37)
		fill(want, k)
		if wc.ByteLen != 37 || !bytes.Equal(mem.Bytes()[64*k:64*k+37], want) {
			t.Fatalf("SEND %d: %d bytes, data differs", k, wc.ByteLen)
		}
	}
	// The receive counters are added at the end of the batch, after the
	// handlers delivered the completions.
	wait("80 packets counted", func(s Stats) bool { return s.PacketsReceived >= 80 })
	if s := b.Stats(); s.ICRCErrors != 0 || s.Malformed != 0 || s.PacketsReceived != 80 || b.socks.gso.supers.Load() != 2 || b.socks.gso.recvSegs.Load() != 80 {
		t.Fatalf("after the good runs: %d super-datagrams (%d packets); %+v", b.socks.gso.supers.Load(), b.socks.gso.recvSegs.Load(), s)
	}

	send(gsoPayload(src, dst, sport, 5, acks[0]), 0)
	wait("ICRC for IP ID 5", func(s Stats) bool { return s.ICRCErrors == 1 && s.PacketsReceived == 81 })
	send(gsoPayload(src, dst, sport, -1, acks[:8]...), 20)
	wait("ICRCs for IP ID 0", func(s Stats) bool { return s.ICRCErrors == 8 && s.PacketsReceived == 89 && s.ACKsReceived == 65 })
}
