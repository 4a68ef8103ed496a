package bdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"golang.org/x/sys/unix"
)

// Block is the block device backend.
//
// It keeps two descriptors on the device node: a buffered one, opened
// O_EXCL so the kernel refuses the device while it is mounted or claimed by
// another exclusive user, and an O_DIRECT one (unless Spec.BufferedIO).
// Transfers use the O_DIRECT descriptor when the offset, the length and
// the buffer's address are multiples of the device's logical block size,
// and the buffered one otherwise; the kernel keeps the page cache coherent
// with direct I/O to the same range. The asynchronous methods (Async) run
// on an io_uring.
type Block struct {
	ringDev
	buffered *os.File
	bfd      int
	path     string
	lbs      uint32 // the device's logical block size
	bs       uint32 // the block size exposed
	rdev     uint64
	health   healthCache // ReadHealth of path, kept for HealthTTL
}

var (
	_ Device         = (*Block)(nil)
	_ HealthReporter = (*Block)(nil)
	_ Identifier     = (*Block)(nil)
	_ Async          = (*Block)(nil)
	_ FUAWriter      = (*Block)(nil)
	_ MaybeAsync     = (*Block)(nil)
)

// OpenBlock opens a block device node; see Spec for the size rules.
func OpenBlock(spec Spec) (*Block, error) {
	if spec.Path == "" {
		return nil, errors.New("bdev: block: no device path given")
	}
	f, err := os.OpenFile(spec.Path, os.O_RDWR|os.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("bdev: block: %w (is it mounted or in use?)", err)
		}
		return nil, fmt.Errorf("bdev: block: %w", err)
	}
	d := &Block{buffered: f, bfd: int(f.Fd()), path: spec.Path}
	d.dfd = -1
	d.health.read = func() (Health, error) { return ReadHealth(d.path) }
	fail := func(err error) (*Block, error) {
		_ = d.closeRing()
		d.buffered.Close()
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.bfd, &st); err != nil {
		return fail(fmt.Errorf("bdev: block %q: fstat: %w", spec.Path, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fail(fmt.Errorf("bdev: block: %q is not a block device; use backend \"file\" for regular files", spec.Path))
	}
	d.rdev = st.Rdev
	devSize, err := unix.IoctlGetUint64(d.bfd, unix.BLKGETSIZE64)
	if err != nil {
		return fail(fmt.Errorf("bdev: block %q: BLKGETSIZE64: %w", spec.Path, err))
	}
	lbs, err := unix.IoctlGetUint32(d.bfd, unix.BLKSSZGET)
	if err != nil {
		return fail(fmt.Errorf("bdev: block %q: BLKSSZGET: %w", spec.Path, err))
	}
	if !ValidBlockSize(lbs) {
		return fail(fmt.Errorf("bdev: block %q: unsupported logical block size %d", spec.Path, lbs))
	}
	d.lbs = lbs
	d.bs = spec.BlockSize
	if d.bs == 0 {
		d.bs = lbs
	}
	if d.bs < lbs {
		return fail(fmt.Errorf("bdev: block %q: block size %d is smaller than the device's logical block size %d", spec.Path, d.bs, lbs))
	}
	size, err := blockSize(spec, d.bs, devSize)
	if err != nil {
		return fail(err)
	}
	d.size.Store(size)
	what := fmt.Sprintf("block %q", spec.Path)
	if err := d.openDirect(what, spec.Path, spec.BufferedIO); err != nil {
		return fail(err)
	}
	d.align = int64(lbs)
	// fallocate on a block device (blkdev_fallocate): ZERO_RANGE writes
	// zeroes (offloaded where the device can), PUNCH_HOLE zeroes by
	// unmapping only, and falls back to BLKDISCARD where it cannot.
	if err := d.startRing(ringFiles{what: what, bfd: d.bfd,
		zeroMode: unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE,
		discMode: unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
		zero:     d.WriteZeroes, discard: d.Discard}, spec.QueueDepth); err != nil {
		return fail(err)
	}
	return d, nil
}

// blockSize applies Spec's size rules to a device of devSize bytes with
// bs-byte blocks: the size to expose.
func blockSize(spec Spec, bs uint32, devSize uint64) (int64, error) {
	var size int64
	switch {
	case spec.Size == 0:
		size = int64(devSize) - int64(devSize)%int64(bs)
	case spec.Size%int64(bs) != 0:
		return 0, fmt.Errorf("bdev: block %q: size %d is not a multiple of the block size %d", spec.Path, spec.Size, bs)
	case uint64(spec.Size) > devSize:
		return 0, fmt.Errorf("bdev: block %q: configured size %d is larger than the device (%d bytes)", spec.Path, spec.Size, devSize)
	default:
		size = spec.Size
	}
	if size == 0 {
		return 0, fmt.Errorf("bdev: block %q: device is smaller than one block", spec.Path)
	}
	return size, nil
}

// useDirect reports whether a request may go through the O_DIRECT
// descriptor: offset, length and buffer address aligned to the logical
// block size.
func (d *Block) useDirect(p []byte, off int64) bool {
	if d.direct == nil || len(p) == 0 {
		return false
	}
	m := int64(d.lbs) - 1
	if off&m != 0 || int64(len(p))&m != 0 {
		return false
	}
	// The address of the first element, without package unsafe; this
	// form does not allocate.
	return reflect.ValueOf(&p[0]).Pointer()&uintptr(m) == 0
}

// ReadAt implements Device.
func (d *Block) ReadAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("read", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	if d.useDirect(p, off) {
		n, err := d.direct.ReadAt(p, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
		// Some stacked devices want more alignment than BLKSSZGET
		// says: retry buffered.
	}
	return d.buffered.ReadAt(p, off)
}

// WriteAt implements Device.
func (d *Block) WriteAt(p []byte, off int64) (int, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := checkRange("write", off, int64(len(p)), d.size.Load()); err != nil {
		return 0, err
	}
	if d.useDirect(p, off) {
		n, err := d.direct.WriteAt(p, off)
		if !errors.Is(err, unix.EINVAL) {
			return n, err
		}
	}
	return d.buffered.WriteAt(p, off)
}

// Flush implements Device with fsync, which writes back the page cache and
// flushes the device's volatile write cache.
func (d *Block) Flush() error {
	if d.closed.Load() {
		return ErrClosed
	}
	var err error
	if e := unix.Fsync(d.bfd); e != nil {
		err = fmt.Errorf("bdev: block %q: fsync: %w", d.path, e)
	}
	return d.latch.check(err)
}

// rangeIoctl issues BLKZEROOUT or BLKDISCARD for [off, off+n). The argument
// is a pointer to two native-endian uint64s (start, length); IoctlSetString
// passes a pointer to a copy of its bytes, which avoids package unsafe.
func (d *Block) rangeIoctl(req uint, off, n int64) error {
	var arg [16]byte
	binary.NativeEndian.PutUint64(arg[0:], uint64(off))
	binary.NativeEndian.PutUint64(arg[8:], uint64(n))
	return unix.IoctlSetString(d.bfd, req, string(arg[:]))
}

func (d *Block) aligned(off, n int64) bool {
	m := int64(d.lbs) - 1
	return off&m == 0 && n&m == 0
}

// WriteZeroes implements Device with BLKZEROOUT (falling back to writing
// zeroes for ranges not aligned to the logical block size).
func (d *Block) WriteZeroes(off, n int64) error {
	return rangeOp(&d.closed, "write zeroes", off, n, d.size.Load(), d.aligned(off, n), func() error {
		if err := d.rangeIoctl(unix.BLKZEROOUT, off, n); err != nil {
			return fmt.Errorf("bdev: block %q: BLKZEROOUT %d+%d: %w", d.path, off, n, err)
		}
		return nil
	}, func() error { return writeZeroes(d.buffered, off, n) })
}

// Discard implements Device with BLKDISCARD, falling back to WriteZeroes
// when the device cannot discard.
func (d *Block) Discard(off, n int64) error {
	return rangeOp(&d.closed, "discard", off, n, d.size.Load(), d.aligned(off, n), func() error {
		if err := d.rangeIoctl(unix.BLKDISCARD, off, n); err != nil {
			return fmt.Errorf("bdev: block %q: BLKDISCARD %d+%d: %w", d.path, off, n, err)
		}
		return nil
	}, func() error { return d.WriteZeroes(off, n) })
}

// Size implements Device.
func (d *Block) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *Block) BlockSize() uint32 { return d.bs }

// LogicalBlockSize returns the device's own logical block size (BLKSSZGET).
func (d *Block) LogicalBlockSize() uint32 { return d.lbs }

// Health implements HealthReporter with ReadHealth on the device node,
// reading the disk at most once per HealthTTL (the answer, error or not,
// is kept that long; ErrNotSupported for good). It may block for as long
// as the disk takes to answer a SMART command: call it off the I/O path.
func (d *Block) Health() (Health, error) {
	if d.closed.Load() {
		return Health{}, ErrClosed
	}
	return d.health.get(HealthTTL)
}

// ID implements Identifier from sysfs: the disk's WWID, else its serial
// number. Devices without either (loop, most virtual disks) return
// ErrNotSupported.
func (d *Block) ID() (string, error) {
	if d.closed.Load() {
		return "", ErrClosed
	}
	base := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(d.rdev), unix.Minor(d.rdev))
	part, err := os.ReadFile(filepath.Join(base, "partition"))
	if err != nil {
		return sysfsID(base)
	}
	// A partition: the identifiers live on the whole disk, and the
	// partition number keeps sibling partitions apart.
	id, err := sysfsID(filepath.Join(base, ".."))
	if err != nil {
		return "", err
	}
	return id + "-part" + strings.TrimSpace(string(part)), nil
}

// sysfsID reads a disk's identifier from its sysfs directory.
func sysfsID(dir string) (string, error) {
	for _, name := range []string{"wwid", "device/wwid", "serial", "device/serial"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return name[strings.LastIndexByte(name, '/')+1:] + ":" + v, nil
		}
	}
	return "", fmt.Errorf("bdev: no wwid or serial in sysfs: %w", ErrNotSupported)
}

// Close implements Device.
func (d *Block) Close() error {
	if d.closed.Swap(true) {
		return ErrClosed
	}
	err := d.closeRing()
	if cerr := d.buffered.Close(); err == nil {
		err = cerr
	}
	return err
}
