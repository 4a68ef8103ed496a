package iostats

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestBucket(t *testing.T) {
	for _, tc := range []struct {
		d    int64
		want int
	}{
		{-5, 0}, {0, 0}, {1, 0}, {1024, 0}, {1025, 1}, {2048, 1}, {2049, 2},
		{int64(LatencyBound(LatencyBuckets - 1)), LatencyBuckets - 1},
		{int64(LatencyBound(LatencyBuckets-1)) + 1, LatencyBuckets},
		{int64(time.Hour), LatencyBuckets},
	} {
		got := Bucket(tc.d)
		if got != tc.want {
			t.Errorf("Bucket(%d) = %d, want %d", tc.d, got, tc.want)
		}
		if got < LatencyBuckets && tc.d > int64(LatencyBound(got)) {
			t.Errorf("Bucket(%d) = %d: above its bound %v", tc.d, got, LatencyBound(got))
		}
		if got > 0 && tc.d <= int64(LatencyBound(got-1)) {
			t.Errorf("Bucket(%d) = %d: fits bucket %d", tc.d, got, got-1)
		}
	}
}

func TestHistogram(t *testing.T) {
	for _, tc := range []struct {
		name    string
		observe []int64
		count   uint64
		sum     time.Duration
		buckets map[int]uint64
	}{
		{"empty", nil, 0, 0, nil},
		{"one", []int64{1500}, 1, 1500, map[int]uint64{1: 1}},
		{"negative counts as 0", []int64{-7, 100}, 2, 100, map[int]uint64{0: 2}},
		{"spread", []int64{1000, 3000, 3000, int64(time.Hour)}, 4, 7000 + time.Hour, map[int]uint64{0: 1, 2: 2, LatencyBuckets: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Histogram
			for _, d := range tc.observe {
				h.Observe(d)
			}
			l := h.Snapshot()
			if l.Count != tc.count || l.Sum != tc.sum {
				t.Errorf("count %d sum %v, want %d, %v", l.Count, l.Sum, tc.count, tc.sum)
			}
			for b, n := range l.Buckets {
				if n != tc.buckets[b] {
					t.Errorf("bucket %d: %d, want %d", b, n, tc.buckets[b])
				}
			}
		})
	}
}

func TestOpSlot(t *testing.T) {
	for i, op := range Opcodes {
		if got := OpSlot(op); got != i {
			t.Errorf("OpSlot(%v) = %d, want %d", op, got, i)
		}
	}
	for _, op := range []nvme.IOOpcode{0x7f, 0x0d, 0x11, 0xff} {
		if got := OpSlot(op); got != -1 {
			t.Errorf("OpSlot(%#x) = %d, want -1", uint8(op), got)
		}
	}
}

func TestObserveAllocs(t *testing.T) {
	var o Op
	if n := testing.AllocsPerRun(1000, func() {
		o.Commands.Add(1)
		o.Latency.Observe(4096)
	}); n != 0 {
		t.Errorf("%v allocations per observation, want 0", n)
	}
}
