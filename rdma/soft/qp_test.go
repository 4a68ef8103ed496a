package soft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// TestQPStateMachine checks the transitions Modify allows and refuses,
// the attributes each needs, and what may be posted in which state.
func TestQPStateMachine(t *testing.T) {
	a := openDev(t, Config{Addr: addrA})
	o := qpOpts{}
	o.defaults()
	e := newEnd(t, a, &o)
	q := e.qp
	buf := regMR(t, e.pd, 64, rdma.AccessLocalWrite)
	if q.State() != rdma.QPSReset {
		t.Fatalf("new QP in %s", q.State())
	}
	if err := q.PostRecv(&rdma.RecvWR{SGL: []rdma.SGE{sge(buf, 0, 64)}}); !errors.Is(err, rdma.ErrInvalidState) {
		t.Fatalf("post receive in RESET: %v", err)
	}
	var pe *rdma.PostError
	if err := q.PostSend(&rdma.SendWR{Opcode: rdma.WRSend}); !errors.As(err, &pe) || pe.Index != 0 || !errors.Is(err, rdma.ErrInvalidState) {
		t.Fatalf("post send in RESET: %v", err)
	}
	steps := []struct {
		name string
		attr rdma.QPAttr
		mask rdma.QPAttrMask
		err  error
	}{
		{"RESET to RTR", rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState, rdma.ErrInvalidState},
		{"INIT without access flags", rdma.QPAttr{State: rdma.QPSInit}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort, rdma.ErrInvalidArgument},
		{"INIT", rdma.QPAttr{State: rdma.QPSInit, AccessFlags: rdma.AccessRemoteWrite}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags, nil},
		{"INIT to RTS", rdma.QPAttr{State: rdma.QPSRTS}, rdma.QPAttrState, rdma.ErrInvalidState},
		{"RTR without path", rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState, rdma.ErrInvalidArgument},
		{"RTR with MTU too large", rdma.QPAttr{State: rdma.QPSRTR, PathMTU: 6, AH: rdma.AH{DGID: rdma.GIDFromAddr(addrB)}},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer, rdma.ErrInvalidArgument},
		{"RTR", rdma.QPAttr{State: rdma.QPSRTR, PathMTU: rdma.MTU1024, AH: rdma.AH{DGID: rdma.GIDFromAddr(addrB)}, DestQPN: 0x99, RQPSN: 0x1000000 + 5},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer, nil},
		{"RTS with retry 8", rdma.QPAttr{State: rdma.QPSRTS, RetryCount: 8},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic, rdma.ErrInvalidArgument},
		{"RTS", rdma.QPAttr{State: rdma.QPSRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 4},
			rdma.QPAttrState | rdma.QPAttrSQPSN | rdma.QPAttrTimeout | rdma.QPAttrRetryCount | rdma.QPAttrRNRRetry | rdma.QPAttrMaxRdAtomic, nil},
		{"RTS to RTS", rdma.QPAttr{MinRNRTimer: 3}, rdma.QPAttrMinRNRTimer, nil},
		{"RTS to SQD", rdma.QPAttr{State: rdma.QPSSQD}, rdma.QPAttrState, nil},
		{"SQD to INIT", rdma.QPAttr{State: rdma.QPSInit}, rdma.QPAttrState, rdma.ErrInvalidState},
		{"SQD to RTS", rdma.QPAttr{State: rdma.QPSRTS, CurState: rdma.QPSSQD}, rdma.QPAttrState | rdma.QPAttrCurState, nil},
	}
	for _, s := range steps {
		err := q.Modify(&s.attr, s.mask)
		if (s.err == nil) != (err == nil) || (s.err != nil && !errors.Is(err, s.err)) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.err)
		}
	}
	var got rdma.QPAttr
	if err := q.Query(&got); err != nil {
		t.Fatal(err)
	}
	if got.State != rdma.QPSRTS || got.RQPSN != 5 || got.DestQPN != 0x99 || got.PathMTU != rdma.MTU1024 || got.MaxRdAtomic != 4 || got.MinRNRTimer != 3 || got.Cap.MaxSendWR != o.sendWR {
		t.Fatalf("Query: %+v", got)
	}
	// A full send queue refuses more.
	sq := make([]rdma.SendWR, o.sendWR+1)
	for i := range sq[:len(sq)-1] {
		sq[i] = rdma.SendWR{Opcode: rdma.WRRDMAWrite, Next: &sq[i+1], RemoteAddr: 1, RKey: 1}
	}
	sq[len(sq)-1] = rdma.SendWR{Opcode: rdma.WRRDMAWrite}
	if err := q.Modify(&rdma.QPAttr{State: rdma.QPSSQD}, rdma.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(&sq[0]); !errors.As(err, &pe) || pe.Index != o.sendWR || !errors.Is(err, rdma.ErrQueueFull) {
		t.Fatalf("overfull send queue: %v", err)
	}
	// Reset drops everything without completions.
	if err := q.Modify(&rdma.QPAttr{State: rdma.QPSReset}, rdma.QPAttrState); err != nil {
		t.Fatal(err)
	}
	var wc [1]rdma.WorkCompletion
	if e.scq.Poll(wc[:]) != 0 {
		t.Fatalf("completion after reset: %+v", wc[0])
	}
	if err := e.scq.Destroy(); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("destroy CQ in use: %v", err)
	}
	if err := e.pd.Dealloc(); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("dealloc PD in use: %v", err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&rdma.QPAttr{State: rdma.QPSInit}, rdma.QPAttrState); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("modify destroyed QP: %v", err)
	}
	if err := buf.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := e.pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
}

// TestCQWait checks Wait and Notify.
func TestCQWait(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := eb.rcq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v", err)
	}
	dst := regMR(t, eb.pd, 8, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1, sge(dst, 0, 8))
	go ea.qp.PostSend(&rdma.SendWR{WRID: 1, Opcode: rdma.WRSend})
	select {
	case <-eb.rcq.Notify():
	case <-time.After(2 * time.Second):
		t.Fatal("no notification")
	}
	if err := eb.rcq.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkWC(t, poll(t, eb.rcq, 1, time.Second)[0], 1, rdma.Success)
}

// TestNoAllocs checks that the steady-state data path allocates nothing:
// posting a receive and a SEND, and polling both completions.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := openPair(t, Config{}, Config{})
	ea, eb := connect(t, a, b, qpOpts{})
	src := regMR(t, ea.pd, 4096, 0)
	dst := regMR(t, eb.pd, 4096, rdma.AccessLocalWrite)
	rsg := []rdma.SGE{sge(dst, 0, 4096)}
	ssg := []rdma.SGE{sge(src, 0, 2048)}
	rwr := rdma.RecvWR{SGL: rsg}
	swr := rdma.SendWR{Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: ssg}
	wc := make([]rdma.WorkCompletion, 4)
	ctx := context.Background()
	round := func() {
		if err := eb.qp.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
		if err := ea.qp.PostSend(&swr); err != nil {
			t.Fatal(err)
		}
		for _, cq := range []rdma.CQ{ea.scq, eb.rcq} {
			for cq.Poll(wc) == 0 {
				if err := cq.Wait(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for range 100 {
		round() // warm the pools
	}
	if n := testing.AllocsPerRun(500, round); n > 0.05 {
		t.Fatalf("%.2f allocations per SEND round trip", n)
	}
}

// TestCommEstablished: the first request on a QP in RTR reports the
// communication-established event once.
func TestCommEstablished(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	got := make(chan uint32, 4)
	b.SetCommEstablished(func(qpn uint32) { got <- qpn })
	o := qpOpts{}
	o.defaults()
	ea, eb := newEnd(t, a, &o), newEnd(t, b, &o)
	bringUp(t, ea, addrB, eb.qp.QPN(), 10, 20, &o)
	steps := []struct {
		attr rdma.QPAttr
		mask rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, AccessFlags: o.access}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrAccessFlags},
		{rdma.QPAttr{State: rdma.QPSRTR, AH: rdma.AH{DGID: a.GID()}, PathMTU: o.mtu, DestQPN: ea.qp.QPN(), RQPSN: 10, MaxDestRdAtomic: 1, MinRNRTimer: 1},
			rdma.QPAttrState | rdma.QPAttrAV | rdma.QPAttrPathMTU | rdma.QPAttrDestQPN | rdma.QPAttrRQPSN | rdma.QPAttrMaxDestRdAtomic | rdma.QPAttrMinRNRTimer},
	}
	for _, s := range steps {
		if err := eb.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	dst := regMR(t, eb.pd, 64, rdma.AccessLocalWrite)
	postRecv(t, eb.qp, 1, sge(dst, 0, 64))
	postRecv(t, eb.qp, 2, sge(dst, 0, 64))
	postSend(t, ea.qp, &rdma.SendWR{WRID: 1, Opcode: rdma.WRSend, Flags: rdma.SendSignaled})
	postSend(t, ea.qp, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSend, Flags: rdma.SendSignaled})
	poll(t, ea.scq, 2, 2*time.Second) // a responder in RTR acknowledges
	select {
	case q := <-got:
		if q != eb.qp.QPN() {
			t.Fatalf("event for QP %#x, want %#x", q, eb.qp.QPN())
		}
	case <-time.After(time.Second):
		t.Fatal("no communication-established event")
	}
	if len(got) != 0 {
		t.Fatal("event reported twice")
	}
}
