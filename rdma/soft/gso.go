package soft

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// UDP GSO between soft devices on loopback.
//
// A device whose address is in 127.0.0.0/8 sends runs of packets to a
// loopback destination as one UDP GSO send (UDP_SEGMENT): the kernel
// builds one super-datagram and, on lo, delivers it unsegmented to the
// receiver's raw socket, which does not report the segment size. Both
// sides therefore follow one rule that makes the segment size derivable
// from the super-datagram alone:
//
//   - A run starts with an RC packet whose payload is exactly the path
//     MTU: SEND First or Middle, RDMA WRITE First or Middle, RDMA READ
//     response First or Middle, without pad bytes. The segment size is
//     that packet's length: its headers (Opcode.HeaderLen), the path MTU
//     and the ICRC (gsoSegmentSize).
//   - Every following packet of the run has exactly that length, except
//     the last, which may be shorter. A run has at most gsoMaxSegments
//     packets and gsoMaxPayload bytes.
//
// The receiver reads the first packet's opcode and destination QP, takes
// the path MTU of that QP, and splits the UDP payload at multiples of the
// segment size when it is longer than one segment. Path MTUs agree on
// both ends of an RC connection (a Middle packet of another length is
// refused by the responder anyway), so the sizes agree. A datagram that
// is not a super-datagram is never longer than the segment size its
// first packet implies, so it is never split.
//
// The kernel gives a GSO super-datagram of an unconnected DF socket IP ID
// 0 and inet_gso_segment numbers the segments from there, so segment k
// carries IP ID k; the ICRC covers the IP ID (and the total and UDP
// lengths), so the sender computes each packet's ICRC for its own ID and
// lengths, and the receiver rebuilds each segment's IP and UDP headers
// (ID of the super-datagram plus k) before checking the ICRC: exactly
// what it would check had the kernel segmented the datagram. A split at
// the wrong place fails the ICRC and is counted, never delivered.

// GSO limits: the kernel's UDP_MAX_SEGMENTS of older kernels and the
// largest UDP payload of an IPv4 datagram.
const (
	gsoMaxSegments = 64
	gsoMaxPayload  = 65535 - wire.IPv4HeaderLen - wire.UDPHeaderLen
	// rxGSOBufSize is the receive buffer of a loopback device: any IPv4 datagram.
	rxGSOBufSize = 65536
)

// gsoCounters count a device's GSO traffic.
type gsoCounters struct {
	sends    atomic.Uint64 // GSO sends (super-datagrams handed to the kernel)
	sentSegs atomic.Uint64 // packets in them
	supers   atomic.Uint64 // super-datagrams received and split
	recvSegs atomic.Uint64 // packets split out of them
	disabled atomic.Bool   // the kernel refused a GSO send: send one packet per datagram
}

// gsoOpcode reports whether a run may start with a packet of opcode op:
// the RC opcodes whose payload is exactly the path MTU.
func gsoOpcode(op wire.Opcode) bool {
	switch op {
	case wire.RCSendFirst, wire.RCSendMiddle, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle,
		wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle:
		return true
	}
	return false
}

// validPMTU reports whether n is an IBA path MTU in bytes (256..4096).
func validPMTU(n int) bool {
	return n >= 256 && n <= 4096 && n&(n-1) == 0
}

// gsoSegmentSize returns the segment size (UDP payload bytes) of a run
// whose first packet has opcode op on a QP with path MTU pmtu, or 0 if no
// run starts with op.
func gsoSegmentSize(op wire.Opcode, pmtu int) int {
	if !gsoOpcode(op) || !validPMTU(pmtu) {
		return 0
	}
	return op.HeaderLen() + pmtu + wire.ICRCLen
}

// gsoStarts reports whether pkt (BTH through ICRC) may start a run: an
// opcode of gsoOpcode, no pad bytes, and a payload of a path MTU.
func gsoStarts(pkt []byte) bool {
	if len(pkt) < wire.BTHLen {
		return false
	}
	b := wire.BTH(pkt[:wire.BTHLen])
	op := b.Opcode()
	return b.PadCount() == 0 && gsoSegmentSize(op, len(pkt)-op.HeaderLen()-wire.ICRCLen) == len(pkt)
}

// gsoSplitter cuts a received super-datagram into segments in place:
// segment k becomes a complete IPv4 datagram whose IP and UDP headers
// (IP ID, total length, header checksum, UDP length; the UDP checksum
// field is copied, meaningless as on lo, and masked by the ICRC) are
// written over the last bytes of segment k-1, which the caller has
// finished with. The caller must not keep references to a segment after
// asking for the next one.
type gsoSplitter struct {
	b   []byte
	hl  int // IP header length
	seg int // segment size
	off int // UDP payload offset of the next segment
	end int // end of the UDP payload
	id  uint16
	k   uint16
	hdr [60 + wire.UDPHeaderLen]byte // the super-datagram's IP and UDP headers
}

// start prepares to split datagram b, whose IP header is ip (a prefix of
// b), into UDP payload segments of seg bytes. udpLen is the super-
// datagram's UDP length. It reports false, leaving the splitter empty, if
// the datagram cannot be split that way.
func (s *gsoSplitter) start(b []byte, hl, udpLen, seg int) bool {
	s.b, s.off, s.end = nil, 0, 0
	if hl < wire.IPv4HeaderLen || hl > 60 || seg < hl+wire.UDPHeaderLen || hl+udpLen > len(b) || udpLen-wire.UDPHeaderLen <= seg {
		return false
	}
	s.b, s.hl, s.seg = b, hl, seg
	s.off = hl + wire.UDPHeaderLen
	s.end = hl + udpLen
	copy(s.hdr[:], b[:s.off])
	s.id = binary.BigEndian.Uint16(b[4:])
	s.k = 0
	return true
}

// segments returns the number of segments of the datagram being split.
func (s *gsoSplitter) segments() int {
	if s.b == nil {
		return 0
	}
	n := s.end - (s.hl + wire.UDPHeaderLen)
	return (n + s.seg - 1) / s.seg
}

// next returns the next segment as a complete IPv4 datagram, or false
// when none is left.
func (s *gsoSplitter) next() ([]byte, bool) {
	if s.off >= s.end {
		return nil, false
	}
	n := min(s.seg, s.end-s.off)
	h := s.off - s.hl - wire.UDPHeaderLen
	dg := s.b[h : s.off+n : s.off+n]
	copy(dg, s.hdr[:s.hl+wire.UDPHeaderLen])
	ip := dg[:s.hl]
	binary.BigEndian.PutUint16(ip[2:], uint16(s.hl+wire.UDPHeaderLen+n))
	binary.BigEndian.PutUint16(ip[4:], s.id+s.k)
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	udp := dg[s.hl : s.hl+wire.UDPHeaderLen]
	binary.BigEndian.PutUint16(udp[4:], uint16(wire.UDPHeaderLen+n))
	s.off += n
	s.k++
	return dg, true
}

// gsoCandidate reports whether pkt, a received UDP payload, may hold
// more than one packet by the rule, and returns the destination QP of its
// first packet, whose path MTU decides the segment size.
func gsoCandidate(pkt []byte) (qpn uint32, ok bool) {
	// The smallest run: a packet at path MTU 256 and one more byte.
	if len(pkt) <= wire.BTHLen+256+wire.ICRCLen {
		return 0, false
	}
	b := wire.BTH(pkt[:wire.BTHLen])
	if !gsoOpcode(b.Opcode()) {
		return 0, false
	}
	return b.DestQP(), true
}

// gsoSplitSize returns the segment size by which a received UDP payload
// pkt is to be split when its first packet's QP has path MTU pmtu, or 0
// when pkt is a single packet.
func gsoSplitSize(pkt []byte, pmtu int) int {
	if len(pkt) < wire.BTHLen {
		return 0
	}
	s := gsoSegmentSize(wire.BTH(pkt[:wire.BTHLen]).Opcode(), pmtu)
	if s == 0 || len(pkt) <= s {
		return 0
	}
	return s
}
