package rdma

import (
	"testing"
)

// TestDataPool: buffers by size class out of units, the cap, FIFO
// waiters served as buffers come back (a large one not starved by small
// ones), and slabs that become whole units again.
func TestDataPool(t *testing.T) {
	dev := openSoft(t, pidAddr(30))
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	const unit = 128 << 10
	// Two units: at most two 128 KiB buffers, or 64 4 KiB ones.
	p := newDataPool(pd, unit, 2*unit)
	defer p.close()
	if got, want := p.classes, []int{4096, 32768, unit}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("classes %v, want %v", got, want)
	}
	var order []int
	w := make([]poolWaiter, 8)
	for i := range w {
		w[i].granted = func(x *poolWaiter) { order = append(order, i) }
	}
	get := func(i, size int) bool {
		t.Helper()
		w[i].size = size
		ok, err := p.get(&w[i])
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// A 4 KiB buffer takes a 4 KiB slot of a slab, not a unit.
	if !get(0, 512) || !get(1, 4096) {
		t.Fatal("small buffers refused")
	}
	if w[0].buf.u != w[1].buf.u || w[0].buf.idx == w[1].buf.idx {
		t.Fatalf("two 4 KiB buffers not from one slab: %+v %+v", w[0].buf, w[1].buf)
	}
	if reg, inUse := p.stats(); reg != 2*unit || inUse != 8192 {
		t.Fatalf("registered %d, in use %d; want %d and 8192", reg, inUse, 2*unit)
	}
	b, addr, lkey := p.bytes(w[1].buf)
	if len(b) != 4096 || addr == 0 || lkey == 0 {
		t.Fatalf("buffer %d bytes at %#x lkey %#x", len(b), addr, lkey)
	}
	// The other unit serves a 128 KiB buffer; the next one must wait,
	// and a small one queues behind it though a slab has room.
	if !get(2, unit) {
		t.Fatal("128 KiB buffer refused")
	}
	if get(3, 100<<10) || get(4, 4096) {
		t.Fatal("buffers beyond the cap handed out")
	}
	// The 128 KiB buffer back: waiter 3 gets it, then 4 its slab slot.
	p.put(w[2].buf)
	if len(order) != 2 || order[0] != 3 || order[1] != 4 {
		t.Fatalf("granted in order %v, want [3 4]", order)
	}
	// A waiter cancelled leaves the queue; one granted is not in it.
	if get(5, unit) || !p.cancel(&w[5]) || p.cancel(&w[3]) {
		t.Fatal("cancel")
	}
	// The slab's buffers all back: the unit is whole again and serves
	// a 128 KiB waiter.
	if get(6, unit) {
		t.Fatal("128 KiB buffer handed out over the cap")
	}
	for _, i := range []int{0, 1} {
		p.put(w[i].buf)
	}
	if len(order) != 2 {
		t.Fatalf("granted %v before the slab was whole", order)
	}
	p.put(w[4].buf)
	if len(order) != 3 || order[2] != 6 {
		t.Fatalf("granted %v, want waiter 6 once the slab is whole", order)
	}
	p.put(w[3].buf)
	p.put(w[6].buf)
	if reg, inUse := p.stats(); reg != 2*unit || inUse != 0 {
		t.Fatalf("registered %d, in use %d after all came back", reg, inUse)
	}
}
