package initiator

import (
	"runtime"
	"testing"
	"time"
)

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		func() {
			ft := newFakeTarget(t, 1<<20)
			c := connectFake(t, ft, testOpts())
			ns, _ := c.Namespace(1)
			_, _ = ns.ReadAt(make([]byte, 512), 0)
			_ = c.Close()
			ft.close()
		}()
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
