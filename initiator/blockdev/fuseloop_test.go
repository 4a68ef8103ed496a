package blockdev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// needFUSELoop skips unless FUSE + loop can work here.
func needFUSELoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("FUSE + loop needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse (modprobe fuse)")
	}
	if _, err := os.Stat(loopControl); err != nil {
		t.Skip("no /dev/loop-control (modprobe loop)")
	}
}

// alignedBuf returns page-aligned memory for O_DIRECT.
func alignedBuf(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// mapFUSE maps dev with FUSE + loop under a per-test run directory and
// checks on cleanup that nothing is left behind.
func mapFUSE(t *testing.T, dev Device, opts Options) *Mapping {
	t.Helper()
	opts.Method = MethodFUSELoop
	if opts.RunDir == "" {
		opts.RunDir = t.TempDir()
	}
	if opts.Name == "" {
		opts.Name = "t" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := Map(ctx, dev, &opts)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	fl := m.m.(*fuseLoop)
	t.Cleanup(func() {
		err := m.Unmap(context.Background())
		if err != nil && !errors.Is(err, ErrUnmapped) {
			t.Errorf("Unmap: %v", err)
		}
		assertGone(t, fl)
	})
	return m
}

// assertGone checks that no mount, loop binding or directory remains.
func assertGone(t *testing.T, fl *fuseLoop) {
	t.Helper()
	mps, err := mountPoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range mps {
		if mp == fl.mnt {
			t.Errorf("FUSE mount %s left behind", fl.mnt)
		}
	}
	if _, err := os.Stat(loopSysfs(fl.loop.n) + "/backing_file"); err == nil {
		b, _ := os.ReadFile(loopSysfs(fl.loop.n) + "/backing_file")
		if strings.TrimSpace(string(b)) == fl.loop.backing {
			t.Errorf("%s still attached to %s", fl.loop.path, b)
		}
	}
	if _, err := os.Stat(fl.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory %s left behind (%v)", fl.dir, err)
	}
}

func TestFUSELoopIO(t *testing.T) {
	needFUSELoop(t)
	const size = 64 << 20
	dev := newMemDevice(size, 512)
	m := mapFUSE(t, dev, Options{TrimZeroes: true})
	fl := m.m.(*fuseLoop)
	t.Logf("mapped %s, loop direct I/O %v", m, fl.loop.dio)
	if !strings.HasPrefix(m.Path(), "/dev/loop") || m.Method() != MethodFUSELoop {
		t.Fatalf("mapping %v", m)
	}

	fd, err := unix.Open(m.Path(), unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got, err := unix.IoctlGetInt(fd, unix.BLKSSZGET); err != nil || got != 512 {
		t.Fatalf("BLKSSZGET = %d, %v; want 512", got, err)
	}
	if got, err := unix.IoctlGetInt(fd, unix.BLKGETSIZE64); err != nil || got != size {
		t.Fatalf("BLKGETSIZE64 = %d, %v; want %d", got, err, size)
	}

	buf := alignedBuf(t, 1<<20)
	for _, tc := range []struct {
		name string
		off  int64
		n    int
	}{
		{"512 at 0", 0, 512},
		{"512 unaligned to 4k", 4096*3 + 512, 512},
		{"4k", 8 << 20, 4096},
		{"4k at 512", 512 * 7, 4096},
		{"1 MiB", 16 << 20, 1 << 20},
		{"last sector", size - 512, 512},
	} {
		t.Run("direct "+tc.name, func(t *testing.T) {
			b := buf[:tc.n]
			fill(b, uint64(tc.off))
			want := append([]byte(nil), b...)
			if n, err := unix.Pwrite(fd, b, tc.off); err != nil || n != tc.n {
				t.Fatalf("pwrite = %d, %v", n, err)
			}
			if got := dev.snapshot(tc.off, int64(tc.n)); !bytes.Equal(got, want) {
				t.Fatalf("device does not hold the O_DIRECT write")
			}
			clear(b)
			if n, err := unix.Pread(fd, b, tc.off); err != nil || n != tc.n {
				t.Fatalf("pread = %d, %v", n, err)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("read back differs")
			}
		})
	}

	// Buffered I/O through the page cache of the loop device.
	f, err := os.OpenFile(m.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		off int64
		n   int
	}{{20 << 20, 512}, {20<<20 + 4096, 4096}, {24<<20 + 512, 3 * 4096}} {
		b := make([]byte, tc.n)
		fill(b, uint64(tc.off)+1)
		if _, err := f.WriteAt(b, tc.off); err != nil {
			t.Fatal(err)
		}
		flushes := dev.flushes.Load()
		if err := f.Sync(); err != nil {
			t.Fatalf("fsync: %v", err)
		}
		if dev.flushes.Load() == flushes {
			t.Errorf("fsync of %s did not reach Device.Flush", m.Path())
		}
		if got := dev.snapshot(tc.off, int64(tc.n)); !bytes.Equal(got, b) {
			t.Fatalf("buffered write at %d not on the device after fsync", tc.off)
		}
		// Change the device behind the cache, drop the cache, read again.
		want := make([]byte, tc.n)
		fill(want, uint64(tc.off)+2)
		dev.poke(tc.off, want)
		if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
			t.Fatalf("BLKFLSBUF: %v", err)
		}
		got := make([]byte, tc.n)
		if _, err := f.ReadAt(got, tc.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("buffered read at %d differs from the device", tc.off)
		}
	}

	// BLKDISCARD reaches Trim (the loop driver turns it into PUNCH_HOLE).
	junk := make([]byte, 1<<20)
	fill(junk, 7)
	dev.poke(32<<20, junk)
	trims := dev.trims.Load()
	out, err := exec.Command("blkdiscard", "-o", strconv.Itoa(32<<20), "-l", strconv.Itoa(1<<20), m.Path()).CombinedOutput()
	if err != nil {
		t.Logf("blkdiscard: %v: %s (the loop driver may not pass discards here)", err, out)
	} else {
		if dev.trims.Load() == trims {
			t.Errorf("BLKDISCARD did not reach Trim")
		}
		if got := dev.snapshot(32<<20, 1<<20); !bytes.Equal(got, make([]byte, 1<<20)) {
			t.Errorf("discarded range does not read as zeroes")
		}
	}

	// Unaligned I/O straight on the FUSE file is read-modify-write.
	ff, err := os.OpenFile(filepath.Join(fl.mnt, diskName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := dev.snapshot(40<<20, 8192)
	copy(want[100:], "unaligned write through FUSE")
	if _, err := ff.WriteAt([]byte("unaligned write through FUSE"), 40<<20+100); err != nil {
		t.Fatal(err)
	}
	ff.Close()
	if got := dev.snapshot(40<<20, 8192); !bytes.Equal(got, want) {
		t.Errorf("unaligned FUSE write: device differs")
	}
}

func TestFUSELoop4K(t *testing.T) {
	needFUSELoop(t)
	dev := newMemDevice(8<<20, 4096)
	m := mapFUSE(t, dev, Options{})
	fd, err := unix.Open(m.Path(), unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if got, err := unix.IoctlGetInt(fd, unix.BLKSSZGET); err != nil || got != 4096 {
		t.Fatalf("BLKSSZGET = %d, %v; want 4096", got, err)
	}
	b := alignedBuf(t, 8192)
	if _, err := unix.Pwrite(fd, b[:512], 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("512-byte O_DIRECT write on a 4K device: %v, want EINVAL", err)
	}
	fill(b, 3)
	if n, err := unix.Pwrite(fd, b, 4096); err != nil || n != 8192 {
		t.Fatalf("pwrite = %d, %v", n, err)
	}
	if !bytes.Equal(dev.snapshot(4096, 8192), b) {
		t.Fatal("device differs")
	}
}

func TestFUSELoopExt4(t *testing.T) {
	needFUSELoop(t)
	for _, tool := range []string{"mkfs.ext4", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing (apt-get install -y e2fsprogs)", tool)
		}
	}
	dev := zeroingDevice{newMemDevice(64<<20, 512)}
	m := mapFUSE(t, dev, Options{})
	fl := m.m.(*fuseLoop)

	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("mkfs.ext4", "-F", "-q", m.Path())
	if dev.flushes.Load() == 0 {
		t.Errorf("mkfs issued no flush that reached the device")
	}
	mnt := t.TempDir()
	if err := unix.Mount(m.Path(), mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	mounted := true
	defer func() {
		if mounted {
			unix.Unmount(mnt, 0)
		}
	}()
	files := map[string][]byte{}
	for i := range 8 {
		b := make([]byte, 1000+i*77777)
		fill(b, uint64(i))
		name := filepath.Join(mnt, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	unix.Sync()

	// Unmap refuses while the filesystem is mounted and changes nothing.
	if err := m.Unmap(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("Unmap with ext4 mounted: %v, want ErrBusy", err)
	}
	if !fl.loop.bound() {
		t.Fatal("busy Unmap detached the loop device")
	}

	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
	mounted = false
	run("e2fsck", "-f", "-n", m.Path())

	// Remount read-only and compare the files.
	if err := unix.Mount(m.Path(), mnt, "ext4", unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("mount: %v", err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v, content equal %v", name, err, bytes.Equal(got, want))
		}
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("umount: %v", err)
	}
	if err := m.Unmap(context.Background()); err != nil {
		t.Fatalf("Unmap: %v", err)
	}
	assertGone(t, fl)
	t.Logf("device saw %d reads, %d writes, %d flushes, %d trims, %d write-zeroes",
		dev.reads.Load(), dev.writes.Load(), dev.flushes.Load(), dev.trims.Load(), dev.zeroes.Load())
	if err := m.Unmap(context.Background()); !errors.Is(err, ErrUnmapped) {
		t.Errorf("second Unmap: %v, want ErrUnmapped", err)
	}
}

// TestFUSELoopStaleMount: a mount a crashed process left behind under the
// same name is removed by the next Map.
func TestFUSELoopStaleMount(t *testing.T) {
	needFUSELoop(t)
	runDir := t.TempDir()
	dev := newMemDevice(4<<20, 512)
	m1 := mapFUSE(t, dev, Options{RunDir: runDir, Name: "same"})
	ctx := context.Background()
	if _, err := Map(ctx, dev, &Options{Method: MethodFUSELoop, RunDir: runDir, Name: "same"}); err == nil {
		t.Fatal("second Map with a live name succeeded")
	} else {
		t.Logf("second Map: %v", err)
	}
	if err := m1.Unmap(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := mapFUSE(t, dev, Options{RunDir: runDir, Name: "same"})
	if err := m2.Unmap(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMapErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		dev  Device
		opts *Options
		want string
	}{
		{"nil device", nil, nil, "nil Device"},
		{"odd block size", newMemDevice(4096, 1000), nil, "block size"},
		{"size not multiple", &memDevice{bs: 512, data: make([]byte, 1000)}, nil, "multiple"},
		{"bad name", newMemDevice(4096, 512), &Options{Name: "../x"}, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Map(ctx, tc.dev, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Map: %v, want error containing %q", err, tc.want)
			}
		})
	}
	if !nbdAvailable() {
		_, err := Map(ctx, newMemDevice(4096, 512), &Options{Method: MethodNBD})
		// The way out is named as the CLI spells it, not as a Go name.
		want := []string{"modprobe nbd", "--map fuse"}
		if os.Geteuid() != 0 {
			want = []string{"root"}
		}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("Map NBD without nbd: %v, want it to contain %q", err, w)
			}
		}
		t.Logf("forced NBD here: %v", err)
	}
}

// TestFUSELoopFailMidway: an error after the FUSE mount leaves no mount
// and no directory behind.
func TestFUSELoopFailMidway(t *testing.T) {
	needFUSELoop(t)
	runDir := t.TempDir()
	saved := attachLoopFn
	defer func() { attachLoopFn = saved }()
	var mnt string
	attachLoopFn = func(backing string, bs int, ro bool, name string) (*loopDev, error) {
		mnt = filepath.Dir(backing)
		if _, err := os.Stat(backing); err != nil {
			t.Errorf("FUSE file not there at attach time: %v", err)
		}
		return nil, errors.New("injected loop failure")
	}
	_, err := Map(context.Background(), newMemDevice(1<<20, 512), &Options{Method: MethodFUSELoop, RunDir: runDir, Name: "midway"})
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Map: %v", err)
	}
	if ok, _ := isMountPoint(mnt); ok {
		t.Errorf("mount %s left behind", mnt)
	}
	if _, err := os.Stat(filepath.Join(runDir, "midway")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left behind: %v", err)
	}
}

// TestFUSELoopHeldOpen: another opener delays the detach; Unmap reports
// ErrBusy after its timeout and succeeds once the opener is gone.
func TestFUSELoopHeldOpen(t *testing.T) {
	needFUSELoop(t)
	m := mapFUSE(t, newMemDevice(1<<20, 512), Options{UnmapTimeout: 300 * time.Millisecond})
	f, err := os.Open(m.Path())
	if err != nil {
		t.Fatal(err)
	}
	err = m.Unmap(context.Background())
	if !errors.Is(err, ErrBusy) {
		f.Close()
		t.Fatalf("Unmap with the device open: %v, want ErrBusy", err)
	}
	b := make([]byte, 512)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Errorf("read after a deferred detach: %v", err)
	}
	f.Close()
	if err := m.Unmap(context.Background()); err != nil {
		t.Fatalf("Unmap after close: %v", err)
	}
}

// TestFUSELoopDeadMount: a FUSE mount whose server died (a crashed
// process) is removed by the next Map under the same name.
func TestFUSELoopDeadMount(t *testing.T) {
	needFUSELoop(t)
	runDir := t.TempDir()
	dir := filepath.Join(runDir, "dead", "fuse")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dev := newMemDevice(1<<20, 512)
	c, _ := newConfig(dev, nil)
	srv, err := fs.Mount(dir, &fuseRoot{file: &fuseFile{e: newEngine(dev, c)}}, &fs.Options{MountOptions: fuse.MountOptions{DirectMountStrict: true}})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	if had, _ := isMountPoint(fusectlDir); !had {
		defer unix.Unmount(fusectlDir, 0) // abortFUSE mounts it
	}
	if err := abortFUSE(unix.Minor(st.Dev)); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		t.Skipf("cannot abort a FUSE connection here: %v", err)
	}
	srv.Wait()
	if err := unix.Stat(filepath.Join(dir, diskName), &st); !errors.Is(err, unix.ENOTCONN) {
		t.Logf("stat of a dead mount: %v", err)
	}
	m := mapFUSE(t, dev, Options{RunDir: runDir, Name: "dead"})
	if err := m.Unmap(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := isMountPoint(dir); ok {
		t.Fatalf("dead mount %s still there", dir)
	}
}

func TestMapAuto(t *testing.T) {
	needFUSELoop(t)
	if nbdAvailable() {
		t.Skip("NBD present: auto picks NBD")
	}
	m, err := Map(context.Background(), newMemDevice(1<<20, 512), &Options{RunDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap(context.Background())
	if m.Method() != MethodFUSELoop {
		t.Fatalf("auto chose %v", m.Method())
	}
}
