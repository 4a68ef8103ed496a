package soft

import (
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// UD and the GSI QP. A UD QP (and the GSI QP, QP number 1, whose Q_Key is
// always 0x80010000) receives UD SEND Only packets whose DETH Q_Key
// matches its own into the next posted receive: the 40-byte GRH first
// (20 zero bytes and the IPv4 header, as rxe writes it for RoCEv2 over
// IPv4; over IPv6 the IPv6 header itself, rebuilt as net_linux.go says:
// traffic class and flow label 0, hop limit 64), then the payload. Datagrams that find no receive posted, carry
// the wrong Q_Key or do not fit are dropped and counted (UDDropped). A
// UD send is a single packet of at most the path MTU to AH.DGID, QP
// RemoteQPN, with DETH (RemoteQKey, this QP's number); it completes once
// handed to the kernel.

// udInput handles a datagram for a UD or GSI QP (q.mu held).
func (q *qp) udInput(p *wire.Packet, ip []byte) {
	d := q.dev
	op := p.Opcode()
	if q.state != rdma.QPSRTR && q.state != rdma.QPSRTS && q.state != rdma.QPSSQD {
		d.stats.dropped.Add(1)
		return
	}
	if (op != wire.UDSendOnly && op != wire.UDSendOnlyWithImmediate) || p.DETH.QKey() != q.attr.QKey {
		d.stats.udDropped.Add(1)
		return
	}
	w := q.recvHead()
	if w == nil || w.status != rdma.Success || rdma.GRHLen+len(p.Payload) > w.length {
		d.stats.udDropped.Add(1)
		return
	}
	var grh [rdma.GRHLen]byte
	if ip[0]>>4 == 6 {
		copy(grh[:], ip[:wire.IPv6HeaderLen])
	} else {
		copy(grh[20:], ip[:wire.IPv4HeaderLen])
	}
	if !scatter(w.segs, 0, grh[:]) || !scatter(w.segs, rdma.GRHLen, p.Payload) {
		d.stats.udDropped.Add(1)
		return
	}
	wc := rdma.WorkCompletion{Opcode: rdma.WCRecv, ByteLen: uint32(rdma.GRHLen + len(p.Payload)), Flags: rdma.WCGRH, SrcQP: p.DETH.SrcQP()}
	if op.HasImmDt() {
		wc.Flags |= rdma.WCWithImm
		wc.Imm = p.Imm()
	}
	q.completeRecv(&wc)
}
