package soft

import (
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// qpCounters are a QP's own counters, bumped beside the device's. The
// packet and byte counts are added once per run of a QP's packets in a
// send or receive batch, the others once per event; packets dropped
// before their QP is known (ICRC, malformed, unknown QP) are the
// device's only.
type qpCounters struct {
	packetsSent, bytesSent, packetsReceived, bytesReceived atomic.Uint64
	retransmissions, timeouts                              atomic.Uint64
	rnrNAKsSent, rnrNAKsReceived, seqNAKsSent              atomic.Uint64
	seqNAKsReceived, errNAKsSent, errNAKsReceived          atomic.Uint64
	duplicates, outOfSequence                              atomic.Uint64
	npECNMarked, npCNPSent, rpCNPHandled, rpCNPIgnored     atomic.Uint64
}

// addSent adds a run of sent packets and their bytes to c (nil: none).
func (c *qpCounters) addSent(pkts, bytes uint64) {
	if c != nil && pkts > 0 {
		c.packetsSent.Add(pkts)
		c.bytesSent.Add(bytes)
	}
}

// addReceived adds a run of received packets and their bytes to c.
func (c *qpCounters) addReceived(pkts, bytes uint64) {
	if c != nil && pkts > 0 {
		c.packetsReceived.Add(pkts)
		c.bytesReceived.Add(bytes)
	}
}

// QPStats is a snapshot of one live QP's counters.
type QPStats struct {
	QPN   uint32
	Type  rdma.QPType
	State rdma.QPState
	// DestQPN and Peer are the remote QP and its address (RC QPs from
	// RTR on; zero and invalid before and for UD and GSI QPs).
	DestQPN uint32
	Peer    netip.Addr

	PacketsSent     uint64 // packets the kernel took (each of a GSO send)
	BytesSent       uint64 // their UDP payload bytes
	PacketsReceived uint64 // packets handed to the QP: its peer, its transport class, ICRC good
	BytesReceived   uint64 // their UDP payload bytes
	Retransmissions uint64 // request packets sent again (go-back-N)
	Timeouts        uint64 // retransmission timer expiries that caused a retry
	RNRNAKsSent     uint64
	RNRNAKsReceived uint64
	SeqNAKsSent     uint64 // NAK PSN sequence error
	SeqNAKsReceived uint64
	ErrNAKsSent     uint64 // NAKs invalid request, remote access error, remote operational error
	ErrNAKsReceived uint64
	Duplicates      uint64 // duplicate requests received
	OutOfSequence   uint64 // requests received after a PSN gap

	// Congestion control (congestion.go), named as ConnectX's counters.
	NPECNMarkedRoCEPackets uint64 // CE-marked packets received
	NPCNPSent              uint64 // CNPs sent to the peer QP
	RPCNPHandled           uint64 // CNPs received and acted on
	RPCNPIgnored           uint64 // CNPs received and dropped
	// RPRate is the QP's current DCQCN rate in bits per second: the
	// line rate (CongestionConfig.LineRate) unless CNPs cut it, 0 with
	// congestion control off. RPLimited reports the QP paced.
	RPRate    uint64
	RPLimited bool
}

// QPStats appends a snapshot of every QP not destroyed yet to buf[:0], in
// QPN order, and returns it. A QP's counters start at its creation and go
// with it. The data path pays one atomic add per counter per run of the
// QP's packets in a batch; the snapshot takes each QP's lock briefly.
func (d *Device) QPStats(buf []QPStats) []QPStats {
	d.mu.RLock()
	qps := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.RUnlock()
	slices.SortFunc(qps, func(a, b *qp) int { return int(a.qpn) - int(b.qpn) })
	buf = buf[:0]
	for _, q := range qps {
		q.mu.Lock()
		if q.destroyed {
			q.mu.Unlock()
			continue
		}
		s := QPStats{QPN: q.qpn, Type: q.typ, State: q.state}
		if q.cc != nil {
			q.cc.rp.advance(time.Now())
			s.RPRate, s.RPLimited = uint64(q.cc.rp.rate()*8), q.cc.rp.limited
		}
		if q.typ == rdma.QPTypeRC && q.state != rdma.QPSReset && q.state != rdma.QPSInit {
			s.DestQPN = q.attr.DestQPN
			s.Peer = netip.AddrFrom16(q.dst)
			if !d.v6 {
				s.Peer = s.Peer.Unmap()
			}
		}
		q.mu.Unlock()
		c := &q.stats
		s.PacketsSent, s.BytesSent = c.packetsSent.Load(), c.bytesSent.Load()
		s.PacketsReceived, s.BytesReceived = c.packetsReceived.Load(), c.bytesReceived.Load()
		s.Retransmissions, s.Timeouts = c.retransmissions.Load(), c.timeouts.Load()
		s.RNRNAKsSent, s.RNRNAKsReceived = c.rnrNAKsSent.Load(), c.rnrNAKsReceived.Load()
		s.SeqNAKsSent, s.SeqNAKsReceived = c.seqNAKsSent.Load(), c.seqNAKsReceived.Load()
		s.ErrNAKsSent, s.ErrNAKsReceived = c.errNAKsSent.Load(), c.errNAKsReceived.Load()
		s.Duplicates, s.OutOfSequence = c.duplicates.Load(), c.outOfSequence.Load()
		s.NPECNMarkedRoCEPackets, s.NPCNPSent = c.npECNMarked.Load(), c.npCNPSent.Load()
		s.RPCNPHandled, s.RPCNPIgnored = c.rpCNPHandled.Load(), c.rpCNPIgnored.Load()
		buf = append(buf, s)
	}
	return buf
}
