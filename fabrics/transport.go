package fabrics

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/nvme"
)

// Transport types (the discovery log entry's TRTYPE values).
const (
	TransportRDMA = "rdma"
	TransportTCP  = "tcp"
	TransportLoop = "loop"
)

// DefaultServiceID is the IANA NVMe-oF port, used for RDMA and TCP.
const DefaultServiceID = 4420

// Address names an NVMe-oF port: a transport, its address and service ID.
type Address struct {
	Transport string     // "rdma", "tcp", "loop"
	Addr      netip.Addr // the port's IP address (RDMA: the device's GID)
	ServiceID uint16     // RDMA CM / TCP port, 4420 by default
}

// String formats the address as nvme-cli would print it.
func (a Address) String() string {
	return fmt.Sprintf("trtype=%s,traddr=%s,trsvcid=%d", a.Transport, a.Addr, a.ServiceID)
}

// ErrQueueClosed is returned for work on a queue that has been torn down.
var ErrQueueClosed = errors.New("fabrics: queue closed")

// QueueParams are what a host asks for when it opens a queue, as carried by
// the transport's connection request (RDMA: the CM private data).
type QueueParams struct {
	QID uint16 // 0 for the admin queue
	// SQSize is the submission queue size in entries (1's based: the
	// number of commands the host may have outstanding plus one).
	SQSize int
	// RQSize is the host receive queue size in entries (RDMA HRQSIZE).
	RQSize int
	// CntlID is the controller ID for an I/O queue when the host sends it
	// (Linux before 6.x sends 0).
	CntlID uint16
}

// Listener is a target port's transport endpoint: it yields the queues hosts
// open, after the transport has validated the connection request.
type Listener interface {
	// Accept waits for the next queue a host opens.
	Accept(ctx context.Context) (TargetQueue, error)
	// Address returns the address the listener serves.
	Address() Address
	// Close stops listening; queues already accepted stay open.
	Close() error
}

// TargetQueue is one NVMe queue (admin or I/O) of a host connection, seen
// from the target. The transport receives command capsules, moves
// host-to-controller data in before it hands a command to the handler, and
// moves controller-to-host data out when the handler completes it.
type TargetQueue interface {
	// Params returns what the host asked for when it opened the queue.
	Params() QueueParams
	// Depth returns the number of commands the queue can have outstanding.
	Depth() int
	// Remote returns the host's address.
	Remote() Address
	// Serve starts delivering commands to h and returns at once. Commands
	// arrive one at a time on the transport's goroutine, in the order the
	// host sent them, except that a command whose data the transport must
	// first fetch from the host (RDMA READ) is delivered when the data is
	// there: NVMe orders nothing across commands. HandleCommand must not
	// block.
	Serve(h CommandHandler)
	// MaxTransfer returns the largest data transfer of one command in bytes.
	MaxTransfer() int
	// InCapsuleDataSize returns the in-capsule data size the queue accepts
	// (0 on the admin queue of RDMA).
	InCapsuleDataSize() int
	// Close tears the queue down. In-flight requests are completed with
	// errors towards nobody; the handler's QueueClosed is called once.
	Close() error
}

// CommandHandler executes the commands of a queue.
type CommandHandler interface {
	// HandleCommand receives a command whose host-to-controller data (if
	// any) is already in r.Data. It must call r.Complete exactly once, now
	// or later from any goroutine, and must not block.
	HandleCommand(r *Request)
	// QueueClosed is called once when the queue is gone (host disconnect,
	// transport error or Close), after which no command is delivered.
	QueueClosed(err error)
}

// GatherSender is implemented by target queues that can send a command's
// controller-to-host data from a backend's memory (Request.Gather) instead
// of from Data.
type GatherSender interface {
	// SendsGather reports whether the queue sends Request.Gather.
	SendsGather() bool
}

// Completer is implemented by a transport to take a completed request back.
type Completer interface {
	CompleteRequest(r *Request)
}

// Request is a command in flight on a target queue. Transports keep a pool
// of them per queue (one per queue slot) and reuse them: a handler must not
// keep a request after completing it.
type Request struct {
	// SQE is the submission queue entry as received.
	SQE [64]byte
	// CQE is the completion to send: the transport sets CID and SQID; the
	// handler sets status, DW0, DW1 and SQHD.
	CQE [16]byte
	// Data is the command's data buffer, len = the transfer length the
	// host's SGL describes (0 when none). For host-to-controller commands
	// it holds the host's data when the handler sees the request; for
	// controller-to-host commands the handler fills it before Complete.
	Data []byte
	// Gather, when not empty, is the controller-to-host data in pieces of
	// a backend's own memory, sent instead of Data (zero-copy READ). A
	// handler sets it only on a queue that is a GatherSender reporting
	// true; each piece holds a reference on its region, which the
	// transport releases once the data is sent or will not be, and it
	// leaves Gather empty (capacity kept) for the slot's next command.
	Gather []region.Segment
	// InCapsule reports that the data came in the command capsule.
	InCapsule bool
	// Refused, when its Status is not success, is the transport's verdict
	// on a command it cannot carry out (a bad SGL, a transfer larger
	// than it can move): the handler completes the command with it,
	// without executing it, so that the SQ head advances and the error
	// is logged as for any failed command. Data is empty then.
	Refused nvme.Error

	// Plug, when not nil, is the SubmitPlug of the goroutine that calls
	// HandleCommand with the request: a backend may hold the command's
	// operation in it until that goroutine flushes it, which it does
	// before it waits. A transport sets it only where every
	// HandleCommand of the request runs on that goroutine.
	Plug *SubmitPlug

	// Queue is the transport's queue the request belongs to.
	Queue TargetQueue
	// Transport-private state: the completer and an index into its pool.
	Completer Completer
	Slot      int
}

// Complete hands the request back to the transport, which sends the
// controller-to-host data (if any) and the CQE.
func (r *Request) Complete() { r.Completer.CompleteRequest(r) }

// CheckHostCommand is the check every host queue's Submit makes before it
// takes a tag: the transfer fits maxXfer and the command has its Done.
// Errors are prefixed with the transport's name (e.g. "nvme-rdma").
func CheckHostCommand(transport string, cmd *HostCommand, maxXfer int) error {
	if n := len(cmd.Data); n > maxXfer {
		return fmt.Errorf("%s: %d-byte transfer exceeds %d", transport, n, maxXfer)
	}
	if cmd.Done == nil {
		return fmt.Errorf("%s: command without Done", transport)
	}
	return nil
}

// Dialer is a host-side transport: it opens queues to a target port.
type Dialer interface {
	// Dial opens one queue to the target at addr.
	Dial(ctx context.Context, addr Address, p QueueParams) (HostQueue, error)
}

// HostQueue is one NVMe queue seen from the host.
//
// Commands are named by tags: the caller (the host's command engine, see
// docs/host-engine.md) gives each outstanding command a tag of its own in
// [0, Depth()), and the transport keeps its per-command state (capsule,
// response handling, memory registrations, the CID generation) in a slot
// indexed by the tag: it keeps no free list of its own. The CID the
// command carries is the tag in its low CIDTagBits bits with a generation
// above them that the transport bumps each time the tag is reused
// (NextCID), so that a late or stray CQE naming an earlier command of the
// tag is told apart and dropped.
type HostQueue interface {
	// Submit sends cmd under tag cmd.Tag; the transport sets the SQE's
	// CID (NextCID) and data pointer (SGL) from cmd.Data, and calls
	// cmd.Done exactly once when the CQE arrives (or the queue fails).
	// It returns an error at once, and then never calls cmd.Done, when
	// the tag is out of range or still in use, the transfer is too large
	// or the queue is closed. Done may be called before Submit returns.
	Submit(cmd *HostCommand) error
	// Depth returns how many commands may be outstanding.
	Depth() int
	// InCapsuleDataSize returns the most data that goes in a capsule
	// (from the controller's IOCCSZ; 0 before it is known).
	InCapsuleDataSize() int
	// SetInCapsuleDataSize sets it once Identify Controller has been read.
	SetInCapsuleDataSize(n int)
	// MaxTransfer returns the largest data transfer the transport can move
	// for one command.
	MaxTransfer() int
	// Close disconnects the queue; outstanding commands complete with
	// ErrQueueClosed.
	Close() error
}

// StrayCounter is implemented by host queues that drop completions naming
// no outstanding command: an unknown CID, one of an earlier command of a
// reused slot (CIDs carry a generation), a repeat.
type StrayCounter interface {
	// StrayCompletions returns how many completions the queue dropped.
	StrayCompletions() uint64
}

// DataDirection says which way a command's data moves.
type DataDirection uint8

// Data directions, as in the low two bits of an NVMe opcode (or of a
// Fabrics command's FCTYPE).
const (
	DirNone          DataDirection = 0
	DirHostToCtrl    DataDirection = 1
	DirCtrlToHost    DataDirection = 2
	DirBidirectional DataDirection = 3
)

// CIDTagBits is the number of low CID bits that carry the command's tag;
// the bits above carry its generation (as Linux's nvme_cid).
const CIDTagBits = 12

// MaxTags bounds the depth of a host queue: the tags a CID can carry.
const MaxTags = 1 << CIDTagBits

// CIDTag returns the tag part of a CID.
func CIDTag(cid uint16) uint16 { return cid & (MaxTags - 1) }

// NextCID returns the CID of the next command of tag after one whose CID
// was prev: the tag, with the generation of prev plus one (modulo 16).
func NextCID(tag, prev uint16) uint16 {
	return CIDTag(tag) | (prev>>CIDTagBits+1)<<CIDTagBits
}

// HostCommand is one command submitted by the host. Callers reuse them.
type HostCommand struct {
	SQE [64]byte
	// Data is the buffer to send (DirHostToCtrl) or to fill (DirCtrlToHost).
	Data      []byte
	Direction DataDirection
	// Tag names the command among the queue's outstanding ones: the
	// caller sets it, in [0, Depth()), unique among its outstanding
	// commands; the transport indexes its per-command state by it.
	Tag uint16
	// CQE is the completion as received.
	CQE [16]byte
	// Err is set when the command failed in the transport (no CQE).
	Err error
	// Done is called once, on a transport goroutine (or on the caller's,
	// before Submit returns), when the command has completed; it must not
	// block. The transport no longer touches Data once Done is called.
	Done func(*HostCommand)
}
