package initiator

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// heapPeak samples HeapAlloc until stop is called and returns the
// highest value seen (for the figures logged, not for assertions).
func heapPeak() (stop func() uint64) {
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestDiscoveryHostileLog: a discovery controller whose log claims 65,536
// records (64 MiB) and whose GENCTR changes at every read (issue 22,
// item 10; it made the host allocate about 200 MiB at once). With the
// default limit the host reads the header and refuses the log; when the
// host asks for that many records it reads them in pieces, bounded
// retries, and holds the decoded records only.
func TestDiscoveryHostileLog(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      int
		maxAlloc uint64 // bytes the read may allocate in all
	}{
		{"default limit", 0, 1 << 20},
		// 10 reads of 65,536 records decoded into one reused slice.
		{"host asks for 65536", 1 << 16, 200 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := newFakeTarget(t, 1<<20)
			ft.mdts = 0
			ft.hostileDisc = true
			o := testOpts()
			o.SubsystemNQN = fabrics.DiscoveryNQN
			o.MaxDiscoveryRecords = tc.max
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			c := connectFake(t, ft, o)
			defer c.Close()
			runtime.GC()
			var base runtime.MemStats
			runtime.ReadMemStats(&base)
			before := base.TotalAlloc
			stop := heapPeak()
			_, err := c.DiscoveryLog(ctx)
			peak := stop()
			alloc := totalAlloc() - before
			t.Logf("allocated %.1f MiB, heap peak %.1f MiB above the %.1f MiB before: %v",
				float64(alloc)/(1<<20), float64(peak-min(peak, base.HeapAlloc))/(1<<20), float64(base.HeapAlloc)/(1<<20), err)
			if err == nil {
				t.Fatal("a log whose GENCTR never settles was accepted")
			}
			if tc.max == 0 && !errors.Is(err, ErrDiscoveryTooLarge) {
				t.Errorf("error %v, want ErrDiscoveryTooLarge", err)
			}
			if alloc > tc.maxAlloc {
				t.Errorf("reading the log allocated %d bytes, want at most %d", alloc, tc.maxAlloc)
			}
		})
	}
}
