package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// UDPPort is the IANA UDP destination port of RoCEv2.
const UDPPort = 4791

// Header lengths in bytes (InfiniBand Architecture Specification vol. 1, chapter 9).
const (
	BTHLen          = 12 // Base Transport Header
	RETHLen         = 16 // RDMA Extended Transport Header
	AETHLen         = 4  // ACK Extended Transport Header
	DETHLen         = 8  // Datagram Extended Transport Header
	ImmDtLen        = 4  // Immediate Data
	IETHLen         = 4  // Invalidate Extended Transport Header
	AtomicETHLen    = 28 // Atomic Extended Transport Header
	AtomicAckETHLen = 8  // Atomic Acknowledge Extended Transport Header
	ICRCLen         = 4  // Invariant CRC
)

// DefaultPKey is the default partition key (full membership), used by RoCE.
const DefaultPKey = 0xffff

// PSNMask keeps the 24 bits of a packet sequence number; QPNMask those of a QP number.
const (
	PSNMask = 0xffffff
	QPNMask = 0xffffff
)

// ErrShort is returned when a buffer is too short for the header it must hold.
var ErrShort = errors.New("wire: packet too short")

// BTH is a view of the 12-byte Base Transport Header.
type BTH []byte

// Opcode returns the BTH OpCode (transport class in bits 7:5, operation in 4:0).
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SE returns the Solicited Event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq returns the MigReq bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns the number of pad bytes (0–3) added to the payload.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[1] & 0x0f }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN returns the Forward Explicit Congestion Notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN returns the Backward Explicit Congestion Notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// Resv6 returns the six reserved bits of byte 4.
func (b BTH) Resv6() uint8 { return b[4] & 0x3f }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[4:]) & QPNMask }

// AckReq returns the AckReq bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// Resv7 returns the seven reserved bits after AckReq.
func (b BTH) Resv7() uint8 { return b[8] & 0x7f }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() uint32 { return binary.BigEndian.Uint32(b[8:]) & PSNMask }

// SetOpcode sets the OpCode.
func (b BTH) SetOpcode(op Opcode) { b[0] = byte(op) }

// SetFlags sets SE, MigReq, the pad count and TVer (byte 1).
func (b BTH) SetFlags(se, migReq bool, pad int, tver uint8) {
	v := byte(pad&3)<<4 | tver&0x0f
	if se {
		v |= 0x80
	}
	if migReq {
		v |= 0x40
	}
	b[1] = v
}

// SetPKey sets the partition key.
func (b BTH) SetPKey(pkey uint16) { binary.BigEndian.PutUint16(b[2:], pkey) }

// SetDestQP sets the destination QP number and clears FECN, BECN and the reserved bits.
func (b BTH) SetDestQP(qpn uint32) { binary.BigEndian.PutUint32(b[4:], qpn&QPNMask) }

// SetPSN sets the PSN and the AckReq bit, clearing the reserved bits.
func (b BTH) SetPSN(psn uint32, ackReq bool) {
	v := psn & PSNMask
	if ackReq {
		v |= 0x80000000
	}
	binary.BigEndian.PutUint32(b[8:], v)
}

// String formats the BTH for logs.
func (b BTH) String() string {
	if len(b) < BTHLen {
		return "BTH(short)"
	}
	return fmt.Sprintf("BTH{%s dqpn=%#x psn=%d ackreq=%t se=%t pad=%d}", b.Opcode(), b.DestQP(), b.PSN(), b.AckReq(), b.SE(), b.PadCount())
}

// PSNAdd returns psn+n modulo 2^24.
func PSNAdd(psn uint32, n int) uint32 { return (psn + uint32(n)) & PSNMask }

// PSNDiff returns the signed distance a-b in the 24-bit PSN space, in
// (-2^23, 2^23]: positive when a is after b.
func PSNDiff(a, b uint32) int32 {
	d := (a - b) & PSNMask
	if d > 1<<23 {
		return int32(d) - 1<<24
	}
	return int32(d)
}

// RETH is a view of the RDMA Extended Transport Header.
type RETH []byte

// VA returns the virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALen returns the DMA length in bytes.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// Set writes all fields.
func (r RETH) Set(va uint64, rkey, dmaLen uint32) {
	binary.BigEndian.PutUint64(r[0:], va)
	binary.BigEndian.PutUint32(r[8:], rkey)
	binary.BigEndian.PutUint32(r[12:], dmaLen)
}

// AETH is a view of the ACK Extended Transport Header.
type AETH []byte

// Syndrome returns the 8-bit syndrome.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return binary.BigEndian.Uint32(a[0:]) & 0xffffff }

// Set writes the syndrome and MSN.
func (a AETH) Set(s Syndrome, msn uint32) {
	binary.BigEndian.PutUint32(a[0:], uint32(s)<<24|msn&0xffffff)
}

// DETH is a view of the Datagram Extended Transport Header.
type DETH []byte

// QKey returns the queue key.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d[0:]) }

// SrcQP returns the 24-bit source QP number.
func (d DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(d[4:]) & QPNMask }

// Set writes the Q_Key and source QP, clearing the reserved byte.
func (d DETH) Set(qkey, srcQP uint32) {
	binary.BigEndian.PutUint32(d[0:], qkey)
	binary.BigEndian.PutUint32(d[4:], srcQP&QPNMask)
}

// AtomicETH is a view of the Atomic Extended Transport Header.
type AtomicETH []byte

// VA returns the virtual address.
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapData returns the swap (or add) operand.
func (a AtomicETH) SwapData() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// CompareData returns the compare operand.
func (a AtomicETH) CompareData() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Syndrome is the AETH syndrome: the kind of acknowledgement in bits 6:5
// and a credit count, RNR timer or NAK code in bits 4:0.
type Syndrome uint8

// AETH syndrome kinds (bits 6:5).
const (
	SyndromeACK = 0x00 // ACK; low bits are the credit count (0x1f: invalid/none)
	SyndromeRNR = 0x20 // RNR NAK; low bits are the RNR timer code
	SyndromeNAK = 0x60 // NAK; low bits are the NAK code
)

// NAK codes (AETH syndrome bits 4:0 when the kind is NAK).
const (
	NAKPSNSequenceError     = 0
	NAKInvalidRequest       = 1
	NAKRemoteAccessError    = 2
	NAKRemoteOperationalErr = 3
	NAKInvalidRDRequest     = 4
)

// Kind returns the syndrome kind (SyndromeACK, SyndromeRNR or SyndromeNAK).
func (s Syndrome) Kind() uint8 { return uint8(s) & 0x60 }

// Value returns the low five bits: credit count, RNR timer or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// String names the syndrome.
func (s Syndrome) String() string {
	switch s.Kind() {
	case SyndromeACK:
		return fmt.Sprintf("ACK(credits %d)", s.Value())
	case SyndromeRNR:
		return fmt.Sprintf("RNR NAK(timer %d)", s.Value())
	case SyndromeNAK:
		switch s.Value() {
		case NAKPSNSequenceError:
			return "NAK(PSN sequence error)"
		case NAKInvalidRequest:
			return "NAK(invalid request)"
		case NAKRemoteAccessError:
			return "NAK(remote access error)"
		case NAKRemoteOperationalErr:
			return "NAK(remote operational error)"
		case NAKInvalidRDRequest:
			return "NAK(invalid RD request)"
		}
		return fmt.Sprintf("NAK(code %d)", s.Value())
	}
	return fmt.Sprintf("syndrome(%#02x)", uint8(s))
}
