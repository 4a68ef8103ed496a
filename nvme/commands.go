package nvme

import (
	"encoding/binary"
	"fmt"
)

// RWCommand views an SQE as an NVM command that addresses a range of logical
// blocks: Read, Write, Compare, Write Zeroes, Write Uncorrectable and Verify
// (NVM Command Set 1.0; Linux struct nvme_rw_command).
//
//	CDW10-11  SLBA, starting LBA (CDW11 holds bits 63:32)
//	CDW12     bits 15:0 NLB (0's based), 19:16 DTYPE, 24 STC, 25 DEAC
//	          (Write Zeroes), 29:26 PRINFO, 30 FUA, 31 LR
//	CDW13     bits 7:0 DSM, 31:16 DSPEC
//	CDW14     expected initial logical block reference tag
//	CDW15     bits 15:0 expected application tag, 31:16 its mask
type RWCommand struct{ SQE }

// SLBA returns the starting LBA (CDW11<<32 | CDW10).
func (c RWCommand) SLBA() uint64 { return binary.LittleEndian.Uint64(c.SQE[sqeCDW10:]) }

// SetSLBA sets the starting LBA.
func (c RWCommand) SetSLBA(lba uint64) { binary.LittleEndian.PutUint64(c.SQE[sqeCDW10:], lba) }

// NLB returns the Number of Logical Blocks field (CDW12 bits 15:0) as on the
// wire: 0's based (0 means one block). Blocks returns the count.
func (c RWCommand) NLB() uint16 { return uint16(c.CDW12()) }

// SetNLB sets the 0's based Number of Logical Blocks field.
func (c RWCommand) SetNLB(nlb uint16) { c.SetCDW12(setBits(c.CDW12(), 15, 0, uint32(nlb))) }

// Blocks returns the number of logical blocks the command covers (NLB + 1).
func (c RWCommand) Blocks() uint32 { return uint32(c.NLB()) + 1 }

// SetBlocks sets NLB for n blocks (1 to 65536); it returns an error for
// other counts.
func (c RWCommand) SetBlocks(n uint32) error {
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("nvme: %d logical blocks in one command, want 1 to 65536: %w", n, ErrMalformed)
	}
	c.SetNLB(uint16(n - 1))
	return nil
}

// FUA returns the Force Unit Access bit (CDW12 bit 30).
func (c RWCommand) FUA() bool { return c.CDW12()&(1<<30) != 0 }

// SetFUA sets the Force Unit Access bit.
func (c RWCommand) SetFUA(on bool) { c.SetCDW12(setBit(c.CDW12(), 30, on)) }

// LR returns the Limited Retry bit (CDW12 bit 31).
func (c RWCommand) LR() bool { return c.CDW12()&(1<<31) != 0 }

// SetLR sets the Limited Retry bit.
func (c RWCommand) SetLR(on bool) { c.SetCDW12(setBit(c.CDW12(), 31, on)) }

// PRINFO returns the Protection Information field (CDW12 bits 29:26).
func (c RWCommand) PRINFO() uint8 { return uint8(bits(c.CDW12(), 29, 26)) }

// SetPRINFO sets the Protection Information field.
func (c RWCommand) SetPRINFO(v uint8) { c.SetCDW12(setBits(c.CDW12(), 29, 26, uint32(v))) }

// DEAC returns the Deallocate bit of Write Zeroes (CDW12 bit 25).
func (c RWCommand) DEAC() bool { return c.CDW12()&(1<<25) != 0 }

// SetDEAC sets the Deallocate bit of Write Zeroes.
func (c RWCommand) SetDEAC(on bool) { c.SetCDW12(setBit(c.CDW12(), 25, on)) }

// STC returns the Storage Tag Check bit (CDW12 bit 24).
func (c RWCommand) STC() bool { return c.CDW12()&(1<<24) != 0 }

// SetSTC sets the Storage Tag Check bit.
func (c RWCommand) SetSTC(on bool) { c.SetCDW12(setBit(c.CDW12(), 24, on)) }

// DTYPE returns the Directive Type of a Write (CDW12 bits 23:20).
func (c RWCommand) DTYPE() uint8 { return uint8(bits(c.CDW12(), 23, 20)) }

// SetDTYPE sets the Directive Type of a Write.
func (c RWCommand) SetDTYPE(v uint8) { c.SetCDW12(setBits(c.CDW12(), 23, 20, uint32(v))) }

// DSM returns the Dataset Management hints (CDW13 bits 7:0).
func (c RWCommand) DSM() uint8 { return uint8(c.CDW13()) }

// SetDSM sets the Dataset Management hints.
func (c RWCommand) SetDSM(v uint8) { c.SetCDW13(setBits(c.CDW13(), 7, 0, uint32(v))) }

// DSPEC returns the Directive Specific field (CDW13 bits 31:16).
func (c RWCommand) DSPEC() uint16 { return uint16(c.CDW13() >> 16) }

// SetDSPEC sets the Directive Specific field.
func (c RWCommand) SetDSPEC(v uint16) { c.SetCDW13(setBits(c.CDW13(), 31, 16, uint32(v))) }

// CNS values of the Identify command (NVMe Base 2.0, figure "CNS Values";
// Linux NVME_ID_CNS_*).
const (
	CNSNamespace                     = 0x00 // Identify Namespace data structure for NSID
	CNSController                    = 0x01 // Identify Controller data structure
	CNSActiveNSList                  = 0x02 // active NSIDs greater than NSID
	CNSNSDescriptorList              = 0x03 // Namespace Identification Descriptor list for NSID
	CNSNVMSetList                    = 0x04 // NVM Set list
	CNSCSNamespace                   = 0x05 // I/O command set specific Identify Namespace (CSI)
	CNSCSController                  = 0x06 // I/O command set specific Identify Controller (CSI)
	CNSCSActiveNSList                = 0x07 // active NSIDs of one I/O command set (CSI)
	CNSCSIndependentNamespace        = 0x08 // I/O command set independent Identify Namespace
	CNSAllocatedNSList               = 0x10 // allocated NSIDs greater than NSID
	CNSAllocatedNamespace            = 0x11 // Identify Namespace for an allocated NSID
	CNSNSAttachedControllerList      = 0x12 // controllers attached to NSID
	CNSControllerList                = 0x13 // controllers in the NVM subsystem
	CNSPrimaryControllerCapabilities = 0x14
	CNSSecondaryControllerList       = 0x15
	CNSNSGranularityList             = 0x16
	CNSUUIDList                      = 0x17
	CNSDomainList                    = 0x18
	CNSEnduranceGroupList            = 0x19
	CNSCSAllocatedNSList             = 0x1a
	CNSCSAllocatedNamespace          = 0x1b
	CNSIOCommandSet                  = 0x1c // I/O Command Set data structure
)

// Command Set Identifiers (CSI).
const (
	CSINVM = 0x00 // NVM Command Set
	CSIKV  = 0x01 // Key Value Command Set
	CSIZNS = 0x02 // Zoned Namespace Command Set
)

// IdentifyDataSize is the size of every Identify data structure.
const IdentifyDataSize = 4096

// IdentifyCommand views an SQE as an Identify command (admin opcode 06h):
//
//	CDW10  bits 7:0 CNS, 31:16 CNTID
//	CDW11  bits 15:0 CNS Specific Identifier, 31:24 CSI
//	CDW14  bits 6:0 UUID index
type IdentifyCommand struct{ SQE }

// CNS returns the Controller or Namespace Structure (CDW10 bits 7:0).
func (c IdentifyCommand) CNS() uint8 { return uint8(c.CDW10()) }

// SetCNS sets the Controller or Namespace Structure.
func (c IdentifyCommand) SetCNS(cns uint8) { c.SetCDW10(setBits(c.CDW10(), 7, 0, uint32(cns))) }

// CNTID returns the Controller Identifier (CDW10 bits 31:16).
func (c IdentifyCommand) CNTID() uint16 { return uint16(c.CDW10() >> 16) }

// SetCNTID sets the Controller Identifier.
func (c IdentifyCommand) SetCNTID(id uint16) { c.SetCDW10(setBits(c.CDW10(), 31, 16, uint32(id))) }

// CNSSID returns the CNS Specific Identifier (CDW11 bits 15:0), e.g. the NVM
// Set or Endurance Group identifier.
func (c IdentifyCommand) CNSSID() uint16 { return uint16(c.CDW11()) }

// SetCNSSID sets the CNS Specific Identifier.
func (c IdentifyCommand) SetCNSSID(id uint16) { c.SetCDW11(setBits(c.CDW11(), 15, 0, uint32(id))) }

// CSI returns the Command Set Identifier (CDW11 bits 31:24).
func (c IdentifyCommand) CSI() uint8 { return uint8(c.CDW11() >> 24) }

// SetCSI sets the Command Set Identifier.
func (c IdentifyCommand) SetCSI(csi uint8) { c.SetCDW11(setBits(c.CDW11(), 31, 24, uint32(csi))) }

// UUIDIndex returns the UUID Index (CDW14 bits 6:0).
func (c IdentifyCommand) UUIDIndex() uint8 { return uint8(bits(c.CDW14(), 6, 0)) }

// SetUUIDIndex sets the UUID Index.
func (c IdentifyCommand) SetUUIDIndex(i uint8) { c.SetCDW14(setBits(c.CDW14(), 6, 0, uint32(i))) }

// GetLogPageCommand views an SQE as a Get Log Page command (admin opcode
// 02h):
//
//	CDW10  bits 7:0 LID, 14:8 LSP, 15 RAE, 31:16 NUMDL
//	CDW11  bits 15:0 NUMDU, 31:16 LSI
//	CDW12  LPOL, CDW13 LPOU (offset in bytes, or an index with OT)
//	CDW14  bits 6:0 UUID index, 23 OT, 31:24 CSI
//
// NUMD = NUMDU<<16 | NUMDL is the 0's based number of dwords to return.
type GetLogPageCommand struct{ SQE }

// LID returns the Log Page Identifier (CDW10 bits 7:0).
func (c GetLogPageCommand) LID() LogPageID { return LogPageID(c.CDW10()) }

// SetLID sets the Log Page Identifier.
func (c GetLogPageCommand) SetLID(lid LogPageID) { c.SetCDW10(setBits(c.CDW10(), 7, 0, uint32(lid))) }

// LSP returns the Log Specific Parameter (CDW10 bits 14:8).
func (c GetLogPageCommand) LSP() uint8 { return uint8(bits(c.CDW10(), 14, 8)) }

// SetLSP sets the Log Specific Parameter (7 bits).
func (c GetLogPageCommand) SetLSP(v uint8) { c.SetCDW10(setBits(c.CDW10(), 14, 8, uint32(v))) }

// RAE returns the Retain Asynchronous Event bit (CDW10 bit 15).
func (c GetLogPageCommand) RAE() bool { return c.CDW10()&(1<<15) != 0 }

// SetRAE sets the Retain Asynchronous Event bit.
func (c GetLogPageCommand) SetRAE(on bool) { c.SetCDW10(setBit(c.CDW10(), 15, on)) }

// NUMDL returns the lower 16 bits of the 0's based dword count (CDW10 bits
// 31:16).
func (c GetLogPageCommand) NUMDL() uint16 { return uint16(c.CDW10() >> 16) }

// NUMDU returns the upper 16 bits of the 0's based dword count (CDW11 bits
// 15:0).
func (c GetLogPageCommand) NUMDU() uint16 { return uint16(c.CDW11()) }

// NUMD returns the 0's based Number of Dwords field, NUMDU<<16 | NUMDL.
func (c GetLogPageCommand) NUMD() uint32 { return uint32(c.NUMDU())<<16 | uint32(c.NUMDL()) }

// SetNUMD sets NUMDL and NUMDU from a 0's based dword count.
func (c GetLogPageCommand) SetNUMD(numd uint32) {
	c.SetCDW10(setBits(c.CDW10(), 31, 16, numd&0xffff))
	c.SetCDW11(setBits(c.CDW11(), 15, 0, numd>>16))
}

// Dwords returns the number of dwords to transfer (NUMD + 1).
func (c GetLogPageCommand) Dwords() uint64 { return uint64(c.NUMD()) + 1 }

// Length returns the number of bytes to transfer (4 × (NUMD + 1)).
func (c GetLogPageCommand) Length() uint64 { return 4 * c.Dwords() }

// SetLength sets NUMD for a transfer of n bytes; n must be a non-zero
// multiple of 4 of at most 2^34 bytes.
func (c GetLogPageCommand) SetLength(n uint64) error {
	if n == 0 || n%4 != 0 || n > 4<<32 {
		return fmt.Errorf("nvme: Get Log Page of %d bytes: not a non-zero multiple of 4 up to 2^34: %w", n, ErrMalformed)
	}
	c.SetNUMD(uint32(n/4 - 1))
	return nil
}

// LSI returns the Log Specific Identifier (CDW11 bits 31:16).
func (c GetLogPageCommand) LSI() uint16 { return uint16(c.CDW11() >> 16) }

// SetLSI sets the Log Specific Identifier.
func (c GetLogPageCommand) SetLSI(v uint16) { c.SetCDW11(setBits(c.CDW11(), 31, 16, uint32(v))) }

// LPO returns the Log Page Offset (CDW13<<32 | CDW12): a byte offset (a
// multiple of 4), or an entry index when OT is set.
func (c GetLogPageCommand) LPO() uint64 { return binary.LittleEndian.Uint64(c.SQE[sqeCDW12:]) }

// SetLPO sets the Log Page Offset.
func (c GetLogPageCommand) SetLPO(off uint64) { binary.LittleEndian.PutUint64(c.SQE[sqeCDW12:], off) }

// UUIDIndex returns the UUID Index (CDW14 bits 6:0).
func (c GetLogPageCommand) UUIDIndex() uint8 { return uint8(bits(c.CDW14(), 6, 0)) }

// SetUUIDIndex sets the UUID Index.
func (c GetLogPageCommand) SetUUIDIndex(i uint8) { c.SetCDW14(setBits(c.CDW14(), 6, 0, uint32(i))) }

// OT returns the Offset Type bit (CDW14 bit 23): LPO is an index, not bytes.
func (c GetLogPageCommand) OT() bool { return c.CDW14()&(1<<23) != 0 }

// SetOT sets the Offset Type bit.
func (c GetLogPageCommand) SetOT(on bool) { c.SetCDW14(setBit(c.CDW14(), 23, on)) }

// CSI returns the Command Set Identifier (CDW14 bits 31:24).
func (c GetLogPageCommand) CSI() uint8 { return uint8(c.CDW14() >> 24) }

// SetCSI sets the Command Set Identifier.
func (c GetLogPageCommand) SetCSI(csi uint8) { c.SetCDW14(setBits(c.CDW14(), 31, 24, uint32(csi))) }

// FeaturesCommand views an SQE as a Set Features (admin opcode 09h) or Get
// Features (0Ah) command:
//
//	CDW10  bits 7:0 FID; Set: bit 31 SV; Get: bits 10:8 SEL
//	CDW11  feature specific value (Set) or parameter
//	CDW14  bits 6:0 UUID index
//
// The feature-specific values are the raw CDW11 (and CDW12-15); see the
// helpers in features.go.
type FeaturesCommand struct{ SQE }

// FID returns the Feature Identifier (CDW10 bits 7:0).
func (c FeaturesCommand) FID() FeatureID { return FeatureID(c.CDW10()) }

// SetFID sets the Feature Identifier.
func (c FeaturesCommand) SetFID(fid FeatureID) { c.SetCDW10(setBits(c.CDW10(), 7, 0, uint32(fid))) }

// SV returns the Save bit of Set Features (CDW10 bit 31).
func (c FeaturesCommand) SV() bool { return c.CDW10()&(1<<31) != 0 }

// SetSV sets the Save bit of Set Features.
func (c FeaturesCommand) SetSV(on bool) { c.SetCDW10(setBit(c.CDW10(), 31, on)) }

// SEL returns the Select field of Get Features (CDW10 bits 10:8).
func (c FeaturesCommand) SEL() FeatureSelect { return FeatureSelect(bits(c.CDW10(), 10, 8)) }

// SetSEL sets the Select field of Get Features.
func (c FeaturesCommand) SetSEL(sel FeatureSelect) {
	c.SetCDW10(setBits(c.CDW10(), 10, 8, uint32(sel)))
}

// UUIDIndex returns the UUID Index (CDW14 bits 6:0).
func (c FeaturesCommand) UUIDIndex() uint8 { return uint8(bits(c.CDW14(), 6, 0)) }

// SetUUIDIndex sets the UUID Index.
func (c FeaturesCommand) SetUUIDIndex(i uint8) { c.SetCDW14(setBits(c.CDW14(), 6, 0, uint32(i))) }

// AbortCommand views an SQE as an Abort command (admin opcode 08h): CDW10
// bits 15:0 SQID, 31:16 CID of the command to abort. Bit 0 of the
// completion's DW0 is 1 when the command was not aborted.
type AbortCommand struct{ SQE }

// SQID returns the Submission Queue Identifier of the command to abort.
func (c AbortCommand) SQID() uint16 { return uint16(c.CDW10()) }

// SetSQID sets the Submission Queue Identifier of the command to abort.
func (c AbortCommand) SetSQID(id uint16) { c.SetCDW10(setBits(c.CDW10(), 15, 0, uint32(id))) }

// AbortCID returns the Command Identifier of the command to abort.
func (c AbortCommand) AbortCID() uint16 { return uint16(c.CDW10() >> 16) }

// SetAbortCID sets the Command Identifier of the command to abort.
func (c AbortCommand) SetAbortCID(cid uint16) { c.SetCDW10(setBits(c.CDW10(), 31, 16, uint32(cid))) }

// DSMCommand views an SQE as a Dataset Management command (I/O opcode 09h):
//
//	CDW10  bits 7:0 NR, number of ranges (0's based)
//	CDW11  bit 0 IDR, 1 IDW, 2 AD (deallocate)
//
// The data is a list of NR+1 DSMRange entries.
type DSMCommand struct{ SQE }

// NR returns the 0's based Number of Ranges (CDW10 bits 7:0).
func (c DSMCommand) NR() uint8 { return uint8(c.CDW10()) }

// SetNR sets the 0's based Number of Ranges.
func (c DSMCommand) SetNR(nr uint8) { c.SetCDW10(setBits(c.CDW10(), 7, 0, uint32(nr))) }

// Ranges returns the number of ranges (NR + 1, 1 to 256).
func (c DSMCommand) Ranges() int { return int(c.NR()) + 1 }

// DataLength returns the size of the range list in bytes.
func (c DSMCommand) DataLength() int { return c.Ranges() * DSMRangeSize }

// IDR returns the Integral Dataset for Read attribute (CDW11 bit 0).
func (c DSMCommand) IDR() bool { return c.CDW11()&1 != 0 }

// SetIDR sets the Integral Dataset for Read attribute.
func (c DSMCommand) SetIDR(on bool) { c.SetCDW11(setBit(c.CDW11(), 0, on)) }

// IDW returns the Integral Dataset for Write attribute (CDW11 bit 1).
func (c DSMCommand) IDW() bool { return c.CDW11()&2 != 0 }

// SetIDW sets the Integral Dataset for Write attribute.
func (c DSMCommand) SetIDW(on bool) { c.SetCDW11(setBit(c.CDW11(), 1, on)) }

// AD returns the Deallocate attribute (CDW11 bit 2).
func (c DSMCommand) AD() bool { return c.CDW11()&4 != 0 }

// SetAD sets the Deallocate attribute.
func (c DSMCommand) SetAD(on bool) { c.SetCDW11(setBit(c.CDW11(), 2, on)) }

// DSMRangeSize is the size of one Dataset Management range entry.
const DSMRangeSize = 16

// DSMRange is a view of one 16-byte Dataset Management range:
// bytes 3:0 context attributes, 7:4 length in logical blocks (not 0's
// based), 15:8 starting LBA.
type DSMRange []byte

// ContextAttributes returns the context attributes (bytes 3:0).
func (r DSMRange) ContextAttributes() uint32 { return binary.LittleEndian.Uint32(r) }

// SetContextAttributes sets the context attributes.
func (r DSMRange) SetContextAttributes(v uint32) { binary.LittleEndian.PutUint32(r, v) }

// Length returns the length of the range in logical blocks (bytes 7:4).
func (r DSMRange) Length() uint32 { return binary.LittleEndian.Uint32(r[4:]) }

// SetLength sets the length of the range in logical blocks.
func (r DSMRange) SetLength(n uint32) { binary.LittleEndian.PutUint32(r[4:], n) }

// SLBA returns the starting LBA (bytes 15:8).
func (r DSMRange) SLBA() uint64 { return binary.LittleEndian.Uint64(r[8:]) }

// SetSLBA sets the starting LBA.
func (r DSMRange) SetSLBA(lba uint64) { binary.LittleEndian.PutUint64(r[8:], lba) }

// DecodeDSMRanges returns views of the n range entries at the start of b
// (n = DSMCommand.Ranges()).
func DecodeDSMRanges(b []byte, n int) ([]DSMRange, error) {
	if n < 1 || n > 256 {
		return nil, fmt.Errorf("nvme: %d Dataset Management ranges, want 1 to 256: %w", n, ErrMalformed)
	}
	if err := need("Dataset Management range list", b, n*DSMRangeSize); err != nil {
		return nil, err
	}
	rs := make([]DSMRange, n)
	for i := range rs {
		rs[i] = DSMRange(b[i*DSMRangeSize : (i+1)*DSMRangeSize : (i+1)*DSMRangeSize])
	}
	return rs, nil
}
