package blockdev

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
)

func testEngine(dev Device, trimZeroes bool) *engine {
	c, err := newConfig(dev, &Options{TrimZeroes: trimZeroes})
	if err != nil {
		panic(err)
	}
	return newEngine(dev, c)
}

func TestEngineUnaligned(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  int64
		n    int
	}{
		{"aligned", 512, 1024},
		{"head", 100, 412},
		{"tail", 512, 100},
		{"inside one block", 600, 10},
		{"two partial blocks", 1000, 100},
		{"spans many", 300, 5000},
		{"ends at block end", 300, 212 + 1024},
		{"last byte", 64*1024 - 1, 1},
		{"empty", 777, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newMemDevice(64<<10, 512)
			model := make([]byte, 64<<10)
			fill(model, 1)
			dev.poke(0, model)
			e := testEngine(dev, false)
			p := make([]byte, tc.n)
			fill(p, 2)
			if err := e.writeAt(p, tc.off); err != nil {
				t.Fatal(err)
			}
			copy(model[tc.off:], p)
			if !bytes.Equal(dev.snapshot(0, 64<<10), model) {
				t.Fatal("device differs from the model after write")
			}
			got := make([]byte, tc.n)
			if err := e.readAt(got, tc.off); err != nil || !bytes.Equal(got, p) {
				t.Fatalf("read back: %v", err)
			}
		})
	}
}

// TestEngineModel runs random concurrent-free operations against a byte
// model, with both zeroing paths.
func TestEngineModel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dev        func(*memDevice) Device
		trimZeroes bool
	}{
		{"plain writes", func(d *memDevice) Device { return d }, false},
		{"write zeroes", func(d *memDevice) Device { return zeroingDevice{d} }, false},
		{"trim zeroes", func(d *memDevice) Device { return d }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 256 << 10
			md := newMemDevice(size, 4096)
			e := testEngine(tc.dev(md), tc.trimZeroes)
			model := make([]byte, size)
			r := rand.New(rand.NewPCG(9, 9))
			for i := range 400 {
				off := r.Int64N(size)
				n := r.Int64N(min(size-off, 20000) + 1)
				switch r.IntN(4) {
				case 0:
					p := make([]byte, n)
					fill(p, uint64(i))
					if err := e.writeAt(p, off); err != nil {
						t.Fatal(err)
					}
					copy(model[off:], p)
				case 1:
					got := make([]byte, n)
					if err := e.readAt(got, off); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, model[off:off+n]) {
						t.Fatalf("op %d: read %d at %d differs", i, n, off)
					}
				case 2:
					if err := e.zero(off, n, r.IntN(2) == 0); err != nil {
						t.Fatal(err)
					}
					clear(model[off : off+n])
				case 3:
					if err := e.discard(off, n); err != nil {
						t.Fatal(err)
					}
					// memDevice zeroes what it trims: whole blocks only.
					s := (off + 4095) / 4096 * 4096
					if end := (off + n) / 4096 * 4096; end > s {
						clear(model[s:end])
					}
				}
			}
			if !bytes.Equal(md.snapshot(0, size), model) {
				t.Fatal("device differs from the model")
			}
		})
	}
}

// TestEngineConcurrentRMW: unaligned writes to disjoint bytes of the same
// blocks must not undo one another.
func TestEngineConcurrentRMW(t *testing.T) {
	dev := newMemDevice(8192, 4096)
	e := testEngine(dev, false)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			for j := 0; j < 8192; j += 64 * 16 {
				if err := e.writeAt([]byte{byte(i + 1)}, int64(j+i*16)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	data := dev.snapshot(0, 8192)
	for i := range 64 {
		for j := 0; j < 8192; j += 64 * 16 {
			if data[j+i*16] != byte(i+1) {
				t.Fatalf("byte %d lost", j+i*16)
			}
		}
	}
}

func TestEngineErrors(t *testing.T) {
	dev := newMemDevice(8192, 512)
	e := testEngine(dev, false)
	if err := e.readAt(make([]byte, 10), 8190); errno(err) != syscall.EINVAL {
		t.Errorf("read past end: %v", err)
	}
	if err := e.writeAt(make([]byte, 1), -1); errno(err) != syscall.EINVAL {
		t.Errorf("write at -1: %v", err)
	}
	ro := testEngine(dev, false)
	ro.readOnly = true
	if err := ro.writeAt(make([]byte, 512), 0); errno(err) != syscall.EROFS {
		t.Errorf("read-only write: %v", err)
	}
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{errors.ErrUnsupported, syscall.EOPNOTSUPP},
		{syscall.ENOSPC, syscall.ENOSPC},
		{errors.New("transport lost"), syscall.EIO},
	} {
		if got := errno(tc.err); got != tc.want {
			t.Errorf("errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBufPool(t *testing.T) {
	var p bufPool
	for _, n := range []int{1, 4096, 4097, 1 << 20, 32 << 20} {
		b := p.get(n)
		if len(b) != n || cap(b) < n {
			t.Fatalf("get(%d): len %d cap %d", n, len(b), cap(b))
		}
		p.put(b)
	}
}
