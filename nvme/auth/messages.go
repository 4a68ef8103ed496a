package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Message layouts (include/linux/nvme.h, struct nvmf_auth_dhchap_*_data);
// all multi-byte fields are little endian.
const (
	offType = 0
	offID   = 1
	offTID  = 4 // 2 bytes

	// AUTH_Negotiate
	offSCC          = 6
	offNAPD         = 7
	negHeaderLen    = 8
	descriptorLen   = 64 // AUTHID, rsvd, HALEN, DHLEN, 30 hash IDs, 30 DH group IDs
	descAuthID      = 0
	descHALen       = 2
	descDHLen       = 3
	descHashList    = 4
	descDHList      = 34
	MaxIDsPerList   = 30
	negotiateMinLen = negHeaderLen + descriptorLen

	// DH-HMAC-CHAP_Challenge / _Reply / _Success1 / _Success2
	offHL         = 6
	offHashID     = 8  // Challenge
	offDHGID      = 9  // Challenge
	offCValid     = 8  // Reply
	offRValid     = 8  // Success1
	offDHVLen     = 10 // 2 bytes, Challenge and Reply
	offSeqNum     = 12 // 4 bytes, Challenge and Reply
	chapHeaderLen = 16

	// AUTH_Failure1 / _Failure2
	offRescode    = 6
	offRescodeExp = 7
	failureLen    = 8
)

// Sizes of the fixed-length messages.
const (
	NegotiateLen = negotiateMinLen // one protocol descriptor, as the kernel sends
	Success2Len  = chapHeaderLen
	FailureLen   = failureLen
)

// MaxMessageLen is the largest message of this protocol (a Reply with SHA-512
// and ffdhe8192 is 16+128+1024 bytes); the Linux host receives into 4 KiB.
const MaxMessageLen = 4096

// ErrShort reports a message shorter than its fields say.
var ErrShort = errors.New("authentication message too short")

// Header is a view of the first 8 bytes shared by every message.
type Header []byte

// ParseHeader checks b holds the common header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < failureLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	return Header(b), nil
}

// Type returns AUTH_TYPE.
func (h Header) Type() AuthType { return AuthType(h[offType]) }

// ID returns AUTH_ID.
func (h Header) ID() MessageID { return MessageID(h[offID]) }

// TID returns the transaction identifier T_ID.
func (h Header) TID() uint16 { return binary.LittleEndian.Uint16(h[offTID:]) }

func putHeader(b []byte, t AuthType, id MessageID, tid uint16) {
	b[offType] = byte(t)
	b[offID] = byte(id)
	binary.LittleEndian.PutUint16(b[offTID:], tid)
}

func expect(b []byte, min int, t AuthType, id MessageID) error {
	if len(b) < min {
		return fmt.Errorf("%v: %w: %d bytes, need %d", id, ErrShort, len(b), min)
	}
	if AuthType(b[offType]) != t || MessageID(b[offID]) != id {
		return fmt.Errorf("%v: got type 0x%02x id %v", id, b[offType], MessageID(b[offID]))
	}
	return nil
}

// Negotiate is a view of AUTH_Negotiate: header, SC_C, NAPD, then NAPD
// 64-byte protocol descriptors (the kernel reads only the first).
type Negotiate []byte

// ParseNegotiate validates an AUTH_Negotiate: type, ID, room for one
// descriptor, HALEN and DHLEN within 30.
func ParseNegotiate(b []byte) (Negotiate, error) {
	if err := expect(b, negotiateMinLen, TypeCommon, MsgNegotiate); err != nil {
		return nil, err
	}
	n := Negotiate(b)
	if n.HALen() > MaxIDsPerList || n.DHLen() > MaxIDsPerList {
		return nil, fmt.Errorf("%v: HALEN %d / DHLEN %d above %d", MsgNegotiate, n.HALen(), n.DHLen(), MaxIDsPerList)
	}
	return n, nil
}

// TID returns T_ID.
func (n Negotiate) TID() uint16 { return Header(n).TID() }

// SCC returns SC_C (secure channel concatenation; 0 = none).
func (n Negotiate) SCC() uint8 { return n[offSCC] }

// NAPD returns the number of protocol descriptors.
func (n Negotiate) NAPD() uint8 { return n[offNAPD] }

// AuthID returns the first descriptor's AUTHID (ProtocolDHCHAP).
func (n Negotiate) AuthID() uint8 { return n[negHeaderLen+descAuthID] }

// HALen returns the number of hash IDs in the first descriptor.
func (n Negotiate) HALen() int { return int(n[negHeaderLen+descHALen]) }

// DHLen returns the number of DH group IDs in the first descriptor.
func (n Negotiate) DHLen() int { return int(n[negHeaderLen+descDHLen]) }

// HashIDs returns the offered hash IDs.
func (n Negotiate) HashIDs() []HashID {
	out := make([]HashID, n.HALen())
	for i := range out {
		out[i] = HashID(n[negHeaderLen+descHashList+i])
	}
	return out
}

// DHGroupIDs returns the offered DH group IDs.
func (n Negotiate) DHGroupIDs() []DHGroupID {
	out := make([]DHGroupID, n.DHLen())
	for i := range out {
		out[i] = DHGroupID(n[negHeaderLen+descDHList+i])
	}
	return out
}

// EncodeNegotiate builds an AUTH_Negotiate with one DH-HMAC-CHAP descriptor
// (at most 30 hashes and 30 groups; extra ones are an error).
func EncodeNegotiate(tid uint16, scc uint8, hashes []HashID, groups []DHGroupID) ([]byte, error) {
	if len(hashes) > MaxIDsPerList || len(groups) > MaxIDsPerList {
		return nil, fmt.Errorf("%v: more than %d IDs in a list", MsgNegotiate, MaxIDsPerList)
	}
	b := make([]byte, NegotiateLen)
	putHeader(b, TypeCommon, MsgNegotiate, tid)
	b[offSCC] = scc
	b[offNAPD] = 1
	d := b[negHeaderLen:]
	d[descAuthID] = ProtocolDHCHAP
	d[descHALen] = uint8(len(hashes))
	d[descDHLen] = uint8(len(groups))
	for i, h := range hashes {
		d[descHashList+i] = byte(h)
	}
	for i, g := range groups {
		d[descDHList+i] = byte(g)
	}
	return b, nil
}

// Challenge is a view of DH-HMAC-CHAP_Challenge: header, HL, HASHID, DHGID,
// DHVLEN, SEQNUM, then C (HL bytes) and the controller's DH value (DHVLEN).
type Challenge []byte

// ParseChallenge validates a Challenge's type, ID and lengths.
func ParseChallenge(b []byte) (Challenge, error) {
	if err := expect(b, chapHeaderLen, TypeDHCHAP, MsgChallenge); err != nil {
		return nil, err
	}
	c := Challenge(b)
	if need := chapHeaderLen + c.HL() + c.DHVLen(); len(b) < need {
		return nil, fmt.Errorf("%v: %w: %d bytes, HL %d and DHVLEN %d need %d", MsgChallenge, ErrShort, len(b), c.HL(), c.DHVLen(), need)
	}
	return c, nil
}

// TID returns T_ID.
func (c Challenge) TID() uint16 { return Header(c).TID() }

// HL returns the hash length.
func (c Challenge) HL() int { return int(c[offHL]) }

// HashID returns the selected hash.
func (c Challenge) HashID() HashID { return HashID(c[offHashID]) }

// DHGroupID returns the selected DH group.
func (c Challenge) DHGroupID() DHGroupID { return DHGroupID(c[offDHGID]) }

// DHVLen returns the length of the DH value.
func (c Challenge) DHVLen() int { return int(binary.LittleEndian.Uint16(c[offDHVLen:])) }

// SeqNum returns SEQNUM (S1).
func (c Challenge) SeqNum() uint32 { return binary.LittleEndian.Uint32(c[offSeqNum:]) }

// C returns the challenge value C1.
func (c Challenge) C() []byte { return c[chapHeaderLen : chapHeaderLen+c.HL()] }

// DHValue returns the controller's DH public value.
func (c Challenge) DHValue() []byte {
	o := chapHeaderLen + c.HL()
	return c[o : o+c.DHVLen()]
}

// EncodeChallenge builds a Challenge.
func EncodeChallenge(tid uint16, h HashID, g DHGroupID, seq uint32, c, dhv []byte) []byte {
	b := make([]byte, chapHeaderLen+len(c)+len(dhv))
	putHeader(b, TypeDHCHAP, MsgChallenge, tid)
	b[offHL] = uint8(len(c))
	b[offHashID] = byte(h)
	b[offDHGID] = byte(g)
	binary.LittleEndian.PutUint16(b[offDHVLen:], uint16(len(dhv)))
	binary.LittleEndian.PutUint32(b[offSeqNum:], seq)
	copy(b[chapHeaderLen:], c)
	copy(b[chapHeaderLen+len(c):], dhv)
	return b
}

// Reply is a view of DH-HMAC-CHAP_Reply: header, HL, CVALID, DHVLEN, SEQNUM
// (S2, 0 when unidirectional), then the response R1 (HL bytes), the host's
// challenge C2 (HL bytes, meaningful when CVALID) and the host's DH value.
type Reply []byte

// ParseReply validates a Reply's type, ID and lengths.
func ParseReply(b []byte) (Reply, error) {
	if err := expect(b, chapHeaderLen, TypeDHCHAP, MsgReply); err != nil {
		return nil, err
	}
	r := Reply(b)
	if need := chapHeaderLen + 2*r.HL() + r.DHVLen(); len(b) < need {
		return nil, fmt.Errorf("%v: %w: %d bytes, HL %d and DHVLEN %d need %d", MsgReply, ErrShort, len(b), r.HL(), r.DHVLen(), need)
	}
	return r, nil
}

// TID returns T_ID.
func (r Reply) TID() uint16 { return Header(r).TID() }

// HL returns the hash length.
func (r Reply) HL() int { return int(r[offHL]) }

// CValid reports whether C2 is valid (bidirectional authentication).
func (r Reply) CValid() bool { return r[offCValid] != 0 }

// DHVLen returns the length of the DH value.
func (r Reply) DHVLen() int { return int(binary.LittleEndian.Uint16(r[offDHVLen:])) }

// SeqNum returns SEQNUM (S2).
func (r Reply) SeqNum() uint32 { return binary.LittleEndian.Uint32(r[offSeqNum:]) }

// Response returns R1.
func (r Reply) Response() []byte { return r[chapHeaderLen : chapHeaderLen+r.HL()] }

// C returns C2.
func (r Reply) C() []byte { return r[chapHeaderLen+r.HL() : chapHeaderLen+2*r.HL()] }

// DHValue returns the host's DH public value.
func (r Reply) DHValue() []byte {
	o := chapHeaderLen + 2*r.HL()
	return r[o : o+r.DHVLen()]
}

// EncodeReply builds a Reply; c2 nil means unidirectional (CVALID 0, C2
// zeros, as the kernel sends it).
func EncodeReply(tid uint16, resp, c2 []byte, seq uint32, dhv []byte) []byte {
	hl := len(resp)
	b := make([]byte, chapHeaderLen+2*hl+len(dhv))
	putHeader(b, TypeDHCHAP, MsgReply, tid)
	b[offHL] = uint8(hl)
	if c2 != nil {
		b[offCValid] = 1
		copy(b[chapHeaderLen+hl:], c2)
	}
	binary.LittleEndian.PutUint16(b[offDHVLen:], uint16(len(dhv)))
	binary.LittleEndian.PutUint32(b[offSeqNum:], seq)
	copy(b[chapHeaderLen:], resp)
	copy(b[chapHeaderLen+2*hl:], dhv)
	return b
}

// Success1 is a view of DH-HMAC-CHAP_Success1: header, HL, RVALID, then the
// controller's response R2 (HL bytes, meaningful when RVALID).
type Success1 []byte

// ParseSuccess1 validates a Success1; R2 must be present when RVALID is set.
func ParseSuccess1(b []byte) (Success1, error) {
	if err := expect(b, chapHeaderLen, TypeDHCHAP, MsgSuccess1); err != nil {
		return nil, err
	}
	s := Success1(b)
	if s.RValid() && len(b) < chapHeaderLen+s.HL() {
		return nil, fmt.Errorf("%v: %w: %d bytes, HL %d", MsgSuccess1, ErrShort, len(b), s.HL())
	}
	return s, nil
}

// TID returns T_ID.
func (s Success1) TID() uint16 { return Header(s).TID() }

// HL returns the hash length.
func (s Success1) HL() int { return int(s[offHL]) }

// RValid reports whether R2 is present.
func (s Success1) RValid() bool { return s[offRValid] != 0 }

// Response returns R2 (call only when RValid).
func (s Success1) Response() []byte { return s[chapHeaderLen : chapHeaderLen+s.HL()] }

// EncodeSuccess1 builds a Success1 of 16+hl bytes; r2 nil leaves RVALID 0
// and the response zero, as the kernel does.
func EncodeSuccess1(tid uint16, hl int, r2 []byte) []byte {
	b := make([]byte, chapHeaderLen+hl)
	putHeader(b, TypeDHCHAP, MsgSuccess1, tid)
	b[offHL] = uint8(hl)
	if r2 != nil {
		b[offRValid] = 1
		copy(b[chapHeaderLen:], r2)
	}
	return b
}

// ParseSuccess2 validates a DH-HMAC-CHAP_Success2 (16 bytes) and returns its
// header.
func ParseSuccess2(b []byte) (Header, error) {
	if err := expect(b, Success2Len, TypeDHCHAP, MsgSuccess2); err != nil {
		return nil, err
	}
	return Header(b), nil
}

// EncodeSuccess2 builds a Success2.
func EncodeSuccess2(tid uint16) []byte {
	b := make([]byte, Success2Len)
	putHeader(b, TypeDHCHAP, MsgSuccess2, tid)
	return b
}

// Failure is a view of AUTH_Failure1 (controller to host) or AUTH_Failure2
// (host to controller): header, reason code, reason code explanation.
type Failure []byte

// ParseFailure validates an AUTH_Failure1 or AUTH_Failure2.
func ParseFailure(b []byte) (Failure, error) {
	if len(b) < failureLen {
		return nil, fmt.Errorf("AUTH_Failure: %w: %d bytes", ErrShort, len(b))
	}
	if AuthType(b[offType]) != TypeCommon || (MessageID(b[offID]) != MsgFailure1 && MessageID(b[offID]) != MsgFailure2) {
		return nil, fmt.Errorf("AUTH_Failure: got type 0x%02x id %v", b[offType], MessageID(b[offID]))
	}
	return Failure(b), nil
}

// ID returns MsgFailure1 or MsgFailure2.
func (f Failure) ID() MessageID { return Header(f).ID() }

// TID returns T_ID.
func (f Failure) TID() uint16 { return Header(f).TID() }

// Code returns the reason code (RESCODE).
func (f Failure) Code() uint8 { return f[offRescode] }

// Reason returns the reason code explanation.
func (f Failure) Reason() Reason { return Reason(f[offRescodeExp]) }

// EncodeFailure builds an AUTH_Failure1 or AUTH_Failure2.
func EncodeFailure(id MessageID, tid uint16, r Reason) []byte {
	b := make([]byte, FailureLen)
	putHeader(b, TypeCommon, id, tid)
	b[offRescode] = ReasonCodeFailure
	b[offRescodeExp] = byte(r)
	return b
}
