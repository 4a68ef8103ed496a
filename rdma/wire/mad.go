package wire

import (
	"encoding/binary"
	"fmt"
)

// MAD sizes (IBA vol. 1 chapter 13.4; Linux include/rdma/ib_mad.h).
const (
	MADLen     = 256 // a MAD on QP0/QP1
	MADHdrLen  = 24  // the common MAD header
	MADDataLen = MADLen - MADHdrLen
)

// General Services Interface: CM MADs travel in UD SENDs to QP1 with this Q_Key.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000 // IB_QP1_QKEY
)

// MAD base version and the management classes used here.
const (
	MADBaseVersion = 1    // IB_MGMT_BASE_VERSION
	MgmtClassCM    = 0x07 // IB_MGMT_CLASS_CM
	CMClassVersion = 2    // IB_CM_CLASS_VERSION
)

// MAD methods (IB_MGMT_METHOD_*). MethodResp is the R bit of a response.
const (
	MethodGet         = 0x01
	MethodSet         = 0x02
	MethodSend        = 0x03
	MethodTrap        = 0x05
	MethodReport      = 0x06
	MethodTrapRepress = 0x07
	MethodResp        = 0x80
	MethodGetResp     = MethodResp | MethodGet
	MethodReportResp  = MethodResp | MethodReport
)

// MAD header status values (IB_MGMT_MAD_STATUS_*).
const (
	MADStatusSuccess                 = 0x0000
	MADStatusBusy                    = 0x0001
	MADStatusRedirectRequired        = 0x0002
	MADStatusBadVersion              = 0x0004
	MADStatusUnsupportedMethod       = 0x0008
	MADStatusUnsupportedMethodAttrib = 0x000c
	MADStatusInvalidAttribValue      = 0x001c
)

// CMAttr is a communication-management attribute ID (IBA vol. 1 table 103).
type CMAttr uint16

// CM attribute IDs (CM_*_ATTR_ID in drivers/infiniband/core/cm_msgs.h).
const (
	CMAttrClassPortInfo CMAttr = 0x0001
	CMAttrREQ           CMAttr = 0x0010
	CMAttrMRA           CMAttr = 0x0011
	CMAttrREJ           CMAttr = 0x0012
	CMAttrREP           CMAttr = 0x0013
	CMAttrRTU           CMAttr = 0x0014
	CMAttrDREQ          CMAttr = 0x0015
	CMAttrDREP          CMAttr = 0x0016
	CMAttrSIDRREQ       CMAttr = 0x0017
	CMAttrSIDRREP       CMAttr = 0x0018
	CMAttrLAP           CMAttr = 0x0019
	CMAttrAPR           CMAttr = 0x001a
)

var cmAttrNames = map[CMAttr]string{
	CMAttrClassPortInfo: "ClassPortInfo",
	CMAttrREQ:           "REQ",
	CMAttrMRA:           "MRA",
	CMAttrREJ:           "REJ",
	CMAttrREP:           "REP",
	CMAttrRTU:           "RTU",
	CMAttrDREQ:          "DREQ",
	CMAttrDREP:          "DREP",
	CMAttrSIDRREQ:       "SIDR_REQ",
	CMAttrSIDRREP:       "SIDR_REP",
	CMAttrLAP:           "LAP",
	CMAttrAPR:           "APR",
}

// String names the attribute as the IBA does ("REQ", "SIDR_REQ", …), or
// "attr 0xNNNN" for an unknown one.
func (a CMAttr) String() string {
	if n, ok := cmAttrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("attr %#04x", uint16(a))
}

// MAD is a view of a 256-byte management datagram: the 24-byte common MAD
// header followed by 232 bytes of class-specific data.
type MAD []byte

// ParseMAD returns a view of the MAD at the start of b (the payload of a
// UD SEND to QP1), checking its length.
func ParseMAD(b []byte) (MAD, error) {
	if len(b) < MADLen {
		return nil, fmt.Errorf("wire: %d-byte MAD: %w", len(b), ErrShort)
	}
	return MAD(b[:MADLen:MADLen]), nil
}

// BaseVersion returns the MAD base version (1).
func (m MAD) BaseVersion() uint8 { return m[0] }

// MgmtClass returns the management class (MgmtClassCM for the CM).
func (m MAD) MgmtClass() uint8 { return m[1] }

// ClassVersion returns the management class version.
func (m MAD) ClassVersion() uint8 { return m[2] }

// Method returns the method byte, including the R (response) bit.
func (m MAD) Method() uint8 { return m[3] }

// IsResponse reports whether the R bit of the method is set.
func (m MAD) IsResponse() bool { return m[3]&MethodResp != 0 }

// Status returns the 16-bit status field.
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[4:]) }

// ClassSpecific returns the 16-bit class-specific field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// TID returns the 64-bit transaction ID.
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[8:]) }

// AttrID returns the attribute ID.
func (m MAD) AttrID() uint16 { return binary.BigEndian.Uint16(m[16:]) }

// Resv returns the reserved 16 bits after the attribute ID.
func (m MAD) Resv() uint16 { return binary.BigEndian.Uint16(m[18:]) }

// AttrMod returns the attribute modifier.
func (m MAD) AttrMod() uint32 { return binary.BigEndian.Uint32(m[20:]) }

// Data returns the 232 bytes after the header (a CM message).
func (m MAD) Data() []byte { return m[MADHdrLen:MADLen:MADLen] }

// SetBaseVersion sets the base version.
func (m MAD) SetBaseVersion(v uint8) { m[0] = v }

// SetMgmtClass sets the management class.
func (m MAD) SetMgmtClass(v uint8) { m[1] = v }

// SetClassVersion sets the class version.
func (m MAD) SetClassVersion(v uint8) { m[2] = v }

// SetMethod sets the method byte (with the R bit when it is a response).
func (m MAD) SetMethod(v uint8) { m[3] = v }

// SetStatus sets the status field.
func (m MAD) SetStatus(v uint16) { binary.BigEndian.PutUint16(m[4:], v) }

// SetClassSpecific sets the class-specific field.
func (m MAD) SetClassSpecific(v uint16) { binary.BigEndian.PutUint16(m[6:], v) }

// SetTID sets the transaction ID.
func (m MAD) SetTID(v uint64) { binary.BigEndian.PutUint64(m[8:], v) }

// SetAttrID sets the attribute ID.
func (m MAD) SetAttrID(v uint16) { binary.BigEndian.PutUint16(m[16:], v) }

// SetResv sets the reserved field.
func (m MAD) SetResv(v uint16) { binary.BigEndian.PutUint16(m[18:], v) }

// SetAttrMod sets the attribute modifier.
func (m MAD) SetAttrMod(v uint32) { binary.BigEndian.PutUint32(m[20:], v) }

// InitCM zeroes the whole MAD and writes the header of a CM message as
// Linux's cm_format_mad_hdr does: base version 1, class CM, class version
// 2, method Send, the attribute and the transaction ID.
func (m MAD) InitCM(attr CMAttr, tid uint64) {
	clear(m[:MADLen])
	m.SetBaseVersion(MADBaseVersion)
	m.SetMgmtClass(MgmtClassCM)
	m.SetClassVersion(CMClassVersion)
	m.SetMethod(MethodSend)
	m.SetTID(tid)
	m.SetAttrID(uint16(attr))
}

// CheckCM checks that the header is one of a CM MAD this package speaks:
// base version 1, class CM, class version 2.
func (m MAD) CheckCM() error {
	if m.BaseVersion() != MADBaseVersion || m.MgmtClass() != MgmtClassCM || m.ClassVersion() != CMClassVersion {
		return fmt.Errorf("wire: MAD base version %d class %#02x version %d is not a CM MAD version %d",
			m.BaseVersion(), m.MgmtClass(), m.ClassVersion(), CMClassVersion)
	}
	return nil
}

// String formats the header for logs.
func (m MAD) String() string {
	if len(m) < MADHdrLen {
		return "MAD(short)"
	}
	attr := fmt.Sprintf("attr %#04x", m.AttrID())
	if m.MgmtClass() == MgmtClassCM {
		attr = CMAttr(m.AttrID()).String()
	}
	return fmt.Sprintf("MAD{class %#02x v%d method %#02x status %#04x tid %#x %s mod %#x}",
		m.MgmtClass(), m.ClassVersion(), m.Method(), m.Status(), m.TID(), attr, m.AttrMod())
}
