package bdev

import (
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// passRec records how an engine completed: each batch flushed (its
// size), completions outside a batch, and every result on done.
type passRec struct {
	mu      sync.Mutex
	flushes []int
	direct  int
	done    chan error
}

// passBatch is the batch passOp makes: results wait in it until Flush.
type passBatch struct {
	r    *passRec
	errs []error
}

func (b *passBatch) Flush() {
	if len(b.errs) == 0 {
		return
	}
	b.r.mu.Lock()
	b.r.flushes = append(b.r.flushes, len(b.errs))
	b.r.mu.Unlock()
	for _, err := range b.errs {
		b.r.done <- err
	}
	b.errs = b.errs[:0]
}

// passOp is a BatchCompletion reporting to its passRec.
type passOp struct{ r *passRec }

func (o passOp) Complete(err error) {
	o.r.mu.Lock()
	o.r.direct++
	o.r.mu.Unlock()
	o.r.done <- err
}

func (o passOp) NewBatch() Batch { return &passBatch{r: o.r} }

func (o passOp) CompleteBatched(err error, b Batch) {
	pb := b.(*passBatch)
	pb.errs = append(pb.errs, err)
}

// results waits for n results (10 s at most: a completion left held in a
// batch fails here) and returns the batch sizes and the direct count.
func (r *passRec) results(t *testing.T, n int) ([]int, int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case err := <-r.done:
			if err != nil {
				t.Fatalf("operation %d: %v", i, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d operations never completed (held in a batch?)", n-i, n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.flushes...), r.direct
}

// TestReapPassIsOneBatch puts n completions in the ring before the
// reaper starts: its first pass completes them all into one batch and
// flushes it once.
func TestReapPassIsOneBatch(t *testing.T) {
	for _, n := range []int{1, 2, 7, 16} {
		d := openAsyncFile(t, Spec{Size: 1 << 20, QueueDepth: 16})
		e := d.eng
		r := &passRec{done: make(chan error, n)}
		e.mu.Lock()
		for range n {
			i := e.free[len(e.free)-1]
			e.free = e.free[:len(e.free)-1]
			e.slots[i] = ringOp{kind: opDiscard, c: passOp{r}} // completes on res 0
			e.inflight++
			e.ring.SQE().PrepNop(uint64(i))
		}
		if err := e.ring.Submit(0); err != nil {
			t.Fatal(err)
		}
		e.mu.Unlock()
		e.launch.Do(e.goroutines)
		flushes, direct := r.results(t, n)
		if len(flushes) != 1 || flushes[0] != n || direct != 0 {
			t.Errorf("%d completions in one pass: batches %v and %d outside one, want [%d] and 0", n, flushes, direct, n)
		}
	}
}

// TestBatchNothingHeld runs writes and reads at depth through the engine
// with a BatchCompletion: every result arrives (none stays held in a
// batch), all of them through batches, and the engine ends idle.
func TestBatchNothingHeld(t *testing.T) {
	d := openAsyncFile(t, Spec{Size: 1 << 20, QueueDepth: 8})
	const n = 64
	r := &passRec{done: make(chan error, n)}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = alignedBuf(4096, 4096)
	}
	for i := range n / 2 {
		d.WriteAsync(bufs[i], int64(i)*4096, passOp{r})
	}
	for i := n / 2; i < n; i++ {
		d.ReadAsync(bufs[i], int64(i-n/2)*4096, passOp{r})
	}
	flushes, direct := r.results(t, n)
	sum := 0
	for _, f := range flushes {
		sum += f
	}
	if sum != n || direct != 0 {
		t.Errorf("%d completions in batches %v and %d outside one, want all %d in batches", sum, flushes, direct, n)
	}
}

// TestBatchOnClose: an engine closed right after its last completions
// has flushed them (the reaper flushes before it exits).
func TestBatchOnClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	for range 20 {
		d := openAsyncFile(t, Spec{Path: path, Size: 1 << 20, QueueDepth: 4})
		r := &passRec{done: make(chan error, 4)}
		for i := range 4 {
			d.WriteAsync(alignedBuf(4096, 4096), int64(i)*4096, passOp{r})
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		r.results(t, 4)
	}
}
