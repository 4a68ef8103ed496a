package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// ICRCCache computes ICRCs as the functions of icrc.go do, remembering the
// CRC register after the pseudo-LRH and the masked IP and UDP headers of
// recent datagrams. A QP's datagrams come in a few shapes (a command, a
// data packet, an ACK) whose 28 or 48 header bytes cost more through the
// byte-wise CRC than a 4 KiB payload through CLMUL.
//
// Entries are keyed by the masked header bytes themselves, so a hit gives
// exactly the register the bytes would. The zero value is ready to use; a
// nil *ICRCCache computes without remembering. It is not safe for
// concurrent use: each sending or receiving goroutine keeps its own.
type ICRCCache struct {
	slots [icrcCacheSlots]icrcCacheSlot
}

const icrcCacheSlots = 8 // a power of two

type icrcCacheSlot struct {
	n   uint8 // key length; 0: empty
	key [IPv6HeaderLen + UDPHeaderLen]byte
	reg uint32
}

// headerReg returns the register after icrcLRHRegister advanced over h,
// the masked IP header (no options) and masked UDP header.
func (c *ICRCCache) headerReg(h []byte) uint32 {
	if c == nil || len(h) > len(c.slots[0].key) {
		return crcBytes(icrcLRHRegister, h)
	}
	// The UDP source port and length tell a QP's shapes apart.
	u := h[len(h)-UDPHeaderLen:]
	s := &c.slots[(u[1]^u[4]^u[5]^h[len(h)-UDPHeaderLen-1])&(icrcCacheSlots-1)]
	if int(s.n) == len(h) && string(s.key[:len(h)]) == string(h) {
		return s.reg
	}
	reg := crcBytes(icrcLRHRegister, h)
	s.n = uint8(len(h))
	copy(s.key[:], h)
	s.reg = reg
	return reg
}

// ipv4UDP fills h with a masked IPv4 header without options and a masked
// UDP header for a datagram of udpLen UDP bytes.
func ipv4UDP(h *[IPv4HeaderLen + UDPHeaderLen]byte, src, dst [4]byte, ipID uint16, df bool, sport, dport uint16, udpLen int) {
	h[0] = 0x45
	h[1] = 0xff
	binary.BigEndian.PutUint16(h[2:], uint16(IPv4HeaderLen+udpLen))
	binary.BigEndian.PutUint16(h[4:], ipID)
	if df {
		h[6] = 0x40
	}
	h[8] = 0xff
	h[9] = ipProtoUDP
	h[10], h[11] = 0xff, 0xff
	copy(h[12:], src[:])
	copy(h[16:], dst[:])
	maskedUDP(h[IPv4HeaderLen:], sport, dport, udpLen)
}

// maskedUDP writes a UDP header with the checksum masked into u.
func maskedUDP(u []byte, sport, dport uint16, udpLen int) {
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xff, 0xff
}

// ipv6UDP is ipv4UDP for a fixed IPv6 header.
func ipv6UDP(h *[IPv6HeaderLen + UDPHeaderLen]byte, src, dst [16]byte, sport, dport uint16, udpLen int) {
	h[0], h[1], h[2], h[3] = 0x6f, 0xff, 0xff, 0xff
	binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
	h[6] = ipProtoUDP
	h[7] = 0xff
	copy(h[8:], src[:])
	copy(h[24:], dst[:])
	maskedUDP(h[IPv6HeaderLen:], sport, dport, udpLen)
}

// ForIPv4 is ICRCForIPv4.
func (c *ICRCCache) ForIPv4(src, dst [4]byte, ipID uint16, df bool, sport, dport uint16, pkt []byte) uint32 {
	var h [IPv4HeaderLen + UDPHeaderLen]byte
	ipv4UDP(&h, src, dst, ipID, df, sport, dport, UDPHeaderLen+len(pkt)+ICRCLen)
	return icrcBTHOnward(c.headerReg(h[:]), pkt)
}

// ForIPv4Gather is ICRCForIPv4Gather.
func (c *ICRCCache) ForIPv4Gather(src, dst [4]byte, ipID uint16, df bool, sport, dport uint16, hdr, data, pad []byte) uint32 {
	var h [IPv4HeaderLen + UDPHeaderLen]byte
	ipv4UDP(&h, src, dst, ipID, df, sport, dport, UDPHeaderLen+len(hdr)+len(data)+len(pad)+ICRCLen)
	crc := icrcBTHOnward(c.headerReg(h[:]), hdr)
	crc = crc32.Update(crc, crc32.IEEETable, data)
	return crc32.Update(crc, crc32.IEEETable, pad)
}

// ForIPv6 is ICRCForIPv6.
func (c *ICRCCache) ForIPv6(src, dst [16]byte, sport, dport uint16, pkt []byte) uint32 {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	ipv6UDP(&h, src, dst, sport, dport, UDPHeaderLen+len(pkt)+ICRCLen)
	return icrcBTHOnward(c.headerReg(h[:]), pkt)
}

// ForIPv6Gather is ICRCForIPv6Gather.
func (c *ICRCCache) ForIPv6Gather(src, dst [16]byte, sport, dport uint16, hdr, data, pad []byte) uint32 {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	ipv6UDP(&h, src, dst, sport, dport, UDPHeaderLen+len(hdr)+len(data)+len(pad)+ICRCLen)
	crc := icrcBTHOnward(c.headerReg(h[:]), hdr)
	crc = crc32.Update(crc, crc32.IEEETable, data)
	return crc32.Update(crc, crc32.IEEETable, pad)
}

// ICRC is ICRC (the function).
func (c *ICRCCache) ICRC(ip, udp, pkt []byte) uint32 {
	n := len(ip)
	if n != IPv4HeaderLen && n != IPv6HeaderLen || len(udp) != UDPHeaderLen {
		return ICRC(ip, udp, pkt) // options, or malformed: not cached
	}
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	copy(h[:], ip)
	maskIP(h[:n])
	copy(h[n:], udp)
	h[n+6], h[n+7] = 0xff, 0xff
	return icrcBTHOnward(c.headerReg(h[:n+UDPHeaderLen]), pkt)
}

// CheckParts is CheckICRCParts.
func (c *ICRCCache) CheckParts(ip, udp, pkt []byte) error {
	if len(pkt) < BTHLen+ICRCLen {
		return fmt.Errorf("wire: %d-byte RoCEv2 packet: %w", len(pkt), ErrShort)
	}
	end := len(pkt) - ICRCLen
	got := binary.LittleEndian.Uint32(pkt[end:])
	if want := c.ICRC(ip, udp, pkt[:end]); got != want {
		return fmt.Errorf("wire: packet ICRC %#08x, computed %#08x: %w", got, want, ErrBadICRC)
	}
	return nil
}
