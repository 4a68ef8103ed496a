package monoclock

import (
	"testing"
	"time"
)

// TestNowIsSinceEpoch: Now is the monotonic time since the epoch, read
// between two calls, and never 0.
func TestNowIsSinceEpoch(t *testing.T) {
	a := Now()
	s := time.Since(epoch)
	b := Now()
	if a <= 0 || a > max(s, 1) || s > b {
		t.Fatalf("Now() = %v, then time.Since(epoch) = %v, then Now() = %v: want non-decreasing and > 0", a, s, b)
	}
}

func BenchmarkNow(b *testing.B) {
	for b.Loop() {
		_ = Now()
	}
}

func BenchmarkTimeNow(b *testing.B) {
	for b.Loop() {
		_ = time.Now()
	}
}
