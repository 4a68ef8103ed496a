package configfs

import (
	"errors"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
)

// TestValidateNQN checks the configfs wording around fabrics.ValidateNQN
// (whose table holds the NQN rule's cases, this package's former ones
// among them) and the configfs-only rule: no '/'.
func TestValidateNQN(t *testing.T) {
	long := "nqn.2026-11.io.nvmeof:" + strings.Repeat("x", NQNMaxLen-len("nqn.2026-11.io.nvmeof:"))
	tests := []struct {
		nqn  string
		want string // "" for valid, else a substring of the error
	}{
		{"nqn.2026-11.io.nvmeof:disk0", ""},
		{"nqn.2014-08.com.example:nvme:nvm-subsystem-sn-d78432", ""},
		{"nqn.2016-06.io.spdk:cnode1", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:5A3C6B1E-8F2D-4C7A-9E01-3B5D7F9A1C2E", ""},
		{DiscoveryNQN, ""},
		{"nqn.2026-11.io.nvmeof:ünïcödé-näme", ""},
		// One domain label: the merged rule follows SPDK (this package used
		// to want two).
		{"nqn.2026-11.localhost:disk0", ""},
		{long, ""},
		{long + "x", `NQN "` + long + `x": 224 bytes long, more than 223`},
		{"", `NQN "": empty`},
		{"testnqn", `NQN "testnqn": does not start with "nqn."`},
		{"iqn.2026-11.io.nvmeof:disk0", `does not start with "nqn."`},
		{"nqn.26-11.io.nvmeof:disk0", "date"},
		{"nqn.2026-1.io.nvmeof:disk0", "date"},
		{"nqn.2026-13.io.nvmeof:disk0", "month 13"},
		{"nqn.2026-00.io.nvmeof:disk0", "month 00"},
		{"nqn.2026-11io.nvmeof:disk0", "date"},
		{"nqn.2026-11.io..nvmeof:disk0", `domain label ""`},
		{"nqn.2026-11.io.-nvmeof:disk0", "domain label"},
		{"nqn.2026-11.io.nv_meof:disk0", "domain label"},
		{"nqn.2026-11.io.nvmeof:", "empty name"},
		{"nqn.2026-11.io.nvmeof:disk 0", "not allowed"},
		{"nqn.2026-11.io.nvmeof:disk/0", "'/' not allowed"},
		{"nqn.2026-11.io.nvmeof:disk\x00", "not allowed"},
		{"nqn.2026-11.io.nvmeof:\xff", "UTF-8"},
		{"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e:x", "not a UUID"},
	}
	for _, tt := range tests {
		err := ValidateNQN(tt.nqn)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateNQN(%q) = %v, want nil", tt.nqn, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ValidateNQN(%q) = %v, want error containing %q", tt.nqn, err, tt.want)
		}
		if err != nil && strings.ContainsRune(tt.nqn, '/') == errors.Is(err, fabrics.ErrInvalidNQN) {
			t.Errorf("ValidateNQN(%q) = %v: wraps fabrics.ErrInvalidNQN %v", tt.nqn, err, errors.Is(err, fabrics.ErrInvalidNQN))
		}
	}
}

func TestCheckNQN(t *testing.T) {
	tests := []struct {
		nqn       string
		warn, err string // "" for none, else a substring
	}{
		{"nqn.2026-11.io.nvmeof:disk0", "", ""},
		{"testnqn", `NQN "testnqn": does not start with "nqn." (want nqn.yyyy-mm.reverse.domain:name); accepted as the Linux target accepts it`, ""},
		{"nqn.2026-13.io.nvmeof:disk0", "month 13", ""},
		{"hostnqn-1", `does not start with "nqn."`, ""},
		{"test/nqn", "", `NQN "test/nqn": character '/' not allowed`},
		{"nqn.2026-11.io.nvmeof:disk/0", "", "'/' not allowed"},
		{"test nqn", "", `NQN "test nqn": character ' ' not allowed`},
		{"", "", "empty"},
		{strings.Repeat("n", NQNMaxLen+1), "", "more than 223"},
		{UUIDNQNPrefix + "not-a-uuid", "", "not a UUID"},
	}
	for _, tt := range tests {
		warn, err := CheckNQN(tt.nqn)
		if !matches(warn, tt.warn) || !matches(err, tt.err) {
			t.Errorf("CheckNQN(%q) = %v, %v; want warning %q, error %q", tt.nqn, warn, err, tt.warn, tt.err)
		}
		if warn != nil && !errors.Is(warn, fabrics.ErrInvalidNQN) {
			t.Errorf("CheckNQN(%q): warning %v does not wrap fabrics.ErrInvalidNQN", tt.nqn, warn)
		}
	}
}

// matches reports whether err is nil when want is "", else whether it
// contains want.
func matches(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}
