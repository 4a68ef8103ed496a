package bdev

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// testPlug is a transport goroutine's plug (fabrics.SubmitPlug's
// contract): backends join it, flush makes each submit.
type testPlug struct {
	held  []interface{ FlushPlug() }
	joins int
}

func (p *testPlug) Join(f interface{ FlushPlug() }) {
	p.joins++
	for _, g := range p.held {
		if g == f {
			return
		}
	}
	p.held = append(p.held, f)
}

func (p *testPlug) flush() {
	for _, f := range p.held {
		f.FlushPlug()
	}
	p.held = nil
}

// pluggedWaiter is a waiter whose operations may wait in plug.
type pluggedWaiter struct {
	waiter
	plug *testPlug
}

func (w pluggedWaiter) SubmitPlug() Plug { return w.plug }

// startPlugged starts n 4 KiB reads of d (blocks 0 to n-1) held in a new
// plug; w has room for extra completions.
func startPlugged(d *File, n, extra int) (*testPlug, pluggedWaiter) {
	plug := &testPlug{}
	w := pluggedWaiter{make(waiter, n+extra), plug}
	for i := range n {
		d.ReadAsync(alignedBuf(4096, 4096), int64(i)*4096, w)
	}
	return plug, w
}

// heldCount returns the engine's held SQEs.
func heldCount(e *engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held)
}

// TestPlugHoldsUntilFlush: operations started with a plug are prepared
// and not submitted (none can complete) until the plug is flushed; the
// engine joins once however many it holds; then all complete, with the
// right data.
func TestPlugHoldsUntilFlush(t *testing.T) {
	d := openAsyncFile(t, Spec{Size: 1 << 20})
	const n = 8
	for i := range n {
		if _, err := d.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 4096), int64(i)*4096); err != nil {
			t.Fatal(err)
		}
	}
	plug := &testPlug{}
	w := pluggedWaiter{make(waiter, n), plug}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = alignedBuf(4096, 4096)
		d.ReadAsync(bufs[i], int64(i)*4096, w)
	}
	if got := heldCount(d.eng); got != n {
		t.Fatalf("%d SQEs held before the flush, want %d", got, n)
	}
	if len(w.waiter) != 0 {
		t.Fatal("an operation completed before the plug was flushed")
	}
	if plug.joins != n || len(plug.held) != 1 {
		t.Fatalf("%d joins, %d backends in the plug; want %d and 1", plug.joins, len(plug.held), n)
	}
	plug.flush()
	for range n {
		if err := w.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range bufs {
		if b[0] != byte(i+1) || b[4095] != byte(i+1) {
			t.Fatalf("block %d read %d..%d", i, b[0], b[4095])
		}
	}
	if got := heldCount(d.eng); got != 0 {
		t.Fatalf("%d SQEs held after the flush", got)
	}
}

// TestPlugTakenAlong: an operation started without a plug submits the
// held ones with it; the plug's flush then has nothing left to submit.
func TestPlugTakenAlong(t *testing.T) {
	d := openAsyncFile(t, Spec{Size: 1 << 20})
	plug, w := startPlugged(d, 4, 1)
	d.ReadAsync(alignedBuf(4096, 4096), 0, w.waiter) // no plug
	for range 5 {
		if err := w.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	if got := heldCount(d.eng); got != 0 {
		t.Fatalf("%d SQEs held after an unplugged submission", got)
	}
	plug.flush() // nothing held: no io_uring_enter, no completion
	if len(w.waiter) != 0 {
		t.Fatal("a completion after the empty flush")
	}
}

// TestCloseSubmitsHeld: a device closed while a plug holds operations
// runs them (Close waits for them) instead of hanging; the plug's late
// flush is harmless.
func TestCloseSubmitsHeld(t *testing.T) {
	d := openAsyncFile(t, Spec{Size: 1 << 20})
	plug, w := startPlugged(d, 4, 0)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := w.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	plug.flush()
}

// TestPlugRefused: when io_uring_enter fails, every held operation the
// kernel did not take fails with the error (none runs later), the ring
// stays usable, and a later operation completes.
func TestPlugRefused(t *testing.T) {
	d := openAsyncFile(t, Spec{Size: 1 << 20})
	plug, w := startPlugged(d, 3, 0)
	d.eng.mu.Lock()
	d.eng.submit = func(uint32) error { return syscall.EAGAIN }
	d.eng.mu.Unlock()
	plug.flush()
	for range 3 {
		if err := w.wait(t); !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("held operation refused by the kernel: %v, want EAGAIN", err)
		}
	}
	d.eng.mu.Lock()
	d.eng.submit = d.eng.ring.Submit
	inflight := d.eng.inflight
	d.eng.mu.Unlock()
	if inflight != 0 || heldCount(d.eng) != 0 {
		t.Fatalf("after the refusal: %d in flight, %d held", inflight, heldCount(d.eng))
	}
	d.ReadAsync(alignedBuf(4096, 4096), 0, w.waiter)
	if err := w.wait(t); err != nil {
		t.Fatalf("read after the refusal: %v", err)
	}
}
