package tcp

import (
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostSock is a host queue's socket outside Go's netpoller: its own
// descriptor, non-blocking, read and written with raw system calls, waited
// on with ppoll(2) by whoever needs it (the reader and writer goroutines,
// a poller on fio's thread). A socket in the netpoller's epoll set wakes
// the runtime's thread blocked in epoll_wait at every segment that
// arrives, even while no goroutine waits on it (fio's thread reads it):
// a context switch per QD1 I/O for nothing (docs/tcp.md, "Host wake-ups
// at QD1").
//
// The descriptor stays open until close, which the queue calls once no one
// can use it any more (teardown); shut wakes every sleeper before that.
type hostSock struct {
	fd     int
	mu     sync.Mutex // orders shut (any goroutine, a timer) against close
	closed bool
	timer  *time.Timer // a delayed shut (shutAfter), stopped by close
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
	return &hostSock{fd: nfd}, nil
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
		_ = unix.Close(s.fd)
	}
	s.mu.Unlock()
}
