package nvme

import (
	"fmt"
	"math"
	"time"
)

// FeatureID is a Feature Identifier (FID) of Set Features and Get Features.
type FeatureID uint8

// Feature Identifiers (NVMe Base 2.0, figure "Feature Identifiers"; Linux
// NVME_FEAT_*).
const (
	FeatArbitration              FeatureID = 0x01
	FeatPowerManagement          FeatureID = 0x02
	FeatLBARangeType             FeatureID = 0x03
	FeatTemperatureThreshold     FeatureID = 0x04
	FeatErrorRecovery            FeatureID = 0x05
	FeatVolatileWriteCache       FeatureID = 0x06
	FeatNumberOfQueues           FeatureID = 0x07
	FeatInterruptCoalescing      FeatureID = 0x08
	FeatInterruptVectorConfig    FeatureID = 0x09
	FeatWriteAtomicityNormal     FeatureID = 0x0a
	FeatAsyncEventConfig         FeatureID = 0x0b
	FeatAutonomousPowerState     FeatureID = 0x0c
	FeatHostMemoryBuffer         FeatureID = 0x0d
	FeatTimestamp                FeatureID = 0x0e
	FeatKeepAliveTimer           FeatureID = 0x0f
	FeatHostThermalManagement    FeatureID = 0x10
	FeatNonOperationalPowerState FeatureID = 0x11
	FeatReadRecoveryLevel        FeatureID = 0x12
	FeatPLMConfig                FeatureID = 0x13
	FeatPLMWindow                FeatureID = 0x14
	FeatLBAStatusAttributes      FeatureID = 0x15
	FeatHostBehaviorSupport      FeatureID = 0x16
	FeatSanitizeConfig           FeatureID = 0x17
	FeatEnduranceGroupEvent      FeatureID = 0x18
	FeatIOCommandSetProfile      FeatureID = 0x19
	FeatSoftwareProgressMarker   FeatureID = 0x80
	FeatHostIdentifier           FeatureID = 0x81
	FeatReservationNotifMask     FeatureID = 0x82
	FeatReservationPersistence   FeatureID = 0x83
	FeatNamespaceWriteProtect    FeatureID = 0x84
)

var featureNames = map[FeatureID]string{
	FeatArbitration:              "Arbitration",
	FeatPowerManagement:          "Power Management",
	FeatLBARangeType:             "LBA Range Type",
	FeatTemperatureThreshold:     "Temperature Threshold",
	FeatErrorRecovery:            "Error Recovery",
	FeatVolatileWriteCache:       "Volatile Write Cache",
	FeatNumberOfQueues:           "Number of Queues",
	FeatInterruptCoalescing:      "Interrupt Coalescing",
	FeatInterruptVectorConfig:    "Interrupt Vector Configuration",
	FeatWriteAtomicityNormal:     "Write Atomicity Normal",
	FeatAsyncEventConfig:         "Asynchronous Event Configuration",
	FeatAutonomousPowerState:     "Autonomous Power State Transition",
	FeatHostMemoryBuffer:         "Host Memory Buffer",
	FeatTimestamp:                "Timestamp",
	FeatKeepAliveTimer:           "Keep Alive Timer",
	FeatHostThermalManagement:    "Host Controlled Thermal Management",
	FeatNonOperationalPowerState: "Non-Operational Power State Config",
	FeatReadRecoveryLevel:        "Read Recovery Level Config",
	FeatPLMConfig:                "Predictable Latency Mode Config",
	FeatPLMWindow:                "Predictable Latency Mode Window",
	FeatLBAStatusAttributes:      "LBA Status Information Attributes",
	FeatHostBehaviorSupport:      "Host Behavior Support",
	FeatSanitizeConfig:           "Sanitize Config",
	FeatEnduranceGroupEvent:      "Endurance Group Event Configuration",
	FeatIOCommandSetProfile:      "I/O Command Set Profile",
	FeatSoftwareProgressMarker:   "Software Progress Marker",
	FeatHostIdentifier:           "Host Identifier",
	FeatReservationNotifMask:     "Reservation Notification Mask",
	FeatReservationPersistence:   "Reservation Persistence",
	FeatNamespaceWriteProtect:    "Namespace Write Protection Config",
}

// String returns the feature name, e.g. "Number of Queues".
func (f FeatureID) String() string {
	if n, ok := featureNames[f]; ok {
		return n
	}
	if f >= 0xc0 {
		return fmt.Sprintf("Vendor Specific Feature 0x%02x", uint8(f))
	}
	return fmt.Sprintf("Feature 0x%02x", uint8(f))
}

// FeatureSelect is the Select field (SEL) of Get Features.
type FeatureSelect uint8

// Get Features Select values.
const (
	SelectCurrent               FeatureSelect = 0
	SelectDefault               FeatureSelect = 1
	SelectSaved                 FeatureSelect = 2
	SelectSupportedCapabilities FeatureSelect = 3 // DW0: bit 0 saveable, 1 namespace specific, 2 changeable
)

// Capabilities returned in DW0 for SelectSupportedCapabilities.
const (
	FeatureCapSaveable          = 1 << 0
	FeatureCapNamespaceSpecific = 1 << 1
	FeatureCapChangeable        = 1 << 2
)

// MaxQueueCount is the largest number of I/O submission or completion
// queues the Number of Queues feature can request or grant (65535; the 0's
// based value FFFFh is invalid).
const MaxQueueCount = 0xffff

// MakeNumQueues returns the Number of Queues value for nsq I/O submission
// and ncq I/O completion queues: Set Features CDW11 (NSQR, NCQR) or the
// completion's DW0 (NSQA, NCQA), both 0's based, NSQ in bits 15:0 and NCQ in
// bits 31:16. Counts are clamped to 1..MaxQueueCount.
func MakeNumQueues(nsq, ncq uint32) uint32 {
	clamp := func(n uint32) uint32 { return min(max(n, 1), MaxQueueCount) - 1 }
	return clamp(ncq)<<16 | clamp(nsq)
}

// NumQueues returns the number of I/O submission and completion queues a
// Number of Queues value asks for or grants (the fields plus one).
func NumQueues(v uint32) (nsq, ncq uint32) { return v&0xffff + 1, v>>16 + 1 }

// KATODuration returns the duration of a Keep Alive Timeout value (Set
// Features Keep Alive Timer CDW11, or the Connect command's KATO): a number
// of milliseconds, 0 meaning keep alive disabled.
func KATODuration(kato uint32) time.Duration { return time.Duration(kato) * time.Millisecond }

// KATOFromDuration returns the Keep Alive Timeout value in milliseconds for
// d, rounded up, saturated at the largest 32-bit value; 0 for d <= 0.
func KATOFromDuration(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(ms)
}

// Asynchronous Event Configuration bits (Set Features FID 0Bh CDW11). The
// notice bits sit at the same positions in Identify Controller OAES.
const (
	AECSMARTMask              = 0xff    // SMART / Health critical warnings (SMARTWarning* bits)
	AECNamespaceAttribute     = 1 << 8  // Namespace Attribute Notices
	AECFirmwareActivation     = 1 << 9  // Firmware Activation Notices
	AECTelemetryLog           = 1 << 10 // Telemetry Log Notices
	AECANAChange              = 1 << 11 // Asymmetric Namespace Access Change Notices
	AECPredictableLatency     = 1 << 12 // Predictable Latency Event Aggregate Log Change Notices
	AECLBAStatus              = 1 << 13 // LBA Status Information Notices
	AECEnduranceGroupEvent    = 1 << 14 // Endurance Group Event Aggregate Log Change Notices
	AECNormalShutdown         = 1 << 15 // Normal NVM Subsystem Shutdown
	AECZoneDescriptorChanged  = 1 << 27 // Zone Descriptor Changed Notices
	AECDiscoveryLogPageChange = 1 << 31 // Discovery Log Page Change Notification (fabrics)
)

// Volatile Write Cache feature (FID 06h) CDW11 bits.
const (
	VWCEnable = 1 << 0 // WCE: volatile write cache enabled
)

// Host Identifier feature (FID 81h) CDW11 bits.
const (
	HostIDExtended = 1 << 0 // EXHID: 128-bit host identifier (NVMe over Fabrics requires it)
)

// Arbitration feature (FID 01h) CDW11 fields.
type Arbitration struct {
	AB  uint8 // Arbitration Burst as a power of two (7: no limit)
	LPW uint8 // Low Priority Weight (0's based)
	MPW uint8 // Medium Priority Weight (0's based)
	HPW uint8 // High Priority Weight (0's based)
}

// Value returns the CDW11 of the Arbitration feature.
func (a Arbitration) Value() uint32 {
	return uint32(a.AB&0x7) | uint32(a.LPW)<<8 | uint32(a.MPW)<<16 | uint32(a.HPW)<<24
}

// ParseArbitration returns the fields of an Arbitration feature value.
func ParseArbitration(v uint32) Arbitration {
	return Arbitration{AB: uint8(v & 0x7), LPW: uint8(v >> 8), MPW: uint8(v >> 16), HPW: uint8(v >> 24)}
}

// TemperatureThreshold feature (FID 04h) CDW11 fields.
type TemperatureThreshold struct {
	TMPTH  uint16 // threshold in kelvins
	TMPSEL uint8  // sensor: 0 composite, 1-8 temperature sensors, 15 all
	THSEL  uint8  // 0 over temperature threshold, 1 under
}

// Value returns the CDW11 of the Temperature Threshold feature.
func (t TemperatureThreshold) Value() uint32 {
	return uint32(t.TMPTH) | uint32(t.TMPSEL&0xf)<<16 | uint32(t.THSEL&0x3)<<20
}

// ParseTemperatureThreshold returns the fields of a Temperature Threshold
// feature value.
func ParseTemperatureThreshold(v uint32) TemperatureThreshold {
	return TemperatureThreshold{TMPTH: uint16(v), TMPSEL: uint8(v >> 16 & 0xf), THSEL: uint8(v >> 20 & 0x3)}
}

// PowerManagement feature (FID 02h) CDW11 fields: PS (bits 4:0) the power
// state, WH (bits 7:5) the workload hint.
func PowerManagement(ps, wh uint8) uint32 { return uint32(ps&0x1f) | uint32(wh&0x7)<<5 }
