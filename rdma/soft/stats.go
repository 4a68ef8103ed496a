package soft

import "sync/atomic"

// Stats is a snapshot of a device's counters.
type Stats struct {
	PacketsSent     uint64 // packets handed to the kernel (each packet of a GSO send counts)
	BytesSent       uint64 // UDP payload bytes sent
	SendErrors      uint64 // packets the kernel refused
	PacketsReceived uint64 // packets received (each packet of a GSO super-datagram counts)
	BytesReceived   uint64 // UDP payload bytes received
	ICRCErrors      uint64 // received packets dropped for a bad ICRC
	Malformed       uint64 // received packets dropped as unparsable or truncated
	UnknownQP       uint64 // received packets for a QP number not in use
	Dropped         uint64 // received packets dropped for the QP's state, opcode class or P_Key

	Retransmissions uint64 // request packets sent again (go-back-N)
	Timeouts        uint64 // retransmission timer expiries that caused a retry
	ACKsSent        uint64 // Acknowledge packets sent (ACKs and NAKs)
	ACKsReceived    uint64 // Acknowledge packets received
	SeqNAKsSent     uint64 // NAK PSN sequence error sent
	SeqNAKsReceived uint64
	RNRNAKsSent     uint64 // RNR NAKs sent
	RNRNAKsReceived uint64
	ErrNAKsSent     uint64 // NAKs invalid request, remote access error, remote operational error
	ErrNAKsReceived uint64
	Duplicates      uint64 // duplicate requests received (PSN before the expected one)
	OutOfSequence   uint64 // requests received after a gap (PSN beyond the expected one)
	StaleResponses  uint64 // ACKs and READ responses ignored as old or unexpected
	UDDropped       uint64 // UD datagrams dropped (Q_Key mismatch, no receive posted, too long)
	FencedResponses uint64 // READ responses built but not sent: their region was invalidated or remapped first

	SourcePortFallbacks uint64 // QPs sending from the device's port because their own source port could not be bound

	FaultDrops       uint64 // packets dropped by the fault injector
	FaultDuplicates  uint64 // packets duplicated by the fault injector
	FaultReorders    uint64 // packets delayed behind the next one by the fault injector
	FaultCorruptions uint64 // packets corrupted by the fault injector
	FaultCEMarks     uint64 // packets the fault injector marked CE

	// Congestion control (congestion.go), named as ConnectX's counters.
	NPECNMarkedRoCEPackets uint64 // np_ecn_marked_roce_packets: CE-marked packets received for RC QPs
	NPCNPSent              uint64 // np_cnp_sent: CNPs sent
	RPCNPHandled           uint64 // rp_cnp_handled: CNPs received that the reaction point acted on
	RPCNPIgnored           uint64 // rp_cnp_ignored: CNPs received and dropped (unknown QP, congestion control off, QP not sending)
	PacedDrops             uint64 // responder packets dropped because their rate-limited QP's paced queue was full
}

type counters struct {
	packetsSent, bytesSent, sendErrors                               atomic.Uint64
	packetsReceived, bytesReceived, icrcErrors, malformed, unknownQP atomic.Uint64
	dropped                                                          atomic.Uint64
	retransmissions, timeouts, acksSent, acksReceived                atomic.Uint64
	seqNAKsSent, seqNAKsReceived, rnrNAKsSent, rnrNAKsReceived       atomic.Uint64
	errNAKsSent, errNAKsReceived, duplicates, outOfSequence          atomic.Uint64
	staleResponses, udDropped, fencedResponses                       atomic.Uint64
	sourcePortFallbacks                                              atomic.Uint64
	steerMisses                                                      atomic.Uint64 // packets read by another receive queue than their QP's (not in Stats)
	ackTimerArms                                                     atomic.Uint64 // delayed-ACK timers started from stopped (not in Stats)
	faultDrops, faultDuplicates, faultReorders, faultCorruptions     atomic.Uint64
	faultCEMarks                                                     atomic.Uint64
	npECNMarked, npCNPSent, rpCNPHandled, rpCNPIgnored               atomic.Uint64
	pacedDrops                                                       atomic.Uint64
}

// Stats returns a snapshot of the device's counters.
func (d *Device) Stats() Stats {
	c := &d.stats
	return Stats{
		PacketsSent: c.packetsSent.Load(), BytesSent: c.bytesSent.Load(), SendErrors: c.sendErrors.Load(),
		PacketsReceived: c.packetsReceived.Load(), BytesReceived: c.bytesReceived.Load(),
		ICRCErrors: c.icrcErrors.Load(), Malformed: c.malformed.Load(), UnknownQP: c.unknownQP.Load(),
		Dropped: c.dropped.Load(), Retransmissions: c.retransmissions.Load(), Timeouts: c.timeouts.Load(),
		ACKsSent: c.acksSent.Load(), ACKsReceived: c.acksReceived.Load(),
		SeqNAKsSent: c.seqNAKsSent.Load(), SeqNAKsReceived: c.seqNAKsReceived.Load(),
		RNRNAKsSent: c.rnrNAKsSent.Load(), RNRNAKsReceived: c.rnrNAKsReceived.Load(),
		ErrNAKsSent: c.errNAKsSent.Load(), ErrNAKsReceived: c.errNAKsReceived.Load(),
		Duplicates: c.duplicates.Load(), OutOfSequence: c.outOfSequence.Load(),
		StaleResponses: c.staleResponses.Load(), UDDropped: c.udDropped.Load(), FencedResponses: c.fencedResponses.Load(),
		FaultDrops: c.faultDrops.Load(), FaultDuplicates: c.faultDuplicates.Load(),
		FaultReorders: c.faultReorders.Load(), FaultCorruptions: c.faultCorruptions.Load(),
		SourcePortFallbacks: c.sourcePortFallbacks.Load(), FaultCEMarks: c.faultCEMarks.Load(),
		NPECNMarkedRoCEPackets: c.npECNMarked.Load(), NPCNPSent: c.npCNPSent.Load(),
		RPCNPHandled: c.rpCNPHandled.Load(), RPCNPIgnored: c.rpCNPIgnored.Load(),
		PacedDrops: c.pacedDrops.Load(),
	}
}
