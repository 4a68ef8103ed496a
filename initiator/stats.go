package initiator

import (
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/iostats"
	"github.com/nvmeof/nvmeof/nvme"
)

// The controller counts its I/O commands (by namespace and opcode, with
// a latency histogram), timeouts, aborts, queue resets and reconnects in
// atomics set up with it; Controller.Stats copies them out for the
// metrics endpoint of the connection daemon. A completion adds to
// counters found by index: nothing is allocated or looked up per I/O.

// LatencyBuckets is the number of finite latency histogram buckets; the
// upper bound of bucket i is LatencyBound(i) (as target.LatencyBound).
const LatencyBuckets = iostats.LatencyBuckets

// LatencyBound returns the upper bound (inclusive) of latency bucket i:
// 1024 ns << i, 1 µs to 8.6 s (iostats.LatencyBound).
func LatencyBound(i int) time.Duration { return iostats.LatencyBound(i) }

// StatsNamespaces is how many namespaces (NSIDs 1 to StatsNamespaces)
// have counters of their own; the I/O of larger NSIDs is counted together
// under NSID 0.
const StatsNamespaces = 32

// hostStats are a controller's counters (Controller.stats).
type hostStats struct {
	latency                          atomic.Bool
	timeouts, aborts, queueResets    atomic.Uint64
	recoveries, reconnects, recFails atomic.Uint64
	ns                               [StatsNamespaces + 1][iostats.OpSlots]iostats.Op
}

// EnableLatencyStats turns the I/O latency histograms on or off (off by
// default: they cost two clock reads per command).
func (c *Controller) EnableLatencyStats(on bool) { c.stats.latency.Store(on) }

// ioStart is the start time of an I/O command (0: latency not measured).
func (c *Controller) ioStart() int64 {
	if !c.stats.latency.Load() {
		return 0
	}
	return max(int64(time.Since(statsEpoch)), 1)
}

var statsEpoch = time.Now()

// recordIO counts an I/O command the transport completed (a timed-out
// one is counted by the timeout handler only).
func (c *Controller) recordIO(cmd *fabrics.HostCommand, start int64) {
	i := iostats.OpSlot(nvme.IOOpcode(cmd.SQE[0]))
	if i < 0 {
		return
	}
	nsid := nvme.SQE(cmd.SQE[:]).NSID()
	if nsid > StatsNamespaces {
		nsid = 0
	}
	o := &c.stats.ns[nsid][i]
	o.Commands.Add(1)
	if cmd.Err != nil || !nvme.CQE(cmd.CQE[:]).Status().Success() {
		o.Errors.Add(1)
	} else if len(cmd.Data) > 0 && cmd.Direction != fabrics.DirNone {
		o.Bytes.Add(uint64(len(cmd.Data)))
	}
	if start != 0 {
		o.Latency.Observe(int64(time.Since(statsEpoch)) - start)
	}
}

// HostStats is a snapshot of a controller's counters.
type HostStats struct {
	LatencyEnabled bool
	// Timeouts counts commands that timed out (admin and I/O, an Abort
	// included); Aborts the Abort commands for them the controller
	// answered; QueueResets the I/O queues reset after a timeout.
	Timeouts, Aborts, QueueResets uint64
	// Recoveries counts association failures that started reconnecting;
	// Reconnects the successful reconnects and ReconnectFailures the
	// attempts that failed.
	Recoveries, Reconnects, ReconnectFailures uint64
	// Namespaces holds the I/O counters of NSIDs 1 to StatsNamespaces
	// that saw I/O or are attached now, and NSID 0 (every larger NSID)
	// when it saw I/O.
	Namespaces []HostNamespaceStats
	// Queues are the I/O queues of the current association.
	Queues []HostQueueStats
}

// HostNamespaceStats are one namespace's I/O counters, by opcode.
type HostNamespaceStats struct {
	NSID uint32
	Ops  []HostOpStats
}

// HostOpStats count the commands of one opcode the transport completed.
type HostOpStats struct {
	Opcode   nvme.IOOpcode
	Commands uint64 // completed, failed or not
	Errors   uint64 // failed: an error status or a transport error
	Bytes    uint64 // data of the successful ones
	// Latency from submission to completion: count, sum and counts per
	// bucket (not cumulative; the last above every LatencyBound).
	LatencyCount   uint64
	LatencySum     time.Duration
	LatencyBuckets [LatencyBuckets + 1]uint64
}

// HostQueueStats describe one I/O queue.
type HostQueueStats struct {
	QID   uint16
	Depth int // command slots
	InUse int // slots holding a command (submitted, or being finished)
}

// Stats returns a snapshot of the controller's counters.
func (c *Controller) Stats() HostStats {
	st := &c.stats
	hs := HostStats{
		LatencyEnabled:    st.latency.Load(),
		Timeouts:          st.timeouts.Load(),
		Aborts:            st.aborts.Load(),
		QueueResets:       st.queueResets.Load(),
		Recoveries:        st.recoveries.Load(),
		Reconnects:        st.reconnects.Load(),
		ReconnectFailures: st.recFails.Load(),
	}
	attached := map[uint32]bool{}
	for _, ns := range c.Namespaces() {
		attached[ns.nsid] = true
	}
	for nsid := range uint32(StatsNamespaces + 1) {
		row := &st.ns[nsid]
		used := false
		for i := range row {
			used = used || row[i].Commands.Load() != 0
		}
		if !used && (nsid == 0 || !attached[nsid]) {
			continue
		}
		n := HostNamespaceStats{NSID: nsid, Ops: make([]HostOpStats, iostats.OpSlots)}
		for i := range row {
			o, s := &row[i], &n.Ops[i]
			s.Opcode = iostats.Opcodes[i]
			s.Commands, s.Errors, s.Bytes = o.Commands.Load(), o.Errors.Load(), o.Bytes.Load()
			l := o.Latency.Snapshot()
			s.LatencyCount, s.LatencySum, s.LatencyBuckets = l.Count, l.Sum, l.Buckets
		}
		hs.Namespaces = append(hs.Namespaces, n)
	}
	if a := c.cur.Load(); a != nil {
		for i := range a.io {
			q := a.io[i].Load()
			if q == nil {
				continue
			}
			q.freeMu.Lock()
			free := len(q.free)
			q.freeMu.Unlock()
			hs.Queues = append(hs.Queues, HostQueueStats{QID: q.qid, Depth: len(q.slots), InUse: max(len(q.slots)-free, 0)})
		}
	}
	return hs
}
