package target

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// TestIOFileRing runs the I/O commands against a file namespace on the
// io_uring backend (O_DIRECT, and buffered_io), checking the file itself.
func TestIOFileRing(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "buffered"}[buffered], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ns.img")
			dev, err := bdev.OpenFile(bdev.Spec{Kind: bdev.KindFile, Path: path, Size: 1 << 20, BufferedIO: buffered, QueueDepth: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !dev.AsyncReady() {
				dev.Close()
				t.Skip("no io_uring here")
			}
			f := newFixture(t)
			must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
			s := f.session()
			io := s.io

			data := pattern(16<<10, 1)
			expect(t, io.write(2, 100, data), 0, "Write")
			sqe := rwSQE(nvme.IOWrite, 2, 0, 1)
			nvme.RWCommand{SQE: nvme.SQE(sqe[:])}.SetFUA(true)
			fua := pattern(512, 2)
			expect(t, io.run(sqe, fua, fabrics.DirHostToCtrl), 0, "Write FUA")
			expect(t, io.run(newSQE(uint8(nvme.IOFlush), 2), nil, fabrics.DirNone), 0, "Flush")
			expect(t, io.run(newSQE(uint8(nvme.IOFlush), nvme.NSIDAll), nil, fabrics.DirNone), 0, "Flush all")
			expect(t, io.run(rwSQE(nvme.IOVerify, 2, 0, 256), nil, fabrics.DirNone), 0, "Verify")
			expect(t, io.run(rwSQE(nvme.IOCompare, 2, 100, 32), data, fabrics.DirHostToCtrl), 0, "Compare equal")
			expect(t, io.run(rwSQE(nvme.IOWriteZeroes, 2, 104, 4), nil, fabrics.DirNone), 0, "Write Zeroes")
			expect(t, io.run(dsmSQE(2, 1, true), dsmData([2]uint64{110, 4}), fabrics.DirHostToCtrl), 0, "DSM deallocate")
			expect(t, io.run(rwSQE(nvme.IOVerify, 2, 2047, 2), nil, fabrics.DirNone), nvme.StatusLBAOutOfRange, "Verify past the end")

			want := bytes.Clone(data)
			clear(want[4*512 : 8*512])
			clear(want[10*512 : 14*512])
			r := io.read(2, 100, 32)
			expect(t, r, 0, "Read")
			if !bytes.Equal(r.data, want) {
				t.Fatal("read data differs")
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(file[:512], fua) || !bytes.Equal(file[100*512:132*512], want) {
				t.Fatal("file content differs from what the host wrote")
			}
		})
	}
}

// TestIOFileRingAllocs: reads, writes and FUA writes to a file namespace
// on io_uring allocate nothing per command, as on memory.
func TestIOFileRingAllocs(t *testing.T) {
	dev, err := bdev.OpenFile(bdev.Spec{Kind: bdev.KindFile, Path: filepath.Join(t.TempDir(), "ns.img"), Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !dev.AsyncReady() {
		dev.Close()
		t.Skip("no io_uring here")
	}
	f := newFixture(t)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
	s := f.session()
	for _, tc := range []struct {
		name string
		op   nvme.IOOpcode
		fua  bool
	}{{"read", nvme.IORead, false}, {"write", nvme.IOWrite, false}, {"write FUA", nvme.IOWrite, true}} {
		l := newIOLoop(t, s, tc.op, 8)
		l.cmd.SQE = rwSQE(tc.op, 2, 8, 8)
		nvme.RWCommand{SQE: nvme.SQE(l.cmd.SQE[:])}.SetFUA(tc.fua)
		for range 100 {
			l.once(t)
		}
		if n := testing.AllocsPerRun(300, func() { l.once(t) }); n != 0 {
			t.Errorf("%s: %.2f allocations per command, want 0", tc.name, n)
		}
	}
}
