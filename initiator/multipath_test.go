package initiator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// mpFixture is one subsystem reached through two fake ports: a (ANA
// state sa) and b (sb), and a Multipath over a controller on each.
type mpFixture struct {
	a, b   *fakeTarget
	ca, cb *Controller
	m      *Multipath
	ns     *MultipathNamespace
}

func newMPFixture(t *testing.T, sa, sb nvme.ANAState, o Options, mo MultipathOptions) *mpFixture {
	t.Helper()
	a := newFakeTarget(t, 1<<20)
	a.anaOn = true
	a.anaState.Store(uint32(sa))
	b := newFakePeer(t, a, "127.0.0.2", sb)
	f := &mpFixture{a: a, b: b}
	f.ca = connectFake(t, a, o)
	f.cb = connectFake(t, b, o)
	f.m = NewMultipath(fakeNQN, mo)
	for _, c := range []*Controller{f.ca, f.cb} {
		if err := f.m.AddPath(c); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := f.m.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	f.ns = ns
	return f
}

// reads returns the Reads each port served.
func (f *mpFixture) reads() (int, int) { return f.a.count("Read"), f.b.count("Read") }

func mpOpts() Options {
	o := testOpts()
	o.ReconnectDelay = 20 * time.Millisecond
	o.CtrlLossTimeout = 2 * time.Second
	return o
}

func TestANALogRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		ft.anaOn = true
		ft.anaState.Store(uint32(nvme.ANANonOptimized))
		events := make(chan AsyncEvent, 4)
		o := testOpts()
		o.OnAsyncEvent = func(ev AsyncEvent) { events <- ev }
		c := connectFake(t, ft, o)
		if !c.ANAReporting() {
			t.Fatal("ANA reporting not seen")
		}
		l, ok := c.ANALog()
		if !ok || len(l.Groups) != 1 || l.Groups[0].GroupID != 1 || l.Groups[0].State != nvme.ANANonOptimized {
			t.Fatalf("ANA log %+v %v", l, ok)
		}
		ns, _ := c.Namespace(1)
		if ns.ANAState() != nvme.ANANonOptimized || ns.ANAGroupID() != 1 {
			t.Fatalf("namespace ANA %v group %d", ns.ANAState(), ns.ANAGroupID())
		}
		// The ANA Change notice re-reads the log. The fake drops a
		// notice while no AER is outstanding: let the controller post it.
		synctest.Wait()
		ft.setANA(nvme.ANAInaccessible, true)
		ev := <-events
		if ev.Event.Info() != nvme.AsyncNoticeANAChange {
			t.Fatalf("event %v", ev.Event)
		}
		if ns.ANAState() != nvme.ANAInaccessible {
			t.Fatalf("after the notice: %v", ns.ANAState())
		}
		// A controller without ANA reporting counts as optimized.
		plain := newFakeTarget(t, 1<<20)
		cp := connectFake(t, plain, testOpts())
		nsp, _ := cp.Namespace(1)
		if cp.ANAReporting() || nsp.ANAState() != nvme.ANAOptimized {
			t.Fatalf("no ANA: reporting %v state %v", cp.ANAReporting(), nsp.ANAState())
		}
	})
}

func TestANALogSize(t *testing.T) {
	for _, tc := range []struct {
		ngrps, nn, mnan uint32
		want            int
	}{
		{1, 1, 0, 16 + 32 + 4},
		{128, 1024, 0, 16 + 128*32 + 1024*4},
		{2, 1024, 8, 16 + 2*32 + 8*4},
		{1, 0xffffffff, 0, maxANALogSize},
	} {
		id := nvme.NewIdentifyController()
		id.SetNANAGRPID(tc.ngrps)
		id.SetNN(tc.nn)
		id.SetMNAN(tc.mnan)
		if got := anaLogSize(&assoc{id: id}); got != tc.want {
			t.Errorf("%+v: size %d, want %d", tc, got, tc.want)
		}
	}
}

func TestMultipathPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy IOPolicy
		sa, sb nvme.ANAState
		// wantA, wantB: whether each port serves some of 8 reads.
		wantA, wantB bool
	}{
		{"numa optimized first", IOPolicyNUMA, nvme.ANAOptimized, nvme.ANANonOptimized, true, false},
		{"numa optimized second", IOPolicyNUMA, nvme.ANANonOptimized, nvme.ANAOptimized, false, true},
		{"numa both optimized sticks", IOPolicyNUMA, nvme.ANAOptimized, nvme.ANAOptimized, true, false},
		{"round-robin both optimized", IOPolicyRoundRobin, nvme.ANAOptimized, nvme.ANAOptimized, true, true},
		{"round-robin one optimized", IOPolicyRoundRobin, nvme.ANANonOptimized, nvme.ANAOptimized, false, true},
		{"queue-depth one optimized", IOPolicyQueueDepth, nvme.ANAOptimized, nvme.ANANonOptimized, true, false},
		{"non-optimized when no optimized", IOPolicyRoundRobin, nvme.ANANonOptimized, nvme.ANAInaccessible, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newMPFixture(t, tc.sa, tc.sb, mpOpts(), MultipathOptions{IOPolicy: tc.policy})
				buf := make([]byte, 4096)
				for i := 0; i < 8; i++ {
					if _, err := f.ns.ReadAt(buf, 0); err != nil {
						t.Fatal(err)
					}
				}
				ra, rb := f.reads()
				if (ra > 0) != tc.wantA || (rb > 0) != tc.wantB || ra+rb != 8 {
					t.Fatalf("reads a=%d b=%d", ra, rb)
				}
			})
		})
	}
}

func TestMultipathQueueDepthChoice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMPFixture(t, nvme.ANAOptimized, nvme.ANAOptimized, mpOpts(), MultipathOptions{IOPolicy: IOPolicyQueueDepth})
		np, ok := f.ns.find()
		if !ok || np.p.c != f.ca {
			t.Fatalf("idle paths: chose %v", np.p)
		}
		np.p.active.Add(3) // three in flight on a
		if np2, _ := f.ns.find(); np2.p.c != f.cb {
			t.Fatal("busier path chosen")
		}
		np.p.active.Add(-3)
		pi := f.ns.Paths()
		if len(pi) != 2 || !pi[0].Usable || pi[0].ANAState != nvme.ANAOptimized {
			t.Fatalf("paths %+v", pi)
		}
	})
}

func TestMultipathFailoverOnANAStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
		w := bytes.Repeat([]byte{0x5a}, 8192)
		if _, err := f.ns.WriteAt(w, 4096); err != nil {
			t.Fatal(err)
		}
		// a answers with ANA Inaccessible without a notice: the status
		// alone moves the I/O to b and re-reads a's log.
		f.a.setANA(nvme.ANAInaccessible, false)
		r := make([]byte, 8192)
		if _, err := f.ns.ReadAt(r, 4096); err != nil || !bytes.Equal(r, w) {
			t.Fatalf("read: %v", err)
		}
		if _, rb := f.reads(); rb == 0 {
			t.Fatal("no read on the non-optimized path")
		}
		waitFor(t, "ANA log re-read", func() bool {
			n, _ := f.ca.Namespace(1)
			return n.ANAState() == nvme.ANAInaccessible && !f.ca.anaPending.Load()
		})
		// With the notice, the state change moves I/O back (failback).
		f.a.setANA(nvme.ANAOptimized, true)
		waitFor(t, "a optimized", func() bool { n, _ := f.ca.Namespace(1); return n.ANAState() == nvme.ANAOptimized })
		ra0, _ := f.reads()
		if _, err := f.ns.ReadAt(r, 4096); err != nil {
			t.Fatal(err)
		}
		if ra, _ := f.reads(); ra != ra0+1 {
			t.Fatalf("read not back on a: %d -> %d", ra0, ra)
		}
	})
}

func TestMultipathFailoverOnPathLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
		w := bytes.Repeat([]byte{0xc3}, 64<<10)
		if _, err := f.ns.WriteAt(w, 0); err != nil {
			t.Fatal(err)
		}
		f.a.unlisten()
		f.a.killQueues()
		// No error while b lives, though a is reconnecting.
		r := make([]byte, len(w))
		for i := 0; i < 4; i++ {
			if _, err := f.ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
				t.Fatalf("read %d during the loss: %v", i, err)
			}
			if _, err := f.ns.WriteAt(w, 0); err != nil {
				t.Fatalf("write %d during the loss: %v", i, err)
			}
		}
		if err := f.ns.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, rb := f.reads(); rb == 0 {
			t.Fatal("nothing read on b")
		}
		// Failback: a returns and takes the I/O again.
		f.a.listen()
		waitFor(t, "a live again", func() bool { return f.ca.State() == StateLive })
		waitFor(t, "a optimized", func() bool { return f.ns.Paths()[0].Usable })
		ra0, rb0 := f.reads()
		if _, err := f.ns.ReadAt(r[:4096], 0); err != nil {
			t.Fatal(err)
		}
		if ra, rb := f.reads(); ra != ra0+1 || rb != rb0 {
			t.Fatalf("after failback reads a %d->%d b %d->%d", ra0, ra, rb0, rb)
		}
	})
}

func TestMultipathFailoverInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
		w := bytes.Repeat([]byte{0x11}, 4096)
		if _, err := f.ns.WriteAt(w, 0); err != nil {
			t.Fatal(err)
		}
		f.a.stallRead.Store(true) // the read stays in flight on a
		done := make(chan error, 1)
		r := make([]byte, 4096)
		go func() { _, err := f.ns.ReadAt(r, 0); done <- err }()
		synctest.Wait()
		f.a.stallRead.Store(false)
		f.a.unlisten()
		f.a.killQueues()
		if err := <-done; err != nil || !bytes.Equal(r, w) {
			t.Fatalf("in-flight read: %v", err)
		}
	})
}

func TestMultipathAllPathsDown(t *testing.T) {
	t.Run("waits then succeeds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
			for _, ft := range []*fakeTarget{f.a, f.b} {
				ft.unlisten()
				ft.killQueues()
			}
			waitFor(t, "both down", func() bool { return f.ca.State() != StateLive && f.cb.State() != StateLive })
			done := make(chan error, 1)
			go func() { _, err := f.ns.ReadAt(make([]byte, 4096), 0); done <- err }()
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("I/O did not wait: %v", err)
			default:
			}
			f.b.listen()
			if err := <-done; err != nil {
				t.Fatalf("after b returned: %v", err)
			}
		})
	})
	t.Run("queue timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			o := mpOpts()
			o.CtrlLossTimeout = -1 // the paths never give up: the queue timeout ends the wait
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, o, MultipathOptions{QueueTimeout: 500 * time.Millisecond})
			for _, ft := range []*fakeTarget{f.a, f.b} {
				ft.unlisten()
				ft.killQueues()
			}
			start := time.Now()
			_, err := f.ns.ReadAt(make([]byte, 4096), 0)
			if !errors.Is(err, ErrNoPath) {
				t.Fatalf("error %v, want ErrNoPath", err)
			}
			if d := time.Since(start); d < 500*time.Millisecond {
				t.Fatalf("failed after %v, before the queue timeout", d)
			}
		})
	})
	t.Run("ctrl-loss-tmo", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			o := mpOpts()
			o.CtrlLossTimeout = 300 * time.Millisecond
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, o, MultipathOptions{QueueTimeout: -1})
			for _, ft := range []*fakeTarget{f.a, f.b} {
				ft.unlisten()
				ft.killQueues()
			}
			_, err := f.ns.ReadAt(make([]byte, 4096), 0)
			if !errors.Is(err, ErrNoPath) {
				t.Fatalf("error %v, want ErrNoPath", err)
			}
			if f.ca.State() != StateDead || f.cb.State() != StateDead {
				t.Fatalf("states %v %v", f.ca.State(), f.cb.State())
			}
		})
	})
}

func TestMultipathAddPathChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		c := connectFake(t, ft, testOpts())
		m := NewMultipath("nqn.2026-01.io.nvmeof:other", MultipathOptions{})
		if err := m.AddPath(c); err == nil {
			t.Fatal("path of another subsystem accepted")
		}
		m2 := NewMultipath(fakeNQN, MultipathOptions{})
		if err := m2.AddPath(c); err != nil {
			t.Fatal(err)
		}
		if err := m2.RemovePath(context.Background(), c); err != nil || len(m2.Paths()) != 0 {
			t.Fatal("RemovePath")
		}
		if _, err := ParseIOPolicy("bogus"); err == nil {
			t.Fatal("bogus policy parsed")
		}
		for _, p := range []IOPolicy{IOPolicyNUMA, IOPolicyRoundRobin, IOPolicyQueueDepth} {
			if q, err := ParseIOPolicy(p.String()); err != nil || q != p {
				t.Fatalf("%v: %v %v", p, q, err)
			}
		}
	})
}

// TestMultipathRemovePath removes a path while I/O runs through it: the
// I/O in flight there ends there (drain) or, when the removal gives up
// waiting and the controller is disconnected, is sent again on the other
// path; no error reaches the caller and new I/O goes to the other path.
func TestMultipathRemovePath(t *testing.T) {
	t.Run("drains the I/O in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
			w := bytes.Repeat([]byte{0x5e}, 4096)
			if _, err := f.ns.WriteAt(w, 0); err != nil {
				t.Fatal(err)
			}
			f.a.readDelay.Store(int64(200 * time.Millisecond))
			done := make(chan error, 1)
			r := make([]byte, 4096)
			start := time.Now()
			go func() { _, err := f.ns.ReadAt(r, 0); done <- err }()
			synctest.Wait()
			removed := make(chan error, 1)
			go func() { removed <- f.m.RemovePath(context.Background(), f.ca) }()
			synctest.Wait()
			select {
			case err := <-removed:
				t.Fatalf("RemovePath returned with a read in flight on the path: %v", err)
			default:
			}
			// Meanwhile new I/O goes to b.
			ra0, rb0 := f.reads()
			r2 := make([]byte, 4096)
			if _, err := f.ns.ReadAt(r2, 0); err != nil || !bytes.Equal(r2, w) {
				t.Fatalf("read during the removal: %v", err)
			}
			if ra, rb := f.reads(); ra != ra0 || rb != rb0+1 {
				t.Fatalf("read during the removal: a %d->%d b %d->%d, want it on b", ra0, ra, rb0, rb)
			}
			if err := <-removed; err != nil {
				t.Fatalf("RemovePath: %v", err)
			}
			if err := <-done; err != nil || !bytes.Equal(r, w) {
				t.Fatalf("read in flight: %v", err)
			}
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Fatalf("RemovePath returned after %v, before the read in flight ended", d)
			}
			if ps := f.m.Paths(); len(ps) != 1 || ps[0] != f.cb {
				t.Fatalf("paths after RemovePath: %v", ps)
			}
			if ps := f.ns.Paths(); len(ps) != 1 || ps[0].Controller != f.cb {
				t.Fatalf("namespace paths after RemovePath: %+v", ps)
			}
			if err := f.ca.Disconnect(context.Background()); err != nil {
				t.Fatal(err)
			}
			if _, err := f.ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
				t.Fatalf("read after the removal: %v", err)
			}
		})
	})
	t.Run("re-routes what is left at disconnect", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
			w := bytes.Repeat([]byte{0xa7}, 4096)
			if _, err := f.ns.WriteAt(w, 4096); err != nil {
				t.Fatal(err)
			}
			// Never answered (the flag is on the data target, which b
			// shares: cleared once the read is held on a).
			f.a.stallRead.Store(true)
			done := make(chan error, 1)
			r := make([]byte, 4096)
			go func() { _, err := f.ns.ReadAt(r, 4096); done <- err }()
			synctest.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := f.m.RemovePath(ctx, f.ca); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("RemovePath with a stalled read: %v, want the deadline", err)
			}
			if len(f.m.Paths()) != 1 {
				t.Fatalf("paths: %v", f.m.Paths())
			}
			f.a.stallRead.Store(false) // the read stays held on a
			_, rb0 := f.reads()
			if err := f.ca.Disconnect(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil || !bytes.Equal(r, w) {
				t.Fatalf("read in flight at the disconnect: %v", err)
			}
			if _, rb := f.reads(); rb != rb0+1 {
				t.Fatalf("reads on b %d->%d: the read was not sent again there", rb0, rb)
			}
		})
	})
	t.Run("concurrent verified I/O", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANAOptimized, mpOpts(), MultipathOptions{IOPolicy: IOPolicyRoundRobin})
			// Each worker signals at round removeAt, goes on while the
			// path is removed, and waits at round pauseAt until it is
			// gone, so that some of its I/O certainly follows.
			const workers, rounds, removeAt, pauseAt = 4, 40, 10, 20
			errs := make(chan error, workers)
			progress := make(chan struct{}, workers)
			resume := make(chan struct{})
			for wkr := range workers {
				go func() {
					off := int64(wkr) * 8192
					w, r := make([]byte, 8192), make([]byte, 8192)
					for i := range rounds {
						switch i {
						case removeAt:
							progress <- struct{}{}
						case pauseAt:
							<-resume
						}
						for j := range w {
							w[j] = byte(wkr*31 + i + j)
						}
						if _, err := f.ns.WriteAt(w, off); err != nil {
							errs <- fmt.Errorf("worker %d write %d: %w", wkr, i, err)
							return
						}
						if _, err := f.ns.ReadAt(r, off); err != nil || !bytes.Equal(r, w) {
							errs <- fmt.Errorf("worker %d read %d: %v (data equal %v)", wkr, i, err, bytes.Equal(r, w))
							return
						}
					}
					errs <- nil
				}()
			}
			for range workers {
				<-progress
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := f.m.RemovePath(ctx, f.ca); err != nil {
				t.Fatalf("RemovePath: %v", err)
			}
			ra0, rb0 := f.reads()
			if err := f.ca.Disconnect(ctx); err != nil {
				t.Fatal(err)
			}
			close(resume)
			for range workers {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if ra, rb := f.reads(); ra != ra0 || rb < rb0+workers*(rounds-pauseAt) {
				t.Fatalf("reads after the removal: a %d->%d b %d->%d", ra0, ra, rb0, rb)
			}
		})
	})
	t.Run("unknown path", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newMPFixture(t, nvme.ANAOptimized, nvme.ANANonOptimized, mpOpts(), MultipathOptions{})
			other := NewMultipath(fakeNQN, MultipathOptions{})
			if err := other.RemovePath(context.Background(), f.ca); !errors.Is(err, ErrNotPath) {
				t.Fatalf("RemovePath of a controller never added: %v, want ErrNotPath", err)
			}
			if err := f.m.RemovePath(context.Background(), f.cb); err != nil {
				t.Fatal(err)
			}
			if err := f.m.RemovePath(context.Background(), f.cb); !errors.Is(err, ErrNotPath) {
				t.Fatalf("second RemovePath: %v, want ErrNotPath", err)
			}
			if ps := f.m.Paths(); len(ps) != 1 || ps[0] != f.ca {
				t.Fatalf("paths: %v", ps)
			}
			if _, err := f.ns.ReadAt(make([]byte, 4096), 0); err != nil {
				t.Fatalf("read on the path left: %v", err)
			}
		})
	})
}

func TestMultipathReadAllocs(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	ft.anaOn = true
	ft.anaState.Store(uint32(nvme.ANAOptimized))
	pb := newFakePeer(t, ft, "127.0.0.2", nvme.ANAOptimized)
	ca := connectFake(t, ft, testOpts())
	cb := connectFake(t, pb, testOpts())
	m := NewMultipath(fakeNQN, MultipathOptions{IOPolicy: IOPolicyRoundRobin})
	_ = m.AddPath(ca)
	_ = m.AddPath(cb)
	ns, err := m.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n := testing.AllocsPerRun(200, func() {
		if _, err := ns.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Fatalf("%v allocations per 4 KiB multipath read", n)
	}
	m.SetIOPolicy(IOPolicyQueueDepth)
	n = testing.AllocsPerRun(200, func() {
		if _, err := ns.WriteAt(buf, 4096); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Fatalf("%v allocations per 4 KiB multipath write (queue-depth)", n)
	}
}
