package nvme

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// ErrTruncated is wrapped by every error a decoder returns for a buffer that
// is shorter than the structure it holds.
var ErrTruncated = errors.New("buffer too short")

// ErrMalformed is wrapped by decoder and encoder errors for contents that
// break the structure's rules (a descriptor running past its list, a count
// that does not fit, a string that does not fit its field).
var ErrMalformed = errors.New("malformed")

// need returns an error wrapping ErrTruncated when b is shorter than n bytes.
func need(what string, b []byte, n int) error {
	if len(b) < n {
		return fmt.Errorf("nvme: %s: %d bytes, need %d: %w", what, len(b), n, ErrTruncated)
	}
	return nil
}

// Uint128 is an unsigned 128-bit little-endian counter as used by the
// SMART / Health log page and by capacity fields of the Identify structures.
type Uint128 struct {
	Lo, Hi uint64
}

// U128 returns v as a Uint128.
func U128(v uint64) Uint128 { return Uint128{Lo: v} }

// Uint64 returns the value and true when it fits in 64 bits, else the
// saturated value math.MaxUint64 and false.
func (u Uint128) Uint64() (uint64, bool) {
	if u.Hi != 0 {
		return ^uint64(0), false
	}
	return u.Lo, true
}

// Big returns the value as a big.Int.
func (u Uint128) Big() *big.Int {
	v := new(big.Int).SetUint64(u.Hi)
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(u.Lo))
}

// String returns the value in decimal.
func (u Uint128) String() string { return u.Big().String() }

// Bytes returns the 16 bytes of the value as stored on the wire
// (least significant byte first).
func (u Uint128) Bytes() (b [16]byte) {
	putUint128(b[:], u)
	return b
}

func getUint128(b []byte) Uint128 {
	return Uint128{Lo: binary.LittleEndian.Uint64(b), Hi: binary.LittleEndian.Uint64(b[8:])}
}

func putUint128(b []byte, v Uint128) {
	binary.LittleEndian.PutUint64(b, v.Lo)
	binary.LittleEndian.PutUint64(b[8:], v.Hi)
}

func getLE24(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }

func putLE24(b []byte, v uint32) {
	b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16)
}

// getASCII returns a space-padded ASCII field without its padding (trailing
// spaces and NUL bytes, which some controllers use instead).
func getASCII(b []byte) string { return strings.TrimRight(string(b), " \x00") }

// putASCII stores s left-justified and space-padded in b. NVMe string fields
// hold printable ASCII (20h to 7Eh).
func putASCII(b []byte, field, s string) error {
	if len(s) > len(b) {
		return fmt.Errorf("nvme: %s %q: %d bytes, the field holds %d: %w", field, s, len(s), len(b), ErrMalformed)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return fmt.Errorf("nvme: %s %q: byte %d is not printable ASCII: %w", field, s, i, ErrMalformed)
		}
	}
	n := copy(b, s)
	for i := n; i < len(b); i++ {
		b[i] = ' '
	}
	return nil
}

// getCString returns a NUL-terminated (or field-filling) string.
func getCString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// putCString stores s NUL-terminated and NUL-padded in b (at most len(b)-1
// bytes, so that a NUL always follows).
func putCString(b []byte, field, s string) error {
	if len(s) >= len(b) {
		return fmt.Errorf("nvme: %s %q: %d bytes, the field holds %d and a NUL: %w", field, s, len(s), len(b)-1, ErrMalformed)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("nvme: %s %q: contains a NUL byte: %w", field, s, ErrMalformed)
	}
	n := copy(b, s)
	clear(b[n:])
	return nil
}
