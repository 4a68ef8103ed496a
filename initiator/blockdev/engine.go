package blockdev

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"
)

// engine turns byte-range requests (FUSE, NBD) into whole-block Device
// calls: aligned requests go straight through, unaligned ones are done by
// read-modify-write of the edge blocks under an exclusive lock so that two
// RMWs of one block (or an RMW and an aligned write) cannot lose data.
type engine struct {
	dev    Device
	zeroer Zeroer
	// sz is the device's size in bytes; Mapping.Resize changes it while
	// requests run.
	sz         atomic.Int64
	bs         int64
	trimZeroes bool
	readOnly   bool

	rmw  sync.RWMutex
	bufs bufPool
}

func newEngine(dev Device, c *config) *engine {
	e := &engine{dev: dev, bs: int64(c.bs), trimZeroes: c.TrimZeroes, readOnly: c.ReadOnly}
	e.sz.Store(c.size)
	e.zeroer, _ = dev.(Zeroer)
	return e
}

// size returns the device's current size in bytes.
func (e *engine) size() int64 { return e.sz.Load() }

// zeroChunk is the largest single zero-filled write.
const zeroChunk = 1 << 20

var zeroes = make([]byte, zeroChunk)

// errRange is an I/O outside the device.
var errRange = errors.New("range outside the device")

func (e *engine) check(off, n int64) error {
	size := e.size()
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("blockdev: %d bytes at offset %d on a %d-byte device: %w", n, off, size, errRange)
	}
	return nil
}

func (e *engine) aligned(off, n int64) bool { return off%e.bs == 0 && n%e.bs == 0 }

// devRead reads whole blocks; a full read with io.EOF counts as success.
func (e *engine) devRead(p []byte, off int64) error {
	n, err := e.dev.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("blockdev: read %d bytes at %d: %w", len(p), off, err)
}

func (e *engine) devWrite(p []byte, off int64) error {
	n, err := e.dev.WriteAt(p, off)
	if err == nil && n != len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("blockdev: write %d bytes at %d: %w", len(p), off, err)
	}
	return nil
}

// readAt fills p from off; the range must lie within the device.
func (e *engine) readAt(p []byte, off int64) error {
	n := int64(len(p))
	if err := e.check(off, n); err != nil || n == 0 {
		return err
	}
	e.rmw.RLock()
	defer e.rmw.RUnlock()
	if e.aligned(off, n) {
		return e.devRead(p, off)
	}
	start := off / e.bs * e.bs
	end := (off + n + e.bs - 1) / e.bs * e.bs
	buf := e.bufs.get(int(end - start))
	defer e.bufs.put(buf)
	if err := e.devRead(buf, start); err != nil {
		return err
	}
	copy(p, buf[off-start:])
	return nil
}

// writeAt writes p at off; the range must lie within the device.
func (e *engine) writeAt(p []byte, off int64) error {
	if e.readOnly {
		return fmt.Errorf("blockdev: write: %w", syscall.EROFS)
	}
	n := int64(len(p))
	if err := e.check(off, n); err != nil || n == 0 {
		return err
	}
	if e.aligned(off, n) {
		e.rmw.RLock()
		defer e.rmw.RUnlock()
		return e.devWrite(p, off)
	}
	e.rmw.Lock()
	defer e.rmw.Unlock()
	start := off / e.bs * e.bs
	end := (off + n + e.bs - 1) / e.bs * e.bs
	buf := e.bufs.get(int(end - start))
	defer e.bufs.put(buf)
	if off != start {
		if err := e.devRead(buf[:e.bs], start); err != nil {
			return err
		}
	}
	if (off+n)%e.bs != 0 && (end-e.bs > start || off == start) {
		if err := e.devRead(buf[int64(len(buf))-e.bs:], end-e.bs); err != nil {
			return err
		}
	}
	copy(buf[off-start:], p)
	return e.devWrite(buf, start)
}

// flush commits the device's volatile write cache.
func (e *engine) flush() error {
	if err := e.dev.Flush(); err != nil {
		return fmt.Errorf("blockdev: flush: %w", err)
	}
	return nil
}

// discard deallocates the whole blocks within [off, off+n); partial blocks
// at the edges are left alone (a discard is a hint).
func (e *engine) discard(off, n int64) error {
	if e.readOnly {
		return fmt.Errorf("blockdev: discard: %w", syscall.EROFS)
	}
	if err := e.check(off, n); err != nil {
		return err
	}
	s := (off + e.bs - 1) / e.bs * e.bs
	t := (off + n) / e.bs * e.bs
	if t <= s {
		return nil
	}
	e.rmw.RLock()
	defer e.rmw.RUnlock()
	if err := e.dev.Trim(s, t-s); err != nil {
		return fmt.Errorf("blockdev: trim %d bytes at %d: %w", t-s, s, err)
	}
	return nil
}

// zero makes [off, off+n) read back as zeroes. With mayDeallocate (a
// PUNCH_HOLE, or NBD WRITE_ZEROES without NO_HOLE) and a device whose
// deallocated blocks read as zeroes, whole blocks are trimmed; otherwise
// they get Write Zeroes or, failing that, zero-filled writes.
func (e *engine) zero(off, n int64, mayDeallocate bool) error {
	if e.readOnly {
		return fmt.Errorf("blockdev: zero: %w", syscall.EROFS)
	}
	if err := e.check(off, n); err != nil || n == 0 {
		return err
	}
	s := (off + e.bs - 1) / e.bs * e.bs
	t := (off + n) / e.bs * e.bs
	if t <= s { // within one block
		return e.writeAt(zeroes[:n], off)
	}
	if s > off {
		if err := e.writeAt(zeroes[:s-off], off); err != nil {
			return err
		}
	}
	if end := off + n; end > t {
		if err := e.writeAt(zeroes[:end-t], t); err != nil {
			return err
		}
	}
	e.rmw.RLock()
	defer e.rmw.RUnlock()
	if mayDeallocate && e.trimZeroes {
		if err := e.dev.Trim(s, t-s); err == nil {
			return nil
		}
	}
	if e.zeroer != nil {
		if err := e.zeroer.WriteZeroes(s, t-s); err == nil {
			return nil
		}
	}
	for p := s; p < t; p += zeroChunk {
		c := min(t-p, zeroChunk)
		if err := e.devWrite(zeroes[:c], p); err != nil {
			return err
		}
	}
	return nil
}

// errno maps an error to the errno FUSE and NBD report.
func errno(err error) syscall.Errno {
	var en syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errRange):
		return syscall.EINVAL
	case errors.Is(err, errors.ErrUnsupported):
		return syscall.EOPNOTSUPP
	case errors.As(err, &en):
		return en
	}
	return syscall.EIO
}

// bufPool hands out byte slices in power-of-two classes from 4 KiB up.
type bufPool struct {
	classes [20]sync.Pool // 4 KiB .. 2 GiB
}

const minBufShift = 12

func class(n int) int {
	if n <= 1<<minBufShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minBufShift
}

func (b *bufPool) get(n int) []byte {
	c := class(n)
	if c >= len(b.classes) {
		return make([]byte, n)
	}
	if p, ok := b.classes[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minBufShift))
}

func (b *bufPool) put(p []byte) {
	c := class(cap(p))
	if c >= len(b.classes) || cap(p) != 1<<(c+minBufShift) {
		return
	}
	p = p[:cap(p)]
	b.classes[c].Put(&p)
}
