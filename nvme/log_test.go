package nvme_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

func TestUint128(t *testing.T) {
	tests := []struct {
		v      nvme.Uint128
		s      string
		u64    uint64
		fits   bool
		wireLE []byte
	}{
		{nvme.U128(0), "0", 0, true, make([]byte, 16)},
		{nvme.U128(6), "6", 6, true, append([]byte{6}, make([]byte, 15)...)},
		{nvme.Uint128{Lo: ^uint64(0), Hi: 0}, "18446744073709551615", ^uint64(0), true, append(bytes.Repeat([]byte{0xff}, 8), make([]byte, 8)...)},
		{nvme.Uint128{Lo: 0, Hi: 1}, "18446744073709551616", ^uint64(0), false, append(make([]byte, 8), append([]byte{1}, make([]byte, 7)...)...)},
		{nvme.Uint128{Lo: ^uint64(0), Hi: ^uint64(0)}, "340282366920938463463374607431768211455", ^uint64(0), false, bytes.Repeat([]byte{0xff}, 16)},
	}
	for _, tt := range tests {
		if tt.v.String() != tt.s {
			t.Errorf("%+v: String %q", tt.v, tt.v.String())
		}
		if u, ok := tt.v.Uint64(); u != tt.u64 || ok != tt.fits {
			t.Errorf("%+v: Uint64 %d %v", tt.v, u, ok)
		}
		if b := tt.v.Bytes(); !bytes.Equal(b[:], tt.wireLE) {
			t.Errorf("%+v: Bytes % x", tt.v, b)
		}
		want, _ := new(big.Int).SetString(tt.s, 10)
		if tt.v.Big().Cmp(want) != 0 {
			t.Errorf("%+v: Big %v", tt.v, tt.v.Big())
		}
	}
}

func TestSMARTLog(t *testing.T) {
	if _, err := nvme.ParseSMARTLog(make([]byte, 511)); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("511 bytes: %v", err)
	}
	l, err := nvme.ParseSMARTLog(make([]byte, 600))
	if err != nil || len(l) != 512 {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		l.SetTemperatureSensor(i, uint16(300+i))
	}
	l.SetTemperatureSensor(8, 1) // ignored
	l.SetTemperatureSensor(-1, 1)
	for i := 0; i < 8; i++ {
		if got := binary.LittleEndian.Uint16(l[200+2*i:]); got != uint16(300+i) || l.TemperatureSensor(i) != got {
			t.Errorf("sensor %d: %d", i+1, got)
		}
	}
	if l.TemperatureSensor(8) != 0 || l[216] != 0 {
		t.Error("sensor 9")
	}
	l.SetCriticalWarning(nvme.SMARTWarningSpare | nvme.SMARTWarningReadOnly)
	l.SetDataUnitsRead(nvme.Uint128{Lo: 1, Hi: 2})
	if l[0] != 0x09 || l[32] != 1 || l[40] != 2 {
		t.Errorf("bytes % x", l[:48])
	}
}

func TestErrorLog(t *testing.T) {
	b := make([]byte, 2*nvme.ErrorLogEntrySize+10)
	es := nvme.ParseErrorLog(b)
	if len(es) != 2 {
		t.Fatalf("%d entries", len(es))
	}
	es[1].SetErrorCount(7)
	es[1].SetStatusRaw(1<<15 | uint16(nvme.StatusInvalidField)<<1 | 1)
	if es[1].Status() != nvme.StatusInvalidField || binary.LittleEndian.Uint64(b[64:]) != 7 {
		t.Errorf("entry 1: %v", es[1].Status())
	}
	if len(nvme.ParseErrorLog(b[:63])) != 0 {
		t.Error("partial entry")
	}
}

func TestFirmwareSlotLog(t *testing.T) {
	if _, err := nvme.ParseFirmwareSlotLog(make([]byte, 100)); !errors.Is(err, nvme.ErrTruncated) {
		t.Error("short")
	}
	l, _ := nvme.ParseFirmwareSlotLog(make([]byte, 512))
	l.SetActiveSlot(1)
	l.SetNextSlot(2)
	if l.AFI() != 0x21 || l.ActiveSlot() != 1 || l.NextSlot() != 2 {
		t.Errorf("AFI %#x", l.AFI())
	}
	l.SetAFI(0)
	if err := l.SetFRS(1, "6.1.0"); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFRS(7, "12345678"); err != nil {
		t.Fatal(err)
	}
	if string(l[8:16]) != "6.1.0   " || string(l[56:64]) != "12345678" || l.FRS(1) != "6.1.0" || l.FRS(7) != "12345678" || l.FRS(2) != "" {
		t.Errorf("FRS % x", l[8:64])
	}
	if err := l.SetFRS(1, ""); err != nil || l.FRS(1) != "" || !bytes.Equal(l[8:16], make([]byte, 8)) {
		t.Error("clearing slot 1")
	}
	for _, slot := range []int{0, 8} {
		if err := l.SetFRS(slot, "x"); !errors.Is(err, nvme.ErrMalformed) || l.FRS(slot) != "" {
			t.Errorf("slot %d: %v", slot, err)
		}
	}
	if err := l.SetFRS(2, "123456789"); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("9-byte revision: %v", err)
	}
}

func TestChangedNSList(t *testing.T) {
	tests := []struct {
		name     string
		ids      []uint32
		overflow bool
	}{
		{"none", nil, false},
		{"two", []uint32{3, 9}, false},
		{"1024", make([]uint32, 1024), false},
		{"1025", make([]uint32, 1025), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.ids {
				if tt.ids[i] == 0 {
					tt.ids[i] = uint32(i + 1)
				}
			}
			buf := bytes.Repeat([]byte{0xaa}, nvme.ChangedNSListLogSize)
			if err := nvme.EncodeChangedNSList(buf, tt.ids); err != nil {
				t.Fatal(err)
			}
			ids, overflow, err := nvme.DecodeChangedNSList(buf)
			if err != nil || overflow != tt.overflow {
				t.Fatalf("overflow %v, %v", overflow, err)
			}
			if overflow {
				if binary.LittleEndian.Uint32(buf) != nvme.ChangedNSListOverflow || !bytes.Equal(buf[4:], make([]byte, 4092)) || ids != nil {
					t.Errorf("overflow page % x", buf[:8])
				}
			} else if !slices.Equal(ids, tt.ids) {
				t.Errorf("decoded %d ids", len(ids))
			}
		})
	}
	if err := nvme.EncodeChangedNSList(make([]byte, 2), make([]uint32, 2000)); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("overflow into 2 bytes: %v", err)
	}
	if _, _, err := nvme.DecodeChangedNSList(make([]byte, 5)); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("5 bytes: %v", err)
	}
}

func TestEffectsLog(t *testing.T) {
	if _, err := nvme.ParseEffectsLog(make([]byte, 4095)); !errors.Is(err, nvme.ErrTruncated) {
		t.Error("short")
	}
	l, _ := nvme.ParseEffectsLog(make([]byte, 4096))
	l.SetACS(nvme.AdminIdentify, nvme.EffectsCSUPP)
	l.SetACS(0xff, 7)
	l.SetIOCS(nvme.IOWrite, nvme.EffectsCSUPP|nvme.EffectsLBCC)
	l.SetIOCS(0xff, nvme.EffectsCSUPP|nvme.EffectsCSEAnyNamespace<<nvme.EffectsCSEShift)
	if l[24] != 1 || l[1020] != 7 || l[1028] != 3 || binary.LittleEndian.Uint32(l[2044:]) != 0x20001 {
		t.Error("entry placement")
	}
	if l.ACS(nvme.AdminIdentify) != 1 || l.IOCS(nvme.IOWrite) != 3 || l.IOCS(nvme.IORead) != 0 ||
		(l.IOCS(0xff)&nvme.EffectsCSEMask)>>nvme.EffectsCSEShift != nvme.EffectsCSEAnyNamespace {
		t.Error("round trip")
	}
}

func TestANALog(t *testing.T) {
	tests := []struct {
		name string
		log  nvme.ANALog
	}{
		{"empty", nvme.ANALog{ChangeCount: 9}},
		{"nvmet", nvme.ANALog{Groups: []nvme.ANAGroup{{GroupID: 1, State: nvme.ANAOptimized, NSIDs: []uint32{1}}}}},
		{"several", nvme.ANALog{ChangeCount: 1 << 40, Groups: []nvme.ANAGroup{
			{GroupID: 1, ChangeCount: 3, State: nvme.ANANonOptimized, NSIDs: []uint32{1, 2, 3}},
			{GroupID: 2, State: nvme.ANAInaccessible},
			{GroupID: 0xffffffff, ChangeCount: 5, State: nvme.ANAChange, NSIDs: []uint32{0xfffffffe}},
		}}},
		{"RGO", nvme.ANALog{Groups: []nvme.ANAGroup{{GroupID: 4, State: nvme.ANAPersistentLoss}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.log.AppendBinary([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			b = b[len("prefix"):]
			if len(b) != tt.log.Size() {
				t.Errorf("%d bytes, Size %d", len(b), tt.log.Size())
			}
			if binary.LittleEndian.Uint16(b[8:]) != uint16(len(tt.log.Groups)) {
				t.Error("NGRPS")
			}
			// The host's buffer is usually larger than the log.
			got, err := nvme.DecodeANALog(append(b, make([]byte, 100)...))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.log) {
				t.Errorf("decoded %+v\nwant %+v", got, tt.log)
			}
			for cut := 0; cut < len(b); cut += 4 {
				if _, err := nvme.DecodeANALog(b[:cut]); !errors.Is(err, nvme.ErrTruncated) {
					t.Errorf("cut at %d: %v", cut, err)
					break
				}
			}
		})
	}
	// Byte layout of one group (Linux struct nvme_ana_group_desc).
	b, _ := nvme.ANALog{ChangeCount: 0x0102, Groups: []nvme.ANAGroup{{GroupID: 5, ChangeCount: 6, State: nvme.ANAOptimized, NSIDs: []uint32{7}}}}.AppendBinary(nil)
	want := []byte{2, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		5, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		7, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Errorf("layout\n% x\nwant\n% x", b, want)
	}
	if _, err := (nvme.ANALog{Groups: make([]nvme.ANAGroup, 0x10000)}).AppendBinary(nil); !errors.Is(err, nvme.ErrMalformed) {
		t.Errorf("65536 groups: %v", err)
	}
	// A huge NGRPS or NNSIDS must not make the decoder allocate for it.
	huge := make([]byte, 48)
	binary.LittleEndian.PutUint16(huge[8:], 0xffff)
	if _, err := nvme.DecodeANALog(huge); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("NGRPS 65535 in 48 bytes: %v", err)
	}
	binary.LittleEndian.PutUint16(huge[8:], 1)
	binary.LittleEndian.PutUint32(huge[20:], 0xffffffff)
	if _, err := nvme.DecodeANALog(huge); !errors.Is(err, nvme.ErrTruncated) {
		t.Errorf("NNSIDS 2^32-1: %v", err)
	}
	for s, name := range map[nvme.ANAState]string{1: "optimized", 2: "non-optimized", 3: "inaccessible", 4: "persistent-loss", 0xf: "change", 5: "ANAState(0x5)"} {
		if s.String() != name {
			t.Errorf("%d: %q", s, s.String())
		}
		if got, ok := nvme.ParseANAState(name); ok != (s != 5) || ok && got != s {
			t.Errorf("ParseANAState(%q) = %v, %v", name, got, ok)
		}
	}
}

func TestLogPageIDString(t *testing.T) {
	for lid, name := range map[nvme.LogPageID]string{
		nvme.LIDError: "Error Information", nvme.LIDSMART: "SMART / Health Information", nvme.LIDFirmwareSlot: "Firmware Slot Information",
		nvme.LIDChangedNSList: "Changed Namespace List", nvme.LIDCommandEffects: "Commands Supported and Effects",
		nvme.LIDANA: "Asymmetric Namespace Access", nvme.LIDDiscovery: "Discovery", 0x50: "Log Page 0x50", 0xd0: "Vendor Specific Log Page 0xd0",
	} {
		if lid.String() != name {
			t.Errorf("%#x: %q", uint8(lid), lid.String())
		}
	}
}
