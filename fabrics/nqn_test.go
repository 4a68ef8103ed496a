package fabrics

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNQN(t *testing.T) {
	long := "nqn.2014-08.org.nvmexpress:" + strings.Repeat("x", MaxNQNLen-len("nqn.2014-08.org.nvmexpress:"))
	tests := []struct {
		nqn string
		ok  bool
	}{
		// Seen in testdata/pcap.
		{"nqn.2014-08.org.nvmexpress.discovery", true},
		{"nqn.2014-08.org.nvmexpress:kpeer-target", true},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-000000000000", true},
		// Common forms.
		{"nqn.2016-06.io.spdk:cnode1", true},
		{"nqn.2026-11.io.nvmeof:disk0", true},
		{"nqn.2014-08.org.nvmexpress:uuid:5A3C0F6E-1B2D-4E5F-8A9B-0C1D2E3F4A5B", true},
		{"nqn.1999-01.com.3com:x", true},
		{"nqn.2014-08.com.example:dévelopment/ü", true}, // UTF-8 user string
		{"nqn.2014-08.com.example:a:b:c", true},         // more colons in the user string
		{long, true},
		{long + "x", false}, // 224 bytes
		{"", false},
		{"nqn.", false},
		{"iqn.2014-08.org.example:x", false},
		{"NQN.2014-08.org.example:x", false},
		{"nqn.14-08.org.example:x", false},
		{"nqn.2014-8.org.example:x", false},
		{"nqn.2014-00.org.example:x", false},
		{"nqn.2014-13.org.example:x", false},
		{"nqn.0000-01.org.example:x", false},
		{"nqn.2014-08:x", false},                  // no reverse domain
		{"nqn.2014-08.:x", false},                 // empty domain
		{"nqn.2014-08.org..example:x", false},     // empty label
		{"nqn.2014-08.org.example.:x", false},     // trailing dot
		{"nqn.2014-08.org.exa_mple:x", false},     // underscore in a label
		{"nqn.2014-08.org.example:", false},       // empty user string
		{"nqn.2014-08.org.example:a\x00b", false}, // NUL
		{"nqn.2014-08.org.example:a\nb", false},   // control character
		{"nqn.2014-08.org.example:\xff", false},   // not UTF-8
		{"nqn.2014-08.org." + strings.Repeat("a", 64) + ":x", false},
		{"nqn.2014-08.org." + strings.Repeat("a", 63) + ":x", true},
		{"nqn.2014-08.org.nvmexpress:uuid:", false},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-00000000000", false},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-0000000000000", false},
		{"nqn.2014-08.org.nvmexpress:uuid:6b706565_7200-4000-8000-000000000000", false},
		{"nqn.2014-08.org.nvmexpress:uuid:6b70656g-7200-4000-8000-000000000000", false},
	}
	for _, tt := range tests {
		err := ValidateNQN(tt.nqn)
		if (err == nil) != tt.ok {
			t.Errorf("%q: %v, want ok=%v", tt.nqn, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidNQN) {
			t.Errorf("%q: %v does not wrap ErrInvalidNQN", tt.nqn, err)
		}
	}
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
