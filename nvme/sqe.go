package nvme

import (
	"encoding/binary"
	"fmt"
)

// SQESize is the size of a submission queue entry (a command) in bytes.
const SQESize = 64

// NSIDAll is the broadcast namespace ID: all namespaces, or the controller
// as a whole (e.g. the SMART / Health log of the controller).
const NSIDAll = 0xffffffff

// Offsets of the SQE fields common to all commands (NVMe Base 2.0, figure
// "Common Command Format"; Linux struct nvme_common_command).
const (
	sqeOpcode = 0  // CDW0 bits 7:0
	sqeFlags  = 1  // CDW0 bits 15:8: FUSE (1:0), PSDT (7:6)
	sqeCID    = 2  // CDW0 bits 31:16
	sqeNSID   = 4  // CDW1
	sqeCDW2   = 8  // CDW2
	sqeCDW3   = 12 // CDW3
	sqeMPTR   = 16 // CDW4-5: metadata pointer
	sqeDPTR   = 24 // CDW6-9: data pointer (PRP1, PRP2 or SGL1)
	sqeCDW10  = 40
	sqeCDW11  = 44
	sqeCDW12  = 48
	sqeCDW13  = 52
	sqeCDW14  = 56
	sqeCDW15  = 60

	// DPTRSize is the size of the data pointer (SGL1 or PRP1 and PRP2).
	DPTRSize = 16
)

// Fuse is the fused operation field of a command (CDW0 bits 9:8).
type Fuse uint8

// Fused operation values.
const (
	FuseNone   Fuse = 0 // normal operation
	FuseFirst  Fuse = 1 // first command of a fused operation
	FuseSecond Fuse = 2 // second command of a fused operation
)

// PSDT is the PRP or SGL for Data Transfer field (CDW0 bits 15:14).
type PSDT uint8

// PSDT values. NVMe over Fabrics always uses SGLs (PSDTSGLMPTRAddress).
const (
	PSDTPRP            PSDT = 0 // PRPs are used for this transfer
	PSDTSGLMPTRAddress PSDT = 1 // SGLs; MPTR holds the address of a contiguous metadata buffer
	PSDTSGLMPTRSGL     PSDT = 2 // SGLs; MPTR holds the address of an SGL segment for metadata
)

// SQE is a view of a 64-byte submission queue entry (a command) in
// little-endian byte order. Accessors assume len(SQE) >= SQESize; ParseSQE
// checks that for bytes from the network.
type SQE []byte

// NewSQE returns a zeroed SQE.
func NewSQE() SQE { return make(SQE, SQESize) }

// ParseSQE returns the SQE at the start of b (a command capsule may carry
// in-capsule data after it), or an error when b is too short.
func ParseSQE(b []byte) (SQE, error) {
	if err := need("SQE", b, SQESize); err != nil {
		return nil, err
	}
	return SQE(b[:SQESize:SQESize]), nil
}

// Opcode returns the command opcode (CDW0 bits 7:0). Whether it is an admin
// or an I/O opcode depends on the queue: see AdminOpcode and IOOpcode.
func (s SQE) Opcode() uint8 { return s[sqeOpcode] }

// SetOpcode sets the command opcode.
func (s SQE) SetOpcode(op uint8) { s[sqeOpcode] = op }

// Flags returns CDW0 bits 15:8 (FUSE and PSDT) as one byte.
func (s SQE) Flags() uint8 { return s[sqeFlags] }

// SetFlags sets CDW0 bits 15:8 (FUSE and PSDT) as one byte.
func (s SQE) SetFlags(f uint8) { s[sqeFlags] = f }

// Fuse returns the fused operation field (byte 1 bits 1:0).
func (s SQE) Fuse() Fuse { return Fuse(s[sqeFlags] & 0x3) }

// SetFuse sets the fused operation field.
func (s SQE) SetFuse(f Fuse) { s[sqeFlags] = s[sqeFlags]&^0x3 | uint8(f)&0x3 }

// PSDT returns the PRP or SGL for Data Transfer field (byte 1 bits 7:6).
func (s SQE) PSDT() PSDT { return PSDT(s[sqeFlags] >> 6) }

// SetPSDT sets the PRP or SGL for Data Transfer field.
func (s SQE) SetPSDT(p PSDT) { s[sqeFlags] = s[sqeFlags]&^0xc0 | (uint8(p)&0x3)<<6 }

// CID returns the command identifier (bytes 3:2).
func (s SQE) CID() uint16 { return binary.LittleEndian.Uint16(s[sqeCID:]) }

// SetCID sets the command identifier.
func (s SQE) SetCID(cid uint16) { binary.LittleEndian.PutUint16(s[sqeCID:], cid) }

// NSID returns the namespace identifier (CDW1).
func (s SQE) NSID() uint32 { return binary.LittleEndian.Uint32(s[sqeNSID:]) }

// SetNSID sets the namespace identifier.
func (s SQE) SetNSID(nsid uint32) { binary.LittleEndian.PutUint32(s[sqeNSID:], nsid) }

// CDW2 returns command dword 2.
func (s SQE) CDW2() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW2:]) }

// SetCDW2 sets command dword 2.
func (s SQE) SetCDW2(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW2:], v) }

// CDW3 returns command dword 3.
func (s SQE) CDW3() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW3:]) }

// SetCDW3 sets command dword 3.
func (s SQE) SetCDW3(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW3:], v) }

// MPTR returns the metadata pointer (bytes 23:16).
func (s SQE) MPTR() uint64 { return binary.LittleEndian.Uint64(s[sqeMPTR:]) }

// SetMPTR sets the metadata pointer.
func (s SQE) SetMPTR(v uint64) { binary.LittleEndian.PutUint64(s[sqeMPTR:], v) }

// DPTR returns the 16-byte data pointer (bytes 39:24) as a slice of the SQE:
// SGL1 when PSDT selects SGLs (package fabrics views it as an SGL
// descriptor), else PRP1 and PRP2. Writes to it change the SQE.
func (s SQE) DPTR() []byte { return s[sqeDPTR : sqeDPTR+DPTRSize : sqeDPTR+DPTRSize] }

// SGL1 returns the first SGL segment descriptor (bytes 39:24); it is DPTR.
func (s SQE) SGL1() []byte { return s.DPTR() }

// PRP1 returns PRP entry 1 (bytes 31:24).
func (s SQE) PRP1() uint64 { return binary.LittleEndian.Uint64(s[sqeDPTR:]) }

// SetPRP1 sets PRP entry 1.
func (s SQE) SetPRP1(v uint64) { binary.LittleEndian.PutUint64(s[sqeDPTR:], v) }

// PRP2 returns PRP entry 2 (bytes 39:32).
func (s SQE) PRP2() uint64 { return binary.LittleEndian.Uint64(s[sqeDPTR+8:]) }

// SetPRP2 sets PRP entry 2.
func (s SQE) SetPRP2(v uint64) { binary.LittleEndian.PutUint64(s[sqeDPTR+8:], v) }

// CDW10 returns command dword 10.
func (s SQE) CDW10() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW10:]) }

// SetCDW10 sets command dword 10.
func (s SQE) SetCDW10(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW10:], v) }

// CDW11 returns command dword 11.
func (s SQE) CDW11() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW11:]) }

// SetCDW11 sets command dword 11.
func (s SQE) SetCDW11(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW11:], v) }

// CDW12 returns command dword 12.
func (s SQE) CDW12() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW12:]) }

// SetCDW12 sets command dword 12.
func (s SQE) SetCDW12(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW12:], v) }

// CDW13 returns command dword 13.
func (s SQE) CDW13() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW13:]) }

// SetCDW13 sets command dword 13.
func (s SQE) SetCDW13(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW13:], v) }

// CDW14 returns command dword 14.
func (s SQE) CDW14() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW14:]) }

// SetCDW14 sets command dword 14.
func (s SQE) SetCDW14(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW14:], v) }

// CDW15 returns command dword 15.
func (s SQE) CDW15() uint32 { return binary.LittleEndian.Uint32(s[sqeCDW15:]) }

// SetCDW15 sets command dword 15.
func (s SQE) SetCDW15(v uint32) { binary.LittleEndian.PutUint32(s[sqeCDW15:], v) }

// CDW returns command dword n (0 to 15).
func (s SQE) CDW(n int) uint32 { return binary.LittleEndian.Uint32(s[4*n:]) }

// SetCDW sets command dword n (0 to 15).
func (s SQE) SetCDW(n int, v uint32) { binary.LittleEndian.PutUint32(s[4*n:], v) }

// Clear zeroes the SQE.
func (s SQE) Clear() { clear(s[:SQESize]) }

// String summarizes the common fields for logs.
func (s SQE) String() string {
	if len(s) < SQESize {
		return fmt.Sprintf("SQE(%d bytes)", len(s))
	}
	return fmt.Sprintf("SQE{opcode 0x%02x cid %d nsid %d cdw10 0x%x cdw11 0x%x cdw12 0x%x}",
		s.Opcode(), s.CID(), s.NSID(), s.CDW10(), s.CDW11(), s.CDW12())
}

// bits returns v bits hi:lo.
func bits(v uint32, hi, lo uint) uint32 { return v >> lo & (1<<(hi-lo+1) - 1) }

// setBits returns v with bits hi:lo replaced by x (truncated to fit).
func setBits(v uint32, hi, lo uint, x uint32) uint32 {
	mask := uint32(1<<(hi-lo+1)-1) << lo
	return v&^mask | x<<lo&mask
}

func setBit(v uint32, bit uint, on bool) uint32 {
	if on {
		return v | 1<<bit
	}
	return v &^ (1 << bit)
}
