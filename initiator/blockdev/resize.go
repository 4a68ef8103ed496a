package blockdev

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrResizeUnsupported is wrapped by Resize when the kernel cannot change
// the block device's size in place (ublk before Linux 6.16). The device
// keeps its old size; a new mapping (a reconnect) gets the new one.
var ErrResizeUnsupported = errors.New("the kernel cannot resize this block device")

// Size returns the mapped device's size in bytes as this package serves
// it (the size at Map, or the last Resize).
func (m *Mapping) Size() int64 { return m.e.size() }

// Resize gives the block device a new size after the namespace changed
// size (NVMe Namespace Attribute Changed), as the Linux host's
// set_capacity_and_notify does for its own disks: I/O up to size is
// served from now on, and the kernel is told (FUSE + loop: the file's
// size, then LOOP_SET_CAPACITY; NBD: NBD_CMD_RECONFIGURE with the size;
// ublk: UBLK_U_CMD_UPDATE_SIZE). size must be a positive multiple of the
// block size. A kernel that cannot resize the device gets an error
// wrapping ErrResizeUnsupported.
func (m *Mapping) Resize(ctx context.Context, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return fmt.Errorf("blockdev: resize %s: %w", m.Path(), ErrUnmapped)
	}
	if size <= 0 || size%m.e.bs != 0 {
		return fmt.Errorf("blockdev: resize %s to %d bytes: not a positive multiple of the %d-byte block size", m.Path(), size, m.e.bs)
	}
	old := m.e.size()
	if size == old {
		return nil
	}
	// The engine first: the kernel may send I/O up to the new end as soon
	// as it knows it. After a shrink the engine refuses I/O past the end
	// even when the kernel could not be told.
	m.e.sz.Store(size)
	if err := m.m.resize(ctx, size); err != nil {
		return err
	}
	m.log.Info("resized", "path", m.Path(), "method", m.method.String(), "old_size", old, "size", size)
	return nil
}

// resize makes the kernel re-read the FUSE file's size, which it caches
// for the attribute timeout (an hour): the attributes are invalidated
// (FUSE_NOTIFY_INVAL_INODE with no range), read back by a stat, and the
// loop driver takes the new size from the file (LOOP_SET_CAPACITY).
func (m *fuseLoop) resize(ctx context.Context, size int64) error {
	if errno := m.file.NotifyContent(-1, 0); errno != 0 && errno != syscall.ENOENT {
		return fmt.Errorf("blockdev: resize %s: invalidating the FUSE file's attributes: %w", m.loop.path, errno)
	}
	var st unix.Stat_t
	file := filepath.Join(m.mnt, diskName)
	if err := unix.Stat(file, &st); err != nil {
		return fmt.Errorf("blockdev: resize %s: stat %s: %w", m.loop.path, file, err)
	}
	if st.Size != size {
		return fmt.Errorf("blockdev: resize %s: the kernel still sees %s as %d bytes, not %d", m.loop.path, file, st.Size, size)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := unix.IoctlSetInt(m.loop.fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return fmt.Errorf("blockdev: resize %s: LOOP_SET_CAPACITY: %w", m.loop.path, err)
	}
	return nil
}

// resize reconfigures the NBD device's size over netlink (a device set up
// by netlink takes no NBD_SET_SIZE ioctl). The kernel refuses a
// reconfigure without the backend identifier the device was connected
// with ("must specify backend", EINVAL).
func (m *nbdMapping) resize(ctx context.Context, size int64) error {
	g, err := dialGenl()
	if err != nil {
		return fmt.Errorf("blockdev: resize %s: %w", m.dev, err)
	}
	defer g.Close()
	fam, err := g.family(nbdGenlName)
	if err != nil {
		return fmt.Errorf("blockdev: resize %s: %w", m.dev, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := g.request(fam, nbdCmdReconfigure, nbdGenlVersion, nbdResizeAttrs(m.index, size, nbdBackend(m.c.Name))); err != nil {
		return fmt.Errorf("blockdev: resize %s: NBD_CMD_RECONFIGURE: %w", m.dev, err)
	}
	return nil
}

// nbdResizeAttrs are NBD_CMD_RECONFIGURE's attributes for a new size.
func nbdResizeAttrs(index uint32, size int64, backend string) nlAttrs {
	var a nlAttrs
	a.putU32(nbdAttrIndex, index)
	a.putU64(nbdAttrSizeBytes, uint64(size))
	a.putString(nbdAttrBackendIdentifier, backend)
	return a
}

// resize sends UBLK_U_CMD_UPDATE_SIZE; a driver without it (before Linux
// 6.16) answers EOPNOTSUPP, and the device keeps its size.
func (m *ublkMapping) resize(ctx context.Context, size int64) error {
	t := m.c.UnmapTimeout
	if d, ok := ctx.Deadline(); ok {
		t = max(min(t, time.Until(d)), 0)
	}
	err := m.ctrl.cmdTimeout(t, ublkCmdUpdateSize, m.devID, nil, uint64(size)>>9)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("blockdev: %s keeps its size: this kernel's ublk driver has no UBLK_U_CMD_UPDATE_SIZE (Linux 6.16 adds it); disconnect and connect again, or map with --map nbd or --map fuse (%w)", m.dev, ErrResizeUnsupported)
	}
	if err != nil {
		return fmt.Errorf("blockdev: resize %s: %w", m.dev, err)
	}
	return nil
}
