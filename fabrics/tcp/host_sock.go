package tcp

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostSock is a host queue's socket outside Go's netpoller: its own
// descriptor, non-blocking, read and written with raw system calls. A
// socket in the netpoller's epoll set wakes the runtime's thread blocked
// in epoll_wait at every segment that arrives, even while no goroutine
// waits on it (fio's thread reads it): a context switch per QD1 I/O for
// nothing (docs/tcp.md, "Host wake-ups at QD1").
//
// The reader goroutine, when no one polls, still waits in the netpoller,
// without holding a thread: on a private epoll set (ep, in the netpoller)
// that holds the socket one-shot, armed only for that wait. A caller
// that polls, the writer on a full socket and a reader waiting for the
// rest of a PDU sleep in ppoll(2) on the socket instead.
//
// The descriptor stays open until close, which the queue calls once no one
// can use it any more (teardown); shut wakes every sleeper before that.
type hostSock struct {
	fd     int
	mu     sync.Mutex // orders shut (any goroutine, a timer) against close
	closed bool
	timer  *time.Timer // a delayed shut (shutAfter), stopped by close

	// The reader goroutine's wait (waitReadable).
	epf    *os.File // the epoll set, in the netpoller
	epraw  syscall.RawConn
	armed  bool
	armErr error // arming failed: the queue ends
	armEv  unix.EpollEvent
	evs    [1]unix.EpollEvent
	armFn  func(fd uintptr) bool // bound once: a method value per wait would allocate
}

// detach takes conn's socket out of the netpoller: a duplicate of its
// descriptor (the same socket, still non-blocking) is kept, and conn is
// closed, which removes the original descriptor from the netpoller's
// epoll set (EPOLL_CTL_DEL) without ending the connection.
func detach(conn *net.TCPConn) (*hostSock, error) {
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("detach socket: %w", err)
	}
	nfd := -1
	var derr error
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("detach socket: %w", err)
	}
	if derr != nil {
		return nil, fmt.Errorf("detach socket: dup: %w", derr)
	}
	s, err := newHostSock(nfd)
	if err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("detach socket: %w", err)
	}
	return s, nil
}

// newHostSock makes fd, a connected non-blocking socket, a hostSock with
// its private epoll set (the socket in it one-shot, disarmed).
func newHostSock(fd int) (*hostSock, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	s := &hostSock{fd: fd}
	s.armEv = unix.EpollEvent{Events: unix.EPOLLONESHOT}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &s.armEv); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("epoll set non-blocking: %w", err)
	}
	s.epf = os.NewFile(uintptr(ep), "nvme-tcp-wait") // non-blocking: in the netpoller
	if s.epraw, err = s.epf.SyscallConn(); err != nil {
		s.epf.Close()
		return nil, err
	}
	s.armEv.Events = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT
	s.armFn = s.arm
	return s, nil
}

// waitReadable parks the calling goroutine in the netpoller until the
// socket is readable (or hung up, or shut); for the reader goroutine only.
func (s *hostSock) waitReadable() error {
	if err := s.epraw.Read(s.armFn); err != nil {
		return err
	}
	return s.armErr
}

// arm is waitReadable's raw function, on the epoll set ep: the first call
// arms the socket's one-shot entry and reports false (wait: what arrived
// before is reported at once, the entry being level-triggered); the next,
// after the netpoller's wake-up, takes the event, which disarms the entry
// again, so that the socket wakes no one while a caller polls it.
func (s *hostSock) arm(ep uintptr) bool {
	if !s.armed {
		_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, ep, unix.EPOLL_CTL_MOD, uintptr(s.fd), uintptr(unsafe.Pointer(&s.armEv)), 0, 0)
		if e != 0 {
			s.armErr = fmt.Errorf("epoll_ctl: %w", e)
			return true
		}
		s.armed = true
		return false
	}
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, ep, uintptr(unsafe.Pointer(&s.evs[0])), 1, 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e == 0 && n == 0:
			return false // not this entry's wake-up: wait on
		}
		s.armed = false
		return true
	}
}

// wait sleeps in ppoll(2) until the socket has one of events, an error or
// a hang-up (shut), or until ts passes (nil: no timeout). An interrupted
// sleep without a timeout starts again; with one, it returns (the caller
// looks and waits again).
func (s *hostSock) wait(pfd *[1]unix.PollFd, events int16, ts *unix.Timespec) {
	pfd[0] = unix.PollFd{Fd: int32(s.fd), Events: events}
	for {
		_, err := unix.Ppoll(pfd[:], ts, nil)
		if err != unix.EINTR || ts != nil {
			return
		}
	}
}

// readSome reads what the socket holds into b, waiting in ppoll (pfd)
// while it holds nothing: at least one byte, or io.EOF, or the error.
func (s *hostSock) readSome(pfd *[1]unix.PollFd, b []byte) (int, error) {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READ, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			if n == 0 {
				return 0, io.EOF
			}
			return int(n), nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			s.wait(pfd, unix.POLLIN|unix.POLLRDHUP, nil)
		default:
			return 0, e
		}
	}
}

// shut shuts the socket down both ways (unless it is closed): every
// ppoll on it returns, reads see the end of the stream, writes fail.
func (s *hostSock) shut() {
	s.mu.Lock()
	if !s.closed {
		_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
		s.epf.Close() // waitReadable returns (os.ErrClosed) at once
	}
	s.mu.Unlock()
}

// shutAfter shuts the socket down after d (the H2CTermReq's second).
func (s *hostSock) shutAfter(d time.Duration) {
	s.mu.Lock()
	if !s.closed && s.timer == nil {
		s.timer = time.AfterFunc(d, s.shut)
	}
	s.mu.Unlock()
}

// close shuts the socket down and closes its descriptor, once.
func (s *hostSock) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		if s.timer != nil {
			s.timer.Stop()
		}
		_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
		s.epf.Close()
		_ = unix.Close(s.fd)
	}
	s.mu.Unlock()
}
