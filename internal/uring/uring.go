// Package uring is a minimal io_uring (Linux 5.1+) for the few operations
// this module needs: IORING_OP_URING_CMD (ublk's control and I/O commands,
// which need 128-byte SQEs), positioned READ and WRITE (with RWF_* flags),
// FSYNC, FALLOCATE (Linux 5.6) and NOP. No cgo.
//
// A Ring is not safe for concurrent use, with one exception: one goroutine
// may Wait for completions and consume them (PeekCQE, Advance) while
// another, holding whatever lock serialises submitters, gets SQEs and
// Submits with wait 0. For ublk the owner must also stay on one OS thread
// (runtime.LockOSThread), since the driver ties a queue to the thread that
// submitted its commands.
package uring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Setup flags (IORING_SETUP_*).
const (
	// SetupSQE128 makes every SQE 128 bytes, with an 80-byte command area
	// for IORING_OP_URING_CMD (IORING_SETUP_SQE128, Linux 5.19).
	SetupSQE128 = 1 << 10
)

// Opcodes (enum io_uring_op).
const (
	OpNop       = 0
	OpFsync     = 3
	OpFallocate = 17
	OpRead      = 22
	OpWrite     = 23
	OpURingCmd  = 46
)

// FsyncDatasync makes an OpFsync an fdatasync (IORING_FSYNC_DATASYNC).
const FsyncDatasync = 1

// RWFDsync is RWF_DSYNC: a write with it is durable when it completes, as
// if the file were opened O_DSYNC (a FUA write on a block device).
const RWFDsync = 0x2

// io_uring_enter flags.
const enterGetEvents = 1 // IORING_ENTER_GETEVENTS

// mmap offsets of the rings and the SQE array.
const (
	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000
)

// ParamsLen is sizeof(struct io_uring_params).
const ParamsLen = 120

// Params is struct io_uring_params as io_uring_setup fills it in:
// sq_entries(4) cq_entries(4) flags(4) sq_thread_cpu(4) sq_thread_idle(4)
// features(4) wq_fd(4) resv(12), then io_sqring_offsets at 40 and
// io_cqring_offsets at 80 (40 bytes each). Native byte order.
type Params []byte

// Field offsets in Params.
const (
	parSQEntries = 0
	parCQEntries = 4
	parFlags     = 8
	parFeatures  = 20
	parSQOff     = 40 // head tail ring_mask ring_entries flags dropped array resv1 user_addr(8)
	parCQOff     = 80 // head tail ring_mask ring_entries overflow cqes flags resv1 user_addr(8)
)

func (p Params) u32(off int) uint32 { return binary.NativeEndian.Uint32(p[off:]) }

// SQEntries is the number of SQEs the kernel allocated.
func (p Params) SQEntries() uint32 { return p.u32(parSQEntries) }

// CQEntries is the number of CQEs the kernel allocated.
func (p Params) CQEntries() uint32 { return p.u32(parCQEntries) }

// Features are the IORING_FEAT_* bits.
func (p Params) Features() uint32 { return p.u32(parFeatures) }

// SQOff returns io_sqring_offsets field i (0 head, 1 tail, 2 ring_mask,
// 3 ring_entries, 4 flags, 5 dropped, 6 array).
func (p Params) SQOff(i int) uint32 { return p.u32(parSQOff + 4*i) }

// CQOff returns io_cqring_offsets field i (0 head, 1 tail, 2 ring_mask,
// 3 ring_entries, 4 overflow, 5 cqes, 6 flags).
func (p Params) CQOff(i int) uint32 { return p.u32(parCQOff + 4*i) }

// SQE field offsets (struct io_uring_sqe).
const (
	sqeOpcode   = 0
	sqeFlags    = 1
	sqeFD       = 4
	sqeOff      = 8 // also cmd_op (u32) for URING_CMD
	sqeAddr     = 16
	sqeLen      = 24
	sqeOpFlags  = 28
	sqeUserData = 32
	// SQECmdOffset is where a URING_CMD's command bytes start.
	SQECmdOffset = 48
)

// SQE is one submission queue entry (64 or 128 bytes) inside the ring.
type SQE []byte

// PrepURingCmd makes e an IORING_OP_URING_CMD for fd with the driver's
// command op; the command itself goes into Cmd().
func (e SQE) PrepURingCmd(fd int, cmdOp uint32, userData uint64) {
	clear(e)
	e[sqeOpcode] = OpURingCmd
	binary.NativeEndian.PutUint32(e[sqeFD:], uint32(int32(fd)))
	binary.NativeEndian.PutUint32(e[sqeOff:], cmdOp)
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// PrepRead makes e an IORING_OP_READ of n bytes at addr from fd (offset
// -1: the file position, as read(2)).
func (e SQE) PrepRead(fd int, addr uintptr, n uint32, userData uint64) {
	clear(e)
	e[sqeOpcode] = OpRead
	binary.NativeEndian.PutUint32(e[sqeFD:], uint32(int32(fd)))
	binary.NativeEndian.PutUint64(e[sqeOff:], ^uint64(0))
	binary.NativeEndian.PutUint64(e[sqeAddr:], uint64(addr))
	binary.NativeEndian.PutUint32(e[sqeLen:], n)
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// PrepReadAt makes e an IORING_OP_READ of n bytes at file offset off into
// addr, with the RWF_* flags rwFlags.
func (e SQE) PrepReadAt(fd int, addr uintptr, n uint32, off int64, rwFlags uint32, userData uint64) {
	e.prepRW(OpRead, fd, addr, n, off, rwFlags, userData)
}

// PrepWriteAt makes e an IORING_OP_WRITE of n bytes from addr at file
// offset off, with the RWF_* flags rwFlags (RWFDsync for a durable write).
func (e SQE) PrepWriteAt(fd int, addr uintptr, n uint32, off int64, rwFlags uint32, userData uint64) {
	e.prepRW(OpWrite, fd, addr, n, off, rwFlags, userData)
}

func (e SQE) prepRW(op byte, fd int, addr uintptr, n uint32, off int64, rwFlags uint32, userData uint64) {
	clear(e)
	e[sqeOpcode] = op
	binary.NativeEndian.PutUint32(e[sqeFD:], uint32(int32(fd)))
	binary.NativeEndian.PutUint64(e[sqeOff:], uint64(off))
	binary.NativeEndian.PutUint64(e[sqeAddr:], uint64(addr))
	binary.NativeEndian.PutUint32(e[sqeLen:], n)
	binary.NativeEndian.PutUint32(e[sqeOpFlags:], rwFlags)
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// PrepFsync makes e an IORING_OP_FSYNC of the whole file (flags
// FsyncDatasync: fdatasync).
func (e SQE) PrepFsync(fd int, flags uint32, userData uint64) {
	clear(e)
	e[sqeOpcode] = OpFsync
	binary.NativeEndian.PutUint32(e[sqeFD:], uint32(int32(fd)))
	binary.NativeEndian.PutUint32(e[sqeOpFlags:], flags)
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// PrepFallocate makes e an IORING_OP_FALLOCATE of n bytes at off with the
// FALLOC_FL_* mode (the kernel takes the length in the address field and
// the mode in the length field).
func (e SQE) PrepFallocate(fd int, mode uint32, off, n int64, userData uint64) {
	clear(e)
	e[sqeOpcode] = OpFallocate
	binary.NativeEndian.PutUint32(e[sqeFD:], uint32(int32(fd)))
	binary.NativeEndian.PutUint64(e[sqeOff:], uint64(off))
	binary.NativeEndian.PutUint64(e[sqeAddr:], uint64(n))
	binary.NativeEndian.PutUint32(e[sqeLen:], mode)
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// PrepNop makes e an IORING_OP_NOP.
func (e SQE) PrepNop(userData uint64) {
	clear(e)
	e[sqeOpcode] = OpNop
	binary.NativeEndian.PutUint64(e[sqeUserData:], userData)
}

// Cmd is the URING_CMD command area: 16 bytes, 80 with SetupSQE128.
func (e SQE) Cmd() []byte { return e[SQECmdOffset:] }

// CQE is one completion (struct io_uring_cqe, 16 bytes).
type CQE struct {
	UserData uint64
	Res      int32
	Flags    uint32
}

// Ring is one io_uring instance.
type Ring struct {
	fd      int
	sqMem   []byte
	cqMem   []byte
	sqeMem  []byte
	sqeSize int

	sqHead, sqTail *uint32
	sqMask         uint32
	sqEntries      uint32
	sqArray        unsafe.Pointer

	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           unsafe.Pointer

	tail     uint32 // our SQ tail, published on Submit
	unsubmit uint32 // SQEs published but not yet taken by io_uring_enter
}

// New sets up a ring with at least entries SQEs and the given IORING_SETUP_*
// flags.
func New(entries uint32, flags uint32) (*Ring, error) {
	p := make(Params, ParamsLen)
	binary.NativeEndian.PutUint32(p[parFlags:], flags)
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p[0])), 0)
	if errno != 0 {
		return nil, fmt.Errorf("uring: io_uring_setup(%d, %#x): %w", entries, flags, errno)
	}
	r := &Ring{fd: int(fd), sqeSize: 64}
	if flags&SetupSQE128 != 0 {
		r.sqeSize = 128
	}
	if err := r.mmap(p); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Ring) mmap(p Params) error {
	var err error
	sqLen := int(p.SQOff(6)) + int(p.SQEntries())*4
	cqLen := int(p.CQOff(5)) + int(p.CQEntries())*16
	if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("uring: mmap SQ ring: %w", err)
	}
	if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqLen, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("uring: mmap CQ ring: %w", err)
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.SQEntries())*r.sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("uring: mmap SQEs: %w", err)
	}
	sq := unsafe.Pointer(&r.sqMem[0])
	r.sqHead = (*uint32)(unsafe.Add(sq, p.SQOff(0)))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.SQOff(1)))
	r.sqMask = *(*uint32)(unsafe.Add(sq, p.SQOff(2)))
	r.sqEntries = *(*uint32)(unsafe.Add(sq, p.SQOff(3)))
	r.sqArray = unsafe.Add(sq, p.SQOff(6))
	cq := unsafe.Pointer(&r.cqMem[0])
	r.cqHead = (*uint32)(unsafe.Add(cq, p.CQOff(0)))
	r.cqTail = (*uint32)(unsafe.Add(cq, p.CQOff(1)))
	r.cqMask = *(*uint32)(unsafe.Add(cq, p.CQOff(2)))
	r.cqes = unsafe.Add(cq, p.CQOff(5))
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// FD is the ring's file descriptor.
func (r *Ring) FD() int { return r.fd }

// SQE returns the next free SQE (to be filled with a Prep method), or nil
// when the submission queue is full: Submit first.
func (r *Ring) SQE() SQE {
	head := atomic.LoadUint32(r.sqHead)
	if r.tail-head >= r.sqEntries {
		return nil
	}
	idx := r.tail & r.sqMask
	*(*uint32)(unsafe.Add(r.sqArray, 4*idx)) = idx
	r.tail++
	r.unsubmit++
	off := int(idx) * r.sqeSize
	return SQE(r.sqeMem[off : off+r.sqeSize : off+r.sqeSize])
}

// Submit publishes the SQEs got since the last Submit and calls
// io_uring_enter, waiting for at least wait completions (0: do not wait).
// A wait interrupted by a signal returns early: callers reap what is there
// and call again.
func (r *Ring) Submit(wait uint32) error {
	atomic.StoreUint32(r.sqTail, r.tail)
	for short := 0; ; {
		var flags uintptr
		if wait > 0 {
			flags = enterGetEvents
		}
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.unsubmit), uintptr(wait), flags, 0, 0)
		switch {
		case errno == syscall.EINTR:
			// A signal before anything was taken (the kernel returns the
			// count otherwise): a long wait may see any number of these.
			continue
		case errno != 0:
			return fmt.Errorf("uring: io_uring_enter: %w", errno)
		}
		r.unsubmit -= min(uint32(n), r.unsubmit)
		if r.unsubmit == 0 {
			return nil
		}
		if short++; short > 8 {
			return fmt.Errorf("uring: io_uring_enter left %d SQEs untaken", r.unsubmit)
		}
		wait = 0 // the wait, if any, is over; submit the rest
	}
}

// Drop takes back the SQEs got since the last Submit that the kernel has
// not taken (after a Submit error: nothing of them runs then, and the
// caller may fail them). It reports how many it dropped.
func (r *Ring) Drop() uint32 {
	n := r.unsubmit
	r.tail -= n
	r.unsubmit = 0
	atomic.StoreUint32(r.sqTail, r.tail)
	return n
}

// Wait blocks in io_uring_enter until at least one completion is there,
// submitting nothing: the one call a reaping goroutine may make while
// another submits. A signal ends the wait early with nil.
func (r *Ring) Wait() error {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
	if errno != 0 && errno != syscall.EINTR {
		return fmt.Errorf("uring: io_uring_enter wait: %w", errno)
	}
	return nil
}

// PeekCQE returns the oldest completion without consuming it.
func (r *Ring) PeekCQE() (CQE, bool) {
	head := atomic.LoadUint32(r.cqHead)
	if head == atomic.LoadUint32(r.cqTail) {
		return CQE{}, false
	}
	b := unsafe.Slice((*byte)(unsafe.Add(r.cqes, 16*(head&r.cqMask))), 16)
	return CQE{
		UserData: binary.NativeEndian.Uint64(b[0:]),
		Res:      int32(binary.NativeEndian.Uint32(b[8:])),
		Flags:    binary.NativeEndian.Uint32(b[12:]),
	}, true
}

// Advance consumes the oldest completion.
func (r *Ring) Advance() {
	atomic.StoreUint32(r.cqHead, atomic.LoadUint32(r.cqHead)+1)
}

// ErrClosed is returned for a closed Ring.
var ErrClosed = errors.New("uring: ring closed")

// Close unmaps the ring and closes its descriptor; the kernel cancels what
// is still pending.
func (r *Ring) Close() error {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.sqMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.sqMem = nil, nil, nil
	if r.fd < 0 {
		return ErrClosed
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}
