package fabrics

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNQNLen is the longest NQN in bytes, without its terminating NUL
// (NVMe base 2.0 section 4.5; Linux NVMF_NQN_SIZE is 223 and the Connect
// data field holds 256 bytes).
const MaxNQNLen = 223

// UUIDNQNPrefix starts an NQN of the UUID form.
const UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// ErrInvalidNQN is wrapped by the errors ValidateNQN and CheckNQN return
// (an *NQNError).
var ErrInvalidNQN = errors.New("invalid NQN")

// NQNError says why a name is not a valid NQN. It wraps ErrInvalidNQN.
type NQNError struct {
	NQN    string
	Reason string // e.g. `does not start with "nqn."`
}

// Error formats the error as `fabrics: invalid NQN "name": reason`.
func (e *NQNError) Error() string {
	return fmt.Sprintf("fabrics: %v %q: %s", ErrInvalidNQN, e.NQN, e.Reason)
}

// Unwrap returns ErrInvalidNQN.
func (e *NQNError) Unwrap() error { return ErrInvalidNQN }

func nqnError(nqn, format string, args ...any) error {
	return &NQNError{NQN: nqn, Reason: fmt.Sprintf(format, args...)}
}

// ValidateNQN checks that s is an NVMe Qualified Name (NVMe base 2.0
// section 4.5) in one of its two forms:
//
//   - nqn.yyyy-mm.reverse.domain[:user-string], e.g.
//     "nqn.2014-08.org.nvmexpress:kpeer-target" or the discovery NQN
//     "nqn.2014-08.org.nvmexpress.discovery";
//   - nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
//
// This is the one NQN rule of the module (package configfs calls it). What
// Linux and SPDK accept, and the choices made here:
//
//   - Every NQN is first a safe name (see CheckNQN): 1 to 223 bytes (NVMe:
//     "shall not exceed 223 bytes"; the Linux host refuses subsystem NQNs
//     of 223 bytes or more in nvmf_parse_options, nvmet truncates to 223
//     with kstrndup; we follow the specification), valid UTF-8 (the
//     specification's encoding), only printable characters and no
//     whitespace (control characters and spaces cannot survive configfs
//     names, shells or nvme-cli's output).
//   - "nqn." then a date code yyyy-mm with a month 01..12 and a year
//     from 0001 (SPDK checks only the digits; we also reject month 00 or
//     13 and year 0000).
//   - The reverse domain has one or more labels (SPDK accepts a single
//     label too), each 1 to 63 letters, digits and hyphens that neither
//     starts nor ends with a hyphen (RFC 1123 host labels, as SPDK checks,
//     except that SPDK also wants a letter first: domains starting with a
//     digit exist).
//   - The part after the first ':' (the user string) is non-empty; it may
//     hold more colons and any printable UTF-8 except whitespace. The
//     colon itself is optional, so that names like the discovery NQN pass
//     (SPDK requires it and special-cases the discovery NQN).
//   - A name that starts with the UUID prefix must be that prefix followed
//     by exactly a 36-character UUID in 8-4-4-4-12 hexadecimal groups
//     (either case), as SPDK checks.
//
// Errors are *NQNError values wrapping ErrInvalidNQN.
func ValidateNQN(s string) error {
	if err := checkNQNSafe(s); err != nil {
		return err
	}
	if rest, ok := strings.CutPrefix(s, UUIDNQNPrefix); ok {
		if _, err := ParseUUID(rest); err != nil {
			return nqnError(s, "%v", err)
		}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "nqn.")
	if !ok {
		return nqnError(s, `does not start with "nqn." (want nqn.yyyy-mm.reverse.domain:name)`)
	}
	if len(rest) < 8 || !isDigits(rest[0:4]) || rest[4] != '-' || !isDigits(rest[5:7]) || rest[7] != '.' {
		return nqnError(s, `want a date code yyyy-mm and '.' after "nqn."`)
	}
	if rest[0:4] == "0000" {
		return nqnError(s, "year 0000 in the date code")
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return nqnError(s, "month %s is not 01..12", rest[5:7])
	}
	domain, user, hasUser := strings.Cut(rest[8:], ":")
	if domain == "" {
		return nqnError(s, "no reverse domain name after the date code")
	}
	for label := range strings.SplitSeq(domain, ".") {
		if !validLabel(label) {
			return nqnError(s, "domain label %q must be 1-63 letters, digits or inner hyphens", label)
		}
	}
	if hasUser && user == "" {
		return nqnError(s, "empty name after ':'")
	}
	return nil
}

// CheckNQN sorts a name into one of three kinds, for configurations that
// must accept what the Linux target accepts (nvmet takes any configfs
// directory name as a subsystem or host NQN; nvmetcli examples use names
// like "testnqn"):
//
//   - err != nil: the name is not safe to use at all: empty, longer than
//     223 bytes (MaxNQNLen), not UTF-8, or holding whitespace or a
//     non-printable character; or it starts with the UUID prefix but is
//     not a valid UUID NQN (a name that claims the UUID form must have it).
//   - warning != nil: the name is safe but not a conforming NQN
//     (ValidateNQN's error): hosts and tools that check NQNs, like SPDK or
//     this module's initiator, may refuse it.
//   - both nil: a valid NQN.
//
// Both errors are *NQNError values wrapping ErrInvalidNQN.
func CheckNQN(s string) (warning, err error) {
	if err := checkNQNSafe(s); err != nil {
		return nil, err
	}
	if err := ValidateNQN(s); err != nil {
		if strings.HasPrefix(s, UUIDNQNPrefix) {
			return nil, err
		}
		return err, nil
	}
	return nil, nil
}

// checkNQNSafe checks what every name used as an NQN must be: 1 to
// MaxNQNLen bytes of printable UTF-8 without whitespace.
func checkNQNSafe(s string) error {
	if s == "" {
		return nqnError(s, "empty")
	}
	if len(s) > MaxNQNLen {
		return nqnError(s, "%d bytes long, more than %d", len(s), MaxNQNLen)
	}
	if !utf8.ValidString(s) {
		return nqnError(s, "not UTF-8")
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return nqnError(s, "character %q not allowed (no whitespace or control characters)", r)
		}
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

// validLabel reports whether l is a domain label: 1 to 63 letters, digits
// and hyphens, not starting or ending with a hyphen.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
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
