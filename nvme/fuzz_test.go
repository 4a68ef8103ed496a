package nvme_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
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
// read.
func FuzzIdentifyAndLogViews(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0xff}, 4096))
	f.Add(make([]byte, 4096))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := nvme.ParseIdentifyController(b); err == nil {
			callGetters(t, reflect.ValueOf(c))
			for i := -1; i <= 32; i++ {
				if ps := c.PowerState(i); ps != nil {
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
			callGetters(t, reflect.ValueOf(e))
		}
	})
}

// callGetters calls every method without arguments that has a Set
// counterpart, and the setter with the value read, checking the bytes do not
// change (string setters may refuse values they did not write).
func callGetters(t *testing.T, v reflect.Value) {
	t.Helper()
	before := bytes.Clone(v.Bytes())
	for i := 0; i < v.NumMethod(); i++ {
		m := v.Type().Method(i)
		if m.Type.NumIn() != 1 || m.Type.NumOut() != 1 {
			continue
		}
		out := v.Method(i).Call(nil)[0]
		set := v.MethodByName("Set" + m.Name)
		if !set.IsValid() || set.Type().NumIn() != 1 || set.Type().In(0) != out.Type() {
			continue
		}
		res := set.Call([]reflect.Value{out})
		if out.Kind() == reflect.String {
			// Trailing padding is not restored byte for byte.
			copy(v.Bytes(), before)
			continue
		}
		if len(res) != 0 {
			continue
		}
		if !bytes.Equal(before, v.Bytes()) {
			t.Fatalf("%s: Set%s(%s()) changed the bytes", v.Type(), m.Name, m.Name)
		}
	}
}
