package nvme_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

// Seeds taken from the golden captures (kernel nvmet's answers).
var (
	seedNSDescriptors, _ = hex.DecodeString("031000006b706565720040008000000000000001021000006b70656572004000800000000000000104010000" + "00000000")
	seedANALog, _        = hex.DecodeString("000000000000000001000000000000000100000001000000000000000000000001000000000000000000000000000000010000000000000000000000")
	seedNSIDList, _      = hex.DecodeString("0100000000000000")
	seedSQE, _           = hex.DecodeString("7f40000001000000000000000000000000000000000000000000c986110c7c000004000000c50300004f000000001f000000000000000000000000000000000000000000000000")
	seedCQE, _           = hex.DecodeString("7f00000f200800000200000001000000")
)

func FuzzParseSQE(f *testing.F) {
	f.Add(seedSQE)
	f.Add(make([]byte, 64))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := nvme.ParseSQE(b)
		if err != nil {
			if len(b) >= nvme.SQESize {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		_ = s.String()
		// Every view of the command decodes without panicking, and the
		// setters write back what the getters read.
		rw := nvme.RWCommand{SQE: s}
		id := nvme.IdentifyCommand{SQE: s}
		lp := nvme.GetLogPageCommand{SQE: s}
		ft := nvme.FeaturesCommand{SQE: s}
		dsm := nvme.DSMCommand{SQE: s}
		_ = fmt.Sprint(nvme.AdminOpcode(s.Opcode()), nvme.IOOpcode(s.Opcode()), s.Fuse(), s.PSDT(), s.DPTR(),
			rw.Blocks(), rw.FUA(), rw.PRINFO(), id.CNS(), id.CSI(), lp.LID(), lp.Length(), ft.FID(), ft.SEL(), dsm.Ranges())
		before := bytes.Clone(s)
		rw.SetSLBA(rw.SLBA())
		rw.SetNLB(rw.NLB())
		rw.SetFUA(rw.FUA())
		rw.SetPRINFO(rw.PRINFO())
		rw.SetDSPEC(rw.DSPEC())
		id.SetCNS(id.CNS())
		id.SetCNTID(id.CNTID())
		lp.SetNUMD(lp.NUMD())
		lp.SetLSP(lp.LSP())
		lp.SetRAE(lp.RAE())
		ft.SetSEL(ft.SEL())
		s.SetFuse(s.Fuse())
		s.SetPSDT(s.PSDT())
		if !bytes.Equal(before, s) {
			t.Fatalf("set(get()) changed the SQE:\n% x\n% x", before, []byte(s))
		}
	})
}

func FuzzParseCQE(f *testing.F) {
	f.Add(seedCQE)
	f.Add(bytes.Repeat([]byte{0xff}, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := nvme.ParseCQE(b)
		if err != nil {
			return
		}
		_ = c.String()
		before := bytes.Clone(c)
		err = c.Err()
		st := c.Status()
		if (err == nil) != st.Success() {
			t.Fatalf("Err %v for %v", err, st)
		}
		c.SetStatus(st)
		c.SetCRD(c.CRD())
		c.SetDNR(c.DNR())
		c.SetMore(c.More())
		c.SetPhase(c.Phase())
		if !bytes.Equal(before, c) {
			t.Fatalf("set(get()) changed the CQE")
		}
		if err != nil {
			c.SetError(err)
			if !bytes.Equal(before, c) {
				t.Fatalf("SetError(Err()) changed the CQE: % x -> % x", before, []byte(c))
			}
		}
	})
}

func FuzzStatusString(f *testing.F) {
	for _, v := range []uint16{0, 2, 0x101, 0x182, 0x287, 0x303, 0x7ff, 0xffff} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint16) {
		s := nvme.Status(v)
		str := s.String()
		if !strings.HasSuffix(str, fmt.Sprintf("(SCT %d SC 0x%02x)", uint8(s.SCT()), s.SC())) || s.Name() == "" {
			t.Fatalf("%#x: %q", v, str)
		}
		_ = s.SCT().String()
		e := &nvme.Error{Status: s, DNR: v&1 != 0}
		if e.Error() == "" || nvme.MakeStatus(s.SCT(), s.SC()) != s&0x7ff {
			t.Fatal("Error / MakeStatus")
		}
		_ = nvme.AsyncEvent(uint32(v) * 0x10001).String()
		_ = nvme.LogPageID(v).String() + nvme.FeatureID(v).String() + nvme.AdminOpcode(v).String() + nvme.IOOpcode(v).String()
	})
}

func FuzzDecodeNSIDList(f *testing.F) {
	f.Add(seedNSIDList)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := nvme.DecodeNSIDList(b)
		if err != nil {
			return
		}
		if len(ids) > len(b)/4 {
			t.Fatalf("%d ids from %d bytes", len(ids), len(b))
		}
		buf := make([]byte, len(b))
		if err := nvme.EncodeNSIDList(buf, ids); err != nil {
			t.Fatal(err)
		}
		again, err := nvme.DecodeNSIDList(buf)
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("round trip: %v %v", again, err)
		}
		ch, overflow, err := nvme.DecodeChangedNSList(b)
		if err != nil {
			t.Fatal(err)
		}
		if !overflow {
			if err := nvme.EncodeChangedNSList(buf, ch); err != nil {
				t.Fatal(err)
			}
			if again, _, _ := nvme.DecodeChangedNSList(buf); !slices.Equal(again, ch) {
				t.Fatal("changed list round trip")
			}
		}
	})
}

func FuzzDecodeNSDescriptors(f *testing.F) {
	f.Add(seedNSDescriptors)
	f.Add([]byte{1, 8, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{0x7f, 3, 0, 0, 1, 2, 3, 4, 1, 0, 0})
	f.Add([]byte{3, 16, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ds, err := nvme.DecodeNSDescriptors(b)
		if err != nil {
			return
		}
		for _, d := range ds {
			_ = d.String()
		}
		buf := make([]byte, len(b))
		n, err := nvme.EncodeNSDescriptors(buf, ds)
		if err != nil {
			t.Fatalf("re-encoding %v: %v", ds, err)
		}
		// The same bytes, but for the reserved header bytes 3:2, which the
		// encoder zeroes.
		for off := 0; off < n; off += 4 + int(buf[off+1]) {
			if buf[off] != b[off] || buf[off+1] != b[off+1] || buf[off+2] != 0 || buf[off+3] != 0 ||
				!bytes.Equal(buf[off+4:off+4+int(buf[off+1])], b[off+4:off+4+int(b[off+1])]) {
				t.Fatalf("re-encoding differs at byte %d:\n% x\n% x", off, buf[:n], b[:n])
			}
		}
		again, err := nvme.DecodeNSDescriptors(buf)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(ds) {
			t.Fatalf("round trip: %v %v", again, err)
		}
	})
}

func FuzzDecodeANALog(f *testing.F) {
	f.Add(seedANALog)
	f.Add(make([]byte, 16))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := nvme.DecodeANALog(b)
		if err != nil {
			return
		}
		if l.Size() > len(b) {
			t.Fatalf("decoded log of %d bytes from %d", l.Size(), len(b))
		}
		enc, err := l.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		again, err := nvme.DecodeANALog(enc)
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("round trip: %+v %v", again, err)
		}
		_ = fmt.Sprint(l)
	})
}

func FuzzDecodeDSMRanges(f *testing.F) {
	f.Add(make([]byte, 32), 2)
	f.Add([]byte{1}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		rs, err := nvme.DecodeDSMRanges(b, n)
		if err != nil {
			return
		}
		for _, r := range rs {
			_ = r.SLBA() + uint64(r.Length()) + uint64(r.ContextAttributes())
		}
	})
}

// FuzzIdentifyAndLogViews runs every getter of the fixed-size views over
// arbitrary data: none may panic, and setters must restore what getters
// read. The data is a page built by viewPage from a size, a fill byte and
// a patch.
func FuzzIdentifyAndLogViews(f *testing.F) {
	f.Add(uint16(nvme.IdentifyDataSize), byte(0xff), uint16(0), []byte(nil))
	f.Add(uint16(nvme.IdentifyDataSize), byte(0), uint16(0), []byte(nil))
	f.Add(uint16(5), byte(0), uint16(0), []byte("short"))
	f.Fuzz(func(t *testing.T, size uint16, fill byte, off uint16, patch []byte) {
		checkViews(t, viewPage(size, fill, off, patch))
	})
}

// maxViewPage bounds the pages of FuzzIdentifyAndLogViews: the largest
// view and one more error log entry.
const maxViewPage = nvme.IdentifyDataSize + nvme.ErrorLogEntrySize

// maxViewPatch bounds the patch of a page: it covers the longest field but
// SUBNQN (256 bytes, whose rest the fill byte gives).
const maxViewPatch = 64

// viewPage returns size bytes (modulo maxViewPage+1) of fill with the
// first maxViewPatch bytes of patch copied in at offset off, cut at the
// end of the page.
//
// The fuzz target takes its page in this form rather than as raw bytes
// because the fuzzing engine stalls on raw 4 KiB inputs: it minimizes
// every input that widens coverage before going on, and for a []byte it
// tries removing every run of bytes, quadratic in the length, for up to
// -fuzzminimizetime (60 s) per input. Here it mutates and minimizes a few
// bytes (the minimizer drops unused patch bytes first, in large steps),
// and the getters, which read fixed offsets, still see every length
// around the views' sizes and any value at any offset.
func viewPage(size uint16, fill byte, off uint16, patch []byte) []byte {
	b := bytes.Repeat([]byte{fill}, int(size)%(maxViewPage+1))
	if int(off) < len(b) {
		copy(b[off:], patch[:min(len(patch), maxViewPatch)])
	}
	return b
}

// checkViews decodes b with every fixed-size view and runs their getters
// and setters. Of the power state descriptors and error log entries, those
// byte for byte equal to one checked before are skipped: the getters and
// setters would do exactly the same again (a page of one fill byte has up
// to 32 equal descriptors and 65 equal entries).
func checkViews(t *testing.T, b []byte) {
	seen := map[string]bool{}
	once := func(v []byte) bool {
		if seen[string(v)] {
			return false
		}
		seen[string(v)] = true
		return true
	}
	if c, err := nvme.ParseIdentifyController(b); err == nil {
		callGetters(t, reflect.ValueOf(c))
		for i := -1; i <= 32; i++ {
			if ps := c.PowerState(i); ps != nil && once(ps) {
				callGetters(t, reflect.ValueOf(ps))
			}
		}
		_ = c.MDTSBytes(4096)
	}
	if n, err := nvme.ParseIdentifyNamespace(b); err == nil {
		callGetters(t, reflect.ValueOf(n))
		for i := -1; i <= 64; i++ {
			_ = n.LBAF(i).DataSize()
		}
		before := bytes.Clone(n)
		n.SetFormatIndex(n.FormatIndex())
		if !bytes.Equal(before, n) {
			t.Fatal("SetFormatIndex(FormatIndex()) changed FLBAS")
		}
	}
	if l, err := nvme.ParseSMARTLog(b); err == nil {
		callGetters(t, reflect.ValueOf(l))
		for i := -1; i <= 8; i++ {
			_ = l.TemperatureSensor(i)
		}
	}
	if l, err := nvme.ParseFirmwareSlotLog(b); err == nil {
		callGetters(t, reflect.ValueOf(l))
		for i := 0; i <= 8; i++ {
			_ = l.FRS(i)
		}
	}
	if l, err := nvme.ParseEffectsLog(b); err == nil {
		for op := 0; op < 256; op++ {
			_ = l.ACS(nvme.AdminOpcode(op)) | l.IOCS(nvme.IOOpcode(op))
		}
	}
	for _, e := range nvme.ParseErrorLog(b) {
		if once(e) {
			callGetters(t, reflect.ValueOf(e))
		}
	}
}

// getter is a method without arguments and with one result of a view
// type, with its setter (Set + the getter's name, taking that result) if
// the type has one.
type getter struct {
	get, set reflect.Method
	hasSet   bool
	str      bool // the result is a string
	setErr   bool // the setter returns something (an error)
}

// viewGetters caches the getters of each view type: finding methods by
// reflection costs far more than calling them.
var viewGetters sync.Map // reflect.Type -> []getter

func gettersOf(typ reflect.Type) []getter {
	if gs, ok := viewGetters.Load(typ); ok {
		return gs.([]getter)
	}
	var gs []getter
	for i := 0; i < typ.NumMethod(); i++ {
		m := typ.Method(i)
		if m.Type.NumIn() != 1 || m.Type.NumOut() != 1 { // the receiver is In(0)
			continue
		}
		g := getter{get: m, str: m.Type.Out(0).Kind() == reflect.String}
		if set, ok := typ.MethodByName("Set" + m.Name); ok && set.Type.NumIn() == 2 && set.Type.In(1) == m.Type.Out(0) {
			g.set, g.hasSet, g.setErr = set, true, set.Type.NumOut() != 0
		}
		gs = append(gs, g)
	}
	viewGetters.Store(typ, gs)
	return gs
}

// callGetters calls every method without arguments that has one result,
// and the setter with the value read where there is one, checking the
// bytes do not change (string setters may refuse values they did not
// write).
func callGetters(t *testing.T, v reflect.Value) {
	t.Helper()
	before := bytes.Clone(v.Bytes())
	recv := []reflect.Value{v}
	for _, g := range gettersOf(v.Type()) {
		out := g.get.Func.Call(recv)[0]
		if !g.hasSet {
			continue
		}
		g.set.Func.Call([]reflect.Value{v, out})
		if g.str {
			// Trailing padding is not restored byte for byte.
			copy(v.Bytes(), before)
			continue
		}
		if g.setErr {
			continue
		}
		if !bytes.Equal(before, v.Bytes()) {
			t.Fatalf("%s: Set%s(%s()) changed the bytes", v.Type(), g.get.Name, g.get.Name)
		}
	}
}
