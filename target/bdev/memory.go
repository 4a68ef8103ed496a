package bdev

import (
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Memory chunk geometry: the memory backend allocates RAM in chunks of
// MemoryChunkSize bytes the first time a byte in them is written.
const (
	memChunkShift   = 16
	MemoryChunkSize = 1 << memChunkShift
	memStripes      = 64
)

// Memory is a sparse in-memory backend. Unwritten chunks cost one pointer
// (8 bytes per 64 KiB) and read as zeroes; WriteZeroes and Discard free the
// chunks they cover entirely.
//
// Concurrency: every method but Close may run concurrently with any other.
// Each chunk is guarded by one of 64 striped reader/writer locks, so
// concurrent I/O to different chunks proceeds in parallel, and overlapping
// concurrent requests are serialised per chunk: a read never observes a torn
// write within one chunk, though a request spanning chunks may observe
// another request's effect on some of its chunks and not others (as on a
// real disk without atomic write guarantees beyond one block).
type Memory struct {
	size      atomic.Int64 // grows in place (Resize), with chunks
	bs        uint32
	locks     [memStripes]sync.RWMutex
	chunks    []*[MemoryChunkSize]byte // guarded by locks[i%memStripes]; replaced under all of them
	allocated atomic.Int64             // bytes of chunks allocated
	closed    atomic.Bool
}

var _ Device = (*Memory)(nil)

// NewMemory returns a zero-filled memory backend of size bytes (a positive
// multiple of the block size, at most PhysicalMemory; blockSize 0 means
// DefaultBlockSize).
func NewMemory(size int64, blockSize uint32) (*Memory, error) {
	bs, err := checkMemory(size, blockSize)
	if err != nil {
		return nil, err
	}
	n := (size + MemoryChunkSize - 1) >> memChunkShift
	d := &Memory{bs: bs, chunks: make([]*[MemoryChunkSize]byte, n)}
	d.size.Store(size)
	return d, nil
}

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
		co := int(pos & (MemoryChunkSize - 1))
		n := min(len(p)-done, MemoryChunkSize-co)
		mu := &d.locks[i%memStripes]
		mu.RLock()
		if c := d.chunks[i]; c != nil {
			copy(p[done:done+n], c[co:co+n])
		} else {
			clear(p[done : done+n])
		}
		mu.RUnlock()
		done += n
	}
	return done, nil
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
		co := int(pos & (MemoryChunkSize - 1))
		n := min(len(p)-done, MemoryChunkSize-co)
		mu := &d.locks[i%memStripes]
		mu.Lock()
		c := d.chunks[i]
		if c == nil {
			c = new([MemoryChunkSize]byte)
			d.chunks[i] = c
			d.allocated.Add(MemoryChunkSize)
		}
		copy(c[co:co+n], p[done:done+n])
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

// WriteZeroes implements Device: chunks the range covers entirely are freed,
// the edges are cleared.
func (d *Memory) WriteZeroes(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("write zeroes", off, n, d.size.Load()); err != nil {
		return err
	}
	d.zero(off, n)
	return nil
}

// Discard implements Device like WriteZeroes: reads return zeroes after it.
func (d *Memory) Discard(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if err := checkRange("discard", off, n, d.size.Load()); err != nil {
		return err
	}
	d.zero(off, n)
	return nil
}

func (d *Memory) zero(off, n int64) {
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
		if c := d.chunks[i]; c != nil {
			if whole {
				d.chunks[i] = nil
				d.allocated.Add(-MemoryChunkSize)
			} else {
				clear(c[co : co+l])
			}
		}
		mu.Unlock()
		pos += l
	}
}

// Size implements Device.
func (d *Memory) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *Memory) BlockSize() uint32 { return d.bs }

// Allocated returns the bytes of RAM the device holds for data.
func (d *Memory) Allocated() int64 { return d.allocated.Load() }

// Close implements Device and frees the data.
func (d *Memory) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	for i := range d.locks {
		d.locks[i].Lock()
	}
	// Keep the slice (a racing request then reads zeroes instead of
	// indexing a nil slice) but drop the data.
	clear(d.chunks)
	d.allocated.Store(0)
	for i := range d.locks {
		d.locks[i].Unlock()
	}
	return nil
}

// NonBlocking reports that Memory's operations never wait (see NonBlocking).
func (d *Memory) NonBlocking() bool { return true }
