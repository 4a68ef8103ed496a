package initiator

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestCanPollWait: a controller can sleep in PollWait with one I/O queue
// on the soft provider, not with two, and not over the loop transport;
// where it can, a read completes through PollWait.
func TestCanPollWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    func(t *testing.T) *Controller
		want bool
	}{
		{"soft, one I/O queue", func(t *testing.T) *Controller { return newSoftTgt(t, Options{NrIOQueues: 1}) }, true},
		{"soft, two I/O queues", func(t *testing.T) *Controller { return newSoftTgt(t, Options{NrIOQueues: 2}) }, false},
		{"loop", func(t *testing.T) *Controller { return newTgtFixture(t, 1<<20).connect(t, Options{NrIOQueues: 1}) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c(t)
			if got := c.CanPollWait(); got != tc.want {
				t.Fatalf("CanPollWait = %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			ns, err := c.Namespace(1)
			if err != nil {
				t.Fatal(err)
			}
			var done atomic.Bool
			io := &IO{Op: OpRead, Buf: make([]byte, 4096), Done: func(*IO) { done.Store(true) }}
			ns.Start(io)
			deadline := time.Now().Add(20 * time.Second)
			for !done.Load() && time.Now().Before(deadline) {
				ns.PollWait(time.Second)
			}
			ns.PollDone()
			if !done.Load() || io.Err != nil || io.N != 4096 {
				t.Fatalf("read through PollWait: done %v, N %d, err %v", done.Load(), io.N, io.Err)
			}
		})
	}
}
