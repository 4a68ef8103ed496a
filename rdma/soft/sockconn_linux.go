//go:build linux

package soft

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockConn is a socket of the device outside Go's netpoller, as a
// syscall.RawConn. A socket in the netpoller wakes the runtime's epoll
// for every datagram, whoever reads it: while a poller (Progress) reads a
// receive queue on its own thread, that wake-up lands on another CPU
// (on two CPUs, the one the peer or the target runs on) for nothing.
// The receive goroutines wait on the queue's own epoll instance instead
// (rxWaiter), from which a polled socket is taken out.
//
// Every use of the descriptor holds mu for reading; close holds it for
// writing, so the descriptor is never closed under a user.
type sockConn struct {
	fd      int
	mu      sync.RWMutex
	closed  bool
	closing atomic.Bool
}

var _ syscall.RawConn = (*sockConn)(nil)

// detach takes the socket of pc out of the netpoller: it duplicates the
// descriptor and closes pc (which removes its epoll registration; the
// duplicate keeps the socket, non-blocking, with its options, bindings
// and filters).
func detach(pc net.PacketConn) (*sockConn, error) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("soft: %T has no descriptor", pc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		pc.Close()
		return nil, err
	}
	nfd := -1
	var derr error
	err = rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	pc.Close()
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("soft: duplicating a socket: %w", err)
	}
	return &sockConn{fd: nfd}, nil
}

// Control runs f on the descriptor (syscall.RawConn).
func (c *sockConn) Control(f func(fd uintptr)) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return net.ErrClosed
	}
	f(uintptr(c.fd))
	return nil
}

// Read calls f until it reports done, waiting in poll(2) for the socket
// to become readable in between (syscall.RawConn). The receive goroutines
// do not use it (rxWaiter).
func (c *sockConn) Read(f func(fd uintptr) bool) error { return c.wait(f, unix.POLLIN) }

// Write calls f until it reports done, waiting in poll(2) for room in the
// send buffer in between (syscall.RawConn).
func (c *sockConn) Write(f func(fd uintptr) bool) error { return c.wait(f, unix.POLLOUT) }

// wait is Read and Write: f until done, poll for events in between. The
// poll is bounded so that close, which shuts the socket down to wake it,
// is never held up for long.
func (c *sockConn) wait(f func(fd uintptr) bool, events int16) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for {
		if c.closed || c.closing.Load() {
			return net.ErrClosed
		}
		if f(uintptr(c.fd)) {
			return nil
		}
		pfd := []unix.PollFd{{Fd: int32(c.fd), Events: events}}
		if _, err := unix.Poll(pfd, 100); err != nil && err != unix.EINTR {
			return os.NewSyscallError("poll", err)
		}
	}
}

// close shuts the socket down (waking a Read or Write in poll), waits for
// the descriptor's users and closes it.
func (c *sockConn) close() {
	if c == nil || c.closing.Swap(true) {
		return
	}
	_ = unix.Shutdown(c.fd, unix.SHUT_RDWR)
	c.mu.Lock()
	c.closed = true
	unix.Close(c.fd)
	c.mu.Unlock()
}

// rxWaiter is what a receive goroutine waits on: an epoll instance of its
// own, in the netpoller, holding the queue's socket while no poller has
// it (arm, disarm). The instance becomes readable when the socket does,
// and the netpoller wakes the goroutine as it would for the socket itself.
type rxWaiter struct {
	ep   *os.File
	rc   syscall.RawConn
	sock int
}

// newRxWaiter makes the epoll instance of socket sc, which it holds.
func newRxWaiter(sc *sockConn) (*rxWaiter, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, os.NewSyscallError("fcntl", err)
	}
	w := &rxWaiter{ep: os.NewFile(uintptr(ep), "soft-rxq"), sock: sc.fd}
	if w.rc, err = w.ep.SyscallConn(); err != nil {
		w.ep.Close()
		return nil, err
	}
	if err := w.arm(); err != nil {
		w.ep.Close()
		return nil, err
	}
	return w, nil
}

// arm puts the socket in the epoll instance: the receive goroutine is
// woken by its datagrams, at once if some wait already.
func (w *rxWaiter) arm() error {
	var err error
	cerr := w.rc.Control(func(ep uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(w.sock)}
		err = unix.EpollCtl(int(ep), unix.EPOLL_CTL_ADD, w.sock, &ev)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// disarm takes the socket out of the epoll instance: its datagrams wake
// nobody (a poller reads them).
func (w *rxWaiter) disarm() error {
	var err error
	cerr := w.rc.Control(func(ep uintptr) {
		err = unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, w.sock, nil)
	})
	if cerr != nil {
		return cerr
	}
	if err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

// close closes the epoll instance, ending the goroutine's wait.
func (w *rxWaiter) close() { w.ep.Close() }

// pollIn waits up to d for fd to be readable. It is a raw system call: the
// runtime is not told, so that a wait of microseconds wakes no other
// thread (sysmon, a handoff of the P), as mmsg's calls.
// A signal (the runtime's preemption, SIGURG) interrupts the wait, which
// goes on for the time left: Linux's ppoll writes that back into its
// timeout (glibc's wrapper hides it), so no clock is read.
func pollIn(fd uintptr, d time.Duration) bool {
	ts := unix.NsecToTimespec(int64(d))
	for {
		pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if errno != unix.EINTR {
			return errno == 0 && n > 0 && pfd.Revents&unix.POLLIN != 0
		}
		if ts.Sec == 0 && ts.Nsec == 0 {
			return false
		}
	}
}
