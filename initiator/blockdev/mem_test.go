package blockdev

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// memDevice is an in-memory Device that checks the whole-block contract
// the way *initiator.Namespace does, and counts what reaches it.
type memDevice struct {
	bs   int
	mu   sync.Mutex
	data []byte

	reads, writes, flushes, trims, zeroes atomic.Int64
	trimmed                               atomic.Int64 // bytes
}

func newMemDevice(size int64, bs int) *memDevice {
	return &memDevice{bs: bs, data: make([]byte, size)}
}

func (d *memDevice) check(op string, off int64, n int64) error {
	bs := int64(d.bs)
	if off < 0 || off%bs != 0 || n%bs != 0 {
		return fmt.Errorf("mem: %s: offset %d and length %d not multiples of %d", op, off, n, bs)
	}
	if off > int64(len(d.data)) || n > int64(len(d.data))-off {
		return fmt.Errorf("mem: %s: %d bytes at %d past the end", op, n, off)
	}
	return nil
}

func (d *memDevice) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(d.data)) && len(p) > 0 {
		return 0, io.EOF
	}
	if err := d.check("read", off, int64(len(p))); err != nil {
		return 0, err
	}
	d.reads.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(p, d.data[off:]), nil
}

func (d *memDevice) WriteAt(p []byte, off int64) (int, error) {
	if err := d.check("write", off, int64(len(p))); err != nil {
		return 0, err
	}
	d.writes.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(d.data[off:], p), nil
}

func (d *memDevice) Flush() error { d.flushes.Add(1); return nil }

// Trim zeroes, like a device with DLFEAT = 001b.
func (d *memDevice) Trim(off, n int64) error {
	if err := d.check("trim", off, n); err != nil {
		return err
	}
	d.trims.Add(1)
	d.trimmed.Add(n)
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[off : off+n])
	return nil
}

func (d *memDevice) Size() int64    { return int64(len(d.data)) }
func (d *memDevice) BlockSize() int { return d.bs }

func (d *memDevice) snapshot(off, n int64) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]byte(nil), d.data[off:off+n]...)
}

func (d *memDevice) poke(off int64, b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	copy(d.data[off:], b)
}

// zeroingDevice adds Write Zeroes.
type zeroingDevice struct{ *memDevice }

func (d zeroingDevice) WriteZeroes(off, n int64) error {
	if err := d.check("write zeroes", off, n); err != nil {
		return err
	}
	d.zeroes.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[off : off+n])
	return nil
}
