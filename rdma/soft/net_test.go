package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// captureAt opens the provider's sockets on addr (without a device) and
// returns a function that reads the next datagram for UDP port 4791 with
// its IP header.
func captureAt(t *testing.T, addr [4]byte) func() []byte {
	t.Helper()
	var s *sockets
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		s, err = openSockets(netip.AddrFrom4(addr), wire.UDPPort, 1<<20, false, 1, nil)
		if !errors.Is(err, syscall.EADDRINUSE) || !retryInUse(t, deadline) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("raw socket: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	m := newMmsg(1, false)
	buf := make([]byte, rxBufSize)
	m.setBuf(0, buf)
	return func() []byte {
		t.Helper()
		raw := s.recv[0]
		var pfd []unix.PollFd
		raw.Control(func(fd uintptr) { pfd = []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}} })
		if n, err := unix.Poll(pfd, 2000); n != 1 {
			t.Fatalf("capture: nothing in 2 s (%v)", err)
		}
		n, err := m.recvBatch(raw, 1)
		if err != nil || n != 1 {
			t.Fatalf("capture: %d datagrams, %v", n, err)
		}
		return append([]byte(nil), buf[:m.hdrs[0].Len]...)
	}
}

// TestKernelHeader checks, on loopback, the facts the send path relies
// on: Linux sends the provider's datagrams with DF and IP ID 0, TOS 0,
// TTL 64 and UDP checksum 0, exactly the headers putIPv4UDPHeader
// writes (and the pcap writer records), so the ICRC computed before
// sending verifies over the real header.
func TestKernelHeader(t *testing.T) {
	capture := captureAt(t, addrB.As4())
	// Without GSO: the capture does not split super-datagrams (TestGSOKernelHeader).
	a := openDev(t, Config{Addr: addrA, DisableGSO: true})
	o := qpOpts{}
	o.defaults()
	e := newEnd(t, a, &o)
	bringUp(t, e, addrB, 0x4242, 1000, 2000, &o)
	src := regMR(t, e.pd, 3000, 0)
	fill(src.Bytes(), 1)
	postSend(t, e.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 1500)}})
	for i := 0; i < 2; i++ { // SEND First and Last
		d := capture()
		if err := wire.CheckICRC(d); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		ip, udp, pkt, err := wire.SplitIPUDP(d)
		if err != nil {
			t.Fatal(err)
		}
		if id, flags := binary.BigEndian.Uint16(ip[4:]), binary.BigEndian.Uint16(ip[6:]); id != 0 || flags != 0x4000 {
			t.Errorf("IP ID %#x flags %#x, want ID 0 and DF", id, flags)
		}
		want := make([]byte, 28)
		// From the QP's own source port (sport.go), to 4791.
		putIPv4UDPHeaderPorts(want, addrA.As4(), addrB.As4(), 0, rcSourcePort(0, e.qp.QPN(), 0x4242), wire.UDPPort, len(pkt))
		got := append(append([]byte(nil), ip...), udp...)
		if !bytes.Equal(got, want) {
			t.Errorf("kernel header\n% x\nsynthetic header\n% x", got, want)
		}
		var p wire.Packet
		if err := p.Parse(pkt); err != nil {
			t.Fatal(err)
		}
		if p.BTH.DestQP() != 0x4242 || p.BTH.PSN() != uint32(1000+i) || p.BTH.PKey() != 0xffff {
			t.Errorf("packet %d: %s", i, p.BTH)
		}
	}
}

// plainUDP opens an ordinary UDP socket on addrA (an ephemeral port) that sends with DF set, as the devices do, closed at the end of
// the test, and returns it with its port.
func plainUDP(t *testing.T) (*net.UDPConn, uint16) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
		return serr
	}}
	pc, err := lc.ListenPacket(t.Context(), "udp4", netip.AddrPortFrom(addrA, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.(*net.UDPConn), uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// TestICRCCheck sends hand-made packets from an ordinary UDP socket: a
// bad ICRC is counted and dropped, a good one is accepted (and counted as
// addressed to an unknown QP).
func TestICRCCheck(t *testing.T) {
	b := openDev(t, Config{Addr: addrB})
	pc, sport := plainUDP(t)
	pkt := make([]byte, wire.BTHLen+8+wire.ICRCLen)
	writeBTH(pkt, wire.RCSendOnly, false, 0, 0x123456, 7, true)
	v := wire.ICRCForIPv4(addrA.As4(), addrB.As4(), 0, true, sport, wire.UDPPort, pkt[:len(pkt)-4])
	binary.LittleEndian.PutUint32(pkt[len(pkt)-4:], v^1)
	dst := &net.UDPAddr{IP: net.IP(addrB.AsSlice()), Port: wire.UDPPort}
	if _, err := pc.WriteTo(pkt, dst); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-4:], v)
	if _, err := pc.WriteTo(pkt, dst); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "two packets received", func() bool { return b.Stats().PacketsReceived >= 2 })
	if s := b.Stats(); s.ICRCErrors != 1 || s.UnknownQP != 1 {
		t.Fatalf("ICRC errors %d, unknown QP %d; want 1 and 1", s.ICRCErrors, s.UnknownQP)
	}
}

// TestCorruptionRecovery corrupts every packet the responder receives:
// they are counted and dropped, nothing is delivered; once the
// corruption stops, the retransmission gets through.
func TestCorruptionRecovery(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{timeout: 12})
	src := regMR(t, ea.pd, 100, 0)
	dst := regMR(t, eb.pd, 100, rdma.AccessLocalWrite)
	fill(src.Bytes(), 2)
	postRecv(t, eb.qp, 1, sge(dst, 0, 100))
	b.SetFaults(nil, &FaultConfig{Corrupt: 1, Seed: 1})
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 100)}})
	// Two corrupted arrivals (the SEND and a retransmission), and
	// nothing delivered meanwhile.
	waitUntil(t, 5*time.Second, "two corrupted packets", func() bool { return b.Stats().ICRCErrors >= 2 })
	var wc [1]rdma.WorkCompletion
	if eb.rcq.Poll(wc[:]) != 0 {
		t.Fatalf("a corrupted SEND was delivered: %+v", wc[0])
	}
	b.SetFaults(nil, nil)
	checkWC(t, poll(t, eb.rcq, 1, 5*time.Second)[0], 1, rdma.Success)
	checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 1, rdma.Success)
	// Every corrupted packet was handled before the one delivered.
	if s := b.Stats(); s.ICRCErrors < 2 || s.ICRCErrors != s.FaultCorruptions {
		t.Fatalf("ICRC errors %d, corruptions %d", s.ICRCErrors, s.FaultCorruptions)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}
