package blockdev

// The kernel ublk driver (Linux 6.0+, ublk_drv) served by this process: a
// pure-Go ublk server over io_uring URING_CMDs. Not exercised on the
// development machine (its kernel has no ublk); the 6.12 kernel-peer guest
// has it (tests/interop/ublk_test.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/internal/uring"
)

// Tuning of a ublk mapping: one hardware queue (the namespace's own queues
// do the parallel work), ublkQueueDepth requests in flight towards the
// Device, each at most ublkMaxIO bytes.
const (
	ublkQueueDepth = 64
	ublkMaxIO      = 512 << 10
)

// ublkControl is the driver's control node.
const ublkControl = "/dev/ublk-control"

// ublkOwnerMagic marks devices this package added: ublksrv_flags (kept by
// the kernel, unused by it) holds ublkOwnerMagic<<32 | the server's pid, so
// the devices of a server that died can be found and deleted.
const ublkOwnerMagic = 0x6e766d65 // "nvme"

// ublkAvailable reports whether the kernel has the ublk driver loaded.
func ublkAvailable() bool {
	_, err := os.Stat(ublkControl)
	return err == nil
}

// ublkCtrl is a /dev/ublk-control descriptor with its own small ring;
// commands are serialized (the driver runs them in io_uring's workers, and
// START_DEV and DEL_DEV block there).
type ublkCtrl struct {
	mu   sync.Mutex
	fd   int
	ring *uring.Ring
}

func openUblkCtrl() (*ublkCtrl, error) {
	fd, err := unix.Open(ublkControl, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("blockdev: no %s: load the ublk driver (modprobe ublk_drv, Linux 6.0+) or use another method: %w", ublkControl, err)
	}
	if err != nil {
		return nil, fmt.Errorf("blockdev: open %s: %w", ublkControl, err)
	}
	r, err := uring.New(4, uring.SetupSQE128)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("blockdev: ublk control ring: %w", err)
	}
	return &ublkCtrl{fd: fd, ring: r}, nil
}

func (c *ublkCtrl) close() {
	if !c.mu.TryLock() {
		return // a command that timed out still holds it: leave it be
	}
	defer c.mu.Unlock()
	if c.ring != nil {
		c.ring.Close()
		unix.Close(c.fd)
		c.ring = nil
	}
}

// ublkCmdName names a control opcode for errors.
func ublkCmdName(op uint32) string {
	switch op {
	case ublkCmdAddDev:
		return "ADD_DEV"
	case ublkCmdDelDev:
		return "DEL_DEV"
	case ublkCmdStartDev:
		return "START_DEV"
	case ublkCmdStopDev:
		return "STOP_DEV"
	case ublkCmdSetParams:
		return "SET_PARAMS"
	case ublkCmdGetParams:
		return "GET_PARAMS"
	case ublkCmdGetDevInfo:
		return "GET_DEV_INFO"
	case ublkCmdUpdateSize:
		return "UPDATE_SIZE"
	}
	return fmt.Sprintf("%#x", op)
}

// cmd runs one control command for device devID with buf as its in/out
// buffer (may be nil) and data as data[0], and waits for its completion.
func (c *ublkCtrl) cmd(op, devID uint32, buf []byte, data uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring == nil {
		return fmt.Errorf("blockdev: ublk %s: %w", ublkCmdName(op), uring.ErrClosed)
	}
	var addr uint64
	if len(buf) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	e := c.ring.SQE()
	e.PrepURingCmd(c.fd, op, uint64(op))
	ublkCtrlCmd(e.Cmd()).set(devID, 0xffff, addr, uint16(len(buf)), data)
	var res int32
	for {
		if err := c.ring.Submit(1); err != nil {
			return fmt.Errorf("blockdev: ublk %s: %w", ublkCmdName(op), err)
		}
		if cqe, ok := c.ring.PeekCQE(); ok {
			c.ring.Advance()
			res = cqe.Res
			break
		}
	}
	runtime.KeepAlive(buf)
	if res < 0 {
		return fmt.Errorf("blockdev: ublk %s (device %d): %w", ublkCmdName(op), int32(devID), syscall.Errno(-res))
	}
	return nil
}

// cmdTimeout is cmd bounded by d: on timeout the command stays in the
// kernel (and the control descriptor busy) and an error is returned.
func (c *ublkCtrl) cmdTimeout(d time.Duration, op, devID uint32, buf []byte, data uint64) error {
	done := make(chan error, 1)
	go func() { done <- c.cmd(op, devID, buf, data) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("blockdev: ublk %s (device %d): no answer within %v", ublkCmdName(op), devID, d)
	}
}

// ublkReq is one fetched request, copied out of the shared descriptor.
type ublkReq struct {
	op, flags uint32
	sectors   uint32
	start     uint64
}

// ublkServe does one request against e with the tag's buffer and returns
// the result the driver expects: bytes transferred for reads and writes, 0
// for the others, a negative errno on failure.
func ublkServe(e *engine, r ublkReq, buf []byte) int32 {
	off := int64(r.start) << 9
	n := int64(r.sectors) << 9
	var err error
	switch r.op {
	case ublkIOOpRead, ublkIOOpWrite:
		if n > int64(len(buf)) {
			return -int32(syscall.EINVAL)
		}
		if r.op == ublkIOOpRead {
			err = e.readAt(buf[:n], off)
		} else if err = e.writeAt(buf[:n], off); err == nil && r.flags&ublkIOFFUA != 0 {
			err = e.flush()
		}
		if err == nil {
			return int32(n)
		}
	case ublkIOOpFlush:
		err = e.flush()
	case ublkIOOpDiscard:
		err = e.discard(off, n)
	case ublkIOOpWriteZeroes:
		err = e.zero(off, n, r.flags&ublkIOFNoUnmap == 0)
	default:
		return -int32(syscall.EOPNOTSUPP)
	}
	if err != nil {
		return -int32(errno(err))
	}
	return 0
}

// ublkQueue serves one hardware queue: a goroutine locked to its OS thread
// owns the io_uring (the driver accepts a queue's commands only from the
// thread that fetched them, and runs its task work there), and ublkQueueDepth
// workers call the Device so that the queue depth reaches the namespace.
type ublkQueue struct {
	e     *engine
	log   hclog.Logger
	qid   uint16
	depth int
	maxIO int
	cfd   int    // /dev/ublkcN
	descs []byte // the driver's ublksrv_io_desc array, read-only
	bufs  []byte // depth * maxIO, the requests' data
	efd   int    // eventfd: workers wake the ring owner

	reqs    []ublkReq
	work    chan uint16 // fetched tags for the workers
	workers sync.WaitGroup
	running bool // run was started

	mu   sync.Mutex
	done []uint16 // served tags to commit
	res  []int32
	quit bool

	evBuf [8]byte
	ended chan error
}

// evUserData marks the eventfd read's completion.
const evUserData = 1 << 32

var eventfdOne = [8]byte{1}

func (q *ublkQueue) buf(tag uint16) []byte {
	o := int(tag) * q.maxIO
	return q.bufs[o : o+q.maxIO : o+q.maxIO]
}

func (q *ublkQueue) bufAddr(tag uint16) uint64 {
	return uint64(uintptr(unsafe.Pointer(&q.bufs[int(tag)*q.maxIO])))
}

func (q *ublkQueue) worker() {
	defer q.workers.Done()
	for tag := range q.work {
		res := ublkServe(q.e, q.reqs[tag], q.buf(tag))
		q.complete(tag, res)
	}
}

// complete hands a served tag back to the ring owner.
func (q *ublkQueue) complete(tag uint16, res int32) {
	q.mu.Lock()
	q.res[tag] = res
	wake := len(q.done) == 0
	q.done = append(q.done, tag)
	q.mu.Unlock()
	if wake {
		_, _ = unix.Write(q.efd, eventfdOne[:])
	}
}

// stop makes the ring owner return at its next wake-up, abandoning the
// fetched commands (the kernel cancels them when the ring closes).
func (q *ublkQueue) stop() {
	q.mu.Lock()
	q.quit = true
	q.mu.Unlock()
	_, _ = unix.Write(q.efd, eventfdOne[:])
}

// run is the ring owner. It reports on ready once every tag's FETCH_REQ is
// in the driver (START_DEV waits for that), then serves until every tag was
// aborted (STOP_DEV, or the ring's cancellation) or stop.
func (q *ublkQueue) run(ready chan<- error) {
	// Never unlocked: when run returns, the thread ends with it and so
	// does its io_uring task context.
	runtime.LockOSThread()
	err := q.loop(ready)
	if err != nil {
		q.log.Error("ublk queue ended", "queue", q.qid, "error", err)
	}
	q.ended <- err
}

func (q *ublkQueue) loop(ready chan<- error) (err error) {
	r, err := uring.New(uint32(2*q.depth), uring.SetupSQE128)
	if err != nil {
		ready <- fmt.Errorf("blockdev: ublk queue ring: %w", err)
		return nil
	}
	defer r.Close()
	for tag := 0; tag < q.depth; tag++ {
		e := r.SQE()
		e.PrepURingCmd(q.cfd, ublkIOFetchReq, uint64(tag))
		ublkIOCmd(e.Cmd()).set(q.qid, uint16(tag), 0, q.bufAddr(uint16(tag)))
	}
	r.SQE().PrepRead(q.efd, uintptr(unsafe.Pointer(&q.evBuf[0])), 8, evUserData)
	if err := r.Submit(0); err != nil {
		ready <- fmt.Errorf("blockdev: ublk FETCH_REQ: %w", err)
		return nil
	}
	// A FETCH_REQ the driver refuses completes at once.
	if c, ok := r.PeekCQE(); ok && c.UserData != evUserData {
		ready <- fmt.Errorf("blockdev: ublk FETCH_REQ tag %d: %w", c.UserData, syscall.Errno(-c.Res))
		return nil
	}
	ready <- nil

	aborted := 0
	committing := make([]uint16, 0, q.depth)
	for aborted < q.depth {
		if err := r.Submit(1); err != nil {
			return err
		}
		for c, ok := r.PeekCQE(); ok; c, ok = r.PeekCQE() {
			r.Advance()
			if c.UserData == evUserData {
				if c.Res < 0 {
					q.log.Warn("ublk queue: eventfd read failed", "error", syscall.Errno(-c.Res))
				}
				// Re-armed whatever happened: without it served requests
				// would wait for an unrelated completion to be committed.
				if e := r.SQE(); e != nil {
					e.PrepRead(q.efd, uintptr(unsafe.Pointer(&q.evBuf[0])), 8, evUserData)
				}
				continue
			}
			tag := uint16(c.UserData)
			switch c.Res {
			case ublkIOResOK:
				d := ublkIODesc(q.descs[int(tag)*ublkIODescLen:])
				q.reqs[tag] = ublkReq{op: d.opFlags() & 0xff, flags: d.opFlags() &^ 0xff,
					sectors: d.nrSectors(), start: d.startSector()}
				q.work <- tag
			case ublkIOResAbort:
				aborted++
			default:
				q.log.Error("ublk command failed", "tag", tag, "error", syscall.Errno(-c.Res))
				aborted++
			}
		}
		q.mu.Lock()
		committing = append(committing[:0], q.done...)
		q.done = q.done[:0]
		quit := q.quit
		q.mu.Unlock()
		if quit {
			return nil
		}
		for _, tag := range committing {
			e := r.SQE()
			if e == nil { // cannot happen: depth + 1 commands fit twice over
				return errors.New("blockdev: ublk ring full")
			}
			e.PrepURingCmd(q.cfd, ublkIOCommitAndFetch, uint64(tag))
			ublkIOCmd(e.Cmd()).set(q.qid, tag, q.res[tag], q.bufAddr(tag))
		}
	}
	return nil
}

// ublkMapping is a /dev/ublkbN served by this process.
type ublkMapping struct {
	c       *config
	ctrl    *ublkCtrl
	devID   uint32
	dev     string
	q       *ublkQueue
	stopped bool // STOP_DEV done (the disk is gone)
	closed  bool // queue ended, char device closed
	deleted bool
	srvErr  error
}

func (m *ublkMapping) path() string { return m.dev }

func mapUblk(ctx context.Context, e *engine, c *config) (_ *ublkMapping, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("blockdev: ublk needs root (the control commands need CAP_SYS_ADMIN)")
	}
	shift := 0
	for 1<<shift < c.bs {
		shift++
	}
	if shift > 12 {
		return nil, fmt.Errorf("blockdev: ublk takes logical blocks up to 4096 bytes (the page size), not %d", c.bs)
	}
	removeStaleUblk(c.Logger)
	ctrl, err := openUblkCtrl()
	if err != nil {
		return nil, err
	}
	m := &ublkMapping{c: c, ctrl: ctrl}
	defer func() {
		if err != nil {
			m.teardown(c.UnmapTimeout)
		}
	}()

	info := make(ublkDevInfo, ublkDevInfoLen)
	info.setNRHWQueues(1)
	info.setQueueDepth(ublkQueueDepth)
	info.setMaxIOBufBytes(ublkMaxIO)
	info.setDevID(^uint32(0))
	info.setFlags(ublkFCmdIoctlEncode)
	info.setSrvFlags(ublkOwnerMagic<<32 | uint64(os.Getpid()))
	if err := ctrl.cmd(ublkCmdAddDev, ^uint32(0), info, 0); err != nil {
		m.deleted, m.stopped, m.closed = true, true, true
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w (a ublk driver without the ioctl-encoded opcodes?)", err)
		}
		return nil, err
	}
	m.devID = info.devID()
	maxIO := int(info.maxIOBufBytes())
	if maxIO < c.bs || maxIO > ublkMaxIO {
		return nil, fmt.Errorf("blockdev: ublk device %d: max I/O %d bytes", m.devID, maxIO)
	}
	depth := int(info.queueDepth())
	params := ublkBasicParams(uint8(shift), uint64(c.size)>>9, uint32(maxIO>>9), c.ReadOnly)
	if err := ctrl.cmd(ublkCmdSetParams, m.devID, params, 0); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	q := &ublkQueue{e: e, log: c.Logger.Named("ublk"), depth: depth, maxIO: maxIO, cfd: -1, efd: -1,
		reqs: make([]ublkReq, depth), work: make(chan uint16, depth),
		done: make([]uint16, 0, depth), res: make([]int32, depth), ended: make(chan error, 1)}
	m.q = q
	cdev := "/dev/ublkc" + strconv.FormatUint(uint64(m.devID), 10)
	if err := ensureNode(cdev, "/sys/class/ublk-char/ublkc"+strconv.FormatUint(uint64(m.devID), 10)+"/dev", unix.S_IFCHR|0o600); err != nil {
		return nil, fmt.Errorf("blockdev: ublk %s: %w", cdev, err)
	}
	if q.cfd, err = unix.Open(cdev, unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("blockdev: open %s: %w", cdev, err)
	}
	descLen := (depth*ublkIODescLen + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if q.descs, err = unix.Mmap(q.cfd, 0, descLen, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("blockdev: mmap %s: %w", cdev, err)
	}
	if q.bufs, err = unix.Mmap(-1, 0, depth*maxIO, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return nil, fmt.Errorf("blockdev: ublk buffers: %w", err)
	}
	if q.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("blockdev: eventfd: %w", err)
	}
	q.workers.Add(depth)
	for i := 0; i < depth; i++ {
		go q.worker()
	}
	ready := make(chan error, 1)
	q.running = true
	go q.run(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	if err := ctrl.cmd(ublkCmdStartDev, m.devID, nil, uint64(os.Getpid())); err != nil {
		return nil, err
	}
	m.dev = "/dev/ublkb" + strconv.FormatUint(uint64(m.devID), 10)
	if err := ensureNode(m.dev, "/sys/block/ublkb"+strconv.FormatUint(uint64(m.devID), 10)+"/dev", unix.S_IFBLK|0o600); err != nil {
		c.Logger.Warn("ublk device node missing", "path", m.dev, "error", err)
	}
	return m, nil
}

// unmap refuses while the disk is held exclusively (mounted), then stops
// the disk (STOP_DEV: del_gendisk waits for the requests in flight, which
// the queue still serves, then the driver aborts the fetches), ends the
// queue, closes the char device and deletes the device (DEL_DEV). Each step
// is done once; after an error a retry goes on from there.
func (m *ublkMapping) unmap(ctx context.Context) error {
	t := m.c.UnmapTimeout
	if d, ok := ctx.Deadline(); ok {
		t = max(min(t, time.Until(d)), time.Millisecond)
	}
	if !m.stopped {
		if busy(m.dev) {
			return fmt.Errorf("blockdev: %s is mounted or held exclusively (unmount it first): %w", m.dev, ErrBusy)
		}
		if err := m.ctrl.cmdTimeout(t, ublkCmdStopDev, m.devID, nil, 0); err != nil {
			return err
		}
		m.stopped = true
	}
	return m.teardown(t)
}

// teardown ends the queue (waiting up to t for the driver's aborts, then
// abandoning the ring), releases the char device and deletes the device.
func (m *ublkMapping) teardown(t time.Duration) error {
	if !m.closed {
		if q := m.q; q != nil {
			if q.running {
				m.waitQueue(t)
			}
			close(q.work)
			// Workers still in a Device call write into the buffers and
			// the eventfd: those stay until the last one returned.
			idle := make(chan struct{})
			go func() { q.workers.Wait(); close(idle) }()
			if q.descs != nil { // only the ring owner reads it
				_ = unix.Munmap(q.descs)
			}
			select {
			case <-idle:
				if q.bufs != nil {
					_ = unix.Munmap(q.bufs)
				}
				if q.efd >= 0 {
					unix.Close(q.efd)
				}
			case <-time.After(t):
				m.c.Logger.Warn("ublk: requests still in the namespace; their buffers are left mapped", "device", m.devID)
			}
			if q.cfd >= 0 {
				unix.Close(q.cfd)
			}
		}
		m.closed = true
	}
	if !m.deleted {
		// DEL_DEV waits until the char device is released; it is closed
		// and the ring gone, so this is short unless something else holds it.
		if err := m.ctrl.cmdTimeout(t, ublkCmdDelDev, m.devID, nil, 0); err != nil {
			return err
		}
		m.deleted = true
	}
	m.ctrl.close()
	return m.srvErr
}

// waitQueue waits for the queue's ring owner to return; a started queue
// returns once the driver aborted its fetches, otherwise it is told to stop.
func (m *ublkMapping) waitQueue(t time.Duration) {
	q := m.q
	if !m.stopped {
		q.stop()
	}
	tm := time.NewTimer(t)
	defer tm.Stop()
	select {
	case m.srvErr = <-q.ended:
		return
	case <-tm.C:
	}
	q.stop()
	m.srvErr = <-q.ended
}

// removeStaleUblk deletes the ublk devices this package added for servers
// that are gone (a daemon that died keeps its device, stopped by the
// driver, until DEL_DEV). It returns how many it deleted.
func removeStaleUblk(log hclog.Logger) int {
	ents, err := filepath.Glob("/sys/class/ublk-char/ublkc*")
	if err != nil || len(ents) == 0 {
		return 0
	}
	ctrl, err := openUblkCtrl()
	if err != nil {
		return 0
	}
	defer ctrl.close()
	n := 0
	for _, ent := range ents {
		id, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(ent), "ublkc"), 10, 32)
		if err != nil {
			continue
		}
		info := make(ublkDevInfo, ublkDevInfoLen)
		if err := ctrl.cmd(ublkCmdGetDevInfo, uint32(id), info, 0); err != nil {
			continue
		}
		f := info.srvFlags()
		pid := int(uint32(f))
		if f>>32 != ublkOwnerMagic || pid == os.Getpid() || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		if err := ctrl.cmdTimeout(10*time.Second, ublkCmdDelDev, uint32(id), nil, 0); err != nil {
			log.Warn("stale ublk device not deleted", "device", id, "pid", pid, "error", err)
			continue
		}
		log.Info("deleted the ublk device of a server that is gone", "device", id, "pid", pid)
		n++
	}
	return n
}

// RemoveStaleUblk deletes the ublk devices that mappings of processes which
// died left behind (their disks are already gone: the driver stops a
// device when its server exits). It returns how many it deleted.
func RemoveStaleUblk(log hclog.Logger) int {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if os.Geteuid() != 0 || !ublkAvailable() {
		return 0
	}
	return removeStaleUblk(log)
}
