package initiator

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Tests of the command engine (queue.go): one timeout policy for
// synchronous and asynchronous commands, tags shared with the transport,
// both kinds of command on one queue.

// engineOps run one 4 KiB Read at off into buf, synchronously or through
// Start, and return its result.
var engineOps = []struct {
	name string
	read func(t *testing.T, ns *Namespace, buf []byte, off int64) (int, error)
}{
	{"ReadAt", func(_ *testing.T, ns *Namespace, buf []byte, off int64) (int, error) { return ns.ReadAt(buf, off) }},
	{"Start", func(t *testing.T, ns *Namespace, buf []byte, off int64) (int, error) {
		x := &IO{Op: OpRead, Buf: buf, Off: off}
		startWait(t, ns, x)
		return x.N, x.Err
	}},
}

// TestTimeoutAbortThenSuccess: a Read that times out is aborted; the
// controller answers the Abort by completing the Read after all (as a
// controller that was merely slow): the Read succeeds with its data, and
// no queue is reset.
func TestTimeoutAbortThenSuccess(t *testing.T) {
	for _, op := range engineOps {
		t.Run(op.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft, _, c, ns := oneQueue(t, 100*time.Millisecond)
				want := bytes.Repeat([]byte{0x3c}, 4096)
				if _, err := ns.WriteAt(want, 8192); err != nil {
					t.Fatal(err)
				}
				ft.abortDone.Store(true)
				ft.stallRead.Store(true)
				buf := make([]byte, 4096)
				n, err := op.read(t, ns, buf, 8192)
				if err != nil || n != 4096 || !bytes.Equal(buf, want) {
					t.Fatalf("%d, %v (or other data), want the Read to succeed after the Abort", n, err)
				}
				if a := ft.count("Abort"); a != 1 {
					t.Errorf("%d Aborts, want 1", a)
				}
				synctest.Wait()
				if n := ft.count("Connect"); n != 1+c.NumIOQueues() || c.State() != StateLive {
					t.Errorf("%d Connects, state %v: a queue was reset", n, c.State())
				}
				ft.stallRead.Store(false)
				if _, err := op.read(t, ns, buf, 0); err != nil {
					t.Fatalf("next read: %v", err)
				}
			})
		})
	}
}

// TestTimeoutAbortIgnored: a Read times out and its Abort does not help
// (the controller answers "not aborted", or never answers the Abort): its
// queue (or the association) is reset and the Read fails with a
// *TimeoutError; the controller's late completion then never reaches the
// caller's buffer.
func TestTimeoutAbortIgnored(t *testing.T) {
	for _, stallAbort := range []bool{false, true} {
		for _, op := range engineOps {
			name := op.name + "/not-aborted"
			if stallAbort {
				name = op.name + "/abort-unanswered"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ft, o, c, ns := oneQueue(t, 100*time.Millisecond)
					ft.stallAbrt.Store(stallAbort)
					ft.stallRead.Store(true)
					buf := bytes.Repeat([]byte{0x5a}, 4096)
					start := time.Now()
					n, err := op.read(t, ns, buf, 0)
					var te *TimeoutError
					if !errors.As(err, &te) || te.Op != "Read" || te.QID != 1 || te.After != o.CommandTimeout || n != 0 {
						t.Fatalf("%d, %v, want a Read timeout", n, err)
					}
					if d := time.Since(start); d < 2*o.CommandTimeout {
						t.Errorf("failed after %v: before the Abort's further timeout", d)
					}
					if a := ft.count("Abort"); a != 1 {
						t.Errorf("%d Aborts, want 1", a)
					}
					// The controller answers late, into the request it
					// holds: nothing may reach the caller's buffer.
					ft.mu.Lock()
					held := ft.held
					ft.held = nil
					ft.mu.Unlock()
					if len(held) != 1 {
						t.Fatalf("%d Reads held", len(held))
					}
					for i := range held[0].Data {
						held[0].Data[i] = 0xee
					}
					held[0].Complete()
					if i := bytes.IndexFunc(buf, func(r rune) bool { return r != 0x5a }); i >= 0 {
						t.Fatalf("byte %d of the caller's buffer written after the Read returned", i)
					}
					// A new queue (not aborted: the I/O queue alone; Abort
					// unanswered: the whole association) serves I/O.
					wantConnects, wantCntl := 3, uint16(1)
					if stallAbort {
						wantConnects, wantCntl = 4, 2
					}
					waitFor(t, "reconnected", func() bool { return ft.count("Connect") == wantConnects && c.State() == StateLive })
					if c.CntlID() != wantCntl {
						t.Errorf("cntlid %d, want %d", c.CntlID(), wantCntl)
					}
					ft.stallRead.Store(false)
					ft.stallAbrt.Store(false)
					if _, err := op.read(t, ns, buf, 0); err != nil {
						t.Fatalf("read after the reset: %v", err)
					}
				})
			})
		}
	}
}

// TestMixedSyncAsyncFullDepth keeps one I/O queue full with ReadAt calls
// and Start I/O at once (more than its depth): every Read gets its data,
// each completes once, and the queue was full at times.
func TestMixedSyncAsyncFullDepth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget(t, 1<<20)
		o := testOpts()
		o.NrIOQueues = 1
		o.QueueSize = MinQueueSize
		c := connectFake(t, ft, o)
		ns, _ := c.Namespace(1)
		want := make([]byte, 256<<10)
		for i := range want {
			want[i] = byte(i/4096) ^ byte(i)
		}
		if _, err := ns.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		ft.readDelay.Store(int64(time.Millisecond))
		depth := c.cur.Load().io[0].Load().hq.Depth()
		const rounds = 8
		var wg sync.WaitGroup
		var bad atomic.Int32
		check := func(buf []byte, off int64, n int, err error) {
			if err != nil || n != len(buf) || !bytes.Equal(buf, want[off:off+int64(len(buf))]) {
				if bad.Add(1) == 1 {
					t.Errorf("read at %d: %d, %v (or other data)", off, n, err)
				}
			}
		}
		// depth synchronous readers...
		for g := range depth {
			wg.Go(func() {
				buf := make([]byte, 4096)
				for r := range rounds {
					off := int64((g*rounds+r)%64) * 4096
					n, err := ns.ReadAt(buf, off)
					check(buf, off, n, err)
				}
			})
		}
		// ...and depth asynchronous ones, each keeping one Read going.
		var calls atomic.Int32
		for g := range depth {
			wg.Add(1)
			x := &IO{Op: OpRead, Buf: make([]byte, 4096), Off: int64(g%64) * 4096}
			left := rounds
			x.Done = func(x *IO) {
				calls.Add(1)
				check(x.Buf, x.Off, x.N, x.Err)
				if left--; left == 0 {
					wg.Done()
					return
				}
				x.Off = (x.Off + 4096*7) % (64 * 4096)
				go ns.Start(x) // not from Done: an inline completion would recurse
			}
			ns.Start(x)
		}
		wg.Wait()
		if n := calls.Load(); n != int32(depth*rounds) {
			t.Errorf("%d Done calls, want %d", n, depth*rounds)
		}
		if m := ft.maxFlight.Load(); m != int32(depth) {
			t.Errorf("at most %d Reads in flight, want the queue's depth %d", m, depth)
		}
	})
}

// TestTagsAndCIDs: the engine names each command by its slot (the tag)
// and the transport puts the tag in the CID's low bits, with a
// generation that changes as the tag is reused.
func TestTagsAndCIDs(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	o := testOpts()
	o.NrIOQueues = 1
	rec := &cidDialer{d: ft.dialer()}
	c := connectWith(t, rec, ft.addr, o)
	ns, _ := c.Namespace(1)
	buf := make([]byte, 4096)
	for range 20 {
		if _, err := ns.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.seen) < 20 {
		t.Fatalf("%d commands seen", len(rec.seen))
	}
	last := map[uint16]uint16{}
	for _, s := range rec.seen {
		if fabrics.CIDTag(s.cid) != s.tag || int(s.tag) >= s.depth {
			t.Fatalf("CID %#x for tag %d of a queue of %d", s.cid, s.tag, s.depth)
		}
		if prev, ok := last[s.tag]; ok && prev == s.cid {
			t.Fatalf("tag %d reused with the same CID %#x", s.tag, s.cid)
		}
		last[s.tag] = s.cid
	}
}

// cidDialer's I/O queues record the tag and the CID of every command.
type cidDialer struct {
	d    fabrics.Dialer
	mu   sync.Mutex
	seen []struct {
		tag, cid uint16
		depth    int
	}
}

func (d *cidDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	hq, err := d.d.Dial(ctx, addr, p)
	if err != nil || p.QID == 0 {
		return hq, err
	}
	return cidQueue{hq, d}, nil
}

type cidQueue struct {
	fabrics.HostQueue
	d *cidDialer
}

func (q cidQueue) Submit(cmd *fabrics.HostCommand) error {
	tag := cmd.Tag
	if err := q.HostQueue.Submit(cmd); err != nil {
		return err
	}
	q.d.mu.Lock()
	// The CID is in the SQE once Submit returns (the loop transport
	// completes nothing before the target has the command).
	q.d.seen = append(q.d.seen, struct {
		tag, cid uint16
		depth    int
	}{tag, uint16(cmd.SQE[2]) | uint16(cmd.SQE[3])<<8, q.Depth()})
	q.d.mu.Unlock()
	return nil
}
