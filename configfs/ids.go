package configfs

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/nvmeof/nvmeof/fabrics"
)

// UUID is a namespace UUID (device_uuid; NVMe NIDT 3). The zero UUID means
// unset.
type UUID [16]byte

// NGUID is a namespace globally unique identifier (device_nguid; NIDT 2).
// The zero NGUID means unset.
type NGUID [16]byte

// EUI64 is an IEEE extended unique identifier (device_eui64; NIDT 1). The
// zero EUI64 means unset.
type EUI64 [8]byte

// IsZero reports whether u is unset.
func (u UUID) IsZero() bool { return u == UUID{} }

// IsZero reports whether g is unset.
func (g NGUID) IsZero() bool { return g == NGUID{} }

// IsZero reports whether e is unset.
func (e EUI64) IsZero() bool { return e == EUI64{} }

// String formats u as 8-4-4-4-12 lower-case hex digits.
func (u UUID) String() string { return fabrics.FormatUUID(u) }

// String formats g like a UUID, as the kernel shows device_nguid.
func (g NGUID) String() string { return fabrics.FormatUUID(g) }

// String formats e as 16 lower-case hex digits.
func (e EUI64) String() string { return hex.EncodeToString(e[:]) }

// ParseUUID parses a UUID in 8-4-4-4-12 hex form (fabrics.ParseUUID).
func ParseUUID(s string) (UUID, error) {
	u, err := fabrics.ParseUUID(s)
	return UUID(u), err
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// ParseNGUID parses 32 hex digits, optionally with '-' or ':' after any
// pair (the kernel's device_nguid rule; the UUID form is accepted).
func ParseNGUID(s string) (NGUID, error) {
	var g NGUID
	err := parseHexID(g[:], s)
	return g, err
}

// ParseEUI64 parses 16 hex digits, optionally with '-' or ':' after any
// pair, and an optional "eui." prefix (as nvme-cli prints it).
func ParseEUI64(s string) (EUI64, error) {
	var e EUI64
	if len(s) > 4 && s[:4] == "eui." {
		s = s[4:]
	}
	err := parseHexID(e[:], s)
	return e, err
}

func parseHexID(dst []byte, s string) error {
	p := 0
	for i := range dst {
		if p+2 > len(s) || !isHex(s[p]) || !isHex(s[p+1]) {
			return fmt.Errorf("%q is not %d hex digit pairs", s, len(dst))
		}
		v, _ := strconv.ParseUint(s[p:p+2], 16, 8)
		dst[i] = byte(v)
		p += 2
		if i < len(dst)-1 && p < len(s) && (s[p] == '-' || s[p] == ':') {
			p++
		}
	}
	if p != len(s) {
		return fmt.Errorf("%q is not %d hex digit pairs", s, len(dst))
	}
	return nil
}

// idNamespace is the RFC 9562 name-space UUID under which DeriveUUID makes
// version 5 UUIDs (itself a random UUID, fixed forever).
var idNamespace = UUID{0x6f, 0x9d, 0x2b, 0x41, 0x3c, 0x55, 0x4e, 0x0a, 0x9b, 0x1e, 0x27, 0x7d, 0x60, 0x8a, 0x53, 0xc4}

func idName(subnqn string, nsid uint32) []byte {
	return []byte(subnqn + "/namespaces/" + strconv.FormatUint(uint64(nsid), 10))
}

// DeriveUUID returns the UUID of namespace nsid of subsystem subnqn when
// none is configured: a version 5 (SHA-1, name-based) UUID of
// "<subnqn>/namespaces/<nsid>".
func DeriveUUID(subnqn string, nsid uint32) UUID {
	h := sha1.New()
	h.Write(idNamespace[:])
	h.Write(idName(subnqn, nsid))
	var u UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return u
}

// DeriveNGUID returns the NGUID of namespace nsid of subsystem subnqn when
// none is configured: the first 16 bytes of SHA-256 over "nguid:" and
// "<subnqn>/namespaces/<nsid>".
func DeriveNGUID(subnqn string, nsid uint32) NGUID {
	sum := sha256.Sum256(append([]byte("nguid:"), idName(subnqn, nsid)...))
	var g NGUID
	copy(g[:], sum[:])
	return g
}

// DeriveEUI64 returns the EUI-64 of namespace nsid of subsystem subnqn when
// none is configured: the first 8 bytes of SHA-256 over "eui64:" and
// "<subnqn>/namespaces/<nsid>", marked locally administered and unicast
// (no IEEE OUI is ours to use).
func DeriveEUI64(subnqn string, nsid uint32) EUI64 {
	sum := sha256.Sum256(append([]byte("eui64:"), idName(subnqn, nsid)...))
	var e EUI64
	copy(e[:], sum[:])
	e[0] = e[0]&^0x01 | 0x02
	return e
}

// IDs returns the namespace's identifiers within subsystem subnqn: the
// configured ones, and derived ones (DeriveUUID, DeriveNGUID, DeriveEUI64)
// for those left unset.
func (ns *Namespace) IDs(subnqn string) (UUID, NGUID, EUI64) {
	u, g, e := ns.DeviceUUID, ns.DeviceNGUID, ns.DeviceEUI64
	if u.IsZero() {
		u = DeriveUUID(subnqn, ns.NSID)
	}
	if g.IsZero() {
		g = DeriveNGUID(subnqn, ns.NSID)
	}
	if e.IsZero() {
		e = DeriveEUI64(subnqn, ns.NSID)
	}
	return u, g, e
}
