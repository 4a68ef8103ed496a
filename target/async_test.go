package target

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// asyncDevice is a memory device with bdev.Async methods that complete on
// another goroutine, as librbd's callbacks do. It counts the calls of each
// kind and fails the operations of failOp (after failAfter successes).
type asyncDevice struct {
	bdev.Device
	mu        sync.Mutex
	calls     map[string]int
	failOp    string
	failAfter int
}

func (d *asyncDevice) async(op string, c bdev.Completion, run func() error) {
	d.mu.Lock()
	d.calls[op]++
	fail := op == d.failOp && d.calls[op] > d.failAfter
	d.mu.Unlock()
	go func() {
		if fail {
			c.Complete(fmt.Errorf("async %s: %w", op, syscall.EIO))
			return
		}
		c.Complete(run())
	}()
}

func (d *asyncDevice) count(op string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[op]
}

func (d *asyncDevice) ReadAsync(p []byte, off int64, c bdev.Completion) {
	d.async("read", c, func() error { _, err := d.ReadAt(p, off); return err })
}

func (d *asyncDevice) WriteAsync(p []byte, off int64, c bdev.Completion) {
	d.async("write", c, func() error { _, err := d.WriteAt(p, off); return err })
}

func (d *asyncDevice) FlushAsync(c bdev.Completion) { d.async("flush", c, d.Flush) }

func (d *asyncDevice) WriteZeroesAsync(off, n int64, c bdev.Completion) {
	d.async("write zeroes", c, func() error { return d.WriteZeroes(off, n) })
}

func (d *asyncDevice) DiscardAsync(off, n int64, c bdev.Completion) {
	d.async("discard", c, func() error { return d.Discard(off, n) })
}

// TestAsyncBackend runs the I/O commands on a bdev.Async backend: the
// common ones go through the asynchronous calls (a FUA write chains a
// flush, Dataset Management one discard per non-empty range), Compare
// and the Flush of every namespace through the blocking ones, and errors
// map to the same statuses as on the workers (the DSM error names the
// failing range's LBA).
func TestAsyncBackend(t *testing.T) {
	tests := []struct {
		name      string
		failOp    string
		failAfter int
	}{
		{"ok", "", 0},
		{"write fails", "write", 0},
		{"second discard fails", "discard", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			mem, _ := bdev.NewMemory(1<<20, 512)
			dev := &asyncDevice{Device: mem, calls: map[string]int{}, failOp: tc.failOp, failAfter: tc.failAfter}
			must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
			s := f.session()
			data := pattern(8192, 7)
			if tc.failOp == "write" {
				r := s.io.write(2, 8, data)
				expect(t, r, nvme.StatusWriteFault, "Write")
				e := nvme.ErrorLogEntry(s.admin.getLog(nvme.LIDError, 0, 64, 0, false).data)
				if e.NSID() != 2 || e.LBA() != 8 {
					t.Errorf("error entry nsid %d lba %d", e.NSID(), e.LBA())
				}
				return
			}
			expect(t, s.io.write(2, 8, data), 0, "Write")
			if r := s.io.read(2, 8, 16); r.status() != 0 || !bytes.Equal(r.data, data) {
				t.Fatalf("Read: status %v, data equal %v", r.status(), bytes.Equal(r.data, data))
			}
			sqe := rwSQE(nvme.IOWrite, 2, 0, 1)
			nvme.RWCommand{SQE: nvme.SQE(sqe[:])}.SetFUA(true)
			expect(t, s.io.run(sqe, pattern(512, 8), fabrics.DirHostToCtrl), 0, "Write FUA")
			expect(t, s.io.run(rwSQE(nvme.IOWriteZeroes, 2, 9, 2), nil, fabrics.DirNone), 0, "Write Zeroes")
			expect(t, s.io.run(newSQE(uint8(nvme.IOFlush), 2), nil, fabrics.DirNone), 0, "Flush")
			want := bytes.Clone(data)
			clear(want[512 : 3*512])
			expect(t, s.io.run(rwSQE(nvme.IOCompare, 2, 8, 16), want, fabrics.DirHostToCtrl), 0, "Compare")
			expect(t, s.io.run(newSQE(uint8(nvme.IOFlush), nvme.NSIDAll), nil, fabrics.DirNone), 0, "Flush all")
			if got := map[string]int{"read": dev.count("read"), "write": dev.count("write"), "flush": dev.count("flush"), "write zeroes": dev.count("write zeroes")}; got["read"] != 1 || got["write"] != 2 || got["flush"] != 2 || got["write zeroes"] != 1 {
				t.Errorf("async calls %v, want 1 read, 2 writes, 2 flushes (FUA, Flush), 1 write zeroes", got)
			}
			r := s.io.run(dsmSQE(2, 3, true), dsmData([2]uint64{16, 4}, [2]uint64{30, 0}, [2]uint64{40, 8}), fabrics.DirHostToCtrl)
			if tc.failOp == "discard" {
				expect(t, r, nvme.StatusWriteFault, "DSM")
				if e := nvme.ErrorLogEntry(s.admin.getLog(nvme.LIDError, 0, 64, 0, false).data); e.LBA() != 40 {
					t.Errorf("DSM error LBA %d, want 40 (the failing range)", e.LBA())
				}
			} else {
				expect(t, r, 0, "DSM")
			}
			if n := dev.count("discard"); n != 2 {
				t.Errorf("%d discards, want 2 (the empty range skipped)", n)
			}
		})
	}
}
