//go:build ibverbs && cgo

package ibverbs

/*
#include "ibverbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/nvmeof/nvmeof/rdma"
)

// cqBatch is the most completions one poll moves.
const cqBatch = 64

// cq is a completion queue with a completion channel whose file
// descriptor the Go netpoller watches (or, in poll mode, polled by the
// device's poller goroutine). That goroutine runs the handler, or
// signals Notify.
type cq struct {
	dev  *device
	cq   *C.struct_ibv_cq
	ch   *C.struct_ibv_comp_channel
	file *os.File // a duplicate of ch's fd, for the netpoller (nil in poll mode)

	// pollMu guards the C scratch arrays of Poll.
	pollMu sync.Mutex
	wc     *C.struct_ibv_wc
	gwc    *C.struct_gwc
	gwcs   []C.struct_gwc

	// The event goroutine's own arrays (it never shares them).
	evWC   *C.struct_ibv_wc
	evGWC  *C.struct_gwc
	evGWCs []C.struct_gwc
	evOut  []rdma.WorkCompletion

	// pending holds completions the provider made (flushes rxe does not
	// deliver) or that Wait took to see whether anything was queued;
	// Poll and the handler hand them out before the device's.
	pmu     sync.Mutex
	pending []rdma.WorkCompletion

	notify  chan struct{}
	hmu     sync.Mutex // held while the handler runs and while it is changed
	handler func([]rdma.WorkCompletion)
	hasH    atomic.Bool

	users   atomic.Int32 // QPs using the CQ
	stop    chan struct{}
	stopped chan struct{}
	mu      sync.Mutex
	dead    bool
}

// CreateCQ implements rdma.Device.
func (d *device) CreateCQ(entries int) (rdma.CQ, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	if entries < 1 || (d.attr.MaxCQE > 0 && entries > d.attr.MaxCQE) {
		return nil, fmt.Errorf("ibverbs: CQ of %d entries (device max %d): %w", entries, d.attr.MaxCQE, rdma.ErrInvalidArgument)
	}
	c := &cq{dev: d, notify: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	if !d.cfg.Poll {
		c.ch, err = C.ibv_create_comp_channel(d.ctx)
		if c.ch == nil {
			return nil, fmt.Errorf("ibverbs: ibv_create_comp_channel: %w", errnoErr(err))
		}
	}
	c.cq, err = C.ibv_create_cq(d.ctx, C.int(entries), nil, c.ch, 0)
	if c.cq == nil {
		c.freeChannel()
		return nil, fmt.Errorf("ibverbs: ibv_create_cq of %d entries: %w", entries, errnoErr(err))
	}
	c.wc = (*C.struct_ibv_wc)(C.calloc(cqBatch, C.sizeof_struct_ibv_wc))
	c.gwc = (*C.struct_gwc)(C.calloc(cqBatch, C.sizeof_struct_gwc))
	c.gwcs = unsafe.Slice(c.gwc, cqBatch)
	c.evWC = (*C.struct_ibv_wc)(C.calloc(cqBatch, C.sizeof_struct_ibv_wc))
	c.evGWC = (*C.struct_gwc)(C.calloc(cqBatch, C.sizeof_struct_gwc))
	c.evGWCs = unsafe.Slice(c.evGWC, cqBatch)
	c.evOut = make([]rdma.WorkCompletion, cqBatch)
	if d.cfg.Poll {
		close(c.stopped)
		d.addPolled(c)
		return c, nil
	}
	fd := int(c.ch.fd)
	if C.nv_set_nonblock(C.int(fd)) != 0 {
		c.destroyC()
		return nil, fmt.Errorf("ibverbs: completion channel: O_NONBLOCK failed")
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		c.destroyC()
		return nil, fmt.Errorf("ibverbs: completion channel: dup: %w", err)
	}
	syscall.CloseOnExec(dup)
	c.file = os.NewFile(uintptr(dup), "ibv_comp_channel")
	if r := C.nv_req_notify(c.cq); r != 0 {
		c.file.Close()
		c.destroyC()
		return nil, fmt.Errorf("ibverbs: ibv_req_notify_cq: %w", syscall.Errno(r))
	}
	go c.events()
	return c, nil
}

// events waits for completion events on the netpoller: each one is
// acknowledged, the CQ re-armed, and then the handler runs on what is
// queued, or Notify is signalled.
func (c *cq) events() {
	defer close(c.stopped)
	rc, err := c.file.SyscallConn()
	if err != nil {
		return
	}
	// One closure for the goroutine's life: nothing is allocated per event.
	var evCQ *C.struct_ibv_cq
	var evCtx unsafe.Pointer
	got := false
	read := func(uintptr) bool {
		if C.ibv_get_cq_event(c.ch, &evCQ, &evCtx) == 0 {
			got = true
			return true
		}
		return false // EAGAIN: wait for readiness
	}
	for {
		got = false
		err := rc.Read(read)
		if err != nil || !got {
			return
		}
		C.ibv_ack_cq_events(c.cq, 1)
		C.nv_req_notify(c.cq)
		c.deliver()
	}
}

// pollOnce is one round of the device's poller for this CQ: the
// handler runs on what is queued, or Notify is signalled when a
// completion is (looked ahead at, so that a consumer is not woken for
// nothing). It reports whether there was work.
func (c *cq) pollOnce() bool {
	if c.hasH.Load() {
		if n := c.drainCount(); n >= 0 {
			return n > 0
		}
	}
	if c.lookAhead() {
		select {
		case c.notify <- struct{}{}:
		default:
		}
		return true
	}
	return false
}

// deliver runs the handler on everything queued, or signals Notify.
func (c *cq) deliver() {
	if c.hasH.Load() && c.drainCount() >= 0 {
		return
	}
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// drainCount runs the handler until the CQ is empty and returns how many
// completions it handled, -1 when there is no handler (any more).
func (c *cq) drainCount() int {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	h := c.handler
	if h == nil || c.isDead() {
		return -1
	}
	total := 0
	for {
		if n := c.takePending(c.evOut); n > 0 {
			h(c.evOut[:n])
			total += n
			continue
		}
		n := int(C.nv_poll_cq(c.cq, cqBatch, c.evWC, c.evGWC, c.dev.rxe))
		if n <= 0 {
			return total
		}
		for i := 0; i < n; i++ {
			c.convert(&c.evOut[i], &c.evGWCs[i])
		}
		h(c.evOut[:n])
		total += n
		if n < cqBatch {
			return total
		}
	}
}

// convert converts a completion, and marks its QP in Err when it failed.
func (c *cq) convert(w *rdma.WorkCompletion, g *C.struct_gwc) {
	convertWC(w, g)
	if w.Status != rdma.Success {
		c.dev.qpErr(w.QPN)
	}
}

// takePending moves pending completions into wc.
func (c *cq) takePending(wc []rdma.WorkCompletion) int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if len(c.pending) == 0 {
		return 0
	}
	n := copy(wc, c.pending)
	c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	return n
}

// addSoft queues completions the provider made, and delivers them as
// the device's would be: to the handler (on the caller's goroutine) or
// through Notify.
func (c *cq) addSoft(wcs []rdma.WorkCompletion) {
	c.pmu.Lock()
	c.pending = append(c.pending, wcs...)
	c.pmu.Unlock()
	if c.isDead() {
		return
	}
	// On a goroutine of its own: the caller may be the handler, which
	// must not be called again before it returns.
	go c.deliver()
}

func convertWC(w *rdma.WorkCompletion, g *C.struct_gwc) {
	*w = rdma.WorkCompletion{
		WRID:            uint64(g.wr_id),
		Status:          rdma.WCStatus(g.status),
		Opcode:          rdma.WCOpcode(g.opcode),
		Flags:           rdma.WCFlags(g.wc_flags) & (rdma.WCGRH | rdma.WCWithImm | rdma.WCWithInvalidate),
		ByteLen:         uint32(g.byte_len),
		Imm:             uint32(g.imm),
		InvalidatedRKey: uint32(g.inv_rkey),
		QPN:             uint32(g.qp_num),
		SrcQP:           uint32(g.src_qp),
		PKeyIndex:       uint16(g.pkey_index),
		VendorErr:       uint32(g.vendor_err),
	}
}

// Poll implements rdma.CQ.
func (c *cq) Poll(wc []rdma.WorkCompletion) int {
	if len(wc) == 0 || c.hasH.Load() {
		return 0
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.isDead() {
		return 0
	}
	k := c.takePending(wc)
	if k == len(wc) {
		return k
	}
	n := int(C.nv_poll_cq(c.cq, C.int(min(len(wc)-k, cqBatch)), c.wc, c.gwc, c.dev.rxe))
	for i := 0; i < n; i++ {
		c.convert(&wc[k+i], &c.gwcs[i])
	}
	return k + max(n, 0)
}

// Wait implements rdma.CQ. A completion event may be for completions an
// earlier Poll took already, so Wait looks: it polls one completion
// ahead (the next Poll hands it out first) and waits again when there
// is none.
func (c *cq) Wait(ctx context.Context) error {
	for {
		if c.lookAhead() {
			return nil
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stop:
			return fmt.Errorf("ibverbs: CQ: %w", rdma.ErrClosed)
		}
	}
}

// lookAhead reports whether a completion is queued, moving one from the
// device to pending to see.
func (c *cq) lookAhead() bool {
	c.pmu.Lock()
	has := len(c.pending) > 0
	c.pmu.Unlock()
	if has {
		return true
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.isDead() {
		return false
	}
	if C.nv_poll_cq(c.cq, 1, c.wc, c.gwc, c.dev.rxe) != 1 {
		return false
	}
	var w rdma.WorkCompletion
	c.convert(&w, &c.gwcs[0])
	c.pmu.Lock()
	c.pending = append(c.pending, w)
	c.pmu.Unlock()
	return true
}

// Notify implements rdma.CQ.
func (c *cq) Notify() <-chan struct{} { return c.notify }

// SetHandler implements rdma.HandlerCQ. Completions queued before the
// handler was set are handed to it at once, on the caller's goroutine.
func (c *cq) SetHandler(h func(wcs []rdma.WorkCompletion)) {
	c.hmu.Lock()
	c.handler = h
	c.hasH.Store(h != nil)
	c.hmu.Unlock()
	if h != nil && !c.isDead() {
		c.drainCount()
	}
}

func (c *cq) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// Destroy implements rdma.CQ.
func (c *cq) Destroy() error {
	if n := c.users.Load(); n > 0 {
		return fmt.Errorf("ibverbs: CQ used by %d QPs: %w", n, rdma.ErrBusy)
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return nil
	}
	c.dead = true
	c.mu.Unlock()
	close(c.stop)
	if c.dev.cfg.Poll {
		c.dev.removePolled(c) // waits for the poller's round
	}
	if c.file != nil {
		c.file.Close() // wakes the event goroutine
	}
	<-c.stopped
	c.hmu.Lock() // no handler call is running, and none starts (dead)
	c.handler = nil
	c.hasH.Store(false)
	c.hmu.Unlock()
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	return c.destroyC()
}

func (c *cq) destroyC() error {
	var err error
	if c.cq != nil {
		if r := C.ibv_destroy_cq(c.cq); r != 0 {
			err = fmt.Errorf("ibverbs: ibv_destroy_cq: %w", errnoErr(syscall.Errno(r)))
		}
		c.cq = nil
	}
	c.freeChannel()
	for _, p := range []unsafe.Pointer{unsafe.Pointer(c.wc), unsafe.Pointer(c.gwc), unsafe.Pointer(c.evWC), unsafe.Pointer(c.evGWC)} {
		C.free(p)
	}
	c.wc, c.gwc, c.evWC, c.evGWC = nil, nil, nil, nil
	return err
}

func (c *cq) freeChannel() {
	if c.ch != nil {
		C.ibv_destroy_comp_channel(c.ch)
		c.ch = nil
	}
}
