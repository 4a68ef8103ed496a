package rdma

import (
	"fmt"
	"time"
)

// QPType is the transport service of a queue pair.
type QPType uint8

// Queue pair types.
const (
	QPTypeRC  QPType = 2 // Reliable Connection (IBV_QPT_RC)
	QPTypeUC  QPType = 3 // Unreliable Connection (IBV_QPT_UC)
	QPTypeUD  QPType = 4 // Unreliable Datagram (IBV_QPT_UD)
	QPTypeGSI QPType = 1 // the General Services Interface QP, QP number 1 (IB_QPT_GSI): UD for MADs
)

// String names the QP type.
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeGSI:
		return "GSI"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair state (enum ibv_qp_state).
//
// Transitions (Modify): Reset→Init, Init→Init, Init→RTR, RTR→RTS,
// RTS→RTS, RTS→SQD, SQD→SQD, SQD→RTS, any→Err, any→Reset. A QP enters Err
// on its own after a fatal completion error; outstanding and later work
// requests then complete with WRFlushError.
type QPState uint8

// Queue pair states.
const (
	QPSReset QPState = 0 // just created or reset: no work is processed
	QPSInit  QPState = 1 // receives may be posted, none are processed
	QPSRTR   QPState = 2 // ready to receive: the responder runs
	QPSRTS   QPState = 3 // ready to send: the requester runs too
	QPSSQD   QPState = 4 // send queue drained: no new send WR starts
	QPSSQE   QPState = 5 // send queue error (UD only)
	QPSErr   QPState = 6 // error: all work requests are flushed
)

// String names the state as ibv_qp_state does ("RESET", "RTS", ...).
func (s QPState) String() string {
	switch s {
	case QPSReset:
		return "RESET"
	case QPSInit:
		return "INIT"
	case QPSRTR:
		return "RTR"
	case QPSRTS:
		return "RTS"
	case QPSSQD:
		return "SQD"
	case QPSSQE:
		return "SQE"
	case QPSErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// CanTransition reports whether the verbs allow Modify from state cur to
// next (see QPState), for providers that check before the device does.
func CanTransition(cur, next QPState) bool {
	if next == QPSReset || next == QPSErr {
		return true
	}
	switch cur {
	case QPSReset:
		return next == QPSInit
	case QPSInit:
		return next == QPSInit || next == QPSRTR
	case QPSRTR:
		return next == QPSRTS
	case QPSRTS:
		return next == QPSRTS || next == QPSSQD
	case QPSSQD:
		return next == QPSSQD || next == QPSRTS
	case QPSSQE:
		return next == QPSRTS
	}
	return false
}

// QPCap sizes a queue pair's work queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int // send work requests outstanding at once
	MaxRecvWR     int // receive work requests outstanding at once
	MaxSendSGE    int // SGEs per send work request
	MaxRecvSGE    int // SGEs per receive work request
	MaxInlineData int // bytes a SEND with SendInline may carry
}

// QPInitAttr describes a queue pair to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ CQ // completions of send work requests
	RecvCQ CQ // completions of receive work requests
	Cap    QPCap
	// SigAll makes every send work request signaled, as if each had SendSignaled.
	SigAll bool
	// SRQ, if set, is the shared receive queue (of the same PD) the QP
	// takes its receives from: it has no receive queue of its own (Cap's
	// MaxRecvWR and MaxRecvSGE are ignored) and PostRecv fails.
	SRQ SRQ
}

// AH is an address vector: where a QP's packets go (struct ibv_ah_attr
// with its GRH). On RoCEv2 only the destination GID matters; the rest is
// carried for completeness.
type AH struct {
	DGID         GID    // the peer's GID (its IP address)
	SGIDIndex    uint8  // index of the local GID to send from
	FlowLabel    uint32 // IPv6 flow label (RoCEv2 derives the UDP source port from it)
	HopLimit     uint8  // IP TTL / hop limit; 0 means the provider's default
	TrafficClass uint8  // IP TOS / traffic class
}

// QPAttr holds the attributes Modify sets and Query returns (struct
// ibv_qp_attr). Which fields Modify applies is given by a QPAttrMask.
type QPAttr struct {
	State           QPState
	CurState        QPState // Query only: the current state
	AccessFlags     Access  // remote operations the responder accepts (RemoteWrite, RemoteRead, RemoteAtomic)
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32 // UD: the Q_Key checked on receive and used when a WR's RemoteQKey has its top bit set
	AH              AH     // RC: the peer's address
	PathMTU         MTU
	Timeout         uint8  // local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite (see TimeoutDuration)
	RetryCount      uint8  // transport retries after a timeout or NAK sequence error (0..7)
	RNRRetry        uint8  // retries after an RNR NAK (0..7; 7 = infinite)
	RQPSN           uint32 // the first PSN the responder expects
	SQPSN           uint32 // the first PSN the requester sends
	MaxRdAtomic     uint8  // RDMA READs/atomics outstanding as requester (initiator depth)
	MaxDestRdAtomic uint8  // RDMA READs/atomics accepted as responder (responder resources)
	MinRNRTimer     uint8  // the RNR NAK timer code this QP's responder advertises (see RNRTimerDuration)
	DestQPN         uint32 // RC: the peer's QP number
	Cap             QPCap  // Query only
}

// QPAttrMask selects the QPAttr fields Modify applies (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCount      QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxRdAtomic     QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// QP is a queue pair. PostSend and PostRecv may be called concurrently
// with each other and with completion processing; they do not allocate.
type QP interface {
	// QPN returns the queue pair number.
	QPN() uint32
	// Type returns the transport service.
	Type() QPType
	// State returns the current state.
	State() QPState
	// Modify changes the attributes selected by mask, usually with a state
	// transition (QPAttrState). Required attributes per transition follow
	// the verbs: Reset→Init: PKeyIndex, Port, AccessFlags (UD: QKey);
	// Init→RTR (RC): AV, PathMTU, DestQPN, RQPSN, MaxDestRdAtomic,
	// MinRNRTimer; RTR→RTS (RC): SQPSN, Timeout, RetryCount, RNRRetry,
	// MaxRdAtomic (UD: SQPSN).
	Modify(attr *QPAttr, mask QPAttrMask) error
	// Query fills attr with the current attributes.
	Query(attr *QPAttr) error
	// PostSend queues a chain of send work requests (linked by Next). It
	// copies what it needs: the caller may reuse the structs (and, with
	// SendInline, the data) as soon as it returns. On error, the requests
	// before the failing one were posted; the error is a *PostError.
	PostSend(wr *SendWR) error
	// PostRecv queues a chain of receive work requests (linked by Next),
	// with the same rules as PostSend.
	PostRecv(wr *RecvWR) error
	// Destroy releases the QP. Its outstanding work requests are dropped
	// without completions.
	Destroy() error
}

// PostError reports which work request of a chain was not posted.
type PostError struct {
	Index int   // position of the failing request in the chain
	Err   error // why: wraps ErrQueueFull, ErrInvalidState, ErrInvalidArgument, ...
}

// Error describes the failure.
func (e *PostError) Error() string {
	return fmt.Sprintf("rdma: post: work request %d: %v", e.Index, e.Err)
}

// Unwrap returns the cause.
func (e *PostError) Unwrap() error { return e.Err }

// TimeoutDuration converts a local ACK timeout code to a duration:
// 4.096 µs × 2^code; code 0 means no timeout and returns 0.
func TimeoutDuration(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	if code > 31 {
		code = 31
	}
	return time.Duration(4096<<code) * time.Nanosecond
}

// rnrTimerMicros holds the RNR NAK timer values in µs (IBA vol. 1 table 45);
// code 0 is the longest, 655.36 ms.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration converts an RNR NAK timer code (0..31) to the time a
// requester waits before retrying.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&31]) * time.Microsecond
}
