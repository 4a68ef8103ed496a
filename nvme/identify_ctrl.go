package nvme

import (
	"encoding/binary"
	"fmt"
)

// IdentifyController is a view of the 4096-byte Identify Controller data
// structure (CNS 01h; NVMe Base 2.0, figure "Identify Controller Data
// Structure"; Linux struct nvme_id_ctrl). Accessors assume
// len(IdentifyController) >= IdentifyDataSize; ParseIdentifyController
// checks that for bytes from the network. Field names are the
// specification's abbreviations. The fabrics fields (IOCCSZ ... OFCS) are
// bytes 2047:1792.
type IdentifyController []byte

// NewIdentifyController returns a zeroed Identify Controller structure.
func NewIdentifyController() IdentifyController { return make(IdentifyController, IdentifyDataSize) }

// ParseIdentifyController returns a view of the Identify Controller data at
// the start of b, or an error when b holds less than 4096 bytes.
func ParseIdentifyController(b []byte) (IdentifyController, error) {
	if err := need("Identify Controller", b, IdentifyDataSize); err != nil {
		return nil, err
	}
	return IdentifyController(b[:IdentifyDataSize:IdentifyDataSize]), nil
}

// Controller types (CNTRLTYPE).
const (
	ControllerTypeNotReported = 0 // before NVMe 1.4
	ControllerTypeIO          = 1 // I/O controller
	ControllerTypeDiscovery   = 2 // Discovery controller
	ControllerTypeAdmin       = 3 // Administrative controller
)

// CMIC bits.
const (
	CMICMultiPort    = 1 << 0 // the NVM subsystem may have more than one port
	CMICMultiCtrl    = 1 << 1 // the NVM subsystem may have two or more controllers
	CMICSRIOV        = 1 << 2 // the controller is an SR-IOV virtual function
	CMICANAReporting = 1 << 3 // Asymmetric Namespace Access reporting
)

// CTRATT bits.
const (
	CTRATTHostID128            = 1 << 0 // 128-bit Host Identifier
	CTRATTNonOpPowerState      = 1 << 1
	CTRATTNVMSets              = 1 << 2
	CTRATTReadRecoveryLevels   = 1 << 3
	CTRATTEnduranceGroups      = 1 << 4
	CTRATTPredictableLatency   = 1 << 5
	CTRATTTBKAS                = 1 << 6 // Traffic Based Keep Alive
	CTRATTNamespaceGranularity = 1 << 7
	CTRATTSQAssociations       = 1 << 8
	CTRATTUUIDList             = 1 << 9
)

// OACS bits (optional admin commands).
const (
	OACSSecurity       = 1 << 0 // Security Send/Receive
	OACSFormatNVM      = 1 << 1
	OACSFirmware       = 1 << 2 // Firmware Commit / Image Download
	OACSNSManagement   = 1 << 3 // Namespace Management and Attachment
	OACSSelfTest       = 1 << 4
	OACSDirectives     = 1 << 5
	OACSNVMeMI         = 1 << 6
	OACSVirtualization = 1 << 7
	OACSDoorbellBuffer = 1 << 8
	OACSGetLBAStatus   = 1 << 9
	OACSLockdown       = 1 << 10
)

// LPA bits (log page attributes).
const (
	LPASMARTPerNamespace = 1 << 0
	LPACommandEffects    = 1 << 1 // Commands Supported and Effects log page
	LPAExtendedData      = 1 << 2 // NUMDU, LPOL/LPOU of Get Log Page
	LPATelemetry         = 1 << 3
	LPAPersistentEvent   = 1 << 4
)

// ONCS bits (optional NVM commands).
const (
	ONCSCompare            = 1 << 0
	ONCSWriteUncorrectable = 1 << 1
	ONCSDatasetManagement  = 1 << 2
	ONCSWriteZeroes        = 1 << 3
	ONCSSaveSelect         = 1 << 4 // Save field of Set Features, Select of Get Features
	ONCSReservations       = 1 << 5
	ONCSTimestamp          = 1 << 6
	ONCSVerify             = 1 << 7
	ONCSCopy               = 1 << 8
)

// ANACAP bits.
const (
	ANACAPOptimized       = 1 << 0
	ANACAPNonOptimized    = 1 << 1
	ANACAPInaccessible    = 1 << 2
	ANACAPPersistentLoss  = 1 << 3
	ANACAPChange          = 1 << 4
	ANACAPGroupIDNoChange = 1 << 6 // ANAGRPID does not change while attached
	ANACAPGroupIDMgmt     = 1 << 7 // non-zero ANAGRPID in Namespace Management
)

// SGLS bits.
const (
	SGLSSupported           = 1 << 0 // SGLs supported, no alignment requirement (bits 1:0 = 01b)
	SGLSSupportedDwordAlign = 2 << 0 // SGLs supported, dword alignment (bits 1:0 = 10b)
	SGLSKeyed               = 1 << 2 // Keyed SGL Data Block descriptor
	SGLSBitBucket           = 1 << 16
	SGLSMPTRByteAligned     = 1 << 17
	SGLSOversize            = 1 << 18 // SGL longer than the data is allowed
	SGLSMPTRSGL             = 1 << 19
	SGLSOffset              = 1 << 20 // Data Block descriptor with an offset (in-capsule data)
	SGLSTransport           = 1 << 21 // Transport SGL Data Block descriptor
)

// VWC bits.
const (
	VWCPresent = 1 << 0 // a volatile write cache is present
)

// FCATT bits.
const (
	FCATTStaticController = 1 << 0 // static controller model (cleared: dynamic)
)

// OFCS bits.
const (
	OFCSDisconnect = 1 << 0 // Disconnect command and deletion of I/O queues
)

// MakeVersion returns a VER / VS value: major in bits 31:16, minor in 15:8,
// tertiary in 7:0.
func MakeVersion(major uint16, minor, tertiary uint8) uint32 {
	return uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary)
}

// Common specification versions.
const (
	Version1_2 = 0x00010200
	Version1_3 = 0x00010300
	Version1_4 = 0x00010400
	Version2_0 = 0x00020000
)

// VersionString returns a VER / VS value as "major.minor" or
// "major.minor.tertiary".
func VersionString(v uint32) string {
	if v&0xff != 0 {
		return fmt.Sprintf("%d.%d.%d", v>>16, v>>8&0xff, v&0xff)
	}
	return fmt.Sprintf("%d.%d", v>>16, v>>8&0xff)
}

const (
	idctrlVID       = 0
	idctrlSSVID     = 2
	idctrlSN        = 4
	idctrlMN        = 24
	idctrlFR        = 64
	idctrlRAB       = 72
	idctrlIEEE      = 73
	idctrlCMIC      = 76
	idctrlMDTS      = 77
	idctrlCNTLID    = 78
	idctrlVER       = 80
	idctrlRTD3R     = 84
	idctrlRTD3E     = 88
	idctrlOAES      = 92
	idctrlCTRATT    = 96
	idctrlRRLS      = 100
	idctrlCNTRLTYPE = 111
	idctrlFGUID     = 112
	idctrlCRDT1     = 128
	idctrlCRDT2     = 130
	idctrlCRDT3     = 132
	idctrlNVMSR     = 253
	idctrlVWCI      = 254
	idctrlMEC       = 255
	idctrlOACS      = 256
	idctrlACL       = 258
	idctrlAERL      = 259
	idctrlFRMW      = 260
	idctrlLPA       = 261
	idctrlELPE      = 262
	idctrlNPSS      = 263
	idctrlAVSCC     = 264
	idctrlAPSTA     = 265
	idctrlWCTEMP    = 266
	idctrlCCTEMP    = 268
	idctrlMTFA      = 270
	idctrlHMPRE     = 272
	idctrlHMMIN     = 276
	idctrlTNVMCAP   = 280
	idctrlUNVMCAP   = 296
	idctrlRPMBS     = 312
	idctrlEDSTT     = 316
	idctrlDSTO      = 318
	idctrlFWUG      = 319
	idctrlKAS       = 320
	idctrlHCTMA     = 322
	idctrlMNTMT     = 324
	idctrlMXTMT     = 326
	idctrlSANICAP   = 328
	idctrlHMMINDS   = 332
	idctrlHMMAXD    = 336
	idctrlNSETIDMAX = 338
	idctrlENDGIDMAX = 340
	idctrlANATT     = 342
	idctrlANACAP    = 343
	idctrlANAGRPMAX = 344
	idctrlNANAGRPID = 348
	idctrlPELS      = 352
	idctrlDOMAINID  = 356
	idctrlMEGCAP    = 368
	idctrlSQES      = 512
	idctrlCQES      = 513
	idctrlMAXCMD    = 514
	idctrlNN        = 516
	idctrlONCS      = 520
	idctrlFUSES     = 522
	idctrlFNA       = 524
	idctrlVWC       = 525
	idctrlAWUN      = 526
	idctrlAWUPF     = 528
	idctrlNVSCC     = 530
	idctrlNWPC      = 531
	idctrlACWU      = 532
	idctrlOCFS      = 534
	idctrlSGLS      = 536
	idctrlMNAN      = 540
	idctrlMAXDNA    = 544
	idctrlMAXCNA    = 560
	idctrlSUBNQN    = 768
	idctrlIOCCSZ    = 1792
	idctrlIORCSZ    = 1796
	idctrlICDOFF    = 1800
	idctrlFCATT     = 1802
	idctrlMSDBD     = 1803
	idctrlOFCS      = 1804
)

// VID returns the PCI Vendor ID (VID, bytes 1:0).
func (c IdentifyController) VID() uint16 { return binary.LittleEndian.Uint16(c[idctrlVID:]) }

// SetVID sets the PCI Vendor ID (VID).
func (c IdentifyController) SetVID(v uint16) { binary.LittleEndian.PutUint16(c[idctrlVID:], v) }

// SSVID returns the PCI Subsystem Vendor ID (SSVID, bytes 3:2).
func (c IdentifyController) SSVID() uint16 { return binary.LittleEndian.Uint16(c[idctrlSSVID:]) }

// SetSSVID sets the PCI Subsystem Vendor ID (SSVID).
func (c IdentifyController) SetSSVID(v uint16) { binary.LittleEndian.PutUint16(c[idctrlSSVID:], v) }

// SN returns the Serial Number (SN, bytes 23:4) with the trailing space padding removed.
func (c IdentifyController) SN() string { return getASCII(c[idctrlSN : idctrlSN+20]) }

// SetSN sets the Serial Number (SN): printable ASCII of at most 20 bytes, padded with spaces.
func (c IdentifyController) SetSN(s string) error { return putASCII(c[idctrlSN:idctrlSN+20], "SN", s) }

// MN returns the Model Number (MN, bytes 63:24) with the trailing space padding removed.
func (c IdentifyController) MN() string { return getASCII(c[idctrlMN : idctrlMN+40]) }

// SetMN sets the Model Number (MN): printable ASCII of at most 40 bytes, padded with spaces.
func (c IdentifyController) SetMN(s string) error { return putASCII(c[idctrlMN:idctrlMN+40], "MN", s) }

// FR returns the Firmware Revision (FR, bytes 71:64) with the trailing space padding removed.
func (c IdentifyController) FR() string { return getASCII(c[idctrlFR : idctrlFR+8]) }

// SetFR sets the Firmware Revision (FR): printable ASCII of at most 8 bytes, padded with spaces.
func (c IdentifyController) SetFR(s string) error { return putASCII(c[idctrlFR:idctrlFR+8], "FR", s) }

// RAB returns the Recommended Arbitration Burst (RAB, byte 72): a power of two.
func (c IdentifyController) RAB() uint8 { return c[idctrlRAB] }

// SetRAB sets the Recommended Arbitration Burst (RAB).
func (c IdentifyController) SetRAB(v uint8) { c[idctrlRAB] = v }

// IEEE returns the IEEE OUI Identifier (IEEE, bytes 75:73, least significant byte first).
func (c IdentifyController) IEEE() uint32 { return getLE24(c[idctrlIEEE:]) }

// SetIEEE sets the IEEE OUI Identifier (IEEE); the upper 8 bits of v are ignored.
func (c IdentifyController) SetIEEE(v uint32) { putLE24(c[idctrlIEEE:], v) }

// CMIC returns the Controller Multi-Path I/O and Namespace Sharing Capabilities (CMIC, byte 76): CMIC* bits.
func (c IdentifyController) CMIC() uint8 { return c[idctrlCMIC] }

// SetCMIC sets the Controller Multi-Path I/O and Namespace Sharing Capabilities (CMIC).
func (c IdentifyController) SetCMIC(v uint8) { c[idctrlCMIC] = v }

// MDTS returns the Maximum Data Transfer Size as a power of two of the minimum memory page size (MDTS, byte 77): 0: no limit.
func (c IdentifyController) MDTS() uint8 { return c[idctrlMDTS] }

// SetMDTS sets the Maximum Data Transfer Size as a power of two of the minimum memory page size (MDTS).
func (c IdentifyController) SetMDTS(v uint8) { c[idctrlMDTS] = v }

// CNTLID returns the Controller ID (CNTLID, bytes 79:78).
func (c IdentifyController) CNTLID() uint16 { return binary.LittleEndian.Uint16(c[idctrlCNTLID:]) }

// SetCNTLID sets the Controller ID (CNTLID).
func (c IdentifyController) SetCNTLID(v uint16) { binary.LittleEndian.PutUint16(c[idctrlCNTLID:], v) }

// VER returns the Version the controller complies with (VER, bytes 83:80): MakeVersion.
func (c IdentifyController) VER() uint32 { return binary.LittleEndian.Uint32(c[idctrlVER:]) }

// SetVER sets the Version the controller complies with (VER).
func (c IdentifyController) SetVER(v uint32) { binary.LittleEndian.PutUint32(c[idctrlVER:], v) }

// RTD3R returns the RTD3 Resume Latency in microseconds (RTD3R, bytes 87:84).
func (c IdentifyController) RTD3R() uint32 { return binary.LittleEndian.Uint32(c[idctrlRTD3R:]) }

// SetRTD3R sets the RTD3 Resume Latency in microseconds (RTD3R).
func (c IdentifyController) SetRTD3R(v uint32) { binary.LittleEndian.PutUint32(c[idctrlRTD3R:], v) }

// RTD3E returns the RTD3 Entry Latency in microseconds (RTD3E, bytes 91:88).
func (c IdentifyController) RTD3E() uint32 { return binary.LittleEndian.Uint32(c[idctrlRTD3E:]) }

// SetRTD3E sets the RTD3 Entry Latency in microseconds (RTD3E).
func (c IdentifyController) SetRTD3E(v uint32) { binary.LittleEndian.PutUint32(c[idctrlRTD3E:], v) }

// OAES returns the Optional Asynchronous Events Supported (OAES, bytes 95:92): AEC* bits.
func (c IdentifyController) OAES() uint32 { return binary.LittleEndian.Uint32(c[idctrlOAES:]) }

// SetOAES sets the Optional Asynchronous Events Supported (OAES).
func (c IdentifyController) SetOAES(v uint32) { binary.LittleEndian.PutUint32(c[idctrlOAES:], v) }

// CTRATT returns the Controller Attributes (CTRATT, bytes 99:96): CTRATT* bits.
func (c IdentifyController) CTRATT() uint32 { return binary.LittleEndian.Uint32(c[idctrlCTRATT:]) }

// SetCTRATT sets the Controller Attributes (CTRATT).
func (c IdentifyController) SetCTRATT(v uint32) { binary.LittleEndian.PutUint32(c[idctrlCTRATT:], v) }

// RRLS returns the Read Recovery Levels Supported (RRLS, bytes 101:100).
func (c IdentifyController) RRLS() uint16 { return binary.LittleEndian.Uint16(c[idctrlRRLS:]) }

// SetRRLS sets the Read Recovery Levels Supported (RRLS).
func (c IdentifyController) SetRRLS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlRRLS:], v) }

// CNTRLTYPE returns the Controller Type (CNTRLTYPE, byte 111): ControllerTypeIO, ControllerTypeDiscovery, ControllerTypeAdmin.
func (c IdentifyController) CNTRLTYPE() uint8 { return c[idctrlCNTRLTYPE] }

// SetCNTRLTYPE sets the Controller Type (CNTRLTYPE).
func (c IdentifyController) SetCNTRLTYPE(v uint8) { c[idctrlCNTRLTYPE] = v }

// FGUID returns the FRU Globally Unique Identifier (FGUID, bytes 127:112).
func (c IdentifyController) FGUID() (v [16]byte) { copy(v[:], c[idctrlFGUID:]); return v }

// SetFGUID sets the FRU Globally Unique Identifier (FGUID).
func (c IdentifyController) SetFGUID(v [16]byte) { copy(c[idctrlFGUID:idctrlFGUID+16], v[:]) }

// CRDT1 returns the Command Retry Delay Time 1 in units of 100 ms (CRDT1, bytes 129:128).
func (c IdentifyController) CRDT1() uint16 { return binary.LittleEndian.Uint16(c[idctrlCRDT1:]) }

// SetCRDT1 sets the Command Retry Delay Time 1 in units of 100 ms (CRDT1).
func (c IdentifyController) SetCRDT1(v uint16) { binary.LittleEndian.PutUint16(c[idctrlCRDT1:], v) }

// CRDT2 returns the Command Retry Delay Time 2 in units of 100 ms (CRDT2, bytes 131:130).
func (c IdentifyController) CRDT2() uint16 { return binary.LittleEndian.Uint16(c[idctrlCRDT2:]) }

// SetCRDT2 sets the Command Retry Delay Time 2 in units of 100 ms (CRDT2).
func (c IdentifyController) SetCRDT2(v uint16) { binary.LittleEndian.PutUint16(c[idctrlCRDT2:], v) }

// CRDT3 returns the Command Retry Delay Time 3 in units of 100 ms (CRDT3, bytes 133:132).
func (c IdentifyController) CRDT3() uint16 { return binary.LittleEndian.Uint16(c[idctrlCRDT3:]) }

// SetCRDT3 sets the Command Retry Delay Time 3 in units of 100 ms (CRDT3).
func (c IdentifyController) SetCRDT3(v uint16) { binary.LittleEndian.PutUint16(c[idctrlCRDT3:], v) }

// NVMSR returns the NVM Subsystem Report (NVMSR, byte 253).
func (c IdentifyController) NVMSR() uint8 { return c[idctrlNVMSR] }

// SetNVMSR sets the NVM Subsystem Report (NVMSR).
func (c IdentifyController) SetNVMSR(v uint8) { c[idctrlNVMSR] = v }

// VWCI returns the VPD Write Cycle Information (VWCI, byte 254).
func (c IdentifyController) VWCI() uint8 { return c[idctrlVWCI] }

// SetVWCI sets the VPD Write Cycle Information (VWCI).
func (c IdentifyController) SetVWCI(v uint8) { c[idctrlVWCI] = v }

// MEC returns the Management Endpoint Capabilities (MEC, byte 255).
func (c IdentifyController) MEC() uint8 { return c[idctrlMEC] }

// SetMEC sets the Management Endpoint Capabilities (MEC).
func (c IdentifyController) SetMEC(v uint8) { c[idctrlMEC] = v }

// OACS returns the Optional Admin Command Support (OACS, bytes 257:256): OACS* bits.
func (c IdentifyController) OACS() uint16 { return binary.LittleEndian.Uint16(c[idctrlOACS:]) }

// SetOACS sets the Optional Admin Command Support (OACS).
func (c IdentifyController) SetOACS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlOACS:], v) }

// ACL returns the Abort Command Limit (ACL, byte 258): 0's based.
func (c IdentifyController) ACL() uint8 { return c[idctrlACL] }

// SetACL sets the Abort Command Limit (ACL).
func (c IdentifyController) SetACL(v uint8) { c[idctrlACL] = v }

// AERL returns the Asynchronous Event Request Limit (AERL, byte 259): 0's based.
func (c IdentifyController) AERL() uint8 { return c[idctrlAERL] }

// SetAERL sets the Asynchronous Event Request Limit (AERL).
func (c IdentifyController) SetAERL(v uint8) { c[idctrlAERL] = v }

// FRMW returns the Firmware Updates field (FRMW, byte 260).
func (c IdentifyController) FRMW() uint8 { return c[idctrlFRMW] }

// SetFRMW sets the Firmware Updates field (FRMW).
func (c IdentifyController) SetFRMW(v uint8) { c[idctrlFRMW] = v }

// LPA returns the Log Page Attributes (LPA, byte 261): LPA* bits.
func (c IdentifyController) LPA() uint8 { return c[idctrlLPA] }

// SetLPA sets the Log Page Attributes (LPA).
func (c IdentifyController) SetLPA(v uint8) { c[idctrlLPA] = v }

// ELPE returns the Error Log Page Entries (ELPE, byte 262): 0's based.
func (c IdentifyController) ELPE() uint8 { return c[idctrlELPE] }

// SetELPE sets the Error Log Page Entries (ELPE).
func (c IdentifyController) SetELPE(v uint8) { c[idctrlELPE] = v }

// NPSS returns the Number of Power States Support (NPSS, byte 263): 0's based.
func (c IdentifyController) NPSS() uint8 { return c[idctrlNPSS] }

// SetNPSS sets the Number of Power States Support (NPSS).
func (c IdentifyController) SetNPSS(v uint8) { c[idctrlNPSS] = v }

// AVSCC returns the Admin Vendor Specific Command Configuration (AVSCC, byte 264).
func (c IdentifyController) AVSCC() uint8 { return c[idctrlAVSCC] }

// SetAVSCC sets the Admin Vendor Specific Command Configuration (AVSCC).
func (c IdentifyController) SetAVSCC(v uint8) { c[idctrlAVSCC] = v }

// APSTA returns the Autonomous Power State Transition Attributes (APSTA, byte 265).
func (c IdentifyController) APSTA() uint8 { return c[idctrlAPSTA] }

// SetAPSTA sets the Autonomous Power State Transition Attributes (APSTA).
func (c IdentifyController) SetAPSTA(v uint8) { c[idctrlAPSTA] = v }

// WCTEMP returns the Warning Composite Temperature Threshold in kelvins (WCTEMP, bytes 267:266).
func (c IdentifyController) WCTEMP() uint16 { return binary.LittleEndian.Uint16(c[idctrlWCTEMP:]) }

// SetWCTEMP sets the Warning Composite Temperature Threshold in kelvins (WCTEMP).
func (c IdentifyController) SetWCTEMP(v uint16) { binary.LittleEndian.PutUint16(c[idctrlWCTEMP:], v) }

// CCTEMP returns the Critical Composite Temperature Threshold in kelvins (CCTEMP, bytes 269:268).
func (c IdentifyController) CCTEMP() uint16 { return binary.LittleEndian.Uint16(c[idctrlCCTEMP:]) }

// SetCCTEMP sets the Critical Composite Temperature Threshold in kelvins (CCTEMP).
func (c IdentifyController) SetCCTEMP(v uint16) { binary.LittleEndian.PutUint16(c[idctrlCCTEMP:], v) }

// MTFA returns the Maximum Time for Firmware Activation in units of 100 ms (MTFA, bytes 271:270).
func (c IdentifyController) MTFA() uint16 { return binary.LittleEndian.Uint16(c[idctrlMTFA:]) }

// SetMTFA sets the Maximum Time for Firmware Activation in units of 100 ms (MTFA).
func (c IdentifyController) SetMTFA(v uint16) { binary.LittleEndian.PutUint16(c[idctrlMTFA:], v) }

// HMPRE returns the Host Memory Buffer Preferred Size in 4 KiB units (HMPRE, bytes 275:272).
func (c IdentifyController) HMPRE() uint32 { return binary.LittleEndian.Uint32(c[idctrlHMPRE:]) }

// SetHMPRE sets the Host Memory Buffer Preferred Size in 4 KiB units (HMPRE).
func (c IdentifyController) SetHMPRE(v uint32) { binary.LittleEndian.PutUint32(c[idctrlHMPRE:], v) }

// HMMIN returns the Host Memory Buffer Minimum Size in 4 KiB units (HMMIN, bytes 279:276).
func (c IdentifyController) HMMIN() uint32 { return binary.LittleEndian.Uint32(c[idctrlHMMIN:]) }

// SetHMMIN sets the Host Memory Buffer Minimum Size in 4 KiB units (HMMIN).
func (c IdentifyController) SetHMMIN(v uint32) { binary.LittleEndian.PutUint32(c[idctrlHMMIN:], v) }

// TNVMCAP returns the Total NVM Capacity in bytes (TNVMCAP, bytes 295:280).
func (c IdentifyController) TNVMCAP() Uint128 { return getUint128(c[idctrlTNVMCAP:]) }

// SetTNVMCAP sets the Total NVM Capacity in bytes (TNVMCAP).
func (c IdentifyController) SetTNVMCAP(v Uint128) { putUint128(c[idctrlTNVMCAP:], v) }

// UNVMCAP returns the Unallocated NVM Capacity in bytes (UNVMCAP, bytes 311:296).
func (c IdentifyController) UNVMCAP() Uint128 { return getUint128(c[idctrlUNVMCAP:]) }

// SetUNVMCAP sets the Unallocated NVM Capacity in bytes (UNVMCAP).
func (c IdentifyController) SetUNVMCAP(v Uint128) { putUint128(c[idctrlUNVMCAP:], v) }

// RPMBS returns the Replay Protected Memory Block Support (RPMBS, bytes 315:312).
func (c IdentifyController) RPMBS() uint32 { return binary.LittleEndian.Uint32(c[idctrlRPMBS:]) }

// SetRPMBS sets the Replay Protected Memory Block Support (RPMBS).
func (c IdentifyController) SetRPMBS(v uint32) { binary.LittleEndian.PutUint32(c[idctrlRPMBS:], v) }

// EDSTT returns the Extended Device Self-test Time in minutes (EDSTT, bytes 317:316).
func (c IdentifyController) EDSTT() uint16 { return binary.LittleEndian.Uint16(c[idctrlEDSTT:]) }

// SetEDSTT sets the Extended Device Self-test Time in minutes (EDSTT).
func (c IdentifyController) SetEDSTT(v uint16) { binary.LittleEndian.PutUint16(c[idctrlEDSTT:], v) }

// DSTO returns the Device Self-test Options (DSTO, byte 318).
func (c IdentifyController) DSTO() uint8 { return c[idctrlDSTO] }

// SetDSTO sets the Device Self-test Options (DSTO).
func (c IdentifyController) SetDSTO(v uint8) { c[idctrlDSTO] = v }

// FWUG returns the Firmware Update Granularity in 4 KiB units (FWUG, byte 319).
func (c IdentifyController) FWUG() uint8 { return c[idctrlFWUG] }

// SetFWUG sets the Firmware Update Granularity in 4 KiB units (FWUG).
func (c IdentifyController) SetFWUG(v uint8) { c[idctrlFWUG] = v }

// KAS returns the Keep Alive Support granularity in units of 100 ms (KAS, bytes 321:320): 0: Keep Alive not supported.
func (c IdentifyController) KAS() uint16 { return binary.LittleEndian.Uint16(c[idctrlKAS:]) }

// SetKAS sets the Keep Alive Support granularity in units of 100 ms (KAS).
func (c IdentifyController) SetKAS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlKAS:], v) }

// HCTMA returns the Host Controlled Thermal Management Attributes (HCTMA, bytes 323:322).
func (c IdentifyController) HCTMA() uint16 { return binary.LittleEndian.Uint16(c[idctrlHCTMA:]) }

// SetHCTMA sets the Host Controlled Thermal Management Attributes (HCTMA).
func (c IdentifyController) SetHCTMA(v uint16) { binary.LittleEndian.PutUint16(c[idctrlHCTMA:], v) }

// MNTMT returns the Minimum Thermal Management Temperature in kelvins (MNTMT, bytes 325:324).
func (c IdentifyController) MNTMT() uint16 { return binary.LittleEndian.Uint16(c[idctrlMNTMT:]) }

// SetMNTMT sets the Minimum Thermal Management Temperature in kelvins (MNTMT).
func (c IdentifyController) SetMNTMT(v uint16) { binary.LittleEndian.PutUint16(c[idctrlMNTMT:], v) }

// MXTMT returns the Maximum Thermal Management Temperature in kelvins (MXTMT, bytes 327:326).
func (c IdentifyController) MXTMT() uint16 { return binary.LittleEndian.Uint16(c[idctrlMXTMT:]) }

// SetMXTMT sets the Maximum Thermal Management Temperature in kelvins (MXTMT).
func (c IdentifyController) SetMXTMT(v uint16) { binary.LittleEndian.PutUint16(c[idctrlMXTMT:], v) }

// SANICAP returns the Sanitize Capabilities (SANICAP, bytes 331:328).
func (c IdentifyController) SANICAP() uint32 { return binary.LittleEndian.Uint32(c[idctrlSANICAP:]) }

// SetSANICAP sets the Sanitize Capabilities (SANICAP).
func (c IdentifyController) SetSANICAP(v uint32) { binary.LittleEndian.PutUint32(c[idctrlSANICAP:], v) }

// HMMINDS returns the Host Memory Buffer Minimum Descriptor Entry Size in 4 KiB units (HMMINDS, bytes 335:332).
func (c IdentifyController) HMMINDS() uint32 { return binary.LittleEndian.Uint32(c[idctrlHMMINDS:]) }

// SetHMMINDS sets the Host Memory Buffer Minimum Descriptor Entry Size in 4 KiB units (HMMINDS).
func (c IdentifyController) SetHMMINDS(v uint32) { binary.LittleEndian.PutUint32(c[idctrlHMMINDS:], v) }

// HMMAXD returns the Host Memory Maximum Descriptors Entries (HMMAXD, bytes 337:336).
func (c IdentifyController) HMMAXD() uint16 { return binary.LittleEndian.Uint16(c[idctrlHMMAXD:]) }

// SetHMMAXD sets the Host Memory Maximum Descriptors Entries (HMMAXD).
func (c IdentifyController) SetHMMAXD(v uint16) { binary.LittleEndian.PutUint16(c[idctrlHMMAXD:], v) }

// NSETIDMAX returns the NVM Set Identifier Maximum (NSETIDMAX, bytes 339:338).
func (c IdentifyController) NSETIDMAX() uint16 {
	return binary.LittleEndian.Uint16(c[idctrlNSETIDMAX:])
}

// SetNSETIDMAX sets the NVM Set Identifier Maximum (NSETIDMAX).
func (c IdentifyController) SetNSETIDMAX(v uint16) {
	binary.LittleEndian.PutUint16(c[idctrlNSETIDMAX:], v)
}

// ENDGIDMAX returns the Endurance Group Identifier Maximum (ENDGIDMAX, bytes 341:340).
func (c IdentifyController) ENDGIDMAX() uint16 {
	return binary.LittleEndian.Uint16(c[idctrlENDGIDMAX:])
}

// SetENDGIDMAX sets the Endurance Group Identifier Maximum (ENDGIDMAX).
func (c IdentifyController) SetENDGIDMAX(v uint16) {
	binary.LittleEndian.PutUint16(c[idctrlENDGIDMAX:], v)
}

// ANATT returns the ANA Transition Time in seconds (ANATT, byte 342).
func (c IdentifyController) ANATT() uint8 { return c[idctrlANATT] }

// SetANATT sets the ANA Transition Time in seconds (ANATT).
func (c IdentifyController) SetANATT(v uint8) { c[idctrlANATT] = v }

// ANACAP returns the Asymmetric Namespace Access Capabilities (ANACAP, byte 343): ANACAP* bits.
func (c IdentifyController) ANACAP() uint8 { return c[idctrlANACAP] }

// SetANACAP sets the Asymmetric Namespace Access Capabilities (ANACAP).
func (c IdentifyController) SetANACAP(v uint8) { c[idctrlANACAP] = v }

// ANAGRPMAX returns the ANA Group Identifier Maximum (ANAGRPMAX, bytes 347:344).
func (c IdentifyController) ANAGRPMAX() uint32 {
	return binary.LittleEndian.Uint32(c[idctrlANAGRPMAX:])
}

// SetANAGRPMAX sets the ANA Group Identifier Maximum (ANAGRPMAX).
func (c IdentifyController) SetANAGRPMAX(v uint32) {
	binary.LittleEndian.PutUint32(c[idctrlANAGRPMAX:], v)
}

// NANAGRPID returns the Number of ANA Group Identifiers (NANAGRPID, bytes 351:348).
func (c IdentifyController) NANAGRPID() uint32 {
	return binary.LittleEndian.Uint32(c[idctrlNANAGRPID:])
}

// SetNANAGRPID sets the Number of ANA Group Identifiers (NANAGRPID).
func (c IdentifyController) SetNANAGRPID(v uint32) {
	binary.LittleEndian.PutUint32(c[idctrlNANAGRPID:], v)
}

// PELS returns the Persistent Event Log Size in 64 KiB units (PELS, bytes 355:352).
func (c IdentifyController) PELS() uint32 { return binary.LittleEndian.Uint32(c[idctrlPELS:]) }

// SetPELS sets the Persistent Event Log Size in 64 KiB units (PELS).
func (c IdentifyController) SetPELS(v uint32) { binary.LittleEndian.PutUint32(c[idctrlPELS:], v) }

// DOMAINID returns the Domain Identifier (DOMAINID, bytes 357:356).
func (c IdentifyController) DOMAINID() uint16 { return binary.LittleEndian.Uint16(c[idctrlDOMAINID:]) }

// SetDOMAINID sets the Domain Identifier (DOMAINID).
func (c IdentifyController) SetDOMAINID(v uint16) {
	binary.LittleEndian.PutUint16(c[idctrlDOMAINID:], v)
}

// MEGCAP returns the Max Endurance Group Capacity in bytes (MEGCAP, bytes 383:368).
func (c IdentifyController) MEGCAP() Uint128 { return getUint128(c[idctrlMEGCAP:]) }

// SetMEGCAP sets the Max Endurance Group Capacity in bytes (MEGCAP).
func (c IdentifyController) SetMEGCAP(v Uint128) { putUint128(c[idctrlMEGCAP:], v) }

// SQES returns the Submission Queue Entry Size: required (bits 3:0) and maximum (bits 7:4) as powers of two (SQES, byte 512).
func (c IdentifyController) SQES() uint8 { return c[idctrlSQES] }

// SetSQES sets the Submission Queue Entry Size: required (bits 3:0) and maximum (bits 7:4) as powers of two (SQES).
func (c IdentifyController) SetSQES(v uint8) { c[idctrlSQES] = v }

// CQES returns the Completion Queue Entry Size: required (bits 3:0) and maximum (bits 7:4) as powers of two (CQES, byte 513).
func (c IdentifyController) CQES() uint8 { return c[idctrlCQES] }

// SetCQES sets the Completion Queue Entry Size: required (bits 3:0) and maximum (bits 7:4) as powers of two (CQES).
func (c IdentifyController) SetCQES(v uint8) { c[idctrlCQES] = v }

// MAXCMD returns the Maximum Outstanding Commands (MAXCMD, bytes 515:514).
func (c IdentifyController) MAXCMD() uint16 { return binary.LittleEndian.Uint16(c[idctrlMAXCMD:]) }

// SetMAXCMD sets the Maximum Outstanding Commands (MAXCMD).
func (c IdentifyController) SetMAXCMD(v uint16) { binary.LittleEndian.PutUint16(c[idctrlMAXCMD:], v) }

// NN returns the Number of Namespaces (NN, bytes 519:516): the largest valid NSID.
func (c IdentifyController) NN() uint32 { return binary.LittleEndian.Uint32(c[idctrlNN:]) }

// SetNN sets the Number of Namespaces (NN).
func (c IdentifyController) SetNN(v uint32) { binary.LittleEndian.PutUint32(c[idctrlNN:], v) }

// ONCS returns the Optional NVM Command Support (ONCS, bytes 521:520): ONCS* bits.
func (c IdentifyController) ONCS() uint16 { return binary.LittleEndian.Uint16(c[idctrlONCS:]) }

// SetONCS sets the Optional NVM Command Support (ONCS).
func (c IdentifyController) SetONCS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlONCS:], v) }

// FUSES returns the Fused Operation Support (FUSES, bytes 523:522).
func (c IdentifyController) FUSES() uint16 { return binary.LittleEndian.Uint16(c[idctrlFUSES:]) }

// SetFUSES sets the Fused Operation Support (FUSES).
func (c IdentifyController) SetFUSES(v uint16) { binary.LittleEndian.PutUint16(c[idctrlFUSES:], v) }

// FNA returns the Format NVM Attributes (FNA, byte 524).
func (c IdentifyController) FNA() uint8 { return c[idctrlFNA] }

// SetFNA sets the Format NVM Attributes (FNA).
func (c IdentifyController) SetFNA(v uint8) { c[idctrlFNA] = v }

// VWC returns the Volatile Write Cache field (VWC, byte 525): bit 0: present.
func (c IdentifyController) VWC() uint8 { return c[idctrlVWC] }

// SetVWC sets the Volatile Write Cache field (VWC).
func (c IdentifyController) SetVWC(v uint8) { c[idctrlVWC] = v }

// AWUN returns the Atomic Write Unit Normal in logical blocks (AWUN, bytes 527:526): 0's based.
func (c IdentifyController) AWUN() uint16 { return binary.LittleEndian.Uint16(c[idctrlAWUN:]) }

// SetAWUN sets the Atomic Write Unit Normal in logical blocks (AWUN).
func (c IdentifyController) SetAWUN(v uint16) { binary.LittleEndian.PutUint16(c[idctrlAWUN:], v) }

// AWUPF returns the Atomic Write Unit Power Fail in logical blocks (AWUPF, bytes 529:528): 0's based.
func (c IdentifyController) AWUPF() uint16 { return binary.LittleEndian.Uint16(c[idctrlAWUPF:]) }

// SetAWUPF sets the Atomic Write Unit Power Fail in logical blocks (AWUPF).
func (c IdentifyController) SetAWUPF(v uint16) { binary.LittleEndian.PutUint16(c[idctrlAWUPF:], v) }

// NVSCC returns the I/O Command Set Vendor Specific Command Configuration (NVSCC, byte 530): ICSVSCC.
func (c IdentifyController) NVSCC() uint8 { return c[idctrlNVSCC] }

// SetNVSCC sets the I/O Command Set Vendor Specific Command Configuration (NVSCC).
func (c IdentifyController) SetNVSCC(v uint8) { c[idctrlNVSCC] = v }

// NWPC returns the Namespace Write Protection Capabilities (NWPC, byte 531).
func (c IdentifyController) NWPC() uint8 { return c[idctrlNWPC] }

// SetNWPC sets the Namespace Write Protection Capabilities (NWPC).
func (c IdentifyController) SetNWPC(v uint8) { c[idctrlNWPC] = v }

// ACWU returns the Atomic Compare & Write Unit in logical blocks (ACWU, bytes 533:532): 0's based.
func (c IdentifyController) ACWU() uint16 { return binary.LittleEndian.Uint16(c[idctrlACWU:]) }

// SetACWU sets the Atomic Compare & Write Unit in logical blocks (ACWU).
func (c IdentifyController) SetACWU(v uint16) { binary.LittleEndian.PutUint16(c[idctrlACWU:], v) }

// OCFS returns the Optional Copy Formats Supported (OCFS, bytes 535:534).
func (c IdentifyController) OCFS() uint16 { return binary.LittleEndian.Uint16(c[idctrlOCFS:]) }

// SetOCFS sets the Optional Copy Formats Supported (OCFS).
func (c IdentifyController) SetOCFS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlOCFS:], v) }

// SGLS returns the SGL Support (SGLS, bytes 539:536): SGLS* bits.
func (c IdentifyController) SGLS() uint32 { return binary.LittleEndian.Uint32(c[idctrlSGLS:]) }

// SetSGLS sets the SGL Support (SGLS).
func (c IdentifyController) SetSGLS(v uint32) { binary.LittleEndian.PutUint32(c[idctrlSGLS:], v) }

// MNAN returns the Maximum Number of Allowed Namespaces (MNAN, bytes 543:540).
func (c IdentifyController) MNAN() uint32 { return binary.LittleEndian.Uint32(c[idctrlMNAN:]) }

// SetMNAN sets the Maximum Number of Allowed Namespaces (MNAN).
func (c IdentifyController) SetMNAN(v uint32) { binary.LittleEndian.PutUint32(c[idctrlMNAN:], v) }

// MAXDNA returns the Maximum Domain Namespace Attachments (MAXDNA, bytes 559:544).
func (c IdentifyController) MAXDNA() Uint128 { return getUint128(c[idctrlMAXDNA:]) }

// SetMAXDNA sets the Maximum Domain Namespace Attachments (MAXDNA).
func (c IdentifyController) SetMAXDNA(v Uint128) { putUint128(c[idctrlMAXDNA:], v) }

// MAXCNA returns the Maximum I/O Controller Namespace Attachments (MAXCNA, bytes 563:560).
func (c IdentifyController) MAXCNA() uint32 { return binary.LittleEndian.Uint32(c[idctrlMAXCNA:]) }

// SetMAXCNA sets the Maximum I/O Controller Namespace Attachments (MAXCNA).
func (c IdentifyController) SetMAXCNA(v uint32) { binary.LittleEndian.PutUint32(c[idctrlMAXCNA:], v) }

// SUBNQN returns the NVM Subsystem NVMe Qualified Name (SUBNQN, bytes 1023:768) up to its first NUL byte.
func (c IdentifyController) SUBNQN() string { return getCString(c[idctrlSUBNQN : idctrlSUBNQN+256]) }

// SetSUBNQN sets the NVM Subsystem NVMe Qualified Name (SUBNQN): at most 255 bytes, NUL-padded.
func (c IdentifyController) SetSUBNQN(s string) error {
	return putCString(c[idctrlSUBNQN:idctrlSUBNQN+256], "SUBNQN", s)
}

// IOCCSZ returns the I/O Queue Command Capsule Supported Size in 16-byte units (IOCCSZ, bytes 1795:1792): 64-byte SQE plus in-capsule data.
func (c IdentifyController) IOCCSZ() uint32 { return binary.LittleEndian.Uint32(c[idctrlIOCCSZ:]) }

// SetIOCCSZ sets the I/O Queue Command Capsule Supported Size in 16-byte units (IOCCSZ).
func (c IdentifyController) SetIOCCSZ(v uint32) { binary.LittleEndian.PutUint32(c[idctrlIOCCSZ:], v) }

// IORCSZ returns the I/O Queue Response Capsule Supported Size in 16-byte units (IORCSZ, bytes 1799:1796).
func (c IdentifyController) IORCSZ() uint32 { return binary.LittleEndian.Uint32(c[idctrlIORCSZ:]) }

// SetIORCSZ sets the I/O Queue Response Capsule Supported Size in 16-byte units (IORCSZ).
func (c IdentifyController) SetIORCSZ(v uint32) { binary.LittleEndian.PutUint32(c[idctrlIORCSZ:], v) }

// ICDOFF returns the In Capsule Data Offset in 16-byte units after the end of the SQE (ICDOFF, bytes 1801:1800).
func (c IdentifyController) ICDOFF() uint16 { return binary.LittleEndian.Uint16(c[idctrlICDOFF:]) }

// SetICDOFF sets the In Capsule Data Offset in 16-byte units after the end of the SQE (ICDOFF).
func (c IdentifyController) SetICDOFF(v uint16) { binary.LittleEndian.PutUint16(c[idctrlICDOFF:], v) }

// FCATT returns the Fabrics Controller Attributes (FCATT, byte 1802): CTRATTR in Linux; bit 0: static controller model.
func (c IdentifyController) FCATT() uint8 { return c[idctrlFCATT] }

// SetFCATT sets the Fabrics Controller Attributes (FCATT).
func (c IdentifyController) SetFCATT(v uint8) { c[idctrlFCATT] = v }

// MSDBD returns the Maximum SGL Data Block Descriptors in a command (MSDBD, byte 1803): 0: no limit.
func (c IdentifyController) MSDBD() uint8 { return c[idctrlMSDBD] }

// SetMSDBD sets the Maximum SGL Data Block Descriptors in a command (MSDBD).
func (c IdentifyController) SetMSDBD(v uint8) { c[idctrlMSDBD] = v }

// OFCS returns the Optional Fabric Commands Support (OFCS, bytes 1805:1804): bit 0: Disconnect.
func (c IdentifyController) OFCS() uint16 { return binary.LittleEndian.Uint16(c[idctrlOFCS:]) }

// SetOFCS sets the Optional Fabric Commands Support (OFCS).
func (c IdentifyController) SetOFCS(v uint16) { binary.LittleEndian.PutUint16(c[idctrlOFCS:], v) }

// Bytes 3071:2048 hold 32 power state descriptors of 32 bytes.
const (
	idctrlPSD      = 2048
	powerStateSize = 32
	numPowerStates = 32
	idctrlVS       = 3072
)

// PowerState returns a view of power state descriptor i (0 to 31), or nil
// for another index.
func (c IdentifyController) PowerState(i int) PowerStateDescriptor {
	if i < 0 || i >= numPowerStates {
		return nil
	}
	off := idctrlPSD + i*powerStateSize
	return PowerStateDescriptor(c[off : off+powerStateSize : off+powerStateSize])
}

// VendorSpecific returns the vendor specific bytes 4095:3072.
func (c IdentifyController) VendorSpecific() []byte {
	return c[idctrlVS:IdentifyDataSize:IdentifyDataSize]
}

// MDTSBytes returns the maximum data transfer size in bytes for a minimum
// memory page size (CAP.MPSMIN; 4096 for fabrics controllers), or 0 when
// MDTS is 0 (no limit) or too large to represent.
func (c IdentifyController) MDTSBytes(minPageSize uint64) uint64 {
	m := c.MDTS()
	if m == 0 || m >= 52 {
		return 0
	}
	return minPageSize << m
}

// PowerStateDescriptor is a view of one 32-byte power state descriptor of
// Identify Controller (Linux struct nvme_id_power_state).
type PowerStateDescriptor []byte

// MP returns the Maximum Power (bytes 1:0) in units of 0.01 W (0.0001 W when
// MXPS is set).
func (p PowerStateDescriptor) MP() uint16 { return binary.LittleEndian.Uint16(p) }

// SetMP sets the Maximum Power.
func (p PowerStateDescriptor) SetMP(v uint16) { binary.LittleEndian.PutUint16(p, v) }

// Flags returns byte 3: bit 0 MXPS (max power scale 0.0001 W), bit 1 NOPS
// (non-operational state).
func (p PowerStateDescriptor) Flags() uint8 { return p[3] }

// SetFlags sets byte 3 (MXPS, NOPS).
func (p PowerStateDescriptor) SetFlags(v uint8) { p[3] = v }

// ENLAT returns the Entry Latency in microseconds (bytes 7:4).
func (p PowerStateDescriptor) ENLAT() uint32 { return binary.LittleEndian.Uint32(p[4:]) }

// SetENLAT sets the Entry Latency in microseconds.
func (p PowerStateDescriptor) SetENLAT(v uint32) { binary.LittleEndian.PutUint32(p[4:], v) }

// EXLAT returns the Exit Latency in microseconds (bytes 11:8).
func (p PowerStateDescriptor) EXLAT() uint32 { return binary.LittleEndian.Uint32(p[8:]) }

// SetEXLAT sets the Exit Latency in microseconds.
func (p PowerStateDescriptor) SetEXLAT(v uint32) { binary.LittleEndian.PutUint32(p[8:], v) }

// RRT returns the Relative Read Throughput (byte 12 bits 4:0).
func (p PowerStateDescriptor) RRT() uint8 { return p[12] & 0x1f }

// SetRRT sets the Relative Read Throughput.
func (p PowerStateDescriptor) SetRRT(v uint8) { p[12] = p[12]&^0x1f | v&0x1f }

// RRL returns the Relative Read Latency (byte 13 bits 4:0).
func (p PowerStateDescriptor) RRL() uint8 { return p[13] & 0x1f }

// SetRRL sets the Relative Read Latency.
func (p PowerStateDescriptor) SetRRL(v uint8) { p[13] = p[13]&^0x1f | v&0x1f }

// RWT returns the Relative Write Throughput (byte 14 bits 4:0).
func (p PowerStateDescriptor) RWT() uint8 { return p[14] & 0x1f }

// SetRWT sets the Relative Write Throughput.
func (p PowerStateDescriptor) SetRWT(v uint8) { p[14] = p[14]&^0x1f | v&0x1f }

// RWL returns the Relative Write Latency (byte 15 bits 4:0).
func (p PowerStateDescriptor) RWL() uint8 { return p[15] & 0x1f }

// SetRWL sets the Relative Write Latency.
func (p PowerStateDescriptor) SetRWL(v uint8) { p[15] = p[15]&^0x1f | v&0x1f }

// IDLP returns the Idle Power (bytes 17:16) in the units IPS gives.
func (p PowerStateDescriptor) IDLP() uint16 { return binary.LittleEndian.Uint16(p[16:]) }

// SetIDLP sets the Idle Power.
func (p PowerStateDescriptor) SetIDLP(v uint16) { binary.LittleEndian.PutUint16(p[16:], v) }

// IPS returns the Idle Power Scale (byte 18 bits 7:6).
func (p PowerStateDescriptor) IPS() uint8 { return p[18] >> 6 }

// SetIPS sets the Idle Power Scale.
func (p PowerStateDescriptor) SetIPS(v uint8) { p[18] = p[18]&0x3f | v<<6 }

// ACTP returns the Active Power (bytes 21:20) in the units APS gives.
func (p PowerStateDescriptor) ACTP() uint16 { return binary.LittleEndian.Uint16(p[20:]) }

// SetACTP sets the Active Power.
func (p PowerStateDescriptor) SetACTP(v uint16) { binary.LittleEndian.PutUint16(p[20:], v) }

// APW returns the Active Power Workload (byte 22 bits 2:0).
func (p PowerStateDescriptor) APW() uint8 { return p[22] & 0x7 }

// SetAPW sets the Active Power Workload.
func (p PowerStateDescriptor) SetAPW(v uint8) { p[22] = p[22]&^0x7 | v&0x7 }

// APS returns the Active Power Scale (byte 22 bits 7:6).
func (p PowerStateDescriptor) APS() uint8 { return p[22] >> 6 }

// SetAPS sets the Active Power Scale.
func (p PowerStateDescriptor) SetAPS(v uint8) { p[22] = p[22]&0x3f | v<<6 }
