package rdma

import (
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
)

// countQP records each PostSend: the WRIDs of its chain.
type countQP struct {
	rdma.QP
	posts [][]uint64
}

func (q *countQP) PostSend(wr *rdma.SendWR) error {
	var ids []uint64
	for ; wr != nil; wr = wr.Next {
		ids = append(ids, wr.WRID)
	}
	q.posts = append(q.posts, ids)
	return nil
}

// TestTargetBatchNesting: the work requests posted while batches are open
// (a CQ batch and a reaper's CompleteRequests may overlap) leave in one
// PostSend when the last of them ends, READs then WRITEs then SENDs, each
// in order; outside a batch each post leaves at once.
func TestTargetBatchNesting(t *testing.T) {
	type step struct {
		op   string // "begin", "end", "post"
		a, b uint64 // post: WRIDs of a (0: none; an RDMA WRITE) and b (a SEND)
	}
	tests := []struct {
		name  string
		steps []step
		want  [][]uint64
	}{
		{"unbatched: a post each", []step{{"post", 1, 2}, {"post", 0, 3}}, [][]uint64{{1, 2}, {3}}},
		{"one batch: one post, writes before sends", []step{{"begin", 0, 0}, {"post", 1, 2}, {"post", 3, 4}, {"post", 0, 5}, {"end", 0, 0}},
			[][]uint64{{1, 3, 2, 4, 5}}},
		{"overlapping batches: the last end posts all", []step{{"begin", 0, 0}, {"post", 0, 1}, {"begin", 0, 0}, {"post", 0, 2},
			{"end", 0, 0}, {"post", 0, 3}, {"end", 0, 0}, {"post", 0, 4}}, [][]uint64{{1, 2, 3}, {4}}},
		{"an empty batch posts nothing", []step{{"begin", 0, 0}, {"end", 0, 0}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			qp := &countQP{}
			q := &targetQueue{}
			q.qp = qp
			for i, s := range tc.steps {
				switch s.op {
				case "begin":
					q.begin()
				case "end":
					q.end()
				case "post":
					var a *rdma.SendWR
					if s.a != 0 {
						a = &rdma.SendWR{WRID: s.a}
					}
					q.post(a, chainWrite, &rdma.SendWR{WRID: s.b}, chainSend, "test")
				default:
					t.Fatalf("step %d: %q", i, s.op)
				}
			}
			if !slices.EqualFunc(qp.posts, tc.want, slices.Equal) {
				t.Errorf("PostSends %v, want %v", qp.posts, tc.want)
			}
			if q.plugged != 0 {
				t.Errorf("%d batches left open", q.plugged)
			}
		})
	}
}
