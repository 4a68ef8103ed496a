package fabrics

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Fuzz targets for every decoder that reads bytes from the network. Under
// plain `go test` they run their seed corpus only.

func FuzzConnectData(f *testing.F) {
	d := NewConnectData()
	d.SetCntlID(CntlIDDynamic)
	_ = d.SetSubNQN(DiscoveryNQN)
	_ = d.SetHostNQN("nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-000000000000")
	f.Add([]byte(d))
	f.Add(bytes.Repeat([]byte{'n'}, 1024))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseConnectData(b)
		if err != nil {
			if len(b) >= ConnectDataLen {
				t.Fatalf("%d bytes rejected: %v", len(b), err)
			}
			return
		}
		id, cntlid, sub, host := d.HostID(), d.CntlID(), d.SubNQN(), d.HostNQN()
		_ = ValidateNQN(sub)
		_ = ValidateNQN(host)
		e := NewConnectData()
		e.SetHostID(id)
		e.SetCntlID(cntlid)
		errS, errH := e.SetSubNQN(sub), e.SetHostNQN(host)
		if (errS != nil) != (len(sub) == NQNFieldLen) || (errH != nil) != (len(host) == NQNFieldLen) {
			t.Fatalf("re-encoding %d- and %d-byte NQNs: %v %v", len(sub), len(host), errS, errH)
		}
		if errS != nil || errH != nil {
			return
		}
		if e.HostID() != id || e.CntlID() != cntlid || e.SubNQN() != sub || e.HostNQN() != host {
			t.Fatal("decode(encode(x)) != x")
		}
	})
}

func FuzzCommand(f *testing.F) {
	c := NewCommand(FCTypeConnect)
	c.Connect().SetSQSize(31)
	c.SGL1().PutKeyed(0xff45c9860c117c00, 1024, 0x3c5, true)
	f.Add([]byte(c))
	p := NewCommand(FCTypePropertySet)
	p.PropertySet().SetOffset(PropCC)
	p.PropertySet().SetValue(0x460061)
	f.Add([]byte(p))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseCommand(b)
		if err != nil {
			return
		}
		_ = c.FCType().String()
		_ = c.FCType().Direction()
		_, _, _ = c.CID(), c.PSDT(), c.SGL1().String()
		cc := c.Connect()
		n := NewCommand(c.FCType())
		n.SetCID(c.CID())
		n.SetPSDT(c.PSDT())
		nc := n.Connect()
		nc.SetRecFmt(cc.RecFmt())
		nc.SetQID(cc.QID())
		nc.SetSQSize(cc.SQSize())
		nc.SetCAttr(cc.CAttr())
		nc.SetKATO(cc.KATO())
		if nc.RecFmt() != cc.RecFmt() || nc.QID() != cc.QID() || nc.SQSize() != cc.SQSize() || nc.CAttr() != cc.CAttr() ||
			nc.KATO() != cc.KATO() || n.CID() != c.CID() || n.PSDT() != c.PSDT() || n.FCType() != c.FCType() {
			t.Fatal("Connect decode(encode(x)) != x")
		}
		ps, pg := c.PropertySet(), c.PropertyGet()
		_, _ = PropertySize(ps.Offset())
		_, _, _ = ps.Size(), pg.Size(), pg.Attrib()
		np := NewCommand(FCTypePropertySet).PropertySet()
		np.SetAttrib(ps.Attrib())
		np.SetOffset(ps.Offset())
		np.SetValue(ps.Value())
		if np.Attrib() != ps.Attrib() || np.Offset() != ps.Offset() || np.Value() != ps.Value() {
			t.Fatal("Property Set decode(encode(x)) != x")
		}
		a := c.Auth()
		na := NewCommand(FCTypeAuthSend).Auth()
		na.SetSPSP0(a.SPSP0())
		na.SetSPSP1(a.SPSP1())
		na.SetSECP(a.SECP())
		na.SetTL(a.TL())
		if na.SPSP0() != a.SPSP0() || na.SPSP1() != a.SPSP1() || na.SECP() != a.SECP() || na.AL() != a.AL() {
			t.Fatal("Auth decode(encode(x)) != x")
		}
		_ = c.Disconnect().RecFmt()
	})
}

func FuzzSGL(f *testing.F) {
	for _, s := range []SGL{NewKeyed(0xff45c9860c117c00, 1024, 0x3c5, true), NewInCapsule(0, 4096),
		NewTransportDataBlock(65536), NewBitBucket(1), NewSegment(1, 2, 1), NewLastSegment(3, 4, 0), NewDataBlock(5, 6)} {
		f.Add([]byte(s), uint16(8192), uint8(1))
	}
	f.Add(mustHex(f, "00000000000000000010000044000001"), uint16(4096), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, inCapsule uint16, dir uint8) {
		s, err := ParseSGL(b)
		if err != nil {
			return
		}
		_ = s.String()
		for _, lim := range []SGLLimits{RDMASGLLimits(int(inCapsule), 1<<20), TCPSGLLimits(int(inCapsule), 0), {}} {
			_ = s.Validate(lim, DataDirection(dir&3))
		}
		n := make(SGL, SGLLen)
		switch s.Type() {
		case SGLTypeKeyedDataBlock:
			n.PutKeyed(s.Address(), s.KeyedLength(), s.Key(), s.Invalidate())
			if s.Subtype() != SGLSubtypeAddress && s.Subtype() != SGLSubtypeInvalidateKey {
				n.SetIdentifier(s.Type(), s.Subtype())
			}
		default:
			n.put(s.Type(), s.Subtype(), s.Address(), s.Length())
		}
		if n.Type() != s.Type() || n.Subtype() != s.Subtype() || n.Address() != s.Address() || n.Length() != s.Length() ||
			(s.Type() == SGLTypeKeyedDataBlock && n.Key() != s.Key()) {
			t.Fatalf("decode(encode(x)) != x: %v / %v", s, n)
		}
	})
}

// FuzzDiscoveryLog decodes discovery log pages, re-encodes what it decoded
// and decodes that again: the same values must come back. The page is
// built by discoveryPage from a length, a header and one entry's fields.
func FuzzDiscoveryLog(f *testing.F) {
	// The sample log's entries, each on its own in a page of two, a
	// header-only page and a page cut in its first entry, as a host reads
	// them.
	l := sampleLog()
	for _, s := range []struct {
		size  int
		entry int
	}{{DiscoveryHeaderLen + 2*DiscoveryEntryLen, 0}, {DiscoveryHeaderLen + 2*DiscoveryEntryLen, 1}, {DiscoveryHeaderLen, 0}, {2000, 0}} {
		size, hdr, fixed, trsvcid, subnqn, traddr, tsas := discoverySeed(uint16(s.size), l.GenCtr, 2, &l.Entries[s.entry])
		f.Add(size, hdr, fixed, trsvcid, subnqn, traddr, tsas)
	}
	// A SUBNQN without NUL, which Encode refuses.
	size, hdr, fixed, trsvcid, _, traddr, tsas := discoverySeed(DiscoveryHeaderLen+DiscoveryEntryLen, 1, 1, &l.Entries[0])
	f.Add(size, hdr, fixed, trsvcid, bytes.Repeat([]byte{'n'}, NQNFieldLen), traddr, tsas)
	f.Fuzz(func(t *testing.T, size uint16, hdr, fixed, trsvcid, subnqn, traddr, tsas []byte) {
		checkDiscoveryRoundTrip(t, discoveryPage(size, hdr, fixed, trsvcid, subnqn, traddr, tsas))
	})
}

// maxDiscoveryPage bounds the pages of FuzzDiscoveryLog: a header and four
// entries.
const maxDiscoveryPage = DiscoveryHeaderLen + 4*DiscoveryEntryLen

// discoveryPage returns a discovery log page of size bytes (modulo
// maxDiscoveryPage+1, so the last entry may be cut): hdr at the start, and
// in every entry slot fixed at bytes 31:0 (TRTYPE to EFLAGS and reserved
// bytes) and the raw bytes of TRSVCID, SUBNQN, TRADDR and TSAS at their
// offsets, each cut at the end of its field. Other bytes are zero.
//
// The fuzz target takes its page in this form rather than as raw bytes
// because the fuzzing engine stalls on raw pages of several KiB: it
// minimizes every input that widens coverage before going on, and for a
// []byte it tries removing every run of bytes, quadratic in the length,
// for up to -fuzzminimizetime (60 s) per input. Here it works on a few
// short fields, and the decoder still sees any value in every byte it
// reads, any page length and up to four entries.
func discoveryPage(size uint16, hdr, fixed, trsvcid, subnqn, traddr, tsas []byte) []byte {
	b := make([]byte, int(size)%(maxDiscoveryPage+1))
	copy(b[:min(len(b), DiscoveryHeaderLen)], hdr)
	for off := DiscoveryHeaderLen; off < len(b); off += DiscoveryEntryLen {
		e := b[off:min(len(b), off+DiscoveryEntryLen)]
		for _, fl := range []struct {
			at, n int
			v     []byte
		}{
			{0, dleTRSVCID, fixed},
			{dleTRSVCID, TRSVCIDLen, trsvcid},
			{dleSubNQN, NQNFieldLen, subnqn},
			{dleTRADDR, TRADDRLen, traddr},
			{dleTSAS, TSASLen, tsas},
		} {
			if fl.at < len(e) {
				copy(e[fl.at:min(len(e), fl.at+fl.n)], fl.v)
			}
		}
	}
	return b
}

// discoverySeed returns the arguments of discoveryPage for a page of size
// bytes with header GenCtr genctr and NumRec numrec and every entry r.
func discoverySeed(size uint16, genctr, numrec uint64, r *DiscoveryRecord) (uint16, []byte, []byte, []byte, []byte, []byte, []byte) {
	hdr := make(DiscoveryHeader, dlpRecFmt+2)
	hdr.SetGenCtr(genctr)
	hdr.SetNumRec(numrec)
	e := make(DiscoveryEntry, DiscoveryEntryLen)
	_ = r.Put(e)
	return size, hdr, e[:dleTRSVCID], []byte(r.TRSVCID), []byte(r.SubNQN), []byte(r.TRADDR), bytes.TrimRight(r.TSAS[:], "\x00")
}

// checkDiscoveryRoundTrip decodes a discovery log page, encodes what it
// decoded and checks that decoding that gives the same values.
func checkDiscoveryRoundTrip(t *testing.T, b []byte) {
	l, err := ParseDiscoveryLog(b)
	if err != nil {
		return
	}
	for _, e := range l.Entries {
		_ = e.TRType.String() + e.AdrFam.String() + e.SubType.String()
	}
	enc, err := l.Encode()
	if err != nil {
		for _, e := range l.Entries {
			if len(e.SubNQN) == NQNFieldLen {
				return // a SUBNQN without NUL cannot be written back
			}
		}
		t.Fatalf("re-encode: %v", err)
	}
	m, err := ParseDiscoveryLog(enc)
	if err != nil || m.GenCtr != l.GenCtr || m.RecFmt != l.RecFmt || m.NumRec != uint64(len(l.Entries)) ||
		len(m.Entries) != len(l.Entries) {
		t.Fatalf("decode(encode(x)): %v", err)
	}
	for i := range m.Entries {
		if m.Entries[i] != l.Entries[i] {
			t.Fatalf("entry %d: %+v != %+v", i, m.Entries[i], l.Entries[i])
		}
	}
}

func FuzzProperties(f *testing.F) {
	f.Add(uint32(PropCAP), uint64(0x00000820_0f00007f))
	f.Add(uint32(PropCC), uint64(0x460061))
	f.Add(uint32(PropCSTS), uint64(0x9))
	f.Add(uint32(PropVS), uint64(0x10300))
	f.Fuzz(func(t *testing.T, off uint32, v uint64) {
		size, err := PropertySize(off)
		if (err == nil) != (size == 4 || size == 8) {
			t.Fatalf("size %d err %v", size, err)
		}
		_ = PropertyName(off)
		const capMask = 0x023f_ffff_ff07_ffff // the fields CAPFields covers
		c := CAP(v)
		if got := MakeCAP(c.Fields()); uint64(got) != v&capMask {
			t.Fatalf("CAP %#x: MakeCAP(Fields) = %#x", v, uint64(got))
		}
		cc := CC(v)
		const ccMask = 0x00ff_fff1
		re := CC(0).WithEN(cc.EN()).WithCSS(cc.CSS()).WithMPS(cc.MPS()).WithAMS(cc.AMS()).WithSHN(cc.SHN()).
			WithIOSQES(cc.IOSQES()).WithIOCQES(cc.IOCQES())
		if re != cc&ccMask {
			t.Fatalf("CC %#x: rebuilt %#x", uint32(cc), uint32(re))
		}
		s := CSTS(v)
		rs := CSTS(0).WithRDY(s.RDY()).WithCFS(s.CFS()).WithSHST(s.SHST()).WithNSSRO(s.NSSRO()).WithPP(s.PP())
		if rs != s&0x3f {
			t.Fatalf("CSTS %#x: rebuilt %#x", uint32(s), uint32(rs))
		}
		vs := VS(v)
		if MakeVS(vs.Major(), vs.Minor(), vs.Tertiary()) != vs || vs.String() == "" {
			t.Fatalf("VS %#x", uint32(vs))
		}
		lo, hi := PropertyGetResult(v)
		if PropertyGetValue(lo, hi) != v {
			t.Fatal("PropertyGetValue(PropertyGetResult(v)) != v")
		}
	})
}

func FuzzValidateNQN(f *testing.F) {
	for _, s := range []string{DiscoveryNQN, "nqn.2014-08.org.nvmexpress:kpeer-target",
		"nqn.2014-08.org.nvmexpress:uuid:6b706565-7200-4000-8000-000000000000", "nqn.2016-06.io.spdk:cnode1",
		"nqn.2014-13.x:y", "", "nqn.2014-08.org.nvmexpress:uuid:zz", "testnqn", "test nqn"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateNQN(s)
		warn, cerr := CheckNQN(s)
		if warn != nil && cerr != nil || (err == nil) != (warn == nil && cerr == nil) {
			t.Fatalf("%q: ValidateNQN %v, CheckNQN %v, %v", s, err, warn, cerr)
		}
		if cerr == nil && (s == "" || len(s) > MaxNQNLen || !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsSpace)) {
			t.Fatalf("%q: unsafe name passes CheckNQN", s)
		}
		if err != nil {
			return
		}
		if len(s) > MaxNQNLen || !strings.HasPrefix(s, "nqn.") || strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("%q accepted", s)
		}
		if u, ok := UUIDFromNQN(s); ok {
			if HostNQNFromUUID(u) != strings.ToLower(s) {
				t.Fatalf("%q: UUID round trip gives %q", s, HostNQNFromUUID(u))
			}
		} else if strings.HasPrefix(s, UUIDNQNPrefix) {
			t.Fatalf("%q accepted with a bad UUID", s)
		}
	})
}
