// Package iostats holds the I/O counters the target and the host share:
// per-opcode command, byte and error counts and a latency histogram, all
// atomics a completion adds to by index. Nothing is allocated or looked
// up per I/O; Snapshot copies the values out at scrape time.
package iostats

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// LatencyBuckets is the number of finite latency histogram buckets; the
// upper bound of bucket i is LatencyBound(i).
const LatencyBuckets = 24

// LatencyBound returns the upper bound (inclusive) of latency bucket i:
// 1024 ns << i, powers of two so that a completion finds its bucket with
// one bit count. The buckets span 1 µs to 8.6 s.
func LatencyBound(i int) time.Duration { return time.Duration(1024) << i }

// Bucket returns the bucket of a latency of d nanoseconds
// (LatencyBuckets: above every bound).
func Bucket(d int64) int {
	if d <= 0 {
		return 0
	}
	return min(bits.Len64(uint64(d-1)>>10), LatencyBuckets)
}

// Histogram is a latency histogram updated with atomics.
type Histogram struct {
	count, sum atomic.Uint64 // observations and their sum (ns)
	buckets    [LatencyBuckets + 1]atomic.Uint64
}

// Observe adds a latency of d nanoseconds (a negative one, from a clock
// step, counts as 0).
func (h *Histogram) Observe(d int64) {
	h.buckets[Bucket(d)].Add(1)
	h.sum.Add(uint64(max(d, 0)))
	h.count.Add(1)
}

// Latency is a snapshot of a Histogram.
type Latency struct {
	Count uint64
	Sum   time.Duration
	// Buckets counts per bucket (not cumulative; index i ≤
	// LatencyBound(i), the last one above every bound).
	Buckets [LatencyBuckets + 1]uint64
}

// Snapshot copies the histogram out while it keeps moving. It reads the
// buckets before the count (Observe adds to the bucket first), so that
// the count is never below the sum of the buckets: a Prometheus
// histogram's +Inf bucket is at least its last finite one.
func (h *Histogram) Snapshot() Latency {
	var l Latency
	for b := range h.buckets {
		l.Buckets[b] = h.buckets[b].Load()
	}
	l.Count = h.count.Load()
	l.Sum = time.Duration(h.sum.Load())
	return l
}

// Opcode slots: the I/O opcodes counted, each in a slot of its own.
const (
	SlotRead = iota
	SlotWrite
	SlotFlush
	SlotWriteZeroes
	SlotDSM
	SlotCompare
	OpSlots // number of slots
)

// Opcodes are the opcodes of the slots, by slot.
var Opcodes = [OpSlots]nvme.IOOpcode{
	nvme.IORead, nvme.IOWrite, nvme.IOFlush, nvme.IOWriteZeroes, nvme.IODatasetManagement, nvme.IOCompare,
}

// OpSlot returns the slot of op, or -1 for an opcode not counted.
func OpSlot(op nvme.IOOpcode) int {
	switch op {
	case nvme.IORead:
		return SlotRead
	case nvme.IOWrite:
		return SlotWrite
	case nvme.IOFlush:
		return SlotFlush
	case nvme.IOWriteZeroes:
		return SlotWriteZeroes
	case nvme.IODatasetManagement:
		return SlotDSM
	case nvme.IOCompare:
		return SlotCompare
	}
	return -1
}

// Op counts the commands of one opcode; what counts as an error or as
// bytes is the user's call.
type Op struct {
	Commands, Bytes, Errors atomic.Uint64
	Latency                 Histogram
}
