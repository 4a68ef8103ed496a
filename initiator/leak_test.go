package initiator

import (
	"testing"
	"testing/synctest"
)

// TestNoGoroutineLeak connects, does I/O and disconnects 20 times in a
// synctest bubble: the bubble ends only once every goroutine started in
// it has exited (one left blocked fails the test as a deadlock).
func TestNoGoroutineLeak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 20 {
			ft := newFakeTarget(t, 1<<20)
			c := connectFake(t, ft, testOpts())
			ns, _ := c.Namespace(1)
			_, _ = ns.ReadAt(make([]byte, 512), 0)
			_ = c.Close()
			ft.close()
		}
	})
}
