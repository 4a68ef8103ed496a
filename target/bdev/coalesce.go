package bdev

import "time"

// Completion coalescing of the io_uring engine (docs/backends.md,
// "Completion batches"): with enough operations in flight on a slow
// device, the reaper waits a little after the first completion for more,
// so that their responses leave in one send per queue, as NIC and NVMe
// interrupt moderation do. The wait scales with the device's latency, so
// a fast device is never held up, and at low queue depth nothing waits.
const (
	// coalesceMinInflight is the fewest operations in flight (the ready
	// ones included) for which the reaper waits for more.
	coalesceMinInflight = 4
	// coalesceShift makes the window 1/32 (about 3 %) of the latency
	// EWMA: the most a coalesced completion is delayed, against I/Os
	// that already took 32 times as long.
	coalesceShift = 5
	// coalesceMinWindow: a shorter window is not worth a timer (its cost
	// is of the order of what it would save); the device is fast.
	coalesceMinWindow = 20 * time.Microsecond
	// coalesceMaxWindow caps the window whatever the device's latency.
	coalesceMaxWindow = 500 * time.Microsecond
	// coalesceMaxWant is the most completions a window waits for: past
	// it, a larger batch saves little more.
	coalesceMaxWant = 16
	// ewmaShift weighs each latency sample 1/16.
	ewmaShift = 4
)

// coalesceWindow returns how long the reaper may wait, once a completion
// is there, for want completions in all (the ready ones included), given
// the latency EWMA of the device and the operations in flight; a zero
// window means reap at once.
func coalesceWindow(ewma time.Duration, inflight int) (time.Duration, uint32) {
	if inflight < coalesceMinInflight {
		return 0, 0
	}
	w := ewma >> coalesceShift
	if w < coalesceMinWindow {
		return 0, 0
	}
	return min(w, coalesceMaxWindow), uint32(min(inflight, coalesceMaxWant))
}

// latencyEWMA returns the EWMA ewma (ns; 0: no sample yet) updated with
// sample.
func latencyEWMA(ewma, sample int64) int64 {
	if sample < 0 {
		sample = 0
	}
	if ewma == 0 {
		return sample
	}
	return ewma + (sample-ewma)>>ewmaShift
}

// epoch is the origin of monoNanos.
var epoch = time.Now()

// monoNanos is a monotonic clock in ns.
func monoNanos() int64 { return int64(time.Since(epoch)) }
