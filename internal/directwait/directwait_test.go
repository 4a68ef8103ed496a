package directwait

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func socketpair(t *testing.T) (a, b int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// TestWait: Wait reports a socket that holds a datagram or gets one
// while it waits, reports an empty one as empty once the window has
// passed, and does not wait at all beyond the limit of waiters.
func TestWait(t *testing.T) {
	a, b := socketpair(t)
	for _, tc := range []struct {
		name   string
		window time.Duration
		limit  int
		send   func() // before or during the wait
		want   bool
	}{
		{"ready", time.Minute, 1, func() { unix.Write(b, []byte{1}) }, true},
		{"arrives", time.Minute, 1, func() { go unix.Write(b, []byte{2}) }, true},
		{"empty", time.Millisecond, 1, func() {}, false},
		// A minute's window with no datagram: only the limit returns.
		{"no room", time.Minute, 0, func() {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "arrives" && runtime.GOMAXPROCS(0) < 2 {
				t.Skip("the sender needs a P the waiter does not hold")
			}
			defer SetForTest(tc.window, tc.limit)()
			tc.send()
			if got := Wait(uintptr(a)); got != tc.want {
				t.Fatalf("Wait = %v, want %v", got, tc.want)
			}
			if n := Waiting(); n != 0 {
				t.Fatalf("%d waiting after Wait returned", n)
			}
			var buf [4]byte
			for {
				if _, err := unix.Read(a, buf[:]); err != nil {
					break
				}
			}
		})
	}
}

// TestWaitAllocs: a wait allocates nothing.
func TestWaitAllocs(t *testing.T) {
	a, b := socketpair(t)
	defer SetForTest(time.Minute, 1)()
	var buf [4]byte
	if n := testing.AllocsPerRun(100, func() {
		unix.Write(b, buf[:1])
		Wait(uintptr(a))
		unix.Read(a, buf[:])
	}); n != 0 {
		t.Fatalf("%v allocations per wait, want 0", n)
	}
}
