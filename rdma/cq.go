package rdma

import (
	"context"
	"fmt"
)

// CQ is a completion queue. Poll and Wait may be called from any
// goroutine; completions of one work queue are delivered in the order the
// verbs define (send completions in posting order, receive completions in
// arrival order).
//
// Two ways to wait: Wait blocks until the queue is not empty; Notify
// returns a channel that receives a token (it is buffered with capacity 1)
// after completions were added. A consumer polls until Poll returns 0
// and only then waits, so that no completion is missed. Use one of the
// two per CQ, not both.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns their number.
	// It does not allocate and never blocks.
	Poll(wc []WorkCompletion) int
	// Wait blocks until at least one completion is queued, ctx is done or
	// the CQ is destroyed.
	Wait(ctx context.Context) error
	// Notify returns the notification channel.
	Notify() <-chan struct{}
	// Destroy releases the CQ; it fails with ErrBusy while QPs use it.
	Destroy() error
}

// HandlerCQ is a CQ whose provider runs the consumer's completion handler
// itself, on the goroutine that produced the completions, instead of
// queueing them for Poll: the completion context of a kernel ib_cq polled
// with IB_POLL_DIRECT or IB_POLL_SOFTIRQ, where the consumer's done
// callback runs in the provider's own context. It saves the goroutine
// hand-off of Notify and a poll loop per CQ.
type HandlerCQ interface {
	CQ
	// SetHandler makes the provider call h with the completions, in
	// completion order, a batch at a time (wcs is valid during the call
	// only) and one call at a time, on whatever goroutine produced them:
	// the provider's receive goroutine at the end of a batch, a timer's,
	// or the caller of a verb (PostSend, PostRecv, Modify) that completed
	// work, after the verb released its locks. No provider lock is held
	// while h runs, so h may post work requests (their completions are
	// delivered after h returns, never by a nested call); a consumer can
	// collect the work a batch produces and post it as one chain before
	// returning. h must not block: the receive goroutine of the whole
	// device may be the one running it. With a handler set, Poll and
	// Wait see nothing and Notify never fires.
	//
	// SetHandler(nil) removes the handler and returns once no call of the
	// old one is running (it must not be called from the handler);
	// later completions queue for Poll again.
	SetHandler(h func(wcs []WorkCompletion))
}

// WorkCompletion is one entry of a completion queue (struct ibv_wc).
type WorkCompletion struct {
	WRID    uint64   // the work request's WRID
	Status  WCStatus // Success, or why the request failed
	Opcode  WCOpcode // valid when Status is Success
	Flags   WCFlags  // which optional fields are valid
	ByteLen uint32   // bytes received (receives; includes the 40-byte GRH on UD), or the message length
	// Imm is the immediate data, as the big-endian number on the wire
	// (valid with WCWithImm).
	Imm uint32
	// InvalidatedRKey is the rkey a SEND with Invalidate invalidated (valid with WCWithInvalidate).
	InvalidatedRKey uint32
	QPN             uint32 // the local QP the work request belonged to
	SrcQP           uint32 // the sender's QP (UD receives)
	PKeyIndex       uint16 // the P_Key index (UD receives)
	VendorErr       uint32 // provider-specific error detail
}

// WCFlags marks the optional fields of a WorkCompletion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags.
const (
	WCGRH            WCFlags = 1 << 0 // the receive buffer starts with a 40-byte GRH (UD)
	WCWithImm        WCFlags = 1 << 1 // Imm is valid
	WCWithInvalidate WCFlags = 1 << 3 // InvalidatedRKey is valid
)

// WCOpcode is the kind of operation that completed (enum ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128 // a SEND was received
	WCRecvRDMAWithImm WCOpcode = 129 // an RDMA WRITE with immediate consumed a receive
)

// String names the opcode.
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCStatus is the outcome of a work request (enum ibv_wc_status).
type WCStatus uint8

// Completion status values, in libibverbs' numbering.
const (
	Success                   WCStatus = 0  // the operation completed
	LocalLengthError          WCStatus = 1  // a receive buffer was too small, or a message exceeded the limits
	LocalQPOperationError     WCStatus = 2  // an internal QP consistency error (malformed WR)
	LocalEECOperationError    WCStatus = 3  // (RD only)
	LocalProtectionError      WCStatus = 4  // an SGE names an invalid lkey, lies outside its MR or lacks LocalWrite
	WRFlushError              WCStatus = 5  // the QP was in the error state; the WR was not executed
	MemoryWindowBindError     WCStatus = 6  // a memory window bind failed
	BadResponseError          WCStatus = 7  // the responder sent an unexpected transport opcode
	LocalAccessError          WCStatus = 8  // a protection error on a local buffer of an incoming RDMA operation
	RemoteInvalidRequestError WCStatus = 9  // the responder NAKed the request as invalid
	RemoteAccessError         WCStatus = 10 // the responder NAKed the request: rkey, bounds or access rights
	RemoteOperationError      WCStatus = 11 // the responder could not complete the operation
	RetryExceeded             WCStatus = 12 // no acknowledgement after the retry count was exhausted
	RNRRetryExceeded          WCStatus = 13 // the responder stayed receiver-not-ready past the RNR retry count
	LocalRDDViolationError    WCStatus = 14 // (RD only)
	RemoteInvalidRDRequest    WCStatus = 15 // (RD only)
	RemoteAbortedError        WCStatus = 16 // the responder aborted the operation
	InvalidEECN               WCStatus = 17 // (RD only)
	InvalidEECState           WCStatus = 18 // (RD only)
	FatalError                WCStatus = 19 // the device failed
	ResponseTimeoutError      WCStatus = 20 // a response timed out
	GeneralError              WCStatus = 21 // any other error
)

var wcStatusNames = [...]string{
	Success:                   "success",
	LocalLengthError:          "local length error",
	LocalQPOperationError:     "local QP operation error",
	LocalEECOperationError:    "local EE context operation error",
	LocalProtectionError:      "local protection error",
	WRFlushError:              "Work Request Flushed Error",
	MemoryWindowBindError:     "memory management operation error",
	BadResponseError:          "bad response error",
	LocalAccessError:          "local access error",
	RemoteInvalidRequestError: "remote invalid request error",
	RemoteAccessError:         "remote access error",
	RemoteOperationError:      "remote operation error",
	RetryExceeded:             "transport retry counter exceeded",
	RNRRetryExceeded:          "RNR retry counter exceeded",
	LocalRDDViolationError:    "local RDD violation error",
	RemoteInvalidRDRequest:    "remote invalid RD request",
	RemoteAbortedError:        "aborted error",
	InvalidEECN:               "invalid EE context number",
	InvalidEECState:           "invalid EE context state",
	FatalError:                "fatal error",
	ResponseTimeoutError:      "response timeout error",
	GeneralError:              "general error",
}

// String returns libibverbs' ibv_wc_status_str text for the status.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Err returns nil for Success and a *WCError otherwise, for code that
// wants to treat a failed completion as a Go error.
func (wc *WorkCompletion) Err() error {
	if wc.Status == Success {
		return nil
	}
	return &WCError{Status: wc.Status, WRID: wc.WRID, QPN: wc.QPN}
}

// WCError is a failed work completion as an error.
type WCError struct {
	Status WCStatus
	WRID   uint64
	QPN    uint32
}

// Error describes the failure.
func (e *WCError) Error() string {
	return fmt.Sprintf("rdma: QP %#x WR %#x: %s", e.QPN, e.WRID, e.Status)
}
