package target

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func dsmData(ranges ...[2]uint64) []byte {
	b := make([]byte, len(ranges)*nvme.DSMRangeSize)
	for i, rg := range ranges {
		d := nvme.DSMRange(b[i*nvme.DSMRangeSize:])
		d.SetSLBA(rg[0])
		d.SetLength(uint32(rg[1]))
	}
	return b
}

func dsmSQE(nsid uint32, n int, ad bool) [64]byte {
	sqe := newSQE(uint8(nvme.IODatasetManagement), nsid)
	c := nvme.DSMCommand{SQE: nvme.SQE(sqe[:])}
	c.SetNR(uint8(n - 1))
	c.SetAD(ad)
	return sqe
}

func TestIO(t *testing.T) {
	f := newFixture(t)
	s := f.session()
	io := s.io

	// Write and read back.
	data := pattern(16<<10, 1)
	expect(t, io.write(1, 100, data), 0, "Write")
	r := io.read(1, 100, 32)
	expect(t, r, 0, "Read")
	if !bytes.Equal(r.data, data) {
		t.Fatal("read data differs from written data")
	}
	got := make([]byte, len(data))
	f.mem.ReadAt(got, 100*512)
	if !bytes.Equal(got, data) {
		t.Fatal("backend data differs from written data")
	}

	// FUA, Flush, Flush of every namespace.
	sqe := rwSQE(nvme.IOWrite, 1, 0, 1)
	nvme.RWCommand{SQE: nvme.SQE(sqe[:])}.SetFUA(true)
	expect(t, io.run(sqe, pattern(512, 2), fabrics.DirHostToCtrl), 0, "Write FUA")
	expect(t, io.run(newSQE(uint8(nvme.IOFlush), 1), nil, fabrics.DirNone), 0, "Flush")
	expect(t, io.run(newSQE(uint8(nvme.IOFlush), nvme.NSIDAll), nil, fabrics.DirNone), 0, "Flush all")

	// Compare.
	expect(t, io.run(rwSQE(nvme.IOCompare, 1, 100, 32), data, fabrics.DirHostToCtrl), 0, "Compare equal")
	bad := bytes.Clone(data)
	bad[1000] ^= 1
	r = io.run(rwSQE(nvme.IOCompare, 1, 100, 32), bad, fabrics.DirHostToCtrl)
	expect(t, r, nvme.StatusCompareFailure, "Compare different")

	// Write Zeroes, with and without DEAC.
	expect(t, io.run(rwSQE(nvme.IOWriteZeroes, 1, 104, 4), nil, fabrics.DirNone), 0, "Write Zeroes")
	sqe = rwSQE(nvme.IOWriteZeroes, 1, 120, 4)
	nvme.RWCommand{SQE: nvme.SQE(sqe[:])}.SetDEAC(true)
	expect(t, io.run(sqe, nil, fabrics.DirNone), 0, "Write Zeroes DEAC")
	r = io.read(1, 100, 32)
	want := bytes.Clone(data)
	clear(want[4*512 : 8*512])
	clear(want[20*512 : 24*512])
	if !bytes.Equal(r.data, want) {
		t.Fatal("data after Write Zeroes")
	}

	// Dataset Management: deallocate two ranges; hints alone do nothing.
	expect(t, io.run(dsmSQE(1, 1, false), dsmData([2]uint64{100, 32}), fabrics.DirHostToCtrl), 0, "DSM without AD")
	if r = io.read(1, 100, 32); !bytes.Equal(r.data, want) {
		t.Fatal("DSM without AD changed data")
	}
	expect(t, io.run(dsmSQE(1, 2, true), dsmData([2]uint64{100, 2}, [2]uint64{110, 4}), fabrics.DirHostToCtrl), 0, "DSM deallocate")
	r = io.read(1, 100, 32)
	clear(want[0:1024])
	clear(want[10*512 : 14*512])
	if !bytes.Equal(r.data, want) {
		t.Fatal("data after deallocate")
	}
	// The range list in a 4 KiB buffer, as Linux's hosts send it over
	// TCP: the ranges NR names count, the rest is ignored.
	page := make([]byte, 4096)
	copy(page, dsmData([2]uint64{120, 2}))
	copy(page[nvme.DSMRangeSize:], dsmData([2]uint64{0, 1})) // beyond NR: not deallocated
	expect(t, io.run(dsmSQE(1, 1, true), page, fabrics.DirHostToCtrl), 0, "DSM with its ranges in a page")
	r = io.read(1, 100, 32)
	clear(want[20*512 : 22*512])
	if !bytes.Equal(r.data, want) {
		t.Fatal("data after deallocating from a page of ranges")
	}

	// Last block of the namespace.
	last := uint64(testNSSize/512 - 1)
	expect(t, io.write(1, last, pattern(512, 3)), 0, "Write last block")

	// Writes through a disabled write cache still land.
	expect(t, s.admin.setFeature(nvme.FeatVolatileWriteCache, 0), 0, "VWC off")
	expect(t, io.write(1, 7, pattern(512, 4)), 0, "Write with VWC off")
}

func TestIOErrors(t *testing.T) {
	f := newFixture(t)
	ro, _ := bdev.NewMemory(1<<20, 512)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: ro, ReadOnly: true}))
	s := f.session()
	nblocks := uint64(testNSSize / 512)

	tests := []struct {
		name string
		sqe  [64]byte
		data []byte
		dir  fabrics.DataDirection
		want nvme.Status
	}{
		{"unknown NSID", rwSQE(nvme.IORead, 9, 0, 1), make([]byte, 512), fabrics.DirCtrlToHost, nvme.StatusInvalidNamespaceOrFormat},
		{"NSID 0", rwSQE(nvme.IORead, 0, 0, 1), make([]byte, 512), fabrics.DirCtrlToHost, nvme.StatusInvalidNamespaceOrFormat},
		{"NSID FFFFFFFFh read", rwSQE(nvme.IORead, nvme.NSIDAll, 0, 1), make([]byte, 512), fabrics.DirCtrlToHost, nvme.StatusInvalidNamespaceOrFormat},
		{"read past the end", rwSQE(nvme.IORead, 1, nblocks-1, 2), make([]byte, 1024), fabrics.DirCtrlToHost, nvme.StatusLBAOutOfRange},
		{"write past the end", rwSQE(nvme.IOWrite, 1, nblocks, 1), make([]byte, 512), fabrics.DirHostToCtrl, nvme.StatusLBAOutOfRange},
		{"SLBA near 2^64", rwSQE(nvme.IORead, 1, ^uint64(0), 2), make([]byte, 1024), fabrics.DirCtrlToHost, nvme.StatusLBAOutOfRange},
		{"write zeroes past the end", rwSQE(nvme.IOWriteZeroes, 1, nblocks-2, 4), nil, fabrics.DirNone, nvme.StatusLBAOutOfRange},
		{"SGL shorter than NLB", rwSQE(nvme.IORead, 1, 0, 8), make([]byte, 512), fabrics.DirCtrlToHost, nvme.StatusDataSGLLengthInvalid},
		{"SGL longer than NLB", rwSQE(nvme.IOWrite, 1, 0, 1), make([]byte, 1024), fabrics.DirHostToCtrl, nvme.StatusDataSGLLengthInvalid},
		{"data on write zeroes", rwSQE(nvme.IOWriteZeroes, 1, 0, 1), make([]byte, 512), fabrics.DirHostToCtrl, nvme.StatusDataSGLLengthInvalid},
		{"data on flush", newSQE(uint8(nvme.IOFlush), 1), make([]byte, 512), fabrics.DirHostToCtrl, nvme.StatusDataSGLLengthInvalid},
		{"DSM range list short", dsmSQE(1, 2, true), dsmData([2]uint64{0, 1}), fabrics.DirHostToCtrl, nvme.StatusDataSGLLengthInvalid},
		{"DSM range past the end", dsmSQE(1, 1, true), dsmData([2]uint64{nblocks - 1, 2}), fabrics.DirHostToCtrl, nvme.StatusLBAOutOfRange},
		{"transfer above MDTS", rwSQE(nvme.IORead, 1, 0, 4096), nil, fabrics.DirCtrlToHost, nvme.StatusInvalidField},
		{"unknown opcode", newSQE(0x7e, 1), nil, fabrics.DirNone, nvme.StatusInvalidOpcode},
		{"write uncorrectable", rwSQE(nvme.IOWriteUncorrectable, 1, 0, 1), nil, fabrics.DirNone, nvme.StatusInvalidOpcode},
		{"write to read-only", rwSQE(nvme.IOWrite, 2, 0, 1), make([]byte, 512), fabrics.DirHostToCtrl, nvme.StatusNamespaceWriteProtected},
		{"Property Get on an I/O queue", [64]byte(fabrics.NewCommand(fabrics.FCTypePropertyGet)), nil, fabrics.DirNone, nvme.StatusInvalidOpcode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.io.run(tc.sqe, tc.data, tc.dir)
			expect(t, r, tc.want, tc.name)
			if tc.want != nvme.StatusNamespaceWriteProtected && !r.cqe.DNR() {
				t.Error("DNR not set")
			}
		})
	}
	expect(t, s.io.read(2, 0, 1), 0, "read of a read-only namespace")
	if r := s.admin.getLog(nvme.LIDError, 0, 64, 0, false); nvme.ErrorLogEntry(r.data).SQID() != 1 {
		t.Errorf("newest error entry SQID %d, want 1", nvme.ErrorLogEntry(r.data).SQID())
	}

	// I/O after the controller is disabled.
	expect(t, s.admin.propSet(fabrics.PropCC, 0), 0, "disable")
	r := s.io.wait(s.io.submit(rwSQE(nvme.IORead, 1, 0, 1), make([]byte, 512), fabrics.DirCtrlToHost))
	if r.err == nil {
		expect(t, r, nvme.StatusCommandSequenceError, "I/O on a disabled controller")
	}
}

// faultyDevice fails the operations selected by its flags.
type faultyDevice struct {
	bdev.Device
	failRead, failWrite atomic.Bool
	err                 error
}

func (d *faultyDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.failRead.Load() {
		return 0, fmt.Errorf("read at %d: %w", off, d.err)
	}
	return d.Device.ReadAt(p, off)
}

func (d *faultyDevice) WriteAt(p []byte, off int64) (int, error) {
	if d.failWrite.Load() {
		return 0, fmt.Errorf("write at %d: %w", off, d.err)
	}
	return d.Device.WriteAt(p, off)
}

func TestBackendErrors(t *testing.T) {
	tests := []struct {
		err             error
		read, write     nvme.Status
		countsAsMediaEr bool
	}{
		{syscall.EIO, nvme.StatusUnrecoveredReadError, nvme.StatusWriteFault, true},
		{syscall.ENOSPC, nvme.StatusCapacityExceeded, nvme.StatusCapacityExceeded, false},
		{bdev.ErrClosed, nvme.StatusInternalError, nvme.StatusInternalError, false},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			f := newFixture(t)
			mem, _ := bdev.NewMemory(1<<20, 512)
			dev := &faultyDevice{Device: mem, err: tc.err}
			must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
			s := f.session()
			dev.failRead.Store(true)
			dev.failWrite.Store(true)
			r := s.io.read(2, 3, 1)
			expect(t, r, tc.read, "Read")
			if !r.cqe.DNR() {
				t.Error("DNR not set")
			}
			expect(t, s.io.write(2, 3, make([]byte, 512)), tc.write, "Write")
			expect(t, s.io.run(rwSQE(nvme.IOCompare, 2, 0, 1), make([]byte, 512), fabrics.DirHostToCtrl), tc.read, "Compare")
			e := nvme.ErrorLogEntry(s.admin.getLog(nvme.LIDError, 0, 64, 0, false).data)
			if e.NSID() != 2 || e.LBA() != 0 || e.Status() != tc.read {
				t.Errorf("error entry nsid %d lba %d status %v", e.NSID(), e.LBA(), e.Status())
			}
			media := nvme.SMARTLog(s.admin.getLog(nvme.LIDSMART, 2, 512, 0, false).data).MediaErrors().Lo
			if (media == 3) != tc.countsAsMediaEr {
				t.Errorf("media errors %d", media)
			}
		})
	}
}

// TestNamespaceRemovalDuringIO removes a namespace while I/O runs: every
// command completes, the device is closed once they are done.
func TestNamespaceRemovalDuringIO(t *testing.T) {
	f := newFixture(t)
	mem, _ := bdev.NewMemory(1<<20, 512)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: mem}))
	s := f.session()
	var chs []<-chan result
	for i := range 32 {
		chs = append(chs, s.io.submit(rwSQE(nvme.IOWrite, 2, uint64(i), 1), make([]byte, 512), fabrics.DirHostToCtrl))
	}
	must(t, f.tgt.RemoveNamespace(testSubNQN, 2))
	for _, ch := range chs {
		r := s.io.wait(ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if st := r.status(); st != 0 && st != nvme.StatusInvalidNamespaceOrFormat {
			t.Fatalf("status %v", st)
		}
	}
	if _, err := mem.ReadAt(make([]byte, 512), 0); err == nil {
		t.Fatal("device still open after RemoveNamespace")
	}
	expect(t, s.io.read(2, 0, 1), nvme.StatusInvalidNamespaceOrFormat, "read of a removed namespace")
}

// healthyDevice reports SMART data of its own.
type healthyDevice struct {
	bdev.Device
	h bdev.Health
}

func (d *healthyDevice) Health() (bdev.Health, error) { return d.h, nil }

func TestSMARTFromBackendHealth(t *testing.T) {
	f := newFixture(t)
	mem, _ := bdev.NewMemory(1<<20, 512)
	dev := &healthyDevice{Device: mem, h: bdev.Health{CriticalWarning: nvme.SMARTWarningSpare, TemperatureKelvin: 320,
		AvailableSpare: 5, AvailableSpareThreshold: 10, PercentageUsed: 42, PowerCycles: 17, PowerOnHours: 9000,
		UnsafeShutdowns: 3, MediaErrors: 2}}
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 2, Device: dev}))
	s := f.session()
	expect(t, s.io.write(2, 0, make([]byte, 4096)), 0, "Write")
	for _, nsid := range []uint32{2, nvme.NSIDAll} {
		r := s.admin.getLog(nvme.LIDSMART, nsid, 512, 0, false)
		expect(t, r, 0, "SMART")
		l := nvme.SMARTLog(r.data)
		if l.CriticalWarning() != nvme.SMARTWarningSpare || l.CompositeTemperature() != 320 || l.AvailableSpare() != 5 ||
			l.PercentageUsed() != 42 || l.PowerCycles().Lo != 17 || l.PowerOnHours().Lo != 9000 ||
			l.UnsafeShutdowns().Lo != 3 || l.MediaErrors().Lo != 2 || l.HostWriteCommands().Lo != 1 {
			t.Errorf("NSID %#x: warning %d temp %d spare %d used %d cycles %v hours %v unsafe %v media %v writes %v", nsid,
				l.CriticalWarning(), l.CompositeTemperature(), l.AvailableSpare(), l.PercentageUsed(), l.PowerCycles(),
				l.PowerOnHours(), l.UnsafeShutdowns(), l.MediaErrors(), l.HostWriteCommands())
		}
	}
}
