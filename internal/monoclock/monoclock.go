// Package monoclock reads the monotonic clock with one clock read.
//
// time.Now reads two clocks (wall and monotonic), each a vDSO call that a
// paravirtualised guest makes expensive; the data path only ever needs
// intervals. time.Since on a time.Time that carries a monotonic reading
// reads the monotonic clock alone.
package monoclock

import "time"

var epoch = time.Now()

// Now returns the time elapsed on the monotonic clock since the process
// started (at least 1 ns, so that callers may keep 0 for "unset").
func Now() time.Duration { return max(time.Since(epoch), 1) }
