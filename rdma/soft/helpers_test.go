package soft

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// addrA and addrB are the two test devices' addresses: 127.S.T.1 and
// 127.S.T.2 with S (20..99) and T picked from the process ID, so that
// other binaries on the machine (other packages' tests, which use
// 127.0.x.y; a target daemon on 127.0.0.1) rarely hold them. FuzzInput's
// workers use S 100..199.
var addrA, addrB = func() (netip.Addr, netip.Addr) {
	pid := os.Getpid()
	s, t := byte(20+pid%80), byte(pid/80%250)
	return netip.AddrFrom4([4]byte{127, s, t, 1}), netip.AddrFrom4([4]byte{127, s, t, 2})
}()

// openDev opens a soft device, skipping the test when raw sockets are not
// permitted.
func openDev(t testing.TB, cfg Config) *Device {
	t.Helper()
	var d *Device
	var err error
	for deadline := time.Now().Add(60 * time.Second); ; {
		d, err = Open(cfg)
		if !errors.Is(err, syscall.EADDRINUSE) || !retryInUse(t, deadline) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW for its raw socket: %v", err)
		}
		t.Fatalf("Open(%v): %v", cfg.Addr, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// openPair opens the two test devices. Another test binary using the
// same addresses (go test runs packages in parallel) makes Open fail with
// EADDRINUSE: then both are released and tried again for a while, so that
// one binary never holds one address while waiting for the other.
func openPair(t testing.TB, a, b Config) (*Device, *Device) {
	t.Helper()
	a.Addr, b.Addr = addrA, addrB
	return openPairAt(t, a, b)
}

// openPairAt is openPair for the addresses in a and b.
func openPairAt(t testing.TB, a, b Config) (*Device, *Device) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		da, err := Open(a)
		if err == nil {
			var db *Device
			if db, err = Open(b); err == nil {
				t.Cleanup(func() { da.Close(); db.Close() })
				return da, db
			}
			da.Close()
		}
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW for its raw socket: %v", err)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !retryInUse(t, deadline) {
			t.Fatalf("open devices: %v", err)
		}
	}
}

// retryInUse is the pause before opening an address again that another
// test binary holds (EADDRINUSE): no event announces its release, so it
// waits 10 to 50 ms; it reports false, without waiting, after deadline or
// once the test is over.
func retryInUse(t testing.TB, deadline time.Time) bool {
	if time.Now().After(deadline) {
		return false
	}
	timer := time.NewTimer(time.Duration(10+rand.IntN(40)) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.Context().Done():
		return false
	}
}

// waitFor waits up to timeout for cond, checked every millisecond (the
// counters and states it looks at announce nothing), and reports whether
// it holds.
func waitFor(timeout time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// waitUntil is waitFor that fails t with what when cond does not hold.
func waitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !waitFor(timeout, cond) {
		t.Fatalf("waited %v for %s", timeout, what)
	}
}

// end is one side of a test connection.
type end struct {
	dev *Device
	pd  rdma.PD
	scq rdma.CQ
	rcq rdma.CQ
	qp  rdma.QP
}

// qpOpts are the connection parameters the tests vary.
type qpOpts struct {
	mtu         rdma.MTU
	psnA, psnB  uint32 // first PSN each side sends
	timeout     uint8
	retry       uint8
	rnrRetry    uint8
	minRNRTimer uint8
	sendWR      int
	recvWR      int
	cqe         int
	access      rdma.Access
	rdAtomic    uint8
	inline      int
}

func (o *qpOpts) defaults() {
	if o.mtu == 0 {
		o.mtu = rdma.MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 14 // 67 ms: no spurious retransmissions on a busy machine
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNRTimer == 0 {
		o.minRNRTimer = 12 // 0.64 ms
	}
	if o.sendWR == 0 {
		o.sendWR = 256
	}
	if o.recvWR == 0 {
		o.recvWR = 256
	}
	if o.cqe == 0 {
		o.cqe = 4096
	}
	if o.access == 0 {
		o.access = rdma.AccessRemoteRead | rdma.AccessRemoteWrite
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
}

// newEnd creates a PD, CQs and an RC QP in state Reset on d.
func newEnd(t testing.TB, d *Device, o *qpOpts) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = d.CreateCQ(o.cqe); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(o.cqe); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: rdma.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: o.inline}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// bringUp moves e.qp to RTS connected to the peer QP peerQPN at peer.
func bringUp(t testing.TB, e *end, peer netip.Addr, peerQPN, sqPSN, rqPSN uint32, o *qpOpts) {
	t.Helper()
	steps := []struct {
		attr rdma.QPAttr
		mask rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, AccessFlags: o.access, Port: 1},
			rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags},
		{rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: rdma.GIDFromAddr(peer)}, PathMTU: o.mtu, DestQPN: peerQPN,
			RQPSN: rqPSN, MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNRTimer},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer},
		{rdma.QPAttr{State: rdma.QPSRTS, SQPSN: sqPSN, Timeout: o.timeout, RetryCount: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := e.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("modify QP %#x to %s: %v", e.qp.QPN(), s.attr.State, err)
		}
	}
}

// connect creates and connects an RC QP on each device, exchanging QP
// numbers and PSNs directly (no CM).
func connect(t testing.TB, a, b *Device, o qpOpts) (*end, *end) {
	t.Helper()
	o.defaults()
	ea, eb := newEnd(t, a, &o), newEnd(t, b, &o)
	bringUp(t, ea, b.Addr(), eb.qp.QPN(), o.psnA, o.psnB, &o)
	bringUp(t, eb, a.Addr(), ea.qp.QPN(), o.psnB, o.psnA, &o)
	return ea, eb
}

// regMR registers a buffer of n bytes.
func regMR(t testing.TB, pd rdma.PD, n int, access rdma.Access) rdma.MR {
	t.Helper()
	m, err := pd.RegMR(make([]byte, n), access)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sge returns the SGE of n bytes at offset off of m.
func sge(m rdma.MR, off, n int) rdma.SGE {
	return rdma.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

// poll waits for n completions on cq.
func poll(t testing.TB, cq rdma.CQ, n int, timeout time.Duration) []rdma.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]rdma.WorkCompletion, 0, n)
	buf := make([]rdma.WorkCompletion, 64)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for %d completions, got %d: %v", n, len(out), err)
			}
		}
	}
	return out
}

// fill writes a pattern derived from seed into b.
func fill(b []byte, seed int) {
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

func postRecv(t testing.TB, qp rdma.QP, wrid uint64, sg ...rdma.SGE) {
	t.Helper()
	if err := qp.PostRecv(&rdma.RecvWR{WRID: wrid, SGL: sg}); err != nil {
		t.Fatal(err)
	}
}

func postSend(t testing.TB, qp rdma.QP, wr *rdma.SendWR) {
	t.Helper()
	if err := qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
}

func checkWC(t testing.TB, wc rdma.WorkCompletion, wrid uint64, status rdma.WCStatus) {
	t.Helper()
	if wc.WRID != wrid || wc.Status != status {
		t.Fatalf("completion WRID %#x status %q (opcode %s), want WRID %#x status %q", wc.WRID, wc.Status, wc.Opcode, wrid, status)
	}
}

// writeAllocs returns the allocations per signaled RDMA WRITE of n bytes
// from a to b, waited for on a's send CQ, after 50 to warm up.
func writeAllocs(t *testing.T, a, b *end, n int) float64 {
	t.Helper()
	src := regMR(t, a.pd, n, 0)
	dst := regMR(t, b.pd, n, rdma.AccessLocalWrite|rdma.AccessRemoteWrite)
	wr := rdma.SendWR{Opcode: rdma.WRRDMAWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(src, 0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wc := make([]rdma.WorkCompletion, 1)
	ctx := t.Context()
	run := func() {
		if err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		for a.scq.Poll(wc) == 0 {
			if err := a.scq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if wc[0].Status != rdma.Success {
			t.Fatalf("completion %+v", wc[0])
		}
	}
	for range 50 {
		run()
	}
	return testing.AllocsPerRun(200, run)
}
