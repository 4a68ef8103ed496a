package uring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func newRing(t *testing.T, entries, flags uint32) *Ring {
	t.Helper()
	r, err := New(entries, flags)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
		t.Skipf("no io_uring here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestSQELayout(t *testing.T) {
	e := make(SQE, 128)
	e.PrepURingCmd(7, 0xc0107520, 0x1122334455667788)
	copy(e.Cmd(), []byte{1, 2})
	if e[0] != OpURingCmd || binary.NativeEndian.Uint32(e[4:]) != 7 ||
		binary.NativeEndian.Uint32(e[8:]) != 0xc0107520 ||
		binary.NativeEndian.Uint64(e[32:]) != 0x1122334455667788 || e[48] != 1 || e[49] != 2 {
		t.Fatalf("URING_CMD SQE % x", e[:64])
	}
	if len(e.Cmd()) != 80 {
		t.Fatalf("command area %d bytes with 128-byte SQEs, want 80", len(e.Cmd()))
	}
	e.PrepRead(3, 0x1000, 8, 9)
	if e[0] != OpRead || binary.NativeEndian.Uint64(e[8:]) != ^uint64(0) ||
		binary.NativeEndian.Uint64(e[16:]) != 0x1000 || binary.NativeEndian.Uint32(e[24:]) != 8 || e[48] != 0 {
		t.Fatalf("READ SQE % x", e[:64])
	}
}

// TestNopAndRead runs NOPs and an eventfd read through a 128-byte-SQE ring,
// more than the ring holds, so the rings wrap.
func TestNopAndRead(t *testing.T) {
	r := newRing(t, 4, SetupSQE128)
	for round := 0; round < 5; round++ {
		for i := 0; i < 3; i++ {
			e := r.SQE()
			if e == nil {
				t.Fatalf("round %d: no SQE %d", round, i)
			}
			e.PrepNop(uint64(round*10 + i))
		}
		if err := r.Submit(3); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			c, ok := r.PeekCQE()
			if !ok {
				t.Fatalf("round %d: completion %d missing", round, i)
			}
			r.Advance()
			if c.UserData != uint64(round*10+i) || c.Res != 0 {
				t.Fatalf("round %d: completion %+v", round, c)
			}
		}
		if _, ok := r.PeekCQE(); ok {
			t.Fatal("extra completion")
		}
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	buf := make([]byte, 8)
	r.SQE().PrepRead(efd, uintptr(unsafe.Pointer(&buf[0])), 8, 42)
	if err := r.Submit(0); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.PeekCQE(); ok {
		t.Fatal("eventfd read completed before the write")
	}
	one := make([]byte, 8)
	binary.NativeEndian.PutUint64(one, 5)
	if _, err := unix.Write(efd, one); err != nil {
		t.Fatal(err)
	}
	if err := r.Submit(1); err != nil {
		t.Fatal(err)
	}
	c, ok := r.PeekCQE()
	if !ok || c.UserData != 42 || c.Res != 8 || binary.NativeEndian.Uint64(buf) != 5 {
		t.Fatalf("eventfd read: %+v %v, value %d", c, ok, binary.NativeEndian.Uint64(buf))
	}
	r.Advance()
}

func TestFullQueue(t *testing.T) {
	r := newRing(t, 2, 0)
	n := 0
	for r.SQE() != nil {
		n++
		if n > 64 {
			t.Fatal("SQE never reports a full queue")
		}
	}
	if n != 2 {
		t.Fatalf("%d SQEs before full, want 2", n)
	}
}

// TestFileOps writes with RWF_DSYNC, reads back, fdatasyncs and punches a
// hole in a temporary file through the ring, each checked against the file.
func TestFileOps(t *testing.T) {
	r := newRing(t, 8, 0)
	f, err := os.CreateTemp(t.TempDir(), "uring")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(8192); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	data := bytes.Repeat([]byte{0xa5}, 4096)
	got := make([]byte, 4096)
	run := func(name string, prep func(SQE), want int32) {
		t.Helper()
		prep(r.SQE())
		if err := r.Submit(1); err != nil {
			t.Fatal(err)
		}
		c, ok := r.PeekCQE()
		if !ok {
			t.Fatalf("%s: no completion", name)
		}
		r.Advance()
		if c.Res != want || c.UserData != 7 {
			t.Fatalf("%s: completion %+v, want res %d", name, c, want)
		}
	}
	run("write", func(e SQE) { e.PrepWriteAt(fd, uintptr(unsafe.Pointer(&data[0])), 4096, 4096, RWFDsync, 7) }, 4096)
	run("read", func(e SQE) { e.PrepReadAt(fd, uintptr(unsafe.Pointer(&got[0])), 4096, 4096, 0, 7) }, 4096)
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from the write")
	}
	run("fdatasync", func(e SQE) { e.PrepFsync(fd, FsyncDatasync, 7) }, 0)
	run("punch", func(e SQE) {
		e.PrepFallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 4096, 7)
	}, 0)
	if _, err := f.ReadAt(got, 4096); err != nil || !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatalf("after the punch: %v, data not zero", err)
	}
	run("read past the end", func(e SQE) { e.PrepReadAt(fd, uintptr(unsafe.Pointer(&got[0])), 4096, 8192, 0, 7) }, 0)
	run("bad fd", func(e SQE) { e.PrepFsync(-1, 0, 7) }, -int32(unix.EBADF))
}

// TestWaitWhileSubmitting has one goroutine Wait and reap while another
// submits NOPs, as the file backends use a ring.
func TestWaitWhileSubmitting(t *testing.T) {
	r := newRing(t, 8, 0)
	const n = 200
	done := make(chan int)
	go func() {
		seen := 0
		for seen < n {
			if err := r.Wait(); err != nil {
				t.Error(err)
				break
			}
			for {
				if _, ok := r.PeekCQE(); !ok {
					break
				}
				r.Advance()
				seen++
			}
		}
		done <- seen
	}()
	var mu sync.Mutex
	for i := 0; i < n; {
		mu.Lock()
		e := r.SQE()
		if e != nil {
			e.PrepNop(uint64(i))
			if err := r.Submit(0); err != nil {
				t.Fatal(err)
			}
			i++
		}
		mu.Unlock()
		if e == nil {
			runtime.Gosched()
		}
	}
	if seen := <-done; seen != n {
		t.Fatalf("reaped %d completions, want %d", seen, n)
	}
}

// TestDrop takes back SQEs the kernel has not taken: they never complete,
// and the next SQE reuses their entries.
func TestDrop(t *testing.T) {
	r := newRing(t, 4, 0)
	r.SQE().PrepNop(1)
	r.SQE().PrepNop(2)
	if n := r.Drop(); n != 2 {
		t.Fatalf("dropped %d SQEs, want 2", n)
	}
	r.SQE().PrepNop(3)
	if err := r.Submit(1); err != nil {
		t.Fatal(err)
	}
	c, ok := r.PeekCQE()
	if !ok || c.UserData != 3 {
		t.Fatalf("completion %+v %v, want only NOP 3", c, ok)
	}
	r.Advance()
	if c, ok := r.PeekCQE(); ok {
		t.Fatalf("a dropped SQE ran: %+v", c)
	}
	if n := r.Drop(); n != 0 {
		t.Fatalf("dropped %d after a Submit, want 0", n)
	}
}
