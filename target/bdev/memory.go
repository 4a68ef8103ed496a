package bdev

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/fabrics/region"
	"golang.org/x/sys/unix"
)

// Memory geometry: the memory backend holds its data in regions of
// memRegionSize bytes mapped (address space only) the first time a byte in
// them is written, and accounts RAM in chunks of MemoryChunkSize bytes,
// allocated by the kernel when first written (in huge pages of 2 MiB where
// it can) and given back when a WriteZeroes or Discard covers them whole.
const (
	memChunkShift   = 16
	MemoryChunkSize = 1 << memChunkShift
	memStripes      = 64
	memRegionShift  = 26
	memRegionSize   = 1 << memRegionShift
)

// Memory is a sparse in-memory backend. Its data lives outside the Go heap
// in anonymous mappings of 64 MiB (regions), which it lends to transports
// for zero-copy READs (ReadSegments): unwritten chunks cost no RAM and
// read as zeroes.
//
// Concurrency: every method but Close may run concurrently with any other.
// Each chunk is guarded by one of 64 striped reader/writer locks for
// ReadAt, WriteAt and the zeroing methods, so concurrent copies to
// different chunks proceed in parallel and overlapping ones are serialised
// per chunk. Segments lent by ReadSegments are read by the transport later,
// without the lock: like SPDK's malloc bdev under zcopy and Linux's brd, a
// READ racing an overlapping WRITE may then see part of either.
type Memory struct {
	size atomic.Int64 // grows in place (Resize)
	bs   uint32
	// locks guard written (by chunk) and the mapping of new regions;
	// the slices are replaced under all of them.
	locks     [memStripes]sync.RWMutex
	written   []bool                          // chunk i holds data (RAM)
	regions   []atomic.Pointer[region.Region] // nil until first written
	mapMu     sync.Mutex                      // serialises mapping a region
	allocated atomic.Int64                    // bytes of chunks written
	closed    atomic.Bool
}

var (
	_ Device        = (*Memory)(nil)
	_ SegmentReader = (*Memory)(nil)
)

// NewMemory returns a zero-filled memory backend of size bytes (a positive
// multiple of the block size, at most PhysicalMemory; blockSize 0 means
// DefaultBlockSize).
func NewMemory(size int64, blockSize uint32) (*Memory, error) {
	bs, err := checkMemory(size, blockSize)
	if err != nil {
		return nil, err
	}
	d := &Memory{bs: bs}
	d.grow(size)
	d.size.Store(size)
	return d, nil
}

// grow sizes the chunk and region tables for size bytes (all locks held,
// or none needed).
func (d *Memory) grow(size int64) {
	if n := int((size + MemoryChunkSize - 1) >> memChunkShift); len(d.written) < n {
		d.written = append(d.written, make([]bool, n-len(d.written))...)
	}
	if n := int((size + memRegionSize - 1) >> memRegionShift); len(d.regions) < n {
		regions := make([]atomic.Pointer[region.Region], n)
		for i := range d.regions {
			regions[i].Store(d.regions[i].Load())
		}
		d.regions = regions
	}
}

// mapRegion returns region k, mapping it first if need be (under a chunk
// lock of it).
func (d *Memory) mapRegion(k int) (*region.Region, error) {
	if r := d.regions[k].Load(); r != nil {
		return r, nil
	}
	d.mapMu.Lock()
	defer d.mapMu.Unlock()
	if r := d.regions[k].Load(); r != nil {
		return r, nil
	}
	buf, err := unix.Mmap(-1, 0, memRegionSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("bdev: memory: mapping %s: %w", FormatBytes(memRegionSize), err)
	}
	// Huge pages where the kernel has them (THP "madvise"): sending
	// 128 KiB READs straight from 4 KiB pages spent 70 % of nvmetd in the
	// kernel's copy (TLB misses); the price is RAM taken 2 MiB at a time.
	_ = unix.Madvise(buf, unix.MADV_HUGEPAGE)
	r := region.New(buf, func() { _ = unix.Munmap(buf) })
	d.regions[k].Store(r)
	return r, nil
}

// zeroRegion is read-only memory of zeroes lent for what no region holds
// yet; it is never unmapped.
var zeroRegion = sync.OnceValues(func() (*region.Region, error) {
	buf, err := unix.Mmap(-1, 0, memRegionSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("bdev: memory: mapping zeroes: %w", err)
	}
	return region.New(buf, nil), nil
})

// PhysicalMemory returns the machine's physical memory in bytes (sysinfo's
// total RAM, /proc/meminfo's MemTotal), or 0 when it cannot be read. A
// memory backend is sparse, but one larger than the RAM would kill the
// process once hosts fill it, so NewMemory refuses it.
func PhysicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	unit := max(int64(si.Unit), 1)
	total := int64(si.Totalram)
	if total < 0 || total > (1<<62)/unit {
		return 1 << 62
	}
	return total * unit
}

// checkMemory checks a memory backend's size and block size and returns
// the block size (sizeAndBlock).
func checkMemory(size int64, blockSize uint32) (uint32, error) {
	bs, err := sizeAndBlock(KindMemory, size, blockSize)
	if err != nil {
		return 0, err
	}
	if ram := PhysicalMemory(); ram > 0 && size > ram {
		return 0, &MemoryError{Size: size, Memory: ram}
	}
	return bs, nil
}

// MemoryError reports memory backends larger than the machine's memory.
type MemoryError struct {
	Size   int64  // bytes asked for (one backend, or several together)
	Memory int64  // PhysicalMemory
	What   string // "" for one backend, else what adds up to Size
}

// Error implements error.
func (e *MemoryError) Error() string {
	what := "size"
	if e.What != "" {
		what = e.What
	}
	return fmt.Sprintf("bdev: memory: %s %d bytes (%s) is more than the machine's memory, %d bytes (%s); use backend \"null\" (keeps no data) or a sparse file",
		what, e.Size, FormatBytes(e.Size), e.Memory, FormatBytes(e.Memory))
}

// FormatBytes formats n in the largest binary unit that keeps one decimal
// ("1.5GiB").
func FormatBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f%ciB", v, units[i])
}

// ReadAt implements Device.
func (d *Memory) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("read", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := pos >> memChunkShift
		n := min(len(p)-done, MemoryChunkSize-int(pos&(MemoryChunkSize-1)))
		mu := &d.locks[i%memStripes]
		mu.RLock()
		if d.closed.Load() {
			mu.RUnlock()
			return done, ErrClosed
		}
		if r := d.regions[pos>>memRegionShift].Load(); r != nil {
			ro := int(pos & (memRegionSize - 1))
			copy(p[done:done+n], r.Bytes()[ro:ro+n])
		} else {
			clear(p[done : done+n])
		}
		mu.RUnlock()
		done += n
	}
	return done, nil
}

// ReadSegments is a READ without a copy (SegmentReader): it appends to dst
// the pieces of the mappings that hold n bytes at off, each with a
// reference on its region for the caller to release once it has sent them.
func (d *Memory) ReadSegments(off, n int64, dst []region.Segment) ([]region.Segment, error) {
	if d.closed.Load() {
		return dst, ErrClosed
	}
	if err := checkRange("read", off, n, d.size.Load()); err != nil {
		return dst, err
	}
	zero, err := zeroRegion()
	if err != nil {
		return dst, err
	}
	base := len(dst)
	for pos, end := off, off+n; pos < end; {
		i := pos >> memChunkShift
		l := int(min(end-pos, MemoryChunkSize-pos&(MemoryChunkSize-1)))
		ro := int(pos & (memRegionSize - 1))
		mu := &d.locks[i%memStripes]
		mu.RLock()
		if d.closed.Load() {
			mu.RUnlock()
			return region.ReleaseAll(dst[base:]), ErrClosed
		}
		r := d.regions[pos>>memRegionShift].Load()
		if r == nil {
			r = zero
		}
		if k := len(dst) - 1; k >= base && dst[k].Region == r && dst[k].Off+dst[k].Len == ro {
			dst[k].Len += l // contiguous with the last piece
		} else {
			r.Acquire()
			dst = append(dst, region.Segment{Region: r, Off: ro, Len: l})
		}
		mu.RUnlock()
		pos += int64(l)
	}
	return dst, nil
}

// WriteAt implements Device.
func (d *Memory) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("write", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		i := pos >> memChunkShift
		n := min(len(p)-done, MemoryChunkSize-int(pos&(MemoryChunkSize-1)))
		mu := &d.locks[i%memStripes]
		mu.Lock()
		if d.closed.Load() {
			mu.Unlock()
			return done, ErrClosed
		}
		r, err := d.mapRegion(int(pos >> memRegionShift))
		if err != nil {
			mu.Unlock()
			return done, err
		}
		if !d.written[i] {
			d.written[i] = true
			d.allocated.Add(MemoryChunkSize)
		}
		ro := int(pos & (memRegionSize - 1))
		copy(r.Bytes()[ro:ro+n], p[done:done+n])
		mu.Unlock()
		done += n
	}
	return done, nil
}

// Flush implements Device; memory has nothing to flush.
func (d *Memory) Flush() error {
	if d.closed.Load() {
		return ErrClosed
	}
	return nil
}

// WriteZeroes implements Device: chunks the range covers entirely are given
// back to the kernel, the edges are cleared.
func (d *Memory) WriteZeroes(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("write zeroes", off, n, d.size.Load()); err != nil {
		return err
	}
	return d.zero(off, n)
}

// Discard implements Device like WriteZeroes: reads return zeroes after it.
func (d *Memory) Discard(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("discard", off, n, d.size.Load()); err != nil {
		return err
	}
	return d.zero(off, n)
}

func (d *Memory) zero(off, n int64) error {
	end, size := off+n, d.size.Load()
	for pos := off; pos < end; {
		i := pos >> memChunkShift
		co := pos & (MemoryChunkSize - 1)
		l := min(end-pos, MemoryChunkSize-co)
		// The last chunk may be short when size is not a multiple of
		// the chunk size: covering up to the device end covers it all.
		whole := co == 0 && (l == MemoryChunkSize || pos+l == size)
		mu := &d.locks[i%memStripes]
		mu.Lock()
		if d.closed.Load() {
			mu.Unlock()
			return ErrClosed
		}
		if d.written[i] {
			ro := int(pos & (memRegionSize - 1))
			b := d.regions[pos>>memRegionShift].Load().Bytes()
			if whole {
				// The pages read as zeroes from now on and cost no RAM.
				_ = unix.Madvise(b[ro:ro+MemoryChunkSize], unix.MADV_DONTNEED)
				d.written[i] = false
				d.allocated.Add(-MemoryChunkSize)
			} else {
				clear(b[ro : ro+int(l)])
			}
		}
		mu.Unlock()
		pos += l
	}
	return nil
}

// Size implements Device.
func (d *Memory) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *Memory) BlockSize() uint32 { return d.bs }

// Allocated returns the bytes of RAM the device holds for data.
func (d *Memory) Allocated() int64 { return d.allocated.Load() }

// Close implements Device and frees the data, once the segments lent to
// transports (ReadSegments) are back.
func (d *Memory) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	// Every request checks closed under its chunk's lock: past these,
	// none touches the mappings.
	for i := range d.locks {
		d.locks[i].Lock()
	}
	for i := range d.regions {
		if r := d.regions[i].Swap(nil); r != nil {
			r.Close()
		}
	}
	clear(d.written)
	d.allocated.Store(0)
	for i := range d.locks {
		d.locks[i].Unlock()
	}
	return nil
}

// NonBlocking reports that Memory's operations never wait (see NonBlocking).
func (d *Memory) NonBlocking() bool { return true }
