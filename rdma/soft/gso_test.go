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
		{"faults", Config{SendFaults: faulty(1), RecvFaults: faulty(2)}, Config{SendFaults: faulty(3), RecvFaults: faulty(4)}, min(maxSize, 4<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, tc.a, tc.b)
			if !a.socks.gsoSend || !b.socks.gsoSend {
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
			if tc.a.SendFaults == nil && (sa.ICRCErrors != 0 || sb.ICRCErrors != 0 || sa.Malformed != 0 || sb.Malformed != 0) {
				t.Errorf("ICRC errors %d, %d; malformed %d, %d", sa.ICRCErrors, sb.ICRCErrors, sa.Malformed, sb.Malformed)
			}
		})
	}
}

// TestGSOKernelHeader checks on loopback what the GSO path relies on: a
// run sent with UDP_SEGMENT reaches a raw socket as one datagram with IP
// ID 0 and DF; split by the rule of gso.go, every segment's ICRC verifies
// with IP ID k.
func TestGSOKernelHeader(t *testing.T) {
	capture := captureAt(t, addrB.As4())
	a := openDev(t, Config{Addr: addrA})
	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, a, &o)
	bringUp(t, e, addrB, 0x4242, 1000, 2000, &o)
	src := regMR(t, e.pd, 8192, 0)
	fill(src.Bytes(), 3)
	// WRITE First alone, then Middle ×5 and Last in one GSO send.
	postSend(t, e.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, 6*1024+100)}, RemoteAddr: 0x1000, RKey: 7})
	first := capture()
	if err := wire.CheckICRC(first); err != nil {
		t.Fatalf("WRITE First: %v", err)
	}
	super := capture()
	ip, udp, pkt, err := wire.SplitIPUDP(super)
	if err != nil {
		t.Fatal(err)
	}
	if id, flags := binary.BigEndian.Uint16(ip[4:]), binary.BigEndian.Uint16(ip[6:]); id != 0 || flags != 0x4000 {
		t.Errorf("IP ID %#x flags %#x, want ID 0 and DF", id, flags)
	}
	if want := 5*(12+1024+4) + 12 + 100 + 4; len(pkt) != want || int(binary.BigEndian.Uint16(udp[4:])) != 8+want {
		t.Fatalf("super-datagram UDP payload %d bytes, UDP length %d; want %d", len(pkt), binary.BigEndian.Uint16(udp[4:]), want)
	}
	seg := gsoSplitSize(pkt, 1024)
	var s gsoSplitter
	if seg != 12+1024+4 || !s.start(super, len(ip), 8+len(pkt), seg) || s.segments() != 6 {
		t.Fatalf("segment size %d, %d segments", seg, s.segments())
	}
	for k := 0; ; k++ {
		dg, ok := s.next()
		if !ok {
			if k != 6 {
				t.Fatalf("%d segments", k)
			}
			break
		}
		if err := wire.CheckICRC(dg); err != nil {
			t.Fatalf("segment %d: %v", k, err)
		}
		if id := binary.BigEndian.Uint16(dg[4:]); id != uint16(k) {
			t.Errorf("segment %d: IP ID %d", k, id)
		}
		want := make([]byte, 28)
		putIPv4UDPHeaderID(want, addrA.As4(), addrB.As4(), uint16(k), len(dg)-28)
		dg[26], dg[27] = 0, 0 // UDP checksum: copied from the super-datagram
		if !bytes.Equal(dg[:28], want) {
			t.Errorf("segment %d header\n% x\nwant\n% x", k, dg[:28], want)
		}
		_, _, p, _ := wire.SplitIPUDP(dg)
		if b := wire.BTH(p); b.PSN() != uint32(1001+k) {
			t.Errorf("segment %d: %s", k, b)
		}
	}
}

// gsoSuper builds a super-datagram from src to dst as the kernel delivers
// it on lo: the packets (BTH through pad, ICRC appended here for IP ID
// id0+k) concatenated behind one IP header with ID id0.
func gsoSuper(src, dst [4]byte, id0 uint16, pkts ...[]byte) []byte {
	var payload []byte
	for k, p := range pkts {
		c := wire.ICRCForIPv4(src, dst, id0+uint16(k), true, wire.UDPPort, wire.UDPPort, p)
		payload = binary.LittleEndian.AppendUint32(append(payload, p...), c)
	}
	b := make([]byte, 28, 28+len(payload))
	putIPv4UDPHeaderID(b, src, dst, id0, len(payload))
	return append(b, payload...)
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

// TestGSOSplit feeds hand-built super-datagrams to a loopback device
// whose RC QP has path MTU 1024: a good one is split and its RDMA WRITE
// lands; truncated ones, a run cut at the wrong size (as from a peer with
// another MTU), a wrong IP ID, a corrupted segment and garbage are
// counted as ICRC errors or malformed, and nothing wrong is written.
func TestGSOSplit(t *testing.T) {
	b := openDev(t, Config{Addr: addrB})
	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, b, &o)
	const peerQPN, psn0 = 0x123, 500
	bringUp(t, e, addrA, peerQPN, 1, psn0, &o)
	mem := regMR(t, e.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	qpn := e.qp.QPN()
	src, dst := addrA.As4(), addrB.As4()
	reth := make([]byte, wire.RETHLen)
	const n = 4*1024 + 10
	wire.RETH(reth).Set(mem.Addr(), mem.RKey(), n)
	first := gsoPacket(wire.RCRDMAWriteFirst, qpn, psn0, reth, 1024, 0)
	var mids [][]byte
	for k := 1; k <= 3; k++ {
		mids = append(mids, gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+uint32(k), nil, 1024, k))
	}
	last := gsoPacket(wire.RCRDMAWriteLast, qpn, psn0+4, nil, 10, 4)
	good := gsoSuper(src, dst, 0, append(mids, last)...)

	rx := &rxState{tx: newTxBatch(b), reqTx: newTxBatch(b), held: make([]byte, rxGSOBufSize)}
	feed := func(dg []byte) int {
		c := append([]byte(nil), dg...)
		np, _ := b.receive(c, rx, nil)
		b.finishBatch(rx)
		return np
	}
	bad := func(name string, dg []byte, wantPkts, wantErrs int) {
		t.Helper()
		before := b.Stats()
		memBefore := append([]byte(nil), mem.Bytes()...)
		if np := feed(dg); np != wantPkts {
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
	bad("truncated UDP length", func() []byte {
		d := append([]byte(nil), good...)
		binary.BigEndian.PutUint16(d[2:], uint16(len(d)-100))
		binary.BigEndian.PutUint16(d[24:], uint16(len(d)-100-20))
		return d[:len(d)-100]
	}(), 3, 1)
	bad("wrong segment size", gsoSuper(src, dst, 0,
		gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+1, nil, 2048, 1), gsoPacket(wire.RCRDMAWriteMiddle, qpn, psn0+2, nil, 2048, 2)), 4, 4)
	bad("wrong IP ID", func() []byte {
		d := append([]byte(nil), good...)
		d[5] = 1
		return d
	}(), 4, 4)
	bad("corrupted second segment", func() []byte {
		d := append([]byte(nil), good...)
		d[28+1040+100] ^= 4
		return d
	}(), 4, 1)
	bad("IP total length beyond the datagram", good[:len(good)-1], 1, 1)
	bad("garbage", bytes.Repeat([]byte{0x45}, 3000), 1, 1)

	// The good run, after its WRITE First.
	if np := feed(gsoSuper(src, dst, 0, first)); np != 1 {
		t.Fatalf("WRITE First: %d packets", np)
	}
	before := b.Stats()
	if np := feed(good); np != 4 {
		t.Fatalf("good super-datagram: %d packets", np)
	}
	if s := b.Stats(); s.ICRCErrors != before.ICRCErrors || s.Malformed != before.Malformed || s.Dropped != before.Dropped {
		t.Fatalf("good super-datagram: %+v", s)
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
	if got := b.socks.gso.supers.Load(); got == 0 {
		t.Fatal("no super-datagram counted")
	}
}

// TestGSOSplitter checks the splitter alone on hand-built datagrams.
func TestGSOSplitter(t *testing.T) {
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	mid := func(k, n int) []byte { return gsoPacket(wire.RCSendMiddle, 0x77, uint32(k), nil, n, k) }
	for _, tc := range []struct {
		name string
		dg   []byte
		pmtu int
		segs int // 0: not split
		good int // segments whose ICRC verifies
	}{
		{"two", gsoSuper(src, dst, 0, mid(0, 256), mid(1, 256)), 256, 2, 2},
		{"short last", gsoSuper(src, dst, 7, mid(0, 4096), mid(1, 4096), mid(2, 1)), 4096, 3, 3},
		{"ID wrap", gsoSuper(src, dst, 0xffff, mid(0, 1024), mid(1, 1024), mid(2, 1024)), 1024, 3, 3},
		{"single packet", gsoSuper(src, dst, 0, mid(0, 1024)), 1024, 0, 0},
		{"single short", gsoSuper(src, dst, 0, mid(0, 100)), 1024, 0, 0},
		{"MTU unknown", gsoSuper(src, dst, 0, mid(0, 1024), mid(1, 1024)), 0, 0, 0},
		{"smaller MTU", gsoSuper(src, dst, 0, mid(0, 1024), mid(1, 1024)), 512, 4, 0},
		{"larger MTU", gsoSuper(src, dst, 0, mid(0, 1024), mid(1, 1024), mid(2, 1024)), 2048, 2, 0},
		{"not a run opcode", gsoSuper(src, dst, 0, gsoPacket(wire.RCSendOnly, 0x77, 0, nil, 1024, 0), mid(1, 1024)), 1024, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip, udp, pkt, err := wire.SplitIPUDP(tc.dg)
			if err != nil {
				t.Fatal(err)
			}
			seg := 0
			if _, ok := gsoCandidate(pkt); ok {
				seg = gsoSplitSize(pkt, tc.pmtu)
			}
			var s gsoSplitter
			if seg == 0 || !s.start(tc.dg, len(ip), int(binary.BigEndian.Uint16(udp[4:])), seg) {
				if tc.segs != 0 {
					t.Fatalf("not split, want %d segments", tc.segs)
				}
				return
			}
			if s.segments() != tc.segs {
				t.Errorf("%d segments, want %d", s.segments(), tc.segs)
			}
			payload := append([]byte(nil), pkt...)
			id0 := binary.BigEndian.Uint16(tc.dg[4:])
			var joined []byte
			k, good := 0, 0
			for dg, ok := s.next(); ok; dg, ok = s.next() {
				sip, sudp, spkt, err := wire.SplitIPUDP(dg)
				if err != nil || len(sip)+len(sudp)+len(spkt) != len(dg) {
					t.Fatalf("segment %d: %v", k, err)
				}
				if id := binary.BigEndian.Uint16(sip[4:]); id != id0+uint16(k) {
					t.Errorf("segment %d: IP ID %d", k, id)
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

// FuzzGSOSplit splits arbitrary datagrams by arbitrary path MTUs: no
// panic, and whatever is split gives complete IPv4 datagrams whose
// payloads add up to the original UDP payload.
func FuzzGSOSplit(f *testing.F) {
	src, dst := [4]byte{127, 0, 0, 1}, [4]byte{127, 0, 0, 2}
	mid := func(k, n int) []byte { return gsoPacket(wire.RCRDMAWriteMiddle, 0x77, uint32(k), nil, n, k) }
	f.Add(gsoSuper(src, dst, 0, mid(0, 1024), mid(1, 1024), mid(2, 7)), uint16(1024))
	f.Add(gsoSuper(src, dst, 3, mid(0, 256), mid(1, 256)), uint16(256))
	f.Add(gsoSuper(src, dst, 0, mid(0, 4096), mid(1, 4096)), uint16(2048))
	f.Add(gsoSuper(src, dst, 0, gsoPacket(wire.RCRDMAReadResponseFirst, 9, 1, make([]byte, 4), 512, 1), mid(1, 512)), uint16(512))
	f.Add([]byte{0x46, 0, 1, 0}, uint16(256))
	f.Fuzz(func(t *testing.T, in []byte, pmtu uint16) {
		dg := append([]byte(nil), in...) // split in place
		ip, _, pkt, err := wire.SplitIPUDP(dg)
		if err != nil || ip[0]>>4 != 4 {
			return
		}
		if _, ok := gsoCandidate(pkt); !ok {
			return
		}
		seg := gsoSplitSize(pkt, int(pmtu))
		var s gsoSplitter
		if seg == 0 || !s.start(dg, len(ip), wire.UDPHeaderLen+len(pkt), seg) {
			return
		}
		payload := append([]byte(nil), pkt...)
		n := s.segments()
		var joined []byte
		k := 0
		for d, ok := s.next(); ok; d, ok = s.next() {
			sip, _, spkt, err := wire.SplitIPUDP(d)
			if err != nil || len(sip) != len(ip) {
				t.Fatalf("segment %d: %v", k, err)
			}
			if len(spkt) > seg || (len(spkt) < seg && k != n-1) {
				t.Fatalf("segment %d of %d: %d bytes, segment size %d", k, n, len(spkt), seg)
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
