package auth

import (
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"strings"
)

// Security protocol values of the Authentication Send/Receive commands.
const (
	// SECP is the Security Protocol of NVMe in-band authentication.
	SECP = 0xe9
	// SPSP0 and SPSP1 are the Security Protocol Specific fields the Linux
	// host sends and the Linux target requires.
	SPSP0 = 0x01
	SPSP1 = 0x01
)

// AuthType is byte 0 of every authentication message.
type AuthType uint8

// Authentication message types.
const (
	// TypeCommon marks AUTH_Negotiate, Failure1 and Failure2.
	TypeCommon AuthType = 0x00
	// TypeDHCHAP marks the DH-HMAC-CHAP_* messages.
	TypeDHCHAP AuthType = 0x01
)

// MessageID is byte 1 of every authentication message (AUTH_ID).
type MessageID uint8

// Message identifiers.
const (
	MsgNegotiate MessageID = 0x00
	MsgChallenge MessageID = 0x01
	MsgReply     MessageID = 0x02
	MsgSuccess1  MessageID = 0x03
	MsgSuccess2  MessageID = 0x04
	MsgFailure2  MessageID = 0xf0
	MsgFailure1  MessageID = 0xf1
)

var msgNames = map[MessageID]string{
	MsgNegotiate: "AUTH_Negotiate",
	MsgChallenge: "DH-HMAC-CHAP_Challenge",
	MsgReply:     "DH-HMAC-CHAP_Reply",
	MsgSuccess1:  "DH-HMAC-CHAP_Success1",
	MsgSuccess2:  "DH-HMAC-CHAP_Success2",
	MsgFailure2:  "AUTH_Failure2",
	MsgFailure1:  "AUTH_Failure1",
}

// String returns the specification's name of the message.
func (m MessageID) String() string {
	if s, ok := msgNames[m]; ok {
		return s
	}
	return fmt.Sprintf("message 0x%02x", uint8(m))
}

// ProtocolDHCHAP is the AUTHID of the DH-HMAC-CHAP protocol descriptor.
const ProtocolDHCHAP = 0x01

// HashID identifies a hash function (HashID in the Challenge; the hh field
// of a DHHC-1 secret uses the same numbers, 0 meaning "no transform").
type HashID uint8

// Hash functions.
const (
	HashNone   HashID = 0x00 // only in a DHHC-1 secret: use the key untransformed
	HashSHA256 HashID = 0x01
	HashSHA384 HashID = 0x02
	HashSHA512 HashID = 0x03
)

// Hashes lists the hash functions in the order the Linux host offers them.
var Hashes = []HashID{HashSHA256, HashSHA384, HashSHA512}

// Valid reports whether h names a usable hash function (not HashNone).
func (h HashID) Valid() bool { return h >= HashSHA256 && h <= HashSHA512 }

// Size returns the digest length in bytes (the HL of the messages), 0 for an
// unknown ID.
func (h HashID) Size() int {
	switch h {
	case HashSHA256:
		return 32
	case HashSHA384:
		return 48
	case HashSHA512:
		return 64
	}
	return 0
}

// New returns a new hash.Hash; it panics for an invalid ID (callers check
// Valid first).
func (h HashID) New() hash.Hash {
	switch h {
	case HashSHA256:
		return sha256.New()
	case HashSHA384:
		return sha512.New384()
	case HashSHA512:
		return sha512.New()
	}
	panic(fmt.Sprintf("auth: invalid hash ID %d", h))
}

// String returns the kernel's name: "hmac(sha256)", "hmac(sha384)",
// "hmac(sha512)"; "none" for HashNone.
func (h HashID) String() string {
	switch h {
	case HashNone:
		return "none"
	case HashSHA256:
		return "hmac(sha256)"
	case HashSHA384:
		return "hmac(sha384)"
	case HashSHA512:
		return "hmac(sha512)"
	}
	return fmt.Sprintf("hash 0x%02x", uint8(h))
}

// ParseHash parses a hash function by kernel name ("hmac(sha256)"), short
// name ("sha256") or number ("1", "0x01"). HashNone is not accepted.
func ParseHash(s string) (HashID, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, h := range Hashes {
		name := h.String()
		if t == name || t == strings.TrimSuffix(strings.TrimPrefix(name, "hmac("), ")") {
			return h, nil
		}
	}
	if n, ok := parseSmallInt(t); ok && HashID(n).Valid() {
		return HashID(n), nil
	}
	return 0, fmt.Errorf("unknown DH-HMAC-CHAP hash %q (want hmac(sha256), hmac(sha384) or hmac(sha512))", s)
}

// DHGroupID identifies a Diffie-Hellman group (DHGID).
type DHGroupID uint8

// Diffie-Hellman groups: none, then the RFC 7919 finite-field groups.
const (
	DHGroupNull DHGroupID = 0x00
	FFDHE2048   DHGroupID = 0x01
	FFDHE3072   DHGroupID = 0x02
	FFDHE4096   DHGroupID = 0x03
	FFDHE6144   DHGroupID = 0x04
	FFDHE8192   DHGroupID = 0x05
)

// DHGroups lists the groups in the order the Linux host offers them.
var DHGroups = []DHGroupID{DHGroupNull, FFDHE2048, FFDHE3072, FFDHE4096, FFDHE6144, FFDHE8192}

// Valid reports whether g is a known group (including null).
func (g DHGroupID) Valid() bool { return g <= FFDHE8192 }

// String returns the kernel's name: "null", "ffdhe2048" ... "ffdhe8192".
func (g DHGroupID) String() string {
	switch g {
	case DHGroupNull:
		return "null"
	case FFDHE2048, FFDHE3072, FFDHE4096, FFDHE6144, FFDHE8192:
		return fmt.Sprintf("ffdhe%d", ffdheGroups[g].bits)
	}
	return fmt.Sprintf("dhgroup 0x%02x", uint8(g))
}

// ValueSize returns the length in bytes of the group's public value (DHVLEN),
// 0 for null.
func (g DHGroupID) ValueSize() int {
	if g == DHGroupNull || !g.Valid() {
		return 0
	}
	return ffdheGroups[g].bits / 8
}

// ParseDHGroup parses a group by name ("null", "ffdhe2048", ...) or number.
func ParseDHGroup(s string) (DHGroupID, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for _, g := range DHGroups {
		if t == g.String() {
			return g, nil
		}
	}
	if n, ok := parseSmallInt(t); ok && DHGroupID(n).Valid() {
		return DHGroupID(n), nil
	}
	return 0, fmt.Errorf("unknown DH-HMAC-CHAP DH group %q (want null or ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192)", s)
}

func parseSmallInt(t string) (int, bool) {
	base := 10
	if strings.HasPrefix(t, "0x") {
		t, base = t[2:], 16
	}
	if t == "" || len(t) > 2 {
		return 0, false
	}
	n := 0
	for _, c := range t {
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		default:
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}

// Reason is the reason code explanation of an AUTH_Failure1/Failure2
// message (the reason code itself is always 0x01, "authentication failure").
type Reason uint8

// Reason code explanations.
const (
	ReasonFailed            Reason = 0x01 // authentication failed (wrong response, missing key)
	ReasonNotUsable         Reason = 0x02 // authentication protocol not usable
	ReasonConcatMismatch    Reason = 0x03 // secure channel concatenation mismatch
	ReasonHashUnusable      Reason = 0x04 // hash function not usable
	ReasonDHGroupUnusable   Reason = 0x05 // DH group not usable
	ReasonIncorrectPayload  Reason = 0x06 // incorrect payload
	ReasonIncorrectProtocol Reason = 0x07 // incorrect protocol message
)

// ReasonCodeFailure is the only reason code (RESCODE) the kernel uses.
const ReasonCodeFailure = 0x01

var reasonText = map[Reason]string{
	ReasonFailed:            "authentication failed",
	ReasonNotUsable:         "authentication protocol not usable",
	ReasonConcatMismatch:    "secure channel concatenation mismatch",
	ReasonHashUnusable:      "hash function not usable",
	ReasonDHGroupUnusable:   "DH group not usable",
	ReasonIncorrectPayload:  "incorrect payload",
	ReasonIncorrectProtocol: "incorrect protocol message",
}

// String explains the reason.
func (r Reason) String() string {
	if s, ok := reasonText[r]; ok {
		return s
	}
	return fmt.Sprintf("reason 0x%02x", uint8(r))
}
