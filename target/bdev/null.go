package bdev

import "sync/atomic"

// Null is a backend that stores nothing: reads return zeroes and writes are
// dropped (like Linux null_blk without memory backing). Useful to measure
// the transport alone.
type Null struct {
	size   atomic.Int64 // grows in place (Resize)
	bs     uint32
	closed atomic.Bool
}

var _ Device = (*Null)(nil)

// NewNull returns a null backend of size bytes (a positive multiple of the
// block size; blockSize 0 means DefaultBlockSize).
func NewNull(size int64, blockSize uint32) (*Null, error) {
	bs, err := sizeAndBlock(KindNull, size, blockSize)
	if err != nil {
		return nil, err
	}
	d := &Null{bs: bs}
	d.size.Store(size)
	return d, nil
}

// ReadAt implements Device: p is zeroed.
func (d *Null) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("read", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	clear(p)
	return len(p), nil
}

// WriteAt implements Device: the data is dropped.
func (d *Null) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("write", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush implements Device.
func (d *Null) Flush() error {
	if d.closed.Load() {
		return ErrClosed
	}
	return nil
}

// WriteZeroes implements Device.
func (d *Null) WriteZeroes(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return checkRange("write zeroes", off, n, d.size.Load())
}

// Discard implements Device.
func (d *Null) Discard(off, n int64) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return checkRange("discard", off, n, d.size.Load())
}

// Size implements Device.
func (d *Null) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *Null) BlockSize() uint32 { return d.bs }

// Close implements Device.
func (d *Null) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	return nil
}

// NonBlocking reports that Null's operations never wait (see NonBlocking).
func (d *Null) NonBlocking() bool { return true }
