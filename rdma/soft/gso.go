package soft

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// UDP GSO and GRO between soft devices.
//
// A device whose address is in 127.0.0.0/8 (unless Config.DisableGSO)
// runs in GSO mode; an IPv4 device on another address in udp4 mode,
// which is GSO mode for the packets of soft senders (IP ID 0) and raw
// mode for the others (net_linux.go); an IPv6 device in udp6 mode:
//
//   - Sending, any run of two or more consecutive packets of one length
//     to one destination (the last may be shorter; at most
//     gsoMaxSegments packets and gsoMaxPayload bytes) leaves as one UDP
//     GSO send (UDP_SEGMENT, segment size = the first packet's length).
//     Packet k of the run carries the ICRC computed for IP ID k.
//   - Receiving, the device reads its UDP socket (UDP_GRO on, no raw
//     socket). On lo the kernel hands a GSO send to a UDP_GRO socket
//     whole, and recvmsg reports its segment size in a UDP_GRO control
//     message; lo does no GRO of its own, so a super-datagram is always
//     one GSO send. The receiver cuts the payload at multiples of the
//     segment size and rebuilds each packet's IPv4 and UDP headers for
//     the ICRC (gsoSplitter): source address and port from msg_name,
//     destination the device's address and port 4791, protocol UDP, DF,
//     TTL 64, IP ID k for segment k of a super-datagram and 0 for a plain
//     datagram, the segment's total and UDP lengths.
//
// Those are the headers the kernel writes: an unconnected socket with
// IP_PMTUDISC_DO sends DF and IP ID 0 (ip_select_ident), a GSO
// super-datagram too, and inet_gso_segment numbers the segments from the
// super-datagram's ID, so a stack that segments (a receiver without
// UDP_GRO, a device without USO) would see IP ID k on segment k.
// TestKernelHeader and TestGSOKernelHeader check ID 0 and DF on lo; the
// numbering was measured in a network namespace whose lo does not offload
// segmentation (docs/soft-perf.md). The
// ICRC then verifies exactly as if the kernel had segmented the datagram,
// and a capture (Config.Pcap, tcpdump on lo after segmentation) shows
// packets whose ICRC is right.
//
// The receiver does not see the sender's IP header: it checks the ICRC
// against the header a soft device in GSO mode would have sent. So on a
// loopback device in GSO mode every sender must be such a device (or any
// sender whose datagrams carry IP ID 0 and DF, plain or GSO-numbered as
// above). Another RoCEv2 sender on lo, such as rdma_rxe bound to lo,
// uses other IP IDs: its packets fail the ICRC and are counted as ICRC
// errors, never delivered. Such peers need Config.DisableGSO, which
// keeps the raw socket; a device with DisableGSO in turn cannot take GSO
// sends (its raw socket gets them whole and unsplit), so its loopback
// peers need DisableGSO too. The ICRC still covers everything the
// receiver learns from the network (source address and port, segment
// boundaries, every payload byte): a segment cut at the wrong place or a
// corrupted byte fails it.
//
// The kernel's IP IDs are not checked at Open: soft devices in GSO mode
// agree with each other whatever IDs the kernel writes (neither side
// reads them), and checking would need a raw socket (CAP_NET_RAW), which
// GSO mode otherwise does without. A kernel that numbered otherwise
// would only make captures and external observers see wrong ICRCs; the
// tests above would catch it.

// An IPv6 device on ::1 (udp6 mode, net_linux.go) sends GSO runs to ::1
// and splits what it receives the same way; its rebuilt headers need no
// assumption about the sender (IPv6 has no IP ID), so any sender, rxe
// included, passes the ICRC check.

// GSO limits: the kernel's UDP_MAX_SEGMENTS of older kernels and the
// largest UDP payload of an IPv4 datagram.
const (
	gsoMaxSegments = 64
	gsoMaxPayload  = 65535 - wire.IPv4HeaderLen - wire.UDPHeaderLen
	// rxHeadroom is the room before each received UDP payload in GSO
	// mode, where the splitter writes the rebuilt IPv4 and UDP headers.
	rxHeadroom = wire.IPv4HeaderLen + wire.UDPHeaderLen
	// rxHeadroom6 is rxHeadroom for the IPv6 and UDP headers of an IPv6
	// device.
	rxHeadroom6 = wire.IPv6HeaderLen + wire.UDPHeaderLen
	// rxGSOBufSize is a receive buffer in GSO mode: the headroom and the
	// largest UDP payload.
	rxGSOBufSize = rxHeadroom + gsoMaxPayload + 1
)

// gsoCounters count a device's GSO traffic.
type gsoCounters struct {
	sends    atomic.Uint64 // GSO sends (super-datagrams handed to the kernel)
	sentSegs atomic.Uint64 // packets in them
	supers   atomic.Uint64 // super-datagrams received and split
	recvSegs atomic.Uint64 // packets split out of them
	disabled atomic.Bool   // the kernel refused a GSO send: send one packet per datagram
	fixedID  atomic.Uint64 // packets of GRO-merged datagrams that verified with the first packet's IP ID
}

// gsoSplitter cuts a UDP payload received in GSO mode into packets and
// gives each the IPv4 and UDP headers the sender's kernel wrote (or would
// have written, segmenting); on an IPv6 device, the IPv6 and UDP headers
// (udp6 mode in net_linux.go: nothing in them but the lengths differs
// between segments, and the masked fields are written as 0 and hop limit
// 64, but the TOS / traffic class, which the socket reports with
// congestion control on: tos). The headers of packet k are written over the hl bytes before it:
// the headroom of the buffer for the first, the last bytes of packet k-1
// for the others. The caller must not keep references to a packet after
// asking for the next one.
type gsoSplitter struct {
	b            []byte // hl bytes, then the UDP payload
	src, dst     [4]byte
	src6, dst6   [16]byte
	v6           bool
	hl           int // rxHeadroom or rxHeadroom6
	sport, dport uint16
	seg          int // segment size
	off          int // offset in b of the next packet's payload
	k            uint16
	// tos is the IP TOS / IPv6 traffic class the datagram came with
	// (known with congestion control on: its ECN field), written into
	// each rebuilt header (the ICRC masks it).
	tos uint8
}

// start prepares to split b, rxHeadroom bytes followed by a UDP payload
// of at least one byte received from src:sport by dst:4791. seg is the
// segment size the kernel reported (UDP_GRO), 0 for a plain datagram:
// one packet.
func (s *gsoSplitter) start(b []byte, src, dst [4]byte, sport uint16, seg int) {
	s.startPort(b, src, dst, sport, wire.UDPPort, seg)
}

// startPort is start for a receiver on UDP port dport.
func (s *gsoSplitter) startPort(b []byte, src, dst [4]byte, sport, dport uint16, seg int) {
	n := len(b) - rxHeadroom
	if seg <= 0 || seg > n {
		seg = n
	}
	*s = gsoSplitter{b: b, src: src, dst: dst, hl: rxHeadroom, sport: sport, dport: dport, seg: seg, off: rxHeadroom}
}

// start6 is startPort for an IPv6 device: b holds rxHeadroom6 bytes
// before the UDP payload, received from [src]:sport by [dst]:dport.
func (s *gsoSplitter) start6(b []byte, src, dst [16]byte, sport, dport uint16, seg int) {
	n := len(b) - rxHeadroom6
	if seg <= 0 || seg > n {
		seg = n
	}
	*s = gsoSplitter{b: b, src6: src, dst6: dst, v6: true, hl: rxHeadroom6, sport: sport, dport: dport, seg: seg, off: rxHeadroom6}
}

// segments returns the number of packets of the payload being split.
func (s *gsoSplitter) segments() int {
	if s.seg <= 0 {
		return 0
	}
	return (len(s.b) - s.hl + s.seg - 1) / s.seg
}

// next returns the next packet as a complete IP datagram, or false when
// none is left.
func (s *gsoSplitter) next() ([]byte, bool) {
	if s.off >= len(s.b) {
		return nil, false
	}
	n := min(s.seg, len(s.b)-s.off)
	dg := s.b[s.off-s.hl : s.off+n : s.off+n]
	if s.v6 {
		putIPv6UDPHeader(dg, s.src6, s.dst6, s.sport, s.dport, n)
		if s.tos != 0 {
			dg[0], dg[1] = 0x60|s.tos>>4, s.tos<<4
		}
	} else {
		putIPv4UDPHeaderPorts(dg, s.src, s.dst, s.k, s.sport, s.dport, n)
		if s.tos != 0 {
			dg[1], dg[10], dg[11] = s.tos, 0, 0
			binary.BigEndian.PutUint16(dg[10:], ipv4Checksum(dg[:wire.IPv4HeaderLen]))
		}
	}
	s.off += n
	s.k++
	return dg, true
}
