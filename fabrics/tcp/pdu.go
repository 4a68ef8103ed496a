// Package tcp holds the NVMe/TCP transport's PDUs as typed views (NVM
// Express TCP Transport Specification 1.0; Linux include/linux/nvme-tcp.h):
// the common header, ICReq/ICResp, H2C/C2HTermReq, CapsuleCmd/CapsuleResp,
// H2CData/C2HData and R2T, with a length-checked parse.
package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// PDUType is the PDU-Type byte of the common header.
type PDUType uint8

// PDU types (Linux enum nvme_tcp_pdu_type).
const (
	TypeICReq       PDUType = 0x00
	TypeICResp      PDUType = 0x01
	TypeH2CTermReq  PDUType = 0x02
	TypeC2HTermReq  PDUType = 0x03
	TypeCapsuleCmd  PDUType = 0x04
	TypeCapsuleResp PDUType = 0x05
	TypeH2CData     PDUType = 0x06
	TypeC2HData     PDUType = 0x07
	TypeR2T         PDUType = 0x09
)

var typeNames = map[PDUType]string{
	TypeICReq:       "ICReq",
	TypeICResp:      "ICResp",
	TypeH2CTermReq:  "H2CTermReq",
	TypeC2HTermReq:  "C2HTermReq",
	TypeCapsuleCmd:  "CapsuleCmd",
	TypeCapsuleResp: "CapsuleResp",
	TypeH2CData:     "H2CData",
	TypeC2HData:     "C2HData",
	TypeR2T:         "R2T",
}

// String returns the PDU type's name ("CapsuleCmd", …).
func (t PDUType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("PDU type %#02x", uint8(t))
}

// HeaderLen returns the fixed header length (HLEN) of a PDU type, or 0 for
// an unknown type.
func (t PDUType) HeaderLen() int {
	switch t {
	case TypeICReq, TypeICResp:
		return ICReqLen
	case TypeCapsuleCmd:
		return CapsuleCmdHLen
	case TypeH2CTermReq, TypeC2HTermReq, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T:
		return 24
	}
	return 0
}

// Sizes.
const (
	CommonHeaderLen = 8   // the common header every PDU starts with
	ICReqLen        = 128 // ICReq and ICResp (PLEN = HLEN = 128)
	CapsuleCmdHLen  = 72  // common header + 64-byte SQE
	CapsuleRespHLen = 24  // common header + 16-byte CQE
	DataHLen        = 24  // H2CData, C2HData, R2T
	TermReqHLen     = 24  // H2CTermReq, C2HTermReq
	DigestLen       = 4   // CRC-32C header or data digest
	// MaxTermReqLen is the largest termination request PDU: the header and
	// up to 128 bytes of the PDU header in error.
	MaxTermReqLen = 152
)

// Common header flags (Linux enum nvme_tcp_pdu_flags).
const (
	FlagHDGST       = 1 << 0 // a header digest follows the header
	FlagDDGST       = 1 << 1 // a data digest follows the data
	FlagDataLast    = 1 << 2 // H2CData/C2HData: last PDU of the transfer
	FlagDataSuccess = 1 << 3 // C2HData: no CapsuleResp follows; the command succeeded
)

// ErrShort is returned when a buffer is too short for the PDU it must hold.
var ErrShort = errors.New("nvme-tcp: PDU too short")

// Header is a view of the 8-byte common header. Views from ParseHeader or
// PDU.Header are 8 bytes.
type Header []byte

// ParseHeader checks that b holds a common header and returns a view of it.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < CommonHeaderLen {
		return nil, fmt.Errorf("nvme-tcp: %d bytes for a common header: %w", len(b), ErrShort)
	}
	return Header(b[:CommonHeaderLen:CommonHeaderLen]), nil
}

// Type returns the PDU type.
func (h Header) Type() PDUType { return PDUType(h[0]) }

// Flags returns the PDU-specific flags.
func (h Header) Flags() uint8 { return h[1] }

// HLen returns the header length (without the header digest).
func (h Header) HLen() uint8 { return h[2] }

// PDO returns the PDU data offset from the start of the PDU (0: no data).
func (h Header) PDO() uint8 { return h[3] }

// PLen returns the PDU length in bytes, header, digests and data included.
func (h Header) PLen() uint32 { return binary.LittleEndian.Uint32(h[4:]) }

// SetType sets the PDU type.
func (h Header) SetType(t PDUType) { h[0] = byte(t) }

// SetFlags sets the flags.
func (h Header) SetFlags(f uint8) { h[1] = f }

// SetHLen sets the header length.
func (h Header) SetHLen(n uint8) { h[2] = n }

// SetPDO sets the PDU data offset.
func (h Header) SetPDO(n uint8) { h[3] = n }

// SetPLen sets the PDU length.
func (h Header) SetPLen(n uint32) { binary.LittleEndian.PutUint32(h[4:], n) }

// PDU is a view of one whole PDU (PLEN bytes). Views from Parse are
// checked: the header length is the type's, PDO and PLEN are consistent.
type PDU []byte

// Parse checks the PDU at the start of b and returns a view of its PLEN
// bytes. It fails for a short buffer, an unknown type, an HLEN that is not
// the type's, a PLEN smaller than the header (and its digest), or a PDO
// that points into the header or past PLEN. It does not verify digests.
func Parse(b []byte) (PDU, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	t := h.Type()
	hlen := t.HeaderLen()
	if hlen == 0 {
		return nil, fmt.Errorf("nvme-tcp: unknown PDU type %#02x", uint8(t))
	}
	if int(h.HLen()) != hlen {
		return nil, fmt.Errorf("nvme-tcp: %s with HLEN %d, want %d", t, h.HLen(), hlen)
	}
	plen := h.PLen()
	hend := hlen
	if h.Flags()&FlagHDGST != 0 && t != TypeICReq && t != TypeICResp {
		hend += DigestLen
	}
	if plen < uint32(hend) {
		return nil, fmt.Errorf("nvme-tcp: %s with PLEN %d shorter than its header (%d)", t, plen, hend)
	}
	if uint64(len(b)) < uint64(plen) {
		return nil, fmt.Errorf("nvme-tcp: %s of PLEN %d in %d bytes: %w", t, plen, len(b), ErrShort)
	}
	if pdo := uint32(h.PDO()); pdo != 0 {
		if pdo < uint32(hend) || pdo > plen {
			return nil, fmt.Errorf("nvme-tcp: %s with PDO %d outside %d..%d", t, pdo, hend, plen)
		}
	}
	if (t == TypeICReq || t == TypeICResp) && plen != ICReqLen {
		return nil, fmt.Errorf("nvme-tcp: %s with PLEN %d, want %d", t, plen, ICReqLen)
	}
	return PDU(b[:plen:plen]), nil
}

// Length returns PLEN of the PDU whose common header starts b, for a
// stream reader that must know how many bytes to gather; ok is false when
// b holds less than a common header.
func Length(b []byte) (plen uint32, ok bool) {
	if len(b) < CommonHeaderLen {
		return 0, false
	}
	return Header(b).PLen(), true
}

// Header returns the common header.
func (p PDU) Header() Header { return Header(p[:CommonHeaderLen:CommonHeaderLen]) }

// Type returns the PDU type.
func (p PDU) Type() PDUType { return PDUType(p[0]) }

// HeaderDigest returns the header digest and true when FlagHDGST is set.
func (p PDU) HeaderDigest() (uint32, bool) {
	h := p.Header()
	if h.Flags()&FlagHDGST == 0 || h.Type() == TypeICReq || h.Type() == TypeICResp {
		return 0, false
	}
	return binary.LittleEndian.Uint32(p[h.HLen():]), true
}

// Data returns the PDU data: from PDO to PLEN, less the data digest when
// FlagDDGST is set; nil when PDO is 0.
func (p PDU) Data() []byte {
	h := p.Header()
	pdo := int(h.PDO())
	if pdo == 0 {
		return nil
	}
	end := len(p)
	if h.Flags()&FlagDDGST != 0 && end-pdo >= DigestLen {
		end -= DigestLen
	}
	return p[pdo:end:end]
}

// DataDigest returns the data digest and true when FlagDDGST is set and the
// PDU has data.
func (p PDU) DataDigest() (uint32, bool) {
	h := p.Header()
	pdo := int(h.PDO())
	if h.Flags()&FlagDDGST == 0 || pdo == 0 || len(p)-pdo < DigestLen {
		return 0, false
	}
	return binary.LittleEndian.Uint32(p[len(p)-DigestLen:]), true
}

// ICReq returns the PDU viewed as an ICReq.
func (p PDU) ICReq() ICReq { return ICReq(p) }

// ICResp returns the PDU viewed as an ICResp.
func (p PDU) ICResp() ICResp { return ICResp(p) }

// TermReq returns the PDU viewed as an H2CTermReq or C2HTermReq.
func (p PDU) TermReq() TermReq { return TermReq(p) }

// CapsuleCmd returns the PDU viewed as a CapsuleCmd.
func (p PDU) CapsuleCmd() CapsuleCmd { return CapsuleCmd(p) }

// CapsuleResp returns the PDU viewed as a CapsuleResp.
func (p PDU) CapsuleResp() CapsuleResp { return CapsuleResp(p) }

// DataPDU returns the PDU viewed as an H2CData or C2HData.
func (p PDU) DataPDU() DataPDU { return DataPDU(p) }

// R2T returns the PDU viewed as an R2T.
func (p PDU) R2T() R2T { return R2T(p) }

// Digest bits of ICReq/ICResp's DGST byte.
const (
	DGSTHeader = 1 << 0 // header digest enable
	DGSTData   = 1 << 1 // data digest enable
)

// ICReq is a view of the 128-byte Initialize Connection Request.
type ICReq []byte

// PFV returns the PDU format version (0).
func (r ICReq) PFV() uint16 { return binary.LittleEndian.Uint16(r[8:]) }

// HPDA returns the host PDU data alignment: controller-to-host data starts
// at a multiple of (HPDA+1)*4 bytes.
func (r ICReq) HPDA() uint8 { return r[10] }

// DGST returns the digest enables (DGSTHeader, DGSTData).
func (r ICReq) DGST() uint8 { return r[11] }

// MaxR2T returns the maximum outstanding R2Ts per command, 0's based.
func (r ICReq) MaxR2T() uint32 { return binary.LittleEndian.Uint32(r[12:]) }

// SetPFV sets the PDU format version.
func (r ICReq) SetPFV(v uint16) { binary.LittleEndian.PutUint16(r[8:], v) }

// SetHPDA sets the host PDU data alignment.
func (r ICReq) SetHPDA(v uint8) { r[10] = v }

// SetDGST sets the digest enables.
func (r ICReq) SetDGST(v uint8) { r[11] = v }

// SetMaxR2T sets MAXR2T (0's based).
func (r ICReq) SetMaxR2T(v uint32) { binary.LittleEndian.PutUint32(r[12:], v) }

// ICResp is a view of the 128-byte Initialize Connection Response.
type ICResp []byte

// PFV returns the PDU format version (0).
func (r ICResp) PFV() uint16 { return binary.LittleEndian.Uint16(r[8:]) }

// CPDA returns the controller PDU data alignment: host-to-controller data
// starts at a multiple of (CPDA+1)*4 bytes.
func (r ICResp) CPDA() uint8 { return r[10] }

// DGST returns the digest enables the controller accepted.
func (r ICResp) DGST() uint8 { return r[11] }

// MaxH2CData returns the most data bytes the host may put in one H2CData PDU.
func (r ICResp) MaxH2CData() uint32 { return binary.LittleEndian.Uint32(r[12:]) }

// SetPFV sets the PDU format version.
func (r ICResp) SetPFV(v uint16) { binary.LittleEndian.PutUint16(r[8:], v) }

// SetCPDA sets the controller PDU data alignment.
func (r ICResp) SetCPDA(v uint8) { r[10] = v }

// SetDGST sets the digest enables.
func (r ICResp) SetDGST(v uint8) { r[11] = v }

// SetMaxH2CData sets MAXH2CDATA.
func (r ICResp) SetMaxH2CData(v uint32) { binary.LittleEndian.PutUint32(r[12:], v) }

// Fatal error status values of a termination request (Linux enum
// nvme_tcp_fatal_error_status).
const (
	FESInvalidHeaderField   = 0x01
	FESPDUSequenceError     = 0x02
	FESHeaderDigestError    = 0x03
	FESDataOutOfRange       = 0x04
	FESR2TLimitExceeded     = 0x05 // H2CTermReq: R2T limit exceeded
	FESDataLimitExceeded    = 0x05 // C2HTermReq: data transfer limit exceeded
	FESUnsupportedParameter = 0x06
)

// TermReq is a view of an H2CTermReq or C2HTermReq.
type TermReq []byte

// FES returns the fatal error status.
func (r TermReq) FES() uint16 { return binary.LittleEndian.Uint16(r[8:]) }

// FEI returns the fatal error information (e.g. the offset of the bad header field).
func (r TermReq) FEI() uint32 { return binary.LittleEndian.Uint32(r[10:]) }

// SetFES sets the fatal error status.
func (r TermReq) SetFES(v uint16) { binary.LittleEndian.PutUint16(r[8:], v) }

// SetFEI sets the fatal error information.
func (r TermReq) SetFEI(v uint32) { binary.LittleEndian.PutUint32(r[10:], v) }

// CapsuleCmd is a view of a command capsule PDU.
type CapsuleCmd []byte

// SQE returns the 64-byte submission queue entry (bytes 8..71).
func (c CapsuleCmd) SQE() []byte { return c[8:72:72] }

// CapsuleResp is a view of a response capsule PDU.
type CapsuleResp []byte

// CQE returns the 16-byte completion queue entry (bytes 8..23).
func (c CapsuleResp) CQE() []byte { return c[8:24:24] }

// DataPDU is a view of an H2CData or C2HData PDU.
type DataPDU []byte

// CCCID returns the command capsule CID of the command the data belongs to.
func (d DataPDU) CCCID() uint16 { return binary.LittleEndian.Uint16(d[8:]) }

// TTag returns the transfer tag (H2CData: from the R2T; reserved in C2HData).
func (d DataPDU) TTag() uint16 { return binary.LittleEndian.Uint16(d[10:]) }

// DataO returns the offset of this PDU's data in the command's data.
func (d DataPDU) DataO() uint32 { return binary.LittleEndian.Uint32(d[12:]) }

// DataL returns the number of data bytes in this PDU.
func (d DataPDU) DataL() uint32 { return binary.LittleEndian.Uint32(d[16:]) }

// SetCCCID sets CCCID.
func (d DataPDU) SetCCCID(v uint16) { binary.LittleEndian.PutUint16(d[8:], v) }

// SetTTag sets the transfer tag.
func (d DataPDU) SetTTag(v uint16) { binary.LittleEndian.PutUint16(d[10:], v) }

// SetDataO sets the data offset.
func (d DataPDU) SetDataO(v uint32) { binary.LittleEndian.PutUint32(d[12:], v) }

// SetDataL sets the data length.
func (d DataPDU) SetDataL(v uint32) { binary.LittleEndian.PutUint32(d[16:], v) }

// R2T is a view of a Ready to Transfer PDU.
type R2T []byte

// CCCID returns the command capsule CID the controller asks data for.
func (r R2T) CCCID() uint16 { return binary.LittleEndian.Uint16(r[8:]) }

// TTag returns the transfer tag the H2CData PDUs must carry.
func (r R2T) TTag() uint16 { return binary.LittleEndian.Uint16(r[10:]) }

// R2TO returns the offset of the requested data.
func (r R2T) R2TO() uint32 { return binary.LittleEndian.Uint32(r[12:]) }

// R2TL returns the length of the requested data.
func (r R2T) R2TL() uint32 { return binary.LittleEndian.Uint32(r[16:]) }

// SetCCCID sets CCCID.
func (r R2T) SetCCCID(v uint16) { binary.LittleEndian.PutUint16(r[8:], v) }

// SetTTag sets the transfer tag.
func (r R2T) SetTTag(v uint16) { binary.LittleEndian.PutUint16(r[10:], v) }

// SetR2TO sets the offset.
func (r R2T) SetR2TO(v uint32) { binary.LittleEndian.PutUint32(r[12:], v) }

// SetR2TL sets the length.
func (r R2T) SetR2TL(v uint32) { binary.LittleEndian.PutUint32(r[16:], v) }

// New returns a zeroed PDU of type t with its common header filled in: HLEN
// of the type, PDO = HLEN when dataLen > 0 (no digests, no padding), PLEN =
// HLEN + dataLen. The data goes at PDU.Data(). An unknown type gets an
// 8-byte header.
func New(t PDUType, dataLen int) PDU {
	hlen := max(t.HeaderLen(), CommonHeaderLen)
	p := make(PDU, hlen+dataLen)
	h := p.Header()
	h.SetType(t)
	h.SetHLen(uint8(hlen))
	if dataLen > 0 {
		h.SetPDO(uint8(hlen))
	}
	h.SetPLen(uint32(hlen + dataLen))
	return p
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Digest returns the CRC-32C of b as NVMe/TCP header and data digests
// use it (stored little-endian after the header or the data).
func Digest(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// DigestUpdate returns the CRC-32C of data whose first part had digest
// crc (0 for none) and whose next part is b: the digest of data sent in
// pieces.
func DigestUpdate(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// ErrDigest is wrapped by the errors of a digest that does not match.
var ErrDigest = errors.New("nvme-tcp: digest mismatch")

// VerifyHeaderDigest checks the header digest; a PDU without one passes.
func (p PDU) VerifyHeaderDigest() error {
	got, ok := p.HeaderDigest()
	if !ok {
		return nil
	}
	if want := Digest(p[:p.Header().HLen()]); got != want {
		return fmt.Errorf("%w: %s header digest %#08x, computed %#08x", ErrDigest, p.Type(), got, want)
	}
	return nil
}

// VerifyDataDigest checks the data digest; a PDU without one passes.
func (p PDU) VerifyDataDigest() error {
	got, ok := p.DataDigest()
	if !ok {
		return nil
	}
	if want := Digest(p.Data()); got != want {
		return fmt.Errorf("%w: %s data digest %#08x, computed %#08x", ErrDigest, p.Type(), got, want)
	}
	return nil
}
