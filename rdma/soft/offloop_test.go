package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/netnstest"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// openIn opens a soft device whose sockets live in network namespace ns.
func openIn(t *testing.T, ns string, cfg Config) *Device {
	t.Helper()
	var d *Device
	if err := netnstest.Do(ns, func() (err error) { d, err = Open(cfg); return err }); err != nil {
		t.Fatalf("Open %v in %s: %v", cfg.Addr, ns, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// bulk moves n bytes a→b by RDMA WRITE and back b←a by RDMA READ issued
// by a, and checks both copies.
func bulk(t *testing.T, a, b *end, n int) {
	t.Helper()
	am := regMR(t, a.pd, 2*n, rdma.AccessLocalWrite)
	bm := regMR(t, b.pd, 2*n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead)
	fill(am.Bytes()[:n], 1)
	fill(bm.Bytes()[n:], 2)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(am, 0, n)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()})
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(am, n, n)},
		RemoteAddr: bm.Addr() + uint64(n), RKey: bm.RKey()})
	wcs := poll(t, a.scq, 2, 30*time.Second)
	checkWC(t, wcs[0], 1, rdma.Success)
	checkWC(t, wcs[1], 2, rdma.Success)
	if !bytes.Equal(bm.Bytes()[:n], am.Bytes()[:n]) {
		t.Fatal("RDMA WRITE: the responder's buffer differs")
	}
	if !bytes.Equal(am.Bytes()[n:], bm.Bytes()[n:]) {
		t.Fatal("RDMA READ: the requester's buffer differs")
	}
}

// TestOffLoopback runs RC traffic between two soft devices in two
// network namespaces joined by a veth pair (MTU 9000), as two machines:
// IPv4 in udp4 mode (GSO runs, UDP socket for IP ID 0, raw socket for
// the rest), IPv4 in raw mode (DisableGSO on both ends) and IPv6. Every
// packet's ICRC must verify, and in udp4 and IPv6 modes the bulk
// transfers must leave as GSO runs and arrive whole.
func TestOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b       netip.Addr
		disableGSO bool
	}{
		{"udp4", netnstest.AddrA, netnstest.AddrB, false},
		{"raw", netnstest.AddrA, netnstest.AddrB, true},
		{"udp6", netnstest.Addr6A, netnstest.Addr6B, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := netnstest.New(t, 0)
			a := openIn(t, p.A, Config{Addr: tc.a, DisableGSO: tc.disableGSO})
			b := openIn(t, p.B, Config{Addr: tc.b, DisableGSO: tc.disableGSO})
			if a.mtu != rdma.MTU4096 {
				t.Fatalf("path MTU %v on a 9000-byte link, want 4096", a.mtu)
			}
			if want := !tc.disableGSO && !tc.a.Is6(); a.socks.assist != want {
				t.Fatalf("udp4 mode %v, want %v", a.socks.assist, want)
			}
			ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU4096})
			bulk(t, ea, eb, 1<<20)
			bulk(t, eb, ea, 256<<10)
			exchange(t, ea, eb, 7)
			for _, d := range []*Device{a, b} {
				// Retransmissions are RC doing its job when a loaded
				// machine (-race beside QEMU guests) starves a receiver
				// past the retransmission timeout; the data was checked.
				s := d.Stats()
				if s.ICRCErrors != 0 || s.Malformed != 0 {
					t.Errorf("%s: %d ICRC errors, %d malformed", d.Name(), s.ICRCErrors, s.Malformed)
				}
				if s.Retransmissions != 0 {
					t.Logf("%s: %d retransmissions", d.Name(), s.Retransmissions)
				}
			}
			if !tc.disableGSO {
				if a.socks.gso.sends.Load() == 0 || b.socks.gso.supers.Load() == 0 {
					t.Errorf("GSO: %d sends from a, %d super-datagrams split by b, want both", a.socks.gso.sends.Load(), b.socks.gso.supers.Load())
				}
			}
		})
	}
}

// TestUDP4ModeForeignIPID sends a SEND from an rdma_rxe-like sender,
// whose datagrams carry a non-zero IP ID, to a device in udp4 mode: the
// raw socket takes it and it verifies against the ID it came with; the
// same packet whose ICRC was computed for another ID is counted as an
// ICRC error and not delivered.
func TestUDP4ModeForeignIPID(t *testing.T) {
	p := netnstest.New(t, 0)
	a := openIn(t, p.A, Config{Addr: netnstest.AddrA})
	b := openIn(t, p.B, Config{Addr: netnstest.AddrB})
	o := qpOpts{psnA: 100, psnB: 500}
	ea, _ := connect(t, a, b, o)
	m := regMR(t, ea.pd, 4096, rdma.AccessLocalWrite)
	postRecv(t, ea.qp, 9, sge(m, 0, 4096))
	payload := []byte("a SEND from a sender with IP ID 0x1234")
	// The packet eb's QP would send next (PSN psnB), built by hand.
	build := func(icrcID uint16) []byte {
		pad := (4 - len(payload)%4) % 4
		pkt := make([]byte, wire.BTHLen+len(payload)+pad+wire.ICRCLen)
		bth := wire.BTH(pkt)
		bth.SetOpcode(wire.RCSendOnly)
		bth.SetFlags(false, false, pad, 0)
		bth.SetPKey(0xffff)
		bth.SetDestQP(ea.qp.QPN())
		bth.SetPSN(o.psnB, true)
		copy(pkt[wire.BTHLen:], payload)
		body := pkt[:len(pkt)-wire.ICRCLen]
		crc := wire.ICRCForIPv4(netnstest.AddrB.As4(), netnstest.AddrA.As4(), icrcID, true, 0xc123, wire.UDPPort, body)
		binary.LittleEndian.PutUint32(pkt[len(pkt)-wire.ICRCLen:], crc)
		return ipv4UDP(netnstest.AddrB.As4(), netnstest.AddrA.As4(), 0x1234, 0xc123, wire.UDPPort, pkt)
	}
	send := func(dg []byte) {
		t.Helper()
		err := netnstest.Do(p.B, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Sendto(fd, dg, 0, &unix.SockaddrInet4{Addr: netnstest.AddrA.As4()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	before := a.Stats().ICRCErrors
	send(build(0)) // ICRC for ID 0, sent with ID 0x1234
	waitUntil(t, 10*time.Second, "the ICRC error", func() bool { return a.Stats().ICRCErrors == before+1 })
	send(build(0x1234))
	wc := poll(t, ea.rcq, 1, 10*time.Second)[0]
	checkWC(t, wc, 9, rdma.Success)
	if got := m.Bytes()[:wc.ByteLen]; !bytes.Equal(got, payload) {
		t.Fatalf("received %q", got)
	}
	if n := a.rxqPackets[a.socks.assistQueue].Load(); n != 2 {
		t.Errorf("the raw socket read %d packets, want the 2 sent with IP ID 0x1234", n)
	}
}

// ipv4UDP returns an IPv4 datagram (DF, TTL 64, header checksum left to
// the kernel) carrying a UDP datagram with checksum 0.
func ipv4UDP(src, dst [4]byte, id, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, wire.IPv4HeaderLen+wire.UDPHeaderLen+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], 0x4000)
	b[8], b[9] = 64, unix.IPPROTO_UDP
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	u := b[wire.IPv4HeaderLen:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(wire.UDPHeaderLen+len(payload)))
	copy(u[wire.UDPHeaderLen:], payload)
	return b
}

// TestSharedOffLoopback: two shared devices on one address in udp4 mode
// (IPv4 between network namespaces), with one and with two receive
// queues beside udp4 mode's raw socket, each with RC traffic to a target
// device: every packet reaches its own device.
func TestSharedOffLoopback(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			p := netnstest.New(t, 0)
			tg := openIn(t, p.A, Config{Addr: netnstest.AddrA})
			dir := t.TempDir()
			var hosts [2]*Device
			for i := range hosts {
				if err := netnstest.Do(p.B, func() (err error) {
					hosts[i], err = Open(Config{Addr: netnstest.AddrB, Share: true, ShareDir: dir, RecvQueues: queues})
					return err
				}); err != nil {
					if errors.Is(err, ErrShareUnsupported) {
						t.Skip(err)
					}
					t.Fatal(err)
				}
				t.Cleanup(func() { hosts[i].Close() })
				if !hosts[i].socks.assist {
					t.Fatal("not in udp4 mode")
				}
			}
			for round := range 2 {
				for i, h := range hosts {
					eh, et := connect(t, h, tg, qpOpts{mtu: rdma.MTU4096})
					exchange(t, eh, et, 10*round+i)
					bulk(t, eh, et, 256<<10)
				}
			}
			for _, d := range append(hosts[:], tg) {
				if s := d.Stats(); s.ICRCErrors != 0 || s.UnknownQP != 0 {
					t.Errorf("%s: %d ICRC errors, %d packets for unknown QPs (%d retransmissions)", d.Name(), s.ICRCErrors, s.UnknownQP, s.Retransmissions)
				}
			}
		})
	}
}
