package nvme

import (
	"encoding/binary"
	"fmt"
)

// LogPageID is a Log Page Identifier (LID) of Get Log Page.
type LogPageID uint8

// Log Page Identifiers (NVMe Base 2.0, figure "Log Page Identifiers"; Linux
// NVME_LOG_*).
const (
	LIDSupportedLogPages         LogPageID = 0x00
	LIDError                     LogPageID = 0x01 // Error Information
	LIDSMART                     LogPageID = 0x02 // SMART / Health Information
	LIDFirmwareSlot              LogPageID = 0x03 // Firmware Slot Information
	LIDChangedNSList             LogPageID = 0x04 // Changed Namespace List
	LIDCommandEffects            LogPageID = 0x05 // Commands Supported and Effects
	LIDDeviceSelfTest            LogPageID = 0x06
	LIDTelemetryHost             LogPageID = 0x07
	LIDTelemetryController       LogPageID = 0x08
	LIDEnduranceGroup            LogPageID = 0x09
	LIDPredictableLatencyNVMSet  LogPageID = 0x0a
	LIDPredictableLatencyEvents  LogPageID = 0x0b
	LIDANA                       LogPageID = 0x0c // Asymmetric Namespace Access
	LIDPersistentEvent           LogPageID = 0x0d
	LIDLBAStatus                 LogPageID = 0x0e
	LIDEnduranceGroupEvents      LogPageID = 0x0f
	LIDMediaUnitStatus           LogPageID = 0x10
	LIDSupportedCapacityConfig   LogPageID = 0x11
	LIDFeatureIdentifiersEffects LogPageID = 0x12
	LIDMICommandsEffects         LogPageID = 0x13
	LIDCommandFeatureLockdown    LogPageID = 0x14
	LIDBootPartition             LogPageID = 0x15
	LIDRotationalMedia           LogPageID = 0x16
	LIDDiscovery                 LogPageID = 0x70 // Discovery (NVMe over Fabrics; package fabrics)
	LIDReservationNotification   LogPageID = 0x80
	LIDSanitizeStatus            LogPageID = 0x81
)

var logPageNames = map[LogPageID]string{
	LIDSupportedLogPages:         "Supported Log Pages",
	LIDError:                     "Error Information",
	LIDSMART:                     "SMART / Health Information",
	LIDFirmwareSlot:              "Firmware Slot Information",
	LIDChangedNSList:             "Changed Namespace List",
	LIDCommandEffects:            "Commands Supported and Effects",
	LIDDeviceSelfTest:            "Device Self-test",
	LIDTelemetryHost:             "Telemetry Host-Initiated",
	LIDTelemetryController:       "Telemetry Controller-Initiated",
	LIDEnduranceGroup:            "Endurance Group Information",
	LIDPredictableLatencyNVMSet:  "Predictable Latency Per NVM Set",
	LIDPredictableLatencyEvents:  "Predictable Latency Event Aggregate",
	LIDANA:                       "Asymmetric Namespace Access",
	LIDPersistentEvent:           "Persistent Event Log",
	LIDLBAStatus:                 "LBA Status Information",
	LIDEnduranceGroupEvents:      "Endurance Group Event Aggregate",
	LIDMediaUnitStatus:           "Media Unit Status",
	LIDSupportedCapacityConfig:   "Supported Capacity Configuration List",
	LIDFeatureIdentifiersEffects: "Feature Identifiers Supported and Effects",
	LIDMICommandsEffects:         "NVMe-MI Commands Supported and Effects",
	LIDCommandFeatureLockdown:    "Command and Feature Lockdown",
	LIDBootPartition:             "Boot Partition",
	LIDRotationalMedia:           "Rotational Media Information",
	LIDDiscovery:                 "Discovery",
	LIDReservationNotification:   "Reservation Notification",
	LIDSanitizeStatus:            "Sanitize Status",
}

// String returns the log page name, e.g. "SMART / Health Information".
func (l LogPageID) String() string {
	if n, ok := logPageNames[l]; ok {
		return n
	}
	if l >= 0xc0 {
		return fmt.Sprintf("Vendor Specific Log Page 0x%02x", uint8(l))
	}
	return fmt.Sprintf("Log Page 0x%02x", uint8(l))
}

// Sizes of the fixed-size log pages.
const (
	ErrorLogEntrySize     = 64
	SMARTLogSize          = 512
	FirmwareSlotLogSize   = 512
	ChangedNSListLogSize  = 4096
	CommandEffectsLogSize = 4096
)

// ErrorLogEntry is a view of one 64-byte Error Information log entry (LID
// 01h; Linux struct nvme_error_slot). The log page is an array of them,
// newest first; ELPE+1 entries at most.
type ErrorLogEntry []byte

// ParseErrorLog returns views of the whole entries in b (a Get Log Page
// transfer may end inside an entry: the partial entry is left out).
func ParseErrorLog(b []byte) []ErrorLogEntry {
	es := make([]ErrorLogEntry, 0, len(b)/ErrorLogEntrySize)
	for off := 0; off+ErrorLogEntrySize <= len(b); off += ErrorLogEntrySize {
		es = append(es, ErrorLogEntry(b[off:off+ErrorLogEntrySize:off+ErrorLogEntrySize]))
	}
	return es
}

// Status returns the status of the failed command (StatusRaw without the
// phase tag, CRD, More and DNR).
func (e ErrorLogEntry) Status() Status { return Status(e.StatusRaw() >> 1 & 0x7ff) }

const (
	errlogErrorCount             = 0
	errlogSQID                   = 8
	errlogCID                    = 10
	errlogStatusRaw              = 12
	errlogParameterErrorLocation = 14
	errlogLBA                    = 16
	errlogNSID                   = 24
	errlogVendorSpecificInfo     = 28
	errlogTRTYPE                 = 29
	errlogCommandSpecificInfo    = 32
	errlogTransportSpecificInfo  = 40
)

// ErrorCount returns the Error Count (ErrorCount, bytes 7:0): a unique, incrementing identifier; 0 marks an invalid entry.
func (e ErrorLogEntry) ErrorCount() uint64 { return binary.LittleEndian.Uint64(e[errlogErrorCount:]) }

// SetErrorCount sets the Error Count (ErrorCount).
func (e ErrorLogEntry) SetErrorCount(v uint64) {
	binary.LittleEndian.PutUint64(e[errlogErrorCount:], v)
}

// SQID returns the Submission Queue ID of the failed command (SQID, bytes 9:8).
func (e ErrorLogEntry) SQID() uint16 { return binary.LittleEndian.Uint16(e[errlogSQID:]) }

// SetSQID sets the Submission Queue ID of the failed command (SQID).
func (e ErrorLogEntry) SetSQID(v uint16) { binary.LittleEndian.PutUint16(e[errlogSQID:], v) }

// CID returns the Command ID of the failed command (CID, bytes 11:10).
func (e ErrorLogEntry) CID() uint16 { return binary.LittleEndian.Uint16(e[errlogCID:]) }

// SetCID sets the Command ID of the failed command (CID).
func (e ErrorLogEntry) SetCID(v uint16) { binary.LittleEndian.PutUint16(e[errlogCID:], v) }

// StatusRaw returns the Status Field of the failed command's completion (StatusRaw, bytes 13:12): bit 0 the phase tag, bits 15:1 as in a CQE.
func (e ErrorLogEntry) StatusRaw() uint16 { return binary.LittleEndian.Uint16(e[errlogStatusRaw:]) }

// SetStatusRaw sets the Status Field of the failed command's completion (StatusRaw).
func (e ErrorLogEntry) SetStatusRaw(v uint16) { binary.LittleEndian.PutUint16(e[errlogStatusRaw:], v) }

// ParameterErrorLocation returns the Parameter Error Location (ParameterErrorLocation, bytes 15:14): bits 7:0 the byte, 10:8 the bit of the command that was in error.
func (e ErrorLogEntry) ParameterErrorLocation() uint16 {
	return binary.LittleEndian.Uint16(e[errlogParameterErrorLocation:])
}

// SetParameterErrorLocation sets the Parameter Error Location (ParameterErrorLocation).
func (e ErrorLogEntry) SetParameterErrorLocation(v uint16) {
	binary.LittleEndian.PutUint16(e[errlogParameterErrorLocation:], v)
}

// LBA returns the first LBA that experienced the error (LBA, bytes 23:16).
func (e ErrorLogEntry) LBA() uint64 { return binary.LittleEndian.Uint64(e[errlogLBA:]) }

// SetLBA sets the first LBA that experienced the error (LBA).
func (e ErrorLogEntry) SetLBA(v uint64) { binary.LittleEndian.PutUint64(e[errlogLBA:], v) }

// NSID returns the namespace of the error (NSID, bytes 27:24).
func (e ErrorLogEntry) NSID() uint32 { return binary.LittleEndian.Uint32(e[errlogNSID:]) }

// SetNSID sets the namespace of the error (NSID).
func (e ErrorLogEntry) SetNSID(v uint32) { binary.LittleEndian.PutUint32(e[errlogNSID:], v) }

// VendorSpecificInfo returns the Vendor Specific Information Available log page identifier (VendorSpecificInfo, byte 28).
func (e ErrorLogEntry) VendorSpecificInfo() uint8 { return e[errlogVendorSpecificInfo] }

// SetVendorSpecificInfo sets the Vendor Specific Information Available log page identifier (VendorSpecificInfo).
func (e ErrorLogEntry) SetVendorSpecificInfo(v uint8) { e[errlogVendorSpecificInfo] = v }

// TRTYPE returns the Transport Type of a transport error (TRTYPE, byte 29).
func (e ErrorLogEntry) TRTYPE() uint8 { return e[errlogTRTYPE] }

// SetTRTYPE sets the Transport Type of a transport error (TRTYPE).
func (e ErrorLogEntry) SetTRTYPE(v uint8) { e[errlogTRTYPE] = v }

// CommandSpecificInfo returns the Command Specific Information (CommandSpecificInfo, bytes 39:32).
func (e ErrorLogEntry) CommandSpecificInfo() uint64 {
	return binary.LittleEndian.Uint64(e[errlogCommandSpecificInfo:])
}

// SetCommandSpecificInfo sets the Command Specific Information (CommandSpecificInfo).
func (e ErrorLogEntry) SetCommandSpecificInfo(v uint64) {
	binary.LittleEndian.PutUint64(e[errlogCommandSpecificInfo:], v)
}

// TransportSpecificInfo returns the Transport Type Specific Information (TransportSpecificInfo, bytes 41:40).
func (e ErrorLogEntry) TransportSpecificInfo() uint16 {
	return binary.LittleEndian.Uint16(e[errlogTransportSpecificInfo:])
}

// SetTransportSpecificInfo sets the Transport Type Specific Information (TransportSpecificInfo).
func (e ErrorLogEntry) SetTransportSpecificInfo(v uint16) {
	binary.LittleEndian.PutUint16(e[errlogTransportSpecificInfo:], v)
}

// SMARTLog is a view of the 512-byte SMART / Health Information log page
// (LID 02h; Linux struct nvme_smart_log). The 128-bit counters are Uint128
// values.
type SMARTLog []byte

// ParseSMARTLog returns a view of the SMART / Health log at the start of b,
// or an error when b holds less than 512 bytes.
func ParseSMARTLog(b []byte) (SMARTLog, error) {
	if err := need("SMART / Health log", b, SMARTLogSize); err != nil {
		return nil, err
	}
	return SMARTLog(b[:SMARTLogSize:SMARTLogSize]), nil
}

// Critical Warning bits of the SMART / Health log (also the SMART bits of
// the Asynchronous Event Configuration feature).
const (
	SMARTWarningSpare          = 1 << 0 // available spare below threshold
	SMARTWarningTemperature    = 1 << 1 // temperature above or below a threshold
	SMARTWarningReliability    = 1 << 2 // NVM subsystem reliability degraded
	SMARTWarningReadOnly       = 1 << 3 // media placed in read only mode
	SMARTWarningVolatileBackup = 1 << 4 // volatile memory backup device failed
	SMARTWarningPMRReadOnly    = 1 << 5 // persistent memory region read only
)

// Number of temperature sensors in the SMART / Health log.
const numTemperatureSensors = 8

// smartTempSensor is the offset of Temperature Sensor 1 (bytes 201:200).
const smartTempSensor = 200

const (
	smartCriticalWarning               = 0
	smartCompositeTemperature          = 1
	smartAvailableSpare                = 3
	smartAvailableSpareThreshold       = 4
	smartPercentageUsed                = 5
	smartEnduranceGroupCriticalWarning = 6
	smartDataUnitsRead                 = 32
	smartDataUnitsWritten              = 48
	smartHostReadCommands              = 64
	smartHostWriteCommands             = 80
	smartControllerBusyTime            = 96
	smartPowerCycles                   = 112
	smartPowerOnHours                  = 128
	smartUnsafeShutdowns               = 144
	smartMediaErrors                   = 160
	smartErrorLogEntries               = 176
	smartWarningTemperatureTime        = 192
	smartCriticalTemperatureTime       = 196
	smartThermalMgmtT1TransitionCount  = 216
	smartThermalMgmtT2TransitionCount  = 220
	smartThermalMgmtT1TotalTime        = 224
	smartThermalMgmtT2TotalTime        = 228
)

// CriticalWarning returns the Critical Warning bits (CriticalWarning, byte 0): SMARTWarning* bits.
func (l SMARTLog) CriticalWarning() uint8 { return l[smartCriticalWarning] }

// SetCriticalWarning sets the Critical Warning bits (CriticalWarning).
func (l SMARTLog) SetCriticalWarning(v uint8) { l[smartCriticalWarning] = v }

// CompositeTemperature returns the Composite Temperature in kelvins (CompositeTemperature, bytes 2:1).
func (l SMARTLog) CompositeTemperature() uint16 {
	return binary.LittleEndian.Uint16(l[smartCompositeTemperature:])
}

// SetCompositeTemperature sets the Composite Temperature in kelvins (CompositeTemperature).
func (l SMARTLog) SetCompositeTemperature(v uint16) {
	binary.LittleEndian.PutUint16(l[smartCompositeTemperature:], v)
}

// AvailableSpare returns the Available Spare in percent (AvailableSpare, byte 3).
func (l SMARTLog) AvailableSpare() uint8 { return l[smartAvailableSpare] }

// SetAvailableSpare sets the Available Spare in percent (AvailableSpare).
func (l SMARTLog) SetAvailableSpare(v uint8) { l[smartAvailableSpare] = v }

// AvailableSpareThreshold returns the Available Spare Threshold in percent (AvailableSpareThreshold, byte 4).
func (l SMARTLog) AvailableSpareThreshold() uint8 { return l[smartAvailableSpareThreshold] }

// SetAvailableSpareThreshold sets the Available Spare Threshold in percent (AvailableSpareThreshold).
func (l SMARTLog) SetAvailableSpareThreshold(v uint8) { l[smartAvailableSpareThreshold] = v }

// PercentageUsed returns the Percentage Used estimate (PercentageUsed, byte 5): may exceed 100.
func (l SMARTLog) PercentageUsed() uint8 { return l[smartPercentageUsed] }

// SetPercentageUsed sets the Percentage Used estimate (PercentageUsed).
func (l SMARTLog) SetPercentageUsed(v uint8) { l[smartPercentageUsed] = v }

// EnduranceGroupCriticalWarning returns the Endurance Group Critical Warning Summary (EnduranceGroupCriticalWarning, byte 6).
func (l SMARTLog) EnduranceGroupCriticalWarning() uint8 { return l[smartEnduranceGroupCriticalWarning] }

// SetEnduranceGroupCriticalWarning sets the Endurance Group Critical Warning Summary (EnduranceGroupCriticalWarning).
func (l SMARTLog) SetEnduranceGroupCriticalWarning(v uint8) {
	l[smartEnduranceGroupCriticalWarning] = v
}

// DataUnitsRead returns the Data Units Read in thousands of 512-byte units (DataUnitsRead, bytes 47:32).
func (l SMARTLog) DataUnitsRead() Uint128 { return getUint128(l[smartDataUnitsRead:]) }

// SetDataUnitsRead sets the Data Units Read in thousands of 512-byte units (DataUnitsRead).
func (l SMARTLog) SetDataUnitsRead(v Uint128) { putUint128(l[smartDataUnitsRead:], v) }

// DataUnitsWritten returns the Data Units Written in thousands of 512-byte units (DataUnitsWritten, bytes 63:48).
func (l SMARTLog) DataUnitsWritten() Uint128 { return getUint128(l[smartDataUnitsWritten:]) }

// SetDataUnitsWritten sets the Data Units Written in thousands of 512-byte units (DataUnitsWritten).
func (l SMARTLog) SetDataUnitsWritten(v Uint128) { putUint128(l[smartDataUnitsWritten:], v) }

// HostReadCommands returns the Host Read Commands completed (HostReadCommands, bytes 79:64).
func (l SMARTLog) HostReadCommands() Uint128 { return getUint128(l[smartHostReadCommands:]) }

// SetHostReadCommands sets the Host Read Commands completed (HostReadCommands).
func (l SMARTLog) SetHostReadCommands(v Uint128) { putUint128(l[smartHostReadCommands:], v) }

// HostWriteCommands returns the Host Write Commands completed (HostWriteCommands, bytes 95:80).
func (l SMARTLog) HostWriteCommands() Uint128 { return getUint128(l[smartHostWriteCommands:]) }

// SetHostWriteCommands sets the Host Write Commands completed (HostWriteCommands).
func (l SMARTLog) SetHostWriteCommands(v Uint128) { putUint128(l[smartHostWriteCommands:], v) }

// ControllerBusyTime returns the Controller Busy Time in minutes (ControllerBusyTime, bytes 111:96).
func (l SMARTLog) ControllerBusyTime() Uint128 { return getUint128(l[smartControllerBusyTime:]) }

// SetControllerBusyTime sets the Controller Busy Time in minutes (ControllerBusyTime).
func (l SMARTLog) SetControllerBusyTime(v Uint128) { putUint128(l[smartControllerBusyTime:], v) }

// PowerCycles returns the number of Power Cycles (PowerCycles, bytes 127:112).
func (l SMARTLog) PowerCycles() Uint128 { return getUint128(l[smartPowerCycles:]) }

// SetPowerCycles sets the number of Power Cycles (PowerCycles).
func (l SMARTLog) SetPowerCycles(v Uint128) { putUint128(l[smartPowerCycles:], v) }

// PowerOnHours returns the Power On Hours (PowerOnHours, bytes 143:128).
func (l SMARTLog) PowerOnHours() Uint128 { return getUint128(l[smartPowerOnHours:]) }

// SetPowerOnHours sets the Power On Hours (PowerOnHours).
func (l SMARTLog) SetPowerOnHours(v Uint128) { putUint128(l[smartPowerOnHours:], v) }

// UnsafeShutdowns returns the number of Unsafe Shutdowns (UnsafeShutdowns, bytes 159:144).
func (l SMARTLog) UnsafeShutdowns() Uint128 { return getUint128(l[smartUnsafeShutdowns:]) }

// SetUnsafeShutdowns sets the number of Unsafe Shutdowns (UnsafeShutdowns).
func (l SMARTLog) SetUnsafeShutdowns(v Uint128) { putUint128(l[smartUnsafeShutdowns:], v) }

// MediaErrors returns the number of Media and Data Integrity Errors (MediaErrors, bytes 175:160).
func (l SMARTLog) MediaErrors() Uint128 { return getUint128(l[smartMediaErrors:]) }

// SetMediaErrors sets the number of Media and Data Integrity Errors (MediaErrors).
func (l SMARTLog) SetMediaErrors(v Uint128) { putUint128(l[smartMediaErrors:], v) }

// ErrorLogEntries returns the Number of Error Information Log Entries over the controller's life (ErrorLogEntries, bytes 191:176).
func (l SMARTLog) ErrorLogEntries() Uint128 { return getUint128(l[smartErrorLogEntries:]) }

// SetErrorLogEntries sets the Number of Error Information Log Entries over the controller's life (ErrorLogEntries).
func (l SMARTLog) SetErrorLogEntries(v Uint128) { putUint128(l[smartErrorLogEntries:], v) }

// WarningTemperatureTime returns the Warning Composite Temperature Time in minutes (WarningTemperatureTime, bytes 195:192).
func (l SMARTLog) WarningTemperatureTime() uint32 {
	return binary.LittleEndian.Uint32(l[smartWarningTemperatureTime:])
}

// SetWarningTemperatureTime sets the Warning Composite Temperature Time in minutes (WarningTemperatureTime).
func (l SMARTLog) SetWarningTemperatureTime(v uint32) {
	binary.LittleEndian.PutUint32(l[smartWarningTemperatureTime:], v)
}

// CriticalTemperatureTime returns the Critical Composite Temperature Time in minutes (CriticalTemperatureTime, bytes 199:196).
func (l SMARTLog) CriticalTemperatureTime() uint32 {
	return binary.LittleEndian.Uint32(l[smartCriticalTemperatureTime:])
}

// SetCriticalTemperatureTime sets the Critical Composite Temperature Time in minutes (CriticalTemperatureTime).
func (l SMARTLog) SetCriticalTemperatureTime(v uint32) {
	binary.LittleEndian.PutUint32(l[smartCriticalTemperatureTime:], v)
}

// ThermalMgmtT1TransitionCount returns the Thermal Management Temperature 1 Transition Count (ThermalMgmtT1TransitionCount, bytes 219:216).
func (l SMARTLog) ThermalMgmtT1TransitionCount() uint32 {
	return binary.LittleEndian.Uint32(l[smartThermalMgmtT1TransitionCount:])
}

// SetThermalMgmtT1TransitionCount sets the Thermal Management Temperature 1 Transition Count (ThermalMgmtT1TransitionCount).
func (l SMARTLog) SetThermalMgmtT1TransitionCount(v uint32) {
	binary.LittleEndian.PutUint32(l[smartThermalMgmtT1TransitionCount:], v)
}

// ThermalMgmtT2TransitionCount returns the Thermal Management Temperature 2 Transition Count (ThermalMgmtT2TransitionCount, bytes 223:220).
func (l SMARTLog) ThermalMgmtT2TransitionCount() uint32 {
	return binary.LittleEndian.Uint32(l[smartThermalMgmtT2TransitionCount:])
}

// SetThermalMgmtT2TransitionCount sets the Thermal Management Temperature 2 Transition Count (ThermalMgmtT2TransitionCount).
func (l SMARTLog) SetThermalMgmtT2TransitionCount(v uint32) {
	binary.LittleEndian.PutUint32(l[smartThermalMgmtT2TransitionCount:], v)
}

// ThermalMgmtT1TotalTime returns the Total Time For Thermal Management Temperature 1 in seconds (ThermalMgmtT1TotalTime, bytes 227:224).
func (l SMARTLog) ThermalMgmtT1TotalTime() uint32 {
	return binary.LittleEndian.Uint32(l[smartThermalMgmtT1TotalTime:])
}

// SetThermalMgmtT1TotalTime sets the Total Time For Thermal Management Temperature 1 in seconds (ThermalMgmtT1TotalTime).
func (l SMARTLog) SetThermalMgmtT1TotalTime(v uint32) {
	binary.LittleEndian.PutUint32(l[smartThermalMgmtT1TotalTime:], v)
}

// ThermalMgmtT2TotalTime returns the Total Time For Thermal Management Temperature 2 in seconds (ThermalMgmtT2TotalTime, bytes 231:228).
func (l SMARTLog) ThermalMgmtT2TotalTime() uint32 {
	return binary.LittleEndian.Uint32(l[smartThermalMgmtT2TotalTime:])
}

// SetThermalMgmtT2TotalTime sets the Total Time For Thermal Management Temperature 2 in seconds (ThermalMgmtT2TotalTime).
func (l SMARTLog) SetThermalMgmtT2TotalTime(v uint32) {
	binary.LittleEndian.PutUint32(l[smartThermalMgmtT2TotalTime:], v)
}

// TemperatureSensor returns Temperature Sensor i+1 (i from 0 to 7) in
// kelvins, 0 when not implemented or for another index.
func (l SMARTLog) TemperatureSensor(i int) uint16 {
	if i < 0 || i >= numTemperatureSensors {
		return 0
	}
	return binary.LittleEndian.Uint16(l[smartTempSensor+2*i:])
}

// SetTemperatureSensor sets Temperature Sensor i+1 (i from 0 to 7) in
// kelvins; other indexes are ignored.
func (l SMARTLog) SetTemperatureSensor(i int, kelvin uint16) {
	if i < 0 || i >= numTemperatureSensors {
		return
	}
	binary.LittleEndian.PutUint16(l[smartTempSensor+2*i:], kelvin)
}

// FirmwareSlotLog is a view of the 512-byte Firmware Slot Information log
// page (LID 03h): byte 0 AFI, then the revisions of slots 1-7 (8 ASCII bytes
// each) from byte 8.
type FirmwareSlotLog []byte

// ParseFirmwareSlotLog returns a view of the Firmware Slot log at the start
// of b, or an error when b holds less than 512 bytes.
func ParseFirmwareSlotLog(b []byte) (FirmwareSlotLog, error) {
	if err := need("Firmware Slot log", b, FirmwareSlotLogSize); err != nil {
		return nil, err
	}
	return FirmwareSlotLog(b[:FirmwareSlotLogSize:FirmwareSlotLogSize]), nil
}

// Firmware slot log layout.
const (
	fwslotAFI        = 0
	fwslotFRS        = 8
	fwslotFRSSize    = 8
	NumFirmwareSlots = 7
)

// AFI returns the Active Firmware Info byte.
func (l FirmwareSlotLog) AFI() uint8 { return l[fwslotAFI] }

// SetAFI sets the Active Firmware Info byte.
func (l FirmwareSlotLog) SetAFI(v uint8) { l[fwslotAFI] = v }

// ActiveSlot returns the slot the running firmware came from (AFI bits 2:0).
func (l FirmwareSlotLog) ActiveSlot() int { return int(l[fwslotAFI] & 0x7) }

// SetActiveSlot sets AFI bits 2:0.
func (l FirmwareSlotLog) SetActiveSlot(slot int) { l[fwslotAFI] = l[fwslotAFI]&^0x7 | uint8(slot)&0x7 }

// NextSlot returns the slot activated at the next reset (AFI bits 6:4; 0:
// not indicated).
func (l FirmwareSlotLog) NextSlot() int { return int(l[fwslotAFI] >> 4 & 0x7) }

// SetNextSlot sets AFI bits 6:4.
func (l FirmwareSlotLog) SetNextSlot(slot int) {
	l[fwslotAFI] = l[fwslotAFI]&^0x70 | (uint8(slot)&0x7)<<4
}

// FRS returns the firmware revision in slot 1 to 7 without its padding, ""
// for an empty slot or another slot number.
func (l FirmwareSlotLog) FRS(slot int) string {
	if slot < 1 || slot > NumFirmwareSlots {
		return ""
	}
	off := fwslotFRS + (slot-1)*fwslotFRSSize
	return getASCII(l[off : off+fwslotFRSSize])
}

// SetFRS sets the firmware revision of slot 1 to 7: printable ASCII of at
// most 8 bytes, space padded; "" stores zeroes (empty slot).
func (l FirmwareSlotLog) SetFRS(slot int, rev string) error {
	if slot < 1 || slot > NumFirmwareSlots {
		return fmt.Errorf("nvme: firmware slot %d, want 1 to %d: %w", slot, NumFirmwareSlots, ErrMalformed)
	}
	off := fwslotFRS + (slot-1)*fwslotFRSSize
	if rev == "" {
		clear(l[off : off+fwslotFRSSize])
		return nil
	}
	return putASCII(l[off:off+fwslotFRSSize], "FRS", rev)
}

// ChangedNSListOverflow is the first entry of a Changed Namespace List that
// had more than 1024 changes to report.
const ChangedNSListOverflow = 0xffffffff

// DecodeChangedNSList returns the NSIDs of a Changed Namespace List log page
// (LID 04h), or overflow = true when the list holds the overflow marker
// (more than 1024 namespaces changed: the host rescans them all). The log
// page holds at most 1024 entries: bytes beyond its 4096 are ignored.
func DecodeChangedNSList(b []byte) (ids []uint32, overflow bool, err error) {
	if len(b) > 4*MaxNSIDListEntries {
		b = b[:4*MaxNSIDListEntries]
	}
	ids, err = DecodeNSIDList(b)
	if err != nil {
		return nil, false, err
	}
	if len(ids) > 0 && ids[0] == ChangedNSListOverflow {
		return nil, true, nil
	}
	return ids, false, nil
}

// EncodeChangedNSList writes a Changed Namespace List log page into b
// (4096 bytes, or less for a partial read from offset 0): the NSIDs, or the
// overflow marker when there are more than 1024 of them or more than fit in
// a 4096-byte page. It returns an error for an NSID of 0 or a buffer too
// small for the list or the marker.
func EncodeChangedNSList(b []byte, ids []uint32) error {
	if len(ids) > MaxNSIDListEntries {
		if len(b) < 4 {
			return fmt.Errorf("nvme: changed namespace list overflow marker does not fit in %d bytes: %w", len(b), ErrMalformed)
		}
		clear(b)
		binary.LittleEndian.PutUint32(b, ChangedNSListOverflow)
		return nil
	}
	return EncodeNSIDList(b, ids)
}

// EffectsLog is a view of the 4096-byte Commands Supported and Effects log
// page (LID 05h; Linux struct nvme_effects_log): a 32-bit entry per admin
// opcode (bytes 1023:0) and per I/O opcode (bytes 2047:1024).
type EffectsLog []byte

// ParseEffectsLog returns a view of the Commands Supported and Effects log
// at the start of b, or an error when b holds less than 4096 bytes.
func ParseEffectsLog(b []byte) (EffectsLog, error) {
	if err := need("Commands Supported and Effects log", b, CommandEffectsLogSize); err != nil {
		return nil, err
	}
	return EffectsLog(b[:CommandEffectsLogSize:CommandEffectsLogSize]), nil
}

// Bits of a Commands Supported and Effects entry.
const (
	EffectsCSUPP      = 1 << 0    // command supported
	EffectsLBCC       = 1 << 1    // logical block content change
	EffectsNCC        = 1 << 2    // namespace capability change
	EffectsNIC        = 1 << 3    // namespace inventory change
	EffectsCCC        = 1 << 4    // controller capability change
	EffectsCSEMask    = 0x7 << 16 // command submission and execution
	EffectsCSEShift   = 16
	EffectsUUIDSelect = 1 << 19 // UUID selection supported
)

// Command submission and execution values (CSE).
const (
	EffectsCSENoRestriction = 0 // no restriction
	EffectsCSESameNamespace = 1 // no other command to the same namespace at the same time
	EffectsCSEAnyNamespace  = 2 // no other command to any namespace at the same time
)

const effectsIOOffset = 1024

// ACS returns the Admin Command Supported entry of an admin opcode.
func (l EffectsLog) ACS(op AdminOpcode) uint32 { return binary.LittleEndian.Uint32(l[4*int(op):]) }

// SetACS sets the entry of an admin opcode.
func (l EffectsLog) SetACS(op AdminOpcode, v uint32) { binary.LittleEndian.PutUint32(l[4*int(op):], v) }

// IOCS returns the I/O Command Supported entry of an I/O opcode.
func (l EffectsLog) IOCS(op IOOpcode) uint32 {
	return binary.LittleEndian.Uint32(l[effectsIOOffset+4*int(op):])
}

// SetIOCS sets the entry of an I/O opcode.
func (l EffectsLog) SetIOCS(op IOOpcode, v uint32) {
	binary.LittleEndian.PutUint32(l[effectsIOOffset+4*int(op):], v)
}
