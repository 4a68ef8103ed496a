package bdev

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// backend is one device under test with what its reads return.
type backend struct {
	name   string
	open   func(t *testing.T, size int64, bs uint32) Device
	stores bool // reads return what was written
}

func backends(t *testing.T) []backend {
	return []backend{
		{"memory", func(t *testing.T, size int64, bs uint32) Device {
			d, err := NewMemory(size, bs)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, true},
		{"null", func(t *testing.T, size int64, bs uint32) Device {
			d, err := NewNull(size, bs)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, false},
		{"file", func(t *testing.T, size int64, bs uint32) Device {
			d, err := OpenFile(Spec{Kind: KindFile, Path: filepath.Join(t.TempDir(), "disk.img"), Size: size, BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, true},
		{"file-no-fallocate", func(t *testing.T, size int64, bs uint32) Device {
			d, err := OpenFile(Spec{Kind: KindFile, Path: filepath.Join(t.TempDir(), "disk.img"), Size: size, BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			d.noFallocate = true
			return d
		}, true},
		{"block", func(t *testing.T, size int64, bs uint32) Device {
			dev := loopDevice(t, size, 512)
			d, err := OpenBlock(Spec{Kind: KindBlock, Path: dev, BlockSize: bs})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}, true},
	}
}

// loopDevice attaches a loop device over a new sparse file of size bytes
// with the given logical sector size, or skips the test when loop devices
// cannot be used here.
func loopDevice(t *testing.T, size int64, sector int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("block backend test needs root to attach a loop device")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("block backend test needs losetup (util-linux)")
	}
	img := filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", "--sector-size", fmt.Sprint(sector), img).CombinedOutput()
	if err != nil {
		t.Skipf("block backend test: cannot attach a loop device (no loop driver?): losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// alignedBuf returns a zeroed n-byte slice whose address is a multiple of
// align (reflect gives the address without package unsafe).
func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	off := int(reflect.ValueOf(&b[0]).Pointer() % uintptr(align))
	if off != 0 {
		off = align - off
	}
	return b[off : off+n : off+n]
}

func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func readBack(t *testing.T, d Device, off int64, n int) []byte {
	t.Helper()
	p := alignedBuf(n, 4096)
	for i := range p {
		p[i] = 0xA5 // so a read that does not fill p shows
	}
	got, err := d.ReadAt(p, off)
	if err != nil || got != n {
		t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", n, off, got, err)
	}
	return p
}

func TestBackends(t *testing.T) {
	const size = 1 << 20
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			d := b.open(t, size, 0)
			defer d.Close()
			if d.Size() != size || d.BlockSize() != 512 {
				t.Fatalf("Size, BlockSize = %d, %d; want %d, 512", d.Size(), d.BlockSize(), size)
			}
			if got := readBack(t, d, 0, 8192); !bytes.Equal(got, make([]byte, 8192)) {
				t.Errorf("a fresh device does not read zeroes")
			}

			writes := []struct {
				name string
				off  int64
				n    int
			}{
				{"aligned 4 KiB", 8192, 4096},
				{"unaligned", 100_001, 777},
				{"crosses 64 KiB chunk", 65536 - 1000, 3000},
				{"last byte", size - 1, 1},
				{"whole first 128 KiB", 0, 128 << 10},
				{"empty at end", size, 0},
			}
			for i, w := range writes {
				p := pattern(w.n, uint64(i))
				if n, err := d.WriteAt(p, w.off); err != nil || n != w.n {
					t.Fatalf("%s: WriteAt = %d, %v", w.name, n, err)
				}
				want := p
				if !b.stores {
					want = make([]byte, w.n)
				}
				if got := readBack(t, d, w.off, w.n); !bytes.Equal(got, want) {
					t.Errorf("%s: read back differs from what was written", w.name)
				}
			}
			if err := d.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}

			// WriteZeroes and Discard read back zeroes, and leave the
			// neighbours alone.
			for _, op := range []struct {
				name string
				fn   func(off, n int64) error
			}{{"WriteZeroes", d.WriteZeroes}, {"Discard", d.Discard}} {
				for _, r := range []struct{ off, n int64 }{{4096, 4096}, {0, 128 << 10}, {65536 + 512, 65536}, {size - 512, 512}, {1000, 0}} {
					full := pattern(int(r.n)+2*4096, 42)
					lo := max(r.off-4096, 0)
					hi := min(r.off+r.n+4096, size)
					if _, err := d.WriteAt(full[:hi-lo], lo); err != nil {
						t.Fatal(err)
					}
					if err := op.fn(r.off, r.n); err != nil {
						t.Fatalf("%s(%d, %d): %v", op.name, r.off, r.n, err)
					}
					got := readBack(t, d, lo, int(hi-lo))
					want := bytes.Clone(full[:hi-lo])
					if !b.stores {
						want = make([]byte, hi-lo)
					}
					clear(want[r.off-lo : r.off-lo+r.n])
					if !bytes.Equal(got, want) {
						t.Errorf("%s(%d, %d): read back differs", op.name, r.off, r.n)
					}
				}
			}

			// Out of range: every operation, typed error, nothing done.
			ranges := []struct {
				name   string
				off, n int64
			}{
				{"negative offset", -1, 1},
				{"past end", size, 1},
				{"straddles end", size - 512, 1024},
				{"huge length", 0, 1 << 62},
				{"offset overflow", 1<<63 - 1, 1},
			}
			for _, r := range ranges {
				if r.n <= 4096 { // a buffer of that length
					if _, err := d.ReadAt(make([]byte, r.n), r.off); !errors.Is(err, ErrOutOfRange) {
						t.Errorf("ReadAt %s: err = %v, want ErrOutOfRange", r.name, err)
					}
					if _, err := d.WriteAt(make([]byte, r.n), r.off); !errors.Is(err, ErrOutOfRange) {
						t.Errorf("WriteAt %s: err = %v, want ErrOutOfRange", r.name, err)
					}
				}
				if err := d.WriteZeroes(r.off, r.n); !errors.Is(err, ErrOutOfRange) {
					t.Errorf("WriteZeroes %s: err = %v, want ErrOutOfRange", r.name, err)
				}
				if err := d.Discard(r.off, r.n); !errors.Is(err, ErrOutOfRange) {
					t.Errorf("Discard %s: err = %v, want ErrOutOfRange", r.name, err)
				}
			}
			var re *RangeError
			if _, err := d.ReadAt(make([]byte, 1), size); !errors.As(err, &re) || re.Op != "read" || re.Size != size {
				t.Errorf("ReadAt past end: err = %#v, want *RangeError{Op: read}", err)
			}
			if err := d.Discard(0, -1); !errors.Is(err, ErrOutOfRange) {
				t.Errorf("Discard negative length: %v", err)
			}

			if err := d.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if _, err := d.ReadAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
				t.Errorf("ReadAt after Close: %v", err)
			}
			if _, err := d.WriteAt(make([]byte, 512), 0); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteAt after Close: %v", err)
			}
			if err := d.Flush(); !errors.Is(err, ErrClosed) {
				t.Errorf("Flush after Close: %v", err)
			}
			if err := d.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestBlockSize4096(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "block" {
			continue // see TestBlockDevice
		}
		t.Run(b.name, func(t *testing.T) {
			d := b.open(t, 1<<20, 4096)
			defer d.Close()
			if d.BlockSize() != 4096 {
				t.Errorf("BlockSize = %d", d.BlockSize())
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.img")
	if err := os.WriteFile(small, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	tiny := filepath.Join(dir, "tiny.img")
	if err := os.WriteFile(tiny, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"no kind", Spec{}, "no backend kind"},
		{"unknown kind", Spec{Kind: "tape"}, `unknown backend kind "tape"`},
		{"block size not power of two", Spec{Kind: KindMemory, Size: 1 << 20, BlockSize: 1000}, "not a power of two"},
		{"block size too small", Spec{Kind: KindNull, Size: 1 << 20, BlockSize: 256}, "not a power of two"},
		{"block size too large", Spec{Kind: KindMemory, Size: 1 << 20, BlockSize: 1 << 17}, "not a power of two"},
		{"negative size", Spec{Kind: KindMemory, Size: -512}, "negative size"},
		{"memory without size", Spec{Kind: KindMemory}, "size must be positive"},
		{"null without size", Spec{Kind: KindNull}, "size must be positive"},
		{"size not multiple of block", Spec{Kind: KindMemory, Size: 1000}, "not a multiple"},
		{"file without path", Spec{Kind: KindFile, Size: 4096}, "no path"},
		{"missing file without size", Spec{Kind: KindFile, Path: filepath.Join(dir, "nope.img")}, "does not exist and no size"},
		{"file under a file", Spec{Kind: KindFile, Path: filepath.Join(small, "sub/dir.img"), Size: 4096}, "not a directory"}, // missing directories are made
		{"file size not multiple", Spec{Kind: KindFile, Path: filepath.Join(dir, "x.img"), Size: 1000}, "multiple of the block size"},
		{"file smaller than size", Spec{Kind: KindFile, Path: small, Size: 8192}, "set grow to extend it"},
		{"file larger than size", Spec{Kind: KindFile, Path: small, Size: 2048}, "never shrunk"},
		{"file larger than size with grow", Spec{Kind: KindFile, Path: small, Size: 2048, Grow: true}, "never shrunk"},
		{"file smaller than a block", Spec{Kind: KindFile, Path: tiny}, "smaller than one block"},
		{"file is a directory", Spec{Kind: KindFile, Path: dir}, "is a directory"},
		{"block without path", Spec{Kind: KindBlock}, "no device path"},
		{"block on a regular file", Spec{Kind: KindBlock, Path: small}, "not a block device"},
		{"block on missing node", Spec{Kind: KindBlock, Path: filepath.Join(dir, "nodev")}, "no such file"},
		{"file on a character device", Spec{Kind: KindFile, Path: "/dev/zero"}, "not a regular file"},
		{"file under a regular file", Spec{Kind: KindFile, Path: filepath.Join(small, "x.img"), Size: 4096}, "not a directory"},
		{"memory larger than the machine", Spec{Kind: KindMemory, Size: 1000000 << 40}, "more than the machine's memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Open(tt.spec)
			if err == nil {
				d.Close()
				t.Fatalf("Open(%+v) succeeded, want error containing %q", tt.spec, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%+v) = %v, want error containing %q", tt.spec, err, tt.want)
			}
			// Check refuses what Open refuses, with the same reason.
			if err := Check(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%+v) = %v, want error containing %q", tt.spec, err, tt.want)
			}
		})
	}
	// A failed create leaves no file behind.
	if _, err := os.Stat(filepath.Join(dir, "x.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed open left a file: %v", err)
	}
}

// TestCheckModifiesNothing: Check accepts what Open would open, without
// creating a missing file or growing a short one.
func TestCheckModifiesNothing(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.img")
	if err := os.WriteFile(short, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "new.img")
	for _, spec := range []Spec{
		{Kind: KindFile, Path: missing, Size: 1 << 20},
		{Kind: KindFile, Path: short, Size: 8192, Grow: true},
		{Kind: KindFile, Path: short},
		{Kind: KindMemory, Size: 1 << 20, BlockSize: 4096},
		{Kind: KindNull, Size: 1 << 40},
	} {
		if err := Check(spec); err != nil {
			t.Errorf("Check(%+v) = %v", spec, err)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check created %s: %v", missing, err)
	}
	if st, err := os.Stat(short); err != nil || st.Size() != 4096 {
		t.Errorf("Check changed %s: %v, %v", short, st, err)
	}
}

// TestMemoryLimit: a memory backend larger than the machine's memory is an
// error (it used to allocate its chunk table at once and kill the
// process), one the size of the memory is accepted.
func TestMemoryLimit(t *testing.T) {
	ram := PhysicalMemory()
	if ram <= 0 {
		t.Fatal("PhysicalMemory = 0")
	}
	_, err := NewMemory(1000000<<40, 512)
	var me *MemoryError
	if !errors.As(err, &me) || me.Memory != ram {
		t.Fatalf("NewMemory(1000000 TiB) = %v, want a *MemoryError with Memory %d", err, ram)
	}
	if _, err := NewMemory(ram-ram%512+512, 512); err == nil {
		t.Error("NewMemory(RAM + 512) succeeded")
	}
	d, err := NewMemory(ram-ram%512, 512)
	if err != nil {
		t.Fatalf("NewMemory(RAM) = %v", err)
	}
	d.Close()
}

func TestFileSizes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "disk.img")
	// Created sparse at the given size.
	d, err := Open(Spec{Kind: KindFile, Path: path, Size: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte("hello"), 1<<29); err != nil {
		t.Fatal(err)
	}
	d.Close()
	st, err := os.Stat(path)
	if err != nil || st.Size() != 1<<30 {
		t.Fatalf("created file: %v, size %d", err, st.Size())
	}
	// Reopened with the same size, and with size 0 (use the file's).
	for _, size := range []int64{1 << 30, 0} {
		d, err := Open(Spec{Kind: KindFile, Path: path, Size: size})
		if err != nil {
			t.Fatalf("reopen with size %d: %v", size, err)
		}
		if d.Size() != 1<<30 {
			t.Errorf("reopen with size %d: Size = %d", size, d.Size())
		}
		if got := readBack(t, d, 1<<29, 5); string(got) != "hello" {
			t.Errorf("reopen: data lost: %q", got)
		}
		d.Close()
	}
	// Grow extends; the data stays.
	d, err = Open(Spec{Kind: KindFile, Path: path, Size: 2 << 30, Grow: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Size() != 2<<30 {
		t.Errorf("grown Size = %d", d.Size())
	}
	if got := readBack(t, d, 1<<29, 5); string(got) != "hello" {
		t.Errorf("grow lost data: %q", got)
	}
	id, err := d.(Identifier).ID()
	if err != nil || !strings.HasPrefix(id, "file:") {
		t.Errorf("ID = %q, %v", id, err)
	}
	d.Close()
	// Size 0 on a file whose size is not a multiple of the block size.
	odd := filepath.Join(dir, "odd.img")
	if err := os.WriteFile(odd, make([]byte, 4096+100), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = Open(Spec{Kind: KindFile, Path: odd})
	if err != nil {
		t.Fatal(err)
	}
	if d.Size() != 4096 {
		t.Errorf("odd file Size = %d, want 4096", d.Size())
	}
	d.Close()
}

func TestMemorySparse(t *testing.T) {
	d, err := NewMemory(1<<30, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Allocated() != 0 {
		t.Fatalf("fresh device allocated %d bytes", d.Allocated())
	}
	p := pattern(4096, 1)
	for _, off := range []int64{0, 1 << 20, 1<<30 - 4096} {
		if _, err := d.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
	}
	if d.Allocated() != 3*MemoryChunkSize {
		t.Errorf("after 3 writes: allocated %d, want %d", d.Allocated(), 3*MemoryChunkSize)
	}
	// Discarding whole chunks frees them; partial ranges do not.
	if err := d.Discard(0, 4096); err != nil {
		t.Fatal(err)
	}
	if d.Allocated() != 3*MemoryChunkSize {
		t.Errorf("partial discard freed memory: %d", d.Allocated())
	}
	if err := d.WriteZeroes(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	if d.Allocated() != 0 {
		t.Errorf("after zeroing everything: allocated %d", d.Allocated())
	}
	// A size that is not a multiple of the chunk size: the short last
	// chunk is freed by a discard up to the end.
	m, err := NewMemory(MemoryChunkSize+4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WriteAt(p, MemoryChunkSize); err != nil {
		t.Fatal(err)
	}
	if err := m.Discard(MemoryChunkSize, 4096); err != nil {
		t.Fatal(err)
	}
	if m.Allocated() != 0 {
		t.Errorf("short last chunk not freed: %d", m.Allocated())
	}
}

// TestMemoryConcurrent runs writers and readers on distinct and on shared
// chunks at once; run it under -race.
func TestMemoryConcurrent(t *testing.T) {
	const (
		workers = 8
		span    = 256 << 10 // bytes per worker
		iters   = 200
		shared  = 16 << 10 // the first bytes, written by every worker's second goroutine
	)
	d, err := NewMemory(workers*span, 512)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := range workers {
		wg.Add(2)
		base := int64(w * span)
		go func() { // private range: check every write
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 2))
			buf := make([]byte, 8192)
			got := make([]byte, 8192)
			for i := range iters {
				n := 512 * (1 + r.IntN(16))
				// Past the shared chunk, which worker 0's range holds.
				off := base + shared + int64(512*r.IntN((span-shared-n)/512))
				for j := range buf[:n] {
					buf[j] = byte(w + i + j)
				}
				if _, err := d.WriteAt(buf[:n], off); err != nil {
					errs <- err
					return
				}
				if i%7 == 0 {
					if err := d.Discard(off, int64(n)); err != nil {
						errs <- err
						return
					}
					clear(buf[:n])
				}
				if _, err := d.ReadAt(got[:n], off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got[:n], buf[:n]) {
					errs <- fmt.Errorf("worker %d: read back differs at %d", w, off)
					return
				}
			}
		}()
		go func() { // shared first chunk: overlapping traffic, no checks
			defer wg.Done()
			buf := make([]byte, 4096)
			for i := range iters {
				var err error
				if i%2 == 0 {
					_, err = d.WriteAt(buf, int64(512*(i%16)))
				} else {
					_, err = d.ReadAt(buf, int64(512*(i%16)))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestNoAllocs checks the steady-state I/O path allocates nothing.
func TestNoAllocs(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "file-no-fallocate" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			d := b.open(t, 1<<20, 512)
			defer d.Close()
			p := alignedBuf(4096, 4096)
			if _, err := d.WriteAt(p, 8192); err != nil { // allocate the chunk
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := d.WriteAt(p, 8192); err != nil {
					t.Fatal(err)
				}
				if _, err := d.ReadAt(p, 8192); err != nil {
					t.Fatal(err)
				}
				if _, err := d.ReadAt(p[1:1001], 777); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v allocations per read+write, want 0", allocs)
			}
		})
	}
}

func BenchmarkMemory(b *testing.B) {
	d, err := NewMemory(64<<20, 512)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	p := make([]byte, 4096)
	for off := int64(0); off < d.Size(); off += MemoryChunkSize {
		d.WriteAt(p, off)
	}
	const blocks = (64 << 20) / 4096
	b.Run("WriteAt4K", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4096)
		for i := 0; b.Loop(); i++ {
			if _, err := d.WriteAt(p, int64(i%blocks)*4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadAt4K", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4096)
		for i := 0; b.Loop(); i++ {
			if _, err := d.ReadAt(p, int64(i%blocks)*4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadAt4KParallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4096)
		b.RunParallel(func(pb *testing.PB) {
			q := make([]byte, 4096)
			i := rand.IntN(blocks)
			for pb.Next() {
				if _, err := d.ReadAt(q, int64(i%blocks)*4096); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	})
}
