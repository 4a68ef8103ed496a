package soft

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// TestSRQ: two RC QPs take their receives from one SRQ, in the order
// they were posted, each completing to its own receive CQ, multi-packet
// SENDs included; an empty SRQ draws RNR NAKs until a receive is posted;
// a QP in the error state flushes none of the SRQ's receives, which the
// other QP still gets; PostRecv on such a QP fails; Close is refused
// while QPs use the SRQ.
func TestSRQ(t *testing.T) {
	da, db := openPair(t, Config{}, Config{})
	o := qpOpts{}
	o.defaults()
	pd, err := da.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := pd.(rdma.SRQCreator)
	if !ok {
		t.Fatal("soft PD has no CreateSRQ")
	}
	srq, err := sc.CreateSRQ(&rdma.SRQAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	const msg = 3000 // three packets at MTU 1024
	recvMR := regMR(t, pd, 8*msg, rdma.AccessLocalWrite)
	post := func(i int) {
		t.Helper()
		if err := srq.PostRecv(&rdma.RecvWR{WRID: uint64(100 + i), SGL: []rdma.SGE{sge(recvMR, i*msg, msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The SRQ side: QPs of one PD on device A, each with its CQs.
	var a [2]*end
	var b [2]*end
	for k := range a {
		e := &end{dev: da, pd: pd}
		if e.scq, err = da.CreateCQ(64); err != nil {
			t.Fatal(err)
		}
		if e.rcq, err = da.CreateCQ(64); err != nil {
			t.Fatal(err)
		}
		e.qp, err = pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq,
			Cap: rdma.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		a[k] = e
		b[k] = newEnd(t, db, &o)
		bringUp(t, a[k], db.Addr(), b[k].qp.QPN(), 0, 0, &o)
		bringUp(t, b[k], da.Addr(), a[k].qp.QPN(), 0, 0, &o)
	}
	if err := a[0].qp.PostRecv(&rdma.RecvWR{WRID: 1, SGL: []rdma.SGE{sge(recvMR, 0, 64)}}); !errors.Is(err, rdma.ErrInvalidArgument) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v, want ErrInvalidArgument", err)
	}
	if err := srq.Close(); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("Close with QPs: %v, want ErrBusy", err)
	}
	sendMR := regMR(t, b[0].pd, 4*msg, 0)
	sendMR1 := regMR(t, b[1].pd, 4*msg, 0)
	fill(sendMR.Bytes(), 1)
	fill(sendMR1.Bytes(), 2)
	send := func(k, slot int) {
		t.Helper()
		m := sendMR
		if k == 1 {
			m = sendMR1
		}
		postSend(t, b[k].qp, &rdma.SendWR{WRID: uint64(slot), Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(m, slot*msg, msg)}})
		checkWC(t, poll(t, b[k].scq, 1, 10*time.Second)[0], uint64(slot), rdma.Success)
	}
	want := func(k, slot int) []byte {
		if k == 1 {
			return sendMR1.Bytes()[slot*msg : (slot+1)*msg]
		}
		return sendMR.Bytes()[slot*msg : (slot+1)*msg]
	}
	post(0)
	post(1)
	post(2)
	// QP 0, QP 1, QP 0: the SRQ's receives in order.
	for n, s := range []struct{ k, slot int }{{0, 0}, {1, 0}, {0, 1}} {
		send(s.k, s.slot)
		wc := poll(t, a[s.k].rcq, 1, 10*time.Second)[0]
		checkWC(t, wc, uint64(100+n), rdma.Success)
		if wc.ByteLen != msg || wc.QPN != a[s.k].qp.QPN() {
			t.Fatalf("receive %d: %d bytes on QP %#x", n, wc.ByteLen, wc.QPN)
		}
		if got := recvMR.Bytes()[n*msg : (n+1)*msg]; !bytes.Equal(got, want(s.k, s.slot)) {
			t.Fatalf("receive %d: data differs", n)
		}
	}
	// Empty: the SEND meets RNR NAKs and completes once a receive is there.
	rnr := da.Stats().RNRNAKsSent
	postSend(t, b[1].qp, &rdma.SendWR{WRID: 9, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(sendMR1, msg, msg)}})
	waitUntil(t, 10*time.Second, "an RNR NAK", func() bool { return da.Stats().RNRNAKsSent > rnr })
	post(3)
	checkWC(t, poll(t, b[1].scq, 1, 10*time.Second)[0], 9, rdma.Success)
	checkWC(t, poll(t, a[1].rcq, 1, 10*time.Second)[0], 103, rdma.Success)
	// QP 0 in error flushes nothing of the SRQ: QP 1 gets the receive.
	post(4)
	if err := a[0].qp.Modify(&rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if n := a[0].rcq.Poll(make([]rdma.WorkCompletion, 4)); n != 0 {
		t.Fatalf("%d completions on the receive CQ of the QP in error", n)
	}
	send(1, 2)
	checkWC(t, poll(t, a[1].rcq, 1, 10*time.Second)[0], 104, rdma.Success)
	for k := range a {
		if err := a[k].qp.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Close(); err != nil {
		t.Fatalf("Close after the QPs: %v", err)
	}
}
