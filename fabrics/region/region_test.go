package region

import (
	"slices"
	"testing"
)

func TestRegionLifetime(t *testing.T) {
	tests := []struct {
		name    string
		lend    int  // segments lent before Close
		release bool // release them after Close (else before)
	}{
		{"no segments", 0, false},
		{"segments released before close", 3, false},
		{"segments outlive close", 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var events []string
			r := New(make([]byte, 64), func() { events = append(events, "unmap") })
			var segs []Segment
			for i := range tc.lend {
				r.Acquire()
				segs = append(segs, Segment{Region: r, Off: i * 8, Len: 8})
			}
			if tc.lend > 0 && !r.OnRelease(func() { events = append(events, "deregister") }) {
				t.Fatal("OnRelease on a live region reported it gone")
			}
			if !tc.release {
				segs = ReleaseAll(segs)
			}
			r.Close()
			if tc.release {
				if len(events) != 0 {
					t.Fatalf("memory released while %d segments are lent: %v", len(segs), events)
				}
				if got := r.Refs(); got != int64(tc.lend) {
					t.Fatalf("refs %d, want %d", got, tc.lend)
				}
				segs = ReleaseAll(segs)
			}
			want := []string{"unmap"}
			if tc.lend > 0 {
				want = []string{"deregister", "unmap"}
			}
			if !slices.Equal(events, want) {
				t.Fatalf("events %v, want %v", events, want)
			}
			if r.OnRelease(func() {}) {
				t.Fatal("OnRelease on a released region reported it live")
			}
			if len(segs) != 0 || cap(segs) < tc.lend {
				t.Fatalf("ReleaseAll left len %d cap %d", len(segs), cap(segs))
			}
		})
	}
}

func TestSegmentBytes(t *testing.T) {
	buf := []byte("0123456789")
	r := New(buf, nil)
	segs := []Segment{{r, 2, 3}, {r, 7, 2}}
	if got := string(segs[0].Bytes()) + string(segs[1].Bytes()); got != "23478" {
		t.Fatalf("bytes %q", got)
	}
	if Len(segs) != 5 {
		t.Fatalf("Len %d", Len(segs))
	}
}

func TestReleaseBelowZeroPanics(t *testing.T) {
	r := New(nil, nil)
	r.Close()
	defer func() {
		if recover() == nil {
			t.Fatal("a release past the last reference did not panic")
		}
	}()
	r.Release()
}
