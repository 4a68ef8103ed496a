package tcp

import (
	"sync"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// plugHandler holds each I/O command in the reader's plug and completes
// the ones it holds when the plug is flushed, as a backend that submits
// on FlushPlug does.
type plugHandler struct {
	syncHandler
	mu      sync.Mutex
	held    []*fabrics.Request
	noPlug  int
	flushes chan int // commands held at each FlushPlug
}

func (h *plugHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabrics.OpcodeFabrics {
		h.syncHandler.HandleCommand(r)
		return
	}
	h.mu.Lock()
	if r.Plug == nil {
		h.noPlug++
		h.mu.Unlock()
		r.Complete()
		return
	}
	h.held = append(h.held, r)
	h.mu.Unlock()
	r.Plug.Join(h)
}

func (h *plugHandler) FlushPlug() {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	h.flushes <- len(held)
	for _, r := range held {
		r.Complete()
	}
}

// TestTargetSubmitPlug: the commands of one burst (one read) wait in the
// reader's plug, which it flushes once, after the last of them and
// before it waits for the socket: a backend submits them together.
func TestTargetSubmitPlug(t *testing.T) {
	h := &plugHandler{syncHandler: syncHandler{closed: make(chan error, 1)}, flushes: make(chan int, 16)}
	c, _ := tgtServeOne(t, "127.0.41.60", h)
	for _, n := range []int{4, 1, 3} {
		var burst []byte
		for i := range n {
			burst = append(burst, c.capsule(tgtIOSQE(nvme.IORead, uint16(40+i), 0, 1, false), nil)...)
		}
		c.write(burst) // one segment on loopback: one read
		for i := range n {
			if p := c.read(); p == nil || p.Type() != TypeC2HData {
				t.Fatalf("burst of %d: response %d: %v", n, i, p)
			}
		}
		// Each FlushPlug reports before it completes: every one that
		// answered the burst is in the channel by now.
		var got []int
		for len(h.flushes) > 0 {
			got = append(got, <-h.flushes)
		}
		if len(got) != 1 || got[0] != n {
			t.Errorf("burst of %d: FlushPlug with %v commands held, want one with %d", n, got, n)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.noPlug != 0 {
		t.Errorf("%d commands came without the reader's plug", h.noPlug)
	}
}
