package ibcm

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/wire"
)

// The CM messages as this manager formats them, following cm.c's
// cm_format_* functions. Each returns a fresh 256-byte MAD.

// pkeyDefault is the default partition key, the only one on RoCE.
const pkeyDefault = 0xffff

// lidPermissive is the LID the kernel puts in REQs for routed (RoCE) paths.
const lidPermissive = 0xffff

// defaultHopLimit is the IP TTL of a RoCEv2 path (the REQ's hop limit).
const defaultHopLimit = 64

func newCMMAD(attr wire.CMAttr, tid uint64) (wire.MAD, []byte) {
	b := make([]byte, wire.MADLen)
	mad := wire.MAD(b)
	mad.InitCM(attr, tid)
	return mad, mad.Data()
}

// roceFlowLabel is the flow label rdma_cm puts in a RoCEv2 path of an IPv4
// connection (cma_get_roce_udp_flow_label): sport × 31 + dport, 20 bits.
func roceFlowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xfffff
}

// formatREQ builds c's REQ (c.mu held): service port, the caller's
// parameters and private data after the rdma_cm header.
func (m *Manager) formatREQ(c *conn, p rdma.ConnParam, privateData []byte) ([]byte, error) {
	mad, d := newCMMAD(wire.CMAttrREQ, c.tid)
	r := wire.REQ(d)
	r.SetLocalCommID(c.localID)
	r.SetServiceID(wire.ServiceID(c.remote.Port()))
	r.SetLocalCAGUID(m.guid)
	r.SetLocalQPN(c.localQPN)
	r.SetResponderResources(p.ResponderResources)
	r.SetInitiatorDepth(p.InitiatorDepth)
	r.SetRemoteCMResponseTimeout(m.opts.CMResponseTimeout)
	r.SetTransportServiceType(wire.CMTransportRC)
	r.SetEndToEndFlowControl(p.FlowControl)
	r.SetStartingPSN(c.rqPSN)
	r.SetLocalCMResponseTimeout(m.opts.CMResponseTimeout)
	r.SetRetryCount(p.RetryCount)
	r.SetPKey(pkeyDefault)
	r.SetPathMTU(uint8(c.mtu))
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetMaxCMRetries(m.opts.MaxCMRetries)
	r.SetSRQ(p.SRQ)
	path := r.Primary()
	path.SetLocalLID(lidPermissive)
	path.SetRemoteLID(lidPermissive)
	path.SetLocalGID(rdma.GIDFromAddr(c.local.Addr()))
	path.SetRemoteGID(rdma.GIDFromAddr(c.remote.Addr()))
	path.SetFlowLabel(c.flowLabel)
	path.SetPacketRate(0)
	path.SetTrafficClass(c.trafficClass)
	path.SetHopLimit(c.hopLimit)
	path.SetSL(0)
	path.SetSubnetLocal(false)
	path.SetLocalACKTimeout(ACKTimeout(m.opts.ACKDelay, m.opts.PacketLifeTime))
	pd := r.PrivateData()
	hdr := wire.CMAHdr(pd[:wire.CMAHdrLen])
	if err := hdr.SetAddrs(c.local.Addr(), c.remote.Addr()); err != nil {
		return nil, err
	}
	hdr.SetPort(c.local.Port())
	if len(privateData) > len(pd)-wire.CMAHdrLen {
		return nil, fmt.Errorf("%d bytes of private data exceed %d: %w", len(privateData), rdma.MaxConnectPrivateData, rdma.ErrInvalidArgument)
	}
	copy(pd[wire.CMAHdrLen:], privateData)
	return mad, nil
}

// formatREP builds the REP of a passive connection.
func (m *Manager) formatREP(c *conn, p rdma.ConnParam, privateData []byte) ([]byte, error) {
	mad, d := newCMMAD(wire.CMAttrREP, c.tid)
	r := wire.REP(d)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetLocalQPN(c.localQPN)
	r.SetStartingPSN(c.rqPSN)
	r.SetResponderResources(c.rr)
	r.SetInitiatorDepth(c.id)
	r.SetTargetACKDelay(m.opts.ACKDelay)
	r.SetFailoverAccepted(0)
	r.SetEndToEndFlowControl(p.FlowControl)
	r.SetRNRRetryCount(p.RNRRetryCount)
	r.SetSRQ(p.SRQ)
	r.SetLocalCAGUID(m.guid)
	if err := r.SetPrivateData(privateData); err != nil {
		return nil, fmt.Errorf("%w: %w", err, rdma.ErrInvalidArgument)
	}
	return mad, nil
}

// formatRTU builds the RTU of an active connection.
func formatRTU(c *conn) []byte {
	mad, d := newCMMAD(wire.CMAttrRTU, c.tid)
	r := wire.RTU(d)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	return mad
}

// formatMRA builds an MRA for the message msg of c.
func formatMRA(c *conn, msg wire.CMMessage, serviceTimeout uint8) []byte {
	mad, d := newCMMAD(wire.CMAttrMRA, c.tid)
	r := wire.MRA(d)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetMessageMRAed(msg)
	r.SetServiceTimeout(serviceTimeout)
	return mad
}

// formatREJ builds a REJ from c in state st, as cm_format_rej: a REJ of
// a REQ not yet MRAed carries local communication ID 0.
func formatREJ(c *conn, st connState, reason wire.REJReason, ari, privateData []byte) []byte {
	mad, d := newCMMAD(wire.CMAttrREJ, c.tid)
	r := wire.REJ(d)
	r.SetRemoteCommID(c.remoteID)
	switch st {
	case stReqRcvd:
		r.SetLocalCommID(0)
		r.SetMessageRejected(wire.CMMessageREQ)
	case stMRAReqSent:
		r.SetLocalCommID(c.localID)
		r.SetMessageRejected(wire.CMMessageREQ)
	case stRepRcvd:
		r.SetLocalCommID(c.localID)
		r.SetMessageRejected(wire.CMMessageREP)
	default:
		r.SetLocalCommID(c.localID)
		r.SetMessageRejected(wire.CMMessageOther)
	}
	r.SetReason(reason)
	if len(ari) > 0 {
		r.SetARI(ari) // callers pass at most 16 bytes
	}
	r.SetPrivateData(privateData) // callers check the length
	return mad
}

// formatDREQ builds c's DREQ, with a TID of its own (cm_form_tid).
func (m *Manager) formatDREQ(c *conn) []byte {
	mad, d := newCMMAD(wire.CMAttrDREQ, m.formTID(c.localID))
	r := wire.DREQ(d)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	r.SetRemoteQPN(c.remoteQPN)
	return mad
}

// formatDREP builds c's DREP answering a DREQ with transaction ID tid.
func formatDREP(c *conn, tid uint64) []byte {
	mad, d := newCMMAD(wire.CMAttrDREP, tid)
	r := wire.DREP(d)
	r.SetLocalCommID(c.localID)
	r.SetRemoteCommID(c.remoteID)
	return mad
}

// issueREJ answers a received MAD without a connection (cm_issue_rej):
// the REJ swaps the received message's communication IDs and reuses its
// TID.
func (m *Manager) issueREJ(dst netip.Addr, rcv wire.MAD, reason wire.REJReason, msg wire.CMMessage) {
	mad, d := newCMMAD(wire.CMAttrREJ, rcv.TID())
	r := wire.REJ(d)
	in := rcv.Data()
	r.SetRemoteCommID(binary.BigEndian.Uint32(in[0:]))
	r.SetLocalCommID(binary.BigEndian.Uint32(in[4:]))
	r.SetMessageRejected(msg)
	r.SetReason(reason)
	m.log.Debug("sending REJ", "dst", dst, "reason", reason, "remote_comm_id", r.RemoteCommID())
	m.send(dst, mad)
}

// issueDREP answers a DREQ for an unknown connection (cm_issue_drep).
func (m *Manager) issueDREP(dst netip.Addr, rcv wire.MAD) {
	mad, d := newCMMAD(wire.CMAttrDREP, rcv.TID())
	r := wire.DREP(d)
	in := wire.DREQ(rcv.Data())
	r.SetRemoteCommID(in.LocalCommID())
	r.SetLocalCommID(in.RemoteCommID())
	m.send(dst, mad)
}
