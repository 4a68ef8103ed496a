package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// IPv6 tests run two devices on ::1, the only IPv6 loopback address. Two
// devices cannot both bind [::1]:4791, and go test runs the packages of
// ./... in parallel, so a fixed port would collide with other test
// binaries (rdma/ibcm, tests) doing the same. Each device therefore binds
// a free port the kernel picks (Config.UDPPort -1) and sends to its
// peer's (SetPeerUDPPort): no two devices anywhere share a port, nothing
// waits for another binary to release one, and no privilege or extra
// address on lo is needed. The RoCEv2 port 4791 itself is exercised over
// IPv6 by the kernel interop test (tests/interop, in a network namespace).

var addr6 = netip.IPv6Loopback()

// openPair6 opens two devices on ::1 with ports of their own, each
// sending to the other's.
func openPair6(t testing.TB, a, b Config) (*Device, *Device) {
	t.Helper()
	a.Addr, b.Addr = addr6, addr6
	a.UDPPort, b.UDPPort = -1, -1
	da, err := Open(a)
	if err != nil {
		t.Fatalf("Open(%v): %v", a.Addr, err)
	}
	t.Cleanup(func() { da.Close() })
	b.PeerUDPPort = da.UDPPort()
	db, err := Open(b)
	if err != nil {
		t.Fatalf("Open(%v): %v", b.Addr, err)
	}
	t.Cleanup(func() { db.Close() })
	da.SetPeerUDPPort(db.UDPPort())
	if da.UDPPort() == db.UDPPort() || da.UDPPort() == 0 {
		t.Fatalf("ports %d and %d", da.UDPPort(), db.UDPPort())
	}
	return da, db
}

// TestIPv6DataPath moves SEND, RDMA WRITE and RDMA READ messages around
// the MTU boundaries between two devices on ::1, with UDP GSO/GRO and
// without, and checks every byte, that nothing failed the ICRC and that
// GSO was used where it should be.
func TestIPv6DataPath(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noGSO  bool
		mtu    rdma.MTU
		noGROb bool // b without UDP_GRO: the kernel segments a's GSO sends for it
	}{
		{"gso-mtu4096", false, rdma.MTU4096, false},
		{"gso-mtu1024", false, rdma.MTU1024, false},
		{"nogso-mtu1024", true, rdma.MTU1024, false},
		{"nogso-mtu256", true, rdma.MTU256, false},
		{"gso-to-nogro-mtu4096", false, rdma.MTU4096, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair6(t, Config{DisableGSO: tc.noGSO}, Config{DisableGSO: tc.noGSO || tc.noGROb})
			if a.socks.gsoMode == tc.noGSO {
				t.Fatalf("GSO mode %v with DisableGSO %v", a.socks.gsoMode, tc.noGSO)
			}
			ea, eb := connect(t, a, b, qpOpts{mtu: tc.mtu, psnA: 0xffffff - 3, psnB: 17})
			m := tc.mtu.Bytes()
			const top, guard = 1<<20 + 3, 64
			srcA := regMR(t, ea.pd, top, 0)
			readA := regMR(t, ea.pd, top+guard, rdma.AccessLocalWrite)
			memB := regMR(t, eb.pd, top+guard, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			wrid := uint64(0)
			for _, n := range []int{0, 1, 3, m - 1, m, m + 1, 2*m + 1, 7*m + 5, 64 << 10, top} {
				for _, op := range []rdma.WROpcode{rdma.WRSend, rdma.WRRDMAWrite, rdma.WRRDMARead} {
					wrid++
					fill(srcA.Bytes()[:n], int(wrid))
					fill(memB.Bytes()[:n+guard], -int(wrid))
					fill(readA.Bytes()[:n+guard], int(wrid)+1000)
					wr := rdma.SendWR{WRID: wrid, Opcode: op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(srcA, 0, n)}}
					local, remote := srcA.Bytes()[:n], memB.Bytes()
					switch op {
					case rdma.WRSend:
						postRecv(t, eb.qp, wrid, sge(memB, 0, n+guard))
					case rdma.WRRDMAWrite:
						wr.RemoteAddr, wr.RKey = memB.Addr(), memB.RKey()
					case rdma.WRRDMARead:
						wr.SGL = []rdma.SGE{sge(readA, 0, n)}
						wr.RemoteAddr, wr.RKey = memB.Addr(), memB.RKey()
						local, remote = memB.Bytes()[:n], readA.Bytes()
					}
					guardBefore := append([]byte(nil), remote[n:n+guard]...)
					postSend(t, ea.qp, &wr)
					checkWC(t, poll(t, ea.scq, 1, 10*time.Second)[0], wrid, rdma.Success)
					if op == rdma.WRSend {
						if rc := poll(t, eb.rcq, 1, 10*time.Second)[0]; rc.WRID != wrid || rc.Status != rdma.Success || int(rc.ByteLen) != n {
							t.Fatalf("%s %d: receive completion %+v", op, n, rc)
						}
					}
					if !bytes.Equal(remote[:n], local) {
						t.Fatalf("%s of %d bytes: data differs", op, n)
					}
					if !bytes.Equal(remote[n:n+guard], guardBefore) {
						t.Fatalf("%s of %d bytes: written beyond the message", op, n)
					}
				}
			}
			for _, d := range []*Device{a, b} {
				if s := d.Stats(); s.ICRCErrors != 0 || s.Malformed != 0 || s.Dropped != 0 || s.UnknownQP != 0 || s.SendErrors != 0 {
					t.Errorf("%s: %+v", d.Name(), s)
				}
			}
			sends, supers := a.socks.gso.sends.Load(), b.socks.gso.supers.Load()
			if tc.noGSO != (sends == 0) || (tc.noGSO || tc.noGROb) != (supers == 0) {
				t.Errorf("GSO sends %d, super-datagrams received %d (DisableGSO %v, receiver without GRO %v)", sends, supers, tc.noGSO, tc.noGROb)
			}
		})
	}
}

// TestIPv6Capture: what an IPv6 device records (Config.Pcap) is IPv6
// datagrams to and from ::1 and the devices' ports, with a valid UDP
// checksum and an ICRC that checks, for what it sent and what it
// received.
func TestIPv6Capture(t *testing.T) {
	var capA bytes.Buffer
	a, b := openPair6(t, Config{Pcap: &capA}, Config{})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024})
	src := regMR(t, ea.pd, 5000, 0)
	dst := regMR(t, eb.pd, 5000, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	fill(src.Bytes(), 3)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 5000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 1, rdma.Success)
	a.Close()
	retx := a.Stats().Retransmissions // a loaded machine may time out and resend
	recs := readPcap(t, capA.Bytes())
	var sent, rcvd int
	for i, r := range recs {
		ip, udp, pkt, err := wire.SplitIPUDP(r)
		if err != nil || len(ip) != wire.IPv6HeaderLen {
			t.Fatalf("record %d: %v (%d-byte IP header)", i, err, len(ip))
		}
		if s, d := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); s != addr6 || d != addr6 {
			t.Fatalf("record %d: %v -> %v", i, s, d)
		}
		// Both QPs send from the port rdma_get_udp_sport gives their
		// connection (sport.go), the same on both ends: on one address
		// only the first to bind it gets it, the other sends from its
		// device's port.
		qport := int(rcSourcePort(0, ea.qp.QPN(), eb.qp.QPN()))
		bport := qport
		if b.Stats().SourcePortFallbacks == 1 {
			bport = b.UDPPort()
		}
		sport, dport := int(binary.BigEndian.Uint16(udp[0:])), int(binary.BigEndian.Uint16(udp[2:]))
		switch {
		case sport == qport && dport == b.UDPPort():
			sent++
		case sport == bport && dport == a.UDPPort():
			rcvd++
		default:
			t.Fatalf("record %d: ports %d -> %d (devices %d, %d, QPs %d)", i, sport, dport, a.UDPPort(), b.UDPPort(), qport)
		}
		if err := wire.CheckICRC(r); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !udp6ChecksumOK(r) {
			t.Fatalf("record %d: bad UDP checksum", i)
		}
		var p wire.Packet
		if err := p.Parse(pkt); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if sent != 5+int(retx) || rcvd == 0 {
		t.Fatalf("%d packets sent (want 5 WRITE packets and %d resent), %d received", sent, retx, rcvd)
	}
}

// udp6ChecksumOK verifies the UDP checksum of an IPv6 datagram.
func udp6ChecksumOK(d []byte) bool {
	ulen := int(binary.BigEndian.Uint16(d[44:]))
	s := uint32(17) + uint32(ulen)
	for i := 8; i < 40; i += 2 {
		s += uint32(binary.BigEndian.Uint16(d[i:]))
	}
	u := d[40 : 40+ulen]
	for i := 0; i+1 < len(u); i += 2 {
		s += uint32(binary.BigEndian.Uint16(u[i:]))
	}
	if len(u)%2 == 1 {
		s += uint32(u[len(u)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}

// TestIPv6RecvFaults: packets corrupted on the way in fail the ICRC over
// the rebuilt IPv6 header and are dropped; lost, duplicated and reordered
// ones are recovered; the data of an RDMA WRITE through such links
// arrives intact (and reads back intact once the faults are off).
func TestIPv6RecvFaults(t *testing.T) {
	for _, noGSO := range []bool{false, true} {
		t.Run(fmt.Sprintf("nogso=%v", noGSO), func(t *testing.T) {
			fc := &FaultConfig{Seed: 7, Corrupt: 0.01, Drop: 0.005, Duplicate: 0.005, Reorder: 0.005}
			a, b := openPair6(t, Config{DisableGSO: noGSO, RecvFaults: fc}, Config{DisableGSO: noGSO, RecvFaults: fc})
			ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU1024, timeout: lossTimeout})
			const n = 256 << 10
			src := regMR(t, ea.pd, n, 0)
			dst := regMR(t, eb.pd, n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
			back := regMR(t, ea.pd, n, rdma.AccessLocalWrite)
			fill(src.Bytes(), 9)
			postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
			checkWC(t, poll(t, ea.scq, 1, 30*time.Second)[0], 1, rdma.Success)
			a.SetFaults(nil, nil)
			b.SetFaults(nil, nil)
			postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(back, 0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
			checkWC(t, poll(t, ea.scq, 1, 30*time.Second)[0], 2, rdma.Success)
			if !bytes.Equal(dst.Bytes(), src.Bytes()) || !bytes.Equal(back.Bytes(), src.Bytes()) {
				t.Fatal("data differs")
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.FaultCorruptions+sb.FaultCorruptions == 0 || sa.ICRCErrors+sb.ICRCErrors != sa.FaultCorruptions+sb.FaultCorruptions {
				t.Fatalf("corruptions %d+%d, ICRC errors %d+%d: every corrupted packet must fail the ICRC",
					sa.FaultCorruptions, sb.FaultCorruptions, sa.ICRCErrors, sb.ICRCErrors)
			}
		})
	}
}

// TestIPv6GSI: MADs between the GSI QPs of two IPv6 devices; the GRH of
// the receive is the IPv6 header, whose addresses rdma.GRHAddrs reads.
func TestIPv6GSI(t *testing.T) {
	a, b := openPair6(t, Config{}, Config{})
	ga, gb := openGSI(t, a), openGSI(t, b)
	mad := ga.buf.Bytes()[15*(rdma.GRHLen+256):]
	fill(mad[:256], 8)
	wr := rdma.SendWR{WRID: 5, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(ga.buf, 15*(rdma.GRHLen+256), 256)},
		AH: rdma.AH{DGID: b.GID()}, RemoteQPN: 1, RemoteQKey: rdma.QKeyGSI}
	postSend(t, ga.qp, &wr)
	checkWC(t, poll(t, ga.scq, 1, time.Second)[0], 5, rdma.Success)
	rc := poll(t, gb.rcq, 1, time.Second)[0]
	checkWC(t, rc, 0, rdma.Success)
	if rc.SrcQP != 1 || rc.ByteLen != rdma.GRHLen+256 || rc.Flags&rdma.WCGRH == 0 {
		t.Fatalf("receive completion %+v", rc)
	}
	got := gb.buf.Bytes()[:rdma.GRHLen+256]
	src, dst, err := rdma.GRHAddrs(got[:rdma.GRHLen])
	if err != nil || src != addr6 || dst != addr6 {
		t.Fatalf("GRH addresses %v %v %v", src, dst, err)
	}
	if got[0]>>4 != 6 || got[6] != 17 || int(binary.BigEndian.Uint16(got[4:])) != wire.UDPHeaderLen+wire.BTHLen+wire.DETHLen+256+wire.ICRCLen {
		t.Fatalf("GRH % x", got[:8])
	}
	if !bytes.Equal(got[rdma.GRHLen:], mad[:256]) {
		t.Fatal("MAD differs")
	}
	if a.GID() != wire.GID(addr6.As16()) {
		t.Fatalf("GID %v", a.GID())
	}
}

// TestAddressFamilies: a device takes destinations of its own family
// only; addresses a device cannot serve are refused at Open.
func TestAddressFamilies(t *testing.T) {
	a6, _ := openPair6(t, Config{}, Config{})
	a4 := openDev(t, Config{Addr: netip.AddrFrom4([4]byte{127, 0, 86, 1})})
	v4, v6 := rdma.GIDFromAddr(netip.MustParseAddr("127.0.86.2")), rdma.GIDFromAddr(addr6)
	for _, tc := range []struct {
		dev  *Device
		dgid rdma.GID
		ok   bool
	}{
		{a6, v6, true},
		{a6, v4, false},
		{a4, v4, true},
		{a4, v6, false},
	} {
		o := qpOpts{}
		o.defaults()
		e := newEnd(t, tc.dev, &o)
		if err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, Port: 1, AccessFlags: o.access}, rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort|rdma.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		err := e.qp.Modify(&rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: tc.dgid}, PathMTU: rdma.MTU1024, DestQPN: 0x20, MaxDestRdAtomic: 1},
			rdma.QPAttrState|rdma.QPAttrAV|rdma.QPAttrPathMTU|rdma.QPAttrDestQPN|rdma.QPAttrRQPSN|rdma.QPAttrMaxDestRdAtomic|rdma.QPAttrMinRNRTimer)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, rdma.ErrInvalidArgument)) {
			t.Errorf("%s: RC QP to %v: %v", tc.dev.Name(), tc.dgid, err)
		}
		g := openGSI(t, tc.dev)
		err = g.qp.PostSend(&rdma.SendWR{Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(g.buf, 0, 256)}, AH: rdma.AH{DGID: tc.dgid}, RemoteQPN: 1, RemoteQKey: rdma.QKeyGSI})
		if (err == nil) != tc.ok {
			t.Errorf("%s: UD send to %v: %v", tc.dev.Name(), tc.dgid, err)
		}
		if err := g.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"fe80::1", "fe80::1%lo", "ff02::1", "::", "0.0.0.0"} {
		if d, err := Open(Config{Addr: netip.MustParseAddr(bad)}); !errors.Is(err, rdma.ErrInvalidArgument) {
			if d != nil {
				d.Close()
			}
			t.Errorf("Open(%s): %v", bad, err)
		}
	}
	// An IPv4-mapped address is the IPv4 device.
	d := openDev(t, Config{Addr: netip.MustParseAddr("::ffff:127.0.86.3")})
	if d.Addr() != netip.MustParseAddr("127.0.86.3") || d.v6 {
		t.Fatalf("device on %v (v6 %v)", d.Addr(), d.v6)
	}
}

// TestIPv6RxeLikePeer: a peer that sends as rdma_rxe does over IPv6, from
// a plain UDP socket with UDP checksum 0 (UDP_NO_CHECK6_TX) and a source
// port of its own, reaches an RC QP (the device accepts the zero
// checksum and checks the ICRC over the rebuilt header); the device's
// ACK, read from that socket, carries the ICRC rxe computes for it.
func TestIPv6RxeLikePeer(t *testing.T) {
	d, _ := openPair6(t, Config{}, Config{})
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(t.Context(), "udp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	peer := pc.(*net.UDPConn)
	sport := uint16(peer.LocalAddr().(*net.UDPAddr).Port)
	d.SetPeerUDPPort(int(sport))

	o := qpOpts{mtu: rdma.MTU1024}
	o.defaults()
	e := newEnd(t, d, &o)
	const peerQPN, psn = 0x4242, 0x100
	bringUp(t, e, addr6, peerQPN, 0x500, psn, &o)
	buf := regMR(t, e.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, e.qp, 1, sge(buf, 0, 64))

	to := &net.UDPAddr{IP: net.IPv6loopback, Port: d.UDPPort()}
	send := func(pkt []byte, corrupt bool) {
		t.Helper()
		crc := wire.ICRCForIPv6(addr6.As16(), addr6.As16(), sport, uint16(d.UDPPort()), pkt)
		if corrupt {
			crc ^= 1
		}
		if _, err := peer.WriteToUDP(binary.LittleEndian.AppendUint32(append([]byte(nil), pkt...), crc), to); err != nil {
			t.Fatal(err)
		}
	}
	msg := []byte("over IPv6, as rxe sends it")
	pkt := make([]byte, wire.BTHLen, wire.BTHLen+len(msg)+3)
	writeBTH(pkt, wire.RCSendOnly, false, wire.PadFor(len(msg)), e.qp.QPN(), psn, true)
	pkt = append(append(pkt, msg...), make([]byte, wire.PadFor(len(msg)))...)
	send(pkt, true) // dropped: bad ICRC
	send(pkt, false)
	rc := poll(t, e.rcq, 1, 5*time.Second)[0]
	checkWC(t, rc, 1, rdma.Success)
	if int(rc.ByteLen) != len(msg) || !bytes.Equal(buf.Bytes()[:len(msg)], msg) {
		t.Fatalf("received %q", buf.Bytes()[:rc.ByteLen])
	}
	if s := d.Stats(); s.ICRCErrors != 1 {
		t.Fatalf("ICRC errors %d, want 1", s.ICRCErrors)
	}
	// The ACK: to [::1]:sport from the QP's source port, ICRC over the IPv6
	// header a receiver sees.
	if err := peer.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 256)
	n, from, err := peer.ReadFromUDP(ack)
	if err != nil {
		t.Fatal(err)
	}
	ack = ack[:n]
	qport := rcSourcePort(0, e.qp.QPN(), peerQPN) // the QP's source port (sport.go)
	if from.Port != int(qport) || !from.IP.Equal(net.IPv6loopback) {
		t.Fatalf("ACK from %v, want port %d", from, qport)
	}
	var p wire.Packet
	if err := p.Parse(ack); err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != wire.RCAcknowledge || p.BTH.DestQP() != peerQPN || p.BTH.PSN() != psn {
		t.Fatalf("ACK %s", p.BTH)
	}
	if want := wire.ICRCForIPv6(addr6.As16(), addr6.As16(), qport, sport, ack[:n-wire.ICRCLen]); p.ICRCValue() != want {
		t.Fatalf("ACK ICRC %#08x, want %#08x", p.ICRCValue(), want)
	}
}

// TestGSOSplit6 cuts super-datagrams as an IPv6 device receives them:
// each segment gets the IPv6 and UDP headers its ICRC was computed over;
// cutting at another size fails every ICRC but possibly the first.
func TestGSOSplit6(t *testing.T) {
	src := netip.MustParseAddr("2001:db8::2").As16()
	dst := netip.MustParseAddr("2001:db8::1").As16()
	const sport, dport = 50123, 4791
	mk := func(sizes ...int) ([]byte, int) {
		var b []byte
		for k, n := range sizes {
			p := gsoPacket(wire.RCRDMAWriteMiddle, 0x77, uint32(k), nil, n, k)
			b = binary.LittleEndian.AppendUint32(append(b, p...), wire.ICRCForIPv6(src, dst, sport, dport, p))
		}
		return append(make([]byte, rxHeadroom6), b...), wire.BTHLen + sizes[0] + wire.PadFor(sizes[0]) + wire.ICRCLen
	}
	for _, tc := range []struct {
		name     string
		sizes    []int
		segDelta int // added to the true segment size
		plain    bool
		wantOK   int
	}{
		{"three", []int{1024, 1024, 1024}, 0, false, 3},
		{"short last", []int{4096, 4096, 5}, 0, false, 3},
		{"odd sizes", []int{17, 17, 17, 17}, 0, false, 4},
		{"plain", []int{1024}, 0, true, 1},
		{"cut short", []int{1024, 1024}, -4, false, 0},
		{"cut long", []int{1024, 1024, 1024}, +4, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, seg := mk(tc.sizes...)
			seg += tc.segDelta
			if tc.plain {
				seg = 0
			}
			var s gsoSplitter
			s.start6(b, src, dst, sport, dport, seg)
			ok := 0
			for dg, more := s.next(); more; dg, more = s.next() {
				ip, udp, _, err := wire.SplitIPUDP(dg)
				if err != nil || len(ip) != wire.IPv6HeaderLen || binary.BigEndian.Uint16(udp[0:]) != sport || binary.BigEndian.Uint16(udp[2:]) != dport {
					t.Fatalf("segment: %v", err)
				}
				if wire.CheckICRC(dg) == nil {
					ok++
				}
			}
			if ok != tc.wantOK {
				t.Fatalf("%d segments pass the ICRC, want %d", ok, tc.wantOK)
			}
		})
	}
}

// FuzzGSOSplit6 is FuzzGSOSplit for an IPv6 device: any payload and
// segment size cut into packets whose rebuilt headers parse, whose
// lengths add up and which rebuild the payload.
func FuzzGSOSplit6(f *testing.F) {
	src := netip.MustParseAddr("2001:db8::2").As16()
	dst := netip.IPv6Loopback().As16()
	mid := gsoPacket(wire.RCRDMAWriteMiddle, 0x77, 1, nil, 16, 1)
	f.Add(uint16(3*1040), byte(0), uint16(0), mid, uint16(1040))
	f.Add(uint16(64), byte(0xa5), uint16(32), mid, uint16(32))
	f.Add(uint16(100), byte(0), uint16(0), mid, uint16(0))
	f.Add(uint16(1), byte(0x60), uint16(0), []byte{}, uint16(1))
	f.Add(uint16(65507), byte(0xff), uint16(65500), mid, uint16(1))
	f.Fuzz(func(t *testing.T, size uint16, fill byte, off uint16, patch []byte, seg uint16) {
		if size == 0 || int(size) > gsoMaxPayload || len(patch) > 64 {
			return
		}
		payload := bytes.Repeat([]byte{fill}, int(size))
		if int(off) < len(payload) {
			copy(payload[off:], patch)
		}
		buf := append(make([]byte, rxHeadroom6), payload...)
		var s gsoSplitter
		s.start6(buf, src, dst, 4791, 4791, int(seg))
		n := s.segments()
		segSize := int(seg)
		if segSize == 0 || segSize > len(payload) {
			segSize = len(payload)
		}
		var joined []byte
		k := 0
		for d, ok := s.next(); ok; d, ok = s.next() {
			ip, _, spkt, err := wire.SplitIPUDP(d)
			if err != nil || len(ip) != wire.IPv6HeaderLen || [16]byte(ip[8:24]) != src || [16]byte(ip[24:40]) != dst {
				t.Fatalf("segment %d: %v", k, err)
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

// TestIPv6NoAlloc: the IPv6 data path allocates nothing in steady state
// (RDMA WRITE and SEND with their completions), as the IPv4 one.
func TestIPv6NoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := openPair6(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU4096})
	if allocs := writeAllocs(t, ea, eb, 64<<10); allocs > 0 {
		t.Fatalf("%v allocations per 64 KiB RDMA WRITE over IPv6", allocs)
	}
}

// BenchmarkIPv6RDMA measures RDMA WRITE and READ bandwidth between two
// devices on ::1 (MTU 4096, 16 in flight), with UDP GSO/GRO unless
// -nogso, beside the IPv4 BenchmarkRDMAWrite and BenchmarkRDMARead.
func BenchmarkIPv6RDMA(b *testing.B) {
	for _, op := range []rdma.WROpcode{rdma.WRRDMAWrite, rdma.WRRDMARead} {
		for _, size := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", op, size>>10), func(b *testing.B) {
				da, db := openPair6(b, Config{DisableGSO: *noGSO}, Config{DisableGSO: *noGSO})
				ea, eb := connect(b, da, db, qpOpts{mtu: rdma.MTU4096, sendWR: 64, cqe: 256})
				local := regMR(b, ea.pd, size, rdma.AccessLocalWrite)
				remote := regMR(b, eb.pd, size, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
				wr := rdma.SendWR{Opcode: op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(local, 0, size)}, RemoteAddr: remote.Addr(), RKey: remote.RKey()}
				pipelined(b, da, ea, &wr, size)
			})
		}
	}
}
