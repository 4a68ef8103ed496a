package nvme_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestCQEFields(t *testing.T) {
	tests := []struct {
		name  string
		off   int
		width int
		v     uint64
		set   func(nvme.CQE, uint64)
		get   func(nvme.CQE) uint64
	}{
		{"DW0", 0, 4, 0xdeadbeef, func(c nvme.CQE, v uint64) { c.SetDW0(uint32(v)) }, func(c nvme.CQE) uint64 { return uint64(c.DW0()) }},
		{"DW1", 4, 4, 0x01020304, func(c nvme.CQE, v uint64) { c.SetDW1(uint32(v)) }, func(c nvme.CQE) uint64 { return uint64(c.DW1()) }},
		{"Result64", 0, 8, 0x0000082000f0003ff, func(c nvme.CQE, v uint64) { c.SetResult64(v) }, func(c nvme.CQE) uint64 { return c.Result64() }},
		{"SQHD", 8, 2, 0x1234, func(c nvme.CQE, v uint64) { c.SetSQHD(uint16(v)) }, func(c nvme.CQE) uint64 { return uint64(c.SQHD()) }},
		{"SQID", 10, 2, 0x5678, func(c nvme.CQE, v uint64) { c.SetSQID(uint16(v)) }, func(c nvme.CQE) uint64 { return uint64(c.SQID()) }},
		{"CID", 12, 2, 0x9abc, func(c nvme.CQE, v uint64) { c.SetCID(uint16(v)) }, func(c nvme.CQE) uint64 { return uint64(c.CID()) }},
		{"StatusRaw", 14, 2, 0xfffe, func(c nvme.CQE, v uint64) { c.SetStatusRaw(uint16(v)) }, func(c nvme.CQE) uint64 { return uint64(c.StatusRaw()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nvme.NewCQE()
			tt.set(c, tt.v)
			if want := leAt(nvme.CQESize, tt.off, tt.width, tt.v); !bytes.Equal(c, want) {
				t.Errorf("bytes % x\nwant  % x", []byte(c), want)
			}
			if got := tt.get(c); got != tt.v {
				t.Errorf("got 0x%x, want 0x%x", got, tt.v)
			}
		})
	}
}

func TestCQEStatusBits(t *testing.T) {
	tests := []struct {
		name   string
		status nvme.Status
		phase  bool
		crd    uint8
		more   bool
		dnr    bool
		raw    uint16
	}{
		{name: "success", raw: 0},
		{name: "phase", phase: true, raw: 0x0001},
		{name: "invalid field DNR", status: nvme.StatusInvalidField, dnr: true, raw: 0x8004},
		{name: "invalid queue id", status: nvme.StatusInvalidQueueIdentifier, raw: 1<<9 | 1<<1},
		{name: "unrecovered read more", status: nvme.StatusUnrecoveredReadError, more: true, raw: 1<<14 | 2<<9 | 0x81<<1},
		{name: "ANA transition CRD", status: nvme.StatusANATransition, crd: 2, phase: true, raw: 2<<12 | 3<<9 | 3<<1 | 1},
		{name: "vendor everything", status: nvme.MakeStatus(nvme.SCTVendorSpecific, 0xff), crd: 3, more: true, dnr: true, phase: true, raw: 0xffff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nvme.NewCQE()
			c.SetStatus(tt.status)
			c.SetPhase(tt.phase)
			c.SetCRD(tt.crd)
			c.SetMore(tt.more)
			c.SetDNR(tt.dnr)
			if c.StatusRaw() != tt.raw {
				t.Fatalf("status word %#04x, want %#04x", c.StatusRaw(), tt.raw)
			}
			if c.Status() != tt.status || c.Phase() != tt.phase || c.CRD() != tt.crd || c.More() != tt.more || c.DNR() != tt.dnr ||
				c.SCT() != tt.status.SCT() || c.SC() != tt.status.SC() {
				t.Fatalf("round trip: %v phase %v crd %d more %v dnr %v", c.Status(), c.Phase(), c.CRD(), c.More(), c.DNR())
			}
			// Changing the status keeps the other bits.
			c.SetStatus(nvme.StatusSuccess)
			if c.Phase() != tt.phase || c.DNR() != tt.dnr || c.More() != tt.more || c.CRD() != tt.crd {
				t.Fatal("SetStatus changed phase, CRD, More or DNR")
			}
			err := c.Err()
			if err != nil {
				t.Fatalf("success Err() = %v", err)
			}
		})
	}
}

func TestCQEErrors(t *testing.T) {
	c := nvme.NewCQE()
	c.SetPhase(true)
	c.SetError(fmt.Errorf("write block 7: %w", &nvme.Error{Status: nvme.StatusLBAOutOfRange, DNR: true, CRD: 1}))
	if c.Status() != nvme.StatusLBAOutOfRange || !c.DNR() || c.CRD() != 1 || c.More() || !c.Phase() {
		t.Fatalf("SetError: %v", c)
	}
	err := c.Err()
	if !errors.Is(err, nvme.StatusLBAOutOfRange.Err()) || errors.Is(err, nvme.StatusInvalidField.Err()) {
		t.Fatalf("errors.Is(%v)", err)
	}
	if got := err.Error(); got != "nvme: LBA Out of Range (SCT 0 SC 0x80), DNR" {
		t.Errorf("Error() = %q", got)
	}
	var e *nvme.Error
	if !errors.As(err, &e) || e.Status != nvme.StatusLBAOutOfRange || !e.DNR || e.CRD != 1 {
		t.Errorf("errors.As: %+v", e)
	}
	c.SetError(errors.New("disk on fire"))
	if c.Status() != nvme.StatusInternalError || !c.DNR() {
		t.Errorf("plain error: %v", c)
	}
	c.SetError(nil)
	if c.StatusRaw() != 1 || c.Err() != nil {
		t.Errorf("nil error: status word %#x", c.StatusRaw())
	}
	if nvme.StatusOf(nil) != nvme.StatusSuccess || nvme.StatusOf(nvme.NewError(nvme.StatusAbortRequested, false)) != nvme.StatusAbortRequested ||
		nvme.StatusOf(errors.New("x")) != nvme.StatusInternalError || nvme.AsError(nil) != nil {
		t.Error("StatusOf / AsError")
	}
	if nvme.StatusSuccess.Err() != nil || !nvme.StatusSuccess.Success() || nvme.StatusInvalidField.Success() {
		t.Error("Success")
	}
	if _, err := nvme.ParseCQE(make([]byte, 15)); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("ParseCQE(15 bytes) = %v", err)
	}
	got, err := nvme.ParseCQE(make([]byte, 40))
	if err != nil || len(got) != 16 || cap(got) != 16 {
		t.Errorf("ParseCQE(40 bytes): len %d cap %d %v", len(got), cap(got), err)
	}
	if s := nvme.CQE(nil).String(); s != "CQE(0 bytes)" {
		t.Errorf("short String %q", s)
	}
	c.Clear()
	c.SetCID(5)
	c.SetStatus(nvme.StatusInvalidField)
	c.SetDNR(true)
	c.SetMore(true)
	c.SetCRD(1)
	if s := c.String(); s != "CQE{cid 5 sqid 0 sqhd 0 dw0 0x0 dw1 0x0 status Invalid Field in Command (SCT 0 SC 0x02) DNR More CRD 1}" {
		t.Errorf("String %q", s)
	}
}

func TestStatusString(t *testing.T) {
	tests := []struct {
		s    nvme.Status
		want string
	}{
		{nvme.StatusSuccess, "Successful Completion (SCT 0 SC 0x00)"},
		{nvme.StatusInvalidOpcode, "Invalid Command Opcode (SCT 0 SC 0x01)"},
		{nvme.StatusInvalidField, "Invalid Field in Command (SCT 0 SC 0x02)"},
		{nvme.StatusCommandIDConflict, "Command ID Conflict (SCT 0 SC 0x03)"},
		{nvme.StatusDataTransferError, "Data Transfer Error (SCT 0 SC 0x04)"},
		{nvme.StatusAbortedPowerLoss, "Commands Aborted due to Power Loss Notification (SCT 0 SC 0x05)"},
		{nvme.StatusInternalError, "Internal Error (SCT 0 SC 0x06)"},
		{nvme.StatusAbortRequested, "Command Abort Requested (SCT 0 SC 0x07)"},
		{nvme.StatusAbortSQDeletion, "Command Aborted due to SQ Deletion (SCT 0 SC 0x08)"},
		{nvme.StatusInvalidNamespaceOrFormat, "Invalid Namespace or Format (SCT 0 SC 0x0b)"},
		{nvme.StatusCommandSequenceError, "Command Sequence Error (SCT 0 SC 0x0c)"},
		{nvme.StatusInvalidSGLSegmentDescriptor, "Invalid SGL Segment Descriptor (SCT 0 SC 0x0d)"},
		{nvme.StatusInvalidNumberOfSGLDescriptors, "Invalid Number of SGL Descriptors (SCT 0 SC 0x0e)"},
		{nvme.StatusDataSGLLengthInvalid, "Data SGL Length Invalid (SCT 0 SC 0x0f)"},
		{nvme.StatusMetadataSGLLengthInvalid, "Metadata SGL Length Invalid (SCT 0 SC 0x10)"},
		{nvme.StatusSGLDescriptorTypeInvalid, "SGL Descriptor Type Invalid (SCT 0 SC 0x11)"},
		{nvme.StatusInvalidUseOfCMB, "Invalid Use of Controller Memory Buffer (SCT 0 SC 0x12)"},
		{nvme.StatusPRPOffsetInvalid, "PRP Offset Invalid (SCT 0 SC 0x13)"},
		{nvme.StatusSGLOffsetInvalid, "SGL Offset Invalid (SCT 0 SC 0x16)"},
		{nvme.StatusHostIdentifierInconsistentFormat, "Host Identifier Inconsistent Format (SCT 0 SC 0x18)"},
		{nvme.StatusKeepAliveTimerExpired, "Keep Alive Timer Expired (SCT 0 SC 0x19)"},
		{nvme.StatusKeepAliveTimeoutInvalid, "Keep Alive Timeout Invalid (SCT 0 SC 0x1a)"},
		{nvme.StatusNamespaceWriteProtected, "Namespace is Write Protected (SCT 0 SC 0x20)"},
		{nvme.StatusTransientTransportError, "Transient Transport Error (SCT 0 SC 0x22)"},
		{nvme.StatusLBAOutOfRange, "LBA Out of Range (SCT 0 SC 0x80)"},
		{nvme.StatusCapacityExceeded, "Capacity Exceeded (SCT 0 SC 0x81)"},
		{nvme.StatusNamespaceNotReady, "Namespace Not Ready (SCT 0 SC 0x82)"},
		{nvme.StatusReservationConflict, "Reservation Conflict (SCT 0 SC 0x83)"},
		{nvme.StatusInvalidQueueIdentifier, "Invalid Queue Identifier (SCT 1 SC 0x01)"},
		{nvme.StatusInvalidQueueSize, "Invalid Queue Size (SCT 1 SC 0x02)"},
		{nvme.StatusAbortCommandLimitExceeded, "Abort Command Limit Exceeded (SCT 1 SC 0x03)"},
		{nvme.StatusAsyncEventRequestLimitExceeded, "Asynchronous Event Request Limit Exceeded (SCT 1 SC 0x05)"},
		{nvme.StatusInvalidLogPage, "Invalid Log Page (SCT 1 SC 0x09)"},
		{nvme.StatusInvalidFormat, "Invalid Format (SCT 1 SC 0x0a)"},
		{nvme.StatusFeatureNotSaveable, "Feature Identifier Not Saveable (SCT 1 SC 0x0d)"},
		{nvme.StatusFeatureNotChangeable, "Feature Not Changeable (SCT 1 SC 0x0e)"},
		{nvme.StatusFeatureNotNamespaceSpecific, "Feature Not Namespace Specific (SCT 1 SC 0x0f)"},
		{nvme.StatusANAGroupIdentifierInvalid, "ANA Group Identifier Invalid (SCT 1 SC 0x24)"},
		{nvme.StatusConflictingAttributes, "Conflicting Attributes or Connect Incompatible Format (SCT 1 SC 0x80)"},
		{nvme.MakeStatus(nvme.SCTCommandSpecific, 0x84), "Connect Invalid Host (SCT 1 SC 0x84)"},
		{nvme.MakeStatus(nvme.SCTCommandSpecific, 0x90), "Discover Restart (SCT 1 SC 0x90)"},
		{nvme.MakeStatus(nvme.SCTCommandSpecific, 0x91), "Authentication Required (SCT 1 SC 0x91)"},
		{nvme.StatusWriteFault, "Write Fault (SCT 2 SC 0x80)"},
		{nvme.StatusUnrecoveredReadError, "Unrecovered Read Error (SCT 2 SC 0x81)"},
		{nvme.StatusCompareFailure, "Compare Failure (SCT 2 SC 0x85)"},
		{nvme.StatusAccessDenied, "Access Denied (SCT 2 SC 0x86)"},
		{nvme.StatusDeallocatedOrUnwrittenBlock, "Deallocated or Unwritten Logical Block (SCT 2 SC 0x87)"},
		{nvme.StatusInternalPathError, "Internal Path Error (SCT 3 SC 0x00)"},
		{nvme.StatusANAInaccessible, "Asymmetric Access Inaccessible (SCT 3 SC 0x02)"},
		{nvme.StatusHostPathingError, "Host Pathing Error (SCT 3 SC 0x70)"},
		{nvme.MakeStatus(nvme.SCTGeneric, 0x17), "Unknown Status (SCT 0 SC 0x17)"},
		{nvme.MakeStatus(nvme.SCTCommandSpecific, 0xa0), "Unknown I/O Command Set Specific Status (SCT 1 SC 0xa0)"},
		{nvme.MakeStatus(nvme.SCTMediaError, 0xc5), "Vendor Specific (SCT 2 SC 0xc5)"},
		{nvme.MakeStatus(nvme.SCTVendorSpecific, 0x01), "Vendor Specific (SCT 7 SC 0x01)"},
		{nvme.MakeStatus(5, 0x01), "Reserved Status Code Type (SCT 5 SC 0x01)"},
		{0xffff, "Vendor Specific (SCT 7 SC 0xff)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%#x: %q, want %q", uint16(tt.s), got, tt.want)
		}
	}
	// Linux's NVME_SC_* values are SCT<<8 | SC.
	linux := map[nvme.Status]uint16{
		nvme.StatusInvalidField: 0x2, nvme.StatusInvalidNamespaceOrFormat: 0xb, nvme.StatusKeepAliveTimerExpired: 0x19,
		nvme.StatusInvalidQueueIdentifier: 0x101, nvme.StatusInvalidLogPage: 0x109, nvme.StatusANAAttachFailed: 0x125,
		nvme.StatusWriteToReadOnlyRange: 0x182, nvme.StatusWriteFault: 0x280, nvme.StatusDeallocatedOrUnwrittenBlock: 0x287,
		nvme.StatusANATransition: 0x303, nvme.StatusHostPathingError: 0x370,
	}
	for s, v := range linux {
		if uint16(s) != v {
			t.Errorf("%v = %#x, Linux has %#x", s, uint16(s), v)
		}
	}
	for sct, name := range map[nvme.StatusCodeType]string{0: "Generic Command Status", 1: "Command Specific Status",
		2: "Media and Data Integrity Errors", 3: "Path Related Status", 7: "Vendor Specific", 4: "Reserved SCT 4"} {
		if sct.String() != name {
			t.Errorf("SCT %d: %q", sct, sct.String())
		}
	}
}
