package rdmatest

import (
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Tests of the data path: SEND/RECV, RDMA WRITE and READ, with every byte
// checked and the bytes around each destination left alone.

// guard is the number of bytes before and after a destination that must
// stay untouched; odd, so that destinations are not aligned.
const guard = 61

// testSend sends an n-byte message (and a short one after it, so that
// the transport's sequence continues correctly after a long message)
// into receive buffers larger than the messages.
func testSend(t *testing.T, e *env, n int) {
	a, b := e.link(t, linkConfig{})
	src := a.reg(max(n, 1), 0, 1)
	tail := a.reg(17, 0, 2)
	dst := b.reg(n+guard, rdma.AccessLocalWrite, 3)
	dst2 := b.reg(17+guard, rdma.AccessLocalWrite, 4)
	postRecv(t, b.qp, 10, sge(dst, 0, n+guard))
	postRecv(t, b.qp, 11, sge(dst2, 0, 17+guard))
	var sgl []rdma.SGE
	if n > 0 {
		sgl = []rdma.SGE{sge(src, 0, n)}
	}
	wr2 := rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(tail, 0, 17)}}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: sgl, Next: &wr2})
	sc := e.waitWC(t, a.scq, 2, "send completions")
	checkWC(t, sc[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, sc[1], 2, rdma.Success, rdma.WCSend, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 2, "receive completions")
	checkRecv(t, rc[0], 10, rdma.WCRecv, b.qp.QPN(), n)
	checkRecv(t, rc[1], 11, rdma.WCRecv, b.qp.QPN(), 17)
	checkBytes(t, "received message", dst.Bytes()[:n], src.Bytes()[:n])
	checkPattern(t, "receive buffer after the message", dst.Bytes()[n:], 3, n)
	checkBytes(t, "second message", dst2.Bytes()[:17], tail.Bytes())
	checkPattern(t, "second receive buffer after the message", dst2.Bytes()[17:], 4, 17)
}

// checkRecv checks a successful receive completion of n bytes without
// immediate data or invalidation.
func checkRecv(t testing.TB, wc rdma.WorkCompletion, wrid uint64, op rdma.WCOpcode, qpn uint32, n int) {
	t.Helper()
	if !checkWC(t, wc, wrid, rdma.Success, op, qpn) {
		return
	}
	if wc.ByteLen != uint32(n) {
		t.Errorf("receive completion %s: length %d, want %d", wcString(wc), wc.ByteLen, n)
	}
	if op == rdma.WCRecv && wc.Flags&(rdma.WCWithImm|rdma.WCWithInvalidate) != 0 {
		t.Errorf("receive completion %s of a plain SEND has flags %#x", wcString(wc), wc.Flags)
	}
}

// testSendMultiSGE gathers a message from three SGEs and scatters it
// into two.
func testSendMultiSGE(t *testing.T, e *env) {
	c := linkConfig{}
	a, b := e.link(t, c)
	if a.cfg.sge < 3 || b.cfg.sge < 2 {
		t.Skipf("the devices take %d and %d SGEs per work request; the test needs 3 and 2", a.cfg.sge, b.cfg.sge)
	}
	src := a.reg(3000, 0, 5)
	dst := b.reg(4000, rdma.AccessLocalWrite, 6)
	// No empty entry: some devices read a length of 0 as 2 GiB.
	gather := []rdma.SGE{sge(src, 500, 1000), sge(src, 2000, 700), sge(src, 100, 300)}
	var want []byte
	for _, g := range gather {
		off := int(g.Addr - src.Addr())
		want = append(want, src.Bytes()[off:off+int(g.Length)]...)
	}
	first := 900
	postRecv(t, b.qp, 1, sge(dst, 3000, first), sge(dst, 0, 2000))
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: gather})
	checkWC(t, e.waitWC(t, a.scq, 1, "gathered SEND")[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkRecv(t, e.waitWC(t, b.rcq, 1, "scattered receive")[0], 1, rdma.WCRecv, b.qp.QPN(), len(want))
	rest := len(want) - first
	checkBytes(t, "first scatter entry", dst.Bytes()[3000:3000+first], want[:first])
	checkBytes(t, "second scatter entry", dst.Bytes()[:rest], want[first:])
	checkPattern(t, "buffer between the entries", dst.Bytes()[rest:3000], 6, rest)
	checkPattern(t, "buffer after the first entry", dst.Bytes()[3000+first:], 6, 3000+first)
}

// testSendWithImm: SEND with immediate delivers the immediate (as the
// big-endian number on the wire) with the data, also without data.
func testSendWithImm(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	src := a.reg(100, 0, 7)
	dst := b.reg(200, rdma.AccessLocalWrite, 8)
	postRecv(t, b.qp, 1, sge(dst, 0, 150))
	postRecv(t, b.qp, 2, sge(dst, 150, 50))
	wr2 := rdma.SendWR{WRID: 2, Opcode: rdma.WRSendWithImm, Imm: 0x80000001, Flags: rdma.SendSignaled}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSendWithImm, Imm: 0xdeadbeef, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 100)}, Next: &wr2})
	sc := e.waitWC(t, a.scq, 2, "SEND with immediate")
	checkWC(t, sc[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, sc[1], 2, rdma.Success, rdma.WCSend, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 2, "receives of SEND with immediate")
	for i, want := range []struct {
		imm uint32
		n   int
	}{{0xdeadbeef, 100}, {0x80000001, 0}} {
		wc := rc[i]
		if checkWC(t, wc, uint64(i+1), rdma.Success, rdma.WCRecv, b.qp.QPN()) &&
			(wc.Flags&rdma.WCWithImm == 0 || wc.Imm != want.imm || wc.ByteLen != uint32(want.n)) {
			t.Errorf("receive %s: want immediate %#x and %d bytes", wcString(wc), want.imm, want.n)
		}
	}
	checkBytes(t, "received data", dst.Bytes()[:100], src.Bytes())
	checkPattern(t, "receive buffers after the data", dst.Bytes()[100:], 8, 100)
}

// testSendInline: an inline SEND carries the bytes the SGEs held when
// PostSend returned; more than the QP's inline limit is refused.
func testSendInline(t *testing.T, e *env) {
	const n = 64
	if m := min(e.a.Attr().MaxInlineData, e.b.Attr().MaxInlineData); m < n {
		t.Skipf("the device takes %d bytes of inline data; the test needs %d", m, n)
	}
	a, b := e.link(t, linkConfig{a: qpConfig{inline: n}})
	var qa rdma.QPAttr
	if err := a.qp.Query(&qa); err != nil {
		t.Fatal(err)
	}
	if qa.Cap.MaxInlineData < n {
		t.Errorf("Query: MaxInlineData %d, asked for %d", qa.Cap.MaxInlineData, n)
	}
	src := a.reg(qa.Cap.MaxInlineData+1, 0, 9)
	want := append([]byte(nil), src.Bytes()[:n]...)
	dst := b.reg(n+guard, rdma.AccessLocalWrite, 10)
	postRecv(t, b.qp, 1, sge(dst, 0, n+guard))
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled | rdma.SendInline,
		SGL: []rdma.SGE{sge(src, 0, n/2), sge(src, n/2, n/2)}})
	fill(src.Bytes(), 99, 0) // after PostSend: the message must carry the old bytes
	checkWC(t, e.waitWC(t, a.scq, 1, "inline SEND")[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkRecv(t, e.waitWC(t, b.rcq, 1, "receive of the inline SEND")[0], 1, rdma.WCRecv, b.qp.QPN(), n)
	checkBytes(t, "inline data", dst.Bytes()[:n], want)
	checkPattern(t, "receive buffer after the data", dst.Bytes()[n:], 10, n)
	err := a.qp.PostSend(&rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled | rdma.SendInline,
		SGL: []rdma.SGE{sge(src, 0, qa.Cap.MaxInlineData+1)}})
	wantPostErr(t, "inline SEND above the QP's MaxInlineData", err, 0, rdma.ErrInvalidArgument)
}

// sendWithInv sends 16 bytes of src from a to a receive of buf posted at
// b, with Invalidate of rkey (WRID 1 both), and checks both completions:
// the receive's reports rkey invalidated (WCWithInvalidate).
func (e *env) sendWithInv(t *testing.T, a, b *end, src, buf rdma.MR, rkey uint32, what string) {
	t.Helper()
	postRecv(t, b.qp, 1, sge(buf, 0, 64))
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSendWithInv, InvalidateRKey: rkey, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}})
	checkWC(t, e.waitWC(t, a.scq, 1, what)[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 1, "receive of SEND with Invalidate")[0]
	if checkWC(t, rc, 1, rdma.Success, rdma.WCRecv, b.qp.QPN()) &&
		(rc.Flags&rdma.WCWithInvalidate == 0 || rc.InvalidatedRKey != rkey || rc.ByteLen != 16) {
		t.Errorf("receive %s: want 16 bytes and WCWithInvalidate of rkey %#x", wcString(rc), rkey)
	}
}

// testSendWithInvalidate: SEND with Invalidate names an rkey of the
// receiver, whose completion reports it (WCWithInvalidate); the region
// then refuses remote access.
func testSendWithInvalidate(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	probe := b.reg(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 0)
	if err := probe.Invalidate(); err != nil {
		unsupported(t, "invalidating the rkey of a region from RegMR (which SEND with Invalidate does at the receiver)", err)
	}
	mem := b.reg(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 11)
	buf := b.reg(64, rdma.AccessLocalWrite, 12)
	src := a.reg(64, 0, 13)
	rkey := mem.RKey()
	e.sendWithInv(t, a, b, src, buf, rkey, "SEND with Invalidate")
	checkBytes(t, "received data", buf.Bytes()[:16], src.Bytes()[:16])
	if mem.RKeyValid() {
		t.Error("the invalidated region reports a valid rkey")
	}
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr(), RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the invalidated rkey")[0], 2, rdma.RemoteAccessError, 0, 0)
	checkPattern(t, "invalidated region", mem.Bytes(), 11, 0)
}

// testSendSignaling: unsignaled requests complete silently, signaled
// ones in posting order; SigAll signals every request.
func testSendSignaling(t *testing.T, e *env) {
	for _, sigAll := range []bool{false, true} {
		a, b := e.link(t, linkConfig{a: qpConfig{sigAll: sigAll}})
		const k = 10
		src := a.reg(k*32, 0, 14)
		dst := b.reg(k*64, rdma.AccessLocalWrite, 15)
		wrs := make([]rdma.SendWR, k)
		for i := range wrs {
			postRecv(t, b.qp, uint64(100+i), sge(dst, i*64, 64))
			wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, i*32, 8+i)}}
			if i == 3 || i == k-1 {
				wrs[i].Flags = rdma.SendSignaled
			}
			if i > 0 {
				wrs[i-1].Next = &wrs[i]
			}
		}
		postSend(t, a.qp, &wrs[0])
		want := []uint64{3, k - 1}
		if sigAll {
			want = nil
			for i := range k {
				want = append(want, uint64(i))
			}
		}
		sc := e.waitWC(t, a.scq, len(want), "signaled completions")
		for i, w := range want {
			checkWC(t, sc[i], w, rdma.Success, rdma.WCSend, a.qp.QPN())
		}
		rc := e.waitWC(t, b.rcq, k, "receives")
		for i := range k {
			checkRecv(t, rc[i], uint64(100+i), rdma.WCRecv, b.qp.QPN(), 8+i)
			checkBytes(t, "message", dst.Bytes()[i*64:i*64+8+i], src.Bytes()[i*32:i*32+8+i])
		}
		expectNoWC(t, a.scq, 50*time.Millisecond, "send CQ after the signaled completions")
	}
}

// testWrite writes n bytes into the middle of a remote region; the bytes
// around stay, and no receive is consumed.
func testWrite(t *testing.T, e *env, n int) {
	a, b := e.link(t, linkConfig{})
	src := a.reg(max(n, 8), 0, 16)
	mem := b.reg(n+2*guard, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 17)
	rbuf := b.reg(64, rdma.AccessLocalWrite, 18)
	postRecv(t, b.qp, 77, sge(rbuf, 0, 64))
	var sgl []rdma.SGE
	if n > 0 {
		sgl = []rdma.SGE{sge(src, 0, n)}
	}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: sgl,
		RemoteAddr: mem.Addr() + guard, RKey: mem.RKey()})
	checkWC(t, e.waitWC(t, a.scq, 1, "RDMA WRITE")[0], 1, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	checkBytes(t, "written range", mem.Bytes()[guard:guard+n], src.Bytes()[:n])
	checkPattern(t, "region before the range", mem.Bytes()[:guard], 17, 0)
	checkPattern(t, "region after the range", mem.Bytes()[guard+n:], 17, guard+n)
	// The WRITE consumed no receive: the next SEND finds receive 77.
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 8)}})
	checkWC(t, e.waitWC(t, a.scq, 1, "SEND after the WRITE")[0], 2, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkRecv(t, e.waitWC(t, b.rcq, 1, "receive after the WRITE")[0], 77, rdma.WCRecv, b.qp.QPN(), 8)
}

// testWriteWithImm: RDMA WRITE with immediate writes the region and
// consumes a receive (without scatter entries) that reports the length
// and the immediate; also with no data.
func testWriteWithImm(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	const n = 3000
	src := a.reg(n, 0, 19)
	mem := b.reg(n+2*guard, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 20)
	postRecv(t, b.qp, 1)
	postRecv(t, b.qp, 2)
	wr2 := rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWriteWithImm, Imm: 7, Flags: rdma.SendSignaled, RemoteAddr: mem.Addr(), RKey: mem.RKey()}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWriteWithImm, Imm: 0x01020304, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: mem.Addr() + guard, RKey: mem.RKey(), Next: &wr2})
	sc := e.waitWC(t, a.scq, 2, "WRITE with immediate")
	checkWC(t, sc[0], 1, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	checkWC(t, sc[1], 2, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 2, "receives of WRITE with immediate")
	for i, want := range []struct {
		imm uint32
		n   int
	}{{0x01020304, n}, {7, 0}} {
		wc := rc[i]
		if checkWC(t, wc, uint64(i+1), rdma.Success, rdma.WCRecvRDMAWithImm, b.qp.QPN()) &&
			(wc.Flags&rdma.WCWithImm == 0 || wc.Imm != want.imm || wc.ByteLen != uint32(want.n)) {
			t.Errorf("receive %s: want immediate %#x and length %d", wcString(wc), want.imm, want.n)
		}
	}
	checkBytes(t, "written range", mem.Bytes()[guard:guard+n], src.Bytes())
	checkPattern(t, "region before the range", mem.Bytes()[:guard], 20, 0)
	checkPattern(t, "region after the range", mem.Bytes()[guard+n:], 20, guard+n)
}

// testRead reads n bytes from the middle of a remote region into the
// middle of a local one.
func testRead(t *testing.T, e *env, n int) {
	a, b := e.link(t, linkConfig{})
	mem := b.reg(n+2*guard, rdma.AccessRemoteRead, 21)
	dst := a.reg(n+2*guard, rdma.AccessLocalWrite, 22)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(dst, guard, n)}, RemoteAddr: mem.Addr() + guard, RKey: mem.RKey()})
	checkWC(t, e.waitWC(t, a.scq, 1, "RDMA READ")[0], 1, rdma.Success, rdma.WCRDMARead, a.qp.QPN())
	checkPattern(t, "read data", dst.Bytes()[guard:guard+n], 21, guard)
	checkPattern(t, "local buffer before the data", dst.Bytes()[:guard], 22, 0)
	checkPattern(t, "local buffer after the data", dst.Bytes()[guard+n:], 22, guard+n)
	checkPattern(t, "remote region", mem.Bytes(), 21, 0)
}

// testReadOutstanding posts more READs than the QP may have outstanding
// (twice its initiator depth and one), from scattered remote ranges into
// scattered local ones; they complete in order with the right data.
func testReadOutstanding(t *testing.T, e *env) {
	k := 2*int(e.rdAtomic) + 1
	const n = 16<<10 + 3
	a, b := e.link(t, linkConfig{a: qpConfig{sendWR: k + 1}})
	mem := b.reg(k*n, rdma.AccessRemoteRead, 23)
	dst := a.reg(k*n, rdma.AccessLocalWrite, 24)
	wrs := make([]rdma.SendWR, k)
	for i := range wrs {
		// Remote range i goes to local range k-1-i.
		wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{sge(dst, (k-1-i)*n, n)}, RemoteAddr: mem.Addr() + uint64(i*n), RKey: mem.RKey()}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	postSend(t, a.qp, &wrs[0])
	sc := e.waitWC(t, a.scq, k, "READs")
	for i := range k {
		checkWC(t, sc[i], uint64(i), rdma.Success, rdma.WCRDMARead, a.qp.QPN())
		checkBytes(t, "range read", dst.Bytes()[(k-1-i)*n:(k-i)*n], mem.Bytes()[i*n:(i+1)*n])
	}
}

// testMixedOrdering posts WRITE, SEND, READ (of what the WRITE wrote),
// WRITE with immediate and SEND with immediate as one chain: they
// complete in order, the READ sees the WRITE, the receives come in order.
func testMixedOrdering(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	n := 2*e.mtu.Bytes() + 5
	src := a.reg(n, 0, 25)
	back := a.reg(n, rdma.AccessLocalWrite, 26)
	mem := b.reg(2*n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteRead, 27)
	rbuf := b.reg(2*n, rdma.AccessLocalWrite, 28)
	postRecv(t, b.qp, 1, sge(rbuf, 0, n))
	postRecv(t, b.qp, 2)
	postRecv(t, b.qp, 3, sge(rbuf, n, n))
	wrs := []rdma.SendWR{
		{WRID: 1, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()},
		{WRID: 2, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 1, n-1)}},
		{WRID: 3, Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(back, 0, n)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()},
		{WRID: 4, Opcode: rdma.WRRDMAWriteWithImm, Imm: 44, SGL: []rdma.SGE{sge(src, 0, 100)}, RemoteAddr: mem.Addr() + uint64(n), RKey: mem.RKey()},
		{WRID: 5, Opcode: rdma.WRSendWithImm, Imm: 55, SGL: []rdma.SGE{sge(src, 7, 9)}},
	}
	ops := []rdma.WCOpcode{rdma.WCRDMAWrite, rdma.WCSend, rdma.WCRDMARead, rdma.WCRDMAWrite, rdma.WCSend}
	for i := range wrs {
		wrs[i].Flags = rdma.SendSignaled
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	postSend(t, a.qp, &wrs[0])
	sc := e.waitWC(t, a.scq, len(wrs), "mixed chain")
	for i := range wrs {
		checkWC(t, sc[i], wrs[i].WRID, rdma.Success, ops[i], a.qp.QPN())
	}
	checkBytes(t, "READ after WRITE", back.Bytes(), src.Bytes())
	rc := e.waitWC(t, b.rcq, 3, "receives of the mixed chain")
	checkRecv(t, rc[0], 1, rdma.WCRecv, b.qp.QPN(), n-1)
	if checkWC(t, rc[1], 2, rdma.Success, rdma.WCRecvRDMAWithImm, b.qp.QPN()) && (rc[1].Imm != 44 || rc[1].ByteLen != 100) {
		t.Errorf("WRITE with immediate: %s", wcString(rc[1]))
	}
	if checkWC(t, rc[2], 3, rdma.Success, rdma.WCRecv, b.qp.QPN()) && (rc[2].Imm != 55 || rc[2].ByteLen != 9 || rc[2].Flags&rdma.WCWithImm == 0) {
		t.Errorf("SEND with immediate: %s", wcString(rc[2]))
	}
	checkBytes(t, "SEND data", rbuf.Bytes()[:n-1], src.Bytes()[1:])
	checkBytes(t, "SEND with immediate data", rbuf.Bytes()[n:n+9], src.Bytes()[7:16])
	checkBytes(t, "WRITE with immediate data", mem.Bytes()[n:n+100], src.Bytes()[:100])
}

// testSendQueueWrap sends ten queues' worth of messages through small
// send and receive queues, posting as completions free slots, so that
// both queues and the CQs wrap around several times; each message
// carries its own pattern and arrives in order.
func testSendQueueWrap(t *testing.T, e *env) {
	const depth, msgs, size = 16, 10 * 16, 200
	a, b := e.link(t, linkConfig{a: qpConfig{sendWR: depth, cqe: depth}, b: qpConfig{recvWR: depth, cqe: depth}})
	src := a.reg(msgs*size, 0, 30)
	dst := b.reg(depth*size, rdma.AccessLocalWrite, 31)
	for i := range depth {
		postRecv(t, b.qp, uint64(i), sge(dst, i*size, size))
	}
	sent, sendDone, recvd := 0, 0, 0
	var wc [depth]rdma.WorkCompletion
	ctx := e.ctx(t)
	for recvd < msgs {
		for sent < msgs && sent-sendDone < depth {
			n := 1 + sent%size
			postSend(t, a.qp, &rdma.SendWR{WRID: uint64(sent), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, sent*size, n)}})
			sent++
		}
		progress := false
		for _, c := range wc[:a.scq.Poll(wc[:])] {
			checkWC(t, c, uint64(sendDone), rdma.Success, rdma.WCSend, a.qp.QPN())
			sendDone++
			progress = true
		}
		for _, c := range wc[:b.rcq.Poll(wc[:])] {
			slot := recvd % depth
			n := 1 + recvd%size
			if checkWC(t, c, uint64(slot), rdma.Success, rdma.WCRecv, b.qp.QPN()) && c.ByteLen == uint32(n) {
				checkBytes(t, "message", dst.Bytes()[slot*size:slot*size+n], src.Bytes()[recvd*size:recvd*size+n])
			} else {
				t.Fatalf("message %d: %s, want %d bytes", recvd, wcString(c), n)
			}
			postRecv(t, b.qp, uint64(slot), sge(dst, slot*size, size))
			recvd++
			progress = true
		}
		if t.Failed() {
			return
		}
		if !progress {
			select {
			case <-a.scq.Notify():
			case <-b.rcq.Notify():
			case <-ctx.Done():
				t.Fatalf("%d of %d messages sent, %d received, within %v", sendDone, msgs, recvd, e.o.Timeout)
			}
		}
	}
}

// testLocalInv: a LOCAL_INV work request invalidates a local region's
// rkey in order with the other requests; remote access with it then
// fails. Providers that cannot invalidate plain registrations skip.
func testLocalInv(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	probe := b.reg(64, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 0)
	if err := probe.Invalidate(); err != nil {
		unsupported(t, "invalidating the rkey of a region from RegMR (what LOCAL_INV does)", err)
	}
	mem := b.reg(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 32)
	src := a.reg(64, 0, 33)
	rkey := mem.RKey()
	err := b.qp.PostSend(&rdma.SendWR{WRID: 1, Opcode: rdma.WRLocalInv, InvalidateRKey: rkey, Flags: rdma.SendSignaled})
	var pe *rdma.PostError
	if errors.As(err, &pe) && errors.Is(err, rdma.ErrNotSupported) {
		t.Skipf("the provider does not support LOCAL_INV: %v", err)
	}
	if err != nil {
		t.Fatalf("PostSend LOCAL_INV: %v", err)
	}
	checkWC(t, e.waitWC(t, b.scq, 1, "LOCAL_INV")[0], 1, rdma.Success, rdma.WCLocalInv, b.qp.QPN())
	if mem.RKeyValid() {
		t.Error("the region reports a valid rkey after LOCAL_INV")
	}
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr(), RKey: rkey})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the rkey LOCAL_INV invalidated")[0], 2, rdma.RemoteAccessError, 0, 0)
	checkPattern(t, "invalidated region", mem.Bytes(), 32, 0)
}

// testAtomicFetchAdd: an atomic fetch-and-add returns the remote 8 bytes
// into the local buffer. SendWR carries no add operand, so the add is
// of 0 and the remote value stays. Providers without atomics skip.
func testAtomicFetchAdd(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{access: rdma.AccessRemoteWrite | rdma.AccessRemoteRead | rdma.AccessRemoteAtomic})
	mem := b.reg(64, rdma.AccessLocalWrite|rdma.AccessRemoteAtomic, 34)
	local := a.reg(16, rdma.AccessLocalWrite, 35)
	off := (8 - mem.Addr()%8) % 8 // atomics need 8-byte alignment
	err := a.qp.PostSend(&rdma.SendWR{WRID: 1, Opcode: rdma.WRAtomicFetchAdd, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(local, 0, 8)}, RemoteAddr: mem.Addr() + off + 8, RKey: mem.RKey()})
	if errors.Is(err, rdma.ErrNotSupported) {
		t.Skipf("the provider does not support atomics: %v", err)
	}
	if err != nil {
		t.Fatalf("PostSend ATOMIC_FETCH_AND_ADD: %v", err)
	}
	checkWC(t, e.waitWC(t, a.scq, 1, "ATOMIC_FETCH_AND_ADD")[0], 1, rdma.Success, rdma.WCFetchAdd, a.qp.QPN())
	checkBytes(t, "fetched value", local.Bytes()[:8], mem.Bytes()[off+8:off+16])
	checkPattern(t, "local buffer after the value", local.Bytes()[8:], 35, 8)
	checkPattern(t, "remote region (an add of 0)", mem.Bytes(), 34, 0)
}
