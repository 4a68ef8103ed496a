package rdmatest

import (
	"errors"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
)

// Type-2 memory windows (rdma.MWAllocator, SendWR.Bind): an rkey of its
// own over part of a region that has no remote rights, bound on the send
// queue, invalidated by LOCAL_INV or by the peer's SEND with Invalidate.
// Providers whose PDs allocate no windows skip.

// mwWindow is where the tests bind their windows in a region of
// mwRegion bytes: off the region's ends, so that accesses just outside
// the window stay inside the region.
const (
	mwRegion = 8192
	mwOff    = 1024
	mwLen    = 2048
)

// allocMW allocates a type-2 window in x's PD, deallocated when t ends
// (before x's QP and regions are released), or skips t.
func allocMW(t *testing.T, x *end) rdma.MW {
	t.Helper()
	a, ok := x.pd.(rdma.MWAllocator)
	if !ok {
		t.Skipf("the provider's PDs (%T) do not implement rdma.MWAllocator (memory windows)", x.pd)
	}
	w, err := a.AllocMW()
	unsupported(t, "type-2 memory windows", err)
	t.Cleanup(func() {
		if err := w.Dealloc(); err != nil {
			t.Errorf("cleanup: dealloc MW %#x: %v", w.RKey(), err)
		}
	})
	return w
}

// bindMW binds w to n bytes at offset off of m with rights access, by a
// signaled BIND_MW on x's QP, and returns the window's new rkey.
func (e *env) bindMW(t *testing.T, x *end, w rdma.MW, m rdma.MR, off, n int, access rdma.Access, wrid uint64) uint32 {
	t.Helper()
	old := w.RKey()
	rkey := rdma.IncRKey(old)
	err := x.qp.PostSend(&rdma.SendWR{WRID: wrid, Opcode: rdma.WRBindMW, Flags: rdma.SendSignaled,
		Bind: rdma.MWBind{MW: w, RKey: rkey, MR: m, Addr: m.Addr() + uint64(off), Length: uint64(n), Access: access}})
	if errors.Is(err, rdma.ErrNotSupported) {
		t.Skipf("the provider does not support BIND_MW: %v", err)
	}
	if err != nil {
		t.Fatalf("PostSend BIND_MW: %v", err)
	}
	if !checkWC(t, e.waitWC(t, x.scq, 1, "BIND_MW")[0], wrid, rdma.Success, rdma.WCBindMW, x.qp.QPN()) {
		t.FailNow()
	}
	if w.RKey() != rkey || rkey == old || rkey>>8 != old>>8 {
		t.Fatalf("after binding with rkey %#x the window reports %#x (was %#x): want the new key byte, same index", rkey, w.RKey(), old)
	}
	return rkey
}

// mwSetup links two ends and binds a window on b over [mwOff, mwOff+mwLen)
// of a region of b without remote rights of its own.
func (e *env) mwSetup(t *testing.T, access rdma.Access) (a, b *end, mem rdma.MR, w rdma.MW, rkey uint32) {
	t.Helper()
	a, b = e.link(t, linkConfig{})
	mem = b.reg(mwRegion, rdma.AccessLocalWrite|rdma.AccessMWBind, 40)
	w = allocMW(t, b)
	rkey = e.bindMW(t, b, w, mem, mwOff, mwLen, access, 100)
	return a, b, mem, w, rkey
}

// testMWReadWrite: RDMA WRITE and READ through a bound window reach the
// region's bytes under it, at the window's first and last bytes.
func testMWReadWrite(t *testing.T, e *env) {
	a, _, mem, _, rkey := e.mwSetup(t, rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	base := mem.Addr() + mwOff
	src := a.reg(256, 0, 41)
	dst := a.reg(mwLen, rdma.AccessLocalWrite, 42)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 100)}, RemoteAddr: base, RKey: rkey})
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 100, 156)}, RemoteAddr: base + mwLen - 156, RKey: rkey})
	wcs := e.waitWC(t, a.scq, 2, "WRITEs through the window")
	checkWC(t, wcs[0], 1, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	checkWC(t, wcs[1], 2, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	b := mem.Bytes()
	checkBytes(t, "window's first bytes", b[mwOff:mwOff+100], src.Bytes()[:100])
	checkBytes(t, "window's last bytes", b[mwOff+mwLen-156:mwOff+mwLen], src.Bytes()[100:256])
	checkPattern(t, "region before the window", b[:mwOff], 40, 0)
	checkPattern(t, "window between the writes", b[mwOff+100:mwOff+mwLen-156], 40, mwOff+100)
	checkPattern(t, "region after the window", b[mwOff+mwLen:], 40, mwOff+mwLen)
	postSend(t, a.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(dst, 0, mwLen)}, RemoteAddr: base, RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "READ of the whole window")[0], 3, rdma.Success, rdma.WCRDMARead, a.qp.QPN())
	checkBytes(t, "window read back", dst.Bytes(), b[mwOff:mwOff+mwLen])
}

// testMWWrongDirection: a window bound for RDMA READ refuses an RDMA
// WRITE, one bound for WRITE refuses a READ (remote access errors), and
// the region is untouched.
func testMWWrongDirection(t *testing.T, e *env) {
	for _, c := range []struct {
		name   string
		access rdma.Access
		op     rdma.WROpcode
	}{
		{"WriteToReadOnly", rdma.AccessRemoteRead, rdma.WRRDMAWrite},
		{"ReadFromWriteOnly", rdma.AccessRemoteWrite, rdma.WRRDMARead},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _, mem, _, rkey := e.mwSetup(t, c.access)
			buf := a.reg(64, rdma.AccessLocalWrite, 43)
			postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: c.op, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{sge(buf, 0, 64)}, RemoteAddr: mem.Addr() + mwOff, RKey: rkey})
			checkWC(t, e.waitWC(t, a.scq, 1, c.op.String()+" against the window's rights")[0], 1, rdma.RemoteAccessError, 0, 0)
			checkPattern(t, "region", mem.Bytes(), 40, 0)
		})
	}
}

// testMWOutside: an access that starts before the window or runs past
// its end is refused (remote access error), though the region goes on
// on either side; the region is untouched.
func testMWOutside(t *testing.T, e *env) {
	for _, c := range []struct {
		name string
		off  int // from the window's start
		n    int
	}{
		{"Before", -1, 16},
		{"PastEnd", mwLen - 8, 16},
		{"After", mwLen, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, _, mem, _, rkey := e.mwSetup(t, rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
			src := a.reg(64, 0, 44)
			postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{sge(src, 0, c.n)}, RemoteAddr: uint64(int64(mem.Addr()) + int64(mwOff+c.off)), RKey: rkey})
			checkWC(t, e.waitWC(t, a.scq, 1, "WRITE outside the window")[0], 1, rdma.RemoteAccessError, 0, 0)
			checkPattern(t, "region", mem.Bytes(), 40, 0)
		})
	}
}

// testMWLocalInv: after a LOCAL_INV of the window's rkey, the rkey is
// refused.
func testMWLocalInv(t *testing.T, e *env) {
	a, b, mem, _, rkey := e.mwSetup(t, rdma.AccessRemoteWrite)
	src := a.reg(64, 0, 45)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr() + mwOff, RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE through the window")[0], 1, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	postSend(t, b.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRLocalInv, InvalidateRKey: rkey, Flags: rdma.SendSignaled})
	checkWC(t, e.waitWC(t, b.scq, 1, "LOCAL_INV of the window")[0], 2, rdma.Success, rdma.WCLocalInv, b.qp.QPN())
	before := append([]byte(nil), mem.Bytes()...)
	postSend(t, a.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 16, 16)}, RemoteAddr: mem.Addr() + mwOff, RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the invalidated window rkey")[0], 3, rdma.RemoteAccessError, 0, 0)
	checkBytes(t, "region after the refused WRITE", mem.Bytes(), before)
}

// testMWSendWithInvalidate: the peer's SEND with Invalidate naming the
// window's rkey invalidates it; the receive completion reports it.
func testMWSendWithInvalidate(t *testing.T, e *env) {
	a, b, mem, _, rkey := e.mwSetup(t, rdma.AccessRemoteWrite)
	buf := b.reg(64, rdma.AccessLocalWrite, 46)
	src := a.reg(64, 0, 47)
	e.sendWithInv(t, a, b, src, buf, rkey, "SEND with Invalidate of the window")
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr() + mwOff, RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the remotely invalidated rkey")[0], 2, rdma.RemoteAccessError, 0, 0)
	checkPattern(t, "region", mem.Bytes(), 40, 0)
}

// testMWRebind: an invalidated window bound again (elsewhere in the
// region) takes a new rkey, which works; the old rkey is refused.
func testMWRebind(t *testing.T, e *env) {
	a, b, mem, w, old := e.mwSetup(t, rdma.AccessRemoteWrite)
	postSend(t, b.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRLocalInv, InvalidateRKey: old, Flags: rdma.SendSignaled})
	checkWC(t, e.waitWC(t, b.scq, 1, "LOCAL_INV of the window")[0], 2, rdma.Success, rdma.WCLocalInv, b.qp.QPN())
	const off2 = mwOff + mwLen + 1024
	nk := e.bindMW(t, b, w, mem, off2, 512, rdma.AccessRemoteWrite, 3)
	src := a.reg(64, 0, 48)
	postSend(t, a.qp, &rdma.SendWR{WRID: 4, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 64)}, RemoteAddr: mem.Addr() + off2, RKey: nk})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the new rkey")[0], 4, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	checkBytes(t, "written range", mem.Bytes()[off2:off2+64], src.Bytes())
	postSend(t, a.qp, &rdma.SendWR{WRID: 5, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr() + mwOff, RKey: old})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the rkey of the earlier bind")[0], 5, rdma.RemoteAccessError, 0, 0)
	checkPattern(t, "first window's range", mem.Bytes()[mwOff:mwOff+mwLen], 40, mwOff)
}
