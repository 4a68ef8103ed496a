package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// The communication manager messages (IBA vol. 1 chapter 12.6) are views of
// the 232 bytes of MAD data after the common MAD header. Offsets below are
// relative to that data and follow Linux include/rdma/ibta_vol1_c12.h:
// CM_FIELD_BLOC(msg, byte, bit, width) is the field of width bits starting
// bit bits below the most significant bit of byte; CM_FIELDn_LOC(msg,
// byte, width) the top width bits of the n-bit big-endian word at byte.
// Setters truncate values to the field width and keep neighbouring fields.

// CMDataLen is the length of every CM message: the MAD data.
const CMDataLen = MADDataLen

// Private data lengths of the CM messages.
const (
	REQPrivateDataLen  = 92
	REPPrivateDataLen  = 196
	RTUPrivateDataLen  = 224
	REJPrivateDataLen  = 148
	REJARILen          = 72 // Additional Rejection Information
	MRAPrivateDataLen  = 222
	DREQPrivateDataLen = 220
	DREPPrivateDataLen = 224
)

// Field offsets in the CM messages.
const (
	reqLocalCommID      = 0
	reqServiceID        = 8
	reqLocalCAGUID      = 16
	reqLocalQKey        = 28
	reqLocalQPN         = 32 // 24 bits
	reqResponderRes     = 35
	reqLocalEECN        = 36 // 24 bits
	reqInitiatorDepth   = 39
	reqRemoteEECN       = 40 // 24 bits
	reqByte43           = 43 // remote CM response timeout:5, transport service type:2, end-to-end flow control:1
	reqStartingPSN      = 44 // 24 bits
	reqByte47           = 47 // local CM response timeout:5, retry count:3
	reqPKey             = 48
	reqByte50           = 50 // path MTU:4, RDC exists:1, RNR retry count:3
	reqByte51           = 51 // max CM retries:4, SRQ:1, extended transport type:3
	reqPrimaryPath      = 52
	reqAlternatePath    = 96
	reqSAPSupportedByte = 139 // bit offset 5
	reqPrivateData      = 140
	reqPathLen          = 44
	repLocalQKey        = 8
	repLocalQPN         = 12 // 24 bits
	repLocalEECN        = 16 // 24 bits
	repStartingPSN      = 20 // 24 bits
	repResponderRes     = 24
	repInitiatorDepth   = 25
	repByte26           = 26 // target ACK delay:5, failover accepted:2, end-to-end flow control:1
	repByte27           = 27 // RNR retry count:3, SRQ:1
	repLocalCAGUID      = 28
	repPrivateData      = 36
	cmLocalCommID       = 0
	cmRemoteCommID      = 4
	rtuPrivateData      = 8
	rejByte8            = 8 // message rejected:2
	rejByte9            = 9 // rejected info length:7
	rejReason           = 10
	rejARI              = 12
	rejPrivateData      = 84
	mraByte8            = 8 // message MRAed:2
	mraByte9            = 9 // service timeout:5
	mraPrivateData      = 10
	dreqRemoteQPN       = 8 // 24 bits
	dreqPrivateData     = 12
	drepPrivateData     = 8
	pathLocalLID        = 0
	pathRemoteLID       = 2
	pathLocalGID        = 4
	pathRemoteGID       = 20
	pathFlowLabelWord   = 36 // flow label: top 20 bits of this 32-bit word
	pathPacketRateByte  = 39 // bit offset 2, 6 bits
	pathTrafficClass    = 40
	pathHopLimit        = 41
	pathByte42          = 42 // SL:4, subnet local:1
	pathLocalACKTimeout = 43 // top 5 bits
	flowLabelShift      = 12
	flowLabelMask       = 0xfffff
)

// getBits returns the field of width bits that starts bitOff bits below
// the most significant bit of b[off].
func getBits(b []byte, off int, bitOff, width uint) uint8 {
	return b[off] >> (8 - bitOff - width) & (1<<width - 1)
}

// setBits writes v (truncated to width bits) into the field getBits reads.
func setBits(b []byte, off int, bitOff, width uint, v uint8) {
	shift := 8 - bitOff - width
	mask := uint8(1<<width-1) << shift
	b[off] = b[off]&^mask | v<<shift&mask
}

func getFlag(b []byte, off int, bitOff uint) bool { return getBits(b, off, bitOff, 1) != 0 }

func setFlag(b []byte, off int, bitOff uint, v bool) {
	var x uint8
	if v {
		x = 1
	}
	setBits(b, off, bitOff, 1, x)
}

// get24 returns the top 24 bits of the 32-bit big-endian word at off.
func get24(b []byte, off int) uint32 {
	_ = b[off+2]
	return uint32(b[off])<<16 | uint32(b[off+1])<<8 | uint32(b[off+2])
}

// set24 writes v (truncated to 24 bits) into the top 24 bits of the word at off.
func set24(b []byte, off int, v uint32) {
	_ = b[off+2]
	b[off], b[off+1], b[off+2] = byte(v>>16), byte(v>>8), byte(v)
}

// setBytes copies p into the fixed-size field f, zeroing the rest of it.
func setBytes(what string, f, p []byte) error {
	if len(p) > len(f) {
		return fmt.Errorf("wire: %d bytes of %s exceed its %d bytes", len(p), what, len(f))
	}
	clear(f[copy(f, p):])
	return nil
}

func parseCM(what string, b []byte) ([]byte, error) {
	if len(b) < CMDataLen {
		return nil, fmt.Errorf("wire: %d-byte CM %s: %w", len(b), what, ErrShort)
	}
	return b[:CMDataLen:CMDataLen], nil
}

// CMTimeout converts a 5-bit CM timeout exponent (CM response timeout,
// local ACK timeout, target ACK delay, service timeout) to a duration:
// 4.096 µs × 2^exp.
func CMTimeout(exp uint8) time.Duration {
	return 4096 * time.Nanosecond << (exp & 0x1f)
}

// MTUCode returns the InfiniBand MTU code (IB_MTU_256 = 1 … IB_MTU_4096 =
// 5) of an MTU in bytes, or 0 for a size that has none.
func MTUCode(n int) uint8 {
	switch n {
	case 256:
		return 1
	case 512:
		return 2
	case 1024:
		return 3
	case 2048:
		return 4
	case 4096:
		return 5
	}
	return 0
}

// MTUFromCode returns the MTU in bytes of an InfiniBand MTU code, or 0 for
// an invalid code.
func MTUFromCode(c uint8) int {
	if c < 1 || c > 5 {
		return 0
	}
	return 128 << c
}

// Transport service types of a REQ (IBA table 106).
const (
	CMTransportRC = 0
	CMTransportUC = 1
	CMTransportRD = 2
)

// CMMessage identifies the message a REJ rejects or an MRA acknowledges
// (CM_MSG_RESPONSE_* in Linux).
type CMMessage uint8

// Values of REJ.MessageRejected and MRA.MessageMRAed.
const (
	CMMessageREQ   CMMessage = 0
	CMMessageREP   CMMessage = 1
	CMMessageOther CMMessage = 2 // LAP for an MRA
)

// String names the message.
func (m CMMessage) String() string {
	switch m {
	case CMMessageREQ:
		return "REQ"
	case CMMessageREP:
		return "REP"
	case CMMessageOther:
		return "other"
	}
	return fmt.Sprintf("CMMessage(%d)", uint8(m))
}

// REJReason is the reason code of a REJ (IBA table 108; enum
// ib_cm_rej_reason in Linux include/rdma/ib_cm.h).
type REJReason uint16

// REJ reasons.
const (
	REJNoQP                      REJReason = 1
	REJNoEEC                     REJReason = 2
	REJNoResources               REJReason = 3
	REJTimeout                   REJReason = 4
	REJUnsupported               REJReason = 5
	REJInvalidCommID             REJReason = 6
	REJInvalidCommInstance       REJReason = 7
	REJInvalidServiceID          REJReason = 8
	REJInvalidTransportType      REJReason = 9
	REJStaleConn                 REJReason = 10
	REJRDCNotExist               REJReason = 11
	REJInvalidGID                REJReason = 12
	REJInvalidLID                REJReason = 13
	REJInvalidSL                 REJReason = 14
	REJInvalidTrafficClass       REJReason = 15
	REJInvalidHopLimit           REJReason = 16
	REJInvalidPacketRate         REJReason = 17
	REJInvalidAltGID             REJReason = 18
	REJInvalidAltLID             REJReason = 19
	REJInvalidAltSL              REJReason = 20
	REJInvalidAltTrafficClass    REJReason = 21
	REJInvalidAltHopLimit        REJReason = 22
	REJInvalidAltPacketRate      REJReason = 23
	REJPortCMRedirect            REJReason = 24
	REJPortRedirect              REJReason = 25
	REJInvalidMTU                REJReason = 26
	REJInsufficientRespResources REJReason = 27
	REJConsumerDefined           REJReason = 28
	REJInvalidRNRRetry           REJReason = 29
	REJDuplicateLocalCommID      REJReason = 30
	REJInvalidClassVersion       REJReason = 31
	REJInvalidFlowLabel          REJReason = 32
	REJInvalidAltFlowLabel       REJReason = 33
	REJVendorOptionNotSupported  REJReason = 35
)

var rejReasonNames = map[REJReason]string{
	REJNoQP:                      "no QP",
	REJNoEEC:                     "no EEC",
	REJNoResources:               "no resources",
	REJTimeout:                   "timeout",
	REJUnsupported:               "unsupported",
	REJInvalidCommID:             "invalid comm ID",
	REJInvalidCommInstance:       "invalid comm instance",
	REJInvalidServiceID:          "invalid service ID",
	REJInvalidTransportType:      "invalid transport type",
	REJStaleConn:                 "stale conn",
	REJRDCNotExist:               "RDC not exist",
	REJInvalidGID:                "invalid GID",
	REJInvalidLID:                "invalid LID",
	REJInvalidSL:                 "invalid SL",
	REJInvalidTrafficClass:       "invalid traffic class",
	REJInvalidHopLimit:           "invalid hop limit",
	REJInvalidPacketRate:         "invalid packet rate",
	REJInvalidAltGID:             "invalid alt GID",
	REJInvalidAltLID:             "invalid alt LID",
	REJInvalidAltSL:              "invalid alt SL",
	REJInvalidAltTrafficClass:    "invalid alt traffic class",
	REJInvalidAltHopLimit:        "invalid alt hop limit",
	REJInvalidAltPacketRate:      "invalid alt packet rate",
	REJPortCMRedirect:            "port CM redirect",
	REJPortRedirect:              "port redirect",
	REJInvalidMTU:                "invalid MTU",
	REJInsufficientRespResources: "insufficient resp resources",
	REJConsumerDefined:           "consumer defined",
	REJInvalidRNRRetry:           "invalid RNR retry",
	REJDuplicateLocalCommID:      "duplicate local comm ID",
	REJInvalidClassVersion:       "invalid class version",
	REJInvalidFlowLabel:          "invalid flow label",
	REJInvalidAltFlowLabel:       "invalid alt flow label",
	REJVendorOptionNotSupported:  "vendor option is not supported",
}

// String returns the reason as Linux's ibcm_reject_msg words it.
func (r REJReason) String() string {
	if n, ok := rejReasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("REJ reason %d", uint16(r))
}

// REQ is a view of a CM REQ message (IBA table 106).
type REQ []byte

// ParseREQ returns a REQ view of the MAD data b, checking its length.
func ParseREQ(b []byte) (REQ, error) {
	v, err := parseCM("REQ", b)
	return REQ(v), err
}

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[reqLocalCommID:]) }

// ServiceID returns the service ID (for rdma_cm, see ServiceID and PortFromServiceID).
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[reqServiceID:]) }

// LocalCAGUID returns the sender's CA GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[reqLocalCAGUID:]) }

// LocalQKey returns the sender's Q_Key (UD/RD only).
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[reqLocalQKey:]) }

// LocalQPN returns the sender's 24-bit QP number.
func (r REQ) LocalQPN() uint32 { return get24(r, reqLocalQPN) }

// ResponderResources returns the RDMA READ/atomic depth the sender accepts.
func (r REQ) ResponderResources() uint8 { return r[reqResponderRes] }

// LocalEECN returns the sender's 24-bit EE context number (RD only).
func (r REQ) LocalEECN() uint32 { return get24(r, reqLocalEECN) }

// InitiatorDepth returns the RDMA READ/atomic depth the sender issues.
func (r REQ) InitiatorDepth() uint8 { return r[reqInitiatorDepth] }

// RemoteEECN returns the 24-bit remote EE context number (RD only).
func (r REQ) RemoteEECN() uint32 { return get24(r, reqRemoteEECN) }

// RemoteCMResponseTimeout returns the 5-bit timeout exponent for the passive side's response.
func (r REQ) RemoteCMResponseTimeout() uint8 { return getBits(r, reqByte43, 0, 5) }

// TransportServiceType returns the 2-bit transport service type (CMTransportRC …).
func (r REQ) TransportServiceType() uint8 { return getBits(r, reqByte43, 5, 2) }

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REQ) EndToEndFlowControl() bool { return getFlag(r, reqByte43, 7) }

// StartingPSN returns the sender's 24-bit starting PSN.
func (r REQ) StartingPSN() uint32 { return get24(r, reqStartingPSN) }

// LocalCMResponseTimeout returns the 5-bit timeout exponent for the sender's responses.
func (r REQ) LocalCMResponseTimeout() uint8 { return getBits(r, reqByte47, 0, 5) }

// RetryCount returns the 3-bit transport retry count.
func (r REQ) RetryCount() uint8 { return getBits(r, reqByte47, 5, 3) }

// PKey returns the partition key.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[reqPKey:]) }

// PathMTU returns the 4-bit path MTU code (see MTUFromCode).
func (r REQ) PathMTU() uint8 { return getBits(r, reqByte50, 0, 4) }

// RDCExists returns the RDC exists bit.
func (r REQ) RDCExists() bool { return getFlag(r, reqByte50, 4) }

// RNRRetryCount returns the 3-bit RNR retry count (7 = infinite).
func (r REQ) RNRRetryCount() uint8 { return getBits(r, reqByte50, 5, 3) }

// MaxCMRetries returns the 4-bit maximum CM retries.
func (r REQ) MaxCMRetries() uint8 { return getBits(r, reqByte51, 0, 4) }

// SRQ returns the SRQ bit.
func (r REQ) SRQ() bool { return getFlag(r, reqByte51, 4) }

// ExtendedTransportType returns the 3-bit extended transport type.
func (r REQ) ExtendedTransportType() uint8 { return getBits(r, reqByte51, 5, 3) }

// Primary returns a view of the primary path fields.
func (r REQ) Primary() REQPath {
	return REQPath(r[reqPrimaryPath : reqPrimaryPath+reqPathLen : reqPrimaryPath+reqPathLen])
}

// Alternate returns a view of the alternate path fields (all zero when there is none).
func (r REQ) Alternate() REQPath {
	return REQPath(r[reqAlternatePath : reqAlternatePath+reqPathLen : reqAlternatePath+reqPathLen])
}

// SAPSupported returns the SAP supported bit.
func (r REQ) SAPSupported() bool { return getFlag(r, reqSAPSupportedByte, 5) }

// PrivateData returns the 92-byte private data field.
func (r REQ) PrivateData() []byte { return r[reqPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r REQ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[reqLocalCommID:], v) }

// SetServiceID sets the service ID.
func (r REQ) SetServiceID(v uint64) { binary.BigEndian.PutUint64(r[reqServiceID:], v) }

// SetLocalCAGUID sets the local CA GUID.
func (r REQ) SetLocalCAGUID(v uint64) { binary.BigEndian.PutUint64(r[reqLocalCAGUID:], v) }

// SetLocalQKey sets the local Q_Key.
func (r REQ) SetLocalQKey(v uint32) { binary.BigEndian.PutUint32(r[reqLocalQKey:], v) }

// SetLocalQPN sets the local QP number.
func (r REQ) SetLocalQPN(v uint32) { set24(r, reqLocalQPN, v) }

// SetResponderResources sets the responder resources.
func (r REQ) SetResponderResources(v uint8) { r[reqResponderRes] = v }

// SetLocalEECN sets the local EE context number.
func (r REQ) SetLocalEECN(v uint32) { set24(r, reqLocalEECN, v) }

// SetInitiatorDepth sets the initiator depth.
func (r REQ) SetInitiatorDepth(v uint8) { r[reqInitiatorDepth] = v }

// SetRemoteEECN sets the remote EE context number.
func (r REQ) SetRemoteEECN(v uint32) { set24(r, reqRemoteEECN, v) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout exponent.
func (r REQ) SetRemoteCMResponseTimeout(v uint8) { setBits(r, reqByte43, 0, 5, v) }

// SetTransportServiceType sets the transport service type.
func (r REQ) SetTransportServiceType(v uint8) { setBits(r, reqByte43, 5, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REQ) SetEndToEndFlowControl(v bool) { setFlag(r, reqByte43, 7, v) }

// SetStartingPSN sets the starting PSN.
func (r REQ) SetStartingPSN(v uint32) { set24(r, reqStartingPSN, v) }

// SetLocalCMResponseTimeout sets the local CM response timeout exponent.
func (r REQ) SetLocalCMResponseTimeout(v uint8) { setBits(r, reqByte47, 0, 5, v) }

// SetRetryCount sets the retry count.
func (r REQ) SetRetryCount(v uint8) { setBits(r, reqByte47, 5, 3, v) }

// SetPKey sets the partition key.
func (r REQ) SetPKey(v uint16) { binary.BigEndian.PutUint16(r[reqPKey:], v) }

// SetPathMTU sets the path MTU code.
func (r REQ) SetPathMTU(v uint8) { setBits(r, reqByte50, 0, 4, v) }

// SetRDCExists sets the RDC exists bit.
func (r REQ) SetRDCExists(v bool) { setFlag(r, reqByte50, 4, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REQ) SetRNRRetryCount(v uint8) { setBits(r, reqByte50, 5, 3, v) }

// SetMaxCMRetries sets the maximum CM retries.
func (r REQ) SetMaxCMRetries(v uint8) { setBits(r, reqByte51, 0, 4, v) }

// SetSRQ sets the SRQ bit.
func (r REQ) SetSRQ(v bool) { setFlag(r, reqByte51, 4, v) }

// SetExtendedTransportType sets the extended transport type.
func (r REQ) SetExtendedTransportType(v uint8) { setBits(r, reqByte51, 5, 3, v) }

// SetSAPSupported sets the SAP supported bit.
func (r REQ) SetSAPSupported(v bool) { setFlag(r, reqSAPSupportedByte, 5, v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed REQPrivateDataLen bytes.
func (r REQ) SetPrivateData(p []byte) error { return setBytes("REQ private data", r.PrivateData(), p) }

// REQPath is a view of the 44 bytes of a REQ that describe the primary or
// the alternate path.
type REQPath []byte

// LocalLID returns the local port LID (0xffff on RoCE: permissive).
func (p REQPath) LocalLID() uint16 { return binary.BigEndian.Uint16(p[pathLocalLID:]) }

// RemoteLID returns the remote port LID.
func (p REQPath) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[pathRemoteLID:]) }

// LocalGID returns the local port GID (the sender's IP address on RoCE).
func (p REQPath) LocalGID() GID { return GID(p[pathLocalGID : pathLocalGID+16]) }

// RemoteGID returns the remote port GID.
func (p REQPath) RemoteGID() GID { return GID(p[pathRemoteGID : pathRemoteGID+16]) }

// FlowLabel returns the 20-bit flow label (on RoCEv2 it selects the UDP
// source port of the connection).
func (p REQPath) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(p[pathFlowLabelWord:]) >> flowLabelShift
}

// PacketRate returns the 6-bit packet rate (IB rate code).
func (p REQPath) PacketRate() uint8 { return getBits(p, pathPacketRateByte, 2, 6) }

// TrafficClass returns the traffic class.
func (p REQPath) TrafficClass() uint8 { return p[pathTrafficClass] }

// HopLimit returns the hop limit.
func (p REQPath) HopLimit() uint8 { return p[pathHopLimit] }

// SL returns the 4-bit service level.
func (p REQPath) SL() uint8 { return getBits(p, pathByte42, 0, 4) }

// SubnetLocal returns the subnet local bit.
func (p REQPath) SubnetLocal() bool { return getFlag(p, pathByte42, 4) }

// LocalACKTimeout returns the 5-bit local ACK timeout exponent.
func (p REQPath) LocalACKTimeout() uint8 { return getBits(p, pathLocalACKTimeout, 0, 5) }

// SetLocalLID sets the local port LID.
func (p REQPath) SetLocalLID(v uint16) { binary.BigEndian.PutUint16(p[pathLocalLID:], v) }

// SetRemoteLID sets the remote port LID.
func (p REQPath) SetRemoteLID(v uint16) { binary.BigEndian.PutUint16(p[pathRemoteLID:], v) }

// SetLocalGID sets the local port GID.
func (p REQPath) SetLocalGID(g GID) { copy(p[pathLocalGID:pathLocalGID+16], g[:]) }

// SetRemoteGID sets the remote port GID.
func (p REQPath) SetRemoteGID(g GID) { copy(p[pathRemoteGID:pathRemoteGID+16], g[:]) }

// SetFlowLabel sets the 20-bit flow label.
func (p REQPath) SetFlowLabel(v uint32) {
	w := binary.BigEndian.Uint32(p[pathFlowLabelWord:])
	w = w&(1<<flowLabelShift-1) | (v&flowLabelMask)<<flowLabelShift
	binary.BigEndian.PutUint32(p[pathFlowLabelWord:], w)
}

// SetPacketRate sets the packet rate.
func (p REQPath) SetPacketRate(v uint8) { setBits(p, pathPacketRateByte, 2, 6, v) }

// SetTrafficClass sets the traffic class.
func (p REQPath) SetTrafficClass(v uint8) { p[pathTrafficClass] = v }

// SetHopLimit sets the hop limit.
func (p REQPath) SetHopLimit(v uint8) { p[pathHopLimit] = v }

// SetSL sets the service level.
func (p REQPath) SetSL(v uint8) { setBits(p, pathByte42, 0, 4, v) }

// SetSubnetLocal sets the subnet local bit.
func (p REQPath) SetSubnetLocal(v bool) { setFlag(p, pathByte42, 4, v) }

// SetLocalACKTimeout sets the local ACK timeout exponent.
func (p REQPath) SetLocalACKTimeout(v uint8) { setBits(p, pathLocalACKTimeout, 0, 5, v) }

// REP is a view of a CM REP message (IBA table 110).
type REP []byte

// ParseREP returns a REP view of the MAD data b, checking its length.
func ParseREP(b []byte) (REP, error) {
	v, err := parseCM("REP", b)
	return REP(v), err
}

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the REQ sender's communication ID.
func (r REP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// LocalQKey returns the sender's Q_Key.
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[repLocalQKey:]) }

// LocalQPN returns the sender's 24-bit QP number.
func (r REP) LocalQPN() uint32 { return get24(r, repLocalQPN) }

// LocalEECN returns the sender's 24-bit EE context number.
func (r REP) LocalEECN() uint32 { return get24(r, repLocalEECN) }

// StartingPSN returns the sender's 24-bit starting PSN.
func (r REP) StartingPSN() uint32 { return get24(r, repStartingPSN) }

// ResponderResources returns the responder resources.
func (r REP) ResponderResources() uint8 { return r[repResponderRes] }

// InitiatorDepth returns the initiator depth.
func (r REP) InitiatorDepth() uint8 { return r[repInitiatorDepth] }

// TargetACKDelay returns the 5-bit target ACK delay exponent.
func (r REP) TargetACKDelay() uint8 { return getBits(r, repByte26, 0, 5) }

// FailoverAccepted returns the 2-bit failover accepted field.
func (r REP) FailoverAccepted() uint8 { return getBits(r, repByte26, 5, 2) }

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REP) EndToEndFlowControl() bool { return getFlag(r, repByte26, 7) }

// RNRRetryCount returns the 3-bit RNR retry count.
func (r REP) RNRRetryCount() uint8 { return getBits(r, repByte27, 0, 3) }

// SRQ returns the SRQ bit.
func (r REP) SRQ() bool { return getFlag(r, repByte27, 3) }

// LocalCAGUID returns the sender's CA GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[repLocalCAGUID:]) }

// PrivateData returns the 196-byte private data field.
func (r REP) PrivateData() []byte { return r[repPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r REP) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r REP) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetLocalQKey sets the local Q_Key.
func (r REP) SetLocalQKey(v uint32) { binary.BigEndian.PutUint32(r[repLocalQKey:], v) }

// SetLocalQPN sets the local QP number.
func (r REP) SetLocalQPN(v uint32) { set24(r, repLocalQPN, v) }

// SetLocalEECN sets the local EE context number.
func (r REP) SetLocalEECN(v uint32) { set24(r, repLocalEECN, v) }

// SetStartingPSN sets the starting PSN.
func (r REP) SetStartingPSN(v uint32) { set24(r, repStartingPSN, v) }

// SetResponderResources sets the responder resources.
func (r REP) SetResponderResources(v uint8) { r[repResponderRes] = v }

// SetInitiatorDepth sets the initiator depth.
func (r REP) SetInitiatorDepth(v uint8) { r[repInitiatorDepth] = v }

// SetTargetACKDelay sets the target ACK delay exponent.
func (r REP) SetTargetACKDelay(v uint8) { setBits(r, repByte26, 0, 5, v) }

// SetFailoverAccepted sets the failover accepted field.
func (r REP) SetFailoverAccepted(v uint8) { setBits(r, repByte26, 5, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REP) SetEndToEndFlowControl(v bool) { setFlag(r, repByte26, 7, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REP) SetRNRRetryCount(v uint8) { setBits(r, repByte27, 0, 3, v) }

// SetSRQ sets the SRQ bit.
func (r REP) SetSRQ(v bool) { setFlag(r, repByte27, 3, v) }

// SetLocalCAGUID sets the local CA GUID.
func (r REP) SetLocalCAGUID(v uint64) { binary.BigEndian.PutUint64(r[repLocalCAGUID:], v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed REPPrivateDataLen bytes.
func (r REP) SetPrivateData(p []byte) error { return setBytes("REP private data", r.PrivateData(), p) }

// RTU is a view of a CM RTU (ready to use) message (IBA table 111).
type RTU []byte

// ParseRTU returns an RTU view of the MAD data b, checking its length.
func ParseRTU(b []byte) (RTU, error) {
	v, err := parseCM("RTU", b)
	return RTU(v), err
}

// LocalCommID returns the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the peer's communication ID.
func (r RTU) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// PrivateData returns the 224-byte private data field.
func (r RTU) PrivateData() []byte { return r[rtuPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r RTU) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r RTU) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed RTUPrivateDataLen bytes.
func (r RTU) SetPrivateData(p []byte) error { return setBytes("RTU private data", r.PrivateData(), p) }

// REJ is a view of a CM REJ message (IBA table 108).
type REJ []byte

// ParseREJ returns a REJ view of the MAD data b, checking its length.
func ParseREJ(b []byte) (REJ, error) {
	v, err := parseCM("REJ", b)
	return REJ(v), err
}

// LocalCommID returns the sender's communication ID.
func (r REJ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the peer's communication ID (0 when unknown).
func (r REJ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// MessageRejected returns which message is rejected (2 bits).
func (r REJ) MessageRejected() CMMessage { return CMMessage(getBits(r, rejByte8, 0, 2)) }

// RejectedInfoLength returns the 7-bit length of the additional rejection information.
func (r REJ) RejectedInfoLength() uint8 { return getBits(r, rejByte9, 0, 7) }

// Reason returns the rejection reason.
func (r REJ) Reason() REJReason { return REJReason(binary.BigEndian.Uint16(r[rejReason:])) }

// ARI returns the 72-byte additional rejection information field.
func (r REJ) ARI() []byte { return r[rejARI:rejPrivateData:rejPrivateData] }

// PrivateData returns the 148-byte private data field.
func (r REJ) PrivateData() []byte { return r[rejPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r REJ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r REJ) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetMessageRejected sets which message is rejected.
func (r REJ) SetMessageRejected(v CMMessage) { setBits(r, rejByte8, 0, 2, uint8(v)) }

// SetRejectedInfoLength sets the length of the additional rejection information.
func (r REJ) SetRejectedInfoLength(v uint8) { setBits(r, rejByte9, 0, 7, v) }

// SetReason sets the rejection reason.
func (r REJ) SetReason(v REJReason) { binary.BigEndian.PutUint16(r[rejReason:], uint16(v)) }

// SetARI copies p into the additional rejection information field, zeroes
// the rest of it and sets RejectedInfoLength to len(p), as Linux's
// cm_format_rej does; p may not exceed REJARILen bytes.
func (r REJ) SetARI(p []byte) error {
	if err := setBytes("REJ ARI", r.ARI(), p); err != nil {
		return err
	}
	r.SetRejectedInfoLength(uint8(len(p)))
	return nil
}

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed REJPrivateDataLen bytes.
func (r REJ) SetPrivateData(p []byte) error { return setBytes("REJ private data", r.PrivateData(), p) }

// MRA is a view of a CM MRA (message receipt acknowledgement) message (IBA table 107).
type MRA []byte

// ParseMRA returns an MRA view of the MAD data b, checking its length.
func ParseMRA(b []byte) (MRA, error) {
	v, err := parseCM("MRA", b)
	return MRA(v), err
}

// LocalCommID returns the sender's communication ID.
func (r MRA) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the peer's communication ID.
func (r MRA) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// MessageMRAed returns which message is acknowledged (2 bits).
func (r MRA) MessageMRAed() CMMessage { return CMMessage(getBits(r, mraByte8, 0, 2)) }

// ServiceTimeout returns the 5-bit service timeout exponent.
func (r MRA) ServiceTimeout() uint8 { return getBits(r, mraByte9, 0, 5) }

// PrivateData returns the 222-byte private data field.
func (r MRA) PrivateData() []byte { return r[mraPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r MRA) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r MRA) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetMessageMRAed sets which message is acknowledged.
func (r MRA) SetMessageMRAed(v CMMessage) { setBits(r, mraByte8, 0, 2, uint8(v)) }

// SetServiceTimeout sets the service timeout exponent.
func (r MRA) SetServiceTimeout(v uint8) { setBits(r, mraByte9, 0, 5, v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed MRAPrivateDataLen bytes.
func (r MRA) SetPrivateData(p []byte) error { return setBytes("MRA private data", r.PrivateData(), p) }

// DREQ is a view of a CM DREQ (disconnect request) message (IBA table 112).
type DREQ []byte

// ParseDREQ returns a DREQ view of the MAD data b, checking its length.
func ParseDREQ(b []byte) (DREQ, error) {
	v, err := parseCM("DREQ", b)
	return DREQ(v), err
}

// LocalCommID returns the sender's communication ID.
func (r DREQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the peer's communication ID.
func (r DREQ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// RemoteQPN returns the 24-bit remote QPN/EECN (the receiver's QP).
func (r DREQ) RemoteQPN() uint32 { return get24(r, dreqRemoteQPN) }

// PrivateData returns the 220-byte private data field.
func (r DREQ) PrivateData() []byte { return r[dreqPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r DREQ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r DREQ) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetRemoteQPN sets the remote QPN/EECN.
func (r DREQ) SetRemoteQPN(v uint32) { set24(r, dreqRemoteQPN, v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed DREQPrivateDataLen bytes.
func (r DREQ) SetPrivateData(p []byte) error {
	return setBytes("DREQ private data", r.PrivateData(), p)
}

// DREP is a view of a CM DREP (disconnect reply) message (IBA table 113).
type DREP []byte

// ParseDREP returns a DREP view of the MAD data b, checking its length.
func ParseDREP(b []byte) (DREP, error) {
	v, err := parseCM("DREP", b)
	return DREP(v), err
}

// LocalCommID returns the sender's communication ID.
func (r DREP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[cmLocalCommID:]) }

// RemoteCommID returns the peer's communication ID.
func (r DREP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[cmRemoteCommID:]) }

// PrivateData returns the 224-byte private data field.
func (r DREP) PrivateData() []byte { return r[drepPrivateData:CMDataLen:CMDataLen] }

// SetLocalCommID sets the local communication ID.
func (r DREP) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[cmLocalCommID:], v) }

// SetRemoteCommID sets the remote communication ID.
func (r DREP) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[cmRemoteCommID:], v) }

// SetPrivateData copies p into the private data field and zeroes the rest
// of it; p may not exceed DREPPrivateDataLen bytes.
func (r DREP) SetPrivateData(p []byte) error {
	return setBytes("DREP private data", r.PrivateData(), p)
}
