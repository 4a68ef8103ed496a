package blockdev

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// fuseLoop is a FUSE + loop mapping.
type fuseLoop struct {
	c      *config
	dir    string // <RunDir>/<Name>
	mnt    string // <dir>/fuse
	srv    *fuse.Server
	file   *fuseFile
	connID uint32 // FUSE connection (minor of the mount's st_dev)
	loop   *loopDev
	undo   cleanups

	unmapCtx context.Context // the Unmap call's context, for timeouts
}

func (m *fuseLoop) path() string { return m.loop.path }

// mapFUSELoop mounts the FUSE file and attaches a loop device to it.
func mapFUSELoop(ctx context.Context, e *engine, c *config) (_ *fuseLoop, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("blockdev: FUSE + loop needs root (mounting and loop devices need CAP_SYS_ADMIN)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("blockdev: no /dev/fuse: load the fuse module (modprobe fuse): %w", err)
	}
	if _, err := os.Stat(loopControl); err != nil {
		return nil, fmt.Errorf("blockdev: no %s: load the loop module (modprobe loop): %w", loopControl, err)
	}
	m := &fuseLoop{c: c, dir: filepath.Join(c.RunDir, c.Name), unmapCtx: context.Background()}
	m.mnt = filepath.Join(m.dir, "fuse")
	defer func() {
		if err != nil {
			if cerr := m.undo.run(); cerr != nil {
				err = fmt.Errorf("%w (cleanup: %v)", err, cerr)
			}
		}
	}()

	if err := removeStaleMount(m.mnt, c.Logger); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("blockdev: create %s: %w", c.RunDir, err)
	}
	if err := os.Mkdir(m.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("blockdev: create %s: %w", m.dir, err)
	}
	m.undo.push(func() error { return removeIfEmpty(m.dir) })
	if err := os.Mkdir(m.mnt, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("blockdev: create %s: %w", m.mnt, err)
	}
	m.undo.push(func() error { return removeIfEmpty(m.mnt) })

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root := &fuseRoot{file: &fuseFile{e: e, mtime: time.Now()}}
	m.file = root.file
	long := time.Hour
	opts := &fs.Options{
		EntryTimeout: &long,
		AttrTimeout:  &long,
		MountOptions: fuse.MountOptions{
			FsName:            "nvmeof:" + c.Name,
			Name:              "nvmeof",
			MaxWrite:          c.MaxIO,
			MaxReadAhead:      128 << 10,
			MaxBackground:     64,
			DirectMountStrict: true,
			DisableXAttrs:     true,
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
			Logger:            c.Logger.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		},
	}
	m.srv, err = fs.Mount(m.mnt, root, opts)
	if err != nil {
		return nil, fmt.Errorf("blockdev: mount FUSE at %s: %w", m.mnt, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(m.mnt, &st); err == nil {
		m.connID = unix.Minor(st.Dev)
	}
	m.undo.push(m.unmountFUSE)

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.loop, err = attachLoopFn(filepath.Join(m.mnt, diskName), c.bs, c.ReadOnly, c.Name)
	if err != nil {
		return nil, err
	}
	m.undo.push(func() error { return m.loop.detach(m.timeout(m.unmapCtx)) })
	if !m.loop.dio {
		c.Logger.Warn("loop device runs without direct I/O over FUSE (the kernel refused LO_FLAGS_DIRECT_IO); the FUSE file is still direct_io", "path", m.loop.path)
	}
	return m, nil
}

// attachLoopFn is attachLoop; tests replace it to fail midway.
var attachLoopFn = attachLoop

// unmap detaches the loop device, unmounts FUSE and removes the directories.
func (m *fuseLoop) unmap(ctx context.Context) error {
	if m.loop.fd >= 0 && busy(m.loop.path) {
		return fmt.Errorf("blockdev: %s is mounted or held exclusively (unmount it first): %w", m.loop.path, ErrBusy)
	}
	m.unmapCtx = ctx
	return m.undo.run()
}

// timeout is UnmapTimeout, shortened by ctx's deadline.
func (m *fuseLoop) timeout(ctx context.Context) time.Duration {
	t := m.c.UnmapTimeout
	if d, ok := ctx.Deadline(); ok {
		t = min(t, time.Until(d))
	}
	return max(t, 0)
}

// unmountFUSE unmounts (lazily if busy), waits a bounded time for the
// server loop to end, and aborts the connection if it does not.
func (m *fuseLoop) unmountFUSE() error {
	if m.srv == nil {
		return nil
	}
	err := unix.Unmount(m.mnt, 0)
	if errors.Is(err, unix.EBUSY) {
		m.c.Logger.Warn("FUSE mount busy, detaching lazily", "mount", m.mnt)
		err = unix.Unmount(m.mnt, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not mounted any more
		return fmt.Errorf("blockdev: unmount %s: %w", m.mnt, err)
	}
	done := make(chan struct{})
	go func() { m.srv.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(m.c.UnmapTimeout):
		if werr := abortFUSE(m.connID); werr != nil {
			return fmt.Errorf("blockdev: FUSE server for %s did not stop within %v and abort failed: %w", m.mnt, m.c.UnmapTimeout, werr)
		}
		select {
		case <-done:
		case <-time.After(time.Second):
			return fmt.Errorf("blockdev: FUSE server for %s did not stop after abort", m.mnt)
		}
	}
	m.srv = nil
	return nil
}

// fusectlDir is where the fusectl filesystem shows FUSE connections.
const fusectlDir = "/sys/fs/fuse/connections"

// abortFUSE aborts a FUSE connection through fusectl, mounting fusectl
// first if nobody did.
func abortFUSE(connID uint32) error {
	abort := fusectlDir + "/" + strconv.FormatUint(uint64(connID), 10) + "/abort"
	if _, err := os.Stat(abort); errors.Is(err, os.ErrNotExist) {
		if mounted, _ := isMountPoint(fusectlDir); !mounted {
			if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil {
				return fmt.Errorf("mount fusectl at %s: %w", fusectlDir, err)
			}
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// removeIfEmpty removes a directory we created; a missing one is fine.
func removeIfEmpty(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("blockdev: remove %s: %w", dir, err)
	}
	return nil
}

// removeStaleMount lazily unmounts a dead FUSE mount a crashed process left
// at dir, and refuses a live one (the name is in use).
func removeStaleMount(dir string, log hclog.Logger) error {
	mounted, err := isMountPoint(dir)
	if err != nil || !mounted {
		return err
	}
	var st unix.Stat_t
	serr := unix.Stat(filepath.Join(dir, diskName), &st)
	if serr == nil {
		return fmt.Errorf("blockdev: %s is already mounted by a live mapping: choose another Name", dir)
	}
	log.Warn("removing stale FUSE mount", "mount", dir, "stat", serr)
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("blockdev: remove stale mount %s: %w", dir, err)
	}
	return nil
}

// isMountPoint looks dir up in /proc/self/mountinfo.
func isMountPoint(dir string) (bool, error) {
	mps, err := mountPoints()
	if err != nil {
		return false, err
	}
	for _, mp := range mps {
		if mp == dir {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints lists the mount points in /proc/self/mountinfo.
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 {
			out = append(out, unescapeMountinfo(fields[4]))
		}
	}
	return out, s.Err()
}

// unescapeMountinfo decodes the octal escapes (\040 for space) mountinfo
// uses.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
