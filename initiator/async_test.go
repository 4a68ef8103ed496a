package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// startWait runs io with Start and waits for its Done; it reports whether
// Done came before Start returned. Done must come exactly once.
func startWait(t testing.TB, ns *Namespace, x *IO) (early bool) {
	t.Helper()
	done := make(chan struct{})
	var calls atomic.Int32
	var returned, before atomic.Bool
	x.Done = func(*IO) {
		before.Store(!returned.Load())
		if calls.Add(1) == 1 {
			close(done)
		} else {
			t.Errorf("%v of %d bytes at %d: Done called again", x.Op, len(x.Buf), x.Off)
		}
	}
	ns.Start(x)
	returned.Store(true)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%v of %d bytes at %d: no Done", x.Op, len(x.Buf), x.Off)
	}
	return before.Load()
}

// syncResult runs the synchronous method x stands for.
func syncResult(ns *Namespace, x *IO) (int, error) {
	switch x.Op {
	case OpRead:
		return ns.ReadAt(x.Buf, x.Off)
	case OpWrite:
		return ns.WriteAt(x.Buf, x.Off)
	case OpWriteZeroes:
		return 0, ns.WriteZeroes(x.Off, x.Len)
	case OpTrim:
		return 0, ns.Trim(x.Off, x.Len)
	case OpFlush:
		return 0, ns.Flush()
	}
	return 0, fmt.Errorf("initiator: nsid %d: unknown I/O operation %v", ns.nsid, x.Op)
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// asyncCases are requests on a 1 MiB namespace of 512-byte blocks whose
// controller moves at most 128 KiB per command: one command, split
// transfers, the end of the namespace and invalid requests.
var asyncCases = []struct {
	name string
	op   Op
	off  int64
	n    int // Buf's length (Read, Write) or Len
}{
	{"read 4k", OpRead, 8192, 4096},
	{"write 4k", OpWrite, 12288, 4096},
	{"read 512", OpRead, 512, 512},
	{"write max transfer", OpWrite, 128 << 10, 128 << 10},
	{"read max transfer", OpRead, 128 << 10, 128 << 10},
	{"write split", OpWrite, 256 << 10, 132 << 10},
	{"read split", OpRead, 256 << 10, 132 << 10},
	{"read whole namespace", OpRead, 0, 1 << 20},
	{"read across the end", OpRead, 1<<20 - 1024, 4096},
	{"read at the end", OpRead, 1 << 20, 4096},
	{"read nothing", OpRead, 0, 0},
	{"write nothing", OpWrite, 4096, 0},
	{"write past the end", OpWrite, 1<<20 - 512, 4096},
	{"read unaligned offset", OpRead, 100, 4096},
	{"write unaligned length", OpWrite, 0, 100},
	{"read negative offset", OpRead, -512, 512},
	{"write zeroes", OpWriteZeroes, 64 << 10, 8192},
	{"write zeroes split", OpWriteZeroes, 0, 1 << 20},
	{"write zeroes past the end", OpWriteZeroes, 1 << 20, 512},
	{"write zeroes unaligned", OpWriteZeroes, 0, 100},
	{"trim", OpTrim, 4096, 8192},
	{"trim past the end", OpTrim, 1 << 20, 512},
	{"flush", OpFlush, 0, 0},
	{"unknown operation", Op(9), 0, 0},
}

// TestStartMatchesSync: every request gives through Start what the
// synchronous method gives (N and the error), and moves the same data.
func TestStartMatchesSync(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%t", inline), func(t *testing.T) {
			ft := newFakeTarget(t, 1<<20)
			var d fabrics.Dialer = ft.dialer()
			if inline {
				d = inlineDialer{d}
			}
			c := connectWith(t, d, ft.addr, testOpts())
			ns, _ := c.Namespace(1)
			rng := rand.New(rand.NewPCG(3, 4))
			for _, tc := range asyncCases {
				t.Run(tc.name, func(t *testing.T) {
					mk := func() *IO {
						x := &IO{Op: tc.op, Off: tc.off}
						switch tc.op {
						case OpRead, OpWrite:
							x.Buf = make([]byte, tc.n)
							if tc.op == OpWrite {
								for i := range x.Buf {
									x.Buf[i] = byte(rng.Uint32())
								}
							}
						default:
							x.Len = int64(tc.n)
						}
						return x
					}
					x := mk()
					early := startWait(t, ns, x)
					y := mk()
					n, err := syncResult(ns, y)
					if x.N != n || errText(x.Err) != errText(err) {
						t.Fatalf("Start: %d, %v; sync: %d, %v", x.N, x.Err, n, err)
					}
					if errors.Is(err, io.EOF) != errors.Is(x.Err, io.EOF) {
						t.Errorf("io.EOF: Start %v, sync %v", x.Err, err)
					}
					if tc.op == OpRead && !bytes.Equal(x.Buf[:x.N], y.Buf[:n]) {
						t.Error("Start read other data than ReadAt")
					}
					if tc.op == OpWrite && x.Err == nil {
						// The target holds what the sync write wrote:
						// write x's data again through Start and check it.
						startWait(t, ns, x)
						ft.mu.Lock()
						ok := bytes.Equal(ft.ns[1][tc.off:tc.off+int64(tc.n)], x.Buf)
						ft.mu.Unlock()
						if !ok {
							t.Error("target data differs from the Start write")
						}
					}
					fast := x.Err == nil && tc.op != OpTrim && tc.n <= 128<<10 && (tc.n > 0 || tc.op == OpFlush)
					if inline && fast && !early {
						t.Error("Done came after Start returned on an inline transport")
					}
				})
			}
		})
	}
}

// TestStartStatusErrors: a status with DNR is returned as ReadAt returns
// it; statuses without DNR are retried as the synchronous path retries
// them (nvme_max_retries).
func TestStartStatusErrors(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		name    string
		op      Op
		retries int32
		want    nvme.Status // 0: success
		cmds    int         // commands the target saw
	}{
		{"read retried once", OpRead, 1, 0, 2},
		{"write retried once", OpWrite, 1, 0, 2},
		{"read retried to the limit", OpRead, maxRetries, 0, maxRetries + 1},
		{"read beyond the limit", OpRead, maxRetries + 1, nvme.StatusNamespaceNotReady, maxRetries + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sync []error
			for _, async := range []bool{true, false} {
				ft.retryIO.Store(tc.retries)
				before := ft.count(tc.op.String())
				x := &IO{Op: tc.op, Buf: buf, Off: 4096}
				if async {
					startWait(t, ns, x)
				} else {
					x.N, x.Err = syncResult(ns, x)
				}
				ft.retryIO.Store(0)
				if n := ft.count(tc.op.String()) - before; n != tc.cmds {
					t.Errorf("async %t: %d commands, want %d", async, n, tc.cmds)
				}
				var ne *nvme.Error
				switch {
				case tc.want == 0 && (x.Err != nil || x.N != len(buf)):
					t.Errorf("async %t: %d, %v", async, x.N, x.Err)
				case tc.want != 0 && (!errors.As(x.Err, &ne) || ne.Status != tc.want || x.N != 0):
					t.Errorf("async %t: %d, %v, want status %v", async, x.N, x.Err, tc.want)
				}
				sync = append(sync, x.Err)
			}
			if errText(sync[0]) != errText(sync[1]) {
				t.Errorf("Start: %v, ReadAt: %v", sync[0], sync[1])
			}
		})
	}
	// A status with DNR: LBA Out of Range, the command not retried.
	ft.mu.Lock()
	ft.ns[1] = ft.ns[1][:4096] // the target shrinks behind the host's back
	ft.mu.Unlock()
	before := ft.count("Read")
	x := &IO{Op: OpRead, Buf: buf, Off: 8192}
	startWait(t, ns, x)
	var ce *CommandError
	if !errors.As(x.Err, &ce) || ce.Err.Status != nvme.StatusLBAOutOfRange || !ce.Err.DNR || ce.Op != "Read" || ce.NSID != 1 {
		t.Fatalf("error %v, want LBA Out of Range", x.Err)
	}
	if n := ft.count("Read") - before; n != 1 {
		t.Errorf("%d Reads for a DNR status", n)
	}
	if _, err := ns.ReadAt(buf, 8192); errText(err) != errText(x.Err) {
		t.Errorf("Start: %v, ReadAt: %v", x.Err, err)
	}
}

// TestStartTimeout: a command that does not complete within
// CommandTimeout is aborted as a ReadAt's would be; the controller does
// not abort it, so after a further timeout its queue alone is reset and
// it completes with a *TimeoutError; I/O works afterwards.
func TestStartTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft, o, c, ns := oneQueue(t, 100*time.Millisecond)
		ft.stallRead.Store(true)
		start := time.Now()
		x := &IO{Op: OpRead, Buf: make([]byte, 4096)}
		startWait(t, ns, x)
		var te *TimeoutError
		if !errors.As(x.Err, &te) || !errors.Is(x.Err, ErrTimeout) || te.Op != "Read" || te.QID != 1 || te.After != o.CommandTimeout || x.N != 0 {
			t.Fatalf("%d, %v, want a Read timeout", x.N, x.Err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
			t.Errorf("timed out after %v", d)
		}
		if n := ft.count("Abort"); n != 1 {
			t.Errorf("%d Aborts", n)
		}
		waitFor(t, "queue reconnected", func() bool { return ft.count("Connect") == 3 })
		if c.State() != StateLive || c.CntlID() != 1 {
			t.Errorf("state %v cntlid %d: the association was reset", c.State(), c.CntlID())
		}
		ft.stallRead.Store(false)
		x = &IO{Op: OpRead, Buf: make([]byte, 4096)}
		if startWait(t, ns, x); x.Err != nil || x.N != 4096 {
			t.Fatalf("read after the queue reset: %d, %v", x.N, x.Err)
		}
	})
}

// TestStartTimeoutRace: completions that arrive about when the timer
// expires. Each I/O completes once, either with its data or with a
// *TimeoutError, and the slots survive the races.
func TestStartTimeoutRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft, o, c, ns := oneQueue(t, 20*time.Millisecond)
		want := bytes.Repeat([]byte{0x5a}, 4096)
		if _, err := ns.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(7, 8))
		var ok, timedOut int
		for range 40 {
			// Completions from a little before to a little after the timeout.
			ft.readDelay.Store(int64(o.CommandTimeout*3/4) + rng.Int64N(int64(o.CommandTimeout/2)))
			var wg sync.WaitGroup
			ios := make([]IO, 4)
			var calls [4]atomic.Int32
			for i := range ios {
				ios[i] = IO{Op: OpRead, Buf: make([]byte, 4096), Done: func(*IO) { calls[i].Add(1); wg.Done() }}
				wg.Add(1)
				ns.Start(&ios[i])
			}
			wg.Wait()
			for i := range ios {
				x := &ios[i]
				switch {
				case calls[i].Load() != 1:
					t.Fatalf("Done called %d times", calls[i].Load())
				case x.Err == nil && x.N == 4096 && bytes.Equal(x.Buf, want):
					ok++
				case errors.Is(x.Err, ErrTimeout) && x.N == 0:
					timedOut++
				default:
					t.Fatalf("%d, %v", x.N, x.Err)
				}
			}
			// Let queue resets settle now and then, so that every I/O is not
			// just waiting for a reconnect.
			waitFor(t, "live", func() bool { return c.State() == StateLive })
		}
		t.Logf("%d completed, %d timed out", ok, timedOut)
		ft.readDelay.Store(0)
		x := &IO{Op: OpRead, Buf: make([]byte, 4096)}
		if startWait(t, ns, x); x.Err != nil || !bytes.Equal(x.Buf, want) {
			t.Fatalf("read after the races: %v", x.Err)
		}
	})
}

// TestStartQueueReset: I/O in flight when its queue is reset, or the whole
// association fails, is redone on the new queue and completes with its
// data.
func TestStartQueueReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reset func(ft *fakeTarget, c *Controller)
		cntl  uint16
	}{
		{"I/O queue reset", func(_ *fakeTarget, c *Controller) {
			q := c.cur.Load().io[0].Load()
			c.resetIOQueue(q, errors.New("test"))
		}, 1},
		{"association lost", func(ft *fakeTarget, _ *Controller) { ft.killQueues() }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft := newFakeTarget(t, 1<<20)
				o := testOpts()
				o.NrIOQueues = 1
				c := connectFake(t, ft, o)
				ns, _ := c.Namespace(1)
				want := make([]byte, 64<<10)
				for i := range want {
					want[i] = byte(i / 4096)
				}
				if _, err := ns.WriteAt(want, 0); err != nil {
					t.Fatal(err)
				}
				ft.stallRead.Store(true)
				ios := make([]IO, 16)
				var wg sync.WaitGroup
				for i := range ios {
					wg.Add(1)
					ios[i] = IO{Op: OpRead, Buf: make([]byte, 4096), Off: int64(i) * 4096, Done: func(*IO) { wg.Done() }}
					ns.Start(&ios[i])
				}
				waitFor(t, "reads held", func() bool { return ft.count("Read") == 16 })
				ft.stallRead.Store(false)
				tc.reset(ft, c)
				wg.Wait()
				for i := range ios {
					if x := &ios[i]; x.Err != nil || x.N != 4096 || !bytes.Equal(x.Buf, want[i*4096:(i+1)*4096]) {
						t.Errorf("read %d: %d, %v (or other data)", i, x.N, x.Err)
					}
				}
				if c.CntlID() != tc.cntl {
					t.Errorf("cntlid %d, want %d", c.CntlID(), tc.cntl)
				}
			})
		})
	}
}

// TestStartControllerLoss: I/O in flight and I/O started while the host
// reconnects in vain fail with ErrControllerLost; after Disconnect, Start
// fails as ReadAt does.
func TestStartControllerLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		o := testOpts()
		o.CtrlLossTimeout = 200 * time.Millisecond
		c := connectFake(t, ft, o)
		ns, _ := c.Namespace(1)
		ft.stallRead.Store(true)
		held := &IO{Op: OpRead, Buf: make([]byte, 4096)}
		done := make(chan struct{})
		held.Done = func(*IO) { close(done) }
		ns.Start(held)
		waitFor(t, "read held", func() bool { return ft.count("Read") == 1 })
		ft.unlisten()
		ft.killQueues()
		for _, x := range []*IO{{Op: OpWrite, Buf: make([]byte, 4096)}, {Op: OpFlush}} {
			if startWait(t, ns, x); !errors.Is(x.Err, ErrControllerLost) {
				t.Errorf("%v while reconnecting: %v", x.Op, x.Err)
			}
		}
		<-done
		if !errors.Is(held.Err, ErrControllerLost) || held.N != 0 {
			t.Errorf("read in flight: %d, %v", held.N, held.Err)
		}
		if err := c.Disconnect(context.Background()); err != nil {
			t.Fatal(err)
		}
		x := &IO{Op: OpRead, Buf: make([]byte, 4096)}
		startWait(t, ns, x)
		if _, err := ns.ReadAt(x.Buf, 0); x.Err == nil || errText(err) != errText(x.Err) {
			t.Errorf("after Disconnect: Start %v, ReadAt %v", x.Err, err)
		}
	})
}

// TestStartConcurrent: many goroutines keep I/O going through Start at
// once, on queues smaller than the I/O in flight (so that some take the
// slow path), and check their data.
func TestStartConcurrent(t *testing.T) {
	ft := newFakeTarget(t, 4<<20)
	o := testOpts()
	o.QueueSize = MinQueueSize
	o.NrIOQueues = 2
	c := connectFake(t, ft, o)
	ns, _ := c.Namespace(1)
	const goroutines, depth, rounds = 8, 8, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			base := int64(g) << 19 // 512 KiB each
			ios := make([]IO, depth)
			done := make(chan *IO, depth)
			for r := range rounds {
				for _, op := range []Op{OpWrite, OpRead} {
					for i := range ios {
						x := &ios[i]
						*x = IO{Op: op, Buf: x.Buf, Off: base + int64(i)*(64<<10), Done: func(x *IO) { done <- x }}
						size := 4096 << (i % 5) // 4..64 KiB
						if cap(x.Buf) < size {
							x.Buf = make([]byte, size)
						}
						x.Buf = x.Buf[:size]
						if op == OpWrite {
							for j := range x.Buf {
								x.Buf[j] = byte(g*31 + r*7 + i + j/512)
							}
						}
						ns.Start(x)
					}
					for range ios {
						x := <-done
						if x.Err != nil || x.N != len(x.Buf) {
							t.Errorf("goroutine %d: %v: %d, %v", g, x.Op, x.N, x.Err)
							return
						}
					}
				}
				for i := range ios {
					for j, b := range ios[i].Buf {
						if b != byte(g*31+r*7+i+j/512) {
							t.Errorf("goroutine %d round %d: I/O %d byte %d = %#x", g, r, i, j, b)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestStartTarget runs Start against the real target over the loop
// transport.
func TestStartTarget(t *testing.T) {
	f := newTgtFixture(t, 8<<20)
	c := f.connect(t, Options{NrIOQueues: 2})
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	w := make([]byte, 256<<10)
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	for _, size := range []int{512, 4096, 64 << 10, 256 << 10} {
		off := int64(rng.IntN(int(ns.Size())-size)) &^ 511
		x := &IO{Op: OpWrite, Buf: w[:size], Off: off}
		if startWait(t, ns, x); x.Err != nil || x.N != size {
			t.Fatalf("write %d: %d, %v", size, x.N, x.Err)
		}
		r := &IO{Op: OpRead, Buf: make([]byte, size), Off: off}
		if startWait(t, ns, r); r.Err != nil || r.N != size || !bytes.Equal(r.Buf, w[:size]) {
			t.Fatalf("read %d: %d, %v (or other data)", size, r.N, r.Err)
		}
	}
	for _, x := range []*IO{{Op: OpFlush}, {Op: OpWriteZeroes, Off: 0, Len: 8192}, {Op: OpTrim, Off: 8192, Len: 8192}} {
		if startWait(t, ns, x); x.Err != nil {
			t.Errorf("%v: %v", x.Op, x.Err)
		}
	}
	x := &IO{Op: OpRead, Buf: make([]byte, 4096), Off: ns.Size() - 512}
	if startWait(t, ns, x); x.N != 512 || x.Err != io.EOF {
		t.Errorf("read across the end: %d, %v", x.N, x.Err)
	}
}

// TestStartAllocs: the fast path allocates nothing, over the loop
// transport and the fake target (which allocate nothing either).
func TestStartAllocs(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	ns, _ := c.Namespace(1)
	done := make(chan struct{}, 1)
	x := &IO{Buf: make([]byte, 4096), Off: 8192, Done: func(*IO) { done <- struct{}{} }}
	for _, op := range []Op{OpRead, OpWrite, OpFlush} {
		x.Op = op
		allocs := testing.AllocsPerRun(200, func() {
			ns.Start(x)
			<-done
			if x.Err != nil {
				t.Fatal(x.Err)
			}
		})
		if allocs > 0 {
			t.Errorf("%v: %v allocations per Start", op, allocs)
		}
	}
}

// BenchmarkStartRead4K measures 4 KiB reads through Start over the loop
// transport, against the fake target and the real one, at queue depth 1
// and 32.
func BenchmarkStartRead4K(b *testing.B) {
	for _, tgt := range []string{"fake", "target"} {
		for _, depth := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/qd%d", tgt, depth), func(b *testing.B) {
				var c *Controller
				if tgt == "fake" {
					c = connectFake(b, newFakeTarget(b, 16<<20), testOpts())
				} else {
					c = newTgtFixture(b, 16<<20).connect(b, Options{})
				}
				ns, _ := c.Namespace(1)
				benchStart(b, ns, depth)
			})
		}
	}
}

// benchStart keeps depth 4 KiB reads in flight through Start, b.N in all.
func benchStart(b *testing.B, ns *Namespace, depth int) {
	done := make(chan *IO, depth)
	ios := make([]IO, depth)
	for i := range ios {
		ios[i] = IO{Op: OpRead, Buf: make([]byte, 4096), Off: int64(i) * 4096, Done: func(x *IO) { done <- x }}
	}
	b.ReportAllocs()
	b.SetBytes(4096)
	b.ResetTimer()
	started := 0
	for i := range ios {
		if started < b.N {
			ns.Start(&ios[i])
			started++
		}
	}
	for range b.N {
		x := <-done
		if x.Err != nil {
			b.Fatal(x.Err)
		}
		if started < b.N {
			x.Off = (x.Off + int64(depth)*4096) % ns.Size()
			ns.Start(x)
			started++
		}
	}
}

// connectWith connects to the fake target through dialer d.
func connectWith(t testing.TB, d fabrics.Dialer, addr fabrics.Address, o Options) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, d, addr, o)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// inlineDialer makes a transport that completes I/O queue commands
// inline: Submit waits for the target and runs the command's Done on the
// submitting goroutine before it returns.
type inlineDialer struct{ d fabrics.Dialer }

func (d inlineDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	hq, err := d.d.Dial(ctx, addr, p)
	if err != nil || p.QID == 0 {
		return hq, err
	}
	return inlineQueue{hq}, nil
}

type inlineQueue struct{ fabrics.HostQueue }

func (q inlineQueue) Submit(cmd *fabrics.HostCommand) error {
	orig := cmd.Done
	done := make(chan struct{})
	cmd.Done = func(c *fabrics.HostCommand) { c.Done = orig; close(done) }
	if err := q.HostQueue.Submit(cmd); err != nil {
		cmd.Done = orig // failed: no Done comes
		return err
	}
	<-done
	orig(cmd)
	return nil
}
