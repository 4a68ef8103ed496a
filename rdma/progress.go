package rdma

import "time"

// Progresser is implemented by a CQ that can make progress on the caller's
// goroutine: Progress takes what the device has received (rdma/soft) or
// polls the hardware CQ, and runs the CQ's handler (HandlerCQ) for the
// completions it produced, exactly as the provider's own goroutine would
// have. It never blocks and reports whether it found any work.
//
// A consumer that busy-polls (SPDK's reactors, fio's completion loop) calls
// it instead of sleeping until the provider's goroutine is woken: on a
// 2-CPU machine that wake-up chain (epoll, futex, two context switches)
// costs more than the I/O itself (docs/soft-perf.md).
//
// While a consumer polls, the provider may leave the CQ's traffic to it
// alone (rdma/soft stops waking its receive goroutines for it); a consumer
// that stops polling to sleep calls ProgressDone first, so that the
// provider's goroutines complete what arrives from then on.
type Progresser interface {
	Progress() bool
	ProgressDone()
}

// ProgressWaiter is implemented by a Progresser that can also sleep until
// its traffic arrives: ProgressWait is Progress that, when there is
// nothing, waits in the kernel on the CQ's receive socket for up to d (or
// returns at once, false, when it cannot wait that way) and then
// progresses. A consumer that would spin for d (fio's busy-poll window)
// waits instead: the datagram wakes its thread directly, without the
// provider's goroutines, and the CPU is free meanwhile.
type ProgressWaiter interface {
	ProgressWait(d time.Duration) bool
}
