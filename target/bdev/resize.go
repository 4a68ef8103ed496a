package bdev

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Resizer is implemented by backends that change size in place while I/O
// runs (file, block, memory, null), so that a namespace is resized without
// being removed: a host rescanning meanwhile always finds it.
//
// Resize applies spec's size rules (those of Open for the backend's kind;
// kind, path and block size must be the device's own) and returns the new
// size. It only grows: a smaller size is refused with a *ShrinkError
// (NVMe has no namespace shrink, and data past the new end would go). With
// check it changes nothing and returns the size it would set, so that a
// configuration can be refused before anything changes. The new size is
// published atomically after the medium has grown, so I/O up to the new
// end succeeds once Size reports it.
type Resizer interface {
	Resize(spec Spec, check bool) (int64, error)
}

var (
	_ Resizer = (*File)(nil)
	_ Resizer = (*Block)(nil)
	_ Resizer = (*Memory)(nil)
	_ Resizer = (*Null)(nil)
)

// ErrShrink matches a *ShrinkError.
var ErrShrink = errors.New("bdev: a device is never shrunk in place")

// ShrinkError refuses a resize to fewer bytes than the device has.
type ShrinkError struct {
	Kind, Name string // backend kind; its path, or "" for memory and null
	Size, New  int64  // bytes now, bytes asked for
}

// Error implements error.
func (e *ShrinkError) Error() string {
	what := e.Kind
	if e.Name != "" {
		what = fmt.Sprintf("%s %q", e.Kind, e.Name)
	}
	return fmt.Sprintf("bdev: %s: size %d bytes (%s) is smaller than its %d bytes (%s): a namespace is never shrunk in place (NVMe has no shrink; data past the new end would be lost)",
		what, e.New, FormatBytes(e.New), e.Size, FormatBytes(e.Size))
}

// Is makes errors.Is(err, ErrShrink) true.
func (e *ShrinkError) Is(target error) bool { return target == ErrShrink }

// Resize implements Resizer: a size larger than the file's extends it
// (ftruncate: sparse) when spec.Grow is set; size 0 takes the file's
// size again (after it was extended outside).
func (d *File) Resize(spec Spec, check bool) (int64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := sameSpec(spec, KindFile, d.path, d.bs); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return 0, fmt.Errorf("bdev: file %q: fstat: %w", d.path, err)
	}
	cur := d.size.Load()
	if spec.Size != 0 && spec.Size < cur {
		return 0, &ShrinkError{Kind: KindFile, Name: d.path, Size: cur, New: spec.Size}
	}
	size, grow, err := fileSize(spec, d.bs, st.Size, false)
	if err == nil && size < cur { // the file was truncated outside
		err = &ShrinkError{Kind: KindFile, Name: d.path, Size: cur, New: size}
	}
	if err != nil || check {
		return size, err
	}
	if grow {
		if err := unix.Ftruncate(d.fd, size); err != nil {
			return 0, fmt.Errorf("bdev: file %q: extend from %d to %d bytes: %w", d.path, st.Size, size, err)
		}
	}
	d.size.Store(size)
	return size, nil
}

// Resize implements Resizer: the device's size is read again
// (BLKGETSIZE64; resize the device first, e.g. lvextend), and spec's size
// (0: the whole device) must fit in it.
func (d *Block) Resize(spec Spec, check bool) (int64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := sameSpec(spec, KindBlock, d.path, d.bs); err != nil {
		return 0, err
	}
	devSize, err := unix.IoctlGetUint64(d.bfd, unix.BLKGETSIZE64)
	if err != nil {
		return 0, fmt.Errorf("bdev: block %q: BLKGETSIZE64: %w", d.path, err)
	}
	size, err := blockSize(spec, d.bs, devSize)
	if cur := d.size.Load(); err == nil && size < cur {
		err = &ShrinkError{Kind: KindBlock, Name: d.path, Size: cur, New: size}
	}
	if err != nil || check {
		return size, err
	}
	d.size.Store(size)
	return size, nil
}

// Resize implements Resizer: the data is kept, the new space reads as
// zeroes and costs no RAM until written.
func (d *Memory) Resize(spec Spec, check bool) (int64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := sameSpec(spec, KindMemory, "", d.bs); err != nil {
		return 0, err
	}
	if _, err := checkMemory(spec.Size, d.bs); err != nil {
		return 0, err
	}
	if cur := d.size.Load(); spec.Size < cur {
		return 0, &ShrinkError{Kind: KindMemory, Size: cur, New: spec.Size}
	}
	if check {
		return spec.Size, nil
	}
	// Every request reads the tables under one stripe lock: holding
	// them all, no request sees them change under it.
	for i := range d.locks {
		d.locks[i].Lock()
	}
	d.grow(spec.Size)
	d.size.Store(spec.Size)
	for i := range d.locks {
		d.locks[i].Unlock()
	}
	return spec.Size, nil
}

// Resize implements Resizer.
func (d *Null) Resize(spec Spec, check bool) (int64, error) {
	if d.closed.Load() {
		return 0, ErrClosed
	}
	if err := sameSpec(spec, KindNull, "", d.bs); err != nil {
		return 0, err
	}
	if _, err := sizeAndBlock(KindNull, spec.Size, d.bs); err != nil {
		return 0, err
	}
	if cur := d.size.Load(); spec.Size < cur {
		return 0, &ShrinkError{Kind: KindNull, Size: cur, New: spec.Size}
	}
	if !check {
		d.size.Store(spec.Size)
	}
	return spec.Size, nil
}

// sameSpec checks that spec names the device being resized: a resize
// keeps the kind, the path and the block size.
func sameSpec(spec Spec, kind, path string, bs uint32) error {
	if err := checkSpec(spec); err != nil {
		return err
	}
	switch {
	case spec.Kind != kind:
		return fmt.Errorf("bdev: resize: a %s device cannot become %s", kind, spec.Kind)
	case spec.Path != path && path != "":
		return fmt.Errorf("bdev: resize: %s %q cannot become %q", kind, path, spec.Path)
	case spec.BlockSize != 0 && spec.BlockSize != bs:
		return fmt.Errorf("bdev: resize: %s: block size %d cannot become %d", kind, bs, spec.BlockSize)
	}
	return nil
}
