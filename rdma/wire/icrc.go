package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The RoCEv2 Invariant CRC (IBA vol. 1 annex A17.4; Linux
// drivers/infiniband/sw/rxe/rxe_icrc.c) is a CRC-32 (IEEE 802.3, as
// crc32.ChecksumIEEE) over
//
//	8 bytes of 0xff (the masked LRH an InfiniBand packet would carry),
//	the IP header with the variant fields set to all ones
//	  (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit),
//	the UDP header with the checksum set to all ones,
//	the BTH with byte 4 (FECN, BECN, reserved) set to all ones,
//	the extended headers, payload and pad bytes,
//
// stored after the pad bytes least-significant byte first. rxe starts its
// crc32_le register at 0xdebb20e3 (the register after the eight 0xff bytes
// from the usual all-ones start) and stores the inverted register, which
// is exactly the standard CRC-32 of the sequence above: the value this file
// computes and Packet.ICRCValue reads.

// ErrBadICRC is wrapped by CheckICRC when the ICRC does not match.
var ErrBadICRC = errors.New("wire: ICRC mismatch")

// icrcLRHRegister is the CRC-32 register (not inverted) after eight 0xff
// bytes from the initial all-ones register: the seed rxe_icrc.c names.
const icrcLRHRegister = 0xdebb20e3

// Header lengths the ICRC pseudo header is made of.
const (
	IPv4HeaderLen = 20 // IPv4 header without options
	IPv6HeaderLen = 40 // fixed IPv6 header
	UDPHeaderLen  = 8
	ipv4MaxHdrLen = 60
	ipProtoUDP    = 17
)

// crcBytes advances a (non-inverted) CRC-32 register over p, eight bytes
// at a time (slicing-by-8, as hash/crc32 does without CLMUL). It is used
// for the few header bytes that must be masked, so that the masked copy
// lives in a caller's stack array: hash/crc32 calls its implementation
// through a function value, which would move the array to the heap.
func crcBytes(reg uint32, p []byte) uint32 {
	tab := crcSlicing8
	for len(p) >= 8 {
		reg ^= binary.LittleEndian.Uint32(p)
		reg = tab[0][p[7]] ^ tab[1][p[6]] ^ tab[2][p[5]] ^ tab[3][p[4]] ^
			tab[4][reg>>24] ^ tab[5][reg>>16&0xff] ^ tab[6][reg>>8&0xff] ^ tab[7][reg&0xff]
		p = p[8:]
	}
	for _, v := range p {
		reg = tab[0][byte(reg)^v] ^ reg>>8
	}
	return reg
}

// crcSlicing8 holds the slicing-by-8 tables of the IEEE polynomial: row 0
// is crc32.IEEETable, row k advances a byte followed by k zero bytes.
var crcSlicing8 = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// maskIP sets the variant fields of an IPv4 or IPv6 header copy to all ones.
// Fields beyond len(h) are left alone.
func maskIP(h []byte) {
	if len(h) == 0 {
		return
	}
	if h[0]>>4 == 6 {
		h[0] |= 0x0f // traffic class, high nibble
		for i := 1; i < 4 && i < len(h); i++ {
			h[i] = 0xff // traffic class low nibble and flow label
		}
		if len(h) > 7 {
			h[7] = 0xff // hop limit
		}
		return
	}
	if len(h) > 1 {
		h[1] = 0xff // TOS
	}
	if len(h) > 8 {
		h[8] = 0xff // TTL
	}
	if len(h) > 11 {
		h[10], h[11] = 0xff, 0xff // header checksum
	}
}

// ICRC returns the ICRC of a RoCEv2 packet: ip is its IPv4 (20 to 60
// bytes) or IPv6 (40 bytes) header, udp its 8-byte UDP header and pkt the
// UDP payload from the BTH through the pad bytes, without the ICRC. The
// header slices are not modified. ICRC does not allocate; headers of
// unexpected length give a meaningless value, not a panic.
func ICRC(ip, udp, pkt []byte) uint32 {
	var hdr [ipv4MaxHdrLen]byte
	n := copy(hdr[:], ip)
	maskIP(hdr[:n])
	reg := crcBytes(icrcLRHRegister, hdr[:n])
	if n < len(ip) {
		reg = crcBytes(reg, ip[n:])
	}
	return icrcTransport(reg, udp, pkt)
}

// icrcTransport continues the ICRC register over the UDP header, the BTH
// and the rest of the packet, and returns the final CRC value.
func icrcTransport(reg uint32, udp, pkt []byte) uint32 {
	var h [UDPHeaderLen]byte
	u := copy(h[:], udp)
	if u == UDPHeaderLen {
		h[6], h[7] = 0xff, 0xff // UDP checksum
	}
	reg = crcBytes(reg, h[:u])
	if u < len(udp) {
		reg = crcBytes(reg, udp[u:])
	}
	return icrcBTHOnward(reg, pkt)
}

// icrcBTHOnward finishes the ICRC over the BTH (byte 4 masked) and the
// rest of the packet.
func icrcBTHOnward(reg uint32, pkt []byte) uint32 {
	var h [BTHLen]byte
	b := copy(h[:], pkt)
	if b > 4 {
		h[4] = 0xff // FECN, BECN, resv6
	}
	reg = crcBytes(reg, h[:b])
	// crc32.Update takes and returns the inverted register.
	return crc32.Update(^reg, crc32.IEEETable, pkt[b:])
}

// ICRCForIPv4 returns the ICRC of pkt (the BTH through the pad bytes,
// without the ICRC) as it will be sent in a UDP datagram from src:sport to
// dst:dport whose IPv4 header, written by the kernel, has no options, the
// given Identification and the Don't Fragment flag df. The total length and
// the UDP length are derived from len(pkt) plus the 4-byte ICRC; TOS, TTL
// and the checksums are masked. It does not allocate.
func ICRCForIPv4(src, dst [4]byte, ipID uint16, df bool, sport, dport uint16, pkt []byte) uint32 {
	return (*ICRCCache)(nil).ForIPv4(src, dst, ipID, df, sport, dport, pkt)
}

// ICRCForIPv4Gather is ICRCForIPv4 for a packet held in three pieces:
// hdr (the BTH and the extended headers, at least the BTH), data (the
// payload) and pad (the pad bytes), sent as hdr, data, pad and the ICRC.
// It does not allocate.
func ICRCForIPv4Gather(src, dst [4]byte, ipID uint16, df bool, sport, dport uint16, hdr, data, pad []byte) uint32 {
	return (*ICRCCache)(nil).ForIPv4Gather(src, dst, ipID, df, sport, dport, hdr, data, pad)
}

// ICRCForIPv6 returns the ICRC of pkt (the BTH through the pad bytes,
// without the ICRC) as it will be sent in a UDP datagram from src:sport to
// dst:dport with a fixed 40-byte IPv6 header and no extension headers.
// The payload length and the UDP length are derived from len(pkt) plus the
// 4-byte ICRC; traffic class, flow label, hop limit and the UDP checksum
// are masked. Nothing else in an IPv6 header varies, so the value is the
// same whatever the sending kernel writes in those fields (rxe: flow label
// 0, the path's traffic class and hop limit; a UDP socket: maybe an
// automatic flow label). It does not allocate.
func ICRCForIPv6(src, dst [16]byte, sport, dport uint16, pkt []byte) uint32 {
	return (*ICRCCache)(nil).ForIPv6(src, dst, sport, dport, pkt)
}

// ICRCForIPv6Gather is ICRCForIPv6 for a packet held in three pieces:
// hdr (the BTH and the extended headers, at least the BTH), data (the
// payload) and pad (the pad bytes), sent as hdr, data, pad and the ICRC.
// It does not allocate.
func ICRCForIPv6Gather(src, dst [16]byte, sport, dport uint16, hdr, data, pad []byte) uint32 {
	return (*ICRCCache)(nil).ForIPv6Gather(src, dst, sport, dport, hdr, data, pad)
}

// PutICRC stores the ICRC value v in the last 4 bytes of pkt (a RoCEv2
// packet from the BTH through the ICRC), least-significant byte first.
func PutICRC(pkt []byte, v uint32) error {
	if len(pkt) < BTHLen+ICRCLen {
		return fmt.Errorf("wire: put ICRC into %d-byte packet: %w", len(pkt), ErrShort)
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], v)
	return nil
}

// SplitIPUDP locates the IP header, UDP header and UDP payload of an IPv4
// or IPv6 datagram carrying UDP. The UDP payload is bounded by the UDP
// length; bytes after the IP datagram (link-layer padding) are ignored.
// IPv6 extension headers are not supported.
func SplitIPUDP(b []byte) (ip, udp, payload []byte, err error) {
	if len(b) == 0 {
		return nil, nil, nil, fmt.Errorf("wire: empty IP datagram: %w", ErrShort)
	}
	var total int
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return nil, nil, nil, fmt.Errorf("wire: %d-byte IPv4 datagram: %w", len(b), ErrShort)
		}
		ihl := int(b[0]&0x0f) * 4
		total = int(binary.BigEndian.Uint16(b[2:]))
		if ihl < IPv4HeaderLen || total < ihl || total > len(b) {
			return nil, nil, nil, fmt.Errorf("wire: IPv4 header length %d, total length %d, %d bytes: %w", ihl, total, len(b), ErrShort)
		}
		if b[9] != ipProtoUDP {
			return nil, nil, nil, fmt.Errorf("wire: IPv4 protocol %d is not UDP", b[9])
		}
		if off := binary.BigEndian.Uint16(b[6:]); off&0x3fff != 0 {
			return nil, nil, nil, fmt.Errorf("wire: IPv4 fragment (flags/offset %#04x)", off)
		}
		ip = b[:ihl:ihl]
	case 6:
		if len(b) < IPv6HeaderLen {
			return nil, nil, nil, fmt.Errorf("wire: %d-byte IPv6 datagram: %w", len(b), ErrShort)
		}
		total = IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:]))
		if total > len(b) {
			return nil, nil, nil, fmt.Errorf("wire: IPv6 payload length %d, %d bytes: %w", total-IPv6HeaderLen, len(b), ErrShort)
		}
		if b[6] != ipProtoUDP {
			return nil, nil, nil, fmt.Errorf("wire: IPv6 next header %d is not UDP", b[6])
		}
		ip = b[:IPv6HeaderLen:IPv6HeaderLen]
	default:
		return nil, nil, nil, fmt.Errorf("wire: IP version %d", b[0]>>4)
	}
	rest := b[len(ip):total]
	if len(rest) < UDPHeaderLen {
		return nil, nil, nil, fmt.Errorf("wire: %d bytes after the IP header: %w", len(rest), ErrShort)
	}
	ulen := int(binary.BigEndian.Uint16(rest[4:]))
	if ulen < UDPHeaderLen || ulen > len(rest) {
		return nil, nil, nil, fmt.Errorf("wire: UDP length %d, %d bytes after the IP header: %w", ulen, len(rest), ErrShort)
	}
	return ip, rest[:UDPHeaderLen:UDPHeaderLen], rest[UDPHeaderLen:ulen:ulen], nil
}

// CheckICRC verifies the ICRC of a RoCEv2 packet given as a whole IP
// datagram (IP header, UDP header, BTH through ICRC). It returns an error
// wrapping ErrShort for truncated or malformed datagrams and ErrBadICRC
// when the ICRC does not match. It does not allocate when the ICRC is good.
func CheckICRC(b []byte) error {
	ip, udp, pkt, err := SplitIPUDP(b)
	if err != nil {
		return err
	}
	return CheckICRCParts(ip, udp, pkt)
}

// CheckICRCParts verifies the ICRC of pkt (the UDP payload, BTH through
// ICRC) received with the given IP and UDP headers.
func CheckICRCParts(ip, udp, pkt []byte) error {
	return (*ICRCCache)(nil).CheckParts(ip, udp, pkt)
}
