package fio

import (
	"testing"

	"github.com/nvmeof/nvmeof/initiator"
)

// plugNS is a fakeNS that holds the I/Os started between Plug and Unplug,
// as initiator.Namespace does over RDMA, and runs them at Unplug.
type plugNS struct {
	*fakeNS
	plugged bool
	held    []*initiator.IO
	plugs   int
}

func (p *plugNS) Plug() { p.plugged = true; p.plugs++ }

func (p *plugNS) Unplug() {
	p.plugged = false
	held := p.held
	p.held = nil
	for _, x := range held {
		p.fakeNS.Start(x)
	}
}

func (p *plugNS) Start(x *initiator.IO) {
	if p.plugged {
		p.held = append(p.held, x)
		return
	}
	p.fakeNS.Start(x)
}

// TestDelaySubmit: with DelaySubmit, Submit holds its request until Reap;
// Reap keeps holding while it has completions to return at once, fewer
// than a quarter of the slots are held and half are in flight, and sends
// them otherwise; Close sends what is held (it would wait forever
// otherwise). Without DelaySubmit, Submit starts each request.
func TestDelaySubmit(t *testing.T) {
	const depth = 16
	ns := &plugNS{fakeNS: newFakeNS(1 << 20)}
	e := newEngine(Config{Depth: depth, DelaySubmit: true}, nil, ns)
	buf := make([]byte, 512)
	out := make([]Completion, depth)
	submit := func(slot int) {
		t.Helper()
		if err := e.Submit(slot, Request{Op: OpRead, Buf: buf, Off: int64(slot) * 512}); err != nil {
			t.Fatal(err)
		}
	}

	// 12 in flight: nothing to reap, so Reap sends them.
	for i := range 12 {
		submit(i)
	}
	if len(ns.held) != 12 {
		t.Fatalf("%d requests held after 12 Submits, want 12", len(ns.held))
	}
	if n := e.Reap(1, 1, 0, out); n != 1 || len(ns.held) != 0 {
		t.Fatalf("Reap: %d completions, %d requests still held; want 1 and 0", n, len(ns.held))
	}
	// 11 completions wait, 11 in flight: a new request stays held while
	// Reap has completions to return and at least 8 are in flight.
	free := out[0].Slot
	submit(int(free))
	if n := e.Reap(1, 1, 0, out); n != 1 || len(ns.held) != 1 {
		t.Fatalf("Reap with completions ready: %d completions, %d held; want 1 and 1", n, len(ns.held))
	}
	// Reap until fewer than 8 are in flight besides the held one: then
	// it sends it.
	for e.Pending()-1 >= depth/2 {
		if n := e.Reap(1, 1, 0, out); n != 1 || len(ns.held) != 1 {
			t.Fatalf("Reap, %d pending: %d completions, %d held; want 1 and 1", e.Pending(), n, len(ns.held))
		}
	}
	e.Reap(1, 1, 0, out)
	if len(ns.held) != 0 {
		t.Fatalf("%d requests held with %d pending, want 0", len(ns.held), e.Pending())
	}
	reapAll(t, e, e.Pending())

	// A quarter of the slots held: sent even with completions ready.
	for i := range 12 {
		submit(i)
	}
	e.Reap(1, 1, 0, out) // sends the 12
	for k, slot := range []int32{out[0].Slot, 12, 13, 14} {
		submit(int(slot))
		if k < 3 {
			e.Reap(1, 1, 0, out)
			if len(ns.held) != k+1 {
				t.Fatalf("%d held after %d Submits, want %d", len(ns.held), k+1, k+1)
			}
		}
	}
	if e.Reap(1, 1, 0, out); len(ns.held) != 0 {
		t.Fatalf("%d held (4 of 16 slots): want all sent", len(ns.held))
	}
	reapAll(t, e, e.Pending())

	// Close sends what is held.
	submit(0)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ns.held) != 0 {
		t.Fatal("Close left a request held")
	}

	// Without DelaySubmit nothing is held.
	ns2 := &plugNS{fakeNS: newFakeNS(1 << 20)}
	e2 := newEngine(Config{Depth: depth}, nil, ns2)
	defer e2.Close()
	if err := e2.Submit(0, Request{Op: OpRead, Buf: buf}); err != nil {
		t.Fatal(err)
	}
	if ns2.plugs != 0 || len(ns2.held) != 0 {
		t.Fatalf("without DelaySubmit: %d Plugs, %d held; want 0 and 0", ns2.plugs, len(ns2.held))
	}
	reapAll(t, e2, 1)
}
