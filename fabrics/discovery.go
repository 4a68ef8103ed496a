package fabrics

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// LogPageDiscovery is the Get Log Page identifier of the discovery log page.
const LogPageDiscovery = 0x70

// DiscoveryNQN is the well-known NQN of a discovery subsystem (Linux
// NVME_DISC_SUBSYS_NAME).
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// Sizes in the discovery log page (Linux struct nvmf_disc_rsp_page_hdr and
// struct nvmf_disc_rsp_page_entry).
const (
	DiscoveryHeaderLen = 1024
	DiscoveryEntryLen  = 1024
	TRSVCIDLen         = 32
	TRADDRLen          = 256
	TSASLen            = 256
)

// TRType is a discovery log entry's transport type.
type TRType uint8

// Transport types (Linux enum nvmf_trtype).
const (
	TRTypeRDMA TRType = 1
	TRTypeFC   TRType = 2
	TRTypeTCP  TRType = 3
	TRTypeLoop TRType = 254
)

// String returns the name nvme-cli prints ("rdma", "fc", "tcp", "loop").
func (t TRType) String() string {
	switch t {
	case TRTypeRDMA:
		return "rdma"
	case TRTypeFC:
		return "fc"
	case TRTypeTCP:
		return "tcp"
	case TRTypeLoop:
		return "loop"
	}
	return fmt.Sprintf("trtype %d", uint8(t))
}

// AdrFam is a discovery log entry's address family.
type AdrFam uint8

// Address families (Linux enum nvmf_addr_family).
const (
	AdrFamIPv4 AdrFam = 1
	AdrFamIPv6 AdrFam = 2
	AdrFamIB   AdrFam = 3
	AdrFamFC   AdrFam = 4
	AdrFamLoop AdrFam = 254
)

// String returns the name nvme-cli prints ("ipv4", "ipv6", …).
func (a AdrFam) String() string {
	switch a {
	case AdrFamIPv4:
		return "ipv4"
	case AdrFamIPv6:
		return "ipv6"
	case AdrFamIB:
		return "infiniband"
	case AdrFamFC:
		return "fibre-channel"
	case AdrFamLoop:
		return "loop"
	}
	return fmt.Sprintf("adrfam %d", uint8(a))
}

// SubType is a discovery log entry's subsystem type.
type SubType uint8

// Subsystem types (Linux enum nvme_subsys_type).
const (
	SubTypeReferral         SubType = 1 // another discovery service
	SubTypeNVM              SubType = 2 // an NVM subsystem
	SubTypeCurrentDiscovery SubType = 3 // this discovery subsystem
)

// String returns the name nvme-cli prints.
func (s SubType) String() string {
	switch s {
	case SubTypeReferral:
		return "discovery subsystem referral"
	case SubTypeNVM:
		return "nvme subsystem"
	case SubTypeCurrentDiscovery:
		return "current discovery subsystem"
	}
	return fmt.Sprintf("subtype %d", uint8(s))
}

// Discovery log entry field values: TREQ (Linux enum nvmf_treq: bits 1:0
// secure channel, bit 2 SQ flow control disable supported), EFLAGS (enum
// nvmf_disc_eflags), the RDMA TSAS (enum nvmf_rdma_qptype, nvmf_rdma_prtype,
// nvmf_rdma_cms) and the TCP TSAS (enum nvmf_tcp_sectype).
const (
	TREQNotSpecified  = 0      // secure channel requirement not specified
	TREQRequired      = 1      // secure channel required
	TREQNotRequired   = 2      // secure channel not required
	TREQSecureMask    = 3      // the secure channel bits
	TREQDisableSQFlow = 1 << 2 // the controller supports disabling SQ flow control
	EFlagsDupRetInfo  = 1 << 0 // EFLAGS: duplicate returned information
	EFlagsEPCSD       = 1 << 1 // EFLAGS: explicit persistent connection support for discovery
	EFlagsNCC         = 1 << 2 // EFLAGS: no CDC connectivity
	RDMAQPTypeRC      = 1      // TSAS RDMA_QPTYPE: reliable connected
	RDMAQPTypeRD      = 2      // TSAS RDMA_QPTYPE: reliable datagram
	RDMAPRTypeNone    = 1      // TSAS RDMA_PRTYPE: no provider specified
	RDMAPRTypeIB      = 2      // TSAS RDMA_PRTYPE: InfiniBand
	RDMAPRTypeRoCE    = 3      // TSAS RDMA_PRTYPE: RoCE (v1)
	RDMAPRTypeRoCEv2  = 4      // TSAS RDMA_PRTYPE: RoCE v2
	RDMAPRTypeIWARP   = 5      // TSAS RDMA_PRTYPE: iWARP
	RDMACMSRDMACM     = 1      // TSAS RDMA_CMS: rdma_cm (sockets-style addressing)
	TCPSecTypeNone    = 0      // TSAS SECTYPE: no security
	TCPSecTypeTLS12   = 1      // TSAS SECTYPE: TLS 1.2
	TCPSecTypeTLS13   = 2      // TSAS SECTYPE: TLS 1.3
	DiscoveryRecFmt   = 0      // the record format of this log page layout
)

// Byte offsets in a discovery log page header and entry.
const (
	dlpGenCtr = 0
	dlpNumRec = 8
	dlpRecFmt = 16

	dleTRType  = 0
	dleAdrFam  = 1
	dleSubType = 2
	dleTREQ    = 3
	dlePortID  = 4
	dleCntlID  = 6
	dleASQSZ   = 8
	dleEFlags  = 10
	dleTRSVCID = 32
	dleSubNQN  = 256
	dleTRADDR  = 512
	dleTSAS    = 768

	tsasQPType = 0
	tsasPRType = 1
	tsasCMS    = 2
	tsasPKey   = 8
	tsasSecTyp = 0
)

// DiscoveryHeader is a view of the 1024-byte discovery log page header.
// Views returned by ParseDiscoveryHeader are exactly 1024 bytes.
type DiscoveryHeader []byte

// ParseDiscoveryHeader checks the length of b and returns a view of the header.
func ParseDiscoveryHeader(b []byte) (DiscoveryHeader, error) {
	if len(b) < DiscoveryHeaderLen {
		return nil, fmt.Errorf("fabrics: discovery log page of %d bytes: %w", len(b), ErrShort)
	}
	return DiscoveryHeader(b[:DiscoveryHeaderLen:DiscoveryHeaderLen]), nil
}

// GenCtr returns the generation counter.
func (h DiscoveryHeader) GenCtr() uint64 { return binary.LittleEndian.Uint64(h[dlpGenCtr:]) }

// NumRec returns the number of records in the whole log page.
func (h DiscoveryHeader) NumRec() uint64 { return binary.LittleEndian.Uint64(h[dlpNumRec:]) }

// RecFmt returns the record format (0).
func (h DiscoveryHeader) RecFmt() uint16 { return binary.LittleEndian.Uint16(h[dlpRecFmt:]) }

// SetGenCtr sets the generation counter.
func (h DiscoveryHeader) SetGenCtr(v uint64) { binary.LittleEndian.PutUint64(h[dlpGenCtr:], v) }

// SetNumRec sets the number of records.
func (h DiscoveryHeader) SetNumRec(v uint64) { binary.LittleEndian.PutUint64(h[dlpNumRec:], v) }

// SetRecFmt sets the record format.
func (h DiscoveryHeader) SetRecFmt(v uint16) { binary.LittleEndian.PutUint16(h[dlpRecFmt:], v) }

// DiscoveryEntry is a view of one 1024-byte discovery log page entry.
// Views from ParseDiscoveryEntry are exactly 1024 bytes.
type DiscoveryEntry []byte

// ParseDiscoveryEntry checks the length of b and returns a view of an entry.
func ParseDiscoveryEntry(b []byte) (DiscoveryEntry, error) {
	if len(b) < DiscoveryEntryLen {
		return nil, fmt.Errorf("fabrics: discovery log entry of %d bytes: %w", len(b), ErrShort)
	}
	return DiscoveryEntry(b[:DiscoveryEntryLen:DiscoveryEntryLen]), nil
}

// TRType returns the transport type.
func (e DiscoveryEntry) TRType() TRType { return TRType(e[dleTRType]) }

// AdrFam returns the address family.
func (e DiscoveryEntry) AdrFam() AdrFam { return AdrFam(e[dleAdrFam]) }

// SubType returns the subsystem type.
func (e DiscoveryEntry) SubType() SubType { return SubType(e[dleSubType]) }

// TREQ returns the transport requirements.
func (e DiscoveryEntry) TREQ() uint8 { return e[dleTREQ] }

// PortID returns the NVM subsystem port ID.
func (e DiscoveryEntry) PortID() uint16 { return binary.LittleEndian.Uint16(e[dlePortID:]) }

// CntlID returns the controller ID (0xffff: dynamic controller model).
func (e DiscoveryEntry) CntlID() uint16 { return binary.LittleEndian.Uint16(e[dleCntlID:]) }

// ASQSZ returns the admin submission queue size the controller supports.
func (e DiscoveryEntry) ASQSZ() uint16 { return binary.LittleEndian.Uint16(e[dleASQSZ:]) }

// EFlags returns the entry flags.
func (e DiscoveryEntry) EFlags() uint16 { return binary.LittleEndian.Uint16(e[dleEFlags:]) }

// TRSVCID returns the transport service ID (e.g. "4420"), trimmed of
// trailing spaces and NULs.
func (e DiscoveryEntry) TRSVCID() string { return TrimField(e[dleTRSVCID : dleTRSVCID+TRSVCIDLen]) }

// SubNQN returns the subsystem NQN (NUL-terminated).
func (e DiscoveryEntry) SubNQN() string { return CString(e[dleSubNQN : dleSubNQN+NQNFieldLen]) }

// TRADDR returns the transport address (e.g. "192.0.2.2"), trimmed of
// trailing spaces and NULs.
func (e DiscoveryEntry) TRADDR() string { return TrimField(e[dleTRADDR : dleTRADDR+TRADDRLen]) }

// TSAS returns the 256-byte transport specific address subtype.
func (e DiscoveryEntry) TSAS() []byte { return e[dleTSAS : dleTSAS+TSASLen : dleTSAS+TSASLen] }

// RDMAQPType returns TSAS RDMA_QPTYPE (RDMA entries).
func (e DiscoveryEntry) RDMAQPType() uint8 { return e[dleTSAS+tsasQPType] }

// RDMAPRType returns TSAS RDMA_PRTYPE (RDMA entries).
func (e DiscoveryEntry) RDMAPRType() uint8 { return e[dleTSAS+tsasPRType] }

// RDMACMS returns TSAS RDMA_CMS (RDMA entries).
func (e DiscoveryEntry) RDMACMS() uint8 { return e[dleTSAS+tsasCMS] }

// RDMAPKey returns TSAS RDMA_PKEY (RDMA entries with AF_IB addresses).
func (e DiscoveryEntry) RDMAPKey() uint16 {
	return binary.LittleEndian.Uint16(e[dleTSAS+tsasPKey:])
}

// TCPSecType returns TSAS SECTYPE (TCP entries).
func (e DiscoveryEntry) TCPSecType() uint8 { return e[dleTSAS+tsasSecTyp] }

// TrimField returns a fixed-size ASCII field as a string: up to the first
// NUL, with trailing spaces removed. TRSVCID and TRADDR come padded with
// NULs from Linux nvmet (seen in testdata/pcap: "4420" then 28 zero bytes)
// and with spaces from SPDK; nvme-cli strips both.
func TrimField(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(bytes.TrimRight(b, " "))
}

// PutField writes s into a fixed-size ASCII field padded with pad (0, as
// Linux nvmet does, or ' '); it fails when s is longer than the field.
func PutField(field []byte, s string, pad byte) error {
	if len(s) > len(field) {
		return fmt.Errorf("fabrics: %q is longer than %d bytes", s, len(field))
	}
	n := copy(field, s)
	for i := n; i < len(field); i++ {
		field[i] = pad
	}
	return nil
}

// DiscoveryRecord is a discovery log page entry as values.
type DiscoveryRecord struct {
	TRType  TRType
	AdrFam  AdrFam
	SubType SubType
	TREQ    uint8
	PortID  uint16
	CntlID  uint16
	ASQSZ   uint16
	EFlags  uint16
	TRSVCID string // at most 32 bytes
	SubNQN  string // at most 255 bytes
	TRADDR  string // at most 256 bytes
	// TSAS is the transport specific address subtype, kept as raw bytes;
	// RDMATSAS and TCPTSAS build it.
	TSAS [TSASLen]byte
}

// RDMATSAS returns the TSAS of an RDMA entry.
func RDMATSAS(qptype, prtype, cms uint8, pkey uint16) [TSASLen]byte {
	var t [TSASLen]byte
	t[tsasQPType], t[tsasPRType], t[tsasCMS] = qptype, prtype, cms
	binary.LittleEndian.PutUint16(t[tsasPKey:], pkey)
	return t
}

// TCPTSAS returns the TSAS of a TCP entry.
func TCPTSAS(sectype uint8) [TSASLen]byte {
	var t [TSASLen]byte
	t[tsasSecTyp] = sectype
	return t
}

// Record returns the entry's values.
func (e DiscoveryEntry) Record() DiscoveryRecord {
	return DiscoveryRecord{
		TRType: e.TRType(), AdrFam: e.AdrFam(), SubType: e.SubType(), TREQ: e.TREQ(),
		PortID: e.PortID(), CntlID: e.CntlID(), ASQSZ: e.ASQSZ(), EFlags: e.EFlags(),
		TRSVCID: e.TRSVCID(), SubNQN: e.SubNQN(), TRADDR: e.TRADDR(), TSAS: [TSASLen]byte(e.TSAS()),
	}
}

// Put writes r into the 1024-byte entry e, as Linux nvmet does: reserved
// bytes zeroed, strings padded with NULs.
func (r *DiscoveryRecord) Put(e DiscoveryEntry) error {
	if len(e) < DiscoveryEntryLen {
		return fmt.Errorf("fabrics: discovery log entry of %d bytes: %w", len(e), ErrShort)
	}
	clear(e[:DiscoveryEntryLen])
	e[dleTRType], e[dleAdrFam], e[dleSubType], e[dleTREQ] = byte(r.TRType), byte(r.AdrFam), byte(r.SubType), r.TREQ
	binary.LittleEndian.PutUint16(e[dlePortID:], r.PortID)
	binary.LittleEndian.PutUint16(e[dleCntlID:], r.CntlID)
	binary.LittleEndian.PutUint16(e[dleASQSZ:], r.ASQSZ)
	binary.LittleEndian.PutUint16(e[dleEFlags:], r.EFlags)
	if err := PutField(e[dleTRSVCID:dleTRSVCID+TRSVCIDLen], r.TRSVCID, 0); err != nil {
		return fmt.Errorf("fabrics: TRSVCID: %w", err)
	}
	if err := putCString(e[dleSubNQN:dleSubNQN+NQNFieldLen], r.SubNQN); err != nil {
		return fmt.Errorf("fabrics: SUBNQN: %w", err)
	}
	if err := PutField(e[dleTRADDR:dleTRADDR+TRADDRLen], r.TRADDR, 0); err != nil {
		return fmt.Errorf("fabrics: TRADDR: %w", err)
	}
	copy(e[dleTSAS:], r.TSAS[:])
	return nil
}

// DiscoveryLog is a discovery log page as values.
type DiscoveryLog struct {
	GenCtr uint64
	// NumRec is the header's record count. Parsing keeps it as sent (a
	// host that read only part of the page sees fewer Entries); Encode
	// writes len(Entries).
	NumRec  uint64
	RecFmt  uint16
	Entries []DiscoveryRecord
}

// ParseDiscoveryLog decodes a discovery log page, or the part of one a Get
// Log Page returned: the 1024-byte header and as many whole entries as b
// holds, up to NumRec.
func ParseDiscoveryLog(b []byte) (DiscoveryLog, error) {
	h, err := ParseDiscoveryHeader(b)
	if err != nil {
		return DiscoveryLog{}, err
	}
	l := DiscoveryLog{GenCtr: h.GenCtr(), NumRec: h.NumRec(), RecFmt: h.RecFmt()}
	n := uint64(len(b)-DiscoveryHeaderLen) / DiscoveryEntryLen
	n = min(n, l.NumRec)
	for i := range n {
		off := DiscoveryHeaderLen + int(i)*DiscoveryEntryLen
		l.Entries = append(l.Entries, DiscoveryEntry(b[off:off+DiscoveryEntryLen]).Record())
	}
	return l, nil
}

// Encode returns the log page: the header with NumRec = len(Entries) and
// the entries.
func (l *DiscoveryLog) Encode() ([]byte, error) {
	b := make([]byte, DiscoveryHeaderLen+len(l.Entries)*DiscoveryEntryLen)
	h := DiscoveryHeader(b)
	h.SetGenCtr(l.GenCtr)
	h.SetNumRec(uint64(len(l.Entries)))
	h.SetRecFmt(l.RecFmt)
	for i := range l.Entries {
		off := DiscoveryHeaderLen + i*DiscoveryEntryLen
		if err := l.Entries[i].Put(DiscoveryEntry(b[off : off+DiscoveryEntryLen])); err != nil {
			return nil, fmt.Errorf("fabrics: discovery entry %d: %w", i, err)
		}
	}
	return b, nil
}
