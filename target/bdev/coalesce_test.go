package bdev

import (
	"testing"
	"time"
)

func TestCoalesceWindow(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name     string
		ewma     time.Duration
		inflight int
		window   time.Duration
		want     uint32
	}{
		{"QD1 never waits, however slow", 10 * time.Millisecond, 1, 0, 0},
		{"QD3 never waits", 10 * time.Millisecond, 3, 0, 0},
		{"no sample yet", 0, 32, 0, 0},
		{"NVMe SSD, 80 us: never delayed", 80 * us, 32, 0, 0},
		{"just under the least window", 639 * us, 32, 0, 0},
		{"the least window", 640 * us, 32, 20 * us, 16},
		{"a disk at 5 ms: 3 %", 5 * time.Millisecond, 8, 156250 * time.Nanosecond, 8},
		{"null_blk at 10 ms: 3 %, wants at most 16", 10 * time.Millisecond, 32, 312500 * time.Nanosecond, 16},
		{"4 in flight wait for all 4", 10 * time.Millisecond, 4, 312500 * time.Nanosecond, 4},
		{"slower than 16 ms: capped", 100 * time.Millisecond, 128, 500 * us, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, want := coalesceWindow(tc.ewma, tc.inflight)
			if w != tc.window || want != tc.want {
				t.Errorf("coalesceWindow(%v, %d) = %v, %d; want %v, %d", tc.ewma, tc.inflight, w, want, tc.window, tc.want)
			}
		})
	}
}

func TestLatencyEWMA(t *testing.T) {
	tests := []struct {
		name    string
		ewma    int64
		samples []int64
		want    int64
	}{
		{"the first sample is the EWMA", 0, []int64{10_000_000}, 10_000_000},
		{"a steady device stays", 10_000_000, []int64{10_000_000, 10_000_000}, 10_000_000},
		{"one outlier moves it 1/16", 1_000_000, []int64{17_000_000}, 2_000_000},
		{"a negative sample (clock) counts as 0", 1_600_000, []int64{-5}, 1_500_000},
		{"a device that gets fast converges", 10_000_000, fill(64, 50_000), 0}, // checked below
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.ewma
			for _, s := range tc.samples {
				e = latencyEWMA(e, s)
			}
			if tc.want == 0 {
				// 64 samples leave (15/16)^64, about 1.6 %, of the gap:
				// the window is back under its least.
				if w, _ := coalesceWindow(time.Duration(e), 32); w != 0 {
					t.Errorf("EWMA %v after 64 fast samples: window %v, want 0", time.Duration(e), w)
				}
				return
			}
			if e != tc.want {
				t.Errorf("EWMA %d, want %d", e, tc.want)
			}
		})
	}
}

func fill(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}
