//go:build rbd

package bdev

/*
#cgo LDFLAGS: -lrbd -lrados
#include <stdint.h>
#include <stdlib.h>
#include <rados/librados.h>
#include <rbd/librbd.h>

extern void nvmeofRBDComplete(rbd_completion_t c, void *arg);

// The slot number travels as the completion's argument: an integer, never
// a Go pointer. Returning the completion (NULL on failure) keeps Go from
// passing the address of a local, which would move it to the heap.
static rbd_completion_t nvmeof_rbd_completion(uintptr_t slot) {
	rbd_completion_t c = NULL;
	if (rbd_aio_create_completion((void *)slot, nvmeofRBDComplete, &c) < 0)
		return NULL;
	return c;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
)

// ErrNoRBD is what the rbd backend returns in a binary built without the
// rbd build tag (no librbd linked in).
var ErrNoRBD = errors.New("this nvmetd was built without RBD support: build with -tags rbd")

// RBDSupported reports whether the binary was built with the rbd tag.
const RBDSupported = true

// RBDPollInterval is how often an RBD device reads its image's size
// again to notice a resize (SizeWatcher). librbd refreshes the size from
// the image header's watch notifications, so a poll is a local read.
var RBDPollInterval = time.Second

// rbdMountTimeout bounds how long opening waits for the monitors
// (client_mount_timeout; librados' default is 300 s).
const rbdMountTimeout = "20"

// RBD is a Ceph RBD image opened through librbd: go-ceph makes the rados
// connection, the I/O goes through librbd's rbd_aio_* calls (Async) with
// completions from a preallocated slot table. The blocking methods of
// Device wait for the same asynchronous calls.
//
// The image is opened without taking its exclusive lock, and librbd's
// cache is off, so that several gateways can serve one image: an image
// with the exclusive-lock feature still works, but librbd then moves the
// lock between gateways on every switch of writer (slow): disable the
// feature (rbd feature disable POOL/IMAGE exclusive-lock, after
// object-map and fast-diff) for a multi-gateway image.
type RBD struct {
	conn   *rados.Conn
	ioctx  *rados.IOContext
	img    C.rbd_image_t
	name   string // pool/image, for errors
	bs     uint32
	size   atomic.Int64 // bytes, a multiple of bs
	exlock bool

	mu     sync.RWMutex // held shared by every call into librbd, exclusively by Close
	closed atomic.Bool
	stop   chan struct{}
	once   sync.Once
}

// rbdConnect opens the cluster connection and the pool of spec.
func rbdConnect(spec Spec) (*rados.Conn, *rados.IOContext, error) {
	name := spec.Pool + "/" + spec.Image
	if spec.Pool == "" || spec.Image == "" {
		return nil, nil, fmt.Errorf("bdev: rbd %q: a pool and an image are required", name)
	}
	id := spec.ClientID
	if id == "" {
		id = "admin"
	}
	conn, err := rados.NewConnWithUser(id)
	if err != nil {
		return nil, nil, fmt.Errorf("bdev: rbd %s: client %s: %w", name, id, err)
	}
	fail := func(what string, err error) (*rados.Conn, *rados.IOContext, error) {
		conn.Shutdown()
		return nil, nil, fmt.Errorf("bdev: rbd %s: %s: %w", name, what, err)
	}
	if spec.CephConf != "" {
		err = conn.ReadConfigFile(spec.CephConf)
	} else {
		err = conn.ReadDefaultConfigFile()
	}
	if err != nil {
		return fail("read ceph conf "+spec.CephConf, err)
	}
	opts := [][2]string{{"client_mount_timeout", rbdMountTimeout}, {"rbd_cache", "false"}}
	if spec.Keyring != "" {
		opts = append(opts, [2]string{"keyring", spec.Keyring})
	}
	for _, o := range opts {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			return fail("set "+o[0], err)
		}
	}
	if err := conn.Connect(); err != nil {
		return fail("connect as client."+id, err)
	}
	ioctx, err := conn.OpenIOContext(spec.Pool)
	if err != nil {
		return fail("open pool "+spec.Pool, err)
	}
	return conn, ioctx, nil
}

// CheckRBD connects to the cluster and opens the image read-only (go-ceph
// rbd.OpenImageReadOnly), then closes everything: the cluster, the
// credentials, the pool and the image answer, and the image holds a
// block.
func CheckRBD(spec Spec) error {
	conn, ioctx, err := rbdConnect(spec)
	if err != nil {
		return err
	}
	defer conn.Shutdown()
	defer ioctx.Destroy()
	img, err := rbd.OpenImageReadOnly(ioctx, spec.Image, rbd.NoSnapshot)
	if err != nil {
		return fmt.Errorf("bdev: rbd %s/%s: open image: %w", spec.Pool, spec.Image, err)
	}
	defer img.Close()
	sz, err := img.GetSize()
	if err != nil {
		return fmt.Errorf("bdev: rbd %s/%s: size: %w", spec.Pool, spec.Image, err)
	}
	_, err = rbdSize(spec, int64(sz))
	return err
}

// rbdSize checks spec's size and block size against an image of sz bytes
// and returns the block size.
func rbdSize(spec Spec, sz int64) (uint32, error) {
	bs := spec.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	name := spec.Pool + "/" + spec.Image
	switch {
	case !ValidBlockSize(bs):
		return 0, fmt.Errorf("bdev: rbd %s: block size %d is not a power of two from 512 to 65536", name, bs)
	case sz < int64(bs):
		return 0, fmt.Errorf("bdev: rbd %s: image of %d bytes holds no %d-byte block", name, sz, bs)
	case spec.Size != 0 && spec.Size != sz:
		return 0, fmt.Errorf("bdev: rbd %s: size %d given, the image has %d bytes (the image's size is used: leave size out, resize with rbd resize)", name, spec.Size, sz)
	}
	return bs, nil
}

// OpenRBD opens the RBD image spec names.
func OpenRBD(spec Spec) (Device, error) {
	conn, ioctx, err := rbdConnect(spec)
	if err != nil {
		return nil, err
	}
	d := &RBD{conn: conn, ioctx: ioctx, name: spec.Pool + "/" + spec.Image, stop: make(chan struct{})}
	fail := func(what string, rc C.int) (Device, error) {
		ioctx.Destroy()
		conn.Shutdown()
		return nil, fmt.Errorf("bdev: rbd %s: %s: %w", d.name, what, syscall.Errno(-rc))
	}
	cname := C.CString(spec.Image)
	defer C.free(unsafe.Pointer(cname))
	if rc := C.rbd_open(C.rados_ioctx_t(ioctx.Pointer()), cname, &d.img, nil); rc < 0 {
		return fail("open image", rc)
	}
	var sz C.uint64_t
	if rc := C.rbd_get_size(d.img, &sz); rc < 0 {
		C.rbd_close(d.img)
		return fail("size", rc)
	}
	var feat C.uint64_t
	if rc := C.rbd_get_features(d.img, &feat); rc < 0 {
		C.rbd_close(d.img)
		return fail("features", rc)
	}
	d.exlock = feat&C.RBD_FEATURE_EXCLUSIVE_LOCK != 0
	bs, err := rbdSize(spec, int64(sz))
	if err != nil {
		C.rbd_close(d.img)
		ioctx.Destroy()
		conn.Shutdown()
		return nil, err
	}
	d.bs = bs
	d.size.Store(int64(sz) &^ int64(bs-1))
	return d, nil
}

// ExclusiveLock reports whether the image has the exclusive-lock feature
// (see RBD: several gateways on it trade the lock).
func (d *RBD) ExclusiveLock() bool { return d.exlock }

// Size implements Device: the image's size at the last look, rounded
// down to the block size.
func (d *RBD) Size() int64 { return d.size.Load() }

// BlockSize implements Device.
func (d *RBD) BlockSize() uint32 { return d.bs }

// WatchSize implements SizeWatcher: a goroutine reads the image size
// every RBDPollInterval until Close.
func (d *RBD) WatchSize(changed func()) {
	go func() {
		t := time.NewTicker(RBDPollInterval)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
			}
			if d.refreshSize() {
				changed()
			}
		}
	}()
}

// refreshSize reads the image size and reports whether it changed.
func (d *RBD) refreshSize() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed.Load() {
		return false
	}
	var sz C.uint64_t
	if C.rbd_get_size(d.img, &sz) < 0 {
		return false
	}
	n := int64(sz) &^ int64(d.bs-1)
	return d.size.Swap(n) != n
}

// Close implements Device. The target closes a device only when no I/O
// is in flight; librbd's close waits for what still is.
func (d *RBD) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Swap(true) {
		return ErrClosed
	}
	d.once.Do(func() { close(d.stop) })
	rc := C.rbd_close(d.img)
	d.ioctx.Destroy()
	d.conn.Shutdown()
	if rc < 0 {
		return fmt.Errorf("bdev: rbd %s: close: %w", d.name, syscall.Errno(-rc))
	}
	return nil
}

// rbd operations, for errors and the completion's checks.
const (
	rbdRead = iota
	rbdWrite
	rbdFlush
	rbdWriteZeroes
	rbdDiscard
)

var rbdOpNames = [...]string{"read", "write", "flush", "write zeroes", "discard"}

// rbdSlot is the context of one operation in flight. Slots live in a
// global table that only grows; librbd's completion carries the slot's
// index, so no Go pointer goes to C but the pinned buffer.
type rbdSlot struct {
	idx  uintptr
	d    *RBD
	c    Completion // nil: a blocking call waits on done
	done chan error
	pin  runtime.Pinner
	op   int
	n    int64 // bytes a read must return
}

var rbdSlots struct {
	mu   sync.Mutex
	all  []*rbdSlot
	free []*rbdSlot
}

// rbdSlotChunk slots are made at a time: the table grows only when more
// operations are in flight than ever before.
const rbdSlotChunk = 256

func getSlot() *rbdSlot {
	rbdSlots.mu.Lock()
	defer rbdSlots.mu.Unlock()
	if len(rbdSlots.free) == 0 {
		chunk := make([]rbdSlot, rbdSlotChunk)
		for i := range chunk {
			s := &chunk[i]
			s.idx = uintptr(len(rbdSlots.all))
			s.done = make(chan error, 1)
			rbdSlots.all = append(rbdSlots.all, s)
			rbdSlots.free = append(rbdSlots.free, s)
		}
	}
	s := rbdSlots.free[len(rbdSlots.free)-1]
	rbdSlots.free = rbdSlots.free[:len(rbdSlots.free)-1]
	return s
}

func putSlot(s *rbdSlot) {
	s.d, s.c = nil, nil
	rbdSlots.mu.Lock()
	rbdSlots.free = append(rbdSlots.free, s)
	rbdSlots.mu.Unlock()
}

func slotAt(idx uintptr) *rbdSlot {
	rbdSlots.mu.Lock()
	defer rbdSlots.mu.Unlock()
	return rbdSlots.all[idx]
}

// rbdError wraps a librbd error code (a negative errno).
func (d *RBD) rbdError(op int, rc int64) error {
	return fmt.Errorf("bdev: rbd %s: %s: %w", d.name, rbdOpNames[op], syscall.Errno(-rc))
}

//export nvmeofRBDComplete
func nvmeofRBDComplete(c C.rbd_completion_t, arg unsafe.Pointer) {
	rc := int64(C.rbd_aio_get_return_value(c))
	C.rbd_aio_release(c)
	s := slotAt(uintptr(arg))
	var err error
	switch {
	case rc < 0:
		err = s.d.rbdError(s.op, rc)
	case s.op == rbdRead && rc != s.n:
		err = fmt.Errorf("bdev: rbd %s: read of %d bytes returned %d: %w", s.d.name, s.n, rc, io.ErrUnexpectedEOF)
	}
	s.finish(err)
}

// finish hands the result to the waiter or the Completion and frees the
// slot first, so that the Completion may start another operation.
func (s *rbdSlot) finish(err error) {
	s.pin.Unpin()
	c := s.c
	if c == nil {
		s.done <- err // the waiter frees the slot
		return
	}
	putSlot(s)
	c.Complete(err)
}

// start runs one librbd call for op with a fresh completion; errors,
// before or at submission, go to c (or the waiter).
func (d *RBD) start(op int, p []byte, off, n int64, c Completion) *rbdSlot {
	s := getSlot()
	s.d, s.c, s.op, s.n = d, c, op, n
	if d.closed.Load() {
		s.finish(ErrClosed)
		return s
	}
	if op != rbdFlush {
		if err := checkRange(rbdOpNames[op], off, n, d.size.Load()); err != nil {
			s.finish(err)
			return s
		}
		if n == 0 {
			s.finish(nil)
			return s
		}
	}
	var buf *C.char
	if len(p) > 0 {
		s.pin.Pin(&p[0])
		buf = (*C.char)(unsafe.Pointer(&p[0]))
	}
	comp := C.nvmeof_rbd_completion(C.uintptr_t(s.idx))
	if comp == nil {
		s.finish(d.rbdError(op, -int64(syscall.ENOMEM)))
		return s
	}
	d.mu.RLock()
	var rc C.int
	if d.closed.Load() {
		rc = -C.int(syscall.ESHUTDOWN)
	} else {
		o, l := C.uint64_t(off), C.size_t(n)
		switch op {
		case rbdRead:
			rc = C.rbd_aio_read(d.img, o, l, buf, comp)
		case rbdWrite:
			rc = C.rbd_aio_write(d.img, o, l, buf, comp)
		case rbdFlush:
			rc = C.rbd_aio_flush(d.img, comp)
		case rbdWriteZeroes:
			rc = C.rbd_aio_write_zeroes(d.img, o, l, comp, 0, 0)
		case rbdDiscard:
			rc = C.rbd_aio_discard(d.img, o, C.uint64_t(n), comp)
		}
	}
	d.mu.RUnlock()
	if rc < 0 {
		// Not submitted: the callback will not run.
		C.rbd_aio_release(comp)
		if d.closed.Load() {
			s.finish(ErrClosed)
		} else {
			s.finish(d.rbdError(op, int64(rc)))
		}
	}
	return s
}

// wait runs op and waits for it (Device's blocking methods).
func (d *RBD) wait(op int, p []byte, off, n int64) error {
	s := d.start(op, p, off, n, nil)
	err := <-s.done
	putSlot(s)
	return err
}

// ReadAsync implements Async.
func (d *RBD) ReadAsync(p []byte, off int64, c Completion) {
	d.start(rbdRead, p, off, int64(len(p)), c)
}

// WriteAsync implements Async.
func (d *RBD) WriteAsync(p []byte, off int64, c Completion) {
	d.start(rbdWrite, p, off, int64(len(p)), c)
}

// FlushAsync implements Async.
func (d *RBD) FlushAsync(c Completion) { d.start(rbdFlush, nil, 0, 0, c) }

// WriteZeroesAsync implements Async.
func (d *RBD) WriteZeroesAsync(off, n int64, c Completion) { d.start(rbdWriteZeroes, nil, off, n, c) }

// DiscardAsync implements Async.
func (d *RBD) DiscardAsync(off, n int64, c Completion) { d.start(rbdDiscard, nil, off, n, c) }

// ReadAt implements Device.
func (d *RBD) ReadAt(p []byte, off int64) (int, error) {
	if err := d.wait(rbdRead, p, off, int64(len(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteAt implements Device.
func (d *RBD) WriteAt(p []byte, off int64) (int, error) {
	if err := d.wait(rbdWrite, p, off, int64(len(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush implements Device: librbd's cache is off, so this only waits for
// writes librbd still holds.
func (d *RBD) Flush() error { return d.wait(rbdFlush, nil, 0, 0) }

// WriteZeroes implements Device (rbd_aio_write_zeroes: the objects wholly
// inside the range are discarded, the rest written with zeroes).
func (d *RBD) WriteZeroes(off, n int64) error { return d.wait(rbdWriteZeroes, nil, off, n) }

// Discard implements Device (rbd_aio_discard). librbd may skip parts of
// objects (rbd_skip_partial_discard), so the target does not promise
// zeroes after a Deallocate.
func (d *RBD) Discard(off, n int64) error { return d.wait(rbdDiscard, nil, off, n) }

var (
	_ Device      = (*RBD)(nil)
	_ Async       = (*RBD)(nil)
	_ SizeWatcher = (*RBD)(nil)
)
