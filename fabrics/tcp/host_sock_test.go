package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/fabrics"
)

// hostWaitFor polls cond (every millisecond, for up to 10 s): the states
// it waits for are inside system calls, which signal nothing.
func hostWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// hostWithin fails unless ch is closed within d.
func hostWithin(t *testing.T, what string, ch <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// hostPollLoop runs PollWait (a minute at a time) until the queue ends;
// the cleanup checks that it returned.
func hostPollLoop(t *testing.T, q *hostQueue) {
	back := make(chan struct{})
	go func() {
		defer close(back)
		for !q.dead.Load() {
			q.PollWait(time.Minute)
		}
	}()
	t.Cleanup(func() { hostWithin(t, "PollWait's return", back, 5*time.Second) })
}

// TestHostSocketEnds: the queue's socket is outside the netpoller
// (host_sock.go), so whoever sleeps on it in ppoll must be woken when the
// queue ends: Close returns promptly with the reader goroutine, a
// PollWait sleeper or the writer (on a full socket) asleep; a peer's reset
// ends the queue with an error, polled or not; a fatal error whose
// H2CTermReq cannot go (the socket full) ends it after the termination
// request's second. In every case the outstanding read fails with
// ErrQueueClosed, both goroutines return and the descriptor is closed.
func TestHostSocketEnds(t *testing.T) {
	const prompt = 5 * time.Second
	reset := func(c *hostFakeConn, _ uint16, _ <-chan struct{}) {
		c.c.(*net.TCPConn).SetLinger(0)
		c.c.Close()
	}
	cases := []struct {
		name string
		// hook is the fake's, given the outstanding read's capsule
		// (its CID); step is closed once the queue is in the state to
		// test (setup), at the latest at cleanup.
		hook func(c *hostFakeConn, cid uint16, step <-chan struct{})
		// setup runs once the read is out; it reports when the queue is
		// in the state to test.
		setup func(t *testing.T, q *hostQueue) func() bool
		close bool   // Close the queue (else the peer ends it)
		want  string // in the read's error, besides ErrQueueClosed
	}{
		{
			name:  "close, reader asleep",
			hook:  func(*hostFakeConn, uint16, <-chan struct{}) {},
			setup: func(t *testing.T, q *hostQueue) func() bool { return func() bool { return q.rwaits.Load() > 0 } },
			close: true,
		},
		{
			name: "close, PollWait asleep",
			hook: func(*hostFakeConn, uint16, <-chan struct{}) {},
			setup: func(t *testing.T, q *hostQueue) func() bool {
				n := q.pw.sleeps.Load()
				hostPollLoop(t, q)
				return func() bool { return q.pw.sleeps.Load() > n }
			},
			close: true,
		},
		{name: "peer reset", hook: reset, want: "connection reset"},
		{
			name: "peer reset, polled",
			hook: func(c *hostFakeConn, cid uint16, step <-chan struct{}) {
				<-step
				reset(c, cid, step)
			},
			setup: func(t *testing.T, q *hostQueue) func() bool {
				n := q.pw.sleeps.Load()
				hostPollLoop(t, q)
				return func() bool { return q.pw.sleeps.Load() > n }
			},
			want: "connection reset",
		},
		{
			name:  "close, writer on a full socket",
			hook:  func(c *hostFakeConn, _ uint16, step <-chan struct{}) { <-step },
			setup: hostFillSocket,
			close: true,
		},
		{
			name: "fatal, H2CTermReq on a full socket",
			hook: func(c *hostFakeConn, cid uint16, step <-chan struct{}) {
				<-step
				c.send(c.pdu(TypeR2T, 0, nil, func(p PDU) { // an R2T for a read: fatal
					r := R2T(p)
					r.SetCCCID(cid)
					r.SetR2TL(512)
				}))
			},
			setup: hostFillSocket,
			want:  "which reads",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newHostFake(t)
			step, release := make(chan struct{}), make(chan struct{})
			stepped := false
			t.Cleanup(func() {
				if !stepped {
					close(step)
				}
				close(release)
			})
			hooked := make(chan struct{})
			f.hook = func(c *hostFakeConn, sqe []byte) bool {
				if sqe[0] != 0x02 || sqe[40] != 7 {
					return false // the writes of hostFillSocket: the fake's
				}
				// A receive buffer that cannot grow: the writes of
				// hostFillSocket never all fit.
				if err := c.c.(*net.TCPConn).SetReadBuffer(4096); err != nil {
					t.Error(err)
				}
				close(hooked)
				tc.hook(c, binary.LittleEndian.Uint16(sqe[2:]), step)
				<-release // the fake reads nothing more
				return true
			}
			q := hostDialFake(t, f, HostConfig{}, 0, 32)
			fd := q.sock.fd
			done := make(chan struct{})
			rc := hostIOCmd(0x02, 7, make([]byte, 512), 0)
			rc.Done = func(*fabrics.HostCommand) { close(done) }
			if err := q.Submit(rc); err != nil {
				t.Fatal(err)
			}
			hostWithin(t, "the capsule at the fake", hooked, prompt)
			if tc.setup != nil {
				if ready := tc.setup(t, q); ready != nil {
					hostWaitFor(t, "state to test", ready)
				}
			}
			start := time.Now()
			if !tc.close {
				close(step)
				stepped = true
			}
			if tc.close {
				closed := make(chan struct{})
				go func() { q.Close(); close(closed) }()
				hostWithin(t, "Close", closed, prompt)
			}
			hostWithin(t, "the read's failure", done, prompt)
			if tc.setup != nil && !tc.close && tc.want == "which reads" && time.Since(start) < time.Second {
				t.Errorf("the queue ended %v after the fatal error, before the H2CTermReq's second", time.Since(start))
			}
			if !errors.Is(rc.Err, fabrics.ErrQueueClosed) || !strings.Contains(fmt.Sprint(rc.Err), tc.want) {
				t.Errorf("read's error %v, want ErrQueueClosed and %q", rc.Err, tc.want)
			}
			hostWithin(t, "the queue's end", q.done, prompt)
			hostWithin(t, "the reader's end", q.rdone, prompt)
			q.sock.mu.Lock()
			closedFD := q.sock.closed
			q.sock.mu.Unlock()
			if !closedFD {
				t.Errorf("descriptor %d left open", fd)
			}
			after := hostIOCmd(0x02, 0, make([]byte, 512), 1)
			after.Done = func(*fabrics.HostCommand) { t.Error("Done after the end") }
			if err := q.Submit(after); !errors.Is(err, fabrics.ErrQueueClosed) {
				t.Errorf("Submit after the end: %v, want ErrQueueClosed", err)
			}
		})
	}
}

// hostFillSocket shrinks the queue's send buffer and fills it (and the
// fake's receive buffer: the fake reads no more) with in-capsule writes,
// until the writer goroutine sleeps on the full socket.
func hostFillSocket(t *testing.T, q *hostQueue) func() bool {
	if err := unix.SetsockoptInt(q.sock.fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, AdminInCapsuleDataSize)
	for tag := uint16(1); tag < uint16(q.depth); tag++ {
		w := hostIOCmd(0x01, 0, data, tag)
		w.Done = func(*fabrics.HostCommand) {}
		if err := q.Submit(w); err != nil {
			t.Fatal(err)
		}
	}
	return func() bool { return q.wwaits.Load() > 0 }
}

// hostEpollsWatching returns the epoll descriptors of the process whose
// interest list holds descriptor fd (/proc/self/fdinfo's tfd lines).
func hostEpollsWatching(t *testing.T, fd int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var eps []int
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" && f[1] == strconv.Itoa(fd) {
				n, _ := strconv.Atoi(e.Name())
				eps = append(eps, n)
			}
		}
	}
	return eps
}

// TestHostSocketOutsideNetpoller: the queue's socket is in no epoll set
// but its private one (the netpoller's would wake a runtime thread at
// every segment fio's thread reads), and while a caller polls, the
// commands' responses leave that set without events (its one-shot entry
// disarmed): nothing wakes the netpoller for them. After PollDone the
// reader goroutine, waiting in the netpoller on the private set, gets the
// responses again.
func TestHostSocketOutsideNetpoller(t *testing.T) {
	f := newHostFake(t)
	q := hostDialFake(t, f, HostConfig{}, 1, 3)
	var ep int
	if err := q.sock.epraw.Control(func(fd uintptr) { ep = int(fd) }); err != nil {
		t.Fatal(err)
	}
	if got := hostEpollsWatching(t, q.sock.fd); len(got) != 1 || got[0] != ep {
		t.Fatalf("socket %d in epoll sets %v, want only its own (%d)", q.sock.fd, got, ep)
	}
	hostPollWarm(t, q)
	for i := range 10 {
		var done atomic.Bool
		cmd := hostIOCmd(0x02, 0, make([]byte, 4096), uint16(i%2))
		cmd.Done = func(*fabrics.HostCommand) { done.Store(true) }
		if err := q.Submit(cmd); err != nil {
			t.Fatal(err)
		}
		// The response in the socket, not yet taken: the private set
		// must not have turned readable.
		sfd := []unix.PollFd{{Fd: int32(q.sock.fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(sfd, 10000); err != nil || n != 1 {
			t.Fatalf("round %d: no response within 10 s (%d, %v)", i, n, err)
		}
		pfd := []unix.PollFd{{Fd: int32(ep), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 0); err != nil || n != 0 {
			t.Fatalf("round %d: the private epoll set is readable (%d, %v, revents %#x) while polled", i, n, err, pfd[0].Revents)
		}
		for end := time.Now().Add(10 * time.Second); !done.Load(); q.Poll() {
			if time.Now().After(end) {
				t.Fatalf("round %d: no completion within 10 s of polling", i)
			}
		}
		if cmd.Err != nil {
			t.Fatal(cmd.Err)
		}
	}
	q.PollDone()
	before := hostCountersOf(q).rdPDUs
	hostRun(t, q, hostIOCmd(0x02, 0, make([]byte, 4096), 0))
	if got := hostCountersOf(q).rdPDUs - before; got == 0 {
		t.Error("after PollDone the reader goroutine read nothing")
	}
}
