package nvme

import "fmt"

// AdminOpcode is the opcode of a command on the admin queue (queue 0).
type AdminOpcode uint8

// Admin command opcodes (NVMe Base 2.0, figure "Opcodes for Admin
// Commands"; Linux enum nvme_admin_opcode).
const (
	AdminDeleteIOSQ            AdminOpcode = 0x00
	AdminCreateIOSQ            AdminOpcode = 0x01
	AdminGetLogPage            AdminOpcode = 0x02
	AdminDeleteIOCQ            AdminOpcode = 0x04
	AdminCreateIOCQ            AdminOpcode = 0x05
	AdminIdentify              AdminOpcode = 0x06
	AdminAbort                 AdminOpcode = 0x08
	AdminSetFeatures           AdminOpcode = 0x09
	AdminGetFeatures           AdminOpcode = 0x0a
	AdminAsyncEventRequest     AdminOpcode = 0x0c
	AdminNamespaceManagement   AdminOpcode = 0x0d
	AdminFirmwareCommit        AdminOpcode = 0x10
	AdminFirmwareImageDownload AdminOpcode = 0x11
	AdminDeviceSelfTest        AdminOpcode = 0x14
	AdminNamespaceAttachment   AdminOpcode = 0x15
	AdminKeepAlive             AdminOpcode = 0x18
	AdminDirectiveSend         AdminOpcode = 0x19
	AdminDirectiveReceive      AdminOpcode = 0x1a
	AdminVirtualizationMgmt    AdminOpcode = 0x1c
	AdminNVMeMISend            AdminOpcode = 0x1d
	AdminNVMeMIReceive         AdminOpcode = 0x1e
	AdminCapacityManagement    AdminOpcode = 0x20
	AdminLockdown              AdminOpcode = 0x24
	AdminDoorbellBufferConfig  AdminOpcode = 0x7c
	AdminFabrics               AdminOpcode = 0x7f // Fabrics command; FCTYPE in byte 4 (package fabrics)
	AdminFormatNVM             AdminOpcode = 0x80
	AdminSecuritySend          AdminOpcode = 0x81
	AdminSecurityReceive       AdminOpcode = 0x82
	AdminSanitize              AdminOpcode = 0x84
	AdminGetLBAStatus          AdminOpcode = 0x86
	AdminVendorSpecificFirst   AdminOpcode = 0xc0 // first vendor specific opcode (C0h-FFh)
)

// FabricsOpcode is the opcode of every Fabrics command (Connect, Property
// Get/Set, Authentication, Disconnect), on admin and I/O queues alike.
const FabricsOpcode = 0x7f

var adminOpcodeNames = map[AdminOpcode]string{
	AdminDeleteIOSQ:            "Delete I/O Submission Queue",
	AdminCreateIOSQ:            "Create I/O Submission Queue",
	AdminGetLogPage:            "Get Log Page",
	AdminDeleteIOCQ:            "Delete I/O Completion Queue",
	AdminCreateIOCQ:            "Create I/O Completion Queue",
	AdminIdentify:              "Identify",
	AdminAbort:                 "Abort",
	AdminSetFeatures:           "Set Features",
	AdminGetFeatures:           "Get Features",
	AdminAsyncEventRequest:     "Asynchronous Event Request",
	AdminNamespaceManagement:   "Namespace Management",
	AdminFirmwareCommit:        "Firmware Commit",
	AdminFirmwareImageDownload: "Firmware Image Download",
	AdminDeviceSelfTest:        "Device Self-test",
	AdminNamespaceAttachment:   "Namespace Attachment",
	AdminKeepAlive:             "Keep Alive",
	AdminDirectiveSend:         "Directive Send",
	AdminDirectiveReceive:      "Directive Receive",
	AdminVirtualizationMgmt:    "Virtualization Management",
	AdminNVMeMISend:            "NVMe-MI Send",
	AdminNVMeMIReceive:         "NVMe-MI Receive",
	AdminCapacityManagement:    "Capacity Management",
	AdminLockdown:              "Lockdown",
	AdminDoorbellBufferConfig:  "Doorbell Buffer Config",
	AdminFabrics:               "Fabrics Command",
	AdminFormatNVM:             "Format NVM",
	AdminSecuritySend:          "Security Send",
	AdminSecurityReceive:       "Security Receive",
	AdminSanitize:              "Sanitize",
	AdminGetLBAStatus:          "Get LBA Status",
}

// String returns the command name, e.g. "Identify".
func (op AdminOpcode) String() string {
	if n, ok := adminOpcodeNames[op]; ok {
		return n
	}
	if op >= AdminVendorSpecificFirst {
		return fmt.Sprintf("Vendor Specific Admin Command 0x%02x", uint8(op))
	}
	return fmt.Sprintf("Unknown Admin Command 0x%02x", uint8(op))
}

// Known reports whether the opcode has a name here.
func (op AdminOpcode) Known() bool { _, ok := adminOpcodeNames[op]; return ok }

// DataDirection returns the direction of the command's data transfer from
// opcode bits 1:0.
func (op AdminOpcode) DataDirection() DataDirection { return OpcodeDataDirection(uint8(op)) }

// IOOpcode is the opcode of a command on an I/O queue (NVM Command Set).
type IOOpcode uint8

// NVM Command Set I/O command opcodes (NVM Command Set 1.0, figure "Opcodes
// for NVM Commands"; Linux enum nvme_opcode), plus the Zoned Namespace ones.
const (
	IOFlush                 IOOpcode = 0x00
	IOWrite                 IOOpcode = 0x01
	IORead                  IOOpcode = 0x02
	IOWriteUncorrectable    IOOpcode = 0x04
	IOCompare               IOOpcode = 0x05
	IOWriteZeroes           IOOpcode = 0x08
	IODatasetManagement     IOOpcode = 0x09
	IOVerify                IOOpcode = 0x0c
	IOReservationRegister   IOOpcode = 0x0d
	IOReservationReport     IOOpcode = 0x0e
	IOReservationAcquire    IOOpcode = 0x11
	IOReservationRelease    IOOpcode = 0x15
	IOCopy                  IOOpcode = 0x19
	IOZoneManagementSend    IOOpcode = 0x79
	IOZoneManagementReceive IOOpcode = 0x7a
	IOZoneAppend            IOOpcode = 0x7d
	IOFabrics               IOOpcode = 0x7f // Fabrics command (Connect of an I/O queue, ...)
	IOVendorSpecificFirst   IOOpcode = 0x80 // first vendor specific opcode (80h-FFh)
)

var ioOpcodeNames = map[IOOpcode]string{
	IOFlush:                 "Flush",
	IOWrite:                 "Write",
	IORead:                  "Read",
	IOWriteUncorrectable:    "Write Uncorrectable",
	IOCompare:               "Compare",
	IOWriteZeroes:           "Write Zeroes",
	IODatasetManagement:     "Dataset Management",
	IOVerify:                "Verify",
	IOReservationRegister:   "Reservation Register",
	IOReservationReport:     "Reservation Report",
	IOReservationAcquire:    "Reservation Acquire",
	IOReservationRelease:    "Reservation Release",
	IOCopy:                  "Copy",
	IOZoneManagementSend:    "Zone Management Send",
	IOZoneManagementReceive: "Zone Management Receive",
	IOZoneAppend:            "Zone Append",
	IOFabrics:               "Fabrics Command",
}

// String returns the command name, e.g. "Read".
func (op IOOpcode) String() string {
	if n, ok := ioOpcodeNames[op]; ok {
		return n
	}
	if op >= IOVendorSpecificFirst {
		return fmt.Sprintf("Vendor Specific I/O Command 0x%02x", uint8(op))
	}
	return fmt.Sprintf("Unknown I/O Command 0x%02x", uint8(op))
}

// Known reports whether the opcode has a name here.
func (op IOOpcode) Known() bool { _, ok := ioOpcodeNames[op]; return ok }

// DataDirection returns the direction of the command's data transfer from
// opcode bits 1:0.
func (op IOOpcode) DataDirection() DataDirection { return OpcodeDataDirection(uint8(op)) }

// DataDirection is the direction of a command's data transfer, encoded in
// bits 1:0 of every opcode (NVMe Base 2.0, "Opcodes for Admin Commands":
// 00b no data, 01b host to controller, 10b controller to host, 11b
// bidirectional). Fabrics commands (opcode 7Fh) say 11b: their direction
// comes from FCTYPE bits 1:0 instead.
type DataDirection uint8

// Data transfer directions.
const (
	DataNone             DataDirection = 0 // no data transfer
	DataHostToController DataDirection = 1 // the host sends data (Write)
	DataControllerToHost DataDirection = 2 // the controller sends data (Read, Identify)
	DataBidirectional    DataDirection = 3 // both, or command specific
)

// OpcodeDataDirection returns the data direction encoded in opcode bits 1:0.
func OpcodeDataDirection(op uint8) DataDirection { return DataDirection(op & 0x3) }

// String returns the direction, e.g. "host-to-controller".
func (d DataDirection) String() string {
	switch d {
	case DataNone:
		return "none"
	case DataHostToController:
		return "host-to-controller"
	case DataControllerToHost:
		return "controller-to-host"
	case DataBidirectional:
		return "bidirectional"
	}
	return fmt.Sprintf("DataDirection(%d)", uint8(d))
}
