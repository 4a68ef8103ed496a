package bdev

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics/region"
)

// gatherSegments concatenates segments' bytes.
func gatherSegments(segs []region.Segment) []byte {
	var b []byte
	for _, s := range segs {
		b = append(b, s.Bytes()...)
	}
	return b
}

// TestMemoryReadSegments: the segments a READ lends hold what ReadAt
// copies, across holes, written chunks and a region boundary, and each
// holds a reference on its region.
func TestMemoryReadSegments(t *testing.T) {
	const size = 2 * memRegionSize
	d, err := NewMemory(size, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pattern := func(n int, seed byte) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seed + byte(i*7)
		}
		return p
	}
	for _, w := range []struct {
		off  int64
		n    int
		seed byte
	}{
		{0, 8192, 1},
		{MemoryChunkSize - 4096, 8192, 2},
		{memRegionSize - 4096, 12288, 3},
	} {
		if _, err := d.WriteAt(pattern(w.n, w.seed), w.off); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		off, n   int64
		wantSegs int
	}{
		{"written 4K", 0, 4096, 1},
		{"written across a chunk", MemoryChunkSize - 8192, 16384, 1},
		{"hole in a mapped region", 3 * MemoryChunkSize, 128 << 10, 1},
		{"across the region boundary", memRegionSize - 65536, 128 << 10, 2},
		{"unmapped region, zeroes", memRegionSize + 8*MemoryChunkSize, 128 << 10, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]byte, tc.n)
			if _, err := d.ReadAt(want, tc.off); err != nil {
				t.Fatal(err)
			}
			segs, err := d.ReadSegments(tc.off, tc.n, make([]region.Segment, 0, 4))
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) != tc.wantSegs {
				t.Errorf("%d segments, want %d", len(segs), tc.wantSegs)
			}
			if got := gatherSegments(segs); !bytes.Equal(got, want) {
				t.Fatalf("segments differ from ReadAt (%d bytes)", len(got))
			}
			for _, s := range segs {
				if s.Region.Refs() < 2 {
					t.Errorf("segment's region has %d references, want the owner's and the segment's", s.Region.Refs())
				}
			}
			region.ReleaseAll(segs)
		})
	}
	if _, err := d.ReadSegments(size-4096, 8192, nil); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("ReadSegments past the end: %v, want ErrOutOfRange", err)
	}
}

// TestMemoryCloseWaitsForSegments: Close frees the memory only once the
// segments lent before it are released (a transport may still be sending
// them); requests after Close fail.
func TestMemoryCloseWaitsForSegments(t *testing.T) {
	d, err := NewMemory(memRegionSize, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p := bytes.Repeat([]byte{0xa5}, 4096)
	if _, err := d.WriteAt(p, 4096); err != nil {
		t.Fatal(err)
	}
	segs, err := d.ReadSegments(4096, 4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := segs[0].Region
	released := make(chan struct{})
	if !r.OnRelease(func() { close(released) }) {
		t.Fatal("region gone while lent")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released:
		t.Fatal("the region was released while a segment is lent")
	default:
	}
	if !bytes.Equal(segs[0].Bytes(), p) { // still mapped: this would fault otherwise
		t.Fatal("lent segment changed after Close")
	}
	if _, err := d.ReadSegments(0, 4096, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadSegments after Close: %v", err)
	}
	region.ReleaseAll(segs)
	select {
	case <-released:
	default:
		t.Fatal("the region outlived its last segment")
	}
}

// TestMemorySegmentsRacingClose: ReadSegments racing Close either lends
// segments that stay readable until released or fails with ErrClosed
// (run with -race).
func TestMemorySegmentsRacingClose(t *testing.T) {
	for range 20 {
		d, err := NewMemory(4*MemoryChunkSize, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.WriteAt(make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var segs []region.Segment
				for i := range 50 {
					var err error
					segs, err = d.ReadSegments(int64((g+i)%4)*MemoryChunkSize, 8192, segs[:0])
					if err != nil {
						if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrOutOfRange) {
							t.Error(err)
						}
						return
					}
					_ = gatherSegments(segs)
					segs = region.ReleaseAll(segs)
				}
			}()
		}
		d.Close()
		wg.Wait()
	}
}
