package blockdev

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// loopDev is an attached loop device. Its descriptor stays open for the
// mapping's lifetime: with LO_FLAGS_AUTOCLEAR the kernel detaches the device
// on its last close, so closing it early would detach it, and a crashed
// process leaves no loop device behind once nobody else holds it.
type loopDev struct {
	n       int
	path    string
	fd      int
	backing string // backing file path as sysfs shows it
	dio     bool   // LO_FLAGS_DIRECT_IO survived configuration
}

const loopControl = "/dev/loop-control"

// loopSysfs is the loop attribute directory of /dev/loopN.
func loopSysfs(n int) string { return "/sys/block/loop" + strconv.Itoa(n) + "/loop" }

// attachLoop attaches a free loop device to the file at backing with the
// given logical block size, AUTOCLEAR, and direct I/O when the kernel takes
// it.
func attachLoop(backing string, bs int, readOnly bool, name string) (*loopDev, error) {
	ctl, err := unix.Open(loopControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("blockdev: no %s: load the loop module (modprobe loop): %w", loopControl, err)
		}
		return nil, fmt.Errorf("blockdev: open %s (needs root): %w", loopControl, err)
	}
	defer unix.Close(ctl)

	flags := unix.O_RDWR
	if readOnly {
		flags = unix.O_RDONLY
	}
	file, err := unix.Open(backing, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open loop backing file %s: %w", backing, err)
	}
	defer unix.Close(file)

	var lastErr error
	for try := 0; try < 8; try++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("blockdev: LOOP_CTL_GET_FREE: %w", err)
		}
		l := &loopDev{n: n, path: "/dev/loop" + strconv.Itoa(n), backing: backing}
		l.fd, err = openLoopNode(l.path, n)
		if err != nil {
			return nil, err
		}
		err = l.configure(file, bs, readOnly, name)
		if err == nil {
			return l, nil
		}
		unix.Close(l.fd)
		if !errors.Is(err, unix.EBUSY) {
			return nil, err
		}
		lastErr = err // another process took this device first
		time.Sleep(time.Duration(try+1) * 5 * time.Millisecond)
	}
	return nil, fmt.Errorf("blockdev: no free loop device after retries: %w", lastErr)
}

// openLoopNode opens /dev/loopN once it exists.
func openLoopNode(path string, n int) (int, error) {
	if err := ensureDevNode(path, "loop"+strconv.Itoa(n)); err != nil {
		return -1, fmt.Errorf("blockdev: %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("blockdev: open %s: %w", path, err)
	}
	return fd, nil
}

// configure binds the loop device to file: LOOP_CONFIGURE (Linux 5.8+), or
// LOOP_SET_FD + LOOP_SET_STATUS64 + LOOP_SET_BLOCK_SIZE + LOOP_SET_DIRECT_IO
// on older kernels.
func (l *loopDev) configure(file, bs int, readOnly bool, name string) error {
	var info unix.LoopInfo64
	info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	if readOnly {
		info.Flags |= unix.LO_FLAGS_READ_ONLY
	}
	copy(info.File_name[:len(info.File_name)-1], "nvmeof:"+name)
	cfg := unix.LoopConfig{Fd: uint32(file), Size: uint32(bs), Info: info}
	err := unix.IoctlLoopConfigure(l.fd, &cfg)
	switch {
	case err == nil:
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY):
		if err := l.configureLegacy(file, bs, info); err != nil {
			return err
		}
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("blockdev: LOOP_CONFIGURE %s: %w", l.path, err)
	default:
		return fmt.Errorf("blockdev: LOOP_CONFIGURE %s (block size %d): %w", l.path, bs, err)
	}
	st, err := unix.IoctlLoopGetStatus64(l.fd)
	if err != nil {
		l.clear()
		return fmt.Errorf("blockdev: LOOP_GET_STATUS64 %s: %w", l.path, err)
	}
	l.dio = st.Flags&unix.LO_FLAGS_DIRECT_IO != 0
	if b, err := os.ReadFile(loopSysfs(l.n) + "/backing_file"); err == nil {
		l.backing = strings.TrimSpace(string(b))
	}
	return nil
}

func (l *loopDev) configureLegacy(file, bs int, info unix.LoopInfo64) error {
	if err := unix.IoctlSetInt(l.fd, unix.LOOP_SET_FD, file); err != nil {
		return fmt.Errorf("blockdev: LOOP_SET_FD %s: %w", l.path, err)
	}
	info.Flags &^= unix.LO_FLAGS_DIRECT_IO
	if err := unix.IoctlLoopSetStatus64(l.fd, &info); err != nil {
		l.clear()
		return fmt.Errorf("blockdev: LOOP_SET_STATUS64 %s: %w", l.path, err)
	}
	if err := unix.IoctlSetInt(l.fd, unix.LOOP_SET_BLOCK_SIZE, bs); err != nil {
		l.clear()
		return fmt.Errorf("blockdev: LOOP_SET_BLOCK_SIZE %d on %s: %w", bs, l.path, err)
	}
	_ = unix.IoctlSetInt(l.fd, unix.LOOP_SET_DIRECT_IO, 1) // best effort; checked by the caller
	return nil
}

// clear undoes a configuration on an error path.
func (l *loopDev) clear() { _ = unix.IoctlSetInt(l.fd, unix.LOOP_CLR_FD, 0) }

// bound reports whether the loop device is still attached to our file.
func (l *loopDev) bound() bool {
	b, err := os.ReadFile(loopSysfs(l.n) + "/backing_file")
	if err != nil {
		return false
	}
	return strings.TrimSpace(string(b)) == l.backing
}

// detach asks for the detach (LOOP_CLR_FD, which with other openers only
// arms AUTOCLEAR), closes our descriptor and waits until the kernel let go
// of the backing file.
func (l *loopDev) detach(timeout time.Duration) error {
	if l.fd >= 0 {
		if err := unix.IoctlSetInt(l.fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("blockdev: LOOP_CLR_FD %s: %w", l.path, err)
		}
		unix.Close(l.fd)
		l.fd = -1
	}
	deadline := time.Now().Add(timeout)
	for l.bound() {
		if time.Now().After(deadline) {
			return fmt.Errorf("blockdev: %s still attached after %v (another process has it open; it detaches on its last close): %w", l.path, timeout, ErrBusy)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
