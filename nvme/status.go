package nvme

import (
	"errors"
	"fmt"
)

// StatusCodeType is the Status Code Type (SCT) of a completion.
type StatusCodeType uint8

// Status Code Types (NVMe Base 2.0, figure "Status Code – Status Code Type
// Values").
const (
	SCTGeneric         StatusCodeType = 0 // Generic Command Status
	SCTCommandSpecific StatusCodeType = 1 // Command Specific Status
	SCTMediaError      StatusCodeType = 2 // Media and Data Integrity Errors
	SCTPathRelated     StatusCodeType = 3 // Path Related Status
	SCTVendorSpecific  StatusCodeType = 7 // Vendor Specific
)

// String returns the name of the status code type.
func (t StatusCodeType) String() string {
	switch t {
	case SCTGeneric:
		return "Generic Command Status"
	case SCTCommandSpecific:
		return "Command Specific Status"
	case SCTMediaError:
		return "Media and Data Integrity Errors"
	case SCTPathRelated:
		return "Path Related Status"
	case SCTVendorSpecific:
		return "Vendor Specific"
	}
	return fmt.Sprintf("Reserved SCT %d", uint8(t))
}

// Status is a completion status without the phase tag, CRD, More and DNR:
// SCT<<8 | SC, the 11-bit value Linux keeps in its NVME_SC_* constants
// (NVME_SC_INVALID_FIELD = 0x2, NVME_SC_QID_INVALID = 0x101, ...). The zero
// value is success.
type Status uint16

// MakeStatus returns the Status of a status code type and status code.
func MakeStatus(sct StatusCodeType, sc uint8) Status { return Status(sct&0x7)<<8 | Status(sc) }

// SCT returns the status code type.
func (s Status) SCT() StatusCodeType { return StatusCodeType(s >> 8 & 0x7) }

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// Success reports whether s is Successful Completion.
func (s Status) Success() bool { return s&0x7ff == 0 }

// Err returns nil for success, else an *Error carrying s (without DNR).
func (s Status) Err() error {
	if s.Success() {
		return nil
	}
	return &Error{Status: s}
}

// Generic command status values (SCT 0).
const (
	StatusSuccess                          Status = 0x00
	StatusInvalidOpcode                    Status = 0x01
	StatusInvalidField                     Status = 0x02
	StatusCommandIDConflict                Status = 0x03
	StatusDataTransferError                Status = 0x04
	StatusAbortedPowerLoss                 Status = 0x05
	StatusInternalError                    Status = 0x06
	StatusAbortRequested                   Status = 0x07
	StatusAbortSQDeletion                  Status = 0x08
	StatusAbortFailedFused                 Status = 0x09
	StatusAbortMissingFused                Status = 0x0a
	StatusInvalidNamespaceOrFormat         Status = 0x0b
	StatusCommandSequenceError             Status = 0x0c
	StatusInvalidSGLSegmentDescriptor      Status = 0x0d
	StatusInvalidNumberOfSGLDescriptors    Status = 0x0e
	StatusDataSGLLengthInvalid             Status = 0x0f
	StatusMetadataSGLLengthInvalid         Status = 0x10
	StatusSGLDescriptorTypeInvalid         Status = 0x11
	StatusInvalidUseOfCMB                  Status = 0x12
	StatusPRPOffsetInvalid                 Status = 0x13
	StatusAtomicWriteUnitExceeded          Status = 0x14
	StatusOperationDenied                  Status = 0x15
	StatusSGLOffsetInvalid                 Status = 0x16
	StatusHostIdentifierInconsistentFormat Status = 0x18
	StatusKeepAliveTimerExpired            Status = 0x19
	StatusKeepAliveTimeoutInvalid          Status = 0x1a
	StatusAbortedPreemptAbort              Status = 0x1b
	StatusSanitizeFailed                   Status = 0x1c
	StatusSanitizeInProgress               Status = 0x1d
	StatusSGLDataBlockGranularityInvalid   Status = 0x1e
	StatusCommandNotSupportedForCMBQueue   Status = 0x1f
	StatusNamespaceWriteProtected          Status = 0x20
	StatusCommandInterrupted               Status = 0x21
	StatusTransientTransportError          Status = 0x22
	StatusProhibitedByLockdown             Status = 0x23
	StatusAdminCommandMediaNotReady        Status = 0x24

	// Generic status values of the NVM Command Set (SCT 0, SC 80h-BFh).
	StatusLBAOutOfRange       Status = 0x80
	StatusCapacityExceeded    Status = 0x81
	StatusNamespaceNotReady   Status = 0x82
	StatusReservationConflict Status = 0x83
	StatusFormatInProgress    Status = 0x84
)

// Command specific status values (SCT 1). SC 80h-BFh depend on the command
// set: the NVM Command Set and the Fabrics commands (Connect) give the same
// codes different meanings; package fabrics names the Fabrics ones.
const (
	StatusCompletionQueueInvalid                   Status = 0x100
	StatusInvalidQueueIdentifier                   Status = 0x101
	StatusInvalidQueueSize                         Status = 0x102
	StatusAbortCommandLimitExceeded                Status = 0x103
	StatusAsyncEventRequestLimitExceeded           Status = 0x105
	StatusInvalidFirmwareSlot                      Status = 0x106
	StatusInvalidFirmwareImage                     Status = 0x107
	StatusInvalidInterruptVector                   Status = 0x108
	StatusInvalidLogPage                           Status = 0x109
	StatusInvalidFormat                            Status = 0x10a
	StatusFirmwareActivationNeedsConventionalReset Status = 0x10b
	StatusInvalidQueueDeletion                     Status = 0x10c
	StatusFeatureNotSaveable                       Status = 0x10d
	StatusFeatureNotChangeable                     Status = 0x10e
	StatusFeatureNotNamespaceSpecific              Status = 0x10f
	StatusFirmwareActivationNeedsNSSR              Status = 0x110
	StatusFirmwareActivationNeedsControllerReset   Status = 0x111
	StatusFirmwareActivationNeedsMaxTime           Status = 0x112
	StatusFirmwareActivationProhibited             Status = 0x113
	StatusOverlappingRange                         Status = 0x114
	StatusNamespaceInsufficientCapacity            Status = 0x115
	StatusNamespaceIdentifierUnavailable           Status = 0x116
	StatusNamespaceAlreadyAttached                 Status = 0x118
	StatusNamespaceIsPrivate                       Status = 0x119
	StatusNamespaceNotAttached                     Status = 0x11a
	StatusThinProvisioningNotSupported             Status = 0x11b
	StatusControllerListInvalid                    Status = 0x11c
	StatusSelfTestInProgress                       Status = 0x11d
	StatusBootPartitionWriteProhibited             Status = 0x11e
	StatusInvalidControllerIdentifier              Status = 0x11f
	StatusInvalidSecondaryControllerState          Status = 0x120
	StatusInvalidNumberOfControllerResources       Status = 0x121
	StatusInvalidResourceIdentifier                Status = 0x122
	StatusSanitizeProhibitedPMR                    Status = 0x123
	StatusANAGroupIdentifierInvalid                Status = 0x124
	StatusANAAttachFailed                          Status = 0x125
	StatusInsufficientCapacity                     Status = 0x126
	StatusNamespaceAttachmentLimitExceeded         Status = 0x127
	StatusProhibitionNotSupported                  Status = 0x128
	StatusIOCommandSetNotSupported                 Status = 0x129
	StatusIOCommandSetNotEnabled                   Status = 0x12a
	StatusIOCommandSetCombinationRejected          Status = 0x12b
	StatusInvalidIOCommandSet                      Status = 0x12c
	StatusIdentifierUnavailable                    Status = 0x12d

	// NVM Command Set command specific values (SCT 1, SC 80h-BFh).
	StatusConflictingAttributes      Status = 0x180 // Dataset Management, Read, Write
	StatusInvalidProtectionInfo      Status = 0x181
	StatusWriteToReadOnlyRange       Status = 0x182
	StatusCommandSizeLimitExceeded   Status = 0x183
	StatusZoneBoundaryError          Status = 0x1b8
	StatusZoneIsFull                 Status = 0x1b9
	StatusZoneIsReadOnly             Status = 0x1ba
	StatusZoneIsOffline              Status = 0x1bb
	StatusZoneInvalidWrite           Status = 0x1bc
	StatusTooManyActiveZones         Status = 0x1bd
	StatusTooManyOpenZones           Status = 0x1be
	StatusInvalidZoneStateTransition Status = 0x1bf
)

// Media and data integrity errors (SCT 2).
const (
	StatusWriteFault                  Status = 0x280
	StatusUnrecoveredReadError        Status = 0x281
	StatusGuardCheckError             Status = 0x282
	StatusApplicationTagCheckError    Status = 0x283
	StatusReferenceTagCheckError      Status = 0x284
	StatusCompareFailure              Status = 0x285
	StatusAccessDenied                Status = 0x286
	StatusDeallocatedOrUnwrittenBlock Status = 0x287
	StatusStorageTagCheckError        Status = 0x288
)

// Path related status values (SCT 3).
const (
	StatusInternalPathError      Status = 0x300
	StatusANAPersistentLoss      Status = 0x301
	StatusANAInaccessible        Status = 0x302
	StatusANATransition          Status = 0x303
	StatusControllerPathingError Status = 0x360
	StatusHostPathingError       Status = 0x370
	StatusCommandAbortedByHost   Status = 0x371
)

var statusNames = map[Status]string{
	StatusSuccess:                          "Successful Completion",
	StatusInvalidOpcode:                    "Invalid Command Opcode",
	StatusInvalidField:                     "Invalid Field in Command",
	StatusCommandIDConflict:                "Command ID Conflict",
	StatusDataTransferError:                "Data Transfer Error",
	StatusAbortedPowerLoss:                 "Commands Aborted due to Power Loss Notification",
	StatusInternalError:                    "Internal Error",
	StatusAbortRequested:                   "Command Abort Requested",
	StatusAbortSQDeletion:                  "Command Aborted due to SQ Deletion",
	StatusAbortFailedFused:                 "Command Aborted due to Failed Fused Command",
	StatusAbortMissingFused:                "Command Aborted due to Missing Fused Command",
	StatusInvalidNamespaceOrFormat:         "Invalid Namespace or Format",
	StatusCommandSequenceError:             "Command Sequence Error",
	StatusInvalidSGLSegmentDescriptor:      "Invalid SGL Segment Descriptor",
	StatusInvalidNumberOfSGLDescriptors:    "Invalid Number of SGL Descriptors",
	StatusDataSGLLengthInvalid:             "Data SGL Length Invalid",
	StatusMetadataSGLLengthInvalid:         "Metadata SGL Length Invalid",
	StatusSGLDescriptorTypeInvalid:         "SGL Descriptor Type Invalid",
	StatusInvalidUseOfCMB:                  "Invalid Use of Controller Memory Buffer",
	StatusPRPOffsetInvalid:                 "PRP Offset Invalid",
	StatusAtomicWriteUnitExceeded:          "Atomic Write Unit Exceeded",
	StatusOperationDenied:                  "Operation Denied",
	StatusSGLOffsetInvalid:                 "SGL Offset Invalid",
	StatusHostIdentifierInconsistentFormat: "Host Identifier Inconsistent Format",
	StatusKeepAliveTimerExpired:            "Keep Alive Timer Expired",
	StatusKeepAliveTimeoutInvalid:          "Keep Alive Timeout Invalid",
	StatusAbortedPreemptAbort:              "Command Aborted due to Preempt and Abort",
	StatusSanitizeFailed:                   "Sanitize Failed",
	StatusSanitizeInProgress:               "Sanitize In Progress",
	StatusSGLDataBlockGranularityInvalid:   "SGL Data Block Granularity Invalid",
	StatusCommandNotSupportedForCMBQueue:   "Command Not Supported for Queue in CMB",
	StatusNamespaceWriteProtected:          "Namespace is Write Protected",
	StatusCommandInterrupted:               "Command Interrupted",
	StatusTransientTransportError:          "Transient Transport Error",
	StatusProhibitedByLockdown:             "Command Prohibited by Command and Feature Lockdown",
	StatusAdminCommandMediaNotReady:        "Admin Command Media Not Ready",
	StatusLBAOutOfRange:                    "LBA Out of Range",
	StatusCapacityExceeded:                 "Capacity Exceeded",
	StatusNamespaceNotReady:                "Namespace Not Ready",
	StatusReservationConflict:              "Reservation Conflict",
	StatusFormatInProgress:                 "Format In Progress",

	StatusCompletionQueueInvalid:                   "Completion Queue Invalid",
	StatusInvalidQueueIdentifier:                   "Invalid Queue Identifier",
	StatusInvalidQueueSize:                         "Invalid Queue Size",
	StatusAbortCommandLimitExceeded:                "Abort Command Limit Exceeded",
	StatusAsyncEventRequestLimitExceeded:           "Asynchronous Event Request Limit Exceeded",
	StatusInvalidFirmwareSlot:                      "Invalid Firmware Slot",
	StatusInvalidFirmwareImage:                     "Invalid Firmware Image",
	StatusInvalidInterruptVector:                   "Invalid Interrupt Vector",
	StatusInvalidLogPage:                           "Invalid Log Page",
	StatusInvalidFormat:                            "Invalid Format",
	StatusFirmwareActivationNeedsConventionalReset: "Firmware Activation Requires Conventional Reset",
	StatusInvalidQueueDeletion:                     "Invalid Queue Deletion",
	StatusFeatureNotSaveable:                       "Feature Identifier Not Saveable",
	StatusFeatureNotChangeable:                     "Feature Not Changeable",
	StatusFeatureNotNamespaceSpecific:              "Feature Not Namespace Specific",
	StatusFirmwareActivationNeedsNSSR:              "Firmware Activation Requires NVM Subsystem Reset",
	StatusFirmwareActivationNeedsControllerReset:   "Firmware Activation Requires Controller Level Reset",
	StatusFirmwareActivationNeedsMaxTime:           "Firmware Activation Requires Maximum Time Violation",
	StatusFirmwareActivationProhibited:             "Firmware Activation Prohibited",
	StatusOverlappingRange:                         "Overlapping Range",
	StatusNamespaceInsufficientCapacity:            "Namespace Insufficient Capacity",
	StatusNamespaceIdentifierUnavailable:           "Namespace Identifier Unavailable",
	StatusNamespaceAlreadyAttached:                 "Namespace Already Attached",
	StatusNamespaceIsPrivate:                       "Namespace Is Private",
	StatusNamespaceNotAttached:                     "Namespace Not Attached",
	StatusThinProvisioningNotSupported:             "Thin Provisioning Not Supported",
	StatusControllerListInvalid:                    "Controller List Invalid",
	StatusSelfTestInProgress:                       "Device Self-test In Progress",
	StatusBootPartitionWriteProhibited:             "Boot Partition Write Prohibited",
	StatusInvalidControllerIdentifier:              "Invalid Controller Identifier",
	StatusInvalidSecondaryControllerState:          "Invalid Secondary Controller State",
	StatusInvalidNumberOfControllerResources:       "Invalid Number of Controller Resources",
	StatusInvalidResourceIdentifier:                "Invalid Resource Identifier",
	StatusSanitizeProhibitedPMR:                    "Sanitize Prohibited While Persistent Memory Region is Enabled",
	StatusANAGroupIdentifierInvalid:                "ANA Group Identifier Invalid",
	StatusANAAttachFailed:                          "ANA Attach Failed",
	StatusInsufficientCapacity:                     "Insufficient Capacity",
	StatusNamespaceAttachmentLimitExceeded:         "Namespace Attachment Limit Exceeded",
	StatusProhibitionNotSupported:                  "Prohibition of Command Execution Not Supported",
	StatusIOCommandSetNotSupported:                 "I/O Command Set Not Supported",
	StatusIOCommandSetNotEnabled:                   "I/O Command Set Not Enabled",
	StatusIOCommandSetCombinationRejected:          "I/O Command Set Combination Rejected",
	StatusInvalidIOCommandSet:                      "Invalid I/O Command Set",
	StatusIdentifierUnavailable:                    "Identifier Unavailable",

	// The first five codes of the command set specific range mean one thing
	// for NVM commands and another for the Fabrics Connect command; a Status
	// alone does not say which command failed, so both are named.
	StatusConflictingAttributes:      "Conflicting Attributes or Connect Incompatible Format",
	StatusInvalidProtectionInfo:      "Invalid Protection Information or Connect Controller Busy",
	StatusWriteToReadOnlyRange:       "Attempted Write to Read Only Range or Connect Invalid Parameters",
	StatusCommandSizeLimitExceeded:   "Command Size Limit Exceeded or Connect Restart Discovery",
	0x184:                            "Connect Invalid Host",
	0x185:                            "Invalid Queue Type",
	0x190:                            "Discover Restart",
	0x191:                            "Authentication Required",
	StatusZoneBoundaryError:          "Zone Boundary Error",
	StatusZoneIsFull:                 "Zone Is Full",
	StatusZoneIsReadOnly:             "Zone Is Read Only",
	StatusZoneIsOffline:              "Zone Is Offline",
	StatusZoneInvalidWrite:           "Zone Invalid Write",
	StatusTooManyActiveZones:         "Too Many Active Zones",
	StatusTooManyOpenZones:           "Too Many Open Zones",
	StatusInvalidZoneStateTransition: "Invalid Zone State Transition",

	StatusWriteFault:                  "Write Fault",
	StatusUnrecoveredReadError:        "Unrecovered Read Error",
	StatusGuardCheckError:             "End-to-end Guard Check Error",
	StatusApplicationTagCheckError:    "End-to-end Application Tag Check Error",
	StatusReferenceTagCheckError:      "End-to-end Reference Tag Check Error",
	StatusCompareFailure:              "Compare Failure",
	StatusAccessDenied:                "Access Denied",
	StatusDeallocatedOrUnwrittenBlock: "Deallocated or Unwritten Logical Block",
	StatusStorageTagCheckError:        "End-to-end Storage Tag Check Error",

	StatusInternalPathError:      "Internal Path Error",
	StatusANAPersistentLoss:      "Asymmetric Access Persistent Loss",
	StatusANAInaccessible:        "Asymmetric Access Inaccessible",
	StatusANATransition:          "Asymmetric Access Transition",
	StatusControllerPathingError: "Controller Pathing Error",
	StatusHostPathingError:       "Host Pathing Error",
	StatusCommandAbortedByHost:   "Command Aborted By Host",
}

// Name returns the name the specification gives the status, e.g. "Invalid
// Field in Command", or a description of the range an unnamed code is in.
func (s Status) Name() string {
	s &= 0x7ff
	if n, ok := statusNames[s]; ok {
		return n
	}
	sct, sc := s.SCT(), s.SC()
	switch {
	case sct == SCTVendorSpecific || sc >= 0xc0:
		return "Vendor Specific"
	case sct > SCTPathRelated:
		return "Reserved Status Code Type"
	case sc >= 0x80:
		return "Unknown I/O Command Set Specific Status"
	}
	return "Unknown Status"
}

// String returns the name with the numbers, e.g. "Invalid Field in Command
// (SCT 0 SC 0x02)".
func (s Status) String() string {
	return fmt.Sprintf("%s (SCT %d SC 0x%02x)", s.Name(), uint8(s.SCT()), s.SC())
}

// Error is an NVMe command failure: the status a controller completes the
// command with, and the retry hints of the completion.
type Error struct {
	Status Status // SCT and SC
	DNR    bool   // Do Not Retry
	More   bool   // more in the Error Information log page
	CRD    uint8  // Command Retry Delay index (0-3)
}

// Error returns "nvme: " and the status, e.g. "nvme: Invalid Field in
// Command (SCT 0 SC 0x02), DNR".
func (e *Error) Error() string {
	s := "nvme: " + e.Status.String()
	if e.DNR {
		s += ", DNR"
	}
	return s
}

// Is reports whether target is an *Error with the same Status, so that
// errors.Is(err, nvme.StatusInvalidField.Err()) works whatever the retry
// hints.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

// NewError returns an *Error with the status and the Do Not Retry bit.
func NewError(s Status, dnr bool) *Error { return &Error{Status: s, DNR: dnr} }

// AsError returns the *Error in err's chain, or for any other non-nil error
// an Internal Error with DNR set (a failure the controller cannot describe
// better). It returns nil for a nil error.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: StatusInternalError, DNR: true}
}

// StatusOf returns the Status carried by err: success for nil, the Status
// of an *Error in its chain, else Internal Error.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	return AsError(err).Status
}
