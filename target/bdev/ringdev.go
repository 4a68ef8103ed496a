package bdev

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// FUAWriter is implemented by asynchronous backends that can make one
// write durable by itself (RWF_DSYNC: a FUA write on a block device)
// instead of a write followed by a flush of everything.
type FUAWriter interface {
	WriteFUAAsync(p []byte, off int64, c Completion)
}

// MaybeAsync is implemented by backends that implement Async only where
// the kernel lets them (io_uring): AsyncReady reports whether they do.
// When it is false the target runs their I/O through the blocking methods
// on its workers.
type MaybeAsync interface {
	AsyncReady() bool
}

// ringDev is the io_uring half of the file and block backends: the
// engine (nil where io_uring is unavailable), the O_DIRECT descriptor and
// the flush error latch.
type ringDev struct {
	size   atomic.Int64 // grows in place (Resize)
	closed atomic.Bool
	eng    *engine
	direct *os.File // nil with buffered_io
	dfd    int      // direct's descriptor, -1 without
	align  int64    // O_DIRECT alignment
	latch  flushLatch
}

// startRing sets up the engine over the buffered descriptor bfd and the
// direct one. A kernel without io_uring (ENOSYS, or EPERM when disabled)
// leaves eng nil: the device then runs on the target's workers.
func (r *ringDev) startRing(files ringFiles, depth int) error {
	files.dfd = r.dfd
	files.align = r.align
	eng, err := newEngine(files, depth, &r.latch)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
		// The blocking methods then do all the I/O, buffered: the
		// O_DIRECT descriptor goes, so the two are never mixed.
		if r.direct != nil {
			r.direct.Close()
			r.direct, r.dfd = nil, -1
		}
		return nil
	}
	if err != nil {
		return err
	}
	r.eng = eng
	return nil
}

// AsyncReady implements MaybeAsync: true when io_uring runs the device.
func (r *ringDev) AsyncReady() bool { return r.eng != nil }

// QueueDepth is the bound on operations in flight to the device (0 when
// it runs without io_uring).
func (r *ringDev) QueueDepth() int {
	if r.eng == nil {
		return 0
	}
	return r.eng.depth
}

// Direct reports whether aligned transfers use O_DIRECT.
func (r *ringDev) Direct() bool { return r.direct != nil }

// rw starts a read or write after the closed and range checks.
func (r *ringDev) rw(closed *atomic.Bool, size int64, kind uint8, p []byte, off int64, c Completion) {
	switch {
	case closed.Load():
		c.Complete(ErrClosed)
	case checkRange(opNames[kind], off, int64(len(p)), size) != nil:
		c.Complete(checkRange(opNames[kind], off, int64(len(p)), size))
	case len(p) == 0:
		c.Complete(nil)
	default:
		// With O_DIRECT every transfer takes it (an unaligned buffer
		// through a bounce buffer): see engine.complete.
		r.eng.start(ringOp{kind: kind, p: p, off: off, c: c, direct: r.dfd >= 0})
	}
}

// rangeOp starts a Write Zeroes or Discard after the closed and range
// checks.
func (r *ringDev) rangeOp(closed *atomic.Bool, size int64, kind uint8, off, n int64, c Completion) {
	switch {
	case closed.Load():
		c.Complete(ErrClosed)
	case checkRange(opNames[kind], off, n, size) != nil:
		c.Complete(checkRange(opNames[kind], off, n, size))
	case n == 0:
		c.Complete(nil)
	default:
		r.eng.start(ringOp{kind: kind, off: off, n: n, c: c})
	}
}

func (r *ringDev) flush(closed *atomic.Bool, c Completion) {
	if closed.Load() {
		c.Complete(ErrClosed)
		return
	}
	r.eng.start(ringOp{kind: opFlush, c: c})
}

// openDirect opens path O_DIRECT for the ring unless buffered. A file
// system that refuses O_DIRECT is an error that says to set buffered_io
// (nvmet fails the enable the same way).
func (r *ringDev) openDirect(what, path string, buffered bool) error {
	r.dfd = -1
	if buffered {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return errDirect(what, err)
	}
	r.direct, r.dfd = f, int(f.Fd())
	return nil
}

// closeRing stops the engine and closes the direct descriptor.
func (r *ringDev) closeRing() error {
	if r.eng != nil {
		r.eng.close()
	}
	if r.direct != nil {
		return r.direct.Close()
	}
	return nil
}

// fileDIOAlign returns the O_DIRECT alignment of an open file's offsets and
// of memory (statx STATX_DIOALIGN, Linux 6.1), or 512 for both where the
// kernel does not say.
func fileDIOAlign(fd int) (offset, memory int64) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st); err == nil &&
		st.Mask&unix.STATX_DIOALIGN != 0 && st.Dio_offset_align != 0 {
		return int64(st.Dio_offset_align), int64(max(st.Dio_mem_align, 1))
	}
	return 512, 512
}

// ReadAsync implements Async.
func (r *ringDev) ReadAsync(p []byte, off int64, c Completion) {
	r.rw(&r.closed, r.size.Load(), opRead, p, off, c)
}

// WriteAsync implements Async.
func (r *ringDev) WriteAsync(p []byte, off int64, c Completion) {
	r.rw(&r.closed, r.size.Load(), opWrite, p, off, c)
}

// WriteFUAAsync implements FUAWriter with RWF_DSYNC (a FUA write on the
// O_DIRECT descriptor of a block device).
func (r *ringDev) WriteFUAAsync(p []byte, off int64, c Completion) {
	r.rw(&r.closed, r.size.Load(), opWriteFUA, p, off, c)
}

// FlushAsync implements Async with fdatasync (which flushes a block
// device's volatile write cache).
func (r *ringDev) FlushAsync(c Completion) { r.flush(&r.closed, c) }

// WriteZeroesAsync implements Async with fallocate(FALLOC_FL_ZERO_RANGE),
// or the backend's fallback (BLKZEROOUT, written zeroes).
func (r *ringDev) WriteZeroesAsync(off, n int64, c Completion) {
	r.rangeOp(&r.closed, r.size.Load(), opZero, off, n, c)
}

// DiscardAsync implements Async with fallocate(FALLOC_FL_PUNCH_HOLE), or
// the backend's fallback (BLKDISCARD, Discard).
func (r *ringDev) DiscardAsync(off, n int64, c Completion) {
	r.rangeOp(&r.closed, r.size.Load(), opDiscard, off, n, c)
}
