package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/internal/plugtest"
)

// plugHandler completes Fabrics commands at once and holds I/O commands
// in their plugs, as a backend that submits on FlushPlug does.
type plugHandler struct{ plugtest.Backend }

func (h *plugHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabricsOpcode {
		r.Complete()
		return
	}
	h.Hold(r)
}

func (h *plugHandler) QueueClosed(error) {}

// TestTargetSubmitPlug: commands the CQ's handler delivers come with the
// queue's plug, which the end of each CQ batch flushes: the commands of a
// burst (one chain from a plugged host queue) are all held and then all
// completed by the flushes, none left waiting.
func TestTargetSubmitPlug(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := &plugHandler{}
	hq := startWith(t, ctx, 0, h).hq

	const n = 8
	hq.(fabrics.Plugger).Plug()
	var dones []<-chan *fabrics.HostCommand
	for i := range n {
		dones = append(dones, submitAsync(t, hq, byte(0x80+i), nil, fabrics.DirNone))
	}
	hq.(fabrics.Plugger).Unplug()
	for i, d := range dones {
		if c := waitDone(t, ctx, d); c.Err != nil {
			t.Fatalf("command %d: %v", i, c.Err)
		}
	}
	noPlug, flushed := h.Take()
	total := 0
	for _, k := range flushed {
		total += k
	}
	if noPlug != 0 || total != n || len(flushed) > n {
		t.Errorf("%d commands without a plug; flushes holding %v commands; want none, and %d in all", noPlug, flushed, n)
	}
}
