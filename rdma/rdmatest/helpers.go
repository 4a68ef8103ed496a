package rdmatest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// Data patterns. Every byte depends on a seed and on its offset, so that
// data written to the wrong place, shifted, duplicated, truncated or taken
// from another message never matches.

// pattern returns n bytes of the pattern of seed.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	fill(b, seed, 0)
	return b
}

// fill writes into b the bytes of the pattern of seed that lie at
// offsets off..off+len(b).
func fill(b []byte, seed uint64, off int) {
	for i := 0; i < len(b); {
		pos := off + i
		w := mix(seed, uint64(pos/8))
		var word [8]byte
		binary.LittleEndian.PutUint64(word[:], w)
		k := copy(b[i:], word[pos%8:])
		i += k
	}
}

// mix is splitmix64 of the seed and a word index.
func mix(seed, i uint64) uint64 {
	z := seed*0x9e3779b97f4a7c15 + (i+1)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// checkBytes reports where got differs from want (the first offset and
// how many bytes differ).
func checkBytes(t testing.TB, what string, got, want []byte) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
		return false
	}
	if bytes.Equal(got, want) {
		return true
	}
	first, n := -1, 0
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	t.Errorf("%s: %d of %d bytes differ, the first at offset %d (got %#02x, want %#02x)", what, n, len(got), first, got[first], want[first])
	return false
}

// checkPattern checks that b holds the pattern of seed at offset off.
func checkPattern(t testing.TB, what string, b []byte, seed uint64, off int) bool {
	t.Helper()
	want := make([]byte, len(b))
	fill(want, seed, off)
	return checkBytes(t, what, b, want)
}

// Resources. An end is one side of a test: a PD, a send and a receive CQ
// and an RC QP on one device, released by t.Cleanup in the right order
// unless the test released them itself.

// qpConfig sizes an end's QP and CQs.
type qpConfig struct {
	sendWR, recvWR int // default 64
	sge            int // default min(4, device MaxSGE)
	inline         int
	sigAll         bool
	cqe            int     // default 4 × the work requests
	pd             rdma.PD // a PD of another end to share (that end releases it)
}

// end is one side of a test.
type end struct {
	t        testing.TB
	dev      rdma.Device
	pd       rdma.PD
	scq, rcq rdma.CQ
	qp       rdma.QP
	cfg      qpConfig
	mrs      map[rdma.MR]bool
	ownPD    bool
}

// newEnd creates a PD, two CQs and an RC QP in Reset on dev.
func newEnd(t testing.TB, dev rdma.Device, cfg qpConfig) *end {
	t.Helper()
	if cfg.sendWR == 0 {
		cfg.sendWR = 64
	}
	if cfg.recvWR == 0 {
		cfg.recvWR = 64
	}
	if cfg.sge == 0 {
		cfg.sge = min(4, dev.Attr().MaxSGE)
	}
	if cfg.cqe == 0 {
		cfg.cqe = 4 * (cfg.sendWR + cfg.recvWR)
	}
	x := &end{t: t, dev: dev, cfg: cfg, mrs: make(map[rdma.MR]bool)}
	var err error
	if x.pd = cfg.pd; x.pd == nil {
		if x.pd, err = dev.AllocPD(); err != nil {
			t.Fatalf("%s: AllocPD: %v", dev.Name(), err)
		}
		x.ownPD = true
	}
	t.Cleanup(x.release)
	if x.scq, err = dev.CreateCQ(cfg.cqe); err != nil {
		t.Fatalf("%s: CreateCQ(%d): %v", dev.Name(), cfg.cqe, err)
	}
	if x.rcq, err = dev.CreateCQ(cfg.cqe); err != nil {
		t.Fatalf("%s: CreateCQ(%d): %v", dev.Name(), cfg.cqe, err)
	}
	x.qp, err = x.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: x.scq, RecvCQ: x.rcq, SigAll: cfg.sigAll,
		Cap: rdma.QPCap{MaxSendWR: cfg.sendWR, MaxRecvWR: cfg.recvWR, MaxSendSGE: cfg.sge, MaxRecvSGE: cfg.sge, MaxInlineData: cfg.inline}})
	if err != nil {
		t.Fatalf("%s: CreateQP: %v", dev.Name(), err)
	}
	return x
}

// release destroys what the test left, QP first, and reports failures.
func (x *end) release() {
	t := x.t
	for m := range x.mrs {
		if err := m.Deregister(); err != nil {
			t.Errorf("cleanup: deregister MR %#x: %v", m.LKey(), err)
		}
	}
	x.mrs = nil
	if x.qp != nil {
		if err := x.qp.Destroy(); err != nil {
			t.Errorf("cleanup: destroy QP %#x: %v", x.qp.QPN(), err)
		}
		x.qp = nil
	}
	for _, cq := range []*rdma.CQ{&x.scq, &x.rcq} {
		if *cq != nil {
			if err := (*cq).Destroy(); err != nil {
				t.Errorf("cleanup: destroy CQ: %v", err)
			}
			*cq = nil
		}
	}
	if x.pd != nil && x.ownPD {
		if err := x.pd.Dealloc(); err != nil {
			t.Errorf("cleanup: dealloc PD: %v", err)
		}
		x.pd = nil
	}
}

// reg registers a new buffer of n bytes holding the pattern of seed.
func (x *end) reg(n int, access rdma.Access, seed uint64) rdma.MR {
	x.t.Helper()
	m, err := x.pd.RegMR(pattern(n, seed), access)
	if err != nil {
		x.t.Fatalf("%s: RegMR(%d bytes, %s): %v", x.dev.Name(), n, access, err)
	}
	x.mrs[m] = true
	return m
}

// dereg deregisters m, which the test registered with reg.
func (x *end) dereg(m rdma.MR) {
	x.t.Helper()
	delete(x.mrs, m)
	if err := m.Deregister(); err != nil {
		x.t.Fatalf("deregister MR %#x: %v", m.LKey(), err)
	}
}

// destroyQP destroys the end's QP.
func (x *end) destroyQP() {
	x.t.Helper()
	q := x.qp
	x.qp = nil
	if err := q.Destroy(); err != nil {
		x.t.Fatalf("destroy QP %#x: %v", q.QPN(), err)
	}
}

// sge returns the SGE of n bytes at offset off of m.
func sge(m rdma.MR, off, n int) rdma.SGE {
	return rdma.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

// postSend posts a chain of send work requests and fails the test on error.
func postSend(t testing.TB, q rdma.QP, wr *rdma.SendWR) {
	t.Helper()
	if err := q.PostSend(wr); err != nil {
		t.Fatalf("PostSend on QP %#x: %v", q.QPN(), err)
	}
}

// postRecv posts one receive of the given SGEs and fails the test on error.
func postRecv(t testing.TB, q rdma.QP, wrid uint64, sgl ...rdma.SGE) {
	t.Helper()
	if err := q.PostRecv(&rdma.RecvWR{WRID: wrid, SGL: sgl}); err != nil {
		t.Fatalf("PostRecv on QP %#x: %v", q.QPN(), err)
	}
}

// Connections without a connection manager: the QP numbers and PSNs are
// exchanged directly, as rping's or perftest's out-of-band setup does.

// linkConfig is the connection of two ends.
type linkConfig struct {
	a, b     qpConfig
	access   rdma.Access // the QPs' remote access (default RemoteWrite|RemoteRead)
	timeout  uint8       // local ACK timeout code (default 14, 67 ms)
	retry    uint8       // default 7
	rnrRetry uint8       // default 7 (infinite)
	minRNR   uint8       // default 1 (0.01 ms)
	psnA     uint32      // the first PSN a sends (default near the 24-bit wrap)
	psnB     uint32
}

func (c *linkConfig) defaults() {
	if c.access == 0 {
		c.access = rdma.AccessRemoteWrite | rdma.AccessRemoteRead
	}
	if c.timeout == 0 {
		c.timeout = 14
	}
	if c.retry == 0 {
		c.retry = 7
	}
	if c.rnrRetry == 0 {
		c.rnrRetry = 7
	}
	if c.minRNR == 0 {
		c.minRNR = 1
	}
	if c.psnA == 0 {
		c.psnA = 0xfffff0 // large transfers wrap the PSN
	}
	if c.psnB == 0 {
		c.psnB = 0xffff00
	}
}

// link creates an end on each device and connects their QPs (RTS both).
func (e *env) link(t testing.TB, c linkConfig) (*end, *end) {
	t.Helper()
	c.defaults()
	a, b := newEnd(t, e.a, c.a), newEnd(t, e.b, c.b)
	e.bringUp(t, a, e.b, b.qp.QPN(), c.psnA, c.psnB, c)
	e.bringUp(t, b, e.a, a.qp.QPN(), c.psnB, c.psnA, c)
	return a, b
}

// dangling creates an end on device a whose QP is in RTS towards a QP
// number of device b that does not exist (a QP created and destroyed):
// its requests are never answered.
func (e *env) dangling(t testing.TB, c linkConfig) *end {
	t.Helper()
	c.defaults()
	a := newEnd(t, e.a, c.a)
	gone := e.goneQPN(t)
	e.bringUp(t, a, e.b, gone, c.psnA, c.psnB, c)
	return a
}

// goneQPN returns the number of a QP of device b that was destroyed.
func (e *env) goneQPN(t testing.TB) uint32 {
	t.Helper()
	x := newEnd(t, e.b, qpConfig{sendWR: 1, recvWR: 1, sge: 1})
	n := x.qp.QPN()
	x.destroyQP()
	return n
}

// bringUp moves x's QP from Reset through Init and RTR to RTS, connected
// to QP peerQPN of device peer.
func (e *env) bringUp(t testing.TB, x *end, peer rdma.Device, peerQPN, sqPSN, rqPSN uint32, c linkConfig) {
	t.Helper()
	for _, s := range []struct {
		attr rdma.QPAttr
		mask rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, AccessFlags: c.access, Port: 1},
			rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags},
		{rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: peer.GID()}, PathMTU: e.mtu, DestQPN: peerQPN,
			RQPSN: rqPSN, MaxDestRdAtomic: e.rdAtomic, MinRNRTimer: c.minRNR},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer},
		{rdma.QPAttr{State: rdma.QPSRTS, SQPSN: sqPSN, Timeout: c.timeout, RetryCount: c.retry, RNRRetry: c.rnrRetry, MaxRdAtomic: e.rdAtomic},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic},
	} {
		if err := x.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("modify QP %#x of %s to %s: %v", x.qp.QPN(), x.dev.Name(), s.attr.State, err)
		}
	}
}

// Completions.

// ctx returns a context that ends after the run's timeout and is
// cancelled when the test ends.
func (e *env) ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// waitWC polls cq until n completions arrived, waiting with Wait, for
// at most the run's timeout.
func (e *env) waitWC(t testing.TB, cq rdma.CQ, n int, what string) []rdma.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.o.Timeout)
	defer cancel()
	wcs := make([]rdma.WorkCompletion, n)
	got := 0
	for got < n {
		k := cq.Poll(wcs[got:])
		got += k
		if got == n {
			break
		}
		if k > 0 {
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("%s: %d of %d completions after %v: %v (got %s)", what, got, n, e.o.Timeout, err, wcsString(wcs[:got]))
		}
	}
	return wcs
}

// expectNoWC checks that cq stays empty for d. A Wait that returns while
// Poll still finds nothing (a late notification of completions polled
// earlier) does not count here; testCQPollWait checks Wait itself.
func expectNoWC(t testing.TB, cq rdma.CQ, d time.Duration, what string) {
	t.Helper()
	var wc [4]rdma.WorkCompletion
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		if n := cq.Poll(wc[:]); n > 0 {
			t.Fatalf("%s: unexpected completions %s", what, wcsString(wc[:n]))
		}
		err := cq.Wait(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatalf("%s: Wait: %v", what, err)
		}
	}
}

// wcsString formats completions for messages.
func wcsString(wcs []rdma.WorkCompletion) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, wc := range wcs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(wcString(wc))
	}
	b.WriteByte(']')
	return b.String()
}

func wcString(wc rdma.WorkCompletion) string {
	s := fmt.Sprintf("{WRID %#x %q", wc.WRID, wc.Status.String())
	if wc.Status == rdma.Success {
		s += fmt.Sprintf(" %s len %d", wc.Opcode, wc.ByteLen)
	}
	if wc.Flags&rdma.WCWithImm != 0 {
		s += fmt.Sprintf(" imm %#x", wc.Imm)
	}
	if wc.Flags&rdma.WCWithInvalidate != 0 {
		s += fmt.Sprintf(" inv %#x", wc.InvalidatedRKey)
	}
	if wc.VendorErr != 0 {
		s += fmt.Sprintf(" vendor_err %#x", wc.VendorErr)
	}
	return s + fmt.Sprintf(" qpn %#x}", wc.QPN)
}

// checkWC checks a completion's WRID and status and, for a successful
// one, its opcode and QP number.
func checkWC(t testing.TB, wc rdma.WorkCompletion, wrid uint64, status rdma.WCStatus, op rdma.WCOpcode, qpn uint32) bool {
	t.Helper()
	if wc.WRID != wrid || wc.Status != status {
		t.Errorf("completion %s: want WRID %#x with status %q", wcString(wc), wrid, status.String())
		return false
	}
	if status == rdma.Success && (wc.Opcode != op || wc.QPN != qpn) {
		t.Errorf("completion %s: want opcode %s on QP %#x", wcString(wc), op, qpn)
		return false
	}
	return true
}

// wantErr checks that err wraps target.
func wantErr(t testing.TB, what string, err, target error) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: %v, want an error wrapping %q", what, err, target)
		return false
	}
	return true
}

// wantPostErr checks that err is a *PostError at index i wrapping target.
func wantPostErr(t testing.TB, what string, err error, i int, target error) bool {
	t.Helper()
	var pe *rdma.PostError
	if !errors.As(err, &pe) {
		t.Errorf("%s: %v (%T), want a *rdma.PostError", what, err, err)
		return false
	}
	if pe.Index != i || !errors.Is(err, target) {
		t.Errorf("%s: %v, want work request %d failing with %q", what, err, i, target)
		return false
	}
	return true
}

// modify applies one Modify and fails the test on error.
func modify(t testing.TB, q rdma.QP, attr rdma.QPAttr, mask rdma.QPAttrMask) {
	t.Helper()
	if err := q.Modify(&attr, mask|rdma.QPAttrState); err != nil {
		t.Fatalf("modify QP %#x to %s: %v", q.QPN(), attr.State, err)
	}
}

// toErr moves q to Err.
func toErr(t testing.TB, q rdma.QP) { modify(t, q, rdma.QPAttr{State: rdma.QPSErr}, 0) }

// unsupported skips t when err wraps ErrNotSupported, naming what the
// provider cannot do, and fails it on any other error.
func unsupported(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, rdma.ErrNotSupported) {
		t.Skipf("the provider does not support %s: %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}
