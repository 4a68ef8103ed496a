//go:build race

package soft

import "sync/atomic"

// The race detector cannot see that a packet sent through the kernel
// orders what happened before the send before what the receiver does
// after receiving it: the memory a requester's application wrote before
// posting is read or written by the responder's receive goroutine, and
// the application reads what a READ brought in after polling a
// completion that an acknowledgement produced. wireClock models the
// network as one synchronization object: every flush releases into it,
// every received batch acquires from it. Without -race these are no-ops.
var wireClock atomic.Uint64

// wireRelease is called before datagrams are handed to the kernel.
func wireRelease() { wireClock.Add(1) }

// wireAcquire is called after datagrams were read from the kernel.
func wireAcquire() { wireClock.Add(0) }
