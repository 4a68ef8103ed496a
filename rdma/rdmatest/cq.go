package rdmatest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Tests of completion queues: Poll, Wait, Notify, Destroy and the
// optional completion handler.

// testCQPollWait: Poll on an empty CQ returns 0 and Wait times out; Wait
// returns once a completion is queued; Poll hands completions out in
// order, as many as fit; once they are all polled, Wait blocks again.
func testCQPollWait(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	var wc [8]rdma.WorkCompletion
	if n := b.rcq.Poll(wc[:]); n != 0 {
		t.Fatalf("Poll on an empty CQ: %d completions %s", n, wcsString(wc[:n]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := b.rcq.Wait(ctx)
	cancel()
	wantErr(t, "Wait on an empty CQ", err, context.DeadlineExceeded)
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	wantErr(t, "Wait with a cancelled context", b.rcq.Wait(ctx), context.Canceled)

	const k = 5
	src := a.reg(k, 0, 70)
	dst := b.reg(k*8, rdma.AccessLocalWrite, 71)
	wrs := make([]rdma.SendWR, k)
	for i := range wrs {
		postRecv(t, b.qp, uint64(100+i), sge(dst, i*8, 8))
		wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, i+1)}}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	postSend(t, a.qp, &wrs[0])
	// Receives one at a time, sends two at a time.
	for _, c := range []struct {
		cq    rdma.CQ
		batch int
		first uint64
	}{{b.rcq, 1, 100}, {a.scq, 2, 0}} {
		got := 0
		ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
		for got < k {
			n := c.cq.Poll(wc[:c.batch])
			if n > c.batch {
				t.Fatalf("Poll into %d entries returned %d", c.batch, n)
			}
			for _, w := range wc[:n] {
				if w.WRID != c.first+uint64(got) || w.Status != rdma.Success {
					t.Errorf("completion %d: %s, want WRID %#x", got, wcString(w), c.first+uint64(got))
				}
				got++
			}
			if n == 0 {
				if err := c.cq.Wait(ctx); err != nil {
					t.Fatalf("Wait after %d of %d completions: %v", got, k, err)
				}
			}
		}
		cancel()
		if n := c.cq.Poll(wc[:]); n != 0 {
			t.Errorf("completions beyond the %d expected: %s", k, wcsString(wc[:n]))
		}
	}
	for i := range k {
		checkPattern(t, "message", dst.Bytes()[i*8:i*8+i+1], 70, 0)
	}
	// Polled empty, with nothing in flight: Wait blocks (the API: "until
	// at least one completion is queued") until its deadline.
	for _, cq := range []rdma.CQ{a.scq, b.rcq} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := cq.Wait(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait on a CQ polled empty: %v (Poll then finds %d), want it to block until the deadline", err, cq.Poll(wc[:]))
		}
	}
}

// testCQNotify: after the consumer polled the CQ empty, Notify's channel
// receives a token when a completion is added.
func testCQNotify(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	src := a.reg(8, 0, 72)
	dst := b.reg(8, rdma.AccessLocalWrite, 73)
	var wc [4]rdma.WorkCompletion
	for round := range 3 {
		for _, cq := range []rdma.CQ{a.scq, b.rcq} {
			cq.Poll(wc[:])
			select { // a token left from earlier completions
			case <-cq.Notify():
			default:
			}
		}
		postRecv(t, b.qp, uint64(round), sge(dst, 0, 8))
		postSend(t, a.qp, &rdma.SendWR{WRID: uint64(round), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 8)}})
		for _, cq := range []rdma.CQ{b.rcq, a.scq} {
			timer := time.NewTimer(e.o.Timeout)
			n := 0
			for n == 0 {
				if n = cq.Poll(wc[:]); n > 0 {
					break
				}
				select {
				case <-cq.Notify():
				case <-timer.C:
					t.Fatalf("round %d: no notification within %v", round, e.o.Timeout)
				}
			}
			timer.Stop()
			if n != 1 || wc[0].WRID != uint64(round) || wc[0].Status != rdma.Success {
				t.Errorf("round %d: completions %s", round, wcsString(wc[:n]))
			}
		}
	}
	// No check that no token comes without a completion: a provider whose
	// events arrive asynchronously (a completion channel) may deliver the
	// token of a completion the consumer already polled, which the
	// consumer's poll-then-wait loop absorbs.
}

// testCQDestroyWakesWait: destroying a CQ ends a Wait on it with an
// error wrapping ErrClosed; a later Wait fails at once the same way.
func testCQDestroyWakesWait(t *testing.T, e *env) {
	cq, err := e.a.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	waiting := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(waiting)
		done <- cq.Wait(ctx)
	}()
	<-waiting
	if err := cq.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	select {
	case err := <-done:
		wantErr(t, "Wait on a CQ destroyed meanwhile", err, rdma.ErrClosed)
	case <-ctx.Done():
		t.Fatalf("Wait did not return within %v of Destroy", e.o.Timeout)
	}
	wantErr(t, "Wait on a destroyed CQ", cq.Wait(ctx), rdma.ErrClosed)
}

// testCQHandler: a HandlerCQ delivers completions to its handler in
// order, one call at a time, while Poll and Wait see nothing; the
// handler may post work (here it reposts each receive); SetHandler(nil)
// returns the CQ to polling.
func testCQHandler(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{rnrRetry: 7})
	hcq, ok := b.rcq.(rdma.HandlerCQ)
	if !ok {
		t.Skipf("the provider's CQ (%T) does not implement rdma.HandlerCQ", b.rcq)
	}
	const slots, k, size = 4, 24, 256
	src := a.reg(k*size, 0, 80)
	dst := b.reg(slots*size, rdma.AccessLocalWrite, 81)
	recvs := make([]rdma.RecvWR, slots)
	for i := range recvs {
		recvs[i] = rdma.RecvWR{WRID: uint64(i), SGL: []rdma.SGE{sge(dst, i*size, size)}}
	}
	type result struct {
		wc rdma.WorkCompletion
		ok bool // the data was the message's
	}
	got := make(chan result, k+8)
	var inflight, overlap atomic.Int32
	var next atomic.Uint64 // the message the next receive completion carries
	hcq.SetHandler(func(wcs []rdma.WorkCompletion) {
		if inflight.Add(1) > 1 {
			overlap.Add(1)
		}
		defer inflight.Add(-1)
		for _, wc := range wcs {
			m := next.Add(1) - 1
			slot := int(wc.WRID)
			ok := wc.Status == rdma.Success && slot < slots && int(wc.ByteLen) == size
			if ok {
				want := src.Bytes()[int(m)*size : int(m+1)*size]
				ok = string(dst.Bytes()[slot*size:(slot+1)*size]) == string(want)
			}
			if wc.Status == rdma.Success && slot < slots {
				if err := b.qp.PostRecv(&recvs[slot]); err != nil {
					ok = false
				}
			}
			select {
			case got <- result{wc, ok}:
			default: // never block the provider's goroutine
			}
		}
	})
	defer hcq.SetHandler(nil)
	for i := range recvs {
		postRecv(t, b.qp, recvs[i].WRID, recvs[i].SGL...)
	}
	wrs := make([]rdma.SendWR, k)
	for i := range wrs {
		wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, i*size, size)}}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	postSend(t, a.qp, &wrs[0])
	timer := time.NewTimer(e.o.Timeout)
	defer timer.Stop()
	for i := range k {
		select {
		case r := <-got:
			if r.wc.WRID != uint64(i%slots) || !r.ok {
				t.Errorf("handler completion %d: %s (data as sent: %v), want WRID %d", i, wcString(r.wc), r.ok, i%slots)
			}
		case <-timer.C:
			t.Fatalf("%d of %d completions reached the handler within %v", i, k, e.o.Timeout)
		}
	}
	e.waitWC(t, a.scq, k, "sends to the handler's QP")
	var wc [4]rdma.WorkCompletion
	if n := b.rcq.Poll(wc[:]); n != 0 {
		t.Errorf("Poll with a handler set returned %s", wcsString(wc[:n]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := b.rcq.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a handler set: %v, want the deadline", err)
	}
	if n := overlap.Load(); n > 0 {
		t.Errorf("the handler ran concurrently with itself %d times", n)
	}
	// Without the handler, completions queue for Poll again.
	hcq.SetHandler(nil)
	postSend(t, a.qp, &rdma.SendWR{WRID: 99, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, size)}})
	rc := e.waitWC(t, b.rcq, 1, "receive after SetHandler(nil)")[0]
	checkRecv(t, rc, uint64(k%slots), rdma.WCRecv, b.qp.QPN(), size)
	if len(got) != 0 {
		t.Errorf("the handler ran after SetHandler(nil) returned")
	}
}
