package fio

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h; golang.org/x/sys/unix has no names
// for them).
const (
	futexWait        = 0
	futexWake        = 1
	futexPrivateFlag = 128
)

// waker lets the fio thread sleep in the kernel until a completion
// arrives, without a Go channel. A goroutine that blocks on a channel from
// a cgo callback is locked to fio's thread, so waking it makes the Go
// scheduler hand a P to that thread and stop the waking one: two context
// switches and a handful of futex calls on the completion path of every
// request. Here the completing goroutine bumps a counter and, if the fio
// thread sleeps, wakes it with one FUTEX_WAKE; it then goes on with its
// own work while the fio thread runs.
type waker struct {
	seq      atomic.Uint32 // bumped on every completion; the futex word
	sleeping atomic.Int32  // the fio thread is in (or about to enter) FUTEX_WAIT
}

// ticket returns the value to pass to sleep: read it before checking for
// completions.
func (w *waker) ticket() uint32 { return w.seq.Load() }

// sleep waits until wake is called after ticket t was taken, or d has
// passed (d < 0: no limit). It may return early (spurious wake-ups).
func (w *waker) sleep(t uint32, d time.Duration) {
	w.sleeping.Store(1)
	if w.seq.Load() == t {
		var ts *unix.Timespec
		if d >= 0 {
			v := unix.NsecToTimespec(int64(d))
			ts = &v
		}
		// EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again.
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&w.seq)), futexWait|futexPrivateFlag,
			uintptr(t), uintptr(unsafe.Pointer(ts)), 0, 0)
	}
	w.sleeping.Store(0)
}

// wake records a completion and wakes the sleeping thread, if any.
func (w *waker) wake() {
	w.seq.Add(1)
	if w.sleeping.Load() != 0 {
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&w.seq)), futexWake|futexPrivateFlag, 1, 0, 0, 0)
	}
}
