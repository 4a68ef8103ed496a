package rdma

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// TestTargetPoolExhausted: with a data pool of one 128 KiB unit, 30
// commands of 4, 64 and 128 KiB in flight at once on each of two queues
// (RDMA READs and WRITEs) wait for buffers in turn and all complete;
// nothing is left held, with the port's SRQ and with per-queue receive
// rings alike.
func TestTargetPoolExhausted(t *testing.T) {
	for _, c := range []struct {
		name string
		srq  int
	}{{"srq", 0}, {"rings", -1}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			port := uint16(4444)
			if c.srq < 0 {
				port++
			}
			tdev, hdev := openSoft(t, pidAddr(31)), openSoft(t, pidAddr(32))
			l, err := Listen(TargetConfig{Device: tdev, ServiceID: port, DataPoolBytes: 1, SRQSize: c.srq})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if l.UsesSRQ() != (c.srq == 0) {
				t.Fatalf("port uses an SRQ: %v, want %v", l.UsesSRQ(), c.srq == 0)
			}
			h := &memHandler{closed: make(chan error, 2)}
			go func() {
				for range 2 {
					q, err := l.Accept(ctx)
					if err != nil {
						return
					}
					q.Serve(h)
				}
			}()
			d := NewDialer(HostConfig{Device: hdev})
			var hqs []fabrics.HostQueue
			for qid := uint16(1); qid <= 2; qid++ {
				hq, err := d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(31), ServiceID: port},
					fabrics.QueueParams{QID: qid, SQSize: 32, RQSize: 32})
				if err != nil {
					t.Fatal(err)
				}
				defer hq.Close()
				fabricsConnect(t, ctx, hq)
				hqs = append(hqs, hq)
			}
			// Rounds of 30 commands in flight on each queue: 4 KiB,
			// 64 KiB and 128 KiB, to the controller and from it (a
			// 4 KiB one holds the unit as a slab until all its 4 KiB
			// buffers are back).
			sizes := []int{64 << 10, 4 << 10, 128 << 10}
			for round := range 3 {
				type sent struct {
					done <-chan *fabrics.HostCommand
					size int
				}
				var all []sent
				for i := range 30 {
					for _, hq := range hqs {
						op, dir := byte(0x01), fabrics.DirHostToCtrl
						if i%2 == 1 {
							op, dir = 0x02, fabrics.DirCtrlToHost
						}
						size := sizes[(i/2+round)%len(sizes)]
						all = append(all, sent{submitAsync(t, hq, op, make([]byte, size), dir), size})
					}
				}
				for i, c := range all {
					cmd := waitDone(t, ctx, c.done)
					cqe := nvme.CQE(cmd.CQE[:])
					if cmd.Err != nil || !cqe.Status().Success() || int(cqe.DW0()) != c.size {
						t.Fatalf("round %d command %d: %v, status %v, DW0 %d", round, i, cmd.Err, cqe.Status(), cqe.DW0())
					}
				}
			}
			// The last buffer comes back when the target sees its
			// response's SEND complete, which may be after the host
			// has the response.
			waitFor(t, ctx, "all data and SRQ buffers back", func() bool {
				_, _, inUse := l.SharedBytes()
				return inUse == 0 && (l.rpool == nil || l.rpool.out.Load() == 0)
			})
			srq, pool, inUse := l.SharedBytes()
			t.Logf("SRQ buffers %d bytes, data pool %d bytes registered, %d in use", srq, pool, inUse)
			if pool != DefaultMaxTransfer || inUse != 0 || (srq > 0) != l.UsesSRQ() {
				t.Fatalf("shared: SRQ %d, pool %d bytes (%d in use); want the pool at its cap of %d and all back", srq, pool, inUse, DefaultMaxTransfer)
			}
		})
	}
}

// holdHandler keeps the commands it is given until told to complete them.
type holdHandler struct {
	got    chan *fabrics.Request
	closed chan error
}

func (h *holdHandler) HandleCommand(r *fabrics.Request) { h.got <- r }
func (h *holdHandler) QueueClosed(err error)            { h.closed <- err }

// TestSRQPreConnectOverrun: with the port's SRQ a queue before its
// Connect has two slots; a host that sends a third command while the
// first two are outstanding (no Connect at all here) has its queue
// closed rather than holding more of the SRQ's buffers. The handler
// completes the two it held after the close, which gives their buffers
// back.
func TestSRQPreConnectOverrun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const port = 4446
	tdev, hdev := openSoft(t, pidAddr(33)), openSoft(t, pidAddr(34))
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: port})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.UsesSRQ() {
		t.Fatal("the soft provider's port has no SRQ")
	}
	h := &holdHandler{got: make(chan *fabrics.Request, 4), closed: make(chan error, 1)}
	go func() {
		if q, err := l.Accept(ctx); err == nil {
			q.Serve(h)
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(33), ServiceID: port},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer hq.Close()
	var held []*fabrics.Request
	for i := range 3 {
		submitAsync(t, hq, 0x02, make([]byte, 4096), fabrics.DirCtrlToHost)
		if i == 2 {
			break
		}
		select {
		case r := <-h.got:
			held = append(held, r)
		case <-ctx.Done():
			t.Fatalf("command %d not delivered", i)
		}
	}
	select {
	case err := <-h.closed:
		if err == nil || !strings.Contains(err.Error(), "before its Connect") {
			t.Fatalf("queue closed with %v, want the host's command before its Connect", err)
		}
	case r := <-h.got:
		t.Fatalf("third command delivered: %x", r.SQE[:4])
	case <-ctx.Done():
		t.Fatal("queue not closed")
	}
	for _, r := range held {
		r.Complete()
	}
	waitFor(t, ctx, "data buffers back", func() bool { _, _, inUse := l.SharedBytes(); return inUse == 0 })
}

// TestSRQTeardownReturnsBuffers: a queue torn down while its commands
// wait for the data pool gives back their SRQ buffers, and the pool
// buffer its handler held comes back when the handler completes the
// command late. With an SRQ of 8 buffers and a one-unit pool, a second
// queue then runs 200 commands at QD6: a leak of either would stall it.
func TestSRQTeardownReturnsBuffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const port = 4447
	tdev, hdev := openSoft(t, pidAddr(35)), openSoft(t, pidAddr(36))
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: port, DataPoolBytes: 1, SRQSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.UsesSRQ() {
		t.Fatal("the soft provider's port has no SRQ")
	}
	hold := &holdHandler{got: make(chan *fabrics.Request, 8), closed: make(chan error, 1)}
	mem := &memHandler{closed: make(chan error, 1)}
	go func() {
		for _, h := range []fabrics.CommandHandler{hold, mem} {
			q, err := l.Accept(ctx)
			if err != nil {
				return
			}
			q.Serve(h)
		}
	}()
	d := NewDialer(HostConfig{Device: hdev})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(35), ServiceID: port}
	hq, err := d.Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// The Connect, held by the handler: answered here.
		r := <-hold.got
		r.Complete()
	}()
	fabricsConnect(t, ctx, hq)
	// One 128 KiB read held by the handler (the pool's only unit), five
	// more waiting for it, each in an SRQ buffer.
	submitAsync(t, hq, 0x02, make([]byte, 128<<10), fabrics.DirCtrlToHost)
	var held *fabrics.Request
	select {
	case held = <-hold.got:
	case <-ctx.Done():
		t.Fatal("first command not delivered")
	}
	for range 5 {
		submitAsync(t, hq, 0x02, make([]byte, 64<<10), fabrics.DirCtrlToHost)
	}
	waitFor(t, ctx, "the five commands waiting in the SRQ's buffers", func() bool { return poolWaiters(l) == 5 })
	hq.Close()
	select {
	case <-hold.closed:
	case <-ctx.Done():
		t.Fatal("queue not torn down")
	}
	held.Complete()
	waitFor(t, ctx, "the pool's unit back", func() bool { _, _, inUse := l.SharedBytes(); return inUse == 0 })
	if n := l.rpool.out.Load(); n != 0 {
		t.Fatalf("%d SRQ buffers not given back after the teardown", n)
	}
	// A second queue runs on what came back.
	hq2, err := d.Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer hq2.Close()
	fabricsConnect(t, ctx, hq2)
	var pending []<-chan *fabrics.HostCommand
	for i := range 200 {
		if len(pending) == 6 {
			c := waitDone(t, ctx, pending[0])
			if c.Err != nil || !nvme.CQE(c.CQE[:]).Status().Success() {
				t.Fatalf("command %d: %v %v", i, c.Err, nvme.CQE(c.CQE[:]).Status())
			}
			pending = pending[1:]
		}
		op, dir := byte(0x01), fabrics.DirHostToCtrl
		if i%2 == 1 {
			op, dir = 0x02, fabrics.DirCtrlToHost
		}
		pending = append(pending, submitAsync(t, hq2, op, make([]byte, 64<<10), dir))
	}
	for _, p := range pending {
		if c := waitDone(t, ctx, p); c.Err != nil {
			t.Fatal(c.Err)
		}
	}
}

// poolWaiters counts the commands waiting for a buffer of l's data pool.
func poolWaiters(l *Listener) int {
	l.pool.mu.Lock()
	defer l.pool.mu.Unlock()
	n := 0
	for w := l.pool.wait.head; w != nil; w = w.next {
		n++
	}
	return n
}

// TestTargetPoolResumeOneAtATime: commands resumed by a returned pool
// buffer run on the goroutine that returned it (another queue's, a
// backend's, or this queue's own handler when it completes at once);
// the handler must still see each queue's commands one at a time, as
// TargetQueue.Serve promises and the target core relies on (its inline
// backends share one worker per queue). Two queues of 14 commands each
// over a one-unit pool, completed inline and from other goroutines.
func TestTargetPoolResumeOneAtATime(t *testing.T) {
	for _, c := range []struct {
		name   string
		port   uint16
		inline bool
	}{{"inline", 4446, true}, {"async", 4447, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tdev, hdev := openSoft(t, pidAddr(37)), openSoft(t, pidAddr(38))
			l, err := Listen(TargetConfig{Device: tdev, ServiceID: c.port, DataPoolBytes: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var overlaps atomic.Int64
			go func() {
				for range 2 {
					q, err := l.Accept(ctx)
					if err != nil {
						return
					}
					q.Serve(&serialCheck{inline: c.inline, overlaps: &overlaps})
				}
			}()
			d := NewDialer(HostConfig{Device: hdev})
			var hqs []fabrics.HostQueue
			for qid := uint16(1); qid <= 2; qid++ {
				hq, err := d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(37), ServiceID: c.port},
					fabrics.QueueParams{QID: qid, SQSize: 16, RQSize: 16})
				if err != nil {
					t.Fatal(err)
				}
				defer hq.Close()
				fabricsConnect(t, ctx, hq)
				hqs = append(hqs, hq)
			}
			for round := range 4 {
				var all []<-chan *fabrics.HostCommand
				for i := range 14 {
					for _, hq := range hqs {
						op, dir := byte(0x01), fabrics.DirHostToCtrl
						if (i+round)%2 == 1 {
							op, dir = 0x02, fabrics.DirCtrlToHost
						}
						all = append(all, submitAsync(t, hq, op, make([]byte, 128<<10), dir))
					}
				}
				for i, done := range all {
					cmd := waitDone(t, ctx, done)
					if cmd.Err != nil || !nvme.CQE(cmd.CQE[:]).Status().Success() {
						t.Fatalf("round %d command %d: %v, status %v", round, i, cmd.Err, nvme.CQE(cmd.CQE[:]).Status())
					}
				}
			}
			if n := overlaps.Load(); n != 0 {
				t.Fatalf("the handler was entered %d times while it ran for the same queue", n)
			}
		})
	}
}

// serialCheck counts entries into HandleCommand that overlap another
// one of its queue, and completes commands inline or from a new
// goroutine.
type serialCheck struct {
	in       atomic.Int32
	inline   bool
	overlaps *atomic.Int64
}

func (h *serialCheck) HandleCommand(r *fabrics.Request) {
	if h.in.Add(1) != 1 {
		h.overlaps.Add(1)
	}
	nvme.CQE(r.CQE[:]).SetDW0(uint32(len(r.Data)))
	if h.inline {
		r.Complete()
	} else {
		go r.Complete()
	}
	h.in.Add(-1)
}

func (h *serialCheck) QueueClosed(error) {}
