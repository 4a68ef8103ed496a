package tcp

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// holdHandler completes Fabrics commands at once and holds I/O commands
// for the test to complete.
type holdHandler struct {
	syncHandler
	held chan *fabrics.Request
}

func (h *holdHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabrics.OpcodeFabrics {
		h.syncHandler.HandleCommand(r)
		return
	}
	h.held <- r
}

// TestTargetCompleteRequests: the responses handed over in one
// CompleteRequests (a backend's reaping pass) leave in one send; handed
// over one by one, in a send each.
func TestTargetCompleteRequests(t *testing.T) {
	const n = 8
	h := &holdHandler{syncHandler: syncHandler{closed: make(chan error, 1)}, held: make(chan *fabrics.Request, n)}
	c, q := tgtServeOne(t, "127.0.41.32", h)

	for _, tc := range []struct {
		name      string
		batch     bool
		wantSends uint64
	}{
		{"one by one", false, n},
		{"one batch", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := make([]*fabrics.Request, 0, n)
			for i := range n {
				// One at a time: no burst for the reader to cork.
				c.write(c.capsule(tgtIOSQE(nvme.IORead, uint16(20+i), 0, 1, false), nil))
				select {
				case r := <-h.held:
					held = append(held, r)
				case <-time.After(10 * time.Second):
					t.Fatalf("read %d never reached the handler", i)
				}
			}
			i0, s0 := tgtSendCounts(t, q)
			if tc.batch {
				q.CompleteRequests(held)
			} else {
				for _, r := range held {
					r.Complete()
				}
			}
			for i := range n {
				if p := c.read(); p == nil || p.Type() != TypeC2HData {
					t.Fatalf("response %d: %v", i, p)
				}
			}
			i1, s1 := tgtSendCounts(t, q)
			if got := i1 - i0 + s1 - s0; got != tc.wantSends {
				t.Errorf("%d responses: %d sends, want %d", n, got, tc.wantSends)
			}
		})
	}
}
