package wire

import (
	"encoding/binary"
	"fmt"
)

// Congestion Notification Packet (RoCEv2, IBA vol. 1 annex A17.9.3). A
// notification point that receives a packet marked CE (ECN 11) answers
// the flow's sender, the reaction point, with a CNP:
//
//	BTH      12 bytes: OpCode 0x81, SE, M, PadCnt, TVer 0; the P_Key of
//	         the marked packet; FECN 0, BECN 1; DestQP the sender's QP
//	         (the marked packet's source QP); AckReq 0, PSN 0
//	reserved 16 bytes of zeros
//	ICRC     4 bytes, over the BTH as any packet's (wire.ICRC)
//
// It carries no PSN and is not acknowledged; it leaves without ECN
// capability (its IP ECN field is Not-ECT). mlx5 and rxe differ only in
// what they do on receipt: a ConnectX reaction point cuts the QP's rate,
// rxe drops it as an opcode it does not know.

// OpCNP is the BTH opcode of a CNP (class CN, operation 1).
const OpCNP Opcode = 0x81

// CNP lengths in bytes.
const (
	CNPReservedLen = 16                                // the reserved bytes after the BTH
	CNPLen         = BTHLen + CNPReservedLen + ICRCLen // a whole CNP, BTH through ICRC
)

// CNP is a view of a Congestion Notification Packet, BTH through ICRC.
type CNP []byte

// BTH returns the CNP's base transport header.
func (c CNP) BTH() BTH { return BTH(c[:BTHLen]) }

// DestQP returns the QP whose sender is asked to slow down.
func (c CNP) DestQP() uint32 { return c.BTH().DestQP() }

// PKey returns the partition key.
func (c CNP) PKey() uint16 { return c.BTH().PKey() }

// Reserved returns the 16 reserved bytes.
func (c CNP) Reserved() []byte { return c[BTHLen : BTHLen+CNPReservedLen] }

// ICRC returns the 4 trailing ICRC bytes.
func (c CNP) ICRC() []byte { return c[BTHLen+CNPReservedLen : CNPLen] }

// PutCNP writes a CNP for destination QP destQP with partition key pkey
// into b[:CNPLen], leaving the ICRC zero (the sender computes it with the
// IP and UDP headers), and returns CNPLen.
func PutCNP(b []byte, destQP uint32, pkey uint16) (int, error) {
	if len(b) < CNPLen {
		return 0, fmt.Errorf("wire: %d-byte buffer for a CNP: %w", len(b), ErrShort)
	}
	c := b[:CNPLen]
	clear(c)
	bth := BTH(c)
	bth.SetOpcode(OpCNP)
	bth.SetPKey(pkey)
	// BECN set, FECN clear (annex A17.9.3); PSN and AckReq zero.
	binary.BigEndian.PutUint32(c[4:], 0x40000000|destQP&QPNMask)
	return CNPLen, nil
}

// ParseCNP checks that b (a UDP payload, BTH through ICRC) is a CNP and
// returns the view of it. The reserved bytes and the BECN bit are not
// checked, as receivers ignore them; the length must be CNPLen and the
// header version 0. The ICRC is checked separately (CheckICRC).
func ParseCNP(b []byte) (CNP, error) {
	if len(b) < BTHLen {
		return nil, fmt.Errorf("wire: %d-byte CNP: %w", len(b), ErrShort)
	}
	bth := BTH(b)
	if op := bth.Opcode(); op != OpCNP {
		return nil, fmt.Errorf("wire: opcode %s is not a CNP", op)
	}
	if len(b) != CNPLen {
		return nil, fmt.Errorf("wire: CNP of %d bytes, want %d", len(b), CNPLen)
	}
	if v := bth.TVer(); v != 0 {
		return nil, fmt.Errorf("wire: CNP with transport header version %d", v)
	}
	if bth.PadCount() != 0 {
		return nil, fmt.Errorf("wire: CNP with pad count %d", bth.PadCount())
	}
	return CNP(b[:CNPLen:CNPLen]), nil
}
