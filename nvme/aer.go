package nvme

import "fmt"

// AsyncEventType is the Asynchronous Event Type of an Asynchronous Event
// Request completion (DW0 bits 2:0).
type AsyncEventType uint8

// Asynchronous Event Types (NVMe Base 2.0, figure "Asynchronous Event
// Request – Completion Queue Entry Dword 0"; Linux NVME_AER_*).
const (
	AsyncEventError          AsyncEventType = 0 // Error status
	AsyncEventSMART          AsyncEventType = 1 // SMART / Health status
	AsyncEventNotice         AsyncEventType = 2 // Notice
	AsyncEventImmediate      AsyncEventType = 3 // Immediate (one-shot)
	AsyncEventIOCommandSet   AsyncEventType = 6 // I/O Command Specific status
	AsyncEventVendorSpecific AsyncEventType = 7 // Vendor specific
)

// String returns the type name.
func (t AsyncEventType) String() string {
	switch t {
	case AsyncEventError:
		return "Error"
	case AsyncEventSMART:
		return "SMART / Health"
	case AsyncEventNotice:
		return "Notice"
	case AsyncEventImmediate:
		return "Immediate"
	case AsyncEventIOCommandSet:
		return "I/O Command Specific"
	case AsyncEventVendorSpecific:
		return "Vendor Specific"
	}
	return fmt.Sprintf("AsyncEventType(%d)", uint8(t))
}

// Asynchronous Event Information values of the Notice type.
const (
	AsyncNoticeNamespaceChanged       = 0x00 // Namespace Attribute Changed (log 04h)
	AsyncNoticeFirmwareActivation     = 0x01 // Firmware Activation Starting (log 03h)
	AsyncNoticeTelemetryLogChanged    = 0x02 // Telemetry Log Changed (log 08h)
	AsyncNoticeANAChange              = 0x03 // Asymmetric Namespace Access Change (log 0Ch)
	AsyncNoticePredictableLatency     = 0x04 // Predictable Latency Event Aggregate Log Change (log 0Bh)
	AsyncNoticeLBAStatus              = 0x05 // LBA Status Information Alert (log 0Eh)
	AsyncNoticeEnduranceGroupEvent    = 0x06 // Endurance Group Event Aggregate Log Page Change (log 0Fh)
	AsyncNoticeDiscoveryLogPageChange = 0xf0 // Discovery Log Page Change (log 70h)
)

// Asynchronous Event Information values of the SMART / Health type.
const (
	AsyncSMARTReliability          = 0x00 // NVM subsystem reliability
	AsyncSMARTTemperatureThreshold = 0x01
	AsyncSMARTSpareBelowThreshold  = 0x02
)

// AsyncEvent is the DW0 of an Asynchronous Event Request completion: bits
// 2:0 the event type, 15:8 the event information, 23:16 the log page the
// host reads (with RAE cleared) to clear the event.
type AsyncEvent uint32

// MakeAsyncEvent returns the completion DW0 of an event.
func MakeAsyncEvent(t AsyncEventType, info uint8, lid LogPageID) AsyncEvent {
	return AsyncEvent(uint32(t&0x7) | uint32(info)<<8 | uint32(lid)<<16)
}

// Events the target side of NVMe over Fabrics reports (MakeAsyncEvent of a
// notice, its information and log page).
const (
	// AENNamespaceChanged: namespace attributes changed, or namespaces
	// added or removed; the host reads the Changed Namespace List.
	AENNamespaceChanged = AsyncEvent(AsyncEventNotice) | AsyncNoticeNamespaceChanged<<8 | AsyncEvent(LIDChangedNSList)<<16
	// AENFirmwareActivation: firmware activation starting.
	AENFirmwareActivation = AsyncEvent(AsyncEventNotice) | AsyncNoticeFirmwareActivation<<8 | AsyncEvent(LIDFirmwareSlot)<<16
	// AENANAChange: the ANA state of a group changed; the host reads the
	// ANA log page.
	AENANAChange = AsyncEvent(AsyncEventNotice) | AsyncNoticeANAChange<<8 | AsyncEvent(LIDANA)<<16
	// AENDiscoveryChange: the discovery log page changed (discovery
	// controllers).
	AENDiscoveryChange = AsyncEvent(AsyncEventNotice) | AsyncNoticeDiscoveryLogPageChange<<8 | AsyncEvent(LIDDiscovery)<<16
)

// Type returns the event type (bits 2:0).
func (e AsyncEvent) Type() AsyncEventType { return AsyncEventType(e & 0x7) }

// Info returns the event information (bits 15:8).
func (e AsyncEvent) Info() uint8 { return uint8(e >> 8) }

// LID returns the log page identifier (bits 23:16).
func (e AsyncEvent) LID() LogPageID { return LogPageID(e >> 16) }

// String describes the event, e.g. "Notice info 0x00 log 0x04".
func (e AsyncEvent) String() string {
	return fmt.Sprintf("%v info 0x%02x log 0x%02x (%v)", e.Type(), e.Info(), uint8(e.LID()), e.LID())
}
