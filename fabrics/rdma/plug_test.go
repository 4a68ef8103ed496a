package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestHostPlug: commands submitted to a plugged host queue stay on the
// host (its QP posts nothing: the soft device's sent packets do not move)
// until Unplug, which posts them in order, as one chain; they then
// complete as any other. Commands submitted after Unplug leave at once.
func TestHostPlug(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, hq := dialRogue(t, ctx, 4420)
	q := hq.(*hostQueue)
	sent := func() uint64 { return r.host.(*soft.Device).Stats().PacketsSent }

	hq.(fabrics.Plugger).Plug()
	before := sent()
	var dones []<-chan *fabrics.HostCommand
	for op := byte(0x80); op < 0x83; op++ {
		dones = append(dones, submitAsync(t, hq, op, nil, fabrics.DirNone))
	}
	q.plugMu.Lock()
	held := len(q.plugTags)
	q.plugMu.Unlock()
	if held != 3 || sent() != before {
		t.Fatalf("plugged: %d commands held, %d packets sent; want 3 and 0", held, sent()-before)
	}
	hq.(fabrics.Plugger).Unplug()
	for op := byte(0x80); op < 0x83; op++ {
		c := r.capsule()
		if c[0] != op {
			t.Fatalf("capsule opcode %#x, want %#x (in submission order)", c[0], op)
		}
		r.respond(c.CID(), uint32(op), 0)
	}
	for i, d := range dones {
		c := waitDone(t, ctx, d)
		if c.Err != nil || nvme.CQE(c.CQE[:]).DW0() != uint32(0x80+i) {
			t.Fatalf("command %d: %v, dw0 %#x", i, c.Err, nvme.CQE(c.CQE[:]).DW0())
		}
	}

	// Unplugged: a command leaves from Submit.
	d := submitAsync(t, hq, 0x90, nil, fabrics.DirNone)
	c := r.capsule()
	r.respond(c.CID(), 7, 0)
	if got := waitDone(t, ctx, d); got.Err != nil {
		t.Fatal(got.Err)
	}
}
