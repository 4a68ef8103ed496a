package fabrics

import "time"

// Poller is implemented by a HostQueue whose completions the caller can
// drive on its own goroutine (rdma.Progresser underneath): Poll runs the
// Done callbacks of whatever completed, never blocks, and reports whether
// it found work. A host that busy-polls calls it in its completion loop.
type Poller interface {
	Poll() bool
	// PollDone tells the transport the caller stops polling for now
	// (it is about to sleep): completions are delivered by the
	// transport's own goroutines again until the next Poll.
	PollDone()
	// CanPoll reports whether Poll can ever find work (the provider
	// can be driven on the caller's goroutine); a caller should not
	// spin on a Poller that cannot.
	CanPoll() bool
}

// Plugger is implemented by a HostQueue that can hold the commands
// submitted to it and send them together (Linux's block plugging, a
// doorbell per batch): between Plug and Unplug, Submit queues its command
// and returns; Unplug sends every queued command at once (over RDMA one
// PostSend, which the soft provider sends as one UDP GSO run). A command
// that Unplug cannot send completes with the error through its Done.
type Plugger interface {
	Plug()
	Unplug()
}

// WaitPoller is implemented by a Poller that can sleep until its
// completions arrive (rdma.ProgressWaiter underneath): PollWait is Poll
// that, when nothing is there, waits for up to d in the kernel for the
// queue's traffic (returning false at once when it cannot) and polls
// again. A caller that would spin for d waits in it instead.
type WaitPoller interface {
	PollWait(d time.Duration) bool
	// CanWait reports whether PollWait can sleep; where it cannot, it
	// is Poll.
	CanWait() bool
}
