package target

import (
	"bytes"
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/fabrics/region"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// gatherLoop wraps a loop listener whose queues say they send
// Request.Gather (fabrics.GatherSender), as fabrics/rdma's do on the soft
// device; on completion it copies the lent pieces into Data for the loop
// to deliver, and releases them.
type gatherLoop struct {
	fabrics.Listener
	gathers atomic.Int64 // READs completed with lent memory
}

func (l *gatherLoop) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	q, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &gatherQueue{TargetQueue: q, l: l}, nil
}

type gatherQueue struct {
	fabrics.TargetQueue
	l *gatherLoop
}

func (q *gatherQueue) SendsGather() bool { return true }

func (q *gatherQueue) Serve(h fabrics.CommandHandler) {
	q.TargetQueue.Serve(gatherHandler{h, q})
}

type gatherHandler struct {
	fabrics.CommandHandler
	q *gatherQueue
}

func (h gatherHandler) HandleCommand(r *fabrics.Request) {
	r.Queue = h.q
	r.Completer = gatherCompleter{r.Completer, h.q.l}
	h.CommandHandler.HandleCommand(r)
}

type gatherCompleter struct {
	next fabrics.Completer
	l    *gatherLoop
}

func (c gatherCompleter) CompleteRequest(r *fabrics.Request) {
	if len(r.Gather) > 0 {
		c.l.gathers.Add(1)
		n := 0
		for _, g := range r.Gather {
			n += copy(r.Data[n:], g.Bytes())
		}
		r.Gather = region.ReleaseAll(r.Gather)
	}
	r.Completer = c.next
	c.next.CompleteRequest(r)
}

// TestReadGather: on a queue that sends gathers, a READ of a memory
// namespace lends the namespace's pages instead of copying them (across a
// 64 MiB mapping and into unwritten space too) and the host reads what it
// wrote; every lent piece is released.
func TestReadGather(t *testing.T) {
	f := &fixture{t: t, net: loop.NewNetwork(), tgt: New(Options{Logger: testLogger(t)})}
	f.addr = fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
	must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowedHosts: []string{testHostNQN}}))
	mem, err := bdev.NewMemory(128<<20, 512)
	must(t, err)
	must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 1, Device: mem}))
	must(t, f.tgt.AddPort(PortConfig{ID: testPortID, Address: f.addr, Subsystems: []string{testSubNQN}}))
	l, err := f.net.Listen(f.addr)
	must(t, err)
	gl := &gatherLoop{Listener: l}
	f.serve(gl)
	s := f.session()

	const boundary = (64 << 20) / 512 // the first LBA of the second mapping
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*31 + 7)
	}
	tests := []struct {
		name         string
		writeLBA     uint64
		readLBA      uint64
		blocks       int
		wantFromData int // offset in the read where data starts, -1: none
	}{
		{"written 4K", 0, 0, 8, 0},
		{"across the mappings", boundary - 64, boundary - 64, 128, 0},
		{"partly unwritten", 2048, 2048 - 16, 64, 16 * 512},
		{"never written", 0, 3 << 16, 256, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := s.io.write(1, tc.writeLBA, data); r.err != nil || r.status() != 0 {
				t.Fatalf("write: %v %v", r.err, r.status())
			}
			before := gl.gathers.Load()
			r := s.io.read(1, tc.readLBA, tc.blocks)
			if r.err != nil || r.status() != 0 {
				t.Fatalf("read: %v %v", r.err, r.status())
			}
			want := make([]byte, tc.blocks*512)
			if tc.wantFromData >= 0 {
				copy(want[tc.wantFromData:], data)
			}
			if !bytes.Equal(r.data, want) {
				t.Fatal("read differs from what was written")
			}
			if gl.gathers.Load() != before+1 {
				t.Fatal("the READ was copied, not lent")
			}
		})
	}
}
