package nvme

import (
	"encoding/binary"
	"fmt"
)

// ReservationType is a reservation type (RTYPE; NVMe Base 2.0,
// "Reservations").
type ReservationType uint8

// Reservation types.
const (
	ResvWriteExclusive         ReservationType = 1
	ResvExclusiveAccess        ReservationType = 2
	ResvWriteExclusiveRegOnly  ReservationType = 3
	ResvExclusiveAccessRegOnly ReservationType = 4
	ResvWriteExclusiveAllRegs  ReservationType = 5
	ResvExclusiveAccessAllRegs ReservationType = 6
	resvTypeMax                ReservationType = ResvExclusiveAccessAllRegs
	resvTypeNone               ReservationType = 0
	_                                          = resvTypeNone
)

// Valid reports whether t is one of the six reservation types.
func (t ReservationType) Valid() bool { return t >= ResvWriteExclusive && t <= resvTypeMax }

// AllRegistrants reports whether every registrant holds a reservation of
// type t (the All Registrants types).
func (t ReservationType) AllRegistrants() bool {
	return t == ResvWriteExclusiveAllRegs || t == ResvExclusiveAccessAllRegs
}

// RegistrantsOnly reports whether t is a Registrants Only type.
func (t ReservationType) RegistrantsOnly() bool {
	return t == ResvWriteExclusiveRegOnly || t == ResvExclusiveAccessRegOnly
}

// ExclusiveAccess reports whether t restricts reads as well as writes.
func (t ReservationType) ExclusiveAccess() bool {
	return t == ResvExclusiveAccess || t == ResvExclusiveAccessRegOnly || t == ResvExclusiveAccessAllRegs
}

// String returns the type as nvme-cli prints it in resv-report.
func (t ReservationType) String() string {
	switch t {
	case 0:
		return "Reservation not held"
	case ResvWriteExclusive:
		return "Write Exclusive"
	case ResvExclusiveAccess:
		return "Exclusive Access"
	case ResvWriteExclusiveRegOnly:
		return "Write Exclusive - Registrants Only"
	case ResvExclusiveAccessRegOnly:
		return "Exclusive Access - Registrants Only"
	case ResvWriteExclusiveAllRegs:
		return "Write Exclusive - All Registrants"
	case ResvExclusiveAccessAllRegs:
		return "Exclusive Access - All Registrants"
	}
	return "Reserved"
}

// Reservation Register actions (RREGA, CDW10 bits 2:0).
const (
	ResvRegister   = 0
	ResvUnregister = 1
	ResvReplace    = 2
)

// Reservation Acquire actions (RACQA, CDW10 bits 2:0).
const (
	ResvAcquire         = 0
	ResvPreempt         = 1
	ResvPreemptAndAbort = 2
)

// Reservation Release actions (RRELA, CDW10 bits 2:0).
const (
	ResvRelease = 0
	ResvClear   = 1
)

// Change Persist Through Power Loss State values (CPTPL, Reservation
// Register CDW10 bits 31:30).
const (
	CPTPLNoChange = 0
	CPTPLClear    = 2
	CPTPLSet      = 3
)

// Reservation Capabilities bits (RESCAP, Identify Namespace byte 31).
const (
	RESCAPPTPL                   = 1 << 0
	RESCAPWriteExclusive         = 1 << 1
	RESCAPExclusiveAccess        = 1 << 2
	RESCAPWriteExclusiveRegOnly  = 1 << 3
	RESCAPExclusiveAccessRegOnly = 1 << 4
	RESCAPWriteExclusiveAllRegs  = 1 << 5
	RESCAPExclusiveAccessAllRegs = 1 << 6
	// RESCAPIEKEY13: Ignore Existing Key behaves as NVMe 1.3 and later
	// define it.
	RESCAPIEKEY13 = 1 << 7
)

// Reservation Notification Mask feature bits (FID 82h, CDW11): a set bit
// masks the notification.
const (
	ResvMaskRegistrationPreempted = 1 << 1 // REGPRE
	ResvMaskReservationReleased   = 1 << 2 // RESREL
	ResvMaskReservationPreempted  = 1 << 3 // RESPRE
	ResvMaskAll                   = ResvMaskRegistrationPreempted | ResvMaskReservationReleased | ResvMaskReservationPreempted
)

// ResvPersistencePTPL is the Persist Through Power Loss bit of the
// Reservation Persistence feature (FID 83h, CDW11 bit 0).
const ResvPersistencePTPL = 1 << 0

// ReservationCommand views an SQE as a Reservation Register (0Dh),
// Acquire (11h) or Release (15h) command:
//
//	CDW10  bits 2:0 the action (RREGA, RACQA, RRELA), bit 3 IEKEY,
//	       bits 15:8 RTYPE (Acquire, Release), bits 31:30 CPTPL (Register)
//
// The data is a ReservationData of 16 bytes (Register, Acquire) or 8
// bytes (Release).
type ReservationCommand struct{ SQE }

// Action returns the action (CDW10 bits 2:0).
func (c ReservationCommand) Action() uint8 { return uint8(c.CDW10() & 7) }

// SetAction sets the action.
func (c ReservationCommand) SetAction(a uint8) { c.SetCDW10(setBits(c.CDW10(), 2, 0, uint32(a))) }

// IEKEY returns Ignore Existing Key (CDW10 bit 3).
func (c ReservationCommand) IEKEY() bool { return c.CDW10()&8 != 0 }

// SetIEKEY sets Ignore Existing Key.
func (c ReservationCommand) SetIEKEY(on bool) { c.SetCDW10(setBit(c.CDW10(), 3, on)) }

// RTYPE returns the Reservation Type (CDW10 bits 15:8).
func (c ReservationCommand) RTYPE() ReservationType { return ReservationType(c.CDW10() >> 8) }

// SetRTYPE sets the Reservation Type.
func (c ReservationCommand) SetRTYPE(t ReservationType) {
	c.SetCDW10(setBits(c.CDW10(), 15, 8, uint32(t)))
}

// CPTPL returns Change Persist Through Power Loss State (CDW10 bits 31:30).
func (c ReservationCommand) CPTPL() uint8 { return uint8(c.CDW10() >> 30) }

// SetCPTPL sets Change Persist Through Power Loss State.
func (c ReservationCommand) SetCPTPL(v uint8) { c.SetCDW10(setBits(c.CDW10(), 31, 30, uint32(v))) }

// Sizes of the reservation command data.
const (
	ResvRegisterDataSize = 16 // CRKEY, NRKEY
	ResvAcquireDataSize  = 16 // CRKEY, PRKEY
	ResvReleaseDataSize  = 8  // CRKEY
)

// ReservationData views the data of Reservation Register, Acquire and
// Release: bytes 7:0 the Current Reservation Key (CRKEY), bytes 15:8 the
// New Reservation Key (NRKEY, Register) or the Preempt Reservation Key
// (PRKEY, Acquire). Release carries CRKEY only.
type ReservationData []byte

// CRKEY returns the Current Reservation Key.
func (d ReservationData) CRKEY() uint64 { return binary.LittleEndian.Uint64(d) }

// SetCRKEY sets the Current Reservation Key.
func (d ReservationData) SetCRKEY(k uint64) { binary.LittleEndian.PutUint64(d, k) }

// NRKEY returns the New Reservation Key (Register).
func (d ReservationData) NRKEY() uint64 { return binary.LittleEndian.Uint64(d[8:]) }

// SetNRKEY sets the New Reservation Key.
func (d ReservationData) SetNRKEY(k uint64) { binary.LittleEndian.PutUint64(d[8:], k) }

// PRKEY returns the Preempt Reservation Key (Acquire).
func (d ReservationData) PRKEY() uint64 { return binary.LittleEndian.Uint64(d[8:]) }

// SetPRKEY sets the Preempt Reservation Key.
func (d ReservationData) SetPRKEY(k uint64) { binary.LittleEndian.PutUint64(d[8:], k) }

// ReservationReportCommand views an SQE as Reservation Report (0Eh):
// CDW10 NUMD (0's based dwords), CDW11 bit 0 EDS (extended data
// structure, 128-bit host identifiers).
type ReservationReportCommand struct{ SQE }

// Length returns the data length in bytes ((NUMD+1) * 4).
func (c ReservationReportCommand) Length() uint64 { return (uint64(c.CDW10()) + 1) * 4 }

// SetLength sets NUMD for a data length of n bytes (a multiple of 4, at
// least 4).
func (c ReservationReportCommand) SetLength(n uint32) { c.SetCDW10(n/4 - 1) }

// EDS returns the Extended Data Structure bit (CDW11 bit 0).
func (c ReservationReportCommand) EDS() bool { return c.CDW11()&1 != 0 }

// SetEDS sets the Extended Data Structure bit.
func (c ReservationReportCommand) SetEDS(on bool) { c.SetCDW11(setBit(c.CDW11(), 0, on)) }

// Sizes of the Reservation Status data structure.
const (
	ResvStatusHeaderSize    = 24 // GEN (4), RTYPE (1), REGCTL (2), reserved (2), PTPLS (1), reserved (14)
	ResvStatusExtHeaderSize = 64 // the header, then 40 reserved bytes
	ResvRegCtrlSize         = 24 // CNTLID (2), RCSTS (1), reserved (5), HOSTID (8), RKEY (8)
	ResvRegCtrlExtSize      = 64 // CNTLID (2), RCSTS (1), reserved (5), RKEY (8), HOSTID (16), reserved (32)
)

// RegisteredController is one registrant of a Reservation Status data
// structure.
type RegisteredController struct {
	CNTLID uint16 // FFFFh: dynamic controller model
	// Holder is RCSTS bit 0: this registrant holds the reservation.
	Holder bool
	// HostID is the host identifier; the 64-bit layout keeps the first
	// 8 bytes.
	HostID [16]byte
	RKEY   uint64
}

// ReservationStatus is the Reservation Status data structure Reservation
// Report returns.
type ReservationStatus struct {
	Generation  uint32          // GEN
	Type        ReservationType // RTYPE (0: none held)
	PTPLS       bool            // Persist Through Power Loss State
	Registrants int             // REGCTL (may exceed len(Controllers) when the buffer was short)
	Controllers []RegisteredController
}

// AppendBinary appends the structure to b, in the extended layout (EDS)
// or the 64-bit host identifier one.
func (s ReservationStatus) AppendBinary(b []byte, eds bool) []byte {
	var h [ResvStatusExtHeaderSize]byte
	binary.LittleEndian.PutUint32(h[0:], s.Generation)
	h[4] = uint8(s.Type)
	binary.LittleEndian.PutUint16(h[5:], uint16(min(s.Registrants, 0xffff)))
	if s.PTPLS {
		h[9] = 1
	}
	if eds {
		b = append(b, h[:]...)
	} else {
		b = append(b, h[:ResvStatusHeaderSize]...)
	}
	for _, c := range s.Controllers {
		var e [ResvRegCtrlExtSize]byte
		binary.LittleEndian.PutUint16(e[0:], c.CNTLID)
		if c.Holder {
			e[2] = 1
		}
		if eds {
			binary.LittleEndian.PutUint64(e[8:], c.RKEY)
			copy(e[16:32], c.HostID[:])
			b = append(b, e[:]...)
		} else {
			copy(e[8:16], c.HostID[:8])
			binary.LittleEndian.PutUint64(e[16:], c.RKEY)
			b = append(b, e[:ResvRegCtrlSize]...)
		}
	}
	return b
}

// ParseReservationStatus decodes a Reservation Status data structure in
// the extended layout (eds) or the 64-bit one. Registrants past the end of
// b (a short report buffer) are not decoded; Registrants still says how
// many there are.
func ParseReservationStatus(b []byte, eds bool) (ReservationStatus, error) {
	hdr, ent := ResvStatusHeaderSize, ResvRegCtrlSize
	if eds {
		hdr, ent = ResvStatusExtHeaderSize, ResvRegCtrlExtSize
	}
	if err := need("reservation status", b, hdr); err != nil {
		return ReservationStatus{}, err
	}
	s := ReservationStatus{
		Generation:  binary.LittleEndian.Uint32(b),
		Type:        ReservationType(b[4]),
		Registrants: int(binary.LittleEndian.Uint16(b[5:])),
		PTPLS:       b[9]&1 != 0,
	}
	n := min(s.Registrants, (len(b)-hdr)/ent)
	s.Controllers = make([]RegisteredController, n)
	for i := range n {
		e := b[hdr+i*ent:]
		c := &s.Controllers[i]
		c.CNTLID = binary.LittleEndian.Uint16(e)
		c.Holder = e[2]&1 != 0
		if eds {
			c.RKEY = binary.LittleEndian.Uint64(e[8:])
			copy(c.HostID[:], e[16:32])
		} else {
			copy(c.HostID[:8], e[8:16])
			c.RKEY = binary.LittleEndian.Uint64(e[16:])
		}
	}
	return s, nil
}

// ResvNotificationType is the Reservation Notification Log Page Type.
type ResvNotificationType uint8

// Reservation notification types.
const (
	ResvNotifEmpty                 ResvNotificationType = 0
	ResvNotifRegistrationPreempted ResvNotificationType = 1
	ResvNotifReservationReleased   ResvNotificationType = 2
	ResvNotifReservationPreempted  ResvNotificationType = 3
)

// String returns the notification type's name.
func (t ResvNotificationType) String() string {
	switch t {
	case ResvNotifEmpty:
		return "Empty Log Page"
	case ResvNotifRegistrationPreempted:
		return "Registration Preempted"
	case ResvNotifReservationReleased:
		return "Reservation Released"
	case ResvNotifReservationPreempted:
		return "Reservation Preempted"
	}
	return fmt.Sprintf("ResvNotificationType(%d)", uint8(t))
}

// ResvNotificationLogSize is the size of the Reservation Notification log
// page (LID 80h).
const ResvNotificationLogSize = 64

// AER information of the reservation notification (Asynchronous Event
// Type I/O Command Specific Status, 6h; information 0h: Reservation Log
// Page Available).
const (
	AERTypeIOCommandSpecific = 6
	AERInfoResvLogAvailable  = 0
)

// ResvNotificationLog views the Reservation Notification log page: bytes
// 7:0 Log Page Count, 8 the type, 9 Number of Available Log Pages, 15:12
// the NSID.
type ResvNotificationLog []byte

// ParseResvNotificationLog checks that b holds a whole log page.
func ParseResvNotificationLog(b []byte) (ResvNotificationLog, error) {
	if err := need("reservation notification log", b, ResvNotificationLogSize); err != nil {
		return nil, err
	}
	return ResvNotificationLog(b[:ResvNotificationLogSize]), nil
}

// Count returns the Log Page Count.
func (l ResvNotificationLog) Count() uint64 { return binary.LittleEndian.Uint64(l) }

// SetCount sets the Log Page Count.
func (l ResvNotificationLog) SetCount(n uint64) { binary.LittleEndian.PutUint64(l, n) }

// Type returns the Reservation Notification Log Page Type.
func (l ResvNotificationLog) Type() ResvNotificationType { return ResvNotificationType(l[8]) }

// SetType sets the Reservation Notification Log Page Type.
func (l ResvNotificationLog) SetType(t ResvNotificationType) { l[8] = uint8(t) }

// Available returns the Number of Available Log Pages (after this one).
func (l ResvNotificationLog) Available() uint8 { return l[9] }

// SetAvailable sets the Number of Available Log Pages.
func (l ResvNotificationLog) SetAvailable(n uint8) { l[9] = n }

// NSID returns the namespace the notification is about.
func (l ResvNotificationLog) NSID() uint32 { return binary.LittleEndian.Uint32(l[12:]) }

// SetNSID sets the namespace.
func (l ResvNotificationLog) SetNSID(nsid uint32) { binary.LittleEndian.PutUint32(l[12:], nsid) }
