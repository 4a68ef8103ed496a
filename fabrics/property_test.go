package fabrics

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestPropertySize(t *testing.T) {
	tests := []struct {
		off  uint32
		size int
		name string
	}{
		{PropCAP, 8, "CAP"},
		{PropVS, 4, "VS"},
		{PropCC, 4, "CC"},
		{PropCSTS, 4, "CSTS"},
		{PropNSSR, 4, "NSSR"},
		{PropINTMS, 0, "property 0xc"},
		{0x04, 0, "property 0x4"},
		{0x1000, 0, "property 0x1000"},
	}
	for _, tt := range tests {
		got, err := PropertySize(tt.off)
		if got != tt.size || (err == nil) != (tt.size != 0) || PropertyName(tt.off) != tt.name {
			t.Errorf("%#x: size %d err %v name %q", tt.off, got, err, PropertyName(tt.off))
		}
		if err != nil && nvme.StatusOf(err) != nvme.StatusInvalidField {
			t.Errorf("%#x: status %v", tt.off, nvme.StatusOf(err))
		}
	}
}

func TestCAP(t *testing.T) {
	// CAP of the kernel targets in testdata/pcap: RDMA 0x00000820_0f00007f, TCP 0x00000820_0f0003ff.
	tests := []struct {
		v    CAP
		want CAPFields
	}{
		{0x00000820_0f00007f, CAPFields{MQES: 127, TO: 15, CSS: CAPCSSNVM | CAPCSSIOCS}},
		{0x00000820_0f0003ff, CAPFields{MQES: 1023, TO: 15, CSS: CAPCSSNVM | CAPCSSIOCS}},
		{0x02f0_0020_0001_ffff, CAPFields{MQES: 0xffff, CQR: true, CSS: CAPCSSNVM, MPSMAX: 0xf, CMBS: true}},
	}
	for _, tt := range tests {
		f := tt.v.Fields()
		if f != tt.want {
			t.Errorf("%#x: %+v, want %+v", uint64(tt.v), f, tt.want)
		}
		if MakeCAP(f) != tt.v {
			t.Errorf("MakeCAP(%+v) = %#x, want %#x", f, uint64(MakeCAP(f)), uint64(tt.v))
		}
	}
	c := MakeCAP(CAPFields{MQES: 1, CQR: true, AMS: 3, TO: 0xff, DSTRD: 0xf, NSSRS: true, CSS: 0xff, BPS: true, MPSMIN: 0xf, MPSMAX: 0xf, CMBS: true})
	if c != 0x02ff_3fff_ff07_0001 {
		t.Errorf("all fields: %#x", uint64(c))
	}
	if c.Timeout() != 255*500*time.Millisecond {
		t.Errorf("Timeout %v", c.Timeout())
	}
}

func TestVS(t *testing.T) {
	tests := []struct {
		v      VS
		raw    uint32
		text   string
		ma, mi uint16
		te     uint8
	}{
		{VS13, 0x00010300, "1.3", 1, 3, 0},
		{VS14, 0x00010400, "1.4", 1, 4, 0},
		{VS20, 0x00020000, "2.0", 2, 0, 0},
		{MakeVS(1, 4, 1), 0x00010401, "1.4.1", 1, 4, 1},
	}
	for _, tt := range tests {
		if uint32(tt.v) != tt.raw || tt.v.String() != tt.text || tt.v.Major() != tt.ma || uint16(tt.v.Minor()) != tt.mi || tt.v.Tertiary() != tt.te {
			t.Errorf("%#x: %s", uint32(tt.v), tt.v)
		}
	}
}

func TestCC(t *testing.T) {
	// Linux host: CC written as 0x460060 then 0x460061 (testdata/pcap, Property Set value).
	c := CC(0x460060)
	if c.EN() || c.CSS() != CCCSSAllIOCS || c.MPS() != 0 || c.AMS() != 0 || c.SHN() != SHNNone || c.IOSQES() != 6 || c.IOCQES() != 4 {
		t.Errorf("%#x: EN %v CSS %d MPS %d AMS %d SHN %d IOSQES %d IOCQES %d", uint32(c), c.EN(), c.CSS(), c.MPS(), c.AMS(), c.SHN(), c.IOSQES(), c.IOCQES())
	}
	if got := c.WithEN(true); got != 0x460061 || !got.EN() {
		t.Errorf("WithEN %#x", uint32(got))
	}
	built := CC(0).WithCSS(CCCSSAllIOCS).WithIOSQES(6).WithIOCQES(4).WithMPS(0).WithAMS(0).WithSHN(SHNNormal).WithEN(true)
	if built != 0x464061 || built.SHN() != SHNNormal {
		t.Errorf("built %#x", uint32(built))
	}
	if got := built.WithSHN(SHNAbrupt).WithEN(false).WithMPS(3).WithAMS(1); got.SHN() != SHNAbrupt || got.EN() || got.MPS() != 3 || got.AMS() != 1 || got.IOSQES() != 6 {
		t.Errorf("%#x", uint32(got))
	}
}

func TestCSTS(t *testing.T) {
	s := CSTS(0).WithRDY(true).WithSHST(SHSTComplete)
	if uint32(s) != 0x9 || !s.RDY() || s.SHST() != SHSTComplete || s.CFS() || s.NSSRO() || s.PP() {
		t.Errorf("%#x", uint32(s))
	}
	s = s.WithCFS(true).WithNSSRO(true).WithPP(true).WithRDY(false).WithSHST(SHSTOccurring)
	if uint32(s) != 0x36 || s.RDY() || !s.CFS() || !s.NSSRO() || !s.PP() || s.SHST() != SHSTOccurring {
		t.Errorf("%#x", uint32(s))
	}
	if s.WithSHST(SHSTNormal).SHST() != SHSTNormal {
		t.Error("SHST normal")
	}
}
