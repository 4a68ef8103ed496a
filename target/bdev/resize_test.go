package bdev

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestResize resizes each backend kind in place: growth keeps the data
// and opens the new range, a check changes nothing, a shrink is refused
// with a *ShrinkError, a resize that would change the device is refused.
func TestResize(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		name    string
		open    func(t *testing.T) (Device, Spec)
		edit    func(s *Spec) // the resize asked for
		outside func(t *testing.T, s Spec)
		want    int64  // size after
		wantErr string // "" for success; "shrink" for ErrShrink
	}{
		{name: "file grows", open: openFileSpec(mib), edit: func(s *Spec) { s.Size, s.Grow = 2*mib, true }, want: 2 * mib},
		{name: "file grows without grow", open: openFileSpec(mib), edit: func(s *Spec) { s.Size = 2 * mib }, wantErr: "set grow"},
		{name: "file shrinks", open: openFileSpec(2 * mib), edit: func(s *Spec) { s.Size, s.Grow = mib, true }, wantErr: "shrink"},
		{name: "file same size", open: openFileSpec(mib), edit: func(s *Spec) {}, want: mib},
		{name: "file grown outside, size 0", open: openFileSpec(mib), edit: func(s *Spec) { s.Size = 0 },
			outside: func(t *testing.T, s Spec) { must(t, os.Truncate(s.Path, 3*mib)) }, want: 3 * mib},
		{name: "file truncated outside, size 0", open: openFileSpec(2 * mib), edit: func(s *Spec) { s.Size = 0 },
			outside: func(t *testing.T, s Spec) { must(t, os.Truncate(s.Path, mib)) }, wantErr: "shrink"},
		{name: "file to another path", open: openFileSpec(mib), edit: func(s *Spec) { s.Path += ".2" }, wantErr: "cannot become"},
		{name: "file to another block size", open: openFileSpec(mib), edit: func(s *Spec) { s.BlockSize = 4096 }, wantErr: "block size 512 cannot become 4096"},
		{name: "memory grows", open: openVolatile(KindMemory, mib), edit: func(s *Spec) { s.Size = 3*mib + 512 }, want: 3*mib + 512},
		{name: "memory shrinks", open: openVolatile(KindMemory, 2*mib), edit: func(s *Spec) { s.Size = mib }, wantErr: "shrink"},
		{name: "memory larger than the machine", open: openVolatile(KindMemory, mib), edit: func(s *Spec) { s.Size = 1 << 62 }, wantErr: "more than the machine's memory"},
		{name: "memory to null", open: openVolatile(KindMemory, mib), edit: func(s *Spec) { s.Kind = KindNull }, wantErr: "cannot become null"},
		{name: "null grows", open: openVolatile(KindNull, mib), edit: func(s *Spec) { s.Size = 8 * mib }, want: 8 * mib},
		{name: "null shrinks", open: openVolatile(KindNull, 2*mib), edit: func(s *Spec) { s.Size = mib }, wantErr: "shrink"},
		{name: "null not a block multiple", open: openVolatile(KindNull, mib), edit: func(s *Spec) { s.Size = 2*mib + 1 }, wantErr: "not a multiple"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, spec := tt.open(t)
			defer d.Close()
			pattern := bytes.Repeat([]byte{0xa5}, 4096)
			if _, err := d.WriteAt(pattern, d.Size()-4096); err != nil {
				t.Fatal(err)
			}
			old := d.Size()
			if tt.outside != nil {
				tt.outside(t, spec)
			}
			tt.edit(&spec)
			r := d.(Resizer)
			got, err := r.Resize(spec, true)
			if d.Size() != old {
				t.Fatalf("check changed the size from %d to %d", old, d.Size())
			}
			if err == nil {
				got, err = r.Resize(spec, false)
			}
			switch {
			case tt.wantErr == "shrink":
				var se *ShrinkError
				if !errors.As(err, &se) || !errors.Is(err, ErrShrink) || !strings.Contains(err.Error(), "never shrunk") {
					t.Fatalf("Resize = %v, want a *ShrinkError", err)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resize = %v, want an error containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatalf("Resize: %v", err)
			case got != tt.want || d.Size() != tt.want:
				t.Fatalf("Resize = %d, Size %d, want %d", got, d.Size(), tt.want)
			}
			if tt.wantErr != "" {
				if d.Size() != old {
					t.Errorf("refused resize changed the size from %d to %d", old, d.Size())
				}
				return
			}
			buf := make([]byte, len(pattern))
			if _, err := d.ReadAt(buf, old-4096); err != nil {
				t.Fatal(err)
			}
			if spec.Kind != KindNull && !bytes.Equal(buf, pattern) {
				t.Error("the data before the old end changed")
			}
			if _, err := d.WriteAt(pattern, d.Size()-4096); err != nil {
				t.Errorf("write at the new end: %v", err)
			}
			if spec.Kind == KindFile {
				if st, err := os.Stat(spec.Path); err != nil || st.Size() != tt.want {
					t.Errorf("file: %v, %v; want %d bytes", st, err, tt.want)
				}
			}
		})
	}
}

func openFileSpec(size int64) func(t *testing.T) (Device, Spec) {
	return func(t *testing.T) (Device, Spec) {
		spec := Spec{Kind: KindFile, Path: filepath.Join(t.TempDir(), "f.img"), Size: size}
		d, err := Open(spec)
		must(t, err)
		return d, spec
	}
}

func openVolatile(kind string, size int64) func(t *testing.T) (Device, Spec) {
	return func(t *testing.T) (Device, Spec) {
		spec := Spec{Kind: kind, Size: size}
		d, err := Open(spec)
		must(t, err)
		return d, spec
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMemoryResizeConcurrent grows a memory device while goroutines write
// and read it (run it with -race): no request fails, the data stays.
func TestMemoryResizeConcurrent(t *testing.T) {
	d, err := NewMemory(1<<20, 512)
	must(t, err)
	defer d.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			buf := bytes.Repeat([]byte{byte(w + 1)}, MemoryChunkSize/2)
			got := make([]byte, len(buf))
			off := int64(w) * 2 * MemoryChunkSize
			for range 200 {
				if _, err := d.WriteAt(buf, off); err != nil {
					errs <- err
					return
				}
				if _, err := d.ReadAt(got, off); err != nil || !bytes.Equal(got, buf) {
					errs <- errors.Join(err, errors.New("read back differs"))
					return
				}
			}
		})
	}
	for i := range 16 {
		if _, err := d.Resize(Spec{Kind: KindMemory, Size: int64(i+2) << 20}, false); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if d.Size() != 17<<20 {
		t.Errorf("Size %d", d.Size())
	}
	if _, err := d.WriteAt(make([]byte, 512), 17<<20-512); err != nil {
		t.Errorf("write at the new end: %v", err)
	}
}

// TestBlockResize grows a loop device's backing file and its capacity
// (losetup --set-capacity): Resize reads the device's size again.
func TestBlockResize(t *testing.T) {
	dev := loopDevice(t, 4<<20, 512)
	out, err := exec.Command("losetup", "--noheadings", "--output", "BACK-FILE", dev).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	img := strings.TrimSpace(string(out))
	spec := Spec{Kind: KindBlock, Path: dev}
	d, err := OpenBlock(spec)
	must(t, err)
	defer d.Close()
	if got, err := d.Resize(Spec{Kind: KindBlock, Path: dev, Size: 8 << 20}, true); err == nil {
		t.Errorf("a size larger than the device: %d, no error", got)
	}
	must(t, os.Truncate(img, 8<<20))
	if out, err := exec.Command("losetup", "--set-capacity", dev).CombinedOutput(); err != nil {
		t.Fatalf("losetup --set-capacity: %v: %s", err, out)
	}
	if d.Size() != 4<<20 {
		t.Fatalf("size changed before Resize: %d", d.Size())
	}
	got, err := d.Resize(spec, false)
	if err != nil || got != 8<<20 || d.Size() != 8<<20 {
		t.Fatalf("Resize = %d, %v; Size %d; want 8 MiB", got, err, d.Size())
	}
	if _, err := d.WriteAt(alignedBuf(4096, 4096), 8<<20-4096); err != nil {
		t.Errorf("write at the new end: %v", err)
	}
	if _, err := d.Resize(Spec{Kind: KindBlock, Path: dev, Size: 4 << 20}, true); !errors.Is(err, ErrShrink) {
		t.Errorf("shrink: %v, want ErrShrink", err)
	}
}
