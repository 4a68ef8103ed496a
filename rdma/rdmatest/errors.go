package rdmatest

import (
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Tests of the error paths: remote and local protection, lengths,
// flushing, full queues, RNR and transport retries.

// remoteAccessCase is one remote access the responder must refuse.
type remoteAccessCase struct {
	name   string
	op     rdma.WROpcode
	access rdma.Access // of the responder's region (default all)
	n      int         // bytes to transfer (a function of the MTU when mtuN is set)
	mtuN   bool        // n is two MTUs and 5 bytes
	off    int64       // offset from the region's start (negative: before it; from the end when fromEnd)
	fromE  bool
	rkey   func(m rdma.MR) uint32
	prep   func(t *testing.T, b *end, m rdma.MR)
}

// regionSize is the size of the responder's region in remote access tests.
const regionSize = 8192

func remoteAccessCases() []remoteAccessCase {
	badIndex := func(m rdma.MR) uint32 { return m.RKey() ^ 0x80000000 }
	badKey := func(m rdma.MR) uint32 { return m.RKey() ^ 0x01 }
	dereg := func(t *testing.T, b *end, m rdma.MR) { b.dereg(m) }
	return []remoteAccessCase{
		{name: "WriteBadRKey", op: rdma.WRRDMAWrite, n: 100, rkey: badIndex},
		{name: "WriteBadKeyByte", op: rdma.WRRDMAWrite, n: 100, rkey: badKey},
		{name: "WritePastEnd", op: rdma.WRRDMAWrite, n: 3000, off: -2999, fromE: true},
		{name: "WriteBeforeStart", op: rdma.WRRDMAWrite, n: 10, off: -1},
		{name: "WriteMultiPacketPastEnd", op: rdma.WRRDMAWrite, mtuN: true, fromE: true},
		{name: "WriteWithoutRemoteWrite", op: rdma.WRRDMAWrite, n: 100, access: rdma.AccessLocalWrite | rdma.AccessRemoteRead},
		{name: "WriteDeregistered", op: rdma.WRRDMAWrite, n: 100, prep: dereg},
		{name: "WriteWithImmBadRKey", op: rdma.WRRDMAWriteWithImm, n: 100, rkey: badIndex},
		{name: "ReadBadRKey", op: rdma.WRRDMARead, n: 100, rkey: badIndex},
		{name: "ReadPastEnd", op: rdma.WRRDMARead, n: 3000, off: -100, fromE: true},
		{name: "ReadWithoutRemoteRead", op: rdma.WRRDMARead, n: 100, access: rdma.AccessLocalWrite | rdma.AccessRemoteWrite},
		{name: "ReadDeregistered", op: rdma.WRRDMARead, n: 100, prep: dereg},
	}
}

// testRemoteAccess: the request fails at the requester with
// RemoteAccessError, the request behind it is flushed, the requester's
// QP is in ERR; the responder's QP goes to ERR too (its posted receive
// completes with an error), and neither side's memory changed.
func testRemoteAccess(t *testing.T, e *env, c remoteAccessCase) {
	a, b := e.link(t, linkConfig{})
	access := c.access
	if access == 0 {
		access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	}
	mem := b.reg(regionSize, access, 50)
	n := c.n
	off := c.off
	if c.mtuN {
		n = 2*e.mtu.Bytes() + 5
		off = -2 * int64(e.mtu.Bytes())
	}
	if c.fromE {
		off += regionSize
	}
	local := a.reg(max(n, 64), rdma.AccessLocalWrite, 51)
	addr, rkey := mem.Addr()+uint64(off), mem.RKey()
	if c.rkey != nil {
		rkey = c.rkey(mem)
	}
	if c.prep != nil {
		c.prep(t, b, mem)
	}
	rbuf := b.reg(64, rdma.AccessLocalWrite, 52)
	postRecv(t, b.qp, 1, sge(rbuf, 0, 64))
	next := rdma.SendWR{WRID: 12, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(local, 0, 10)},
		RemoteAddr: mem.Addr(), RKey: mem.RKey()}
	postSend(t, a.qp, &rdma.SendWR{WRID: 11, Opcode: c.op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(local, 0, n)},
		RemoteAddr: addr, RKey: rkey, Next: &next})
	sc := e.waitWC(t, a.scq, 2, "requester completions")
	checkWC(t, sc[0], 11, rdma.RemoteAccessError, 0, 0)
	checkWC(t, sc[1], 12, rdma.WRFlushError, 0, 0)
	if s := a.qp.State(); s != rdma.QPSErr {
		t.Errorf("requester QP in %s after a remote access error, want ERR", s)
	}
	rc := e.waitWC(t, b.rcq, 1, "the responder's posted receive (flushed when its QP went to ERR)")[0]
	if rc.WRID != 1 || (rc.Status != rdma.WRFlushError && rc.Status != rdma.RemoteAccessError) {
		t.Errorf("responder receive completion %s, want WRID 0x1 flushed (or failed with remote access error)", wcString(rc))
	}
	if s := b.qp.State(); s != rdma.QPSErr {
		t.Errorf("responder QP in %s after refusing a remote access, want ERR", s)
	}
	checkPattern(t, "responder region", mem.Bytes(), 50, 0)
	checkPattern(t, "requester buffer", local.Bytes(), 51, 0)
}

// Local protection cases.
const (
	lpBadLKey  = iota // an SGE names an lkey that does not exist
	lpPastEnd         // an SGE reaches past its region's end
	lpReadOnly        // a READ into a region without LocalWrite
)

// testLocalProtection: a request whose local SGE the device may not use
// completes with LocalProtectionError, the QP goes to ERR and the
// request behind it is flushed.
func testLocalProtection(t *testing.T, e *env, kind int) {
	a, b := e.link(t, linkConfig{})
	src := a.reg(64, 0, 53)
	mem := b.reg(64, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite, 54)
	rbuf := b.reg(128, rdma.AccessLocalWrite, 55)
	postRecv(t, b.qp, 1, sge(rbuf, 0, 128))
	wr := rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled}
	switch kind {
	case lpBadLKey:
		wr.SGL = []rdma.SGE{{Addr: src.Addr(), Length: 64, LKey: src.LKey() ^ 0x80000000}}
	case lpPastEnd:
		wr.SGL = []rdma.SGE{sge(src, 0, 65)}
	case lpReadOnly:
		ro := a.reg(64, rdma.AccessRemoteRead, 56)
		wr.Opcode = rdma.WRRDMARead
		wr.SGL = []rdma.SGE{sge(ro, 0, 8)}
		wr.RemoteAddr, wr.RKey = mem.Addr(), mem.RKey()
		defer func() { checkPattern(t, "read-only region", ro.Bytes(), 56, 0) }()
	}
	next := rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 8)}}
	wr.Next = &next
	postSend(t, a.qp, &wr)
	sc := e.waitWC(t, a.scq, 2, "completions")
	if kind == lpBadLKey && sc[0].WRID == 1 && sc[0].Status == rdma.LocalQPOperationError {
		// Linux rxe fails the lookup of an unknown lkey with EINVAL and
		// reports a local QP operation error; the provider only relays it.
		t.Logf("the device reports an unknown lkey as %q, not %q (as Linux rxe does)", sc[0].Status, rdma.LocalProtectionError)
	} else {
		checkWC(t, sc[0], 1, rdma.LocalProtectionError, 0, 0)
	}
	checkWC(t, sc[1], 2, rdma.WRFlushError, 0, 0)
	if s := a.qp.State(); s != rdma.QPSErr {
		t.Errorf("QP in %s after a local protection error, want ERR", s)
	}
	checkPattern(t, "responder region", mem.Bytes(), 54, 0)
}

// testRecvTooSmall: a SEND longer than the receive completes the receive
// with LocalLengthError and the SEND with RemoteInvalidRequestError; the
// receiver's memory beyond the receive stays.
func testRecvTooSmall(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	n := e.mtu.Bytes() + 1000
	src := a.reg(n, 0, 57)
	dst := b.reg(n+guard, rdma.AccessLocalWrite, 58)
	small := n - 1000
	postRecv(t, b.qp, 5, sge(dst, 0, small))
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, n)}})
	rc := e.waitWC(t, b.rcq, 1, "receive of a too long SEND")[0]
	sc := e.waitWC(t, a.scq, 1, "too long SEND")[0]
	if rc.WRID == 5 && rc.Status == rdma.LocalQPOperationError && sc.WRID == 1 && sc.Status == rdma.RemoteOperationError {
		// Linux rxe (6.1) treats the overflow as a malformed receive
		// WQE: local QP operation error, NAK remote operation error.
		t.Logf("the device reports a receive too small as %q and the SEND as %q, not %q and %q (as Linux rxe does)",
			rc.Status, sc.Status, rdma.LocalLengthError, rdma.RemoteInvalidRequestError)
	} else {
		checkWC(t, rc, 5, rdma.LocalLengthError, 0, 0)
		checkWC(t, sc, 1, rdma.RemoteInvalidRequestError, 0, 0)
	}
	checkPattern(t, "receiver memory beyond the receive", dst.Bytes()[small:], 58, small)
}

// testFlushOnErr: moving QPs to ERR flushes their posted receives and
// sends, in order, signaled or not; work posted in ERR completes with
// WRFlushError too.
func testFlushOnErr(t *testing.T, e *env) {
	_, b := e.link(t, linkConfig{})
	d := e.dangling(t, linkConfig{timeout: 20}) // 4.3 s: nothing completes before ERR
	dst := b.reg(64, rdma.AccessLocalWrite, 59)
	src := d.reg(64, rdma.AccessLocalWrite, 60)
	for i := range 3 {
		postRecv(t, b.qp, uint64(i), sge(dst, 0, 64))
	}
	wrs := []rdma.SendWR{
		{WRID: 10, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 64)}},
		{WRID: 11, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, 8)}, RemoteAddr: 0x1000, RKey: 0x1234},
		{WRID: 12, Opcode: rdma.WRRDMARead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 8, 8)}, RemoteAddr: 0x1000, RKey: 0x1234},
	}
	wrs[0].Next, wrs[1].Next = &wrs[1], &wrs[2]
	postSend(t, d.qp, &wrs[0])
	toErr(t, b.qp)
	toErr(t, d.qp)
	for i, wc := range e.waitWC(t, b.rcq, 3, "flushed receives") {
		checkWC(t, wc, uint64(i), rdma.WRFlushError, 0, 0)
	}
	for i, wc := range e.waitWC(t, d.scq, 3, "flushed sends (unsignaled ones too)") {
		checkWC(t, wc, uint64(10+i), rdma.WRFlushError, 0, 0)
	}
	postRecv(t, b.qp, 9, sge(dst, 0, 64))
	checkWC(t, e.waitWC(t, b.rcq, 1, "receive posted in ERR")[0], 9, rdma.WRFlushError, 0, 0)
	postSend(t, d.qp, &rdma.SendWR{WRID: 20, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 8)}})
	checkWC(t, e.waitWC(t, d.scq, 1, "unsignaled send posted in ERR")[0], 20, rdma.WRFlushError, 0, 0)
	if s := d.qp.State(); s != rdma.QPSErr {
		t.Errorf("QP in %s", s)
	}
}

// testQueueFullSend fills a send queue whose requests are never answered:
// the request that does not fit fails with a *PostError at its index
// wrapping ErrQueueFull, after at least the requested number of requests
// (and at most what Query reports) were posted.
func testQueueFullSend(t *testing.T, e *env) {
	const want = 16
	d := e.dangling(t, linkConfig{timeout: 20, a: qpConfig{sendWR: want}})
	var qa rdma.QPAttr
	if err := d.qp.Query(&qa); err != nil {
		t.Fatal(err)
	}
	capacity := qa.Cap.MaxSendWR
	if capacity < want {
		t.Fatalf("Query: MaxSendWR %d, asked for %d", capacity, want)
	}
	src := d.reg(8, 0, 61)
	wrs := make([]rdma.SendWR, capacity+1)
	for i := range wrs {
		wrs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(src, 0, 8)}, RemoteAddr: 0x1000, RKey: 0x1234}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	err := d.qp.PostSend(&wrs[0])
	var pe *rdma.PostError
	if !errors.As(err, &pe) || !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("posting %d requests to a send queue of %d (Query): %v, want a *PostError wrapping ErrQueueFull", capacity+1, capacity, err)
	}
	if pe.Index != capacity {
		t.Errorf("the send queue took %d requests; Query reports MaxSendWR %d", pe.Index, capacity)
	}
	err = d.qp.PostSend(&rdma.SendWR{WRID: 999, Opcode: rdma.WRSend})
	wantPostErr(t, "one more send", err, 0, rdma.ErrQueueFull)
	toErr(t, d.qp)
	for i, wc := range e.waitWC(t, d.scq, pe.Index, "flushed sends") {
		checkWC(t, wc, uint64(i), rdma.WRFlushError, 0, 0)
	}
}

// testQueueFullRecv fills a receive queue in INIT: the receive that does
// not fit fails with a *PostError wrapping ErrQueueFull.
func testQueueFullRecv(t *testing.T, e *env) {
	const want = 16
	x := newEnd(t, e.a, qpConfig{recvWR: want})
	initA, initM := e.initAttr()
	modify(t, x.qp, initA, initM)
	var qa rdma.QPAttr
	if err := x.qp.Query(&qa); err != nil {
		t.Fatal(err)
	}
	capacity := qa.Cap.MaxRecvWR
	if capacity < want {
		t.Fatalf("Query: MaxRecvWR %d, asked for %d", capacity, want)
	}
	buf := x.reg(64, rdma.AccessLocalWrite, 62)
	wrs := make([]rdma.RecvWR, capacity+1)
	for i := range wrs {
		wrs[i] = rdma.RecvWR{WRID: uint64(i), SGL: []rdma.SGE{sge(buf, 0, 64)}}
		if i > 0 {
			wrs[i-1].Next = &wrs[i]
		}
	}
	err := x.qp.PostRecv(&wrs[0])
	var pe *rdma.PostError
	if !errors.As(err, &pe) || !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("posting %d receives to a receive queue of %d (Query): %v, want a *PostError wrapping ErrQueueFull", capacity+1, capacity, err)
	}
	if pe.Index != capacity {
		t.Errorf("the receive queue took %d receives; Query reports MaxRecvWR %d", pe.Index, capacity)
	}
	toErr(t, x.qp)
	for i, wc := range e.waitWC(t, x.rcq, pe.Index, "flushed receives") {
		checkWC(t, wc, uint64(i), rdma.WRFlushError, 0, 0)
	}
}

// testRNRRecovers: SENDs that find no receive are retried (RNR NAK)
// until receives are posted, then arrive intact.
func testRNRRecovers(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{rnrRetry: 7, minRNR: 1})
	n := 3*e.mtu.Bytes() + 7
	src := a.reg(n, 0, 63)
	dst := b.reg(n+64, rdma.AccessLocalWrite, 64)
	wr2 := rdma.SendWR{WRID: 2, Opcode: rdma.WRSendWithImm, Imm: 0xabcdef01, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 10)}}
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, n)}, Next: &wr2})
	expectNoWC(t, a.scq, 100*time.Millisecond, "SENDs without receives (RNR retry 7 is infinite)")
	postRecv(t, b.qp, 100, sge(dst, 0, n))
	postRecv(t, b.qp, 101, sge(dst, n, 64))
	sc := e.waitWC(t, a.scq, 2, "SENDs once receives are posted")
	checkWC(t, sc[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, sc[1], 2, rdma.Success, rdma.WCSend, a.qp.QPN())
	rc := e.waitWC(t, b.rcq, 2, "receives")
	checkRecv(t, rc[0], 100, rdma.WCRecv, b.qp.QPN(), n)
	if checkWC(t, rc[1], 101, rdma.Success, rdma.WCRecv, b.qp.QPN()) && (rc[1].Imm != 0xabcdef01 || rc[1].ByteLen != 10) {
		t.Errorf("SEND with immediate after RNR: %s", wcString(rc[1]))
	}
	checkBytes(t, "message after RNR", dst.Bytes()[:n], src.Bytes())
	checkBytes(t, "second message after RNR", dst.Bytes()[n:n+10], src.Bytes()[:10])
}

// testRNRRetryExceeded: with a finite RNR retry count, a SEND that never
// finds a receive fails with RNRRetryExceeded and the QP goes to ERR.
func testRNRRetryExceeded(t *testing.T, e *env) {
	a, _ := e.link(t, linkConfig{rnrRetry: 1, minRNR: 1})
	src := a.reg(64, 0, 65)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 64)}})
	checkWC(t, e.waitWC(t, a.scq, 1, "SEND that finds no receive")[0], 1, rdma.RNRRetryExceeded, 0, 0)
	if s := a.qp.State(); s != rdma.QPSErr {
		t.Errorf("QP in %s after RNR retry exceeded, want ERR", s)
	}
}

// testRetryExceeded: requests to a QP that does not exist are never
// acknowledged: the first fails with RetryExceeded after the retries,
// the next is flushed.
func testRetryExceeded(t *testing.T, e *env) {
	d := e.dangling(t, linkConfig{timeout: 12, retry: 2}) // 16.8 ms
	src := d.reg(64, rdma.AccessLocalWrite, 66)
	next := rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(src, 0, 8)}, RemoteAddr: 0x1000, RKey: 0x1234}
	start := time.Now()
	postSend(t, d.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 64)}, Next: &next})
	sc := e.waitWC(t, d.scq, 2, "requests to a QP that does not exist")
	checkWC(t, sc[0], 1, rdma.RetryExceeded, 0, 0)
	checkWC(t, sc[1], 2, rdma.WRFlushError, 0, 0)
	if el, min := time.Since(start), 3*rdma.TimeoutDuration(12); el < min {
		t.Errorf("gave up after %v, before three timeouts (%v)", el, min)
	}
	if s := d.qp.State(); s != rdma.QPSErr {
		t.Errorf("QP in %s after retry exceeded, want ERR", s)
	}
}
