package fio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
)

// fakeNS is a namespace in memory whose I/O can be held back: each request
// waits for a token on gate when gate is set.
type fakeNS struct {
	mu   sync.Mutex
	data []byte
	gate chan struct{}
	// done, when set, gets a token after each request's completion
	// callback has run.
	done   chan struct{}
	trims  int
	flush  int
	failAt int64 // offset whose I/O fails with failErr
	failEr error
}

func newFakeNS(size int) *fakeNS { return &fakeNS{data: make([]byte, size), failAt: -1} }

func (f *fakeNS) wait(off int64) error {
	if f.gate != nil {
		<-f.gate
	}
	if off == f.failAt {
		return f.failEr
	}
	return nil
}

func (f *fakeNS) ReadAt(p []byte, off int64) (int, error) {
	if err := f.wait(off); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := copy(p, f.data[min(off, int64(len(f.data))):])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *fakeNS) WriteAt(p []byte, off int64) (int, error) {
	if err := f.wait(off); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return copy(f.data[off:], p), nil
}

func (f *fakeNS) Trim(off, n int64) error {
	if err := f.wait(off); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.data[off : off+n])
	f.trims++
	return nil
}

func (f *fakeNS) Flush() error {
	if err := f.wait(-2); err != nil {
		return err
	}
	f.mu.Lock()
	f.flush++
	f.mu.Unlock()
	return nil
}

// Start runs x on the caller's goroutine (completing inline, as a
// transport may) unless gate is set, then on a goroutine of its own.
func (f *fakeNS) Start(x *initiator.IO) {
	if f.gate != nil {
		go f.run(x)
		return
	}
	f.run(x)
}

func (f *fakeNS) run(x *initiator.IO) {
	switch x.Op {
	case initiator.OpRead:
		x.N, x.Err = f.ReadAt(x.Buf, x.Off)
	case initiator.OpWrite:
		x.N, x.Err = f.WriteAt(x.Buf, x.Off)
	case initiator.OpTrim:
		x.Err = f.Trim(x.Off, x.Len)
	case initiator.OpFlush:
		x.Err = f.Flush()
	default:
		x.Err = fmt.Errorf("fake: operation %v", x.Op)
	}
	x.Done(x)
	if f.done != nil {
		f.done <- struct{}{}
	}
}

func (f *fakeNS) Size() int64    { return int64(len(f.data)) }
func (f *fakeNS) BlockSize() int { return 512 }

func fakeEngine(t *testing.T, depth int, ns *fakeNS) *Engine {
	t.Helper()
	e := newEngine(Config{Depth: depth}, nil, ns)
	t.Cleanup(func() { e.Close() })
	return e
}

// reapAll reaps until n completions have come, failing after 10 s.
func reapAll(t *testing.T, e *Engine, n int) []Completion {
	t.Helper()
	out := make([]Completion, e.Depth())
	var all []Completion
	deadline := time.Now().Add(10 * time.Second)
	for len(all) < n {
		if time.Now().After(deadline) {
			t.Fatalf("reaped %d of %d", len(all), n)
		}
		got := e.Reap(1, len(out), time.Second, out)
		all = append(all, out[:got]...)
	}
	return all
}

// TestReapWaitsAcrossWakeups: Reap(min) gathers completions that arrive
// one by one (each a separate wake-up) and keeps Pending exact. A Reap that
// counted the same completions twice would return early afterwards.
func TestReapWaitsAcrossWakeups(t *testing.T) {
	ns := newFakeNS(1 << 20)
	ns.gate = make(chan struct{})
	ns.done = make(chan struct{}, 8)
	e := fakeEngine(t, 8, ns)
	buf := make([]byte, 8*4096)
	for i := range 8 {
		if err := e.Submit(i, Request{Op: OpRead, Buf: buf[i*4096 : (i+1)*4096], Off: int64(i) * 4096}); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.Pending(); got != 8 {
		t.Fatalf("Pending() = %d, want 8", got)
	}
	// One request at a time: the next is let go once the previous one has
	// completed, so that each completion is a wake-up of its own.
	go func() {
		for range 8 {
			ns.gate <- struct{}{}
			<-ns.done
		}
	}()
	out := make([]Completion, 8)
	n := e.Reap(5, 8, -1, out)
	if n < 5 {
		t.Fatalf("Reap(min 5) = %d", n)
	}
	if got := e.Pending(); got != 8-n {
		t.Fatalf("Pending() after reaping %d = %d, want %d", n, got, 8-n)
	}
	m := e.Reap(8-n, 8, -1, out[n:])
	if n+m != 8 || e.Pending() != 0 {
		t.Fatalf("reaped %d+%d, Pending %d", n, m, e.Pending())
	}
	seen := map[int32]bool{}
	for _, c := range out {
		if c.Errno != 0 || c.Resid != 0 || seen[c.Slot] {
			t.Errorf("completion %+v (seen before: %t)", c, seen[c.Slot])
		}
		seen[c.Slot] = true
	}
}

func TestReapTimeoutAndPoll(t *testing.T) {
	ns := newFakeNS(1 << 20)
	ns.gate = make(chan struct{})
	e := fakeEngine(t, 4, ns)
	out := make([]Completion, 4)
	// Nothing outstanding: min is capped at 0, no wait even without a limit.
	if n := e.Reap(4, 4, -1, out); n != 0 {
		t.Fatalf("Reap with nothing outstanding = %d", n)
	}
	buf := make([]byte, 4096)
	if err := e.Submit(2, Request{Op: OpWrite, Buf: buf, Off: 4096}); err != nil {
		t.Fatal(err)
	}
	if n := e.Reap(0, 4, 0, out); n != 0 {
		t.Fatalf("poll = %d", n)
	}
	t0 := time.Now()
	if n := e.Reap(1, 4, 30*time.Millisecond, out); n != 0 {
		t.Fatalf("Reap before completion = %d", n)
	}
	if d := time.Since(t0); d < 30*time.Millisecond || d > 5*time.Second {
		t.Errorf("Reap with a 30 ms timeout took %v", d)
	}
	if err := e.Submit(2, Request{Op: OpRead, Buf: buf}); !errors.Is(err, ErrBusy) {
		t.Errorf("Submit on a busy slot: %v, want ErrBusy", err)
	}
	if err := e.Submit(4, Request{Op: OpRead, Buf: buf}); !errors.Is(err, ErrBusy) {
		t.Errorf("Submit on slot 4 of 4: %v, want ErrBusy", err)
	}
	ns.gate <- struct{}{}
	if n := e.Reap(1, 4, 5*time.Second, out); n != 1 || out[0].Slot != 2 {
		t.Fatalf("Reap after completion = %d %+v", n, out[0])
	}
	// The timer fired and was reset: a later wait still works.
	ns.gate = nil
	if err := e.Submit(2, Request{Op: OpRead, Buf: buf, Off: 4096}); err != nil {
		t.Fatal(err)
	}
	if n := e.Reap(1, 1, time.Second, out); n != 1 {
		t.Fatalf("second Reap = %d", n)
	}
}

func TestOpsAndErrors(t *testing.T) {
	ns := newFakeNS(64 << 10)
	ns.failAt, ns.failEr = 8192, &initiator.CommandError{Err: &nvme.Error{Status: nvme.StatusLBAOutOfRange}}
	e := fakeEngine(t, 4, ns)
	w := bytes.Repeat([]byte{0xa5}, 4096)
	r := make([]byte, 4096)
	tail := make([]byte, 8192)
	steps := []struct {
		req   Request
		errno syscall.Errno
		resid int64
	}{
		{Request{Op: OpWrite, Buf: w, Off: 4096}, 0, 0},
		{Request{Op: OpRead, Buf: r, Off: 4096}, 0, 0},
		{Request{Op: OpFlush}, 0, 0},
		{Request{Op: OpTrim, Off: 4096, Len: 4096}, 0, 0},
		{Request{Op: OpWrite, Buf: w, Off: 8192}, syscall.EREMOTEIO, 4096},
		{Request{Op: OpRead, Buf: tail, Off: 60 << 10}, 0, 4096}, // short read at the end
		{Request{Op: Op(9)}, syscall.EINVAL, 0},
	}
	for i, s := range steps {
		if err := e.Submit(i%4, s.req); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		c := reapAll(t, e, 1)[0]
		if c.Errno != s.errno || c.Resid != s.resid {
			t.Errorf("step %d (%v): errno %v resid %d, want %v %d (%v)", i, s.req.Op, c.Errno, c.Resid, s.errno, s.resid, e.Err(int(c.Slot)))
		}
		if i == 1 && !bytes.Equal(r, w) {
			t.Error("read back differs from the write")
		}
	}
	if ns.flush != 1 || ns.trims != 1 || ns.data[4096] != 0 {
		t.Errorf("flushes %d, trims %d, trimmed byte %#x", ns.flush, ns.trims, ns.data[4096])
	}
	e.Close()
	if err := e.Submit(0, Request{Op: OpFlush}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{syscall.EINVAL, syscall.EINVAL},
		{fmt.Errorf("x: %w", initiator.ErrNotSupported), syscall.EOPNOTSUPP},
		{&initiator.TimeoutError{}, syscall.ETIMEDOUT},
		{initiator.ErrControllerLost, syscall.ENOTCONN},
		{ErrClosed, syscall.ENOTCONN},
		{fmt.Errorf("x: %w", initiator.ErrNoNamespace), syscall.ENODEV},
		{&nvme.Error{Status: nvme.StatusCapacityExceeded}, syscall.ENOSPC},
		{&nvme.Error{Status: nvme.StatusInvalidOpcode}, syscall.EOPNOTSUPP},
		{&nvme.Error{Status: nvme.StatusReservationConflict}, syscall.EBADE},
		{&nvme.Error{Status: nvme.MakeStatus(nvme.SCTMediaError, 0x81)}, syscall.ENODATA},
		{&nvme.Error{Status: nvme.MakeStatus(nvme.SCTMediaError, 0x82)}, syscall.EILSEQ},
		{&nvme.Error{Status: nvme.MakeStatus(nvme.SCTPathRelated, 0x70)}, syscall.ENOLINK},
		{&nvme.Error{Status: nvme.StatusInternalError}, syscall.EIO},
		{errors.New("anything"), syscall.EIO},
	} {
		if got := Errno(tc.err); got != tc.want {
			t.Errorf("Errno(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		in      Config
		want    Config
		wantErr bool
	}{
		{in: Config{Transport: "loop"}, want: Config{Transport: "loop", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: DefaultLoopNQN, NSID: 1, LoopSize: DefaultLoopSize, Depth: 1, Provider: "auto"}},
		{in: Config{SubNQN: "nqn.2026-11.io.nvmeof:x", Depth: 32, NSID: 3}, want: Config{Transport: "rdma", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: "nqn.2026-11.io.nvmeof:x", NSID: 3, LoopSize: DefaultLoopSize, Depth: 32, Provider: "auto"}},
		{in: Config{SubNQN: "nqn.2026-11.io.nvmeof:x", Provider: "soft"}, want: Config{Transport: "rdma", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: "nqn.2026-11.io.nvmeof:x", NSID: 1, LoopSize: DefaultLoopSize, Depth: 1, Provider: "soft"}},
		{in: Config{SubNQN: "nqn.2026-11.io.nvmeof:x", Provider: "hw"}, wantErr: true},
		{in: Config{SubNQN: "nqn.2026-11.io.nvmeof:x", Provider: "soft", Device: "mlx5_0"}, wantErr: true},
		{in: Config{SubNQN: "nqn.2026-11.io.nvmeof:x", Provider: "ibverbs"}, wantErr: !ibverbs.Built,
			want: Config{Transport: "rdma", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: "nqn.2026-11.io.nvmeof:x", NSID: 1, LoopSize: DefaultLoopSize, Depth: 1, Provider: "ibverbs"}},
		{in: Config{}, wantErr: true}, // rdma needs subnqn
		{in: Config{Transport: "tcp", SubNQN: "nqn.2026-11.io.nvmeof:x"}, want: Config{Transport: "tcp", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: "nqn.2026-11.io.nvmeof:x", NSID: 1, LoopSize: DefaultLoopSize, Depth: 1, Provider: "auto"}},
		{in: Config{Transport: "tcp"}, wantErr: true}, // tcp needs subnqn
		// poll_sleep=auto is decided by the connected queue (newEngine).
		{in: Config{Transport: "tcp", SubNQN: "nqn.2026-11.io.nvmeof:x", PollSleepAuto: true, BusyPoll: 50 * time.Microsecond},
			want: Config{Transport: "tcp", Traddr: DefaultTraddr, Trsvcid: 4420, SubNQN: "nqn.2026-11.io.nvmeof:x", NSID: 1, LoopSize: DefaultLoopSize, Depth: 1, Provider: "auto",
				PollSleepAuto: true, BusyPoll: 50 * time.Microsecond}},
		{in: Config{Transport: "loop", Trsvcid: 70000}, wantErr: true},
	} {
		got, err := tc.in.withDefaults()
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v: error %v", tc.in, err)
			continue
		}
		if err != nil {
			continue
		}
		got.Logger = nil
		if got != tc.want {
			t.Errorf("%+v:\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
}

func TestHostAddr(t *testing.T) {
	a, err := hostAddr("", mustAddr("127.0.0.1"))
	if err != nil || a.String() != LoopbackHostAddr {
		t.Errorf("loopback target: %v %v", a, err)
	}
	a, err = hostAddr("10.1.2.3", mustAddr("127.0.0.1"))
	if err != nil || a.String() != "10.1.2.3" {
		t.Errorf("explicit: %v %v", a, err)
	}
	if _, err := hostAddr("bogus", mustAddr("127.0.0.1")); err == nil {
		t.Error("bad host_traddr: no error")
	}
}

// TestLoopEngine runs I/O through the real initiator against the
// in-process loop target, from two engines that share it.
func TestLoopEngine(t *testing.T) {
	cfg := Config{Transport: fabrics.TransportLoop, Trsvcid: 14420, SubNQN: "nqn.2026-11.io.nvmeof:fio-unit", LoopSize: 16 << 20, Depth: 16, NrIOQueues: 2}
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if e.Size() != 16<<20 || e.BlockSize() != 512 || e.Controller() == nil {
		t.Fatalf("size %d, block size %d", e.Size(), e.BlockSize())
	}
	const bs = 4096
	bufs := make([]byte, 16*bs)
	for i := range bufs {
		bufs[i] = byte(i*7 + i/bs)
	}
	for i := range 16 {
		if err := e.Submit(i, Request{Op: OpWrite, Buf: bufs[i*bs : (i+1)*bs], Off: int64(i) * 3 * bs}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range reapAll(t, e, 16) {
		if c.Errno != 0 {
			t.Fatalf("write slot %d: %v", c.Slot, e.Err(int(c.Slot)))
		}
	}
	if err := e.Submit(0, Request{Op: OpFlush}); err != nil {
		t.Fatal(err)
	}
	if c := reapAll(t, e, 1)[0]; c.Errno != 0 {
		t.Fatalf("flush: %v", e.Err(0))
	}
	// Past the end: an error, not a hang.
	if err := e.Submit(0, Request{Op: OpWrite, Buf: bufs[:bs], Off: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if c := reapAll(t, e, 1)[0]; c.Errno == 0 {
		t.Error("write past the end succeeded")
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}

	// A second engine (the next fio job) sees the same target and data.
	e2, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	got := make([]byte, len(bufs))
	for i := range 16 {
		if err := e2.Submit(i, Request{Op: OpRead, Buf: got[i*bs : (i+1)*bs], Off: int64(i) * 3 * bs}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range reapAll(t, e2, 16) {
		if c.Errno != 0 {
			t.Fatalf("read slot %d: %v", c.Slot, e2.Err(int(c.Slot)))
		}
	}
	if !bytes.Equal(got, bufs) {
		t.Fatal("read back differs")
	}
	if err := e2.Submit(3, Request{Op: OpTrim, Off: 0, Len: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if c := reapAll(t, e2, 1)[0]; c.Errno != 0 {
		t.Fatalf("trim: %v", e2.Err(3))
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{Transport: "loop", Trsvcid: 14421, SubNQN: "nqn.2026-11.io.nvmeof:fio-unit2", NSID: 7, LoopSize: 1 << 20})
	if err != nil {
		t.Fatalf("loop target with nsid 7: %v", err)
	}
	e.Close()
	// The target exists now with namespace 7 only: namespace 1 is not there.
	if _, err := Open(ctx, Config{Transport: "loop", Trsvcid: 14421, SubNQN: "nqn.2026-11.io.nvmeof:fio-unit2", NSID: 1}); err == nil {
		t.Error("missing namespace: no error")
	}
	if _, err := Open(ctx, Config{Transport: "loop", SubNQN: "not an nqn"}); err == nil {
		t.Error("bad NQN: no error")
	}
}

// TestSteadyStateAllocs: the engine's own submit/complete/reap path
// allocates nothing per I/O.
func TestSteadyStateAllocs(t *testing.T) {
	ns := newFakeNS(1 << 20)
	e := fakeEngine(t, 4, ns)
	buf := make([]byte, 4096)
	out := make([]Completion, 4)
	allocs := testing.AllocsPerRun(200, func() {
		if err := e.Submit(1, Request{Op: OpRead, Buf: buf, Off: 8192}); err != nil {
			t.Fatal(err)
		}
		if n := e.Reap(1, 4, time.Second, out); n != 1 {
			t.Fatalf("Reap = %d", n)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per I/O, want 0", allocs)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// BenchmarkLoopRead4K measures one 4 KiB read through the engine, the
// initiator and the loop transport, at queue depth 1 and 16.
func BenchmarkLoopRead4K(b *testing.B) {
	for _, depth := range []int{1, 16} {
		b.Run(fmt.Sprintf("qd%d", depth), func(b *testing.B) {
			e, err := Open(context.Background(), Config{Transport: fabrics.TransportLoop, Trsvcid: 14422, SubNQN: "nqn.2026-11.io.nvmeof:fio-bench", LoopSize: 16 << 20, Depth: depth, NrIOQueues: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			buf := make([]byte, depth*4096)
			out := make([]Completion, depth)
			b.SetBytes(4096)
			b.ReportAllocs()
			b.ResetTimer()
			submitted := 0
			for i := range depth {
				if submitted < b.N {
					_ = e.Submit(i, Request{Op: OpRead, Buf: buf[i*4096 : (i+1)*4096], Off: int64(i) * 4096})
					submitted++
				}
			}
			for done := 0; done < b.N; {
				n := e.Reap(1, depth, -1, out)
				done += n
				for _, c := range out[:n] {
					if c.Errno != 0 {
						b.Fatal(e.Err(int(c.Slot)))
					}
					if submitted < b.N {
						_ = e.Submit(int(c.Slot), Request{Op: OpRead, Buf: buf[c.Slot*4096 : (c.Slot+1)*4096], Off: int64(c.Slot) * 4096})
						submitted++
					}
				}
			}
		})
	}
}

// TestCloseWaitsForInFlight: Close returns only once the requests in
// flight have completed (their buffers are then the caller's again). In a
// synctest bubble: once every goroutine is blocked, Close must still be
// waiting for the second request, with no time allowed to pass.
func TestCloseWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := newFakeNS(1 << 20)
		ns.gate = make(chan struct{})
		defer close(ns.gate) // lets requests still held go if the test fails
		e := newEngine(Config{Depth: 2}, nil, ns)
		buf := make([]byte, 8192)
		for i := range 2 {
			if err := e.Submit(i, Request{Op: OpWrite, Buf: buf[i*4096 : (i+1)*4096], Off: int64(i) * 4096}); err != nil {
				t.Fatal(err)
			}
		}
		closed := make(chan error, 1)
		go func() { closed <- e.Close() }()
		ns.gate <- struct{}{}
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("Close returned with a request in flight")
		default:
		}
		ns.gate <- struct{}{}
		synctest.Wait()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Close did not return once the requests completed")
		}
		if n := e.Reap(2, 2, 0, make([]Completion, 2)); n != 2 {
			t.Errorf("%d completions after Close", n)
		}
	})
}

// BenchmarkSubmitReap measures the engine's own submit, completion and
// reap path at queue depth 1, over a namespace that completes inline.
func BenchmarkSubmitReap(b *testing.B) {
	e := newEngine(Config{Depth: 1}, nil, newFakeNS(1<<20))
	defer e.Close()
	buf := make([]byte, 4096)
	out := make([]Completion, 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Submit(0, Request{Op: OpRead, Buf: buf, Off: 8192}); err != nil {
			b.Fatal(err)
		}
		if n := e.Reap(1, 1, -1, out); n != 1 || out[0].Errno != 0 {
			b.Fatalf("Reap = %d %+v", n, out[0])
		}
	}
}

// sleepPollNS is a fakeNS whose completions come only by polling: Poll
// finds nothing, PollWait (the wait a datagram ends) releases one held
// request.
type sleepPollNS struct {
	*fakeNS
	polls, waits atomic.Int32
}

func (s *sleepPollNS) Poll() bool        { s.polls.Add(1); return false }
func (s *sleepPollNS) PollDone()         {}
func (s *sleepPollNS) CanPoll() bool     { return true }
func (s *sleepPollNS) CanPollWait() bool { return true }
func (s *sleepPollNS) PollWait(time.Duration) bool {
	s.waits.Add(1)
	select {
	case s.gate <- struct{}{}:
	default: // released already, completing
	}
	return true
}

// TestPollSleep: with PollSleep the busy-poll window is spent in PollWait
// (asleep on the transport's socket, woken by the completion), not in a
// spin of Poll; without it, PollWait is never called.
func TestPollSleep(t *testing.T) {
	for _, sleep := range []bool{true, false} {
		ns := &sleepPollNS{fakeNS: newFakeNS(1 << 20)}
		ns.gate = make(chan struct{}, 1)
		e := newEngine(Config{Depth: 1, BusyPoll: time.Second, PollSleep: sleep}, nil, ns)
		buf := make([]byte, 512)
		if err := e.Submit(0, Request{Op: OpRead, Buf: buf}); err != nil {
			t.Fatal(err)
		}
		out := make([]Completion, 1)
		if !sleep {
			ns.gate <- struct{}{} // completes on its own; Reap spins until it does
		}
		if n := e.Reap(1, 1, 5*time.Second, out); n != 1 {
			t.Fatalf("PollSleep %v: Reap = %d", sleep, n)
		}
		switch w := ns.waits.Load(); {
		case sleep && (w == 0 || ns.polls.Load() != 0):
			t.Errorf("PollSleep: %d PollWaits and %d Polls, want some and none", w, ns.polls.Load())
		case !sleep && w != 0:
			t.Errorf("no PollSleep: %d PollWaits, want 0", w)
		}
	}
}

// neverPollNS is a fakeNS whose Poll never finds a completion.
type neverPollNS struct {
	*fakeNS
	polls atomic.Int32
}

func (s *neverPollNS) Poll() bool                  { s.polls.Add(1); return false }
func (s *neverPollNS) PollWait(time.Duration) bool { return false }
func (s *neverPollNS) PollDone()                   {}
func (s *neverPollNS) CanPoll() bool               { return true }
func (s *neverPollNS) CanPollWait() bool           { return false }

// TestSpinBackoff: against a device slower than the busy-poll window
// (each I/O completes only once Reap has given up spinning and sleeps),
// spinMissLimit reaps spin in vain, the next spinBackoff sleep without
// polling, then one spins again to look; every request completes.
func TestSpinBackoff(t *testing.T) {
	ns := &neverPollNS{fakeNS: newFakeNS(1 << 20)}
	ns.gate = make(chan struct{})
	e := newEngine(Config{Depth: 1, BusyPoll: 10 * time.Microsecond}, nil, ns)
	buf := make([]byte, 512)
	out := make([]Completion, 1)
	var polled []bool
	for range spinMissLimit + spinBackoff + 2 {
		if err := e.Submit(0, Request{Op: OpRead, Buf: buf}); err != nil {
			t.Fatal(err)
		}
		// The I/O completes once the reaper sleeps (bounded: 10 s).
		go func() {
			for end := time.Now().Add(10 * time.Second); e.waker.sleeping.Load() == 0 && time.Now().Before(end); {
				runtime.Gosched()
			}
			ns.gate <- struct{}{}
		}()
		before := ns.polls.Load()
		if n := e.Reap(1, 1, 20*time.Second, out); n != 1 || out[0].Errno != 0 {
			t.Fatalf("Reap = %d %+v", n, out[0])
		}
		polled = append(polled, ns.polls.Load() > before)
	}
	for i, p := range polled {
		want := i < spinMissLimit || i >= spinMissLimit+spinBackoff
		if p != want {
			t.Fatalf("reap %d polled %v, want %v (all: %v)", i, p, want, polled)
		}
	}
}

// TestPollSleepAuto: poll_sleep=auto sleeps, with a window of at least
// 1 ms (a longer one stays), where the connected queue can wait in
// PollWait, and spins with the window given where it cannot.
func TestPollSleepAuto(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ns        namespace
		busy      time.Duration
		sleep     bool
		wantBusy  time.Duration
		wantPolls bool
	}{
		{"can wait", &sleepPollNS{fakeNS: newFakeNS(1 << 20)}, 50 * time.Microsecond, true, time.Millisecond, true},
		{"can wait, longer window", &sleepPollNS{fakeNS: newFakeNS(1 << 20)}, 5 * time.Millisecond, true, 5 * time.Millisecond, true},
		{"can wait, busy_poll=0", &sleepPollNS{fakeNS: newFakeNS(1 << 20)}, 0, true, time.Millisecond, true},
		{"cannot wait", &neverPollNS{fakeNS: newFakeNS(1 << 20)}, 50 * time.Microsecond, false, 50 * time.Microsecond, true},
		{"no poller", newFakeNS(1 << 20), 50 * time.Microsecond, false, 50 * time.Microsecond, false},
	} {
		e := newEngine(Config{Depth: 1, BusyPoll: tc.busy, PollSleepAuto: true}, nil, tc.ns)
		if e.cfg.PollSleep != tc.sleep || e.cfg.BusyPoll != tc.wantBusy || (e.poll != nil) != tc.wantPolls {
			t.Errorf("%s: PollSleep %v, BusyPoll %v, polls %v; want %v, %v, %v", tc.name,
				e.cfg.PollSleep, e.cfg.BusyPoll, e.poll != nil, tc.sleep, tc.wantBusy, tc.wantPolls)
		}
	}
}
