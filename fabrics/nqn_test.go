package fabrics

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateNQN holds the cases of both former validators (this
// package's and package configfs's, merged in ValidateNQN): want is "" for
// a valid NQN, else a substring of the reason.
func TestValidateNQN(t *testing.T) {
	long := "nqn.2014-08.org.nvmexpress:" + strings.Repeat("x", MaxNQNLen-len("nqn.2014-08.org.nvmexpress:"))
	tests := []struct {
		nqn  string
		want string
	}{
		// Seen in testdata/pcap.
		{"nqn.2014-08.org.nvmexpress.discovery", ""},
		{"nqn.2014-08.org.nvmexpress:kpeer-target", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-000000000000", ""},
		// Common forms.
		{"nqn.2016-06.io.spdk:cnode1", ""},
		{"nqn.2026-11.io.nvmeof:disk0", ""},
		{"nqn.2014-08.com.example:nvme:nvm-subsystem-sn-d78432", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:5A3C0F6E-1B2D-4E5F-8A9B-0C1D2E3F4A5B", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e", ""},
		{"nqn.1999-01.com.3com:x", ""},
		{"nqn.2014-08.com.example:dévelopment/ü", ""}, // UTF-8 user string; '/' is configfs's concern
		{"nqn.2026-11.io.nvmeof:ünïcödé-näme", ""},
		{"nqn.2014-08.com.example:a:b:c", ""}, // more colons in the user string
		{"nqn.2026-11.localhost:disk0", ""},   // one label, as SPDK allows (configfs used to want two)
		{long, ""},
		{long + "x", "224 bytes long, more than 223"},
		{"", "empty"},
		{"nqn.", "date code"},
		{"testnqn", `does not start with "nqn."`},
		{"iqn.2014-08.org.example:x", `does not start with "nqn."`},
		{"NQN.2014-08.org.example:x", `does not start with "nqn."`},
		{"nqn.14-08.org.example:x", "date code"},
		{"nqn.2014-8.org.example:x", "date code"},
		{"nqn.2026-11io.nvmeof:disk0", "date code"},
		{"nqn.2014-00.org.example:x", "month 00"},
		{"nqn.2014-13.org.example:x", "month 13"},
		{"nqn.0000-01.org.example:x", "year 0000"},
		{"nqn.2014-08:x", "date code"},                            // no reverse domain
		{"nqn.2014-08.:x", "no reverse domain"},                   // empty domain
		{"nqn.2014-08.org..example:x", `domain label ""`},         // empty label
		{"nqn.2014-08.org.example.:x", `domain label ""`},         // trailing dot
		{"nqn.2014-08.org.exa_mple:x", `domain label "exa_mple"`}, // underscore in a label
		{"nqn.2026-11.io.-nvmeof:disk0", `domain label "-nvmeof"`},
		{"nqn.2026-11.io.nvmeof-:disk0", `domain label "nvmeof-"`},
		{"nqn.2014-08.org.example:", "empty name after ':'"},
		{"nqn.2014-08.org.example:a\x00b", "not allowed"},    // NUL
		{"nqn.2014-08.org.example:a\nb", "not allowed"},      // control character
		{"nqn.2026-11.io.nvmeof:disk 0", "not allowed"},      // space
		{"nqn.2026-11.io.nvmeof:disk\u00a00", "not allowed"}, // no-break space
		{"nqn.2026-11.io.nvmeof:disk\u200b0", "not allowed"}, // zero-width space (format character)
		{"nqn.2014-08.org.example:\xff", "not UTF-8"},
		{"nqn.2014-08.org." + strings.Repeat("a", 64) + ":x", "domain label"},
		{"nqn.2014-08.org." + strings.Repeat("a", 63) + ":x", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:not-a-uuid", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-00000000000", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000000", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565_7200-4000-8000-000000000000", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:6b70656g-7200-4000-8000-000000000000", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e:x", "not a UUID"},
	}
	for _, tt := range tests {
		err := ValidateNQN(tt.nqn)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateNQN(%q) = %v, want nil", tt.nqn, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ValidateNQN(%q) = %v, want an error containing %q", tt.nqn, err, tt.want)
		}
		var ne *NQNError
		if err != nil && (!errors.Is(err, ErrInvalidNQN) || !errors.As(err, &ne) || ne.NQN != tt.nqn) {
			t.Errorf("%q: %v is not an *NQNError wrapping ErrInvalidNQN", tt.nqn, err)
		}
	}
}

func TestCheckNQN(t *testing.T) {
	tests := []struct {
		nqn       string
		warn, err string // "" for none, else a substring
	}{
		{"nqn.2026-11.io.nvmeof:disk0", "", ""},
		{DiscoveryNQN, "", ""},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e-8f2d-4c7a-9e01-3b5d7f9a1c2e", "", ""},
		// What nvmet accepts and nvmetcli examples use: safe, not conforming.
		{"testnqn", `does not start with "nqn."`, ""},
		{"nqn.2026-13.io.nvmeof:disk0", "month 13", ""},
		{"nqn.2026-11.io.nv_meof:disk0", "domain label", ""},
		{"nqn.2026-11.io.nvmeof:", "empty name", ""},
		{"host-1.example.com", `does not start with "nqn."`, ""},
		{"ünïcödé", `does not start with "nqn."`, ""},
		// Unsafe: errors.
		{"", "", "empty"},
		{strings.Repeat("x", MaxNQNLen+1), "", "more than 223"},
		{"test nqn", "", "not allowed"},
		{"test\tnqn", "", "not allowed"},
		{"testnqn\n", "", "not allowed"},
		{"test\x00nqn", "", "not allowed"},
		{"\xfftestnqn", "", "not UTF-8"},
		// A name in the UUID form must be one.
		{"nqn.2014-08.org.nvmexpress:uuid:", "", "not a UUID"},
		{"nqn.2014-08.org.nvmexpress:uuid:5a3c6b1e", "", "not a UUID"},
	}
	for _, tt := range tests {
		warn, err := CheckNQN(tt.nqn)
		if !matches(warn, tt.warn) || !matches(err, tt.err) {
			t.Errorf("CheckNQN(%q) = %v, %v; want warning %q, error %q", tt.nqn, warn, err, tt.warn, tt.err)
		}
		for _, e := range []error{warn, err} {
			if e != nil && !errors.Is(e, ErrInvalidNQN) {
				t.Errorf("%q: %v does not wrap ErrInvalidNQN", tt.nqn, e)
			}
		}
		// A valid NQN is never a warning or an error.
		if (ValidateNQN(tt.nqn) == nil) != (warn == nil && err == nil) {
			t.Errorf("%q: CheckNQN and ValidateNQN disagree", tt.nqn)
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

func TestHostNQN(t *testing.T) {
	// The kernel host of testdata/pcap: HOSTID 6b706565720040008000000000000000.
	id := [16]byte{0x6b, 0x70, 0x65, 0x65, 0x72, 0x00, 0x40, 0x00, 0x80, 0x00}
	nqn := HostNQNFromUUID(id)
	if nqn != "nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-000000000000" {
		t.Errorf("%q", nqn)
	}
	if err := ValidateNQN(nqn); err != nil {
		t.Error(err)
	}
	u, ok := UUIDFromNQN(nqn)
	if !ok || u != id {
		t.Errorf("UUIDFromNQN %x %v", u, ok)
	}
	if _, ok := UUIDFromNQN("nqn.2014-08.org.nvmexpress:kpeer-target"); ok {
		t.Error("UUID from a non-UUID NQN")
	}
	if _, err := ParseUUID("6B706565-7200-4000-8000-00000000000A"); err != nil {
		t.Error(err)
	}
	if got := FormatUUID([16]byte{15: 0xab}); got != "00000000-0000-0000-0000-0000000000ab" {
		t.Error(got)
	}
}

func TestConnectData(t *testing.T) {
	d := NewConnectData()
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	d.SetHostID(id)
	d.SetCntlID(CntlIDDynamic)
	if err := d.SetSubNQN("nqn.2014-08.org.nvmexpress:kpeer-target"); err != nil {
		t.Fatal(err)
	}
	if err := d.SetHostNQN(HostNQNFromUUID(id)); err != nil {
		t.Fatal(err)
	}
	if d[16] != 0xff || d[17] != 0xff || string(d[256:260]) != "nqn." || d[256+39] != 0 || string(d[512:516]) != "nqn." {
		t.Errorf("layout % x", []byte(d[:20]))
	}
	p, err := ParseConnectData(append([]byte(d), 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if p.HostID() != id || p.CntlID() != 0xffff || p.SubNQN() != "nqn.2014-08.org.nvmexpress:kpeer-target" ||
		p.HostNQN() != HostNQNFromUUID(id) || len(p) != ConnectDataLen {
		t.Errorf("decoded %x %#x %q %q", p.HostID(), p.CntlID(), p.SubNQN(), p.HostNQN())
	}
	// A field without NUL: all 256 bytes (the target must then reject it).
	full := strings.Repeat("n", 256)
	copy(d[ConnectDataOffSubNQN:], full)
	if d.SubNQN() != full {
		t.Error("unterminated field")
	}
	if err := d.SetSubNQN(full); err == nil {
		t.Error("256-byte NQN fits")
	}
	if err := d.SetSubNQN(full[:255]); err != nil || d.SubNQN() != full[:255] {
		t.Errorf("255-byte NQN: %v", err)
	}
	// Shorter names clear what was there.
	if err := d.SetSubNQN("nqn.2014-08.x:y"); err != nil || d.SubNQN() != "nqn.2014-08.x:y" || d[ConnectDataOffSubNQN+255] != 0 {
		t.Errorf("rewrite: %q", d.SubNQN())
	}
	if _, err := ParseConnectData(make([]byte, 1023)); !errors.Is(err, ErrShort) {
		t.Errorf("1023 bytes: %v", err)
	}
}
