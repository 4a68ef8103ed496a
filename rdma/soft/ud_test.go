package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// gsi is a device's GSI QP (QP1) as the CM agent would set it up.
type gsi struct {
	pd  rdma.PD
	scq rdma.CQ
	rcq rdma.CQ
	qp  rdma.QP
	buf rdma.MR
}

func openGSI(t testing.TB, d *Device) *gsi {
	t.Helper()
	g := &gsi{}
	var err error
	if g.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	g.scq, _ = d.CreateCQ(64)
	g.rcq, _ = d.CreateCQ(64)
	g.qp, err = g.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeGSI, SendCQ: g.scq, RecvCQ: g.rcq, Cap: rdma.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if g.qp.QPN() != 1 {
		t.Fatalf("GSI QP number %d", g.qp.QPN())
	}
	for _, s := range []struct {
		a rdma.QPAttr
		m rdma.QPAttrMask
	}{
		{rdma.QPAttr{State: rdma.QPSInit, Port: 1}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort},
		{rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState},
		{rdma.QPAttr{State: rdma.QPSRTS, SQPSN: 0x123}, rdma.QPAttrState | rdma.QPAttrSQPSN},
	} {
		if err := g.qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	g.buf = regMR(t, g.pd, 16*(rdma.GRHLen+256), rdma.AccessLocalWrite)
	for i := 0; i < 8; i++ {
		postRecv(t, g.qp, uint64(i), sge(g.buf, i*(rdma.GRHLen+256), rdma.GRHLen+256))
	}
	return g
}

// TestGSI sends 256-byte MADs between the GSI QPs of two devices, as the
// CM does: UD SEND Only to QP 1 with Q_Key 0x80010000.
func TestGSI(t *testing.T) {
	var capA bytes.Buffer
	a, b := openPair(t, Config{Pcap: &capA}, Config{})
	ga, gb := openGSI(t, a), openGSI(t, b)
	if _, err := ga.pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeGSI, SendCQ: ga.scq, RecvCQ: ga.rcq, Cap: rdma.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); !errors.Is(err, rdma.ErrBusy) {
		t.Fatalf("second GSI QP: %v", err)
	}
	mad := ga.buf.Bytes()[15*(rdma.GRHLen+256):]
	fill(mad[:256], 8)
	wr := rdma.SendWR{WRID: 5, Opcode: rdma.WRSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(ga.buf, 15*(rdma.GRHLen+256), 256)},
		AH: rdma.AH{DGID: b.GID()}, RemoteQPN: 1, RemoteQKey: rdma.QKeyGSI}
	postSend(t, ga.qp, &wr)
	checkWC(t, poll(t, ga.scq, 1, time.Second)[0], 5, rdma.Success)
	rc := poll(t, gb.rcq, 1, time.Second)[0]
	checkWC(t, rc, 0, rdma.Success)
	if rc.SrcQP != 1 || rc.ByteLen != rdma.GRHLen+256 || rc.Flags&rdma.WCGRH == 0 || rc.QPN != 1 {
		t.Fatalf("receive completion %+v", rc)
	}
	got := gb.buf.Bytes()[:rdma.GRHLen+256]
	src, dst, err := rdma.GRHAddrs(got[:rdma.GRHLen])
	if err != nil || src != addrA || dst != addrB {
		t.Fatalf("GRH addresses %v %v %v", src, dst, err)
	}
	if !bytes.Equal(got[rdma.GRHLen:], mad[:256]) {
		t.Fatal("MAD differs")
	}

	// A wrong Q_Key is dropped.
	wr.RemoteQKey = 0x1234
	wr.WRID = 6
	postSend(t, ga.qp, &wr)
	checkWC(t, poll(t, ga.scq, 1, time.Second)[0], 6, rdma.Success)
	waitUntil(t, 5*time.Second, "the datagram with the wrong Q_Key dropped", func() bool { return b.Stats().UDDropped >= 1 })
	if s := b.Stats(); s.UDDropped != 1 {
		t.Fatalf("UD dropped %d", s.UDDropped)
	}
	var none [1]rdma.WorkCompletion
	if gb.rcq.Poll(none[:]) != 0 {
		t.Fatalf("a datagram with the wrong Q_Key was delivered: %+v", none[0])
	}
	// Too long for the MTU: a local length error.
	big := regMR(t, ga.pd, 8192, 0)
	postSend(t, ga.qp, &rdma.SendWR{WRID: 7, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(big, 0, 8192)}, AH: rdma.AH{DGID: b.GID()}, RemoteQPN: 1, RemoteQKey: rdma.QKeyGSI})
	checkWC(t, poll(t, ga.scq, 1, time.Second)[0], 7, rdma.LocalLengthError)

	a.Close() // before reading what it captured
	// What went on the wire: UD SEND Only, P_Key 0xffff, QP 1, DETH Q_Key 0x80010000, source QP 1.
	recs := readPcap(t, capA.Bytes())
	if len(recs) < 1 {
		t.Fatal("nothing captured")
	}
	_, _, pkt, err := wire.SplitIPUDP(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	if err := p.Parse(pkt); err != nil {
		t.Fatal(err)
	}
	if p.Opcode() != wire.UDSendOnly || p.BTH.PKey() != 0xffff || p.BTH.DestQP() != 1 || p.DETH.QKey() != rdma.QKeyGSI || p.DETH.SrcQP() != 1 || p.BTH.PSN() != 0x123 || len(p.Payload) != 256 {
		t.Fatalf("wire: %s DETH %x", p.BTH, []byte(p.DETH))
	}
	if v := binary.BigEndian.Uint16(recs[0][20:]); v == 0 {
		t.Fatalf("UDP source port %d", v)
	}
}

// TestUD: a UD QP with its own Q_Key; a work request Q_Key with the top
// bit set uses the sender QP's Q_Key.
func TestUD(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	mk := func(d *Device, qkey uint32) (rdma.QP, rdma.CQ, rdma.CQ, rdma.MR) {
		pd, _ := d.AllocPD()
		scq, _ := d.CreateCQ(16)
		rcq, _ := d.CreateCQ(16)
		qp, err := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeUD, SendCQ: scq, RecvCQ: rcq, Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&rdma.QPAttr{State: rdma.QPSInit, Port: 1}, rdma.QPAttrState|rdma.QPAttrPKeyIndex|rdma.QPAttrPort); !errors.Is(err, rdma.ErrInvalidArgument) {
			t.Fatalf("UD to INIT without a Q_Key: %v", err)
		}
		for _, s := range []struct {
			a rdma.QPAttr
			m rdma.QPAttrMask
		}{
			{rdma.QPAttr{State: rdma.QPSInit, Port: 1, QKey: qkey}, rdma.QPAttrState | rdma.QPAttrPKeyIndex | rdma.QPAttrPort | rdma.QPAttrQKey},
			{rdma.QPAttr{State: rdma.QPSRTR}, rdma.QPAttrState},
			{rdma.QPAttr{State: rdma.QPSRTS}, rdma.QPAttrState | rdma.QPAttrSQPSN},
		} {
			if err := qp.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
		return qp, scq, rcq, regMR(t, pd, 1024, rdma.AccessLocalWrite)
	}
	qa, scqA, _, ma := mk(a, 0x5555)
	qb, _, rcqB, mb := mk(b, 0x5555)
	postRecv(t, qb, 1, sge(mb, 0, 1024))
	fill(ma.Bytes()[:100], 1)
	postSend(t, qa, &rdma.SendWR{WRID: 2, Opcode: rdma.WRSendWithImm, Imm: 77, Flags: rdma.SendSignaled, SGL: []rdma.SGE{sge(ma, 0, 100)},
		AH: rdma.AH{DGID: b.GID()}, RemoteQPN: qb.QPN(), RemoteQKey: 0x80000000})
	checkWC(t, poll(t, scqA, 1, time.Second)[0], 2, rdma.Success)
	rc := poll(t, rcqB, 1, time.Second)[0]
	checkWC(t, rc, 1, rdma.Success)
	if rc.SrcQP != qa.QPN() || rc.Imm != 77 || rc.Flags&rdma.WCWithImm == 0 || rc.ByteLen != rdma.GRHLen+100 {
		t.Fatalf("completion %+v", rc)
	}
	if !bytes.Equal(mb.Bytes()[rdma.GRHLen:rdma.GRHLen+100], ma.Bytes()[:100]) {
		t.Fatal("data differs")
	}
}
