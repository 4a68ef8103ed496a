//go:build ibverbs && cgo

package ibverbs

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/nvmeof/nvmeof/rdma"
)

// fakeVerbs stands in for ibv_reg_mr and ibv_dereg_mr (no device here):
// at registration, the moment the NIC takes the address, it records
// whether cgo's rules let C keep it.
type fakeVerbs struct {
	retainable []bool
	regs       map[unsafe.Pointer]unsafe.Pointer // struct ibv_mr -> buffer
	failReg    bool
}

func useFakeVerbs(t *testing.T) *fakeVerbs {
	t.Helper()
	f := &fakeVerbs{regs: map[unsafe.Pointer]unsafe.Pointer{}}
	old := verbs
	verbs = mrVerbs{
		reg: func(_, addr unsafe.Pointer, n int, _ rdma.Access) (unsafe.Pointer, error) {
			f.retainable = append(f.retainable, retainable(addr))
			if f.failReg {
				return nil, errors.New("fake ibv_reg_mr failure")
			}
			// Never read by C: LKey and friends are not called.
			h := unsafe.Pointer(new([256]byte))
			f.regs[h] = addr
			return h, nil
		},
		dereg: func(m unsafe.Pointer) error {
			delete(f.regs, m)
			return nil
		},
	}
	t.Cleanup(func() { verbs = old })
	return f
}

// needCgoCheck skips unless cgo's pointer check is on (GODEBUG=cgocheck=1,
// the default): it is what tells a pinned buffer from an unpinned one.
func needCgoCheck(t *testing.T) {
	t.Helper()
	if retainable(unsafe.Pointer(&make([]byte, 64)[0])) {
		t.Skip("cgo pointer check off (GODEBUG=cgocheck=0): cannot tell pinned memory")
	}
}

// TestRegMRPinsGoBuffer: RegMR on a Go slice pins it for the region's
// life, so the NIC's copy of the address obeys cgo's pointer rules; after
// Deregister it is unpinned, and a failed registration leaves no pin.
func TestRegMRPinsGoBuffer(t *testing.T) {
	needCgoCheck(t)
	f := useFakeVerbs(t)
	p := &pd{}
	buf := make([]byte, 1<<20)
	m, err := p.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.retainable) != 1 || !f.retainable[0] {
		t.Fatalf("buffer not pinned when the NIC took its address: %v", f.retainable)
	}
	runtime.GC() // a pin held only by an unreachable Pinner would panic here
	if !retainable(unsafe.Pointer(&buf[0])) || !retainable(unsafe.Pointer(&buf[len(buf)-1])) {
		t.Fatal("buffer not pinned while registered")
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if retainable(unsafe.Pointer(&buf[0])) {
		t.Fatal("buffer still pinned after Deregister")
	}
	if len(f.regs) != 0 || len(p.mrs) != 0 {
		t.Fatalf("registrations left: %d fake, %d in the PD", len(f.regs), len(p.mrs))
	}

	f.failReg = true
	other := make([]byte, 4096)
	if _, err := p.RegMR(other, rdma.AccessLocalWrite); err == nil {
		t.Fatal("fake failure not reported")
	}
	if retainable(unsafe.Pointer(&other[0])) {
		t.Fatal("buffer pinned after a failed registration")
	}
}

// TestRegMRKeepsLeakedPin: a region never deregistered keeps its pin
// reachable from the PD, so the garbage collector finds no leaked Pinner
// (which the runtime turns into a fatal panic).
func TestRegMRKeepsLeakedPin(t *testing.T) {
	needCgoCheck(t)
	useFakeVerbs(t)
	p := &pd{}
	buf := make([]byte, 4096)
	if _, err := p.RegMR(buf, rdma.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	if !retainable(unsafe.Pointer(&buf[0])) || len(p.mrs) != 1 {
		t.Fatal("leaked region lost its pin")
	}
	for m := range p.mrs {
		m.Deregister()
	}
}

// TestAllocMRUnmanaged: AllocMR's memory is outside the Go heap (C may
// keep it without a pin), zeroed and page aligned, and Deregister unmaps
// it.
func TestAllocMRUnmanaged(t *testing.T) {
	needCgoCheck(t)
	f := useFakeVerbs(t)
	p := &pd{}
	m, err := p.AllocMR(64<<10, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	b := m.Bytes()
	if len(b) != 64<<10 || uintptr(unsafe.Pointer(&b[0]))%4096 != 0 {
		t.Fatalf("buffer of %d bytes at %p", len(b), &b[0])
	}
	if !f.retainable[0] {
		t.Fatal("AllocMR memory not retainable by C")
	}
	for _, c := range b {
		if c != 0 {
			t.Fatal("memory not zeroed")
		}
	}
	b[0], b[len(b)-1] = 1, 2
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if m.Bytes() != nil {
		t.Fatal("Bytes after Deregister")
	}
}

// TestAllocBufferOutsideGoHeap: AllocBuffer's memory, huge pages or not,
// is memory Go does not manage.
func TestAllocBufferOutsideGoHeap(t *testing.T) {
	needCgoCheck(t)
	for _, n := range []int{1, 4096, hugePage} {
		b, err := AllocBuffer(n)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if len(b) != n || !retainable(unsafe.Pointer(&b[0])) {
			t.Fatalf("%d bytes: len %d, retainable %v", n, len(b), retainable(unsafe.Pointer(&b[0])))
		}
		b[n-1] = 1
		if err := FreeBuffer(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := AllocBuffer(0); err == nil {
		t.Fatal("AllocBuffer(0) succeeded")
	}
}
