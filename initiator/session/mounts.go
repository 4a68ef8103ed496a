package session

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of /proc/self/mountinfo, the fields this package uses.
type Mount struct {
	Major, Minor uint32 // the st_dev of files in the mount
	Point        string // the mount point
	FSType       string
	Source       string
}

// mountInfoPath is a variable so tests can feed their own table.
var mountInfoPath = "/proc/self/mountinfo"

// Mounts returns the mount table of this process's mount namespace.
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("session: mount table: %w", err)
	}
	return parseMountInfo(b), nil
}

// parseMountInfo parses proc(5) mountinfo lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Malformed lines are skipped.
func parseMountInfo(b []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		maj, min, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		m := Mount{Major: uint32(ma), Minor: uint32(mi), Point: unescapeMount(f[4])}
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				if i+1 < len(f) {
					m.FSType = f[i+1]
				}
				if i+2 < len(f) {
					m.Source = unescapeMount(f[i+2])
				}
				break
			}
		}
		out = append(out, m)
	}
	return out
}

// unescapeMount undoes the octal escapes (\040 for a space, ...) of
// mountinfo fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountPointsOf returns where the block device at path is mounted (by its
// device number), nil when it is not.
func MountPointsOf(path string) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("session: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return nil, nil
	}
	ms, err := Mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.Major == unix.Major(st.Rdev) && m.Minor == unix.Minor(st.Rdev) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	ms, err := Mounts()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range ms {
		if within(m.Point, dir) {
			out = append(out, m.Point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	dir = filepath.Clean(dir)
	path = filepath.Clean(path)
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// sysBlock is /sys/block, a variable for tests.
var sysBlock = "/sys/block"

// loopDevicesUnder returns the loop devices (/dev/loopN) whose backing
// file is below dir.
func loopDevicesUnder(dir string) []string {
	ents, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysBlock, e.Name(), "loop", "backing_file"))
		if err != nil {
			continue
		}
		bf := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if within(bf, dir) {
			out = append(out, "/dev/"+e.Name())
		}
	}
	return out
}

// cleanupDir removes what a dead daemon left in its directory: it detaches
// the loop devices backed by files below dir (or marks them to detach on
// their last close), lazily unmounts the (dead) FUSE mounts below dir,
// then removes dir.
func cleanupDir(dir string) {
	if _, err := os.Lstat(dir); err != nil {
		return
	}
	for _, dev := range loopDevicesUnder(dir) {
		detachLoop(dev)
	}
	for _, mp := range mountsUnder(dir) {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
	_ = os.RemoveAll(dir)
}

// detachLoop detaches a loop device (LOOP_CLR_FD). While the device is
// still open elsewhere the kernel only sets autoclear, and the detach
// happens on the last close.
func detachLoop(dev string) {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
}
