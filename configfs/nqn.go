package configfs

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NQN limits and well-known names (NVMe base specification, "NVMe
// Qualified Names").
const (
	// NQNMaxLen is the longest NQN in bytes (NVMF_NQN_SIZE).
	NQNMaxLen = 223
	// DiscoveryNQN is the well-known NQN of discovery controllers.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
	// UUIDNQNPrefix starts NQNs of the UUID form.
	UUIDNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"
)

// ValidateNQN checks that nqn is an NVMe Qualified Name of one of the two
// forms of the NVMe base specification:
//
//   - nqn.yyyy-mm.reverse.domain[:string]: a date (month 01..12), a
//     reversed domain name of at least two labels of letters, digits and
//     hyphens, then optionally ':' and a non-empty string of printable
//     characters other than '/' (which cannot appear in a configfs name);
//   - nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
//
// It must be valid UTF-8 of at most NQNMaxLen bytes. (The kernel target
// itself accepts any name; nvmetcli examples use names like "testnqn",
// which we refuse.)
func ValidateNQN(nqn string) error {
	if nqn == "" {
		return errors.New("empty NQN")
	}
	if len(nqn) > NQNMaxLen {
		return fmt.Errorf("NQN is %d bytes long, more than %d", len(nqn), NQNMaxLen)
	}
	if !utf8.ValidString(nqn) {
		return errors.New("NQN is not valid UTF-8")
	}
	if rest, ok := strings.CutPrefix(nqn, UUIDNQNPrefix); ok {
		if !isUUIDForm(rest) {
			return fmt.Errorf("NQN %q: %q after %q is not a UUID (8-4-4-4-12 hex digits)", nqn, rest, UUIDNQNPrefix)
		}
		return nil
	}
	rest, ok := strings.CutPrefix(nqn, "nqn.")
	if !ok {
		return fmt.Errorf("NQN %q does not start with \"nqn.\" (want nqn.yyyy-mm.reverse.domain:name)", nqn)
	}
	// yyyy-mm.
	if len(rest) < 8 || !allDigits(rest[0:4]) || rest[4] != '-' || !allDigits(rest[5:7]) || rest[7] != '.' {
		return fmt.Errorf("NQN %q: want a date yyyy-mm after \"nqn.\"", nqn)
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return fmt.Errorf("NQN %q: month %s is not 01..12", nqn, rest[5:7])
	}
	domain, name, hasName := strings.Cut(rest[8:], ":")
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return fmt.Errorf("NQN %q: %q is not a reversed domain name (want at least two labels, like com.example)", nqn, domain)
	}
	for _, l := range labels {
		if !validLabel(l) {
			return fmt.Errorf("NQN %q: domain label %q must be 1-63 letters, digits or inner hyphens", nqn, l)
		}
	}
	if hasName {
		if name == "" {
			return fmt.Errorf("NQN %q: empty name after ':'", nqn)
		}
		for _, r := range name {
			if r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
				return fmt.Errorf("NQN %q: character %q not allowed (no '/', spaces or control characters)", nqn, r)
			}
		}
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
