package blockdev

import (
	"bytes"
	"encoding/binary"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// The opcodes as the C macros expand them (_IOR/_IOWR('u', nr, struct)),
// computed by hand from include/uapi/asm-generic/ioctl.h.
func TestUblkOpcodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  uint32
		want uint32
	}{
		{"UBLK_U_CMD_GET_DEV_INFO", ublkCmdGetDevInfo, 0x80207502},
		{"UBLK_U_CMD_ADD_DEV", ublkCmdAddDev, 0xc0207504},
		{"UBLK_U_CMD_DEL_DEV", ublkCmdDelDev, 0xc0207505},
		{"UBLK_U_CMD_START_DEV", ublkCmdStartDev, 0xc0207506},
		{"UBLK_U_CMD_STOP_DEV", ublkCmdStopDev, 0xc0207507},
		{"UBLK_U_CMD_SET_PARAMS", ublkCmdSetParams, 0xc0207508},
		{"UBLK_U_CMD_GET_PARAMS", ublkCmdGetParams, 0x80207509},
		{"UBLK_U_IO_FETCH_REQ", ublkIOFetchReq, 0xc0107520},
		{"UBLK_U_IO_COMMIT_AND_FETCH_REQ", ublkIOCommitAndFetch, 0xc0107521},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", tc.name, tc.got, tc.want)
		}
	}
	// The driver checks the type byte and dispatches on the number.
	if byte(ublkCmdStartDev>>8) != 'u' || byte(ublkCmdStartDev) != 6 {
		t.Errorf("START_DEV type/nr %#x", ublkCmdStartDev)
	}
}

func TestUblkCtrlCmdLayout(t *testing.T) {
	b := make([]byte, 80)
	for i := range b {
		b[i] = 0xee
	}
	c := ublkCtrlCmd(b)
	c.set(0x01020304, 0xffff, 0x1112131415161718, 64, 0x2122232425262728)
	want := []byte{
		0x04, 0x03, 0x02, 0x01, 0xff, 0xff, 64, 0, // dev_id, queue_id, len
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, // addr
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21, // data[0]
		0, 0, 0, 0, 0, 0, 0, 0, // dev_path_len, pad, reserved
	}
	if !bytes.Equal(b[:ublkCtrlCmdLen], want) {
		t.Fatalf("ctrl cmd\n got % x\nwant % x", b[:ublkCtrlCmdLen], want)
	}
	if b[ublkCtrlCmdLen] != 0xee {
		t.Fatal("set wrote past the 32-byte structure")
	}
	if c.devID() != 0x01020304 || c.queueID() != 0xffff || c.length() != 64 || c.addr() != 0x1112131415161718 || c.data() != 0x2122232425262728 {
		t.Fatal("ctrl cmd getters disagree with set")
	}
}

func TestUblkDevInfoLayout(t *testing.T) {
	d := make(ublkDevInfo, ublkDevInfoLen)
	d.setNRHWQueues(1)
	d.setQueueDepth(64)
	d.setMaxIOBufBytes(512 << 10)
	d.setDevID(0xffffffff)
	d.setFlags(ublkFCmdIoctlEncode)
	d.setSrvFlags(ublkOwnerMagic<<32 | 4242)
	le := binary.LittleEndian
	if le.Uint16(d[0:]) != 1 || le.Uint16(d[2:]) != 64 || le.Uint32(d[8:]) != 512<<10 ||
		le.Uint32(d[12:]) != 0xffffffff || le.Uint64(d[24:]) != 1<<6 || le.Uint64(d[32:]) != 0x6e766d65<<32|4242 {
		t.Fatalf("dev info % x", []byte(d))
	}
	// What the kernel writes back: state at 4, ublksrv_pid at 16.
	le.PutUint16(d[4:], ublkStateLive)
	le.PutUint32(d[16:], 777)
	le.PutUint32(d[12:], 3)
	if d.state() != ublkStateLive || d.srvPID() != 777 || d.devID() != 3 || d.nrHWQueues() != 1 ||
		d.queueDepth() != 64 || d.maxIOBufBytes() != 512<<10 || d.flags() != 1<<6 || d.srvFlags()>>32 != ublkOwnerMagic {
		t.Fatal("dev info getters")
	}
}

func TestUblkParamsLayout(t *testing.T) {
	le := binary.LittleEndian
	p := ublkBasicParams(12, 1<<21, 1024, false)
	if len(p) != ublkParamsLen || le.Uint32(p[0:]) != 60 {
		t.Fatalf("params length %d, len field %d; want 60 (header 8 + basic 32 + discard 20)", len(p), le.Uint32(p[0:]))
	}
	if types := le.Uint32(p[4:]); types != ublkParamTypeBasic|ublkParamTypeDiscard {
		t.Errorf("types %#x", types)
	}
	if attrs := le.Uint32(p[8:]); attrs != ublkAttrVolatileCache {
		t.Errorf("attrs %#x", attrs)
	}
	if p[12] != 12 || p[13] != 12 || p[14] != 12 || p[15] != 12 {
		t.Errorf("shifts % x", []byte(p[12:16]))
	}
	if le.Uint32(p[16:]) != 1024 || le.Uint32(p[20:]) != 0 || le.Uint64(p[24:]) != 1<<21 || le.Uint64(p[32:]) != 0 {
		t.Errorf("basic % x", []byte(p[8:40]))
	}
	// The driver wants a non-zero granularity and exactly one segment.
	if le.Uint32(p[40:]) != 0 || le.Uint32(p[44:]) != 4096 || le.Uint32(p[48:]) != ublkMaxDiscardSectors ||
		le.Uint32(p[52:]) != ublkMaxDiscardSectors || le.Uint16(p[56:]) != 1 || le.Uint16(p[58:]) != 0 {
		t.Errorf("discard % x", []byte(p[40:60]))
	}
	ro := ublkBasicParams(9, 100, 1024, true)
	if le.Uint32(ro[4:]) != ublkParamTypeBasic || le.Uint32(ro[8:])&ublkAttrReadOnly == 0 || ro[12] != 9 {
		t.Errorf("read-only params % x", []byte(ro))
	}
}

func TestUblkIODescAndCmd(t *testing.T) {
	d := ublkIODesc{
		0x01, 0x80, 0, 0, // op WRITE, flags FNOUNMAP (bit 15)
		8, 0, 0, 0, // nr_sectors
		0x10, 0, 0, 0, 0, 0, 0, 0, // start_sector
		0, 0x10, 0, 0, 0, 0, 0, 0, // addr
	}
	if d.opFlags()&0xff != ublkIOOpWrite || d.opFlags()&ublkIOFNoUnmap == 0 || d.nrSectors() != 8 || d.startSector() != 16 || d.addr() != 0x1000 {
		t.Fatalf("io desc %#x %d %d %#x", d.opFlags(), d.nrSectors(), d.startSector(), d.addr())
	}
	c := make(ublkIOCmd, ublkIOCmdLen)
	c.set(0, 63, -5, 0x7f0000001000)
	want := []byte{0, 0, 63, 0, 0xfb, 0xff, 0xff, 0xff, 0x00, 0x10, 0, 0, 0, 0x7f, 0, 0}
	if !bytes.Equal(c, want) || c.qid() != 0 || c.tag() != 63 || c.result() != -5 || c.bufAddr() != 0x7f0000001000 {
		t.Fatalf("io cmd % x", []byte(c))
	}
}

func TestUblkServe(t *testing.T) {
	const size = 1 << 20
	dev := zeroingDevice{newMemDevice(size, 4096)}
	e := testEngine(dev, true)
	buf := make([]byte, 64<<10)

	fill(buf[:8192], 7)
	if res := ublkServe(e, ublkReq{op: ublkIOOpWrite, sectors: 16, start: 8}, buf); res != 8192 {
		t.Fatalf("write: %d", res)
	}
	if !bytes.Equal(dev.snapshot(4096, 8192), buf[:8192]) {
		t.Fatal("write did not reach the device at sector 8")
	}
	got := make([]byte, 64<<10)
	if res := ublkServe(e, ublkReq{op: ublkIOOpRead, sectors: 16, start: 8}, got); res != 8192 || !bytes.Equal(got[:8192], buf[:8192]) {
		t.Fatalf("read back: %d", res)
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpFlush}, nil); res != 0 || dev.flushes.Load() != 1 {
		t.Fatalf("flush: %d, %d flushes", res, dev.flushes.Load())
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpWrite, flags: ublkIOFFUA, sectors: 8, start: 0}, buf); res != 4096 || dev.flushes.Load() != 2 {
		t.Fatalf("FUA write: %d, %d flushes", res, dev.flushes.Load())
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpDiscard, sectors: 8, start: 8}, nil); res != 0 || dev.trims.Load() != 1 {
		t.Fatalf("discard: %d, %d trims", res, dev.trims.Load())
	}
	// Write zeroes may deallocate (a Trim reading back zeroes) unless NOUNMAP.
	if res := ublkServe(e, ublkReq{op: ublkIOOpWriteZeroes, sectors: 8, start: 16}, nil); res != 0 || dev.trims.Load() != 2 {
		t.Fatalf("write zeroes: %d, %d trims", res, dev.trims.Load())
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpWriteZeroes, flags: ublkIOFNoUnmap, sectors: 8, start: 0}, nil); res != 0 || dev.zeroes.Load() != 1 || dev.trims.Load() != 2 {
		t.Fatalf("write zeroes NOUNMAP: %d, %d zeroes, %d trims", res, dev.zeroes.Load(), dev.trims.Load())
	}
	if !bytes.Equal(dev.snapshot(0, 3*4096), make([]byte, 3*4096)) {
		t.Fatal("discarded and zeroed blocks do not read back as zeroes")
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpWriteSame, sectors: 8}, buf); res != -int32(syscall.EOPNOTSUPP) {
		t.Fatalf("WRITE_SAME: %d, want -EOPNOTSUPP", res)
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpRead, sectors: 16, start: size/512 - 8}, buf); res != -int32(syscall.EINVAL) {
		t.Fatalf("read past the end: %d, want -EINVAL", res)
	}
	if res := ublkServe(e, ublkReq{op: ublkIOOpRead, sectors: 256, start: 0}, buf[:4096]); res != -int32(syscall.EINVAL) {
		t.Fatalf("read larger than the buffer: %d, want -EINVAL", res)
	}
	ro, err := newConfig(dev, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if res := ublkServe(newEngine(dev, ro), ublkReq{op: ublkIOOpWrite, sectors: 8}, buf); res != -int32(syscall.EROFS) {
		t.Fatalf("write to a read-only mapping: %d, want -EROFS", res)
	}
}

// gateDevice blocks reads until want of them are in flight at once.
type gateDevice struct {
	*memDevice
	want    int
	mu      sync.Mutex
	in, max int
	all     chan struct{}
}

func (d *gateDevice) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	d.in++
	d.max = max(d.max, d.in)
	if d.in == d.want {
		close(d.all)
	}
	d.mu.Unlock()
	select {
	case <-d.all:
	case <-time.After(10 * time.Second):
	}
	d.mu.Lock()
	d.in--
	d.mu.Unlock()
	return d.memDevice.ReadAt(p, off)
}

// TestUblkQueueWorkers runs the queue's worker pool and completion list
// without the driver: fetched tags reach the Device concurrently, and every
// result comes back to the ring owner with an eventfd wake-up.
func TestUblkQueueWorkers(t *testing.T) {
	const depth = 8
	dev := &gateDevice{memDevice: newMemDevice(1<<20, 512), want: depth, all: make(chan struct{})}
	fill(dev.data, 3)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	q := &ublkQueue{e: testEngine(dev, false), log: hclog.NewNullLogger(), depth: depth, maxIO: 4096, efd: efd,
		bufs: make([]byte, depth*4096), reqs: make([]ublkReq, depth), work: make(chan uint16, depth),
		done: make([]uint16, 0, depth), res: make([]int32, depth)}
	q.workers.Add(depth)
	for i := 0; i < depth; i++ {
		go q.worker()
	}
	for tag := uint16(0); tag < depth; tag++ {
		q.reqs[tag] = ublkReq{op: ublkIOOpRead, sectors: uint32(tag) + 1, start: uint64(tag) * 8}
		q.work <- tag
	}
	// Wait for the completions as the ring owner would: eventfd, then the list.
	seen := map[uint16]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < depth && time.Now().Before(deadline) {
		var v [8]byte
		pfd := []unix.PollFd{{Fd: int32(efd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 1000); n == 1 {
			if _, err := unix.Read(efd, v[:]); err != nil {
				t.Fatal(err)
			}
		}
		q.mu.Lock()
		for _, tag := range q.done {
			if seen[tag] {
				t.Errorf("tag %d completed twice", tag)
			}
			seen[tag] = true
			if want := int32(tag+1) * 512; q.res[tag] != want {
				t.Errorf("tag %d: result %d, want %d", tag, q.res[tag], want)
			}
			if !bytes.Equal(q.buf(tag)[:(tag+1)*512], dev.snapshot(int64(tag)*4096, int64(tag+1)*512)) {
				t.Errorf("tag %d: data differs", tag)
			}
		}
		q.done = q.done[:0]
		q.mu.Unlock()
	}
	close(q.work)
	q.workers.Wait()
	if len(seen) != depth {
		t.Fatalf("%d of %d tags completed", len(seen), depth)
	}
	if dev.max != depth {
		t.Fatalf("at most %d reads in flight, want %d (the queue depth)", dev.max, depth)
	}
}

// TestUblkServeAllocs: serving aligned reads, writes and flushes allocates
// nothing per request.
func TestUblkServeAllocs(t *testing.T) {
	dev := newMemDevice(1<<20, 512)
	e := testEngine(dev, false)
	buf := make([]byte, 64<<10)
	reqs := []ublkReq{
		{op: ublkIOOpWrite, sectors: 128, start: 256},
		{op: ublkIOOpRead, sectors: 128, start: 256},
		{op: ublkIOOpFlush},
	}
	for _, r := range reqs {
		if n := testing.AllocsPerRun(50, func() {
			if res := ublkServe(e, r, buf); res < 0 {
				t.Fatalf("op %d: %d", r.op, res)
			}
		}); n != 0 {
			t.Errorf("op %d: %.1f allocations per request, want 0", r.op, n)
		}
	}
}
