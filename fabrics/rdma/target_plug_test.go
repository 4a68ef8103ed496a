package rdma

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// plugHandler holds each I/O command in the plug it comes with and
// completes the ones it holds when the plug is flushed, as a backend that
// submits on FlushPlug does; Fabrics commands complete at once.
type plugHandler struct {
	mu      sync.Mutex
	held    []*fabrics.Request
	noPlug  int
	flushed []int // commands held at each FlushPlug
}

func (h *plugHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabricsOpcode {
		r.Complete()
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
	h.flushed = append(h.flushed, len(held))
	h.mu.Unlock()
	for _, r := range held {
		r.Complete()
	}
}

func (h *plugHandler) QueueClosed(error) {}

// TestTargetSubmitPlug: commands the CQ's handler delivers come with the
// queue's plug, which the end of each CQ batch flushes: the commands of a
// burst (one chain from a plugged host queue) are all held and then all
// completed by the flushes, none left waiting.
func TestTargetSubmitPlug(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tdev, hdev := openSoft(t, targetAddr), openSoft(t, hostAddr)
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &plugHandler{}
	go func() {
		if q, err := l.Accept(ctx); err == nil {
			q.Serve(h)
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: targetAddr, ServiceID: 4420},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Close() })
	fabricsConnect(t, ctx, hq)

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
	h.mu.Lock()
	defer h.mu.Unlock()
	total := 0
	for _, k := range h.flushed {
		total += k
	}
	if h.noPlug != 0 || total != n || len(h.flushed) > n {
		t.Errorf("%d commands without a plug; flushes holding %v commands; want none, and %d in all", h.noPlug, h.flushed, n)
	}
}
