package initiator

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// TestReset resets a controller of the real target: CC.EN goes to 0 and
// CSTS.RDY follows, a new association (a new controller ID) replaces the
// old one, data written before reads back after, and I/O issued during the
// reset completes.
func TestReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTgtFixture(t, 1<<20)
		c := f.connect(t, Options{ReconnectDelay: 50 * time.Millisecond})
		ns, _ := c.Namespace(1)
		w := bytes.Repeat([]byte{9}, 8192)
		if _, err := ns.WriteAt(w, 0); err != nil {
			t.Fatal(err)
		}
		old := c.CntlID()
		var wg sync.WaitGroup
		var readErr error
		r := make([]byte, 8192)
		wg.Add(1)
		go func() { // races the reset: waits or runs on either association
			defer wg.Done()
			_, readErr = ns.ReadAt(r, 0)
		}()
		if err := c.Reset(context.Background()); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		wg.Wait()
		if readErr != nil || !bytes.Equal(r, w) {
			t.Errorf("read during the reset: %v", readErr)
		}
		if c.State() != StateLive || c.CntlID() == old {
			t.Errorf("after Reset: state %v, cntlid %d (was %d): want live on a new controller", c.State(), c.CntlID(), old)
		}
		cc, err := c.PropertyGet(context.Background(), fabrics.PropCC)
		if err != nil || !fabrics.CC(cc).EN() {
			t.Errorf("CC after Reset: %#x, %v: want enabled", cc, err)
		}
		clear(r)
		if _, err := ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
			t.Errorf("read after the reset: %v", err)
		}
		if err := c.Disconnect(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := c.Reset(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Reset after Disconnect: %v, want ErrClosed", err)
		}
	})
}

// TestResetDisables checks the order of a reset on the fake target: the
// old controller sees CC.EN cleared before the new association connects.
func TestResetDisables(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		c := connectFake(t, ft, testOpts())
		sets := ft.count("Property Set")
		connects := ft.count("Connect")
		if err := c.Reset(context.Background()); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		// One Property Set clears CC.EN, one enables the new controller.
		if got := ft.count("Property Set") - sets; got != 2 {
			t.Errorf("%d Property Sets during the reset, want 2 (disable, enable)", got)
		}
		if ft.count("Connect") == connects {
			t.Error("no new Connect: the reset made no new association")
		}
		if c.State() != StateLive || c.CntlID() != 2 {
			t.Errorf("state %v cntlid %d", c.State(), c.CntlID())
		}
	})
}

// TestFastIOFail checks fast_io_fail_tmo: once the controller has been
// disconnected that long, I/O fails with ErrFastIOFail instead of waiting
// (while it goes on reconnecting), and waits again once it is back.
func TestFastIOFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		o := testOpts()
		o.FastIOFailTimeout = 2 * time.Second
		o.CtrlLossTimeout = time.Hour
		c := connectFake(t, ft, o)
		ns, _ := c.Namespace(1)
		ft.unlisten()
		ft.killQueues()
		start := time.Now()
		_, err := ns.ReadAt(make([]byte, 4096), 0)
		if !errors.Is(err, ErrFastIOFail) {
			t.Fatalf("read while disconnected: %v, want ErrFastIOFail", err)
		}
		if d := time.Since(start); d < o.FastIOFailTimeout || d > o.FastIOFailTimeout+time.Second {
			t.Errorf("failed after %v, want about %v", d, o.FastIOFailTimeout)
		}
		if st := c.State(); st != StateConnecting && st != StateResetting {
			t.Errorf("state %v: the controller must go on reconnecting", st)
		}
		ft.listen()
		waitFor(t, "the reconnection", func() bool { return c.State() == StateLive })
		if _, err := ns.ReadAt(make([]byte, 4096), 0); err != nil {
			t.Errorf("read after the reconnection: %v", err)
		}
		if _, expired := c.failFastState(); expired {
			t.Error("fast_io_fail still expired once live")
		}
	})
}

// TestFastIOFailOff checks the default: I/O waits through a short outage.
func TestFastIOFailOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		c := connectFake(t, ft, testOpts())
		ns, _ := c.Namespace(1)
		ft.unlisten()
		ft.killQueues()
		done := make(chan error, 1)
		go func() {
			_, err := ns.ReadAt(make([]byte, 4096), 0)
			done <- err
		}()
		time.Sleep(5 * time.Second) // virtual time: the read still waits
		select {
		case err := <-done:
			t.Fatalf("read returned during the outage: %v", err)
		default:
		}
		ft.listen()
		if err := <-done; err != nil {
			t.Errorf("read across the outage: %v", err)
		}
	})
}

// TestReadLogPage reads the SMART page whole, from an offset, and in
// pieces no larger than a (lowered) admin transfer limit: the bytes agree.
func TestReadLogPage(t *testing.T) {
	f := newTgtFixture(t, 1<<20)
	c := f.connect(t, Options{})
	ctx := context.Background()
	whole := make([]byte, 512)
	if err := c.ReadLogPage(ctx, LogPageRequest{LID: 2, NSID: 0xffffffff}, whole); err != nil {
		t.Fatal(err)
	}
	part := make([]byte, 16)
	if err := c.ReadLogPage(ctx, LogPageRequest{LID: 2, NSID: 0xffffffff, Offset: 32}, part); err != nil || !bytes.Equal(part, whole[32:48]) {
		t.Errorf("offset 32: %x, %v; want %x", part, err, whole[32:48])
	}
	c.cur.Load().adminXfer = 64 // eight commands for the page
	pieces := make([]byte, 512)
	if err := c.ReadLogPage(ctx, LogPageRequest{LID: 2, NSID: 0xffffffff}, pieces); err != nil || !bytes.Equal(pieces, whole) {
		t.Errorf("in 64-byte pieces: %v, equal %v", err, bytes.Equal(pieces, whole))
	}
	if err := c.ReadLogPage(ctx, LogPageRequest{LID: 2}, make([]byte, 6)); err == nil {
		t.Error("a length not a multiple of 4 was accepted")
	}
}
