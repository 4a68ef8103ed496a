// Package directwait lets a goroutine that serves a socket wait for the
// socket's next packet on its own thread, in ppoll(2), for a short window
// before it waits in Go's netpoller.
//
// Through the netpoller, a packet wakes the runtime's thread blocked in
// epoll_wait, which then schedules the goroutine: at one request in
// flight that is most of a server's cost per request on a small VM
// (docs/tcp.md, docs/soft-perf.md). In ppoll the kernel wakes the
// goroutine's own thread, as it wakes nbdkit's thread blocked in recv(2).
//
// The wait is a raw system call: the runtime is not told (entersyscall
// would wake sysmon once per request, and sysmon would later hand the P
// off), so the thread keeps its P while it waits. Hence the window is
// short, and at most GOMAXPROCS-1 goroutines of the process wait so at
// once: one P always runs the netpoller and every other goroutine. A
// process with one P never waits directly. The runtime's preemption
// signal ends a wait early (EINTR), so a stop-the-world does not wait
// for the window.
package directwait

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Window is how long Wait waits. A request at one in flight comes tens of
// microseconds after the response to the one before; an idle connection
// goes back to the netpoller after this.
const Window = 500 * time.Microsecond

var (
	waiters atomic.Int32
	limit   atomic.Int32
	window  atomic.Int64
)

func init() {
	limit.Store(int32(runtime.GOMAXPROCS(0) - 1))
	window.Store(int64(Window))
}

// SetForTest sets the window and the limit on waiters (tests of the
// packages that wait, which need a window a loaded machine cannot miss)
// and returns a function that restores them.
func SetForTest(w time.Duration, n int) (restore func()) {
	ow, on := window.Swap(int64(w)), limit.Swap(int32(n))
	return func() { window.Store(ow); limit.Store(on) }
}

// Wait waits up to Window for fd (a non-blocking socket the caller found
// empty) to become readable and reports whether it did. It returns false
// at once when GOMAXPROCS-1 goroutines already wait, and early on a
// signal.
func Wait(fd uintptr) bool {
	if waiters.Add(1) > limit.Load() {
		waiters.Add(-1)
		return false
	}
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	ts := unix.NsecToTimespec(window.Load())
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	waiters.Add(-1)
	return errno == 0 && n > 0 && pfd.Revents != 0
}

// Waiting returns how many goroutines wait in Wait now.
func Waiting() int { return int(waiters.Load()) }
