package blockdev

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// setSize makes the in-memory device n bytes long (as a namespace resized
// on the target), keeping the data below both sizes.
func (d *memDevice) setSize(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data := make([]byte, n)
	copy(data, d.data)
	d.data = data
}

// blockDevSize is the kernel's size of a block device (BLKGETSIZE64).
func blockDevSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		t.Fatalf("BLKGETSIZE64 %s: %v", path, err)
	}
	return int64(n)
}

// TestFUSELoopResize: a namespace that grows, then shrinks, changes the
// loop device's size in place (as the kernel host's disks do on a
// Namespace Attribute Changed event), the new blocks read and write
// through it, and bad sizes are refused.
func TestFUSELoopResize(t *testing.T) {
	needFUSELoop(t)
	const bs, small, big = 512, 1 << 20, 3 << 20
	dev := newMemDevice(small, bs)
	m := mapFUSE(t, dev, Options{})
	if got := blockDevSize(t, m.Path()); got != small {
		t.Fatalf("%s: %d bytes before the resize, want %d", m.Path(), got, small)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, tc := range []struct {
		size int64
		want string
	}{
		{0, "positive multiple"},
		{-bs, "positive multiple"},
		{small + 100, "positive multiple"},
	} {
		if err := m.Resize(ctx, tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resize(%d): %v, want an error containing %q", tc.size, err, tc.want)
		}
	}
	if got := m.Size(); got != small {
		t.Fatalf("Size after refused resizes: %d, want %d", got, small)
	}

	dev.setSize(big)
	if err := m.Resize(ctx, big); err != nil {
		t.Fatalf("Resize(%d): %v", big, err)
	}
	if got, gotM := blockDevSize(t, m.Path()), m.Size(); got != big || gotM != big {
		t.Fatalf("after growing: %s has %d bytes, Size %d, want %d", m.Path(), got, gotM, big)
	}
	// The grown part works through the block device.
	f, err := os.OpenFile(m.Path(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := alignedBuf(t, 64<<10)
	fill(buf, 7)
	const off = big - 64<<10
	if _, err := f.WriteAt(buf, off); err != nil {
		t.Fatalf("write at %d of the grown device: %v", int64(off), err)
	}
	f.Close()
	if got := dev.snapshot(off, int64(len(buf))); !bytes.Equal(got, buf) {
		t.Fatalf("the write at %d did not reach the namespace", int64(off))
	}

	dev.setSize(small)
	if err := m.Resize(ctx, small); err != nil {
		t.Fatalf("Resize(%d): %v", small, err)
	}
	if got := blockDevSize(t, m.Path()); got != small {
		t.Fatalf("after shrinking: %s has %d bytes, want %d", m.Path(), got, small)
	}
	if err := m.Resize(ctx, small); err != nil {
		t.Errorf("Resize to the same size: %v", err)
	}

	if err := m.Unmap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Resize(ctx, big); !errors.Is(err, ErrUnmapped) {
		t.Errorf("Resize after Unmap: %v, want ErrUnmapped", err)
	}
}

// TestNBDResizeAttrs checks NBD_CMD_RECONFIGURE's attributes byte by
// byte: the index, the new size and the backend identifier the device was
// connected with, without which the kernel refuses ("must specify
// backend", EINVAL: seen on 6.12).
func TestNBDResizeAttrs(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("golden bytes are for a little-endian host")
	}
	got := nbdResizeAttrs(3, 96<<20, nbdBackend("n1"))
	want := []byte{
		8, 0, 1, 0, 3, 0, 0, 0, // NBD_ATTR_INDEX = 3
		12, 0, 2, 0, 0, 0, 0, 6, 0, 0, 0, 0, // NBD_ATTR_SIZE_BYTES = 96 MiB
		14, 0, 10, 0, 'n', 'v', 'm', 'e', 'o', 'f', ':', 'n', '1', 0, 0, 0, // NBD_ATTR_BACKEND_IDENTIFIER
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("attrs\n got % x\nwant % x", []byte(got), want)
	}
	if c := nbdConnectAttrs(7, 64<<20, 512, 0, 0, nbdBackend("n1")); !bytes.HasSuffix(c, want[20:]) {
		t.Errorf("connect's backend identifier is not the one resize repeats: % x", []byte(c))
	}
}
