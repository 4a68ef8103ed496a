package soft

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/rdma/wire"
)

// Classic pcap file format constants.
const (
	pcapMagicNanos = 0xa1b23c4d // nanosecond-resolution timestamps
	pcapLinkRaw    = 101        // LINKTYPE_RAW: packets start with the IP header
	pcapSnapLen    = 65535
	ipv4DefaultTTL = 64 // Linux net.ipv4.ip_default_ttl
	ipv6HopLimit   = 64 // Linux net.ipv6.conf.*.hop_limit
)

// pcapWriter writes every packet a device sends and receives.
type pcapWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

func newPcapWriter(w io.Writer) (*pcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagicNanos)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:], pcapLinkRaw)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcap header: %w", err)
	}
	return &pcapWriter{w: w, buf: make([]byte, 0, 16+wire.IPv6HeaderLen+wire.UDPHeaderLen+maxPacketSize)}, nil
}

// record starts a record of n bytes in p.buf.
func (p *pcapWriter) record(n int) {
	now := time.Now()
	p.buf = p.buf[:16]
	binary.LittleEndian.PutUint32(p.buf[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(p.buf[4:], uint32(now.Nanosecond()))
	binary.LittleEndian.PutUint32(p.buf[8:], uint32(min(n, pcapSnapLen)))
	binary.LittleEndian.PutUint32(p.buf[12:], uint32(n))
}

func (p *pcapWriter) flush() {
	if p.err != nil || p.w == nil {
		return
	}
	_, p.err = p.w.Write(p.buf)
}

// stop ends the stream: a send still in flight when the device closed (a
// timer's ACK) records nothing after Close returned, when the caller may
// read what it gave as Config.Pcap.
func (p *pcapWriter) stop() {
	p.mu.Lock()
	p.w = nil
	p.mu.Unlock()
}

// writeSentPorts records a packet this device sent from UDP port sport
// to dport: pkt is the UDP payload; the IPv4 and UDP headers are the
// ones Linux writes for it, with IP ID id (k for segment k of a UDP GSO
// send, as the kernel numbers the segments when it segments; 0
// otherwise). A GSO send is recorded as its segments, one packet per
// record.
//
// csum records a valid UDP checksum, as a socket that computes checksums
// (a loopback device's, which GSO needs) would send on a wire; on lo the
// kernel leaves it unfinished. Otherwise the checksum is 0 (SO_NO_CHECK).
// tos is the TOS the datagram was sent with (an IP_TOS control message).
func (p *pcapWriter) writeSentPorts(src, dst [4]byte, tos uint8, id, sport, dport uint16, pkt []byte, csum bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := wire.IPv4HeaderLen + wire.UDPHeaderLen + len(pkt)
	p.record(n)
	p.buf = p.buf[:16+wire.IPv4HeaderLen+wire.UDPHeaderLen]
	putIPv4UDPHeaderPorts(p.buf[16:], src, dst, id, sport, dport, len(pkt))
	if tos != 0 {
		ip := p.buf[16 : 16+wire.IPv4HeaderLen]
		ip[1], ip[10], ip[11] = tos, 0, 0
		binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	}
	p.buf = append(p.buf, pkt...)
	if csum {
		putUDPChecksum(p.buf[16:])
	}
	p.flush()
}

// writeSent6 records a packet an IPv6 device sent, with the IPv6 and UDP
// headers Linux writes for it (flow label 0, hop limit 64) and a valid
// UDP checksum (an IPv6 UDP socket computes it), with traffic class tc
// (an IPV6_TCLASS control message).
func (p *pcapWriter) writeSent6(src, dst [16]byte, tc uint8, sport, dport uint16, pkt []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := wire.IPv6HeaderLen + wire.UDPHeaderLen + len(pkt)
	p.record(n)
	p.buf = p.buf[:16+wire.IPv6HeaderLen+wire.UDPHeaderLen]
	putIPv6UDPHeader(p.buf[16:], src, dst, sport, dport, len(pkt))
	p.buf[16] |= tc >> 4
	p.buf[17] |= tc << 4
	p.buf = append(p.buf, pkt...)
	putUDPChecksum(p.buf[16:])
	p.flush()
}

// writeReceived records a received IP datagram (in GSO mode a packet
// with its rebuilt headers). csum says what to record as its UDP
// checksum.
func (p *pcapWriter) writeReceived(datagram []byte, csum pcapCsum) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record(len(datagram))
	p.buf = append(p.buf, datagram...)
	if csum != csumAsIs {
		if _, udp, _, err := wire.SplitIPUDP(p.buf[16:]); err == nil && (csum == csumValid || udp[6] != 0 || udp[7] != 0) {
			putUDPChecksum(p.buf[16:])
		}
	}
	p.flush()
}

// pcapCsum is what the pcap writer records as a received datagram's UDP
// checksum.
type pcapCsum uint8

const (
	// csumAsIs records the datagram's checksum (a raw socket's view; 0
	// from senders with SO_NO_CHECK, as rxe).
	csumAsIs pcapCsum = iota
	// csumFixNonZero replaces a non-zero checksum by the valid one: on lo
	// the sender's kernel leaves it unfinished (CHECKSUM_PARTIAL), where
	// a wire would carry the valid one.
	csumFixNonZero
	// csumValid records the valid checksum: the headers were rebuilt (GSO
	// mode), and the senders a device in GSO mode expects, soft devices
	// in GSO mode, compute checksums.
	csumValid
)

// putUDPChecksum computes and stores the UDP checksum of the IPv4 or
// IPv6 UDP datagram b (IP header without IPv6 extension headers, UDP
// header, payload; lengths already checked or written by this file).
func putUDPChecksum(b []byte) {
	hl, addrs := int(b[0]&0x0f)*4, b[12:20]
	if b[0]>>4 == 6 {
		hl, addrs = wire.IPv6HeaderLen, b[8:40]
	}
	udp := b[hl:]
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < wire.UDPHeaderLen || ulen > len(udp) {
		return
	}
	udp = udp[:ulen]
	udp[6], udp[7] = 0, 0
	// Pseudo header: source, destination, protocol, UDP length (RFC 768,
	// RFC 8200 section 8.1: the same sum).
	s := uint32(17) + uint32(ulen)
	for i := 0; i < len(addrs); i += 2 {
		s += uint32(binary.BigEndian.Uint16(addrs[i:]))
	}
	for i := 0; i+1 < len(udp); i += 2 {
		s += uint32(binary.BigEndian.Uint16(udp[i:]))
	}
	if len(udp)%2 == 1 {
		s += uint32(udp[len(udp)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xffff // 0 means no checksum
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// putIPv6UDPHeader writes into h (48 bytes) an IPv6 header (traffic
// class and flow label 0, hop limit 64, next header UDP) and a UDP header
// with checksum 0 for a UDP payload of n bytes from [src]:sport to
// [dst]:dport.
func putIPv6UDPHeader(h []byte, src, dst [16]byte, sport, dport uint16, n int) {
	ip := h[:wire.IPv6HeaderLen]
	ip[0], ip[1], ip[2], ip[3] = 0x60, 0, 0, 0
	binary.BigEndian.PutUint16(ip[4:], uint16(wire.UDPHeaderLen+n))
	ip[6] = 17
	ip[7] = ipv6HopLimit
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	udp := h[wire.IPv6HeaderLen : wire.IPv6HeaderLen+wire.UDPHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(wire.UDPHeaderLen+n))
	udp[6], udp[7] = 0, 0
}

// putIPv4UDPHeader writes into h (28 bytes) the IPv4 and UDP headers
// Linux sends for a UDP payload of n bytes from this provider's socket:
// TOS 0, ID 0, DF, TTL 64, UDP ports 4791, UDP checksum 0 (SO_NO_CHECK).
func putIPv4UDPHeader(h []byte, src, dst [4]byte, n int) {
	putIPv4UDPHeaderID(h, src, dst, 0, n)
}

// putIPv4UDPHeaderID is putIPv4UDPHeader for IP ID id.
func putIPv4UDPHeaderID(h []byte, src, dst [4]byte, id uint16, n int) {
	putIPv4UDPHeaderPorts(h, src, dst, id, wire.UDPPort, wire.UDPPort, n)
}

// putIPv4UDPHeaderPorts is putIPv4UDPHeaderID for UDP ports sport and
// dport.
func putIPv4UDPHeaderPorts(h []byte, src, dst [4]byte, id, sport, dport uint16, n int) {
	ip := h[:wire.IPv4HeaderLen]
	clear(ip)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4HeaderLen+wire.UDPHeaderLen+n))
	binary.BigEndian.PutUint16(ip[4:], id)
	ip[6] = 0x40 // DF
	ip[8] = ipv4DefaultTTL
	ip[9] = 17
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))
	udp := h[wire.IPv4HeaderLen : wire.IPv4HeaderLen+wire.UDPHeaderLen]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(wire.UDPHeaderLen+n))
	udp[6], udp[7] = 0, 0
}

// ipv4Checksum returns the Internet checksum of an IPv4 header whose
// checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
