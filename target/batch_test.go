package target

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// heldDev is a memory device whose asynchronous reads wait in held until
// the test completes them, as a reaper would, in one pass.
type heldDev struct {
	*bdev.Memory
	mu   sync.Mutex
	held []bdev.Completion
	got  chan struct{}
}

func (d *heldDev) ReadAsync(p []byte, off int64, c bdev.Completion) {
	d.mu.Lock()
	d.held = append(d.held, c)
	d.mu.Unlock()
	d.got <- struct{}{}
}
func (d *heldDev) WriteAsync(p []byte, off int64, c bdev.Completion) { c.Complete(nil) }
func (d *heldDev) FlushAsync(c bdev.Completion)                      { c.Complete(nil) }
func (d *heldDev) WriteZeroesAsync(off, n int64, c bdev.Completion)  { c.Complete(nil) }
func (d *heldDev) DiscardAsync(off, n int64, c bdev.Completion)      { c.Complete(nil) }

// pass completes every held read in one pass, with one batch.
func (d *heldDev) pass(t *testing.T) {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	var b bdev.Batch
	for _, c := range held {
		bc, ok := c.(bdev.BatchCompletion)
		if !ok {
			t.Fatalf("the target's completion %T is no bdev.BatchCompletion", c)
		}
		if b == nil {
			b = bc.NewBatch()
		}
		bc.CompleteBatched(nil, b)
	}
	b.Flush()
}

// batchLoop wraps a loop listener whose queues take batches
// (fabrics.BatchCompleter) and count them.
type batchLoop struct {
	fabrics.Listener
	mu      sync.Mutex
	batches []int // sizes of the CompleteRequests calls
	singles int   // CompleteRequest calls
}

func (l *batchLoop) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	q, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &batchQueue{TargetQueue: q, l: l}, nil
}

type batchQueue struct {
	fabrics.TargetQueue
	l    *batchLoop
	once sync.Once
	bc   *batchCompleter
}

func (q *batchQueue) Serve(h fabrics.CommandHandler) { q.TargetQueue.Serve(batchHandler{h, q}) }

type batchHandler struct {
	fabrics.CommandHandler
	q *batchQueue
}

func (h batchHandler) HandleCommand(r *fabrics.Request) {
	h.q.once.Do(func() { h.q.bc = &batchCompleter{next: r.Completer, l: h.q.l} })
	r.Completer = h.q.bc
	h.CommandHandler.HandleCommand(r)
}

type batchCompleter struct {
	next fabrics.Completer
	l    *batchLoop
}

func (c *batchCompleter) CompleteRequest(r *fabrics.Request) {
	c.l.mu.Lock()
	c.l.singles++
	c.l.mu.Unlock()
	r.Completer = c.next
	c.next.CompleteRequest(r)
}

func (c *batchCompleter) CompleteRequests(rs []*fabrics.Request) {
	c.l.mu.Lock()
	c.l.batches = append(c.l.batches, len(rs))
	c.l.mu.Unlock()
	for _, r := range rs {
		r.Completer = c.next
		c.next.CompleteRequest(r)
	}
}

// TestCompletionPassBatched: the reads a backend completes in one pass
// reach their queue's transport in one CompleteRequests, and every host
// command completes; commands completed outside a pass go one by one.
func TestCompletionPassBatched(t *testing.T) {
	f := &fixture{t: t, net: loop.NewNetwork(), tgt: New(Options{Logger: testLogger(t)})}
	f.addr = fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
	must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowedHosts: []string{testHostNQN}}))
	mem, err := bdev.NewMemory(1<<20, 512)
	must(t, err)
	dev := &heldDev{Memory: mem, got: make(chan struct{}, 64)}
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 1, Device: dev}))
	must(t, f.tgt.AddPort(PortConfig{ID: testPortID, Address: f.addr, Subsystems: []string{testSubNQN}}))
	l, err := f.net.Listen(f.addr)
	must(t, err)
	bl := &batchLoop{Listener: l}
	f.serve(bl)
	s := f.session()

	for _, n := range []int{1, 5, 16} {
		bl.mu.Lock()
		bl.batches, bl.singles = nil, 0
		bl.mu.Unlock()
		chs := make([]<-chan result, n)
		for i := range chs {
			chs[i] = s.io.submit(rwSQE(nvme.IORead, 1, uint64(i), 1), make([]byte, 512), fabrics.DirCtrlToHost)
		}
		for i := range n {
			select {
			case <-dev.got:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d reads: read %d never reached the backend", n, i)
			}
		}
		dev.pass(t)
		for _, ch := range chs {
			expect(t, s.io.wait(ch), 0, "read")
		}
		bl.mu.Lock()
		batches, singles := bl.batches, bl.singles
		bl.mu.Unlock()
		wantB, wantS := []int{n}, 0
		if n == 1 {
			wantB, wantS = nil, 1 // a batch of one is a plain completion
		}
		if len(batches) != len(wantB) || (len(wantB) == 1 && batches[0] != n) || singles != wantS {
			t.Errorf("%d reads in one pass: batches %v and %d single completions, want %v and %d", n, batches, singles, wantB, wantS)
		}
	}
	// Outside a pass (a write completes at once): one by one.
	bl.mu.Lock()
	bl.batches, bl.singles = nil, 0
	bl.mu.Unlock()
	expect(t, s.io.write(1, 0, make([]byte, 512)), 0, "write")
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if len(bl.batches) != 0 || bl.singles != 1 {
		t.Errorf("a write completed at once: batches %v and %d single completions, want none and 1", bl.batches, bl.singles)
	}
}
