package fabrics

import (
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// Controller property offsets (NVMe base 2.0 figure 35, the registers a
// Fabrics controller exposes as properties; Linux NVME_REG_*).
const (
	PropCAP   = 0x00 // Controller Capabilities, 8 bytes
	PropVS    = 0x08 // Version, 4 bytes
	PropINTMS = 0x0c // Interrupt Mask Set (PCIe only; reserved on Fabrics)
	PropINTMC = 0x10 // Interrupt Mask Clear (PCIe only; reserved on Fabrics)
	PropCC    = 0x14 // Controller Configuration, 4 bytes
	PropCSTS  = 0x1c // Controller Status, 4 bytes
	PropNSSR  = 0x20 // NVM Subsystem Reset, 4 bytes
)

// PropertyName returns the register's short name ("CAP", "CC", …) or a
// hex offset.
func PropertyName(offset uint32) string {
	switch offset {
	case PropCAP:
		return "CAP"
	case PropVS:
		return "VS"
	case PropCC:
		return "CC"
	case PropCSTS:
		return "CSTS"
	case PropNSSR:
		return "NSSR"
	}
	return fmt.Sprintf("property %#x", offset)
}

// PropertySize returns the size in bytes of the property at offset: 8 for
// CAP, 4 for VS, CC, CSTS and NSSR. Other offsets are an error (a Fabrics
// controller answers Property Get/Set of them with Invalid Field in
// Command).
func PropertySize(offset uint32) (int, error) {
	switch offset {
	case PropCAP:
		return 8, nil
	case PropVS, PropCC, PropCSTS, PropNSSR:
		return 4, nil
	}
	return 0, statusErr(nvme.StatusInvalidField, "unknown property offset %#x", offset)
}

// NSSRReset is the value written to NSSR to reset the NVM subsystem ("NVMe").
const NSSRReset = 0x4e564d65

// CAP is the Controller Capabilities property.
type CAP uint64

// CAP fields, as bit positions and widths.
const (
	capMQESShift   = 0  // 16 bits
	capCQRBit      = 16 // 1
	capAMSShift    = 17 // 2
	capTOShift     = 24 // 8
	capDSTRDShift  = 32 // 4
	capNSSRSBit    = 36 // 1
	capCSSShift    = 37 // 8
	capBPSBit      = 45 // 1
	capMPSMINShift = 48 // 4
	capMPSMAXShift = 52 // 4
	capCMBSBit     = 57 // 1
)

// CAP.CSS bits: command sets the controller supports.
const (
	CAPCSSNVM       = 1 << 0 // NVM command set
	CAPCSSIOCS      = 1 << 6 // one or more I/O command sets (CC.CSS = 6 selects them)
	CAPCSSNoIOCS    = 1 << 7 // no I/O command set (admin only: discovery controllers)
	CAPAMSWRRUrgent = 1 << 0 // CAP.AMS: weighted round robin with urgent priority class
	CAPAMSVendor    = 1 << 1 // CAP.AMS: vendor specific
)

func (c CAP) bits(shift, width uint) uint64 { return uint64(c) >> shift & (1<<width - 1) }

// MQES returns Maximum Queue Entries Supported, 0's based.
func (c CAP) MQES() uint16 { return uint16(c.bits(capMQESShift, 16)) }

// CQR reports Contiguous Queues Required (always set on Fabrics).
func (c CAP) CQR() bool { return c.bits(capCQRBit, 1) != 0 }

// AMS returns the Arbitration Mechanisms Supported bits.
func (c CAP) AMS() uint8 { return uint8(c.bits(capAMSShift, 2)) }

// TO returns the timeout field: the worst-case time to wait for CSTS.RDY
// to change, in 500 ms units.
func (c CAP) TO() uint8 { return uint8(c.bits(capTOShift, 8)) }

// Timeout returns TO as a duration.
func (c CAP) Timeout() time.Duration { return time.Duration(c.TO()) * 500 * time.Millisecond }

// DSTRD returns the doorbell stride exponent (0 on Fabrics).
func (c CAP) DSTRD() uint8 { return uint8(c.bits(capDSTRDShift, 4)) }

// NSSRS reports NVM Subsystem Reset Supported.
func (c CAP) NSSRS() bool { return c.bits(capNSSRSBit, 1) != 0 }

// CSS returns the Command Sets Supported bits (CAPCSS*).
func (c CAP) CSS() uint8 { return uint8(c.bits(capCSSShift, 8)) }

// BPS reports Boot Partition Support.
func (c CAP) BPS() bool { return c.bits(capBPSBit, 1) != 0 }

// MPSMIN returns the minimum memory page size exponent: 2^(12+MPSMIN) bytes.
func (c CAP) MPSMIN() uint8 { return uint8(c.bits(capMPSMINShift, 4)) }

// MPSMAX returns the maximum memory page size exponent: 2^(12+MPSMAX) bytes.
func (c CAP) MPSMAX() uint8 { return uint8(c.bits(capMPSMAXShift, 4)) }

// CMBS reports Controller Memory Buffer Supported.
func (c CAP) CMBS() bool { return c.bits(capCMBSBit, 1) != 0 }

// CAPFields are the CAP fields a Fabrics controller sets.
type CAPFields struct {
	MQES   uint16 // 0's based
	CQR    bool
	AMS    uint8
	TO     uint8 // 500 ms units
	DSTRD  uint8
	NSSRS  bool
	CSS    uint8
	BPS    bool
	MPSMIN uint8
	MPSMAX uint8
	CMBS   bool
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// MakeCAP assembles a CAP value.
func MakeCAP(f CAPFields) CAP {
	return CAP(uint64(f.MQES)<<capMQESShift |
		b2u(f.CQR)<<capCQRBit |
		uint64(f.AMS&3)<<capAMSShift |
		uint64(f.TO)<<capTOShift |
		uint64(f.DSTRD&0xf)<<capDSTRDShift |
		b2u(f.NSSRS)<<capNSSRSBit |
		uint64(f.CSS)<<capCSSShift |
		b2u(f.BPS)<<capBPSBit |
		uint64(f.MPSMIN&0xf)<<capMPSMINShift |
		uint64(f.MPSMAX&0xf)<<capMPSMAXShift |
		b2u(f.CMBS)<<capCMBSBit)
}

// Fields returns the CAP fields.
func (c CAP) Fields() CAPFields {
	return CAPFields{MQES: c.MQES(), CQR: c.CQR(), AMS: c.AMS(), TO: c.TO(), DSTRD: c.DSTRD(),
		NSSRS: c.NSSRS(), CSS: c.CSS(), BPS: c.BPS(), MPSMIN: c.MPSMIN(), MPSMAX: c.MPSMAX(), CMBS: c.CMBS()}
}

// VS is the Version property: major in bits 31:16, minor 15:8, tertiary 7:0.
type VS uint32

// MakeVS returns the version major.minor.tertiary (Linux NVME_VS).
func MakeVS(major uint16, minor, tertiary uint8) VS {
	return VS(uint32(major)<<16 | uint32(minor)<<8 | uint32(tertiary))
}

// NVMe versions.
var (
	VS13 = MakeVS(1, 3, 0)
	VS14 = MakeVS(1, 4, 0)
	VS20 = MakeVS(2, 0, 0)
)

// Major returns the major version.
func (v VS) Major() uint16 { return uint16(v >> 16) }

// Minor returns the minor version.
func (v VS) Minor() uint8 { return uint8(v >> 8) }

// Tertiary returns the tertiary version.
func (v VS) Tertiary() uint8 { return uint8(v) }

// String formats the version as "1.3" or "1.4.1".
func (v VS) String() string {
	if v.Tertiary() != 0 {
		return fmt.Sprintf("%d.%d.%d", v.Major(), v.Minor(), v.Tertiary())
	}
	return fmt.Sprintf("%d.%d", v.Major(), v.Minor())
}

// CC is the Controller Configuration property.
type CC uint32

// CC fields.
const (
	ccENBit       = 0  // 1
	ccCSSShift    = 4  // 3
	ccMPSShift    = 7  // 4
	ccAMSShift    = 11 // 3
	ccSHNShift    = 14 // 2
	ccIOSQESShift = 16 // 4
	ccIOCQESShift = 20 // 4
)

// CC.SHN shutdown notifications.
const (
	SHNNone   = 0
	SHNNormal = 1
	SHNAbrupt = 2
)

// CC.CSS values.
const (
	CCCSSNVM       = 0 // NVM command set
	CCCSSAllIOCS   = 6 // all supported I/O command sets
	CCCSSAdminOnly = 7 // admin command set only
)

func (c CC) bits(shift, width uint) uint32 { return uint32(c) >> shift & (1<<width - 1) }

func (c CC) with(shift, width uint, v uint32) CC {
	m := uint32(1<<width-1) << shift
	return CC(uint32(c)&^m | v<<shift&m)
}

// EN reports Enable.
func (c CC) EN() bool { return c.bits(ccENBit, 1) != 0 }

// CSS returns the I/O Command Set Selected.
func (c CC) CSS() uint8 { return uint8(c.bits(ccCSSShift, 3)) }

// MPS returns the memory page size exponent: 2^(12+MPS) bytes.
func (c CC) MPS() uint8 { return uint8(c.bits(ccMPSShift, 4)) }

// AMS returns the Arbitration Mechanism Selected.
func (c CC) AMS() uint8 { return uint8(c.bits(ccAMSShift, 3)) }

// SHN returns the Shutdown Notification (SHNNone, SHNNormal, SHNAbrupt).
func (c CC) SHN() uint8 { return uint8(c.bits(ccSHNShift, 2)) }

// IOSQES returns the I/O submission queue entry size exponent (6: 64 bytes).
func (c CC) IOSQES() uint8 { return uint8(c.bits(ccIOSQESShift, 4)) }

// IOCQES returns the I/O completion queue entry size exponent (4: 16 bytes).
func (c CC) IOCQES() uint8 { return uint8(c.bits(ccIOCQESShift, 4)) }

// WithEN returns c with Enable set to en.
func (c CC) WithEN(en bool) CC { return c.with(ccENBit, 1, uint32(b2u(en))) }

// WithCSS returns c with CSS set.
func (c CC) WithCSS(v uint8) CC { return c.with(ccCSSShift, 3, uint32(v)) }

// WithMPS returns c with MPS set.
func (c CC) WithMPS(v uint8) CC { return c.with(ccMPSShift, 4, uint32(v)) }

// WithAMS returns c with AMS set.
func (c CC) WithAMS(v uint8) CC { return c.with(ccAMSShift, 3, uint32(v)) }

// WithSHN returns c with SHN set.
func (c CC) WithSHN(v uint8) CC { return c.with(ccSHNShift, 2, uint32(v)) }

// WithIOSQES returns c with IOSQES set.
func (c CC) WithIOSQES(v uint8) CC { return c.with(ccIOSQESShift, 4, uint32(v)) }

// WithIOCQES returns c with IOCQES set.
func (c CC) WithIOCQES(v uint8) CC { return c.with(ccIOCQESShift, 4, uint32(v)) }

// CSTS is the Controller Status property.
type CSTS uint32

// CSTS fields.
const (
	cstsRDYBit         = 0                 // 1
	cstsCFSBit         = 1                 // 1
	cstsSHSTShift      = 2                 // 2
	cstsNSSROBit       = 4                 // 1
	cstsPPBit          = 5                 // 1
	CSTSRDY       CSTS = 1 << cstsRDYBit   // Ready
	CSTSCFS       CSTS = 1 << cstsCFSBit   // Controller Fatal Status
	CSTSNSSRO     CSTS = 1 << cstsNSSROBit // NVM Subsystem Reset Occurred
	CSTSPP        CSTS = 1 << cstsPPBit    // Processing Paused
)

// CSTS.SHST shutdown status values.
const (
	SHSTNormal    = 0 // normal operation
	SHSTOccurring = 1 // shutdown processing occurring
	SHSTComplete  = 2 // shutdown processing complete
)

// RDY reports Ready.
func (s CSTS) RDY() bool { return s&CSTSRDY != 0 }

// CFS reports Controller Fatal Status.
func (s CSTS) CFS() bool { return s&CSTSCFS != 0 }

// SHST returns the Shutdown Status.
func (s CSTS) SHST() uint8 { return uint8(s>>cstsSHSTShift) & 3 }

// NSSRO reports NVM Subsystem Reset Occurred.
func (s CSTS) NSSRO() bool { return s&CSTSNSSRO != 0 }

// PP reports Processing Paused.
func (s CSTS) PP() bool { return s&CSTSPP != 0 }

// WithRDY returns s with Ready set to v.
func (s CSTS) WithRDY(v bool) CSTS { return s.with(CSTSRDY, v) }

// WithCFS returns s with Controller Fatal Status set to v.
func (s CSTS) WithCFS(v bool) CSTS { return s.with(CSTSCFS, v) }

// WithNSSRO returns s with NVM Subsystem Reset Occurred set to v.
func (s CSTS) WithNSSRO(v bool) CSTS { return s.with(CSTSNSSRO, v) }

// WithPP returns s with Processing Paused set to v.
func (s CSTS) WithPP(v bool) CSTS { return s.with(CSTSPP, v) }

// WithSHST returns s with the Shutdown Status set.
func (s CSTS) WithSHST(v uint8) CSTS {
	return s&^(3<<cstsSHSTShift) | CSTS(v&3)<<cstsSHSTShift
}

func (s CSTS) with(bit CSTS, v bool) CSTS {
	if v {
		return s | bit
	}
	return s &^ bit
}
