package nvme

import "encoding/binary"

// IdentifyNamespace is a view of the 4096-byte Identify Namespace data
// structure of the NVM Command Set (CNS 00h; NVM Command Set 1.0, figure
// "Identify Namespace Data Structure"; Linux struct nvme_id_ns). Accessors
// assume len(IdentifyNamespace) >= IdentifyDataSize;
// ParseIdentifyNamespace checks that for bytes from the network. An
// inactive NSID reads as all zeroes.
type IdentifyNamespace []byte

// NewIdentifyNamespace returns a zeroed Identify Namespace structure.
func NewIdentifyNamespace() IdentifyNamespace { return make(IdentifyNamespace, IdentifyDataSize) }

// ParseIdentifyNamespace returns a view of the Identify Namespace data at
// the start of b, or an error when b holds less than 4096 bytes.
func ParseIdentifyNamespace(b []byte) (IdentifyNamespace, error) {
	if err := need("Identify Namespace", b, IdentifyDataSize); err != nil {
		return nil, err
	}
	return IdentifyNamespace(b[:IdentifyDataSize:IdentifyDataSize]), nil
}

// NSFEAT bits.
const (
	NSFEATThinProvisioning = 1 << 0
	NSFEATAtomicFields     = 1 << 1 // NAWUN, NAWUPF, NACWU are valid
	NSFEATDULBE            = 1 << 2 // Deallocated or Unwritten Logical Block Error
	NSFEATIDReuse          = 1 << 3 // NGUID and EUI64 are never reused
	NSFEATOptPerf          = 1 << 4 // NPWG, NPWA, NPDG, NPDA, NOWS are valid
)

// FLBAS bits.
const (
	FLBASIndexLowMask  = 0x0f // format index bits 3:0
	FLBASMetadataAtEnd = 1 << 4
	FLBASIndexHighMask = 0x60 // format index bits 5:4, stored in FLBAS bits 6:5
)

// NMIC bits.
const (
	NMICShared = 1 << 0 // may be attached to two or more controllers
)

// NSATTR bits.
const (
	NSATTRWriteProtected = 1 << 0
)

const (
	idnsNSZE     = 0
	idnsNCAP     = 8
	idnsNUSE     = 16
	idnsNSFEAT   = 24
	idnsNLBAF    = 25
	idnsFLBAS    = 26
	idnsMC       = 27
	idnsDPC      = 28
	idnsDPS      = 29
	idnsNMIC     = 30
	idnsRESCAP   = 31
	idnsFPI      = 32
	idnsDLFEAT   = 33
	idnsNAWUN    = 34
	idnsNAWUPF   = 36
	idnsNACWU    = 38
	idnsNABSN    = 40
	idnsNABO     = 42
	idnsNABSPF   = 44
	idnsNOIOB    = 46
	idnsNVMCAP   = 48
	idnsNPWG     = 64
	idnsNPWA     = 66
	idnsNPDG     = 68
	idnsNPDA     = 70
	idnsNOWS     = 72
	idnsMSSRL    = 74
	idnsMCL      = 76
	idnsMSRC     = 80
	idnsNULBAF   = 81
	idnsANAGRPID = 92
	idnsNSATTR   = 99
	idnsNVMSETID = 100
	idnsENDGID   = 102
	idnsNGUID    = 104
	idnsEUI64    = 120
)

// NSZE returns the Namespace Size in logical blocks (NSZE, bytes 7:0).
func (n IdentifyNamespace) NSZE() uint64 { return binary.LittleEndian.Uint64(n[idnsNSZE:]) }

// SetNSZE sets the Namespace Size in logical blocks (NSZE).
func (n IdentifyNamespace) SetNSZE(v uint64) { binary.LittleEndian.PutUint64(n[idnsNSZE:], v) }

// NCAP returns the Namespace Capacity in logical blocks (NCAP, bytes 15:8).
func (n IdentifyNamespace) NCAP() uint64 { return binary.LittleEndian.Uint64(n[idnsNCAP:]) }

// SetNCAP sets the Namespace Capacity in logical blocks (NCAP).
func (n IdentifyNamespace) SetNCAP(v uint64) { binary.LittleEndian.PutUint64(n[idnsNCAP:], v) }

// NUSE returns the Namespace Utilization in logical blocks (NUSE, bytes 23:16).
func (n IdentifyNamespace) NUSE() uint64 { return binary.LittleEndian.Uint64(n[idnsNUSE:]) }

// SetNUSE sets the Namespace Utilization in logical blocks (NUSE).
func (n IdentifyNamespace) SetNUSE(v uint64) { binary.LittleEndian.PutUint64(n[idnsNUSE:], v) }

// NSFEAT returns the Namespace Features (NSFEAT, byte 24): NSFEAT* bits.
func (n IdentifyNamespace) NSFEAT() uint8 { return n[idnsNSFEAT] }

// SetNSFEAT sets the Namespace Features (NSFEAT).
func (n IdentifyNamespace) SetNSFEAT(v uint8) { n[idnsNSFEAT] = v }

// NLBAF returns the Number of LBA Formats (NLBAF, byte 25): 0's based.
func (n IdentifyNamespace) NLBAF() uint8 { return n[idnsNLBAF] }

// SetNLBAF sets the Number of LBA Formats (NLBAF).
func (n IdentifyNamespace) SetNLBAF(v uint8) { n[idnsNLBAF] = v }

// FLBAS returns the Formatted LBA Size (FLBAS, byte 26): bits 3:0 and 6:5 the format index, bit 4 metadata at the end of the data.
func (n IdentifyNamespace) FLBAS() uint8 { return n[idnsFLBAS] }

// SetFLBAS sets the Formatted LBA Size (FLBAS).
func (n IdentifyNamespace) SetFLBAS(v uint8) { n[idnsFLBAS] = v }

// MC returns the Metadata Capabilities (MC, byte 27).
func (n IdentifyNamespace) MC() uint8 { return n[idnsMC] }

// SetMC sets the Metadata Capabilities (MC).
func (n IdentifyNamespace) SetMC(v uint8) { n[idnsMC] = v }

// DPC returns the End-to-end Data Protection Capabilities (DPC, byte 28).
func (n IdentifyNamespace) DPC() uint8 { return n[idnsDPC] }

// SetDPC sets the End-to-end Data Protection Capabilities (DPC).
func (n IdentifyNamespace) SetDPC(v uint8) { n[idnsDPC] = v }

// DPS returns the End-to-end Data Protection Type Settings (DPS, byte 29).
func (n IdentifyNamespace) DPS() uint8 { return n[idnsDPS] }

// SetDPS sets the End-to-end Data Protection Type Settings (DPS).
func (n IdentifyNamespace) SetDPS(v uint8) { n[idnsDPS] = v }

// NMIC returns the Namespace Multi-path I/O and Namespace Sharing Capabilities (NMIC, byte 30): bit 0: may be attached to several controllers.
func (n IdentifyNamespace) NMIC() uint8 { return n[idnsNMIC] }

// SetNMIC sets the Namespace Multi-path I/O and Namespace Sharing Capabilities (NMIC).
func (n IdentifyNamespace) SetNMIC(v uint8) { n[idnsNMIC] = v }

// RESCAP returns the Reservation Capabilities (RESCAP, byte 31).
func (n IdentifyNamespace) RESCAP() uint8 { return n[idnsRESCAP] }

// SetRESCAP sets the Reservation Capabilities (RESCAP).
func (n IdentifyNamespace) SetRESCAP(v uint8) { n[idnsRESCAP] = v }

// FPI returns the Format Progress Indicator (FPI, byte 32).
func (n IdentifyNamespace) FPI() uint8 { return n[idnsFPI] }

// SetFPI sets the Format Progress Indicator (FPI).
func (n IdentifyNamespace) SetFPI(v uint8) { n[idnsFPI] = v }

// DLFEAT returns the Deallocate Logical Block Features (DLFEAT, byte 33).
func (n IdentifyNamespace) DLFEAT() uint8 { return n[idnsDLFEAT] }

// SetDLFEAT sets the Deallocate Logical Block Features (DLFEAT).
func (n IdentifyNamespace) SetDLFEAT(v uint8) { n[idnsDLFEAT] = v }

// NAWUN returns the Namespace Atomic Write Unit Normal (NAWUN, bytes 35:34): 0's based.
func (n IdentifyNamespace) NAWUN() uint16 { return binary.LittleEndian.Uint16(n[idnsNAWUN:]) }

// SetNAWUN sets the Namespace Atomic Write Unit Normal (NAWUN).
func (n IdentifyNamespace) SetNAWUN(v uint16) { binary.LittleEndian.PutUint16(n[idnsNAWUN:], v) }

// NAWUPF returns the Namespace Atomic Write Unit Power Fail (NAWUPF, bytes 37:36): 0's based.
func (n IdentifyNamespace) NAWUPF() uint16 { return binary.LittleEndian.Uint16(n[idnsNAWUPF:]) }

// SetNAWUPF sets the Namespace Atomic Write Unit Power Fail (NAWUPF).
func (n IdentifyNamespace) SetNAWUPF(v uint16) { binary.LittleEndian.PutUint16(n[idnsNAWUPF:], v) }

// NACWU returns the Namespace Atomic Compare & Write Unit (NACWU, bytes 39:38): 0's based.
func (n IdentifyNamespace) NACWU() uint16 { return binary.LittleEndian.Uint16(n[idnsNACWU:]) }

// SetNACWU sets the Namespace Atomic Compare & Write Unit (NACWU).
func (n IdentifyNamespace) SetNACWU(v uint16) { binary.LittleEndian.PutUint16(n[idnsNACWU:], v) }

// NABSN returns the Namespace Atomic Boundary Size Normal (NABSN, bytes 41:40): 0's based.
func (n IdentifyNamespace) NABSN() uint16 { return binary.LittleEndian.Uint16(n[idnsNABSN:]) }

// SetNABSN sets the Namespace Atomic Boundary Size Normal (NABSN).
func (n IdentifyNamespace) SetNABSN(v uint16) { binary.LittleEndian.PutUint16(n[idnsNABSN:], v) }

// NABO returns the Namespace Atomic Boundary Offset (NABO, bytes 43:42).
func (n IdentifyNamespace) NABO() uint16 { return binary.LittleEndian.Uint16(n[idnsNABO:]) }

// SetNABO sets the Namespace Atomic Boundary Offset (NABO).
func (n IdentifyNamespace) SetNABO(v uint16) { binary.LittleEndian.PutUint16(n[idnsNABO:], v) }

// NABSPF returns the Namespace Atomic Boundary Size Power Fail (NABSPF, bytes 45:44): 0's based.
func (n IdentifyNamespace) NABSPF() uint16 { return binary.LittleEndian.Uint16(n[idnsNABSPF:]) }

// SetNABSPF sets the Namespace Atomic Boundary Size Power Fail (NABSPF).
func (n IdentifyNamespace) SetNABSPF(v uint16) { binary.LittleEndian.PutUint16(n[idnsNABSPF:], v) }

// NOIOB returns the Namespace Optimal I/O Boundary in logical blocks (NOIOB, bytes 47:46).
func (n IdentifyNamespace) NOIOB() uint16 { return binary.LittleEndian.Uint16(n[idnsNOIOB:]) }

// SetNOIOB sets the Namespace Optimal I/O Boundary in logical blocks (NOIOB).
func (n IdentifyNamespace) SetNOIOB(v uint16) { binary.LittleEndian.PutUint16(n[idnsNOIOB:], v) }

// NVMCAP returns the NVM Capacity in bytes (NVMCAP, bytes 63:48).
func (n IdentifyNamespace) NVMCAP() Uint128 { return getUint128(n[idnsNVMCAP:]) }

// SetNVMCAP sets the NVM Capacity in bytes (NVMCAP).
func (n IdentifyNamespace) SetNVMCAP(v Uint128) { putUint128(n[idnsNVMCAP:], v) }

// NPWG returns the Namespace Preferred Write Granularity (NPWG, bytes 65:64): 0's based.
func (n IdentifyNamespace) NPWG() uint16 { return binary.LittleEndian.Uint16(n[idnsNPWG:]) }

// SetNPWG sets the Namespace Preferred Write Granularity (NPWG).
func (n IdentifyNamespace) SetNPWG(v uint16) { binary.LittleEndian.PutUint16(n[idnsNPWG:], v) }

// NPWA returns the Namespace Preferred Write Alignment (NPWA, bytes 67:66): 0's based.
func (n IdentifyNamespace) NPWA() uint16 { return binary.LittleEndian.Uint16(n[idnsNPWA:]) }

// SetNPWA sets the Namespace Preferred Write Alignment (NPWA).
func (n IdentifyNamespace) SetNPWA(v uint16) { binary.LittleEndian.PutUint16(n[idnsNPWA:], v) }

// NPDG returns the Namespace Preferred Deallocate Granularity (NPDG, bytes 69:68): 0's based.
func (n IdentifyNamespace) NPDG() uint16 { return binary.LittleEndian.Uint16(n[idnsNPDG:]) }

// SetNPDG sets the Namespace Preferred Deallocate Granularity (NPDG).
func (n IdentifyNamespace) SetNPDG(v uint16) { binary.LittleEndian.PutUint16(n[idnsNPDG:], v) }

// NPDA returns the Namespace Preferred Deallocate Alignment (NPDA, bytes 71:70): 0's based.
func (n IdentifyNamespace) NPDA() uint16 { return binary.LittleEndian.Uint16(n[idnsNPDA:]) }

// SetNPDA sets the Namespace Preferred Deallocate Alignment (NPDA).
func (n IdentifyNamespace) SetNPDA(v uint16) { binary.LittleEndian.PutUint16(n[idnsNPDA:], v) }

// NOWS returns the Namespace Optimal Write Size (NOWS, bytes 73:72): 0's based.
func (n IdentifyNamespace) NOWS() uint16 { return binary.LittleEndian.Uint16(n[idnsNOWS:]) }

// SetNOWS sets the Namespace Optimal Write Size (NOWS).
func (n IdentifyNamespace) SetNOWS(v uint16) { binary.LittleEndian.PutUint16(n[idnsNOWS:], v) }

// MSSRL returns the Maximum Single Source Range Length of Copy (MSSRL, bytes 75:74).
func (n IdentifyNamespace) MSSRL() uint16 { return binary.LittleEndian.Uint16(n[idnsMSSRL:]) }

// SetMSSRL sets the Maximum Single Source Range Length of Copy (MSSRL).
func (n IdentifyNamespace) SetMSSRL(v uint16) { binary.LittleEndian.PutUint16(n[idnsMSSRL:], v) }

// MCL returns the Maximum Copy Length (MCL, bytes 79:76).
func (n IdentifyNamespace) MCL() uint32 { return binary.LittleEndian.Uint32(n[idnsMCL:]) }

// SetMCL sets the Maximum Copy Length (MCL).
func (n IdentifyNamespace) SetMCL(v uint32) { binary.LittleEndian.PutUint32(n[idnsMCL:], v) }

// MSRC returns the Maximum Source Range Count of Copy (MSRC, byte 80): 0's based.
func (n IdentifyNamespace) MSRC() uint8 { return n[idnsMSRC] }

// SetMSRC sets the Maximum Source Range Count of Copy (MSRC).
func (n IdentifyNamespace) SetMSRC(v uint8) { n[idnsMSRC] = v }

// NULBAF returns the Number of Unique Capability LBA Formats (NULBAF, byte 81).
func (n IdentifyNamespace) NULBAF() uint8 { return n[idnsNULBAF] }

// SetNULBAF sets the Number of Unique Capability LBA Formats (NULBAF).
func (n IdentifyNamespace) SetNULBAF(v uint8) { n[idnsNULBAF] = v }

// ANAGRPID returns the ANA Group Identifier (ANAGRPID, bytes 95:92).
func (n IdentifyNamespace) ANAGRPID() uint32 { return binary.LittleEndian.Uint32(n[idnsANAGRPID:]) }

// SetANAGRPID sets the ANA Group Identifier (ANAGRPID).
func (n IdentifyNamespace) SetANAGRPID(v uint32) { binary.LittleEndian.PutUint32(n[idnsANAGRPID:], v) }

// NSATTR returns the Namespace Attributes (NSATTR, byte 99): bit 0: write protected.
func (n IdentifyNamespace) NSATTR() uint8 { return n[idnsNSATTR] }

// SetNSATTR sets the Namespace Attributes (NSATTR).
func (n IdentifyNamespace) SetNSATTR(v uint8) { n[idnsNSATTR] = v }

// NVMSETID returns the NVM Set Identifier (NVMSETID, bytes 101:100).
func (n IdentifyNamespace) NVMSETID() uint16 { return binary.LittleEndian.Uint16(n[idnsNVMSETID:]) }

// SetNVMSETID sets the NVM Set Identifier (NVMSETID).
func (n IdentifyNamespace) SetNVMSETID(v uint16) { binary.LittleEndian.PutUint16(n[idnsNVMSETID:], v) }

// ENDGID returns the Endurance Group Identifier (ENDGID, bytes 103:102).
func (n IdentifyNamespace) ENDGID() uint16 { return binary.LittleEndian.Uint16(n[idnsENDGID:]) }

// SetENDGID sets the Endurance Group Identifier (ENDGID).
func (n IdentifyNamespace) SetENDGID(v uint16) { binary.LittleEndian.PutUint16(n[idnsENDGID:], v) }

// NGUID returns the Namespace Globally Unique Identifier (NGUID, bytes 119:104).
func (n IdentifyNamespace) NGUID() (v [16]byte) { copy(v[:], n[idnsNGUID:]); return v }

// SetNGUID sets the Namespace Globally Unique Identifier (NGUID).
func (n IdentifyNamespace) SetNGUID(v [16]byte) { copy(n[idnsNGUID:idnsNGUID+16], v[:]) }

// EUI64 returns the IEEE Extended Unique Identifier (EUI64, bytes 127:120).
func (n IdentifyNamespace) EUI64() (v [8]byte) { copy(v[:], n[idnsEUI64:]); return v }

// SetEUI64 sets the IEEE Extended Unique Identifier (EUI64).
func (n IdentifyNamespace) SetEUI64(v [8]byte) { copy(n[idnsEUI64:idnsEUI64+8], v[:]) }

// Bytes 383:128 hold 64 LBA format descriptors of 4 bytes.
const (
	idnsLBAF      = 128
	lbafSize      = 4
	numLBAFormats = 64
	idnsVS        = 384
)

// LBAFormat is an LBA Format descriptor of Identify Namespace.
type LBAFormat struct {
	MS    uint16 // Metadata Size in bytes per logical block
	LBADS uint8  // LBA Data Size as a power of two (0: format not available)
	RP    uint8  // Relative Performance (bits 1:0: 0 best .. 3 degraded)
}

// DataSize returns the logical block size in bytes (2^LBADS), or 0 when
// LBADS is 0 (format not available) or too large to be real (31 or more).
func (f LBAFormat) DataSize() uint32 {
	if f.LBADS == 0 || f.LBADS >= 31 {
		return 0
	}
	return 1 << f.LBADS
}

// LBAF returns LBA format descriptor i (0 to 63); the zero LBAFormat for
// another index.
func (n IdentifyNamespace) LBAF(i int) LBAFormat {
	if i < 0 || i >= numLBAFormats {
		return LBAFormat{}
	}
	d := n[idnsLBAF+i*lbafSize:]
	return LBAFormat{MS: binary.LittleEndian.Uint16(d), LBADS: d[2], RP: d[3] & 0x3}
}

// SetLBAF sets LBA format descriptor i (0 to 63); other indexes are
// ignored.
func (n IdentifyNamespace) SetLBAF(i int, f LBAFormat) {
	if i < 0 || i >= numLBAFormats {
		return
	}
	d := n[idnsLBAF+i*lbafSize:]
	binary.LittleEndian.PutUint16(d, f.MS)
	d[2] = f.LBADS
	d[3] = f.RP & 0x3
}

// FormatIndex returns the index of the LBA format the namespace is
// formatted with: FLBAS bits 3:0, with bits 6:5 as the upper two bits.
func (n IdentifyNamespace) FormatIndex() int {
	f := n.FLBAS()
	return int(f&FLBASIndexLowMask) | int(f&FLBASIndexHighMask)>>1
}

// SetFormatIndex sets the format index bits of FLBAS (i from 0 to 63),
// keeping the metadata bit.
func (n IdentifyNamespace) SetFormatIndex(i int) {
	f := n.FLBAS() &^ (FLBASIndexLowMask | FLBASIndexHighMask)
	n.SetFLBAS(f | uint8(i)&FLBASIndexLowMask | uint8(i<<1)&FLBASIndexHighMask)
}

// CurrentLBAFormat returns the LBA format the namespace is formatted with.
func (n IdentifyNamespace) CurrentLBAFormat() LBAFormat { return n.LBAF(n.FormatIndex()) }

// LBADataSize returns the logical block size of the namespace in bytes, or
// 0 when the current format is not valid.
func (n IdentifyNamespace) LBADataSize() uint32 { return n.CurrentLBAFormat().DataSize() }

// VendorSpecific returns the vendor specific bytes 4095:384.
func (n IdentifyNamespace) VendorSpecific() []byte {
	return n[idnsVS:IdentifyDataSize:IdentifyDataSize]
}
