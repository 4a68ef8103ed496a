package rdmatest

import (
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Tests of the device, protection domains, memory regions and the QP
// state machine.

// testDeviceAttributes: each device describes itself consistently: its
// GID is its address, its port is active with a valid MTU, its limits
// allow what the suite asks.
func testDeviceAttributes(t *testing.T, e *env) {
	devs := []rdma.Device{e.a}
	if !e.same {
		devs = append(devs, e.b)
	}
	for _, d := range devs {
		if d.Name() == "" {
			t.Errorf("device at %v has no name", d.Addr())
		}
		if !d.Addr().IsValid() {
			t.Errorf("%s: invalid address %v", d.Name(), d.Addr())
		}
		if g := rdma.GIDFromAddr(d.Addr()); d.GID() != g {
			t.Errorf("%s: GID %v, want %v (the address as a GID)", d.Name(), d.GID(), g)
		}
		p := d.Port()
		if p.State != rdma.PortActive {
			t.Errorf("%s: port %s, want ACTIVE", d.Name(), p.State)
		}
		if !p.ActiveMTU.Valid() || !p.MaxMTU.Valid() || p.ActiveMTU > p.MaxMTU {
			t.Errorf("%s: active MTU %v, max MTU %v", d.Name(), p.ActiveMTU, p.MaxMTU)
		}
		if p.GIDTblLen < 1 {
			t.Errorf("%s: GID table length %d", d.Name(), p.GIDTblLen)
		}
		if int64(p.MaxMsgSize) < int64(e.o.LargeSize) {
			t.Errorf("%s: largest message %d bytes, below the suite's large transfers (%d)", d.Name(), p.MaxMsgSize, e.o.LargeSize)
		}
		a := d.Attr()
		if a.MaxQP < 4 || a.MaxQPWR < 64 || a.MaxSGE < 1 || a.MaxCQE < 512 || a.MaxMR < 8 || a.MaxQPRdAtom < 1 || a.MaxQPInitRdAtom < 1 || a.MaxInlineData < 0 {
			t.Errorf("%s: limits %+v below what any RDMA device offers", d.Name(), a)
		}
		if _, err := d.ConnManager(); err != nil && !errors.Is(err, rdma.ErrNotSupported) {
			t.Errorf("%s: ConnManager: %v (want a manager or an error wrapping ErrNotSupported)", d.Name(), err)
		}
		t.Logf("%s %v: port %+v, limits %+v", d.Name(), d.Addr(), p, a)
	}
}

// testResourcesBusy: a PD with regions or QPs and a CQ with QPs refuse to
// go (ErrBusy), and go once they are unused.
func testResourcesBusy(t *testing.T, e *env) {
	x := newEnd(t, e.a, qpConfig{})
	m := x.reg(64, rdma.AccessLocalWrite, 1)
	wantErr(t, "Dealloc of a PD with an MR and a QP", x.pd.Dealloc(), rdma.ErrBusy)
	wantErr(t, "Destroy of a CQ with a QP", x.scq.Destroy(), rdma.ErrBusy)
	wantErr(t, "Destroy of a CQ with a QP", x.rcq.Destroy(), rdma.ErrBusy)
	x.destroyQP()
	if err := x.scq.Destroy(); err != nil {
		t.Errorf("Destroy of an unused CQ: %v", err)
	}
	x.scq = nil
	wantErr(t, "Dealloc of a PD with an MR", x.pd.Dealloc(), rdma.ErrBusy)
	x.dereg(m)
	if err := x.pd.Dealloc(); err != nil {
		t.Errorf("Dealloc of an unused PD: %v", err)
	}
	x.pd = nil
}

// testMRKeys: regions report what they were registered with, their
// lkeys (and the rkeys of regions with remote rights) are distinct, the
// buffer is referenced (not copied), and invalid access combinations are
// refused.
func testMRKeys(t *testing.T, e *env) {
	x := newEnd(t, e.a, qpConfig{})
	cases := []struct {
		n      int
		access rdma.Access
	}{
		{1, 0},
		{4096, rdma.AccessLocalWrite},
		{8193, rdma.AccessLocalWrite | rdma.AccessRemoteWrite},
		{100, rdma.AccessRemoteRead},
		{65543, rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteRead},
	}
	lkeys, rkeys := map[uint32]int{}, map[uint32]int{}
	for i, c := range cases {
		buf := pattern(c.n, uint64(i))
		m, err := x.pd.RegMR(buf, c.access)
		if err != nil {
			t.Fatalf("RegMR(%d bytes, %s): %v", c.n, c.access, err)
		}
		x.mrs[m] = true
		remote := c.access&(rdma.AccessRemoteRead|rdma.AccessRemoteWrite) != 0
		if m.Len() != c.n || m.Access() != c.access || (remote && !m.RKeyValid()) {
			t.Errorf("MR %d: Len %d, Access %s, RKeyValid %v; want %d, %s, true", i, m.Len(), m.Access(), m.RKeyValid(), c.n, c.access)
		}
		if b := m.Bytes(); len(b) != c.n || &b[0] != &buf[0] {
			t.Errorf("MR %d: Bytes is not the registered buffer", i)
		}
		if m.Addr()+uint64(c.n) < m.Addr() {
			t.Errorf("MR %d: address %#x + %d wraps", i, m.Addr(), c.n)
		}
		if j, dup := lkeys[m.LKey()]; dup {
			t.Errorf("MRs %d and %d share the lkey %#x", j, i, m.LKey())
		}
		lkeys[m.LKey()] = i
		if !remote {
			continue // an rkey without remote rights may be 0 for all (rxe)
		}
		if j, dup := rkeys[m.RKey()]; dup {
			t.Errorf("MRs %d and %d share the rkey %#x", j, i, m.RKey())
		}
		rkeys[m.RKey()] = i
	}
	for _, bad := range []rdma.Access{rdma.AccessRemoteWrite, rdma.AccessRemoteWrite | rdma.AccessRemoteRead, rdma.AccessRemoteAtomic} {
		m, err := x.pd.RegMR(make([]byte, 64), bad)
		if err == nil {
			x.mrs[m] = true
		}
		wantErr(t, "RegMR with "+bad.String()+" but without LocalWrite", err, rdma.ErrInvalidArgument)
	}
	// A second Deregister is harmless: nil, or an error wrapping ErrClosed.
	m := x.reg(64, rdma.AccessLocalWrite, 9)
	x.dereg(m)
	if err := m.Deregister(); err != nil && !errors.Is(err, rdma.ErrClosed) {
		t.Errorf("a second Deregister: %v, want nil or an error wrapping ErrClosed", err)
	}
}

// testMRInvalidateRekey: Invalidate makes the rkey refuse remote access,
// Rekey gives the region a new valid key (same index, new key byte) and
// the old one stays refused. Providers that cannot invalidate plain
// registrations skip.
func testMRInvalidateRekey(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	m := b.reg(4096, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 10)
	src := a.reg(4096, 0, 11)
	old := m.RKey()
	unsupported(t, "MR.Invalidate of a region from RegMR", m.Invalidate())
	if m.RKeyValid() {
		t.Error("RKeyValid after Invalidate")
	}
	// The invalidated key is refused.
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 100)}, RemoteAddr: m.Addr(), RKey: old})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with an invalidated rkey")[0], 1, rdma.RemoteAccessError, 0, 0)
	checkPattern(t, "region after a refused WRITE", m.Bytes(), 10, 0)

	nk, err := m.Rekey()
	unsupported(t, "MR.Rekey of a region from RegMR", err)
	if nk == old || nk>>8 != old>>8 || m.RKey() != nk || !m.RKeyValid() {
		t.Errorf("Rekey: %#x (RKey %#x, valid %v) after %#x; want a valid key differing only in the low 8 bits", nk, m.RKey(), m.RKeyValid(), old)
	}
	// A fresh connection (the first one is in Err) in the same PDs.
	a2, _ := e.link(t, linkConfig{a: qpConfig{pd: a.pd}, b: qpConfig{pd: b.pd}})
	postSend(t, a2.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 100)}, RemoteAddr: m.Addr() + 50, RKey: nk})
	checkWC(t, e.waitWC(t, a2.scq, 1, "WRITE with the new rkey")[0], 2, rdma.Success, rdma.WCRDMAWrite, a2.qp.QPN())
	checkBytes(t, "written range", m.Bytes()[50:150], src.Bytes()[:100])
	checkPattern(t, "region before the written range", m.Bytes()[:50], 10, 0)
	checkPattern(t, "region after the written range", m.Bytes()[150:], 10, 150)
	postSend(t, a2.qp, &rdma.SendWR{WRID: 3, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 100)}, RemoteAddr: m.Addr(), RKey: old})
	checkWC(t, e.waitWC(t, a2.scq, 1, "WRITE with the old rkey after Rekey")[0], 3, rdma.RemoteAccessError, 0, 0)
}

// testMRRemap: a RemappableMR takes a new buffer under the same address
// and a new rkey; remote writes land in the new buffer, the old key is
// refused, a buffer longer than the registration is refused.
func testMRRemap(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	m := b.reg(8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 20)
	rm, ok := m.(rdma.RemappableMR)
	if !ok {
		t.Skipf("the provider's MRs (%T) do not implement rdma.RemappableMR (fast registration)", m)
	}
	orig := m.Bytes()
	old, addr := m.RKey(), m.Addr()
	nb := pattern(4096, 21)
	nk, err := rm.Remap(nb)
	unsupported(t, "RemappableMR.Remap", err)
	if nk == old || m.RKey() != nk || !m.RKeyValid() || m.Addr() != addr {
		t.Errorf("Remap: key %#x (RKey %#x, valid %v) after %#x, address %#x after %#x", nk, m.RKey(), m.RKeyValid(), old, m.Addr(), addr)
	}
	_, err = rm.Remap(make([]byte, 8193))
	wantErr(t, "Remap to a buffer longer than the registration", err, rdma.ErrInvalidArgument)
	src := a.reg(1000, 0, 22)
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 1000)}, RemoteAddr: addr + 100, RKey: m.RKey()})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE into the remapped region")[0], 1, rdma.Success, rdma.WCRDMAWrite, a.qp.QPN())
	checkBytes(t, "written range of the new buffer", nb[100:1100], src.Bytes())
	checkPattern(t, "new buffer before the range", nb[:100], 21, 0)
	checkPattern(t, "new buffer after the range", nb[1100:], 21, 1100)
	checkPattern(t, "old buffer", orig, 20, 0)
	postSend(t, a.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{sge(src, 0, 10)}, RemoteAddr: addr, RKey: old})
	checkWC(t, e.waitWC(t, a.scq, 1, "WRITE with the rkey from before Remap")[0], 2, rdma.RemoteAccessError, 0, 0)
}

// testMRRemapFence: a Remap while a large RDMA WRITE under the old rkey
// is on the wire fences it. The WRITE completes (it was done before the
// Remap) or fails with a remote access error (the responder checks the
// rkey of every packet, not only the FIRST one that carries it); no byte
// of it ever lands in the new buffer, whether as long as the region or
// shorter than what the WRITE already wrote. Only RemappableMR providers run it
// (the soft one; the ibverbs provider has no Remap).
func testMRRemapFence(t *testing.T, e *env) {
	n := min(e.o.LargeSize, 256<<10) // hundreds of packets at 1 KiB
	for _, c := range []struct {
		name string
		len  int
	}{{"same-length", n}, {"shorter", e.mtu.Bytes() / 2}} {
		t.Run(c.name, func(t *testing.T) {
			a, b := e.link(t, linkConfig{})
			m := b.reg(n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite, 30)
			rm, ok := m.(rdma.RemappableMR)
			if !ok {
				t.Skipf("the provider's MRs (%T) do not implement rdma.RemappableMR (fast registration)", m)
			}
			src := a.reg(n, 0, 31)
			nb := pattern(c.len, 32)
			postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: m.Addr(), RKey: m.RKey()})
			_, err := rm.Remap(nb)
			unsupported(t, "RemappableMR.Remap", err)
			wc := e.waitWC(t, a.scq, 1, "WRITE racing a Remap")[0]
			if wc.WRID != 1 || (wc.Status != rdma.Success && wc.Status != rdma.RemoteAccessError) {
				t.Errorf("WRITE racing a Remap: %s, want success or remote access error", wcString(wc))
			}
			checkPattern(t, "the buffer bound by Remap", nb, 32, 0)
		})
	}
}

// QP attribute sets of the state-machine tests.
func (e *env) initAttr() (rdma.QPAttr, rdma.QPAttrMask) {
	return rdma.QPAttr{State: rdma.QPSInit, Port: 1, AccessFlags: rdma.AccessRemoteWrite | rdma.AccessRemoteRead},
		rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags
}

func (e *env) rtrAttr(dqpn uint32) (rdma.QPAttr, rdma.QPAttrMask) {
	return rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: e.b.GID()}, PathMTU: e.mtu, DestQPN: dqpn, RQPSN: 0x123456,
			MaxDestRdAtomic: e.rdAtomic, MinRNRTimer: 12},
		rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer
}

func (e *env) rtsAttr() (rdma.QPAttr, rdma.QPAttrMask) {
	return rdma.QPAttr{State: rdma.QPSRTS, SQPSN: 0x654321, Timeout: 14, RetryCount: 6, RNRRetry: 5, MaxRdAtomic: e.rdAtomic},
		rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic
}

// testQPStateMachine walks a QP through the verbs' state machine: the
// allowed transitions succeed, the others fail with ErrInvalidState and
// leave the state alone, posts are refused where the state does not take
// them, Query reports what was set, a destroyed QP says ErrClosed.
func testQPStateMachine(t *testing.T, e *env) {
	x := newEnd(t, e.a, qpConfig{})
	q := x.qp
	dqpn := e.goneQPN(t)
	buf := x.reg(64, rdma.AccessLocalWrite, 30)
	initA, initM := e.initAttr()
	rtrA, rtrM := e.rtrAttr(dqpn)
	rtsA, rtsM := e.rtsAttr()
	const (
		none = iota
		recvOnly
		both
	)
	steps := []struct {
		name  string
		attr  rdma.QPAttr
		mask  rdma.QPAttrMask
		err   error
		state rdma.QPState
		posts int // what may be posted in the resulting state
	}{
		{"RESET to RTR", rtrA, rtrM, rdma.ErrInvalidState, rdma.QPSReset, none},
		{"RESET to RTS", rtsA, rtsM, rdma.ErrInvalidState, rdma.QPSReset, none},
		{"RESET to INIT", initA, initM, nil, rdma.QPSInit, recvOnly},
		{"INIT to INIT", rdma.QPAttr{State: rdma.QPSInit, AccessFlags: rdma.AccessRemoteWrite}, rdma.QPAttrState | rdma.QPAttrAccessFlags, nil, rdma.QPSInit, recvOnly},
		{"INIT to RTS", rtsA, rtsM, rdma.ErrInvalidState, rdma.QPSInit, recvOnly},
		{"INIT to RTR", rtrA, rtrM, nil, rdma.QPSRTR, recvOnly},
		{"RTR to INIT", initA, initM, rdma.ErrInvalidState, rdma.QPSRTR, recvOnly},
		{"RTR to RTS", rtsA, rtsM, nil, rdma.QPSRTS, both},
		{"RTS to RTS", rdma.QPAttr{State: rdma.QPSRTS, MinRNRTimer: 14}, rdma.QPAttrState | rdma.QPAttrMinRNRTimer, nil, rdma.QPSRTS, both},
		{"RTS to RTR", rtrA, rtrM, rdma.ErrInvalidState, rdma.QPSRTS, both},
		{"RTS to INIT", initA, initM, rdma.ErrInvalidState, rdma.QPSRTS, both},
		{"RTS to ERR", rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState, nil, rdma.QPSErr, none},
		{"ERR to RTS", rtsA, rtsM, rdma.ErrInvalidState, rdma.QPSErr, none},
		{"ERR to INIT", initA, initM, rdma.ErrInvalidState, rdma.QPSErr, none},
		{"ERR to RESET", rdma.QPAttr{State: rdma.QPSReset}, rdma.QPAttrState, nil, rdma.QPSReset, none},
		{"RESET to INIT again", initA, initM, nil, rdma.QPSInit, recvOnly},
		{"INIT to ERR", rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState, nil, rdma.QPSErr, none},
		{"ERR to RESET again", rdma.QPAttr{State: rdma.QPSReset}, rdma.QPAttrState, nil, rdma.QPSReset, none},
	}
	wrid := uint64(0)
	for _, s := range steps {
		attr := s.attr
		err := q.Modify(&attr, s.mask)
		if s.err == nil && err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.err != nil && !errors.Is(err, s.err) {
			t.Errorf("%s: %v, want an error wrapping %q", s.name, err, s.err)
		}
		if st := q.State(); st != s.state {
			t.Fatalf("after %s: QP in %s, want %s", s.name, st, s.state)
		}
		if s.name == "RTS to RTS" { // everything is set now
			var got rdma.QPAttr
			if err := q.Query(&got); err != nil {
				t.Fatalf("Query in RTS: %v", err)
			}
			checkQuery(t, e, &got, dqpn, x.cfg)
		}
		if s.state == rdma.QPSErr {
			continue // posts in ERR complete with flush errors: testFlushOnErr
		}
		wrid++
		err = q.PostRecv(&rdma.RecvWR{WRID: wrid, SGL: []rdma.SGE{sge(buf, 0, 64)}})
		if s.posts >= recvOnly && err != nil {
			t.Errorf("after %s: PostRecv in %s: %v", s.name, s.state, err)
		}
		if s.posts < recvOnly {
			wantPostErr(t, "PostRecv in "+s.state.String(), err, 0, rdma.ErrInvalidState)
		}
		if s.posts < both {
			err = q.PostSend(&rdma.SendWR{WRID: wrid, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(buf, 0, 8)}})
			wantPostErr(t, "PostSend in "+s.state.String(), err, 0, rdma.ErrInvalidState)
		}
	}
	// RESET dropped every receive without a completion.
	var wc [8]rdma.WorkCompletion
	for _, cq := range []rdma.CQ{x.scq, x.rcq} {
		if n := cq.Poll(wc[:]); n > 0 {
			// The receives posted before ERR were flushed; nothing
			// posted after the last RESET may show.
			for _, c := range wc[:n] {
				if c.Status != rdma.WRFlushError {
					t.Errorf("completion %s of a QP that never connected", wcString(c))
				}
			}
		}
	}
	x.destroyQP()
	wantErr(t, "Modify of a destroyed QP", q.Modify(&initA, initM), rdma.ErrClosed)
	var got rdma.QPAttr
	wantErr(t, "Query of a destroyed QP", q.Query(&got), rdma.ErrClosed)
}

// checkQuery compares what Query returned in RTS with what was set.
func checkQuery(t *testing.T, e *env, got *rdma.QPAttr, dqpn uint32, cfg qpConfig) {
	t.Helper()
	rtr, _ := e.rtrAttr(dqpn)
	rts, _ := e.rtsAttr()
	type field struct {
		name      string
		got, want any
	}
	for _, f := range []field{
		{"State", got.State, rdma.QPSRTS},
		{"AccessFlags", got.AccessFlags, rdma.AccessRemoteWrite},
		{"AH.DGID", got.AH.DGID, e.b.GID()},
		{"PathMTU", got.PathMTU, rtr.PathMTU},
		{"DestQPN", got.DestQPN, dqpn},
		{"RQPSN", got.RQPSN, rtr.RQPSN},
		{"SQPSN", got.SQPSN, rts.SQPSN},
		{"MaxDestRdAtomic", got.MaxDestRdAtomic, rtr.MaxDestRdAtomic},
		{"MaxRdAtomic", got.MaxRdAtomic, rts.MaxRdAtomic},
		{"MinRNRTimer", got.MinRNRTimer, uint8(14)},
		{"Timeout", got.Timeout, rts.Timeout},
		{"RetryCount", got.RetryCount, rts.RetryCount},
		{"RNRRetry", got.RNRRetry, rts.RNRRetry},
	} {
		if f.got != f.want {
			t.Errorf("Query in RTS: %s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if got.Cap.MaxSendWR < cfg.sendWR || got.Cap.MaxRecvWR < cfg.recvWR || got.Cap.MaxSendSGE < cfg.sge || got.Cap.MaxRecvSGE < cfg.sge {
		t.Errorf("Query: capabilities %+v below the requested %+v", got.Cap, cfg)
	}
}

// testQPMissingAttributes: a transition without an attribute the verbs
// require for it, or with one out of range, fails with
// ErrInvalidArgument and leaves the QP in its state.
func testQPMissingAttributes(t *testing.T, e *env) {
	x := newEnd(t, e.a, qpConfig{})
	q := x.qp
	dqpn := e.goneQPN(t)
	initA, initM := e.initAttr()
	rtrA, rtrM := e.rtrAttr(dqpn)
	rtsA, rtsM := e.rtsAttr()
	badMTU := rtrA
	badMTU.PathMTU = rdma.MTU4096 + 1
	badRetry := rtsA
	badRetry.RetryCount = 8
	steps := []struct {
		name  string
		attr  rdma.QPAttr
		mask  rdma.QPAttrMask
		err   error
		state rdma.QPState
	}{
		{"INIT without access flags", initA, initM &^ rdma.QPAttrAccessFlags, rdma.ErrInvalidArgument, rdma.QPSReset},
		{"INIT", initA, initM, nil, rdma.QPSInit},
		{"RTR without destination QP and PSN", rtrA, rtrM &^ (rdma.QPAttrDestQPN | rdma.QPAttrRQPSN), rdma.ErrInvalidArgument, rdma.QPSInit},
		{"RTR without address vector", rtrA, rtrM &^ rdma.QPAttrAV, rdma.ErrInvalidArgument, rdma.QPSInit},
		{"RTR with path MTU code 6", badMTU, rtrM, rdma.ErrInvalidArgument, rdma.QPSInit},
		{"RTR", rtrA, rtrM, nil, rdma.QPSRTR},
		{"RTS without send PSN and timeout", rtsA, rtsM &^ (rdma.QPAttrSQPSN | rdma.QPAttrTimeout), rdma.ErrInvalidArgument, rdma.QPSRTR},
		{"RTS with retry count 8", badRetry, rtsM, rdma.ErrInvalidArgument, rdma.QPSRTR},
		{"RTS", rtsA, rtsM, nil, rdma.QPSRTS},
	}
	for _, s := range steps {
		attr := s.attr
		err := q.Modify(&attr, s.mask)
		if s.err == nil && err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.err != nil {
			wantErr(t, s.name, err, s.err)
		}
		if st := q.State(); st != s.state {
			t.Fatalf("after %s: QP in %s, want %s", s.name, st, s.state)
		}
	}
}

// testQPSQD: RTS to SQD and back (where the provider has SQD): the QP
// reports SQD, refuses SQD to INIT, and sends again after SQD to RTS.
func testQPSQD(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	unsupported(t, "the SQD state", a.qp.Modify(&rdma.QPAttr{State: rdma.QPSSQD}, rdma.QPAttrState))
	if s := a.qp.State(); s != rdma.QPSSQD {
		t.Fatalf("after RTS to SQD: QP in %s", s)
	}
	initA, initM := e.initAttr()
	wantErr(t, "SQD to INIT", a.qp.Modify(&initA, initM), rdma.ErrInvalidState)
	modify(t, a.qp, rdma.QPAttr{State: rdma.QPSRTS, CurState: rdma.QPSSQD}, rdma.QPAttrCurState)
	src, dst := a.reg(100, 0, 31), b.reg(100, rdma.AccessLocalWrite, 32)
	postRecv(t, b.qp, 7, sge(dst, 0, 100))
	postSend(t, a.qp, &rdma.SendWR{WRID: 8, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 100)}})
	checkWC(t, e.waitWC(t, a.scq, 1, "SEND after SQD to RTS")[0], 8, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, e.waitWC(t, b.rcq, 1, "receive after SQD to RTS")[0], 7, rdma.Success, rdma.WCRecv, b.qp.QPN())
	checkBytes(t, "received", dst.Bytes(), src.Bytes())
}

// testQPResetDropsWork: moving a QP to RESET drops its posted receives
// without completions, and the QP can be brought up and used again.
func testQPResetDropsWork(t *testing.T, e *env) {
	a, b := e.link(t, linkConfig{})
	dst := b.reg(64, rdma.AccessLocalWrite, 40)
	for i := range 3 {
		postRecv(t, b.qp, uint64(i), sge(dst, 0, 64))
	}
	modify(t, b.qp, rdma.QPAttr{State: rdma.QPSReset}, 0)
	expectNoWC(t, b.rcq, 100*time.Millisecond, "receive CQ after RESET")
	// Up again, with the PSN the requester continues from.
	c := linkConfig{}
	c.defaults()
	e.bringUp(t, b, e.a, a.qp.QPN(), c.psnB, c.psnA, c)
	src := a.reg(64, 0, 41)
	postRecv(t, b.qp, 9, sge(dst, 0, 64))
	postSend(t, a.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, 64)}})
	checkWC(t, e.waitWC(t, a.scq, 1, "SEND to the QP brought up again")[0], 1, rdma.Success, rdma.WCSend, a.qp.QPN())
	checkWC(t, e.waitWC(t, b.rcq, 1, "receive on the QP brought up again")[0], 9, rdma.Success, rdma.WCRecv, b.qp.QPN())
	checkBytes(t, "received", dst.Bytes(), src.Bytes())
}
