package bdev

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"

	"golang.org/x/sys/unix"
)

// File is the file backend: a regular file. Its asynchronous methods
// (Async) run on an io_uring with O_DIRECT unless Spec.BufferedIO; the
// blocking ones use pread/pwrite on a buffered descriptor.
type File struct {
	ringDev
	f    *os.File
	fd   int
	path string
	bs   uint32
	// noFallocate makes WriteZeroes and Discard skip fallocate (tests
	// use it to exercise the fallback).
	noFallocate bool
}

var (
	_ Device     = (*File)(nil)
	_ Identifier = (*File)(nil)
	_ Async      = (*File)(nil)
	_ FUAWriter  = (*File)(nil)
	_ MaybeAsync = (*File)(nil)
)

// OpenFile opens (or creates) the file backend; see Spec for the size rules.
func OpenFile(spec Spec) (*File, error) {
	bs, err := fileBlockSize(spec)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(spec.Path, os.O_RDWR|unix.O_CLOEXEC, 0)
	created := false
	var made []string // directories made for the file
	if errors.Is(err, fs.ErrNotExist) {
		if spec.Size == 0 {
			return nil, fmt.Errorf("bdev: file %q does not exist and no size was given to create it", spec.Path)
		}
		if made, err = mkParents(spec.Path); err == nil {
			f, err = os.OpenFile(spec.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
		}
		created = err == nil
		if err != nil {
			rmDirs(made)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bdev: file: %w", err)
	}
	d := &File{f: f, fd: int(f.Fd()), path: spec.Path, bs: bs}
	d.dfd = -1
	fail := func(err error) (*File, error) {
		_ = d.closeRing()
		f.Close()
		if created {
			os.Remove(spec.Path)
			rmDirs(made)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("bdev: file: %w", err))
	}
	if !st.Mode().IsRegular() {
		return fail(notRegularError(spec.Path, st.Mode()))
	}
	size, resize, err := fileSize(spec, bs, st.Size(), created)
	if err != nil {
		return fail(err)
	}
	if resize {
		if err := f.Truncate(size); err != nil {
			return fail(fmt.Errorf("bdev: file %q: set size from %d to %d bytes: %w", spec.Path, st.Size(), size, err))
		}
	}
	d.size.Store(size)
	what := fmt.Sprintf("file %q", spec.Path)
	if err := d.openDirect(what, spec.Path, spec.BufferedIO); err != nil {
		return fail(err)
	}
	offAlign, memAlign := fileDIOAlign(d.fd)
	if d.direct != nil && offAlign > int64(bs) {
		return fail(fmt.Errorf("bdev: %s: block size %d is smaller than the file system's O_DIRECT alignment %d: set block_size to %d or more, or buffered_io = true", what, bs, offAlign, offAlign))
	}
	d.align = max(offAlign, memAlign)
	if err := d.startRing(ringFiles{what: what, bfd: d.fd,
		zeroMode: unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		discMode: unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
		zero:     d.WriteZeroes, discard: d.Discard}, spec.QueueDepth); err != nil {
		return fail(err)
	}
	return d, nil
}

// fileBlockSize checks a file backend's path, block size and size, and
// returns its block size.
func fileBlockSize(spec Spec) (uint32, error) {
	if spec.Path == "" {
		return 0, errors.New("bdev: file: no path given")
	}
	bs := spec.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if !ValidBlockSize(bs) {
		return 0, fmt.Errorf("bdev: file %q: block size %d is not a power of two from 512 to 65536", spec.Path, bs)
	}
	if spec.Size < 0 || spec.Size%int64(bs) != 0 {
		return 0, fmt.Errorf("bdev: file %q: size %d is not a non-negative multiple of the block size %d", spec.Path, spec.Size, bs)
	}
	return bs, nil
}

// notRegularError refuses a file backend that is not a regular file.
func notRegularError(path string, mode fs.FileMode) error {
	return fmt.Errorf("bdev: file %q is not a regular file (mode %v); use backend \"block\" for device nodes", path, mode)
}

// fileSize applies Spec's size rules to a file of have bytes (created: just
// created, empty): the size to expose, and whether the file must be
// truncated to it first.
func fileSize(spec Spec, bs uint32, have int64, created bool) (size int64, resize bool, err error) {
	switch {
	case created:
		return spec.Size, true, nil
	case spec.Size == 0:
		size = have - have%int64(bs)
		if size == 0 {
			return 0, false, fmt.Errorf("bdev: file %q is smaller than one block (%d bytes)", spec.Path, bs)
		}
		return size, false, nil
	case have == spec.Size:
		return have, false, nil
	case have < spec.Size && spec.Grow:
		return spec.Size, true, nil
	case have < spec.Size:
		return 0, false, fmt.Errorf("bdev: file %q has %d bytes, configured size is %d (set grow to extend it)", spec.Path, have, spec.Size)
	default:
		return 0, false, fmt.Errorf("bdev: file %q has %d bytes, more than the configured size %d (files are never shrunk)", spec.Path, have, spec.Size)
	}
}

// ReadAt implements Device.
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("read", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	n, err := d.f.ReadAt(p, off)
	if err == io.EOF && n < len(p) {
		// The file shrank under us: report it rather than return stale
		// bytes from the caller's buffer.
		return n, fmt.Errorf("bdev: file %q: read at %d: %w", d.path, off, io.ErrUnexpectedEOF)
	}
	return n, err
}

// WriteAt implements Device.
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("write", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	return d.f.WriteAt(p, off)
}

// Flush implements Device with fdatasync.
func (d *File) Flush() error {
	if d.closed.Load() {
		return ErrClosed
	}
	var err error
	if e := unix.Fdatasync(d.fd); e != nil {
		err = fmt.Errorf("bdev: file %q: fdatasync: %w", d.path, e)
	}
	return d.latch.check(err)
}

// WriteZeroes implements Device with fallocate(FALLOC_FL_ZERO_RANGE),
// falling back to writing zeroes.
func (d *File) WriteZeroes(off, n int64) error {
	return rangeOp(&d.closed, "write zeroes", off, n, d.size.Load(), !d.noFallocate, func() error {
		if err := unix.Fallocate(d.fd, unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
			return fmt.Errorf("bdev: file %q: zero range %d+%d: %w", d.path, off, n, err)
		}
		return nil
	}, func() error {
		if d.direct != nil {
			// Never buffered writes beside O_DIRECT ones (engine.complete).
			return writeZeroesDirect(d.direct, off, n)
		}
		return writeZeroes(d.f, off, n)
	})
}

// Discard implements Device with fallocate(FALLOC_FL_PUNCH_HOLE), falling
// back to WriteZeroes. Reads of the range return zeroes afterwards.
func (d *File) Discard(off, n int64) error {
	return rangeOp(&d.closed, "discard", off, n, d.size.Load(), !d.noFallocate, func() error {
		if err := unix.Fallocate(d.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
			return fmt.Errorf("bdev: file %q: punch hole %d+%d: %w", d.path, off, n, err)
		}
		return nil
	}, func() error { return d.WriteZeroes(off, n) })
}

// Size implements Device.
func (d *File) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *File) BlockSize() uint32 { return d.bs }

// ID implements Identifier: the file's device and inode numbers, stable
// while the file is not replaced.
func (d *File) ID() (string, error) {
	if d.closed.Load() {
		return "", ErrClosed
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return "", fmt.Errorf("bdev: file %q: fstat: %w", d.path, err)
	}
	return fmt.Sprintf("file:%d:%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino), nil
}

// Close implements Device.
func (d *File) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	err := d.closeRing()
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fallocateUnsupported reports whether a fallocate error means the file
// system or device lacks the mode (as opposed to an I/O error).
func fallocateUnsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY)
}

// alignedZeroes is a page-aligned read-only source of zero bytes for
// O_DIRECT writes.
var alignedZeroes = func() []byte {
	b := make([]byte, len(zeroes)+4096)
	off := int(-reflect.ValueOf(&b[0]).Pointer()) & 4095
	return b[off : off+len(zeroes) : off+len(zeroes)]
}()

// writeZeroesDirect writes n zero bytes at off through an O_DIRECT file
// (off and n aligned to the block size).
func writeZeroesDirect(f *os.File, off, n int64) error {
	for n > 0 {
		chunk := min(n, int64(len(alignedZeroes)))
		if _, err := f.WriteAt(alignedZeroes[:chunk], off); err != nil {
			return fmt.Errorf("bdev: write zeroes at %d: %w", off, err)
		}
		off += chunk
		n -= chunk
	}
	return nil
}

// writeZeroes writes n zero bytes at off through w, in chunks of the shared
// zero buffer.
func writeZeroes(w io.WriterAt, off, n int64) error {
	for n > 0 {
		chunk := min(n, int64(len(zeroes)))
		if _, err := w.WriteAt(zeroes[:chunk], off); err != nil {
			return fmt.Errorf("bdev: write zeroes at %d: %w", off, err)
		}
		off += chunk
		n -= chunk
	}
	return nil
}
