package fabrics

import (
	"slices"
	"testing"
)

// recCompleter records how it was handed requests: one entry per call,
// the slots of the requests of that call.
type recCompleter struct{ calls [][]int }

func (c *recCompleter) CompleteRequest(r *Request) { c.calls = append(c.calls, []int{r.Slot}) }

// batchRec is a recCompleter that also takes batches.
type batchRec struct{ recCompleter }

func (c *batchRec) CompleteRequests(rs []*Request) {
	var s []int
	for _, r := range rs {
		s = append(s, r.Slot)
	}
	c.calls = append(c.calls, s)
}

func TestCompletionBatch(t *testing.T) {
	tests := []struct {
		name string
		// order of the requests added: which completer (0, 1: batching;
		// 2: plain), each with a slot numbered in order
		add  []int
		want [3][][]int
	}{
		{"empty", nil, [3][][]int{}},
		{"one request is one CompleteRequest", []int{0}, [3][][]int{{{0}}}},
		{"one queue: one batch in order", []int{0, 0, 0, 0}, [3][][]int{{{0, 1, 2, 3}}}},
		{"interleaved queues: one batch each, each in order", []int{0, 1, 0, 2, 1, 0, 2},
			[3][][]int{{{0, 2, 5}}, {{1, 4}}, {{3}, {6}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := [3]Completer{&batchRec{}, &batchRec{}, &recCompleter{}}
			var b CompletionBatch
			for i, k := range tc.add {
				b.Add(&Request{Completer: cs[k], Slot: i})
			}
			if b.Len() != len(tc.add) {
				t.Fatalf("Len %d, want %d", b.Len(), len(tc.add))
			}
			b.Flush()
			if b.Len() != 0 {
				t.Fatalf("Len %d after Flush, want 0", b.Len())
			}
			for k, c := range cs {
				var got [][]int
				switch c := c.(type) {
				case *batchRec:
					got = c.calls
				case *recCompleter:
					got = c.calls
				}
				if !slices.EqualFunc(got, tc.want[k], slices.Equal) {
					t.Errorf("completer %d got %v, want %v", k, got, tc.want[k])
				}
			}
			b.Flush() // nothing twice
			if n := len(cs[0].(*batchRec).calls); n != len(tc.want[0]) {
				t.Errorf("a second Flush completed again (%d calls)", n)
			}
		})
	}
}

// countCompleter counts the requests it is handed, allocating nothing.
type countCompleter struct{ n int }

func (c *countCompleter) CompleteRequest(*Request)       { c.n++ }
func (c *countCompleter) CompleteRequests(rs []*Request) { c.n += len(rs) }

func TestCompletionBatchAllocs(t *testing.T) {
	c := &countCompleter{}
	rs := make([]Request, 32)
	for i := range rs {
		rs[i] = Request{Completer: c, Slot: i}
	}
	var b CompletionBatch
	run := func() {
		for i := range rs {
			b.Add(&rs[i])
		}
		b.Flush()
	}
	run() // grow
	if n := testing.AllocsPerRun(100, run); n != 0 {
		t.Fatalf("%v allocations per batch", n)
	}
	if c.n != 102*len(rs) {
		t.Fatalf("%d requests completed, want %d", c.n, 102*len(rs))
	}
}
