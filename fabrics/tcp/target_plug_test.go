package tcp

import (
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/plugtest"
	"github.com/nvmeof/nvmeof/nvme"
)

// plugHandler completes Fabrics commands at once and holds I/O commands
// in their plugs, as a backend that submits on FlushPlug does.
type plugHandler struct {
	syncHandler
	plugtest.Backend
}

func (h *plugHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabrics.OpcodeFabrics {
		h.syncHandler.HandleCommand(r)
		return
	}
	h.Hold(r)
}

// TestTargetSubmitPlug: the commands of one burst (one read) wait in the
// reader's plug, which it flushes once, after the last of them and
// before it waits for the socket: a backend submits them together.
func TestTargetSubmitPlug(t *testing.T) {
	h := &plugHandler{syncHandler: syncHandler{closed: make(chan error, 1)}}
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
		noPlug, flushed := h.Take()
		if noPlug != 0 || !slices.Equal(flushed, []int{n}) {
			t.Errorf("burst of %d: %d commands without the reader's plug, FlushPlug with %v held; want 0 and one with %d",
				n, noPlug, flushed, n)
		}
	}
}
