//go:build linux

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

// tapLo is a packet socket on lo that sees every IPv4 or IPv6 datagram
// delivered there with the IP header the kernel wrote (for a GSO send,
// the unsegmented super-datagram).
type tapLo struct{ fd int }

// openTapLo opens a tap for IPv6 if v6, else IPv4; it skips the test
// without CAP_NET_RAW.
func openTapLo(t *testing.T, v6 bool) *tapLo {
	t.Helper()
	proto := uint16(unix.ETH_P_IP)
	if v6 {
		proto = unix.ETH_P_IPV6
	}
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], proto)
	nproto := binary.NativeEndian.Uint16(p[:])
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(nproto))
	if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
		t.Skipf("a packet socket needs CAP_NET_RAW: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: nproto, Ifindex: lo.Index}); err != nil {
		t.Fatal(err)
	}
	setRcvbuf(uintptr(fd), 32<<20)
	return &tapLo{fd: fd}
}

// drain returns the datagrams queued on the tap (at most limit).
func (c *tapLo) drain(t *testing.T, limit int) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, 1<<16)
	for len(out) < limit {
		n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(buf[:n]))
	}
	return out
}

// ipTOS returns the TOS of an IPv4 datagram or the traffic class of an
// IPv6 one.
func ipTOS(ip []byte) uint8 {
	if ip[0]>>4 == 6 {
		return ip[0]<<4 | ip[1]>>4
	}
	return ip[1]
}

// bringUpAV is bringUp (PSNs 0) with address vector av (DGID filled in).
func bringUpAV(t *testing.T, e *end, peer netip.Addr, peerQPN uint32, av rdma.AH, o *qpOpts) {
	t.Helper()
	av.DGID = rdma.GIDFromAddr(peer)
	steps := []struct {
		attr rdma.QPAttr
		mask rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, AccessFlags: o.access, Port: 1},
			rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags},
		{rdma.QPAttr{State: rdma.QPSRTR, AH: av, PathMTU: o.mtu, DestQPN: peerQPN, MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNRTimer},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer},
		{rdma.QPAttr{State: rdma.QPSRTS, Timeout: o.timeout, RetryCount: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("modify QP %#x to %s: %v", e.qp.QPN(), s.attr.State, err)
		}
	}
}

// TestTrafficClassOnWire: of device a's two RC QPs, the one whose
// address vector has a traffic class sends every packet (SEND, READ
// request) with it as the IPv4 TOS / IPv6 traffic class, the other with
// 0; the peer QP of the first, whose AV has none, answers (ACKs, READ
// responses) with 0; a UD work request's AH carries its own. Seen on lo
// by a packet socket (the headers the kernel wrote) and in a's capture,
// in GSO mode, raw mode and on IPv6. Every single-packet datagram on lo
// and every capture record passes the ICRC (the TOS / traffic class is
// masked), the capture's IPv4 header checksums are right, the receivers
// count no ICRC error, and GSO mode still sends GSO runs.
func TestTrafficClassOnWire(t *testing.T) {
	const tc, udTC = 0xb8, 0x2a // DSCP EF; DSCP 10 with ECT(0)
	// A UD SEND Only of udLen bytes: BTH, DETH, payload (udMark is its
	// first byte), ICRC.
	const udLen = 100
	const udMark, udPkt = wire.BTHLen + 8, wire.BTHLen + 8 + udLen + wire.ICRCLen
	for _, tc0 := range []struct {
		name  string
		v6    bool
		noGSO bool
	}{{"GSO", false, false}, {"raw", false, true}, {"IPv6", true, false}} {
		t.Run(tc0.name, func(t *testing.T) {
			tap := openTapLo(t, tc0.v6)
			var capA bytes.Buffer
			var a, b *Device
			if tc0.v6 {
				a, b = openPair6(t, Config{Pcap: &capA}, Config{})
			} else {
				a, b = openPairAt(t, Config{Addr: netip.MustParseAddr("127.0.88.1"), Pcap: &capA, DisableGSO: tc0.noGSO},
					Config{Addr: netip.MustParseAddr("127.0.88.2"), DisableGSO: tc0.noGSO})
			}
			o := qpOpts{mtu: rdma.MTU1024}
			o.defaults()
			ea1, eb1 := newEnd(t, a, &o), newEnd(t, b, &o)
			bringUpAV(t, ea1, b.Addr(), eb1.qp.QPN(), rdma.AH{TrafficClass: tc}, &o)
			bringUp(t, eb1, a.Addr(), ea1.qp.QPN(), 0, 0, &o)
			var attr rdma.QPAttr
			if err := ea1.qp.Query(&attr); err != nil || attr.AH.TrafficClass != tc {
				t.Fatalf("Query: AH %+v, %v", attr.AH, err)
			}
			ea2, eb2 := connect(t, a, b, o)
			for i, p := range [][2]*end{{ea1, eb1}, {ea2, eb2}} {
				ea, eb := p[0], p[1]
				src := regMR(t, ea.pd, 8192, rdma.AccessLocalWrite)
				mem := regMR(t, eb.pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
				fill(src.Bytes(), i)
				fill(mem.Bytes(), i+7)
				postRecv(t, eb.qp, 1, sge(mem, 0, 8192))
				postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 5000)}})
				checkWC(t, poll(t, eb.rcq, 1, 5*time.Second)[0], 1, rdma.Success)
				postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{sge(src, 0, 5000)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
				checkWC(t, poll(t, ea.scq, 1, 5*time.Second)[0], 2, rdma.Success)
				if !bytes.Equal(src.Bytes()[:5000], mem.Bytes()[:5000]) {
					t.Fatalf("connection %d: READ data differs", i)
				}
			}
			// UD: four equal sends to one QP in one post, traffic classes
			// alternating, each payload starting with its own: equal
			// packets to one QP that must not share a GSO send.
			ua, ub := newUD(t, a), newUD(t, b)
			wrs := make([]rdma.SendWR, 4)
			for i := range wrs {
				postRecv(t, ub.qp, uint64(i), sge(ub.mr, 256*i, 256))
				class := uint8(0)
				if i%2 == 0 {
					class = udTC
				}
				ua.mr.Bytes()[256*i] = class
				wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(ua.mr, 256*i, udLen)},
					AH: rdma.AH{DGID: rdma.GIDFromAddr(b.Addr()), TrafficClass: class}, RemoteQPN: ub.qp.QPN(), RemoteQKey: udQKey}
				if i > 0 {
					wrs[i-1].Next = &wrs[i]
				}
			}
			postSend(t, ua.qp, &wrs[0])
			for _, wc := range poll(t, ub.rcq, len(wrs), 5*time.Second) {
				if wc.Status != rdma.Success {
					t.Fatalf("UD receive: %v", wc.Status)
				}
			}

			// The TOS each destination QP's packets must carry.
			want := map[uint32]uint8{eb1.qp.QPN(): tc, eb2.qp.QPN(): 0, ea1.qp.QPN(): 0, ea2.qp.QPN(): 0, ub.qp.QPN(): udTC}
			ours := func(ip, udp []byte) bool {
				if tc0.v6 {
					dport := int(binary.BigEndian.Uint16(udp[2:]))
					return dport == a.UDPPort() || dport == b.UDPPort()
				}
				dst := netip.AddrFrom4([4]byte(ip[16:20]))
				return dst == a.Addr() || dst == b.Addr()
			}
			seen := map[uint32]int{}
			checked := 0
			for _, d := range tap.drain(t, 100000) {
				ip, udp, pkt, err := wire.SplitIPUDP(d)
				if err != nil || len(pkt) < wire.BTHLen || !ours(ip, udp) {
					continue
				}
				qpn := wire.BTH(pkt).DestQP()
				w, ok := want[qpn]
				if !ok {
					continue // QP1 or another test's
				}
				if qpn == ub.qp.QPN() {
					// Every UD packet of the datagram (several in a GSO
					// send) carries the TOS it was posted with.
					for off := 0; off+udPkt <= len(pkt); off += udPkt {
						if w := pkt[off+udMark]; ipTOS(ip) != w {
							t.Errorf("on lo: UD packet %d of a datagram with TOS %#x, want %#x", off/udPkt, ipTOS(ip), w)
						}
					}
				} else if got := ipTOS(ip); got != w {
					t.Errorf("on lo: %s to QP %#x with TOS %#x, want %#x", wire.BTH(pkt).Opcode(), qpn, got, w)
				}
				seen[qpn]++
				// In raw mode and on IPv6 to another port every datagram
				// is one packet; a GSO super-datagram is not.
				if err := wire.CheckICRC(d); err == nil {
					checked++
				} else if tc0.noGSO {
					t.Errorf("on lo: %s to QP %#x: %v", wire.BTH(pkt).Opcode(), qpn, err)
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("on lo: packets to %d QPs (%v), want %d", len(seen), seen, len(want))
			}
			if checked == 0 {
				t.Fatal("on lo: no datagram passed the ICRC")
			}
			for name, d := range map[string]*Device{"a": a, "b": b} {
				if s := d.Stats(); s.ICRCErrors != 0 {
					t.Errorf("%s: %d ICRC errors", name, s.ICRCErrors)
				}
			}
			if a.socks.gsoMode && a.socks.gso.sends.Load() == 0 {
				t.Error("GSO mode sent no GSO run")
			}
			a.Close()
			recs := 0
			for i, r := range readPcap(t, capA.Bytes()) {
				ip, udp, pkt, err := wire.SplitIPUDP(r)
				if err != nil {
					t.Fatal(err)
				}
				if !tc0.v6 && netip.AddrFrom4([4]byte(ip[12:16])) != a.Addr() ||
					tc0.v6 && int(binary.BigEndian.Uint16(udp[2:])) != b.UDPPort() {
					continue // received
				}
				if err := wire.CheckICRC(r); err != nil {
					t.Fatalf("capture record %d: %v", i, err)
				}
				if !tc0.v6 && ipv4Checksum(ip) != 0 {
					t.Fatalf("capture record %d: IPv4 header checksum wrong", i)
				}
				qpn := wire.BTH(pkt).DestQP()
				if qpn == ub.qp.QPN() {
					want[qpn] = pkt[udMark]
				}
				if w, ok := want[qpn]; ok {
					recs++
					if got := ipTOS(ip); got != w {
						t.Errorf("capture record %d: %s to QP %#x with TOS %#x, want %#x", i, wire.BTH(pkt).Opcode(), qpn, got, w)
					}
				}
			}
			if recs == 0 {
				t.Fatal("no sent packet in a's capture")
			}
		})
	}
}
