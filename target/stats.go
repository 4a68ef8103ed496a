package target

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/internal/iostats"
	"github.com/nvmeof/nvmeof/nvme"
)

// The target counts what an operator watches (commands, bytes, latency,
// errors, controllers, keep-alive timeouts, authentications) in atomics
// kept beside the objects they describe; Target.Stats copies them out at
// scrape time. The I/O path only adds to counters set up when the
// namespace, subsystem or queue was created: nothing is allocated, no map
// looked up, and the core knows nothing of the metrics library that
// exports the snapshot.

// LatencyBuckets is the number of finite latency histogram buckets; the
// upper bound of bucket i is LatencyBound(i).
const LatencyBuckets = iostats.LatencyBuckets

// LatencyBound returns the upper bound (inclusive) of latency bucket i:
// 1024 ns << i, 1 µs to 8.6 s (iostats.LatencyBound).
func LatencyBound(i int) time.Duration { return iostats.LatencyBound(i) }

// nsIOStats are a namespace's I/O counters by opcode slot.
type nsIOStats struct {
	ops [iostats.OpSlots]iostats.Op
}

// record counts a command that ran on the backend: n bytes moved, failed
// or not, and its latency from start (monoNanos; 0 when latency is not
// measured).
func (s *nsIOStats) record(op nvme.IOOpcode, n int64, failed bool, start int64) {
	i := iostats.OpSlot(op)
	if i < 0 {
		return
	}
	o := &s.ops[i]
	o.Commands.Add(1)
	if failed {
		o.Errors.Add(1)
	} else if n > 0 && (i == iostats.SlotRead || i == iostats.SlotWrite || i == iostats.SlotCompare) {
		o.Bytes.Add(uint64(n)) // data carried; not what Write Zeroes clears
	}
	if start != 0 {
		o.Latency.Observe(monoNanos() - start)
	}
}

// subsysStats are a subsystem's event counters and its completions with
// an error, by status (SCT and SC: 11 bits).
type subsysStats struct {
	ctrlCreated, ctrlRemoved atomic.Uint64
	kaTimeouts               atomic.Uint64
	authOK, authFailed       atomic.Uint64
	aersAborted              atomic.Uint64
	status                   [0x800]atomic.Uint64
}

// targetStats is the target-wide statistics state.
type targetStats struct {
	latency atomic.Bool // measure I/O latency (two clock reads per command)
}

// EnableLatencyStats turns the I/O latency histograms on or off. They are
// off by default: measuring costs two clock reads per command.
func (t *Target) EnableLatencyStats(on bool) { t.stats.latency.Store(on) }

// ioStart returns the start time of an I/O command for its latency, or 0
// when latency is not measured.
func (t *Target) ioStart() int64 {
	if !t.stats.latency.Load() {
		return 0
	}
	return max(monoNanos(), 1)
}

// Stats is a snapshot of the target's counters (Target.Stats).
type Stats struct {
	// LatencyEnabled: the latency fields of OpStats are measured.
	LatencyEnabled bool
	Subsystems     []SubsystemStats // by NQN; the discovery subsystem first
}

// SubsystemStats are the counters of one subsystem.
type SubsystemStats struct {
	NQN       string
	Discovery bool
	// ControllersCreated and ControllersRemoved count controllers since
	// the subsystem was created; their difference is those connected.
	ControllersCreated, ControllersRemoved uint64
	// KeepAliveTimeouts counts controllers torn down by keep-alive expiry.
	KeepAliveTimeouts uint64
	// AuthSucceeded and AuthFailed count DH-HMAC-CHAP transactions (a
	// queue that timed out counts as failed).
	AuthSucceeded, AuthFailed uint64
	// AERsAborted counts the Asynchronous Event Requests completed with
	// Internal Error because their controller went away (every clean
	// disconnect ends the host's outstanding AERs so, as Linux's
	// nvmet_async_events_failall does): they are not in Errors.
	AERsAborted uint64
	// Errors counts completions with an error status (every queue, admin
	// and Fabrics commands included), by status; only non-zero counts.
	Errors      []StatusCount
	Namespaces  []NamespaceStats  // by NSID
	Controllers []ControllerStats // by controller ID
}

// StatusCount is the number of completions with one status.
type StatusCount struct {
	Status nvme.Status
	Count  uint64
}

// NamespaceStats are the I/O counters of one namespace.
type NamespaceStats struct {
	NSID    uint32
	Enabled bool
	// BackendErrors counts the backend's I/O errors (bdev.Monitor), and
	// BackendUnlinked is set once its backing file is seen unlinked.
	BackendErrors   uint64
	BackendUnlinked bool
	// Ops holds one entry per I/O opcode the target runs (Read, Write,
	// Flush, Write Zeroes, Dataset Management, Compare), zero or not.
	Ops []OpStats
}

// OpStats count the commands of one opcode that reached the backend
// (those refused before, e.g. out of range, show in Errors only).
type OpStats struct {
	Opcode   nvme.IOOpcode
	Commands uint64 // completed, failed or not
	Errors   uint64 // completed with an error status
	Bytes    uint64 // data carried by the successful ones (Read, Write, Compare)
	// Latency from the command's hand-off by the transport to its
	// completion: count, sum, and counts per bucket (not cumulative;
	// index i ≤ LatencyBound(i), the last one above every bound).
	LatencyCount   uint64
	LatencySum     time.Duration
	LatencyBuckets [LatencyBuckets + 1]uint64
}

// ControllerStats describe one controller and its queues.
type ControllerStats struct {
	CntlID  uint16
	HostNQN string
	Port    uint16
	Queues  []QueueStats // by QID; the admin queue is QID 0
}

// QueueStats describe one queue of a controller.
type QueueStats struct {
	QID      uint16
	Size     uint32 // entries
	InFlight int64  // I/O commands handed to the backend and not completed
}

// Stats returns a snapshot of the target's counters. It takes the
// configuration lock briefly; counters keep moving while it reads them.
func (t *Target) Stats() Stats {
	t.mu.RLock()
	subs := make([]*Subsystem, 0, len(t.subsys)+1)
	for _, s := range t.subsys {
		subs = append(subs, s)
	}
	slices.SortFunc(subs, func(a, b *Subsystem) int { return strings.Compare(a.nqn, b.nqn) })
	subs = slices.Insert(subs, 0, t.disc)
	ctrls := make([][]*controller, len(subs))
	for i, s := range subs {
		ctrls[i] = s.controllersLocked()
	}
	t.mu.RUnlock()

	out := Stats{LatencyEnabled: t.stats.latency.Load(), Subsystems: make([]SubsystemStats, 0, len(subs))}
	for i, s := range subs {
		out.Subsystems = append(out.Subsystems, s.snapshot(ctrls[i]))
	}
	return out
}

func (s *Subsystem) snapshot(ctrls []*controller) SubsystemStats {
	st := &s.stats
	ss := SubsystemStats{
		NQN:                s.nqn,
		Discovery:          s.disc,
		ControllersCreated: st.ctrlCreated.Load(),
		ControllersRemoved: st.ctrlRemoved.Load(),
		KeepAliveTimeouts:  st.kaTimeouts.Load(),
		AuthSucceeded:      st.authOK.Load(),
		AuthFailed:         st.authFailed.Load(),
		AERsAborted:        st.aersAborted.Load(),
	}
	for i := range st.status {
		if n := st.status[i].Load(); n != 0 {
			ss.Errors = append(ss.Errors, StatusCount{Status: nvme.Status(i), Count: n})
		}
	}
	tab := s.table()
	nsids := make([]uint32, 0, len(tab.byID))
	for id := range tab.byID {
		nsids = append(nsids, id)
	}
	slices.Sort(nsids)
	for _, id := range nsids {
		ss.Namespaces = append(ss.Namespaces, tab.byID[id].ioSnapshot())
	}
	slices.SortFunc(ctrls, func(a, b *controller) int { return int(a.cntlid) - int(b.cntlid) })
	for _, c := range ctrls {
		ss.Controllers = append(ss.Controllers, c.snapshot())
	}
	return ss
}

func (ns *namespace) ioSnapshot() NamespaceStats {
	n := NamespaceStats{NSID: ns.nsid, Enabled: ns.enabled.Load(), Ops: make([]OpStats, iostats.OpSlots),
		BackendErrors: ns.mon.Errors(), BackendUnlinked: ns.mon.Unlinked()}
	for i := range ns.io.ops {
		o, s := &ns.io.ops[i], &n.Ops[i]
		s.Opcode = iostats.Opcodes[i]
		s.Commands, s.Errors, s.Bytes = o.Commands.Load(), o.Errors.Load(), o.Bytes.Load()
		l := o.Latency.Snapshot()
		s.LatencyCount, s.LatencySum, s.LatencyBuckets = l.Count, l.Sum, l.Buckets
	}
	return n
}

func (c *controller) snapshot() ControllerStats {
	cs := ControllerStats{CntlID: c.cntlid, HostNQN: c.hostNQN, Port: c.port.id}
	c.mu.Lock()
	for qid, q := range c.queues {
		if q == nil {
			continue
		}
		cs.Queues = append(cs.Queues, QueueStats{QID: uint16(qid), Size: q.size, InFlight: int64(q.inflight.Load())})
	}
	c.mu.Unlock()
	return cs
}
