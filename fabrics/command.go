package fabrics

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// OpcodeFabrics is the opcode of every Fabrics command (SQE byte 0).
const OpcodeFabrics = 0x7f

// SQELen is the size of a submission queue entry, and so of a Fabrics command.
const SQELen = 64

// ErrShort is returned when a buffer is too short for the structure it must hold.
var ErrShort = errors.New("fabrics: buffer too short")

// FCType is the Fabrics Command Type (SQE byte 4 of a Fabrics command).
type FCType uint8

// Fabrics command types (NVMe over Fabrics 1.1 figure 13; Linux enum nvmf_fabrics_opcode).
const (
	FCTypePropertySet FCType = 0x00
	FCTypeConnect     FCType = 0x01
	FCTypePropertyGet FCType = 0x04
	FCTypeAuthSend    FCType = 0x05
	FCTypeAuthReceive FCType = 0x06
	FCTypeDisconnect  FCType = 0x08
)

var fctypeNames = map[FCType]string{
	FCTypePropertySet: "Property Set",
	FCTypeConnect:     "Connect",
	FCTypePropertyGet: "Property Get",
	FCTypeAuthSend:    "Authentication Send",
	FCTypeAuthReceive: "Authentication Receive",
	FCTypeDisconnect:  "Disconnect",
}

// String returns the command's name as the specification writes it.
func (t FCType) String() string {
	if s, ok := fctypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("FCType %#02x", uint8(t))
}

// Direction returns the data direction encoded in the low two bits of the
// FCTYPE, as in an NVMe opcode: 0 none, 1 host to controller, 2 controller
// to host, 3 bidirectional.
func (t FCType) Direction() DataDirection { return DataDirection(t & 3) }

// Byte offsets in a Fabrics command (Linux struct nvmf_common_command and
// the per-command structures in include/linux/nvme.h).
const (
	cmdOpcode = 0
	cmdCID    = 2
	cmdFCType = 4
	cmdSGL1   = 24 // SGL descriptor 1 (bytes 39:24)

	// Connect.
	ConnectOffRecFmt = 40
	ConnectOffQID    = 42
	ConnectOffSQSize = 44
	ConnectOffCAttr  = 46
	ConnectOffKATO   = 48

	// Property Set / Property Get.
	propAttrib = 40
	propOffset = 44
	propValue  = 48

	// Authentication Send / Receive.
	authSPSP0 = 41
	authSPSP1 = 42
	authSECP  = 43
	authLen   = 44 // TL (send) or AL (receive)

	// Disconnect.
	disconnectRecFmt = 40
)

// Command is a view of a 64-byte Fabrics command (opcode 0x7f). The layout
// differs from a normal SQE after byte 4: FCTYPE is byte 4 and the
// command-specific fields start at byte 40. Views returned by ParseCommand
// or NewCommand are exactly 64 bytes; the accessors assume that.
type Command []byte

// ParseCommand checks that b holds a Fabrics command and returns a view of
// its first 64 bytes.
func ParseCommand(b []byte) (Command, error) {
	if len(b) < SQELen {
		return nil, fmt.Errorf("fabrics: command of %d bytes: %w", len(b), ErrShort)
	}
	if b[cmdOpcode] != OpcodeFabrics {
		return nil, fmt.Errorf("fabrics: opcode %#02x is not a Fabrics command", b[cmdOpcode])
	}
	return Command(b[:SQELen:SQELen]), nil
}

// NewCommand returns a zeroed 64-byte Fabrics command of type t.
func NewCommand(t FCType) Command {
	c := make(Command, SQELen)
	c[cmdOpcode] = OpcodeFabrics
	c[cmdFCType] = byte(t)
	return c
}

// Opcode returns byte 0 (0x7f for a Fabrics command).
func (c Command) Opcode() uint8 { return c[cmdOpcode] }

// CID returns the command identifier.
func (c Command) CID() uint16 { return binary.LittleEndian.Uint16(c[cmdCID:]) }

// SetCID sets the command identifier.
func (c Command) SetCID(cid uint16) { binary.LittleEndian.PutUint16(c[cmdCID:], cid) }

// FCType returns the Fabrics command type.
func (c Command) FCType() FCType { return FCType(c[cmdFCType]) }

// PSDT returns the PRP or SGL for Data Transfer field (byte 1 bits 7:6;
// Fabrics commands use 1, SGL).
func (c Command) PSDT() uint8 { return c[1] >> 6 }

// SetPSDT sets byte 1 bits 7:6.
func (c Command) SetPSDT(v uint8) { c[1] = c[1]&0x3f | v<<6 }

// SGL1 returns a view of SGL descriptor 1 (bytes 39:24).
func (c Command) SGL1() SGL { return SGL(c[cmdSGL1 : cmdSGL1+SGLLen : cmdSGL1+SGLLen]) }

// Connect returns the command viewed as Connect.
func (c Command) Connect() ConnectCommand { return ConnectCommand(c) }

// PropertySet returns the command viewed as Property Set.
func (c Command) PropertySet() PropertySetCommand { return PropertySetCommand(c) }

// PropertyGet returns the command viewed as Property Get.
func (c Command) PropertyGet() PropertyGetCommand { return PropertyGetCommand(c) }

// Auth returns the command viewed as Authentication Send or Receive.
func (c Command) Auth() AuthCommand { return AuthCommand(c) }

// Disconnect returns the command viewed as Disconnect.
func (c Command) Disconnect() DisconnectCommand { return DisconnectCommand(c) }

// ConnectCommand is a view of a 64-byte Connect command (FCTYPE 0x01).
type ConnectCommand []byte

// RecFmt returns the record format (0).
func (c ConnectCommand) RecFmt() uint16 { return binary.LittleEndian.Uint16(c[ConnectOffRecFmt:]) }

// QID returns the queue the host connects (0 = admin queue).
func (c ConnectCommand) QID() uint16 { return binary.LittleEndian.Uint16(c[ConnectOffQID:]) }

// SQSize returns the submission queue size, 0's based (entries - 1).
func (c ConnectCommand) SQSize() uint16 { return binary.LittleEndian.Uint16(c[ConnectOffSQSize:]) }

// CAttr returns the connect attributes (bit 2: I/O queue deletion
// supported, bits 1:0 priority class).
func (c ConnectCommand) CAttr() uint8 { return c[ConnectOffCAttr] }

// KATO returns the keep-alive timeout in milliseconds (admin queue; 0 = off).
func (c ConnectCommand) KATO() uint32 { return binary.LittleEndian.Uint32(c[ConnectOffKATO:]) }

// SetRecFmt sets the record format.
func (c ConnectCommand) SetRecFmt(v uint16) { binary.LittleEndian.PutUint16(c[ConnectOffRecFmt:], v) }

// SetQID sets the queue ID.
func (c ConnectCommand) SetQID(v uint16) { binary.LittleEndian.PutUint16(c[ConnectOffQID:], v) }

// SetSQSize sets the 0's based submission queue size.
func (c ConnectCommand) SetSQSize(v uint16) { binary.LittleEndian.PutUint16(c[ConnectOffSQSize:], v) }

// SetCAttr sets the connect attributes.
func (c ConnectCommand) SetCAttr(v uint8) { c[ConnectOffCAttr] = v }

// SetKATO sets the keep-alive timeout in milliseconds.
func (c ConnectCommand) SetKATO(ms uint32) { binary.LittleEndian.PutUint32(c[ConnectOffKATO:], ms) }

// Property attribute sizes (ATTRIB bits 2:0).
const (
	PropertyAttrib4 = 0 // a 4-byte property
	PropertyAttrib8 = 1 // an 8-byte property
)

// PropertySetCommand is a view of a 64-byte Property Set command (FCTYPE 0x00).
type PropertySetCommand []byte

// Attrib returns the attributes byte (bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes).
func (c PropertySetCommand) Attrib() uint8 { return c[propAttrib] }

// Size returns the property size in bytes that ATTRIB selects (4 or 8), or
// 0 for a reserved encoding.
func (c PropertySetCommand) Size() int { return attribSize(c[propAttrib]) }

// Offset returns the property offset.
func (c PropertySetCommand) Offset() uint32 { return binary.LittleEndian.Uint32(c[propOffset:]) }

// Value returns the value to set (for a 4-byte property, the low 32 bits count).
func (c PropertySetCommand) Value() uint64 { return binary.LittleEndian.Uint64(c[propValue:]) }

// SetAttrib sets the attributes byte.
func (c PropertySetCommand) SetAttrib(v uint8) { c[propAttrib] = v }

// SetOffset sets the property offset.
func (c PropertySetCommand) SetOffset(v uint32) { binary.LittleEndian.PutUint32(c[propOffset:], v) }

// SetValue sets the value.
func (c PropertySetCommand) SetValue(v uint64) { binary.LittleEndian.PutUint64(c[propValue:], v) }

// PropertyGetCommand is a view of a 64-byte Property Get command (FCTYPE 0x04).
type PropertyGetCommand []byte

// Attrib returns the attributes byte (bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes).
func (c PropertyGetCommand) Attrib() uint8 { return c[propAttrib] }

// Size returns the property size in bytes that ATTRIB selects (4 or 8), or
// 0 for a reserved encoding.
func (c PropertyGetCommand) Size() int { return attribSize(c[propAttrib]) }

// Offset returns the property offset.
func (c PropertyGetCommand) Offset() uint32 { return binary.LittleEndian.Uint32(c[propOffset:]) }

// SetAttrib sets the attributes byte.
func (c PropertyGetCommand) SetAttrib(v uint8) { c[propAttrib] = v }

// SetOffset sets the property offset.
func (c PropertyGetCommand) SetOffset(v uint32) { binary.LittleEndian.PutUint32(c[propOffset:], v) }

func attribSize(a uint8) int {
	switch a & 7 {
	case PropertyAttrib4:
		return 4
	case PropertyAttrib8:
		return 8
	}
	return 0
}

// AttribForSize returns the ATTRIB value for a property of n bytes (4 or 8).
func AttribForSize(n int) uint8 {
	if n == 8 {
		return PropertyAttrib8
	}
	return PropertyAttrib4
}

// PropertyGetValue returns the value a Property Get completion carries:
// CQE dword 1 << 32 | dword 0.
func PropertyGetValue(dw0, dw1 uint32) uint64 { return uint64(dw1)<<32 | uint64(dw0) }

// PropertyGetResult splits a property value into CQE dwords 0 and 1.
func PropertyGetResult(v uint64) (dw0, dw1 uint32) { return uint32(v), uint32(v >> 32) }

// AuthCommand is a view of a 64-byte Authentication Send (FCTYPE 0x05) or
// Authentication Receive (0x06) command.
type AuthCommand []byte

// SPSP0 returns SP Specific 0.
func (c AuthCommand) SPSP0() uint8 { return c[authSPSP0] }

// SPSP1 returns SP Specific 1.
func (c AuthCommand) SPSP1() uint8 { return c[authSPSP1] }

// SECP returns the Security Protocol (0xE9 for NVMe in-band authentication).
func (c AuthCommand) SECP() uint8 { return c[authSECP] }

// TL returns the Transfer Length of an Authentication Send.
func (c AuthCommand) TL() uint32 { return binary.LittleEndian.Uint32(c[authLen:]) }

// AL returns the Allocation Length of an Authentication Receive (same
// bytes as TL).
func (c AuthCommand) AL() uint32 { return binary.LittleEndian.Uint32(c[authLen:]) }

// SetSPSP0 sets SP Specific 0.
func (c AuthCommand) SetSPSP0(v uint8) { c[authSPSP0] = v }

// SetSPSP1 sets SP Specific 1.
func (c AuthCommand) SetSPSP1(v uint8) { c[authSPSP1] = v }

// SetSECP sets the Security Protocol.
func (c AuthCommand) SetSECP(v uint8) { c[authSECP] = v }

// SetTL sets the Transfer Length (or, for Receive, the Allocation Length).
func (c AuthCommand) SetTL(v uint32) { binary.LittleEndian.PutUint32(c[authLen:], v) }

// SetAL sets the Allocation Length.
func (c AuthCommand) SetAL(v uint32) { c.SetTL(v) }

// SECPNVMeAuth is the Security Protocol value of NVMe in-band authentication.
const SECPNVMeAuth = 0xe9

// DisconnectCommand is a view of a 64-byte Disconnect command (FCTYPE 0x08).
type DisconnectCommand []byte

// RecFmt returns the record format (0).
func (c DisconnectCommand) RecFmt() uint16 {
	return binary.LittleEndian.Uint16(c[disconnectRecFmt:])
}

// SetRecFmt sets the record format.
func (c DisconnectCommand) SetRecFmt(v uint16) {
	binary.LittleEndian.PutUint16(c[disconnectRecFmt:], v)
}
