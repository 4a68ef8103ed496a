package soft

import (
	"bytes"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// TestRemoteAccessErrors checks that a remote access with a wrong rkey,
// outside the region or without the access right fails with
// RemoteAccessError at the requester, moves both QPs to the error state
// and leaves the responder's memory (and for READ, the requester's
// buffer) untouched.
func TestRemoteAccessErrors(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	const size = 8192
	tests := []struct {
		name   string
		op     rdma.WROpcode
		access rdma.Access // of the responder's region
		n      int
		addr   func(m rdma.MR) uint64
		rkey   func(m rdma.MR) uint32
		prep   func(t *testing.T, m rdma.MR)
	}{
		{name: "write wrong rkey", op: rdma.WRRDMAWrite, n: 100, rkey: func(m rdma.MR) uint32 { return m.RKey() ^ 0x100 }},
		{name: "write wrong key byte", op: rdma.WRRDMAWrite, n: 100, rkey: func(m rdma.MR) uint32 { return m.RKey() + 1 }},
		{name: "write past end", op: rdma.WRRDMAWrite, n: 3000, addr: func(m rdma.MR) uint64 { return m.Addr() + size - 2999 }},
		{name: "write before start", op: rdma.WRRDMAWrite, n: 10, addr: func(m rdma.MR) uint64 { return m.Addr() - 1 }},
		{name: "write multi-packet past end", op: rdma.WRRDMAWrite, n: 5000, addr: func(m rdma.MR) uint64 { return m.Addr() + 4000 }},
		{name: "write without RemoteWrite", op: rdma.WRRDMAWrite, n: 100, access: rdma.AccessLocalWrite | rdma.AccessRemoteRead},
		{name: "write invalidated rkey", op: rdma.WRRDMAWrite, n: 100, prep: func(t *testing.T, m rdma.MR) {
			if err := m.Invalidate(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "write with imm wrong rkey", op: rdma.WRRDMAWriteWithImm, n: 100, rkey: func(m rdma.MR) uint32 { return m.RKey() ^ 0x100 }},
		{name: "read wrong rkey", op: rdma.WRRDMARead, n: 100, rkey: func(m rdma.MR) uint32 { return m.RKey() ^ 0x100 }},
		{name: "read past end", op: rdma.WRRDMARead, n: 3000, addr: func(m rdma.MR) uint64 { return m.Addr() + size - 100 }},
		{name: "read without RemoteRead", op: rdma.WRRDMARead, n: 100, access: rdma.AccessLocalWrite | rdma.AccessRemoteWrite},
		{name: "read deregistered", op: rdma.WRRDMARead, n: 100, prep: func(t *testing.T, m rdma.MR) {
			if err := m.Deregister(); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := connect(t, a, b, qpOpts{})
			access := tc.access
			if access == 0 {
				access = rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead
			}
			mem := regMR(t, eb.pd, size, access)
			fill(mem.Bytes(), 5)
			before := append([]byte(nil), mem.Bytes()...)
			local := regMR(t, ea.pd, size, rdma.AccessLocalWrite)
			fill(local.Bytes(), 6)
			localBefore := append([]byte(nil), local.Bytes()...)
			addr, rkey := mem.Addr(), mem.RKey()
			if tc.addr != nil {
				addr = tc.addr(mem)
			}
			if tc.rkey != nil {
				rkey = tc.rkey(mem)
			}
			if tc.prep != nil {
				tc.prep(t, mem)
			}
			postRecv(t, eb.qp, 1, sge(regMR(t, eb.pd, 64, rdma.AccessLocalWrite), 0, 64))
			postSend(t, ea.qp, &rdma.SendWR{WRID: 11, Opcode: tc.op, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{sge(local, 0, tc.n)}, RemoteAddr: addr, RKey: rkey})
			// A request behind the failing one is flushed.
			postSend(t, ea.qp, &rdma.SendWR{WRID: 12, Opcode: rdma.WRRDMAWrite, SGL: []rdma.SGE{sge(local, 0, 10)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
			wc := poll(t, ea.scq, 2, 5*time.Second)
			checkWC(t, wc[0], 11, rdma.RemoteAccessError)
			checkWC(t, wc[1], 12, rdma.WRFlushError)
			if s := ea.qp.State(); s != rdma.QPSErr {
				t.Errorf("requester QP in %s, want ERR", s)
			}
			// The responder's posted receive is flushed (or, for the WRITE
			// with immediate, completed with the error) as its QP enters
			// the error state.
			rc := poll(t, eb.rcq, 1, 5*time.Second)[0]
			if rc.Status != rdma.WRFlushError && rc.Status != rdma.RemoteAccessError {
				t.Errorf("responder receive completion %+v", rc)
			}
			if s := eb.qp.State(); s != rdma.QPSErr {
				t.Errorf("responder QP in %s, want ERR", s)
			}
			if !bytes.Equal(mem.Bytes(), before) {
				t.Error("responder memory changed")
			}
			if !bytes.Equal(local.Bytes(), localBefore) {
				t.Error("requester buffer changed")
			}
		})
	}
}

// TestRNR sends with no receive posted: the responder answers RNR NAK
// until a receive is posted, then the message arrives.
func TestRNR(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{rnrRetry: 7, minRNRTimer: 14}) // 1.28 ms
	src := regMR(t, ea.pd, 5000, 0)
	dst := regMR(t, eb.pd, 5000, rdma.AccessLocalWrite)
	fill(src.Bytes(), 9)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 5000)}})
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSendWithImm, Imm: 0xdeadbeef, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 10)}})
	waitUntil(t, 5*time.Second, "two RNR NAKs", func() bool { return b.Stats().RNRNAKsSent >= 2 })
	var none [1]rdma.WorkCompletion
	if ea.scq.Poll(none[:]) != 0 {
		t.Fatalf("a SEND completed without a receive posted: %+v", none[0])
	}
	postRecv(t, eb.qp, 100, sge(dst, 0, 5000))
	postRecv(t, eb.qp, 101, sge(dst, 0, 5000))
	wc := poll(t, ea.scq, 2, 2*time.Second)
	checkWC(t, wc[0], 1, rdma.Success)
	checkWC(t, wc[1], 2, rdma.Success)
	rc := poll(t, eb.rcq, 2, 2*time.Second)
	checkWC(t, rc[0], 100, rdma.Success)
	checkWC(t, rc[1], 101, rdma.Success)
	if rc[1].Flags&rdma.WCWithImm == 0 || rc[1].Imm != 0xdeadbeef || rc[1].ByteLen != 10 {
		t.Fatalf("SEND with immediate completion %+v", rc[1])
	}
	if !bytes.Equal(dst.Bytes()[:10], src.Bytes()[:10]) {
		t.Fatal("data differs")
	}
}

// TestRNRRetryExceeded gives up after the RNR retry count.
func TestRNRRetryExceeded(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, _ := connect(t, a, b, qpOpts{rnrRetry: 2, minRNRTimer: 1, timeout: 16})
	src := regMR(t, ea.pd, 64, 0)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 64)}})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 1, rdma.RNRRetryExceeded)
	if s := b.Stats(); s.RNRNAKsSent != 3 {
		t.Errorf("responder sent %d RNR NAKs, want 3 (first try and 2 retries)", s.RNRNAKsSent)
	}
}

// TestRetryExceeded checks that requests to a peer that went away fail
// with RetryExceeded after the retry count, and flush what follows.
func TestRetryExceeded(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, _ := connect(t, a, b, qpOpts{timeout: 10, retry: 3})
	b.Close()
	src := regMR(t, ea.pd, 64, 0)
	start := time.Now()
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 64)}})
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(src, 0, 8)}, RemoteAddr: 4096, RKey: 0x100})
	wc := poll(t, ea.scq, 2, 5*time.Second)
	checkWC(t, wc[0], 1, rdma.RetryExceeded)
	checkWC(t, wc[1], 2, rdma.WRFlushError)
	el := time.Since(start)
	if rto := rdma.TimeoutDuration(10); el < 4*rto {
		t.Errorf("gave up after %v, before 4 timeouts of %v", el, rto)
	}
	if s := a.Stats(); s.Timeouts != 4 {
		t.Errorf("%d timeouts, want 4 (3 retries, then give up)", s.Timeouts)
	}
	if ea.qp.State() != rdma.QPSErr {
		t.Errorf("QP in %s", ea.qp.State())
	}
}

// TestRecvTooSmall: a SEND longer than the receive buffer completes the
// receive with LocalLengthError and the send with RemoteInvalidRequestError.
func TestRecvTooSmall(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{})
	src := regMR(t, ea.pd, 3000, 0)
	dst := regMR(t, eb.pd, 4096, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 5, sge(dst, 0, 2000))
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 0, 3000)}})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 1, rdma.RemoteInvalidRequestError)
	checkWC(t, poll(t, eb.rcq, 1, 2*time.Second)[0], 5, rdma.LocalLengthError)
}

// TestSendWithInvalidate invalidates the responder's rkey; a later WRITE
// with it fails, and Rekey makes the region usable again.
func TestSendWithInvalidate(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{})
	src := regMR(t, ea.pd, 64, 0)
	buf := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	mem := regMR(t, eb.pd, 4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	postRecv(t, eb.qp, 1, sge(buf, 0, 64))
	rkey := mem.RKey()
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSendWithInv, InvalidateRKey: rkey, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 16)}})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 1, rdma.Success)
	rc := poll(t, eb.rcq, 1, 2*time.Second)[0]
	checkWC(t, rc, 1, rdma.Success)
	if rc.Flags&rdma.WCWithInvalidate == 0 || rc.InvalidatedRKey != rkey {
		t.Fatalf("receive completion %+v, want invalidated rkey %#x", rc, rkey)
	}
	if mem.RKeyValid() {
		t.Fatal("rkey still valid")
	}
	nk, err := mem.Rekey()
	if err != nil || nk == rkey || !mem.RKeyValid() || nk>>8 != rkey>>8 {
		t.Fatalf("Rekey: %#x, %v (old %#x)", nk, err, rkey)
	}
	// The new key works, the old one does not.
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr(), RKey: nk})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 2, rdma.Success)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 16)}, RemoteAddr: mem.Addr(), RKey: rkey})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 3, rdma.RemoteAccessError)
}

// TestWriteWithImm: an RDMA WRITE with immediate writes the memory and
// consumes a receive that reports the length and the immediate.
func TestWriteWithImm(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU256})
	src := regMR(t, ea.pd, 1000, 0)
	mem := regMR(t, eb.pd, 1000, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	fill(src.Bytes(), 3)
	postRecv(t, eb.qp, 42)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWriteWithImm, Imm: 0x01020304, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 1000)}, RemoteAddr: mem.Addr(), RKey: mem.RKey()})
	checkWC(t, poll(t, ea.scq, 1, 2*time.Second)[0], 1, rdma.Success)
	rc := poll(t, eb.rcq, 1, 2*time.Second)[0]
	checkWC(t, rc, 42, rdma.Success)
	if rc.Opcode != rdma.WCRecvRDMAWithImm || rc.ByteLen != 1000 || rc.Flags&rdma.WCWithImm == 0 || rc.Imm != 0x01020304 {
		t.Fatalf("completion %+v", rc)
	}
	if !bytes.Equal(mem.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
}

// TestLocalInvAndMultiSGE: LOCAL_INV invalidates a local region's rkey
// in order with the other requests; SGLs of several entries gather and
// scatter in order; unsignaled requests complete silently; inline data
// is copied at post time.
func TestLocalInvAndMultiSGE(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{mtu: rdma.MTU256, inline: 64})
	src := regMR(t, ea.pd, 1000, 0)
	own := regMR(t, ea.pd, 100, rdma.AccessLocalWrite|rdma.AccessRemoteRead)
	inl := regMR(t, ea.pd, 60, 0)
	dst := regMR(t, eb.pd, 2000, rdma.AccessLocalWrite)
	fill(src.Bytes(), 4)
	fill(inl.Bytes(), 5)
	postRecv(t, eb.qp, 1, sge(dst, 1000, 300), sge(dst, 0, 700))
	postRecv(t, eb.qp, 2, sge(dst, 1500, 64))
	wrs := []rdma.SendWR{
		{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(src, 500, 500), sge(src, 0, 100), sge(src, 900, 0), sge(src, 100, 400)}},
		{WRID: 2, Opcode: rdma.WRLocalInv, InvalidateRKey: own.RKey(), Flags: rdma.SendSignaled},
		{WRID: 3, Opcode: rdma.WRSend, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{sge(inl, 0, 30), sge(inl, 30, 30)}},
	}
	wrs[0].Next, wrs[1].Next = &wrs[1], &wrs[2]
	postSend(t, ea.qp, &wrs[0])
	fill(inl.Bytes(), 99) // after post: the inline SEND must carry the old bytes
	wc := poll(t, ea.scq, 2, 2*time.Second)
	checkWC(t, wc[0], 2, rdma.Success)
	checkWC(t, wc[1], 3, rdma.Success)
	if wc[0].Opcode != rdma.WCLocalInv || own.RKeyValid() {
		t.Fatalf("LOCAL_INV: %+v, rkey valid %v", wc[0], own.RKeyValid())
	}
	rc := poll(t, eb.rcq, 2, 2*time.Second)
	checkWC(t, rc[0], 1, rdma.Success)
	checkWC(t, rc[1], 2, rdma.Success)
	orig := make([]byte, 1000)
	fill(orig, 4)
	want := append(append(append([]byte(nil), orig[500:1000]...), orig[0:100]...), orig[100:500]...)
	got := append(append([]byte(nil), dst.Bytes()[1000:1300]...), dst.Bytes()[0:700]...)
	if rc[0].ByteLen != 1000 || !bytes.Equal(got, want) {
		t.Fatalf("multi-SGE SEND: %d bytes, data equal %v", rc[0].ByteLen, bytes.Equal(got, want))
	}
	inlOrig := make([]byte, 60)
	fill(inlOrig, 5)
	if rc[1].ByteLen != 60 || !bytes.Equal(dst.Bytes()[1500:1560], inlOrig) {
		t.Fatalf("inline SEND: %d bytes, data differs", rc[1].ByteLen)
	}
}

// TestFlushOnError: moving a QP to ERR flushes posted receives and sends.
func TestFlushOnError(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	_, eb := connect(t, a, b, qpOpts{})
	dst := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	for i := range 3 {
		postRecv(t, eb.qp, uint64(i), sge(dst, 0, 64))
	}
	if err := eb.qp.Modify(&rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState); err != nil {
		t.Fatal(err)
	}
	for i, wc := range poll(t, eb.rcq, 3, time.Second) {
		checkWC(t, wc, uint64(i), rdma.WRFlushError)
	}
	// Posting in ERR completes with a flush error at once.
	postRecv(t, eb.qp, 9, sge(dst, 0, 64))
	checkWC(t, poll(t, eb.rcq, 1, time.Second)[0], 9, rdma.WRFlushError)
	postSend(t, eb.qp, &rdma.SendWR{WRID: 10, Opcode: rdma.WRSend})
	checkWC(t, poll(t, eb.scq, 1, time.Second)[0], 10, rdma.WRFlushError)
}

// TestLocalProtection: an SGE with a bad lkey completes with
// LocalProtectionError.
func TestLocalProtection(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, _ := connect(t, a, b, qpOpts{})
	src := regMR(t, ea.pd, 64, 0)
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, SGL: []rdma.SGE{{Addr: src.Addr(), Length: 65, LKey: src.LKey()}}})
	checkWC(t, poll(t, ea.scq, 1, time.Second)[0], 1, rdma.LocalProtectionError)
	if ea.qp.State() != rdma.QPSErr {
		t.Fatalf("QP in %s", ea.qp.State())
	}
	// A READ into a region without LocalWrite is a protection error too.
	ec, _ := connect(t, a, b, qpOpts{})
	ro := regMR(t, ec.pd, 64, rdma.AccessRemoteRead)
	postSend(t, ec.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMARead, SGL: []rdma.SGE{sge(ro, 0, 8)}, RemoteAddr: 1, RKey: 1})
	checkWC(t, poll(t, ec.scq, 1, time.Second)[0], 2, rdma.LocalProtectionError)
}
