package initiator

import (
	"errors"
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// Errors callers can test with errors.Is.
var (
	// ErrTimeout is wrapped by every command timeout (a *TimeoutError).
	ErrTimeout = errors.New("command timed out")
	// ErrControllerLost is returned for I/O once the host gave up
	// reconnecting (CtrlLossTimeout expired).
	ErrControllerLost = errors.New("controller lost: ctrl-loss-tmo expired")
	// ErrClosed is returned for work on a controller after Disconnect.
	ErrClosed = errors.New("controller disconnected")
	// ErrUnreachable is wrapped by Connect and Discover when the transport
	// could not open a queue to the address.
	ErrUnreachable = errors.New("target unreachable")
	// ErrNotSupported is returned for a command the controller does not
	// support (Identify Controller ONCS says so).
	ErrNotSupported = errors.New("not supported by the controller")
	// ErrDiscoveryTooLarge is wrapped by DiscoveryLog when the controller
	// reports more records than Options.MaxDiscoveryRecords.
	ErrDiscoveryTooLarge = errors.New("discovery log too large")
)

// errQueueReset is how a command that was outstanding on a queue the host
// tore down (or that failed in the transport) completes internally; I/O
// commands are retried once the controller is live again.
var errQueueReset = errors.New("queue reset")

// TimeoutError is a command that did not complete within CommandTimeout.
type TimeoutError struct {
	Op    string // the command, e.g. "Read"
	QID   uint16
	CID   uint16
	After time.Duration // the timeout that expired
}

// Error describes the timeout.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("initiator: %s (qid %d cid %d) timed out after %v", e.Op, e.QID, e.CID, e.After)
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Timeout reports true, as net.Error does.
func (e *TimeoutError) Timeout() bool { return true }

// ConnectTimeoutError is a queue whose transport connect (the RDMA CM
// exchange) got no answer within Options.ConnectTimeout while the
// caller's context still had time. Connect wraps it with ErrUnreachable.
type ConnectTimeoutError struct {
	QID   uint16
	After time.Duration // Options.ConnectTimeout
}

// Error says which timeout expired.
func (e *ConnectTimeoutError) Error() string {
	return fmt.Sprintf("queue %d: no answer to the transport connect within %v (the connect timeout of a queue, as Linux's)", e.QID, e.After)
}

// Timeout reports true, as net.Error does.
func (e *ConnectTimeoutError) Timeout() bool { return true }

// CommandError is a command the controller completed with an error status.
// errors.As(err, new(*nvme.Error)) yields the status.
type CommandError struct {
	Op   string // the command, e.g. "Read" or "Identify"
	QID  uint16
	NSID uint32
	Err  *nvme.Error
}

// Error returns a one-line description with the status.
func (e *CommandError) Error() string {
	if e.NSID != 0 && e.NSID != nvme.NSIDAll {
		return fmt.Sprintf("initiator: %s nsid %d: %v", e.Op, e.NSID, e.Err)
	}
	return fmt.Sprintf("initiator: %s: %v", e.Op, e.Err)
}

// Unwrap returns the *nvme.Error.
func (e *CommandError) Unwrap() error { return e.Err }

// ConnectError is a Fabrics Connect command the controller refused.
type ConnectError struct {
	Addr    fabrics.Address
	QID     uint16
	SubNQN  string
	HostNQN string
	// Status is the completion status (a Fabrics command-specific status
	// for most refusals, e.g. fabrics.StatusConnectInvalidHost); Err
	// carries it with DNR as an *nvme.Error.
	Status nvme.Status
	// Param names the parameter blamed by Connect Invalid Parameters.
	Param fabrics.InvalidParam
	Err   *nvme.Error
}

// Error explains the refusal in one line, as Linux nvmf_log_connect_error
// does.
func (e *ConnectError) Error() string {
	what := ""
	switch e.Status {
	case fabrics.StatusConnectInvalidHost:
		what = fmt.Sprintf("host %s is not allowed to access subsystem %s", e.HostNQN, e.SubNQN)
	case fabrics.StatusConnectInvalidParameters:
		switch {
		case e.Param.InData && e.Param.Offset == fabrics.ConnectDataOffSubNQN:
			what = fmt.Sprintf("unknown subsystem %s (not exported on this port)", e.SubNQN)
		case e.Param.InData && e.Param.Offset == fabrics.ConnectDataOffHostNQN:
			what = fmt.Sprintf("host NQN %s refused", e.HostNQN)
		case e.Param.InData && e.Param.Offset == fabrics.ConnectDataOffCntlID:
			what = "controller ID refused (the controller may be gone)"
		case !e.Param.InData && e.Param.Offset == fabrics.ConnectOffQID:
			what = fmt.Sprintf("queue ID %d refused", e.QID)
		case !e.Param.InData && e.Param.Offset == fabrics.ConnectOffSQSize:
			what = "queue size refused"
		default:
			what = "invalid parameter: " + e.Param.String()
		}
	case fabrics.StatusConnectControllerBusy:
		what = "controller busy or not available"
	default:
		what = "refused"
	}
	return fmt.Sprintf("initiator: connect %s qid %d: %s: %s", e.Addr, e.QID, what, fabrics.StatusString(e.Status))
}

// Unwrap returns the *nvme.Error.
func (e *ConnectError) Unwrap() error { return e.Err }

// statusError turns a completion into an error: nil for success, else a
// *CommandError carrying the status.
func statusError(cqe []byte, op string, qid uint16, nsid uint32) error {
	c := nvme.CQE(cqe)
	if c.Status().Success() {
		return nil
	}
	e, _ := c.Err().(*nvme.Error)
	if e == nil {
		e = &nvme.Error{Status: c.Status(), DNR: c.DNR()}
	}
	return &CommandError{Op: op, QID: qid, NSID: nsid, Err: e}
}
