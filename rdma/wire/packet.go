package wire

import (
	"encoding/binary"
	"fmt"
)

// Packet locates the headers and payload of one RoCEv2 packet, from the BTH
// through the ICRC. Its header fields are views into the parsed buffer, nil
// when the opcode does not carry that header. Parsing does not allocate.
type Packet struct {
	BTH          BTH
	DETH         DETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH []byte
	ImmDt        []byte // 4 bytes, big-endian immediate data
	IETH         []byte // 4 bytes, big-endian rkey to invalidate
	Payload      []byte // without pad bytes
	ICRC         []byte // the 4 trailing bytes
}

// Parse locates the headers of a RoCEv2 packet (the UDP payload: BTH
// through ICRC). It checks lengths only; the ICRC is checked separately.
func (p *Packet) Parse(b []byte) error {
	*p = Packet{}
	if len(b) < BTHLen+ICRCLen {
		return fmt.Errorf("wire: %d-byte RoCEv2 packet: %w", len(b), ErrShort)
	}
	bth := BTH(b[:BTHLen])
	op := bth.Opcode()
	if !op.Known() {
		return fmt.Errorf("wire: unsupported BTH opcode %#02x", uint8(op))
	}
	end := len(b) - ICRCLen
	hl := op.HeaderLen()
	if end < hl {
		return fmt.Errorf("wire: %s packet of %d bytes: %w", op, len(b), ErrShort)
	}
	p.BTH = bth
	off := BTHLen
	take := func(n int) []byte {
		v := b[off : off+n : off+n]
		off += n
		return v
	}
	if op.HasDETH() {
		p.DETH = DETH(take(DETHLen))
	}
	if op.HasRETH() {
		p.RETH = RETH(take(RETHLen))
	}
	if op.HasAtomicETH() {
		p.AtomicETH = AtomicETH(take(AtomicETHLen))
	}
	if op.HasAETH() {
		p.AETH = AETH(take(AETHLen))
	}
	if op.HasAtomicAckETH() {
		p.AtomicAckETH = take(AtomicAckETHLen)
	}
	if op.HasImmDt() {
		p.ImmDt = take(ImmDtLen)
	}
	if op.HasIETH() {
		p.IETH = take(IETHLen)
	}
	if op.IsCNP() {
		take(CNPReservedLen)
	}
	pad := bth.PadCount()
	if end-off < pad {
		return fmt.Errorf("wire: %s: pad count %d exceeds the %d bytes after the headers", op, pad, end-off)
	}
	if !op.HasPayload() && end-off-pad != 0 {
		return fmt.Errorf("wire: %s carries %d unexpected payload bytes", op, end-off-pad)
	}
	p.Payload = b[off : end-pad : end-pad]
	p.ICRC = b[end:len(b):len(b)]
	return nil
}

// Opcode returns the packet's BTH opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// Imm returns the immediate data (meaningful when ImmDt is present).
func (p *Packet) Imm() uint32 {
	if p.ImmDt == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p.ImmDt)
}

// InvalidateRKey returns the IETH rkey (meaningful when IETH is present).
func (p *Packet) InvalidateRKey() uint32 {
	if p.IETH == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p.IETH)
}

// ICRCValue returns the ICRC as the CRC-32 value it encodes (its bytes are
// stored least-significant first).
func (p *Packet) ICRCValue() uint32 { return binary.LittleEndian.Uint32(p.ICRC) }

// PadFor returns the number of pad bytes a payload of n bytes needs.
func PadFor(n int) int { return -n & 3 }
