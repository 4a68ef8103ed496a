package uring

import (
	"testing"
	"time"
)

// TestWaitTimeout waits for more completions than there are: the wait
// ends at its timeout, not before, with what is there; with enough there
// it ends at once.
func TestWaitTimeout(t *testing.T) {
	r := newRing(t, 8, 0)
	if !r.HasExtArg() {
		t.Skip("kernel without IORING_FEAT_EXT_ARG (Linux 5.11)")
	}
	tests := []struct {
		name    string
		nops    int
		want    uint32
		timeout time.Duration
		// the wait must last the timeout (it cannot have been met)
		timesOut bool
	}{
		{"nothing there: the timeout ends it", 0, 1, 2 * time.Millisecond, true},
		{"fewer than wanted: the timeout ends it", 1, 3, 2 * time.Millisecond, true},
		{"as many as wanted: at once", 3, 3, 30 * time.Second, false},
		{"more than wanted: at once", 4, 2, 30 * time.Second, false},
		{"a whole second and more", 0, 1, time.Second + time.Millisecond, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.nops {
				r.SQE().PrepNop(uint64(i))
			}
			if err := r.Submit(0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := r.WaitTimeout(tc.want, tc.timeout); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if tc.timesOut && took < tc.timeout {
				t.Errorf("returned after %v, before its timeout %v", took, tc.timeout)
			}
			if !tc.timesOut && took >= tc.timeout {
				t.Errorf("waited out its timeout %v with enough completions there", tc.timeout)
			}
			// NOPs complete as they are submitted: all are there.
			if got := r.Ready(); got != uint32(tc.nops) {
				t.Errorf("%d completions ready, want %d", got, tc.nops)
			}
			for range tc.nops {
				r.Advance()
			}
		})
	}
}

func TestWaitTimeoutAllocs(t *testing.T) {
	r := newRing(t, 8, 0)
	if !r.HasExtArg() {
		t.Skip("kernel without IORING_FEAT_EXT_ARG (Linux 5.11)")
	}
	if n := testing.AllocsPerRun(10, func() {
		r.SQE().PrepNop(1)
		_ = r.Submit(0)
		_ = r.WaitTimeout(1, time.Second)
		r.Advance()
	}); n != 0 {
		t.Fatalf("%v allocations per wait", n)
	}
}
