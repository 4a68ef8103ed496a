package fabrics

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNQNLen is the longest NQN in bytes, without its terminating NUL
// (NVMe base 2.0 section 4.5; Linux NVMF_NQN_SIZE is 223 and the Connect
// data field holds 256 bytes).
const MaxNQNLen = 223

// UUIDNQNPrefix starts an NQN of the UUID form.
const UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// ErrInvalidNQN is wrapped by the errors ValidateNQN returns.
var ErrInvalidNQN = errors.New("invalid NQN")

// ValidateNQN checks that s is an NVMe Qualified Name (NVMe base 2.0
// section 4.5) in one of its two forms:
//
//   - nqn.yyyy-mm.reverse.domain[:user-string], e.g.
//     "nqn.2014-08.org.nvmexpress:kpeer-target" or the discovery NQN
//     "nqn.2014-08.org.nvmexpress.discovery";
//   - nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
//
// What Linux accepts, and the choices made here:
//
//   - Length: 1 to 223 bytes (NVMe: "shall not exceed 223 bytes"). The
//     Linux host refuses subsystem NQNs of 223 bytes or more (nvmf_parse_options:
//     strlen >= NVMF_NQN_SIZE); nvmet truncates to 223 (kstrndup) and
//     otherwise checks nothing but the trailing NUL of the Connect data
//     fields. We follow the specification (223 allowed).
//   - Characters: valid UTF-8 (the specification's encoding), no NUL and no
//     other control characters (they cannot survive configfs, shells or
//     nvme-cli's output).
//   - "nqn." then a date code yyyy-mm with a month 01..12 and a year
//     from 0001 (SPDK checks only the digits; we also reject month 00 or 13).
//   - The reverse domain is non-empty, its labels are non-empty and made of
//     letters, digits and hyphens, at most 63 bytes each (RFC 1035 labels,
//     as SPDK checks, except that a label may start with a digit: such
//     domains exist).
//   - The part after the first ':' (the user string) is anything non-empty.
//     The colon itself is optional, so that names like the discovery NQN
//     pass (SPDK requires it and special-cases the discovery NQN).
//   - A name that starts with the UUID prefix must be that prefix followed
//     by exactly a 36-character UUID in 8-4-4-4-12 hexadecimal groups
//     (either case), as SPDK checks.
func ValidateNQN(s string) error {
	if s == "" {
		return fmt.Errorf("fabrics: %w: empty", ErrInvalidNQN)
	}
	if len(s) > MaxNQNLen {
		return fmt.Errorf("fabrics: %w: %d bytes, more than %d", ErrInvalidNQN, len(s), MaxNQNLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("fabrics: %w: %q is not UTF-8", ErrInvalidNQN, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("fabrics: %w: %q has a control character", ErrInvalidNQN, s)
		}
	}
	if rest, ok := strings.CutPrefix(s, UUIDNQNPrefix); ok {
		if _, err := ParseUUID(rest); err != nil {
			return fmt.Errorf("fabrics: %w: %q: %w", ErrInvalidNQN, s, err)
		}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "nqn.")
	if !ok {
		return fmt.Errorf("fabrics: %w: %q does not start with \"nqn.\"", ErrInvalidNQN, s)
	}
	if len(rest) < 8 || !isDigits(rest[0:4]) || rest[4] != '-' || !isDigits(rest[5:7]) || rest[7] != '.' {
		return fmt.Errorf("fabrics: %w: %q has no yyyy-mm date code", ErrInvalidNQN, s)
	}
	if rest[0:4] == "0000" {
		return fmt.Errorf("fabrics: %w: %q: year 0000", ErrInvalidNQN, s)
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return fmt.Errorf("fabrics: %w: %q: month %s", ErrInvalidNQN, s, rest[5:7])
	}
	domain, user, hasUser := strings.Cut(rest[8:], ":")
	if domain == "" {
		return fmt.Errorf("fabrics: %w: %q has no reverse domain name", ErrInvalidNQN, s)
	}
	for label := range strings.SplitSeq(domain, ".") {
		if err := checkLabel(label); err != nil {
			return fmt.Errorf("fabrics: %w: %q: %w", ErrInvalidNQN, s, err)
		}
	}
	if hasUser && user == "" {
		return fmt.Errorf("fabrics: %w: %q has an empty string after ':'", ErrInvalidNQN, s)
	}
	return nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func checkLabel(l string) error {
	if l == "" {
		return errors.New("empty domain label")
	}
	if len(l) > 63 {
		return fmt.Errorf("domain label %q longer than 63 bytes", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("domain label %q has %q", l, c)
		}
	}
	return nil
}

// ParseUUID parses a UUID in its 36-character text form
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits of either case) into
// its 16 bytes in text order.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%q is not a UUID (8-4-4-4-12 hex digits)", s)
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("%q is not a UUID: %w", s, err)
	}
	return u, nil
}

// FormatUUID formats 16 bytes as a lower-case UUID string.
func FormatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// HostNQNFromUUID returns the host NQN of the UUID form for u, as nvme-cli's
// gen-hostnqn and the Linux host's default
// ("nqn.2014-08.org.nvmexpress:uuid:" + the UUID in lower case). Linux
// uses the same 16 bytes as the host identifier (HOSTID) in Connect data.
func HostNQNFromUUID(u [16]byte) string { return UUIDNQNPrefix + FormatUUID(u) }

// UUIDFromNQN returns the UUID of an NQN of the UUID form.
func UUIDFromNQN(nqn string) ([16]byte, bool) {
	rest, ok := strings.CutPrefix(nqn, UUIDNQNPrefix)
	if !ok {
		return [16]byte{}, false
	}
	u, err := ParseUUID(rest)
	return u, err == nil
}
