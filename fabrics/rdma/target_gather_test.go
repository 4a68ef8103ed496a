package rdma

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/nvme"
)

// gatherHandler answers opcode 0x02 by lending its regions' bytes: the
// read's data is cut into pieces pieces, alternating between the two
// regions at the same offsets.
type gatherHandler struct {
	a, b   *region.Region
	pieces int
}

func (h *gatherHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == 0x02 {
		if g, ok := r.Queue.(fabrics.GatherSender); !ok || !g.SendsGather() {
			nvme.CQE(r.CQE[:]).SetStatus(nvme.StatusInternalError)
		} else {
			n := len(r.Data)
			for i := range h.pieces {
				off, end := i*n/h.pieces, (i+1)*n/h.pieces
				reg := h.a
				if i%2 == 1 {
					reg = h.b
				}
				reg.Acquire()
				r.Gather = append(r.Gather, region.Segment{Region: reg, Off: off, Len: end - off})
			}
		}
	}
	go r.Complete()
}

func (h *gatherHandler) QueueClosed(error) {}

// TestGatherRead: a READ whose data a handler lends in pieces of two
// regions reaches the host intact, sent from the regions themselves (each
// registered once in the port's PD) when the pieces fit one RDMA WRITE and
// copied into the staging buffer when they do not; the segments are
// released once sent, and a region that goes is deregistered.
func TestGatherRead(t *testing.T) {
	tests := []struct {
		name     string
		pieces   int
		zeroCopy bool
	}{
		{"one piece", 1, true},
		{"pieces of two regions", maxGatherSGE, true},
		{"too many pieces: copied", maxGatherSGE + 1, false},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tdev := openSoft(t, netip.MustParseAddr("127.0.20.9"))
	hdev := openSoft(t, netip.MustParseAddr("127.0.20.10"))
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if !l.gather {
		t.Fatal("the soft device's port does not send gathers")
	}
	const n = 128 << 10
	mk := func(seed byte) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seed ^ byte(i*13)
		}
		return p
	}
	h := &gatherHandler{}
	go func() {
		q, err := l.Accept(ctx)
		if err == nil {
			q.Serve(h)
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: tdev.Addr(), ServiceID: 4420},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Close() })
	fabricsConnect(t, ctx, hq)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			abuf, bbuf := mk(1), mk(2)
			h.a, h.b, h.pieces = region.New(abuf, nil), region.New(bbuf, nil), tc.pieces
			want := make([]byte, 0, n)
			for i := range tc.pieces {
				src := abuf
				if i%2 == 1 {
					src = bbuf
				}
				want = append(want, src[i*n/tc.pieces:(i+1)*n/tc.pieces]...)
			}
			got := make([]byte, n)
			c := submit(t, ctx, hq, 0x02, got, fabrics.DirCtrlToHost)
			if st := nvme.CQE(c.CQE[:]).Status(); st != 0 {
				t.Fatalf("read: status %v", st)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the host read other bytes than the regions lent")
			}
			_, registered := l.regionMRs.m.Load(h.a)
			if registered != tc.zeroCopy {
				t.Errorf("region registered in the port's PD: %v, want %v", registered, tc.zeroCopy)
			}
			gone := make(chan struct{}, 2)
			for _, r := range []*region.Region{h.a, h.b} {
				r.OnRelease(func() { gone <- struct{}{} })
				r.Close()
			}
			for range 2 {
				select {
				case <-gone:
				case <-ctx.Done():
					t.Fatalf("a region was not released after its read (refs %d, %d)", h.a.Refs(), h.b.Refs())
				}
			}
			if _, ok := l.regionMRs.m.Load(h.a); ok {
				t.Error("a released region is still registered")
			}
		})
	}
}
