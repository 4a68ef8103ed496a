package fabrics

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func sampleLog() DiscoveryLog {
	return DiscoveryLog{
		GenCtr: 3,
		NumRec: 2,
		Entries: []DiscoveryRecord{
			{TRType: TRTypeRDMA, AdrFam: AdrFamIPv4, SubType: SubTypeCurrentDiscovery, TREQ: TREQNotSpecified | TREQDisableSQFlow,
				PortID: 1, CntlID: CntlIDDynamic, ASQSZ: 32, TRSVCID: "4420", TRADDR: "192.0.2.2", SubNQN: DiscoveryNQN,
				TSAS: RDMATSAS(RDMAQPTypeRC, RDMAPRTypeNone, RDMACMSRDMACM, 0)},
			{TRType: TRTypeTCP, AdrFam: AdrFamIPv6, SubType: SubTypeNVM, TREQ: TREQNotRequired, PortID: 2,
				CntlID: CntlIDDynamic, ASQSZ: 32, EFlags: EFlagsEPCSD, TRSVCID: "4420", TRADDR: "2001:db8::1",
				SubNQN: "nqn.2014-08.org.nvmexpress:kpeer-target", TSAS: TCPTSAS(TCPSecTypeNone)},
		},
	}
}

func TestDiscoveryLogRoundTrip(t *testing.T) {
	l := sampleLog()
	b, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 3*1024 {
		t.Fatalf("%d bytes", len(b))
	}
	// Wire layout (Linux struct nvmf_disc_rsp_page_entry).
	e := b[1024:2048]
	if e[0] != 1 || e[1] != 1 || e[2] != 3 || e[3] != 4 || e[4] != 1 || e[6] != 0xff || e[7] != 0xff || e[8] != 32 ||
		string(e[32:36]) != "4420" || e[36] != 0 || string(e[256:256+len(DiscoveryNQN)]) != DiscoveryNQN ||
		string(e[512:521]) != "192.0.2.2" || e[521] != 0 || e[768] != 1 || e[769] != 1 || e[770] != 1 {
		t.Errorf("entry 0 layout: % x", e[:16])
	}
	if b[2048+10] != EFlagsEPCSD || b[0] != 3 || b[8] != 2 {
		t.Error("header or eflags")
	}
	got, err := ParseDiscoveryLog(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.GenCtr != l.GenCtr || got.NumRec != 2 || got.RecFmt != 0 || len(got.Entries) != 2 ||
		got.Entries[0] != l.Entries[0] || got.Entries[1] != l.Entries[1] {
		t.Errorf("round trip: %+v", got)
	}
	e1, _ := ParseDiscoveryEntry(b[2048:])
	if e1.TRType().String() != "tcp" || e1.AdrFam().String() != "ipv6" || e1.SubType().String() != "nvme subsystem" ||
		e1.TCPSecType() != 0 || e1.EFlags() != EFlagsEPCSD || e1.TREQ()&TREQSecureMask != TREQNotRequired {
		t.Errorf("entry 1 view: %+v", e1.Record())
	}
	e0, _ := ParseDiscoveryEntry(b[1024:])
	if e0.RDMAQPType() != 1 || e0.RDMAPRType() != 1 || e0.RDMACMS() != 1 || e0.RDMAPKey() != 0 {
		t.Error("RDMA TSAS view")
	}
}

func TestDiscoveryLogPartial(t *testing.T) {
	l := sampleLog()
	b, _ := l.Encode()
	// The host's first read: the header only.
	got, err := ParseDiscoveryLog(b[:1024])
	if err != nil || got.NumRec != 2 || len(got.Entries) != 0 {
		t.Errorf("header only: %+v %v", got, err)
	}
	// One and a half entries.
	got, err = ParseDiscoveryLog(b[:2500])
	if err != nil || len(got.Entries) != 1 {
		t.Errorf("1.5 entries: %d %v", len(got.Entries), err)
	}
	// NUMREC smaller than the buffer.
	DiscoveryHeader(b).SetNumRec(1)
	got, _ = ParseDiscoveryLog(b)
	if len(got.Entries) != 1 {
		t.Errorf("numrec 1: %d entries", len(got.Entries))
	}
	if _, err := ParseDiscoveryLog(b[:1023]); !errors.Is(err, ErrShort) {
		t.Errorf("1023 bytes: %v", err)
	}
	if _, err := ParseDiscoveryEntry(b[:1023]); !errors.Is(err, ErrShort) {
		t.Errorf("entry of 1023 bytes: %v", err)
	}
}

func TestDiscoveryEncodeErrors(t *testing.T) {
	tests := []DiscoveryRecord{
		{TRSVCID: strings.Repeat("1", 33)},
		{TRADDR: strings.Repeat("a", 257)},
		{SubNQN: strings.Repeat("n", 256)},
	}
	for _, r := range tests {
		l := DiscoveryLog{Entries: []DiscoveryRecord{r}}
		if _, err := l.Encode(); err == nil {
			t.Errorf("%+v encoded", r)
		}
	}
	if err := (&DiscoveryRecord{}).Put(make([]byte, 10)); !errors.Is(err, ErrShort) {
		t.Errorf("short entry: %v", err)
	}
	// Fields that just fit.
	r := DiscoveryRecord{TRSVCID: strings.Repeat("1", 32), TRADDR: strings.Repeat("a", 256), SubNQN: strings.Repeat("n", 255)}
	l := DiscoveryLog{Entries: []DiscoveryRecord{r}}
	b, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := ParseDiscoveryLog(b)
	if got.Entries[0] != r {
		t.Error("full-length fields do not round-trip")
	}
}

func TestTrimField(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"4420\x00\x00\x00", "4420"},   // Linux nvmet
		{"4420    ", "4420"},           // SPDK, the specification
		{"4420  \x00  ", "4420"},       // both
		{"", ""},                       //
		{"192.0.2.2", "192.0.2.2"},     // no padding
		{"a b  ", "a b"},               // inner space kept
		{"\x00192.0.2.2", ""},          // stops at the first NUL
		{"  lead", "  lead"},           // leading spaces kept
		{"x\x00garbage  \x00", "x"},    // after the NUL is ignored
		{"trailing\t", "trailing\t"},   // only spaces are padding
		{"99\x00\x00 ", "99"},          //
		{"a\x00\x00\x00\x00\x00", "a"}, //
	}
	for _, tt := range tests {
		if got := TrimField([]byte(tt.in)); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, got, tt.want)
		}
	}
	f := make([]byte, 8)
	if err := PutField(f, "4420", ' '); err != nil || !bytes.Equal(f, []byte("4420    ")) {
		t.Errorf("PutField space: %q %v", f, err)
	}
	if err := PutField(f, "4420", 0); err != nil || !bytes.Equal(f, []byte("4420\x00\x00\x00\x00")) {
		t.Errorf("PutField NUL: %q %v", f, err)
	}
	if err := PutField(f, "123456789", 0); err == nil {
		t.Error("9 bytes in an 8-byte field")
	}
}

func TestDiscoveryNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{TRTypeRDMA.String(), "rdma"}, {TRTypeFC.String(), "fc"}, {TRTypeTCP.String(), "tcp"}, {TRTypeLoop.String(), "loop"},
		{TRType(9).String(), "trtype 9"},
		{AdrFamIPv4.String(), "ipv4"}, {AdrFamIPv6.String(), "ipv6"}, {AdrFamIB.String(), "infiniband"},
		{AdrFamFC.String(), "fibre-channel"}, {AdrFamLoop.String(), "loop"}, {AdrFam(7).String(), "adrfam 7"},
		{SubTypeReferral.String(), "discovery subsystem referral"}, {SubTypeNVM.String(), "nvme subsystem"},
		{SubTypeCurrentDiscovery.String(), "current discovery subsystem"}, {SubType(0).String(), "subtype 0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%q, want %q", tt.got, tt.want)
		}
	}
}

// TestDiscoveryPage checks that discoveryPage, the page builder of
// FuzzDiscoveryLog, lays its fields out as Encode does: from the fields of
// one entry it builds the page of a log whose entries are all that entry.
func TestDiscoveryPage(t *testing.T) {
	l := sampleLog()
	for _, r := range l.Entries {
		want, err := (&DiscoveryLog{GenCtr: 7, Entries: []DiscoveryRecord{r, r, r}}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{0, 17, DiscoveryHeaderLen, 2000, len(want)} {
			if got := discoveryPage(discoverySeed(uint16(size), 7, 3, &r)); !bytes.Equal(got, want[:size]) {
				t.Errorf("%s entry, %d bytes: page differs from Encode's", r.TRType, size)
			}
		}
	}
	// Lengths wrap at a header and four entries; fields are cut at their
	// end and at the end of the page.
	long := bytes.Repeat([]byte{'x'}, 300)
	b := discoveryPage(maxDiscoveryPage+1+DiscoveryHeaderLen+dleSubNQN+10, nil, long, long, long, long, long)
	if len(b) != DiscoveryHeaderLen+dleSubNQN+10 || b[dleTRSVCID-1+DiscoveryHeaderLen] != 'x' ||
		string(b[DiscoveryHeaderLen+dleTRSVCID+TRSVCIDLen:][:4]) != "\x00\x00\x00\x00" || b[len(b)-1] != 'x' {
		t.Errorf("page % x", b[DiscoveryHeaderLen:])
	}
}
