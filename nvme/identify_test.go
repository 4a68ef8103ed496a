package nvme_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestIdentifyControllerStrings(t *testing.T) {
	c := nvme.NewIdentifyController()
	tests := []struct {
		field     string
		off, size int
		set       func(string) error
		get       func() string
		value     string
		image     string
	}{
		{"SN", 4, 20, c.SetSN, c.SN, "kpeer0001", "kpeer0001           "},
		{"MN", 24, 40, c.SetMN, c.MN, "kpeer-linux-nvmet", "kpeer-linux-nvmet                       "},
		{"FR", 64, 8, c.SetFR, c.FR, "6.1.0-57", "6.1.0-57"},
		{"SUBNQN", 768, 256, c.SetSUBNQN, c.SUBNQN, "nqn.2014-08.org.nvmexpress:kpeer-target", "nqn.2014-08.org.nvmexpress:kpeer-target" + string(make([]byte, 256-39))},
	}
	for _, tt := range tests {
		if err := tt.set(tt.value); err != nil {
			t.Fatalf("Set%s: %v", tt.field, err)
		}
		if got := string(c[tt.off : tt.off+tt.size]); got != tt.image {
			t.Errorf("%s bytes %q, want %q", tt.field, got, tt.image)
		}
		if got := tt.get(); got != tt.value {
			t.Errorf("%s() = %q", tt.field, got)
		}
		// Too long, or not allowed in the field.
		long := string(bytes.Repeat([]byte{'x'}, tt.size+1))
		if tt.field == "SUBNQN" {
			long = long[1:] // 256 bytes leave no room for the NUL
		}
		if err := tt.set(long); !errors.Is(err, nvme.ErrMalformed) {
			t.Errorf("Set%s(%d bytes) = %v", tt.field, len(long), err)
		}
	}
	if err := c.SetSN("bad\x01"); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("SetSN(control character) = %v", err)
	}
	if err := c.SetMN("é"); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("SetMN(non-ASCII) = %v", err)
	}
	if err := c.SetSUBNQN("a\x00b"); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("SetSUBNQN(NUL) = %v", err)
	}
	// A field filled to the last byte, and NUL padding some controllers use.
	if err := c.SetSN("01234567890123456789"); err != nil || c.SN() != "01234567890123456789" {
		t.Errorf("20-byte SN: %q %v", c.SN(), err)
	}
	copy(c[24:64], "Linux"+string(make([]byte, 35)))
	if c.MN() != "Linux" {
		t.Errorf("NUL-padded MN %q", c.MN())
	}
	full := nvme.IdentifyController(bytes.Repeat([]byte{'n'}, nvme.IdentifyDataSize))
	if len(full.SUBNQN()) != 256 {
		t.Errorf("unterminated SUBNQN of %d bytes", len(full.SUBNQN()))
	}
}

func TestIdentifyControllerHelpers(t *testing.T) {
	c := nvme.NewIdentifyController()
	if _, err := nvme.ParseIdentifyController(c[:4095]); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("ParseIdentifyController(4095 bytes) = %v", err)
	}
	c.SetMDTS(5)
	if c.MDTSBytes(4096) != 128<<10 {
		t.Errorf("MDTS 5: %d bytes", c.MDTSBytes(4096))
	}
	c.SetMDTS(0)
	if c.MDTSBytes(4096) != 0 {
		t.Error("MDTS 0 is no limit")
	}
	if c.PowerState(-1) != nil || c.PowerState(32) != nil || len(c.PowerState(31)) != 32 {
		t.Error("PowerState index checks")
	}
	ps := c.PowerState(1)
	ps.SetMP(2500)
	ps.SetRRT(0x1f)
	ps.SetRRL(1)
	ps.SetRWT(2)
	ps.SetRWL(3)
	ps.SetIPS(2)
	ps.SetAPW(5)
	ps.SetAPS(1)
	want := []byte{0xc4, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1f, 1, 2, 3, 0, 0, 0x80, 0, 0, 0, 0x45}
	if !bytes.Equal(c[2048+32:2048+32+len(want)], want) {
		t.Errorf("power state 1 bytes % x", c[2048+32:2048+32+len(want)])
	}
	if ps.RRT() != 0x1f || ps.RRL() != 1 || ps.RWT() != 2 || ps.RWL() != 3 || ps.IPS() != 2 || ps.APW() != 5 || ps.APS() != 1 {
		t.Error("power state round trip")
	}
	if len(c.VendorSpecific()) != 1024 {
		t.Error("VendorSpecific")
	}
	for v, s := range map[uint32]string{nvme.Version1_3: "1.3", nvme.Version2_0: "2.0", nvme.MakeVersion(1, 4, 1): "1.4.1"} {
		if nvme.VersionString(v) != s {
			t.Errorf("VersionString(%#x) = %q", v, nvme.VersionString(v))
		}
	}
	if nvme.MakeVersion(1, 3, 0) != 0x10300 {
		t.Error("MakeVersion")
	}
}

func TestIdentifyNamespaceFormats(t *testing.T) {
	n := nvme.NewIdentifyNamespace()
	n.SetNLBAF(1)
	n.SetLBAF(0, nvme.LBAFormat{MS: 0, LBADS: 9, RP: 2})
	n.SetLBAF(1, nvme.LBAFormat{MS: 8, LBADS: 12, RP: 7}) // RP is 2 bits
	n.SetLBAF(63, nvme.LBAFormat{LBADS: 13})
	n.SetLBAF(64, nvme.LBAFormat{LBADS: 9}) // ignored
	if !bytes.Equal(n[128:136], []byte{0, 0, 9, 2, 8, 0, 12, 3}) || n[128+63*4+2] != 13 || n[384] != 0 {
		t.Fatalf("LBA format bytes % x", n[128:136])
	}
	tests := []struct {
		index int
		flbas uint8
		size  uint32
	}{
		{0, 0x00, 512}, {1, 0x01, 4096}, {63, 0x6f, 8192}, {16, 0x20, 0},
	}
	for _, tt := range tests {
		n.SetFLBAS(nvme.FLBASMetadataAtEnd)
		n.SetFormatIndex(tt.index)
		if n.FLBAS() != tt.flbas|nvme.FLBASMetadataAtEnd || n.FormatIndex() != tt.index || n.LBADataSize() != tt.size {
			t.Errorf("index %d: FLBAS %#x, FormatIndex %d, LBADataSize %d", tt.index, n.FLBAS(), n.FormatIndex(), n.LBADataSize())
		}
	}
	if (nvme.LBAFormat{LBADS: 31}).DataSize() != 0 || n.LBAF(-1) != (nvme.LBAFormat{}) || n.LBAF(64) != (nvme.LBAFormat{}) {
		t.Error("out-of-range formats")
	}
	if n.CurrentLBAFormat() != n.LBAF(16) || len(n.VendorSpecific()) != 3712 {
		t.Error("CurrentLBAFormat / VendorSpecific")
	}
	if _, err := nvme.ParseIdentifyNamespace(make([]byte, 100)); !errors.Is(err, nvme.ErrTruncated) {
		t.Error("ParseIdentifyNamespace(100 bytes)")
	}
}

func TestNSIDList(t *testing.T) {
	tests := []struct {
		name string
		ids  []uint32
	}{
		{"empty", nil},
		{"one", []uint32{1}},
		{"several", []uint32{1, 2, 7, 0xfffffffe}},
		{"full", func() []uint32 {
			ids := make([]uint32, nvme.MaxNSIDListEntries)
			for i := range ids {
				ids[i] = uint32(i + 1)
			}
			return ids
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xee}, nvme.IdentifyDataSize)
			if err := nvme.EncodeNSIDList(buf, tt.ids); err != nil {
				t.Fatal(err)
			}
			if n := 4 * len(tt.ids); !bytes.Equal(buf[n:], make([]byte, len(buf)-n)) {
				t.Error("rest of the buffer not zeroed")
			}
			got, err := nvme.DecodeNSIDList(buf)
			if err != nil || !slices.Equal(got, tt.ids) {
				t.Errorf("decoded %v, %v", got, err)
			}
		})
	}
	if err := nvme.EncodeNSIDList(make([]byte, 4096), []uint32{1, 0, 3}); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("NSID 0: %v", err)
	}
	if err := nvme.EncodeNSIDList(make([]byte, 8), []uint32{1, 2, 3}); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("too many: %v", err)
	}
	if _, err := nvme.DecodeNSIDList(make([]byte, 6)); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("partial dword: %v", err)
	}
	// Entries after the terminating zero are not part of the list.
	got, _ := nvme.DecodeNSIDList([]byte{1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0})
	if !slices.Equal(got, []uint32{1}) {
		t.Errorf("after terminator: %v", got)
	}
}

func TestNSDescriptors(t *testing.T) {
	uuid := [16]byte{0x6b, 0x70, 0x65, 0x65, 0x72, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1}
	eui := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	ds := []nvme.NSDescriptor{
		nvme.NSDescriptorEUI64(eui), nvme.NSDescriptorNGUID(uuid), nvme.NSDescriptorUUID(uuid), nvme.NSDescriptorCSI(nvme.CSIZNS),
		{NIDT: 0x7f, NID: []byte{9, 9, 9}}, // unknown type, kept
	}
	buf := bytes.Repeat([]byte{0xff}, nvme.IdentifyDataSize)
	n, err := nvme.EncodeNSDescriptors(buf, ds)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4+8+4+16+4+16+4+1+4+3 {
		t.Errorf("encoded %d bytes", n)
	}
	want := append([]byte{1, 8, 0, 0}, eui[:]...)
	want = append(want, 2, 16, 0, 0)
	want = append(want, uuid[:]...)
	if !bytes.Equal(buf[:len(want)], want) || !bytes.Equal(buf[n:], make([]byte, len(buf)-n)) {
		t.Errorf("encoding % x", buf[:n])
	}
	got, err := nvme.DecodeNSDescriptors(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ds) {
		t.Fatalf("decoded %d descriptors", len(got))
	}
	for i := range ds {
		if got[i].NIDT != ds[i].NIDT || !bytes.Equal(got[i].NID, ds[i].NID) {
			t.Errorf("descriptor %d: %v, want %v", i, got[i], ds[i])
		}
	}
	if s := got[2].String(); s != "uuid:6b706565720040008000000000000001" {
		t.Errorf("String %q", s)
	}
	// Decode stops where a header no longer fits: a list filling b exactly.
	exact := buf[:n]
	if got, err := nvme.DecodeNSDescriptors(exact); err != nil || len(got) != len(ds) {
		t.Errorf("exact list: %d, %v", len(got), err)
	}

	bad := []struct {
		name string
		b    []byte
		err  error
	}{
		{"wrong EUI64 length", []byte{1, 16, 0, 0}, nvme.ErrMalformed},
		{"wrong CSI length", []byte{4, 2, 0, 0, 0, 0}, nvme.ErrMalformed},
		{"zero length", []byte{9, 0, 0, 0}, nvme.ErrMalformed},
		{"past the end", []byte{3, 16, 0, 0, 1, 2, 3}, nvme.ErrTruncated},
	}
	for _, tt := range bad {
		if _, err := nvme.DecodeNSDescriptors(tt.b); !errors.Is(err, tt.err) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	encBad := []struct {
		name string
		ds   []nvme.NSDescriptor
		size int
	}{
		{"type 0", []nvme.NSDescriptor{{NIDT: 0, NID: []byte{1}}}, 4096},
		{"wrong length", []nvme.NSDescriptor{{NIDT: nvme.NIDTUUID, NID: []byte{1}}}, 4096},
		{"empty NID", []nvme.NSDescriptor{{NIDT: 9}}, 4096},
		{"NID too long", []nvme.NSDescriptor{{NIDT: 9, NID: make([]byte, 256)}}, 4096},
		{"does not fit", []nvme.NSDescriptor{nvme.NSDescriptorUUID(uuid)}, 19},
	}
	for _, tt := range encBad {
		if _, err := nvme.EncodeNSDescriptors(make([]byte, tt.size), tt.ds); !errors.Is(err, nvme.ErrMalformed) {
			t.Errorf("encode %s: %v", tt.name, err)
		}
	}
}
