package capture

// The records of the decode oracles (*.decoded.jsonl beside each capture),
// as Go types for Record.Decode and Record.DecodeStrict. The schema and the
// meaning of every key are in testdata/pcap/ORACLE.md; each field here is
// named after its key (frame_first: FrameFirst, ieth_rkey: IETHRKey) and
// has the width of the wire field it holds, so that decoding fails on a
// value the wire could not carry and 64-bit values stay exact. Keys that
// only some records have ("(opt)" in ORACLE.md) are pointers or slices,
// nil when absent.

// Record kinds (Record.Kind).
const (
	KindRoCE      = "roce"
	KindCM        = "cm"
	KindCapsule   = "capsule"
	KindCQE       = "cqe"
	KindRDMAData  = "rdma_data"
	KindSendOther = "send_other"
	KindTCPPDU    = "tcp_pdu"
)

// RoCERecord is a "roce" record: one RoCEv2 frame.
type RoCERecord struct {
	Kind     string      `json:"kind"`      // "roce"
	Frame    int         `json:"frame"`     // frame number, from 1
	Src      string      `json:"src"`       // IP source address
	Dst      string      `json:"dst"`       // IP destination address
	UDPSport uint16      `json:"udp_sport"` // UDP source port
	IPID     *uint16     `json:"ip_id"`     // IPv4 Identification (IPv4 only)
	IPDF     *bool       `json:"ip_df"`     // IPv4 Don't Fragment (IPv4 only)
	BTH      OracleBTH   `json:"bth"`
	RETH     *OracleRETH `json:"reth"`
	AETH     *OracleAETH `json:"aeth"`
	DETH     *OracleDETH `json:"deth"`
	IETH     *OracleIETH `json:"ieth"`
	// ImmDt is the immediate data of the "with Immediate" opcodes.
	ImmDt        *uint32             `json:"immdt"`
	AtomicETH    *OracleAtomicETH    `json:"atomiceth"`
	AtomicAckETH *OracleAtomicAckETH `json:"atomicacketh"`
	// PayloadLen counts the bytes after the transport headers, without
	// pad bytes and ICRC.
	PayloadLen int `json:"payload_len"`
	// ICRC is the CRC-32 value as computed: the 4 trailing bytes read
	// least significant byte first; ICRCHex the bytes in wire order.
	ICRC    uint32 `json:"icrc"`
	ICRCHex string `json:"icrc_hex"`
	ICRCOK  bool   `json:"icrc_ok"` // the recomputed ICRC matches
	// Retransmission marks an RC request packet whose PSN repeats or goes
	// back (not reassembled again).
	Retransmission bool `json:"retransmission"`
	// UnknownOpcode marks an opcode of which only the BTH is decoded.
	UnknownOpcode bool `json:"unknown_opcode"`
}

// OracleBTH is the "bth" object of a roce record: the Base Transport Header.
type OracleBTH struct {
	Opcode uint8  `json:"opcode"` // transport class in bits 7:5, operation in 4:0
	Opname string `json:"opname"` // e.g. "RC SEND Only with Invalidate" (informational)
	SE     uint8  `json:"se"`     // Solicited Event
	M      uint8  `json:"m"`      // MigReq
	Pad    uint8  `json:"pad"`    // Pad Count
	TVer   uint8  `json:"tver"`   // transport header version
	PKey   uint16 `json:"pkey"`   // Partition Key
	FECN   uint8  `json:"fecn"`   // byte 4 bit 7
	BECN   uint8  `json:"becn"`   // byte 4 bit 6
	Resv6  uint8  `json:"resv6"`  // the other 6 bits of byte 4
	DQPN   uint32 `json:"dqpn"`   // destination QP (24 bits)
	AckReq uint8  `json:"ackreq"` // AckReq
	Resv7  uint8  `json:"resv7"`  // the 7 reserved bits after AckReq
	PSN    uint32 `json:"psn"`    // Packet Sequence Number (24 bits)
}

// OracleRETH is the RDMA Extended Transport Header of a roce record.
type OracleRETH struct {
	VA     uint64 `json:"va"`     // virtual address
	RKey   uint32 `json:"rkey"`   // remote key
	DMALen uint32 `json:"dmalen"` // DMA length in bytes
}

// OracleAETH is the ACK Extended Transport Header of a roce record.
type OracleAETH struct {
	Syndrome uint8  `json:"syndrome"` // 0x1f: ACK with credit count 31
	MSN      uint32 `json:"msn"`      // Message Sequence Number (24 bits)
}

// OracleDETH is the Datagram Extended Transport Header of a roce record.
type OracleDETH struct {
	QKey uint32 `json:"qkey"` // Q_Key
	SQPN uint32 `json:"sqpn"` // source QP
}

// OracleIETH is the Invalidate Extended Transport Header of a roce record.
type OracleIETH struct {
	RKey uint32 `json:"rkey"` // the remote key invalidated
}

// OracleAtomicETH is the Atomic Extended Transport Header of a roce record.
type OracleAtomicETH struct {
	VA   uint64 `json:"va"`
	RKey uint32 `json:"rkey"`
	Swap uint64 `json:"swap"`
	Cmp  uint64 `json:"cmp"`
}

// OracleAtomicAckETH is the ATOMIC Acknowledge Extended Transport Header of
// a roce record.
type OracleAtomicAckETH struct {
	Orig uint64 `json:"orig"` // the original remote data
}

// CMRecord is a "cm" record: one IB CM MAD. Msg says which message it is;
// the fields of the other messages are zero. The layout is IBTA vol. 1
// chapter 12 as in Linux include/rdma/ibta_vol1_c12.h. SIDR_REQ/SIDR_REP
// keys are not listed here (none in the captures).
type CMRecord struct {
	Kind  string    `json:"kind"` // "cm"
	Frame int       `json:"frame"`
	Src   string    `json:"src"`
	Dst   string    `json:"dst"`
	MAD   OracleMAD `json:"mad"`
	// Msg is "REQ", "REP", "RTU", "REJ", "MRA", "DREQ", "DREP",
	// "SIDR_REQ", "SIDR_REP", "LAP", "APR", "ClassPortInfo" or "attr 0xNNNN".
	Msg string `json:"msg"`
	// PrivateDataHex is the message's whole private data field.
	PrivateDataHex string `json:"private_data_hex"`
	// DataHex is the data of an attribute without a layout here.
	DataHex string `json:"data_hex"`

	// REQ, REP, RTU, REJ, MRA, DREQ, DREP.
	LocalCommID  uint32 `json:"local_comm_id"`
	RemoteCommID uint32 `json:"remote_comm_id"` // all but REQ

	// REQ (and, where REP has a field of the same name, REP).
	ServiceID               uint64 `json:"service_id"`    // rdma_cm: 0x0000000001 06 PPPP
	LocalCAGUID             uint64 `json:"local_ca_guid"` // REQ, REP
	LocalQKey               uint32 `json:"local_qkey"`    // REQ, REP
	LocalQPN                uint32 `json:"local_qpn"`     // REQ, REP
	ResponderResources      uint8  `json:"responder_resources"`
	LocalEECN               uint32 `json:"local_eecn"`
	InitiatorDepth          uint8  `json:"initiator_depth"`
	RemoteEECN              uint32 `json:"remote_eecn"`
	RemoteCMResponseTimeout uint8  `json:"remote_cm_response_timeout"` // 4.096 us x 2^value
	TransportServiceType    uint8  `json:"transport_service_type"`     // 0 = RC
	EndToEndFlowControl     uint8  `json:"end_to_end_flow_control"`
	StartingPSN             uint32 `json:"starting_psn"`
	LocalCMResponseTimeout  uint8  `json:"local_cm_response_timeout"`
	RetryCount              uint8  `json:"retry_count"`
	PKey                    uint16 `json:"pkey"`
	PathMTU                 uint8  `json:"path_mtu"` // IB MTU code: 1 = 256 ... 5 = 4096
	RDCExists               uint8  `json:"rdc_exists"`
	RNRRetryCount           uint8  `json:"rnr_retry_count"` // 7 = infinite
	MaxCMRetries            uint8  `json:"max_cm_retries"`
	SRQ                     uint8  `json:"srq"`
	ExtendedTransportType   uint8  `json:"extended_transport_type"`
	SAPSupported            uint8  `json:"sap_supported"`

	// REQ primary path.
	PrimaryLocalLID        uint16 `json:"primary_local_lid"`
	PrimaryRemoteLID       uint16 `json:"primary_remote_lid"`
	PrimaryLocalGID        string `json:"primary_local_gid"` // IPv6 text
	PrimaryRemoteGID       string `json:"primary_remote_gid"`
	PrimaryFlowLabel       uint32 `json:"primary_flow_label"`  // 20 bits
	PrimaryPacketRate      uint8  `json:"primary_packet_rate"` // 6 bits, IB rate code
	PrimaryTrafficClass    uint8  `json:"primary_traffic_class"`
	PrimaryHopLimit        uint8  `json:"primary_hop_limit"`
	PrimarySL              uint8  `json:"primary_sl"`
	PrimarySubnetLocal     uint8  `json:"primary_subnet_local"`
	PrimaryLocalAckTimeout uint8  `json:"primary_local_ack_timeout"`

	// REQ alternate path.
	AlternateLocalLID        uint16 `json:"alternate_local_lid"`
	AlternateRemoteLID       uint16 `json:"alternate_remote_lid"`
	AlternateLocalGID        string `json:"alternate_local_gid"`
	AlternateRemoteGID       string `json:"alternate_remote_gid"`
	AlternateFlowLabel       uint32 `json:"alternate_flow_label"`
	AlternatePacketRate      uint8  `json:"alternate_packet_rate"`
	AlternateTrafficClass    uint8  `json:"alternate_traffic_class"`
	AlternateHopLimit        uint8  `json:"alternate_hop_limit"`
	AlternateSL              uint8  `json:"alternate_sl"`
	AlternateSubnetLocal     uint8  `json:"alternate_subnet_local"`
	AlternateLocalAckTimeout uint8  `json:"alternate_local_ack_timeout"`

	// REP.
	TargetAckDelay   uint8 `json:"target_ack_delay"`
	FailoverAccepted uint8 `json:"failover_accepted"`

	// DREQ: Remote QPN/EECN.
	RemoteQPN uint32 `json:"remote_qpn"`

	// REJ.
	MessageRejected    uint8  `json:"message_rejected"` // 0 REQ, 1 REP, 2 other
	RejectedInfoLength uint8  `json:"rejected_info_length"`
	Reason             uint16 `json:"reason"` // 28 = consumer defined
	ARIHex             string `json:"ari_hex"`

	// MRA.
	MessageMRAed   uint8 `json:"message_mraed"`
	ServiceTimeout uint8 `json:"service_timeout"`

	// CMAHdr is the rdma_cm header at the start of a REQ's private data
	// when the service ID is in an rdma_cm IP port space.
	CMAHdr *OracleCMAHdr `json:"cma_hdr"`
	// NVMeRDMACMReq, NVMeRDMACMRep and NVMeRDMACMRej are the NVMe/RDMA
	// private data of a REQ, of the REP answering it and of a
	// consumer-defined REJ on an NVMe/RDMA connection.
	NVMeRDMACMReq *OracleNVMeRDMACMReq `json:"nvme_rdma_cm_req"`
	NVMeRDMACMRep *OracleNVMeRDMACMRep `json:"nvme_rdma_cm_rep"`
	NVMeRDMACMRej *OracleNVMeRDMACMRej `json:"nvme_rdma_cm_rej"`
}

// OracleMAD is the common MAD header of a cm record.
type OracleMAD struct {
	BaseVersion   uint8  `json:"base_version"`
	MgmtClass     uint8  `json:"mgmt_class"` // 7 = CM
	ClassVersion  uint8  `json:"class_version"`
	Method        uint8  `json:"method"` // 3 = Send
	Status        uint16 `json:"status"`
	ClassSpecific uint16 `json:"class_specific"`
	TID           uint64 `json:"tid"`
	AttrID        uint16 `json:"attr_id"` // 0x10 REQ ... 0x16 DREP
	AttrMod       uint32 `json:"attr_mod"`
}

// OracleCMAHdr is the rdma_cm header (Linux struct cma_hdr) of a REQ.
type OracleCMAHdr struct {
	CMAVersion uint8  `json:"cma_version"`
	IPVersion  uint8  `json:"ip_version"` // high nibble of byte 1
	Port       uint16 `json:"port"`       // the active side's port
	SrcIP      string `json:"src_ip"`
	DstIP      string `json:"dst_ip"`
}

// OracleNVMeRDMACMReq is the NVMe/RDMA RDMA_CM_REQUEST private data.
type OracleNVMeRDMACMReq struct {
	RecFmt  uint16 `json:"recfmt"`
	QID     uint16 `json:"qid"`
	HRQSize uint16 `json:"hrqsize"`
	HSQSize uint16 `json:"hsqsize"` // 0's based
	CntlID  uint16 `json:"cntlid"`
}

// OracleNVMeRDMACMRep is the NVMe/RDMA RDMA_CM_ACCEPT private data.
type OracleNVMeRDMACMRep struct {
	RecFmt  uint16 `json:"recfmt"`
	CRQSize uint16 `json:"crqsize"`
}

// OracleNVMeRDMACMRej is the NVMe/RDMA RDMA_CM_REJECT private data.
type OracleNVMeRDMACMRej struct {
	RecFmt     uint16 `json:"recfmt"`
	Sts        uint16 `json:"sts"`
	RejectedBy string `json:"rejected_by"` // "target" or "host"
}

// OracleSGL is the "sgl" object of an SQE: SGL1 (SQE bytes 39:24).
type OracleSGL struct {
	Addr    uint64  `json:"addr"`    // bytes 7:0
	Length  uint32  `json:"length"`  // keyed (type 4): bytes 10:8, else 11:8
	Key     *uint32 `json:"key"`     // keyed only: bytes 14:11
	Type    uint8   `json:"type"`    // byte 15 bits 7:4
	Subtype uint8   `json:"subtype"` // byte 15 bits 3:0
	RawHex  string  `json:"raw_hex"` // the 16 bytes
}

// OracleSQE is the "sqe" object of a capsule or CapsuleCmd record: the
// 64-byte submission queue entry. For Fabrics commands (opcode 0x7f) NSID,
// CDW2, CDW3, MPTR and CDW10-15 are the raw dwords at those positions and
// the command's own fields follow.
type OracleSQE struct {
	Opcode uint8     `json:"opcode"` // byte 0
	Fuse   uint8     `json:"fuse"`   // byte 1 bits 1:0
	PSDT   uint8     `json:"psdt"`   // byte 1 bits 7:6
	CID    uint16    `json:"cid"`    // bytes 3:2
	NSID   uint32    `json:"nsid"`
	CDW2   uint32    `json:"cdw2"`
	CDW3   uint32    `json:"cdw3"`
	MPTR   uint64    `json:"mptr"` // bytes 23:16
	SGL    OracleSGL `json:"sgl"`
	CDW10  uint32    `json:"cdw10"`
	CDW11  uint32    `json:"cdw11"`
	CDW12  uint32    `json:"cdw12"`
	CDW13  uint32    `json:"cdw13"`
	CDW14  uint32    `json:"cdw14"`
	CDW15  uint32    `json:"cdw15"`

	// Fabrics commands: FCType (byte 4), and by FCType Connect (RecFmt,
	// QID, SQSize 0's based, CAttr, KATO in ms), Property Set (Attrib,
	// Offset, Value), Property Get (Attrib, Offset), Authentication Send
	// and Receive (SPSP0, SPSP1, SECP, TL or AL), Disconnect (RecFmt).
	FCType *uint8  `json:"fctype"`
	RecFmt *uint16 `json:"recfmt"`
	QID    *uint16 `json:"qid"`
	SQSize *uint16 `json:"sqsize"`
	CAttr  *uint8  `json:"cattr"`
	KATO   *uint32 `json:"kato"`
	Attrib *uint8  `json:"attrib"` // bits 2:0: 0 = 4 bytes, 1 = 8 bytes
	Offset *uint32 `json:"offset"` // property offset
	Value  *uint64 `json:"value"`
	SPSP0  *uint8  `json:"spsp0"`
	SPSP1  *uint8  `json:"spsp1"`
	SECP   *uint8  `json:"secp"`
	TL     *uint32 `json:"tl"`
	AL     *uint32 `json:"al"`
}

// OracleConnectData is the "connect_data" object: the 1024-byte NVMe-oF
// Connect data.
type OracleConnectData struct {
	HostID  string `json:"hostid"`  // bytes 15:0, hex
	CntlID  uint16 `json:"cntlid"`  // bytes 17:16; 0xffff = dynamic controller
	SubNQN  string `json:"subnqn"`  // bytes 511:256
	HostNQN string `json:"hostnqn"` // bytes 767:512
}

// OracleCQE is the "cqe" object of a cqe or CapsuleResp record: the
// 16-byte completion queue entry.
type OracleCQE struct {
	DW0       uint32 `json:"dw0"`
	DW1       uint32 `json:"dw1"`
	SQHD      uint16 `json:"sqhd"`
	SQID      uint16 `json:"sqid"`
	CID       uint16 `json:"cid"`
	Phase     uint8  `json:"phase"`      // status bit 0
	StatusRaw uint16 `json:"status_raw"` // bytes 15:14 with the phase bit
	SCT       uint8  `json:"sct"`        // bits 11:9
	SC        uint8  `json:"sc"`         // bits 8:1
	CRD       uint8  `json:"crd"`        // bits 13:12
	More      uint8  `json:"more"`       // bit 14
	DNR       uint8  `json:"dnr"`        // bit 15
}

// OracleRDMAMessage holds the keys every NVMe/RDMA record (capsule, cqe,
// rdma_data, send_other) has: the frames of its packets and how they went.
type OracleRDMAMessage struct {
	Frames []int   `json:"frames"` // SEND First, Middle..., Last (one for an Only)
	Dir    string  `json:"dir"`    // "host->target" or "target->host"
	Src    string  `json:"src"`
	Dst    string  `json:"dst"`
	DQPN   uint32  `json:"dqpn"` // destination QP of the packets
	QID    *uint16 `json:"qid"`  // NVMe queue of the QP, nil when unknown
}

// OracleCommandLink ties a completion, data transfer or R2T to the command
// it belongs to (same connection, same CID or rkey).
type OracleCommandLink struct {
	ForCID    *uint16 `json:"for_cid"`
	ForOpcode *uint8  `json:"for_opcode"`
	ForFCType *uint8  `json:"for_fctype"` // Fabrics commands only
	// ForFrames are the frames of the command's capsule (RDMA), or the
	// first and last frame of its CapsuleCmd PDU (TCP; one when equal).
	ForFrames []int `json:"for_frames"`
}

// CapsuleRecord is a "capsule" record: an NVMe-oF command capsule in RC
// SEND(s).
type CapsuleRecord struct {
	Kind string `json:"kind"` // "capsule"
	OracleRDMAMessage
	SQE          OracleSQE `json:"sqe"`
	IncapsuleLen int       `json:"incapsule_len"` // bytes of data after the SQE
	// IncapsuleSHA256 is the hex SHA-256 of the in-capsule data, "" without.
	IncapsuleSHA256 string `json:"incapsule_sha256"`
	// ConnectData is the Connect data carried in the capsule.
	ConnectData *OracleConnectData `json:"connect_data"`
	Invalidate  bool               `json:"invalidate"` // SEND with Invalidate
	IETHRKey    *uint32            `json:"ieth_rkey"`  // when Invalidate
	ImmDt       *uint32            `json:"immdt"`      // SEND with Immediate
}

// CQERecord is a "cqe" record: an NVMe-oF completion in an RC SEND.
type CQERecord struct {
	Kind string `json:"kind"` // "cqe"
	OracleRDMAMessage
	CQE        OracleCQE `json:"cqe"`
	Invalidate bool      `json:"invalidate"`
	// IETHRKey is the rkey of the command's keyed SGL, when Invalidate.
	IETHRKey *uint32 `json:"ieth_rkey"`
	ImmDt    *uint32 `json:"immdt"`
	OracleCommandLink
}

// RDMADataRecord is an "rdma_data" record: one RDMA WRITE or RDMA READ
// response message, reassembled.
type RDMADataRecord struct {
	Kind string `json:"kind"` // "rdma_data"
	OracleRDMAMessage
	Op string `json:"op"` // "WRITE" (target -> host) or "READ_RESPONSE"
	// VA, RKey and DMALen are from the RETH of the WRITE First/Only or of
	// the READ Request.
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dmalen"`
	Len    int    `json:"len"`    // bytes reassembled
	SHA256 string `json:"sha256"` // of those bytes, hex
	// ReqFrame is the frame of the RDMA READ Request (READ_RESPONSE).
	ReqFrame *int    `json:"req_frame"`
	ImmDt    *uint32 `json:"immdt"`
	OracleCommandLink
	// Offset is VA minus the command's SGL address.
	Offset *uint64 `json:"offset"`
	// ConnectData is set when the command is a Connect and the data
	// starts at its SGL address.
	ConnectData *OracleConnectData `json:"connect_data"`
}

// SendOtherRecord is a "send_other" record: a SEND message that is neither
// a capsule nor a 16-byte CQE.
type SendOtherRecord struct {
	Kind string `json:"kind"` // "send_other"
	OracleRDMAMessage
	Len        int    `json:"len"`
	SHA256     string `json:"sha256"`
	Invalidate bool   `json:"invalidate"`
}

// TCPPDURecord is a "tcp_pdu" record: one NVMe/TCP PDU. Of ICReq, ICResp,
// Term, SQE (with IncapsuleLen), CQE, Data and R2T only the one of its
// type is set.
type TCPPDURecord struct {
	Kind string `json:"kind"` // "tcp_pdu"
	// FrameFirst and FrameLast carry the PDU's first and last byte.
	FrameFirst int             `json:"frame_first"`
	FrameLast  int             `json:"frame_last"`
	Dir        string          `json:"dir"` // "host->target" or "target->host"
	Src        string          `json:"src"`
	Sport      uint16          `json:"sport"`
	Dst        string          `json:"dst"`
	Dport      uint16          `json:"dport"`
	Hdr        OracleTCPHeader `json:"hdr"`
	// TypeName is "ICReq", "ICResp", "H2CTermReq", "C2HTermReq",
	// "CapsuleCmd", "CapsuleResp", "H2CData", "C2HData" or "R2T".
	TypeName string  `json:"type_name"`
	QID      *uint16 `json:"qid"` // queue of the connection, nil before its Connect
	// Digests and their CRC-32C check, when the flags say they are there.
	HDgst   *uint32 `json:"hdgst"`
	HDgstOK *bool   `json:"hdgst_ok"`
	DDgst   *uint32 `json:"ddgst"`
	DDgstOK *bool   `json:"ddgst_ok"`

	ICReq  *OracleICReq   `json:"icreq"`
	ICResp *OracleICResp  `json:"icresp"`
	Term   *OracleTermReq `json:"term"`
	// CapsuleCmd: as in CapsuleRecord.
	SQE             *OracleSQE         `json:"sqe"`
	IncapsuleLen    *int               `json:"incapsule_len"`
	IncapsuleSHA256 string             `json:"incapsule_sha256"`
	ConnectData     *OracleConnectData `json:"connect_data"`
	CQE             *OracleCQE         `json:"cqe"`  // CapsuleResp
	Data            *OracleTCPData     `json:"data"` // H2CData, C2HData
	R2T             *OracleR2T         `json:"r2t"`
	OracleCommandLink
}

// PDUFrames returns the frames of the PDU as for_frames lists a CapsuleCmd:
// the first and the last, or one frame.
func (r *TCPPDURecord) PDUFrames() []int {
	if r.FrameFirst == r.FrameLast {
		return []int{r.FrameFirst}
	}
	return []int{r.FrameFirst, r.FrameLast}
}

// OracleTCPHeader is the "hdr" object of a tcp_pdu record: the common header.
type OracleTCPHeader struct {
	Type  uint8  `json:"type"`
	Flags uint8  `json:"flags"`
	HLen  uint8  `json:"hlen"` // header length
	PDO   uint8  `json:"pdo"`  // data offset, 0 = no data
	PLen  uint32 `json:"plen"` // PDU length
}

// OracleICReq is the "icreq" object of a tcp_pdu record.
type OracleICReq struct {
	PFV         uint16 `json:"pfv"`
	HPDA        uint8  `json:"hpda"`
	DGST        uint8  `json:"dgst"` // bit 0 header digest, bit 1 data digest
	HDgstEnable uint8  `json:"hdgst_enable"`
	DDgstEnable uint8  `json:"ddgst_enable"`
	MaxR2T      uint32 `json:"maxr2t"` // 0's based
}

// OracleICResp is the "icresp" object of a tcp_pdu record.
type OracleICResp struct {
	PFV         uint16 `json:"pfv"`
	CPDA        uint8  `json:"cpda"`
	DGST        uint8  `json:"dgst"`
	HDgstEnable uint8  `json:"hdgst_enable"`
	DDgstEnable uint8  `json:"ddgst_enable"`
	MaxH2CData  uint32 `json:"maxh2cdata"` // bytes
}

// OracleTermReq is the "term" object of an H2CTermReq or C2HTermReq record.
type OracleTermReq struct {
	FES    uint16 `json:"fes"`
	FEI    uint32 `json:"fei"`
	HdrHex string `json:"hdr_hex"`
}

// OracleTCPData is the "data" object of an H2CData or C2HData record.
type OracleTCPData struct {
	CCCID   uint16 `json:"cccid"`
	TTag    uint16 `json:"ttag"`
	DataO   uint32 `json:"datao"` // offset
	DataL   uint32 `json:"datal"` // length
	Len     int    `json:"len"`   // bytes present
	SHA256  string `json:"sha256"`
	LastPDU uint8  `json:"last_pdu"` // flags bit 2
	Success *uint8 `json:"success"`  // C2HData flags bit 3
}

// OracleR2T is the "r2t" object of an R2T record.
type OracleR2T struct {
	CCCID uint16 `json:"cccid"`
	TTag  uint16 `json:"ttag"`
	R2TO  uint32 `json:"r2to"` // offset
	R2TL  uint32 `json:"r2tl"` // length
}
