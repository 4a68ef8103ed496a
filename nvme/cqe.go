package nvme

import (
	"encoding/binary"
	"fmt"
)

// CQESize is the size of a completion queue entry in bytes.
const CQESize = 16

// Offsets of the CQE fields (NVMe Base 2.0, figure "Common Completion Queue
// Entry Layout"; Linux struct nvme_completion).
const (
	cqeDW0    = 0  // command specific
	cqeDW1    = 4  // command specific
	cqeSQHD   = 8  // SQ head pointer
	cqeSQID   = 10 // SQ identifier
	cqeCID    = 12 // command identifier
	cqeStatus = 14 // status field (bits 15:1) and phase tag (bit 0)
)

// Bits of the 16-bit status word at CQE bytes 15:14 (the status field shifted
// left by one, with the phase tag in bit 0).
const (
	cqePhaseBit = 1 << 0
	cqeSCShift  = 1       // bits 8:1 status code
	cqeSCTShift = 9       // bits 11:9 status code type
	cqeCRDShift = 12      // bits 13:12 command retry delay
	cqeMoreBit  = 1 << 14 // more information in the Error log
	cqeDNRBit   = 1 << 15 // do not retry
)

// CQE is a view of a 16-byte completion queue entry in little-endian byte
// order. Accessors assume len(CQE) >= CQESize; ParseCQE checks that for bytes
// from the network.
type CQE []byte

// NewCQE returns a zeroed CQE (successful completion, phase 0).
func NewCQE() CQE { return make(CQE, CQESize) }

// ParseCQE returns the CQE at the start of b, or an error when b is too
// short.
func ParseCQE(b []byte) (CQE, error) {
	if err := need("CQE", b, CQESize); err != nil {
		return nil, err
	}
	return CQE(b[:CQESize:CQESize]), nil
}

// DW0 returns dword 0 (command specific; Connect: CNTLID in bits 15:0).
func (c CQE) DW0() uint32 { return binary.LittleEndian.Uint32(c[cqeDW0:]) }

// SetDW0 sets dword 0.
func (c CQE) SetDW0(v uint32) { binary.LittleEndian.PutUint32(c[cqeDW0:], v) }

// DW1 returns dword 1 (command specific).
func (c CQE) DW1() uint32 { return binary.LittleEndian.Uint32(c[cqeDW1:]) }

// SetDW1 sets dword 1.
func (c CQE) SetDW1(v uint32) { binary.LittleEndian.PutUint32(c[cqeDW1:], v) }

// Result64 returns DW1<<32 | DW0 (e.g. the value of a Fabrics Property Get).
func (c CQE) Result64() uint64 { return binary.LittleEndian.Uint64(c[cqeDW0:]) }

// SetResult64 sets DW0 and DW1 from a 64-bit value.
func (c CQE) SetResult64(v uint64) { binary.LittleEndian.PutUint64(c[cqeDW0:], v) }

// SQHD returns the Submission Queue Head Pointer (bytes 9:8).
func (c CQE) SQHD() uint16 { return binary.LittleEndian.Uint16(c[cqeSQHD:]) }

// SetSQHD sets the Submission Queue Head Pointer.
func (c CQE) SetSQHD(v uint16) { binary.LittleEndian.PutUint16(c[cqeSQHD:], v) }

// SQID returns the Submission Queue Identifier (bytes 11:10).
func (c CQE) SQID() uint16 { return binary.LittleEndian.Uint16(c[cqeSQID:]) }

// SetSQID sets the Submission Queue Identifier.
func (c CQE) SetSQID(v uint16) { binary.LittleEndian.PutUint16(c[cqeSQID:], v) }

// CID returns the Command Identifier (bytes 13:12).
func (c CQE) CID() uint16 { return binary.LittleEndian.Uint16(c[cqeCID:]) }

// SetCID sets the Command Identifier.
func (c CQE) SetCID(v uint16) { binary.LittleEndian.PutUint16(c[cqeCID:], v) }

// StatusRaw returns the 16-bit word at bytes 15:14 as on the wire: the
// phase tag in bit 0 and the status field in bits 15:1 (the oracle's
// status_raw).
func (c CQE) StatusRaw() uint16 { return binary.LittleEndian.Uint16(c[cqeStatus:]) }

// SetStatusRaw sets the 16-bit word at bytes 15:14 (phase and status field).
func (c CQE) SetStatusRaw(v uint16) { binary.LittleEndian.PutUint16(c[cqeStatus:], v) }

// Phase returns the Phase Tag (bit 0 of the status word). NVMe over Fabrics
// does not use it and leaves it 0.
func (c CQE) Phase() bool { return c.StatusRaw()&cqePhaseBit != 0 }

// SetPhase sets the Phase Tag.
func (c CQE) SetPhase(on bool) { c.setStatusBit(cqePhaseBit, on) }

// SC returns the Status Code (status word bits 8:1).
func (c CQE) SC() uint8 { return uint8(c.StatusRaw() >> cqeSCShift) }

// SCT returns the Status Code Type (status word bits 11:9).
func (c CQE) SCT() StatusCodeType { return StatusCodeType(c.StatusRaw() >> cqeSCTShift & 0x7) }

// CRD returns the Command Retry Delay index (status word bits 13:12; 0 = no
// delay, 1-3 = CRDT1-3 of Identify Controller).
func (c CQE) CRD() uint8 { return uint8(c.StatusRaw() >> cqeCRDShift & 0x3) }

// SetCRD sets the Command Retry Delay index (0 to 3).
func (c CQE) SetCRD(crd uint8) {
	c.SetStatusRaw(c.StatusRaw()&^(0x3<<cqeCRDShift) | uint16(crd&0x3)<<cqeCRDShift)
}

// More returns the More bit (status word bit 14): the Error Information log
// page has more about this command.
func (c CQE) More() bool { return c.StatusRaw()&cqeMoreBit != 0 }

// SetMore sets the More bit.
func (c CQE) SetMore(on bool) { c.setStatusBit(cqeMoreBit, on) }

// DNR returns the Do Not Retry bit (status word bit 15).
func (c CQE) DNR() bool { return c.StatusRaw()&cqeDNRBit != 0 }

// SetDNR sets the Do Not Retry bit.
func (c CQE) SetDNR(on bool) { c.setStatusBit(cqeDNRBit, on) }

func (c CQE) setStatusBit(bit uint16, on bool) {
	v := c.StatusRaw()
	if on {
		v |= bit
	} else {
		v &^= bit
	}
	c.SetStatusRaw(v)
}

// Status returns the status code type and status code (without the phase
// tag, CRD, More and DNR).
func (c CQE) Status() Status { return Status(c.StatusRaw() >> cqeSCShift & 0x7ff) }

// SetStatus sets the status code type and status code; the phase tag, CRD,
// More and DNR are kept.
func (c CQE) SetStatus(s Status) {
	c.SetStatusRaw(c.StatusRaw()&^(0x7ff<<cqeSCShift) | uint16(s&0x7ff)<<cqeSCShift)
}

// SetError sets the status of the completion from err: success for nil, the
// Status, DNR, More and CRD of an *Error (see AsError), else Internal Error
// with DNR. The phase tag is kept.
func (c CQE) SetError(err error) {
	phase := c.Phase()
	if err == nil {
		c.SetStatusRaw(0)
	} else {
		e := AsError(err)
		c.SetStatusRaw(0)
		c.SetStatus(e.Status)
		c.SetDNR(e.DNR)
		c.SetMore(e.More)
		c.SetCRD(e.CRD)
	}
	c.SetPhase(phase)
}

// Err returns nil for a successful completion, else an *Error with the
// completion's status, DNR, More and CRD.
func (c CQE) Err() error {
	s := c.Status()
	if s == StatusSuccess {
		return nil
	}
	return &Error{Status: s, DNR: c.DNR(), More: c.More(), CRD: c.CRD()}
}

// Clear zeroes the CQE.
func (c CQE) Clear() { clear(c[:CQESize]) }

// String summarizes the CQE for logs.
func (c CQE) String() string {
	if len(c) < CQESize {
		return fmt.Sprintf("CQE(%d bytes)", len(c))
	}
	s := fmt.Sprintf("CQE{cid %d sqid %d sqhd %d dw0 0x%x dw1 0x%x status %v", c.CID(), c.SQID(), c.SQHD(), c.DW0(), c.DW1(), c.Status())
	if c.DNR() {
		s += " DNR"
	}
	if c.More() {
		s += " More"
	}
	if crd := c.CRD(); crd != 0 {
		s += fmt.Sprintf(" CRD %d", crd)
	}
	return s + "}"
}
