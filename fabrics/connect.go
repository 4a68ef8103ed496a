package fabrics

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// ConnectDataLen is the size of the Connect command's data.
const ConnectDataLen = 1024

// NQNFieldLen is the size of an NQN field in Connect data and discovery log
// entries (Linux NVMF_NQN_FIELD_LEN).
const NQNFieldLen = 256

// Controller ID values with special meaning in Connect data.
const (
	CntlIDDynamic   = 0xffff // dynamic controller model: the target picks one
	CntlIDStaticAny = 0xfffe // static controller model: any controller
)

// Byte offsets in Connect data (Linux struct nvmf_connect_data).
const (
	ConnectDataOffHostID  = 0
	ConnectDataOffCntlID  = 16
	ConnectDataOffSubNQN  = 256
	ConnectDataOffHostNQN = 512
)

// ConnectData is a view of the 1024-byte data of a Connect command.
// Views returned by ParseConnectData or NewConnectData are exactly 1024
// bytes; the accessors assume that.
type ConnectData []byte

// ParseConnectData checks the length of b and returns a view of its first
// 1024 bytes.
func ParseConnectData(b []byte) (ConnectData, error) {
	if len(b) < ConnectDataLen {
		return nil, fmt.Errorf("fabrics: Connect data of %d bytes: %w", len(b), ErrShort)
	}
	return ConnectData(b[:ConnectDataLen:ConnectDataLen]), nil
}

// NewConnectData returns zeroed Connect data.
func NewConnectData() ConnectData { return make(ConnectData, ConnectDataLen) }

// HostID returns the 128-bit host identifier, in wire order.
func (d ConnectData) HostID() [16]byte { return [16]byte(d[ConnectDataOffHostID:]) }

// CntlID returns the requested controller ID (0xffff dynamic, 0xfffe any
// static controller; for an I/O queue the controller the admin queue got).
func (d ConnectData) CntlID() uint16 {
	return binary.LittleEndian.Uint16(d[ConnectDataOffCntlID:])
}

// SubNQN returns the subsystem NQN: the bytes before the first NUL of the
// 256-byte field (all 256 when there is none).
func (d ConnectData) SubNQN() string {
	return CString(d[ConnectDataOffSubNQN : ConnectDataOffSubNQN+NQNFieldLen])
}

// HostNQN returns the host NQN (NUL-terminated as SubNQN).
func (d ConnectData) HostNQN() string {
	return CString(d[ConnectDataOffHostNQN : ConnectDataOffHostNQN+NQNFieldLen])
}

// SetHostID sets the host identifier.
func (d ConnectData) SetHostID(id [16]byte) { copy(d[ConnectDataOffHostID:], id[:]) }

// SetCntlID sets the controller ID.
func (d ConnectData) SetCntlID(v uint16) {
	binary.LittleEndian.PutUint16(d[ConnectDataOffCntlID:], v)
}

// SetSubNQN writes the subsystem NQN, NUL-padded. It fails when the name
// does not fit with its terminating NUL.
func (d ConnectData) SetSubNQN(nqn string) error {
	return putCString(d[ConnectDataOffSubNQN:ConnectDataOffSubNQN+NQNFieldLen], nqn)
}

// SetHostNQN writes the host NQN, NUL-padded.
func (d ConnectData) SetHostNQN(nqn string) error {
	return putCString(d[ConnectDataOffHostNQN:ConnectDataOffHostNQN+NQNFieldLen], nqn)
}

// CString returns the bytes of b before the first NUL, as a string.
func CString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// putCString writes s into field, NUL-padded, keeping at least one NUL.
func putCString(field []byte, s string) error {
	if len(s) >= len(field) {
		return fmt.Errorf("fabrics: %q is longer than %d bytes", s, len(field)-1)
	}
	n := copy(field, s)
	clear(field[n:])
	return nil
}

// Connect completion dword 0 (NVMe over Fabrics 1.1 figure 21, "Connect
// Response"): on success bits 15:0 are the controller ID and bits 31:16
// AUTHREQ; with status Connect Invalid Parameters bits 15:0 are IPO, the
// byte offset of the bad field, and bits 23:16 IATTR, whose bit 0 says the
// field is in the Connect data (1) or in the SQE (0) - Linux
// IPO_IATTR_CONNECT_DATA/IPO_IATTR_CONNECT_SQE.

// ConnectResultDW0 returns dword 0 of a successful Connect completion.
func ConnectResultDW0(cntlid, authreq uint16) uint32 { return uint32(authreq)<<16 | uint32(cntlid) }

// ConnectResultCntlID returns the controller ID of a successful Connect
// completion's dword 0.
func ConnectResultCntlID(dw0 uint32) uint16 { return uint16(dw0) }

// ConnectResultAuthReq returns AUTHREQ (bits 31:16) of a successful Connect
// completion's dword 0: bit 1 ATR (authentication required), bit 2 ASCR
// (secure channel concatenation required).
func ConnectResultAuthReq(dw0 uint32) uint16 { return uint16(dw0 >> 16) }

// AUTHREQ bits of a successful Connect completion (Linux
// NVME_CONNECT_AUTHREQ_ATR and _ASCR, shifted down by the 16 bits of the
// controller ID).
const (
	AuthReqATR  = 1 << 1 // authentication required
	AuthReqASCR = 1 << 2 // secure channel concatenation required
)

// InvalidParam names the field a Connect Invalid Parameters status blames.
type InvalidParam struct {
	InData bool   // IATTR bit 0: the offset is in the Connect data (else in the SQE)
	Offset uint16 // IPO: byte offset of the field
}

// DW0 returns the completion dword 0 that reports p.
func (p InvalidParam) DW0() uint32 {
	v := uint32(p.Offset)
	if p.InData {
		v |= 1 << 16
	}
	return v
}

// ParseInvalidParam reads IATTR and IPO from a Connect completion's dword 0.
func ParseInvalidParam(dw0 uint32) InvalidParam {
	return InvalidParam{InData: dw0&(1<<16) != 0, Offset: uint16(dw0)}
}

// String describes the parameter, e.g. "Connect data byte 16".
func (p InvalidParam) String() string {
	if p.InData {
		return fmt.Sprintf("Connect data byte %d", p.Offset)
	}
	return fmt.Sprintf("Connect SQE byte %d", p.Offset)
}
