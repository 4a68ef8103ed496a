package bdev

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

func TestBlockDevice(t *testing.T) {
	for _, tt := range []struct {
		name     string
		sector   int
		bs       uint32
		buffered bool
		wantBS   uint32
		wantErr  string
	}{
		{name: "512-byte sectors", sector: 512, wantBS: 512},
		{name: "4 KiB sectors", sector: 4096, wantBS: 4096},
		{name: "4 KiB blocks on 512-byte sectors", sector: 512, bs: 4096, wantBS: 4096},
		{name: "buffered", sector: 512, buffered: true, wantBS: 512},
		{name: "block size below sector size", sector: 4096, bs: 512, wantErr: "smaller than the device's logical block size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const size = 4 << 20
			dev := loopDevice(t, size, tt.sector)
			d, err := OpenBlock(Spec{Kind: KindBlock, Path: dev, BlockSize: tt.bs, BufferedIO: tt.buffered})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("OpenBlock = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Size() != size || d.BlockSize() != tt.wantBS || d.LogicalBlockSize() != uint32(tt.sector) || d.Direct() == tt.buffered {
				t.Fatalf("Size %d BlockSize %d LogicalBlockSize %d Direct %v", d.Size(), d.BlockSize(), d.LogicalBlockSize(), d.Direct())
			}
			// A second exclusive open is refused.
			if d2, err := OpenBlock(Spec{Kind: KindBlock, Path: dev}); err == nil {
				d2.Close()
				t.Error("second OpenBlock of the same device succeeded")
			} else if !strings.Contains(err.Error(), "in use") {
				t.Errorf("second OpenBlock: %v", err)
			}

			aligned := alignedBuf(16384, 4096)
			copy(aligned, pattern(len(aligned), 7))
			shifted := alignedBuf(16384+1, 4096)[1:] // misaligned address
			copy(shifted, pattern(len(shifted), 8))
			if d.useDirect(aligned, 65536) == tt.buffered || d.useDirect(shifted, 65536) || d.useDirect(aligned, 65536+1) {
				t.Errorf("useDirect: aligned %v, misaligned buffer %v, misaligned offset %v",
					d.useDirect(aligned, 65536), d.useDirect(shifted, 65536), d.useDirect(aligned, 65536+1))
			}
			for _, c := range []struct {
				name string
				p    []byte
				off  int64
			}{
				{"aligned (O_DIRECT)", aligned, 65536},
				{"misaligned buffer", shifted, 131072},
				{"misaligned offset", aligned[:1000], 1<<20 + 3},
				{"short tail", aligned[:512], size - 512},
			} {
				if n, err := d.WriteAt(c.p, c.off); err != nil || n != len(c.p) {
					t.Fatalf("%s: WriteAt = %d, %v", c.name, n, err)
				}
				if err := d.Flush(); err != nil {
					t.Fatalf("%s: Flush: %v", c.name, err)
				}
				got := alignedBuf(len(c.p), 4096)
				if n, err := d.ReadAt(got, c.off); err != nil || n != len(c.p) {
					t.Fatalf("%s: ReadAt = %d, %v", c.name, n, err)
				}
				if !bytes.Equal(got, c.p) {
					t.Errorf("%s: read back differs", c.name)
				}
			}
			// The data reached the device: read it through the node.
			raw, err := os.ReadFile(dev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw[65536:65536+16384], aligned) {
				t.Error("O_DIRECT write not visible through the device node")
			}

			for _, op := range []struct {
				name string
				fn   func(off, n int64) error
			}{{"WriteZeroes", d.WriteZeroes}, {"Discard", d.Discard}} {
				if _, err := d.WriteAt(aligned, 0); err != nil {
					t.Fatal(err)
				}
				if err := op.fn(4096, 8192); err != nil {
					t.Fatalf("%s: %v", op.name, err)
				}
				got := alignedBuf(16384, 4096)
				if _, err := d.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				want := bytes.Clone(aligned)
				clear(want[4096 : 4096+8192])
				if !bytes.Equal(got, want) {
					t.Errorf("%s: read back differs (loop devices return zeroes after discard)", op.name)
				}
			}

			if _, err := d.Health(); !errors.Is(err, ErrNotSupported) {
				t.Errorf("Health of a loop device: %v, want ErrNotSupported", err)
			}
			if id, err := d.ID(); err != nil && !errors.Is(err, ErrNotSupported) {
				t.Errorf("ID: %q, %v", id, err)
			}
		})
	}
}

func TestBlockSizeLimit(t *testing.T) {
	dev := loopDevice(t, 1<<20, 512)
	if _, err := OpenBlock(Spec{Kind: KindBlock, Path: dev, Size: 2 << 20}); err == nil || !strings.Contains(err.Error(), "larger than the device") {
		t.Errorf("size above device: %v", err)
	}
	d, err := OpenBlock(Spec{Kind: KindBlock, Path: dev, Size: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Size() != 512<<10 {
		t.Errorf("Size = %d", d.Size())
	}
	if _, err := d.ReadAt(make([]byte, 512), 512<<10); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("read past configured size: %v", err)
	}
}
