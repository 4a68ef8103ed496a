package rdmatest

import (
	"bytes"
	"testing"
)

// TestNames: every table entry has a distinct name (KnownFailures and
// -run select by it).
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range Names() {
		if n == "" || seen[n] {
			t.Errorf("test name %q empty or repeated", n)
		}
		seen[n] = true
	}
	if len(seen) < 60 {
		t.Errorf("%d tests in the table", len(seen))
	}
}

// TestPattern: the pattern of a range equals the same range of the whole
// pattern, and different seeds and offsets give different bytes.
func TestPattern(t *testing.T) {
	whole := pattern(1000, 7)
	for _, r := range []struct{ off, n int }{{0, 1}, {1, 7}, {3, 16}, {8, 8}, {13, 987}, {999, 1}} {
		part := make([]byte, r.n)
		fill(part, 7, r.off)
		if !bytes.Equal(part, whole[r.off:r.off+r.n]) {
			t.Errorf("fill at %d+%d differs from the whole pattern", r.off, r.n)
		}
	}
	if bytes.Equal(pattern(64, 7), pattern(64, 8)) {
		t.Error("seeds 7 and 8 give the same pattern")
	}
	if bytes.Equal(whole[:64], whole[64:128]) {
		t.Error("the pattern repeats after 64 bytes")
	}
	if !checkPattern(t, "whole", whole, 7, 0) {
		t.Error("checkPattern refuses the pattern itself")
	}
}
