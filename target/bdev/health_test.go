package bdev

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// nvmeSMARTPage builds a SMART / Health log page byte by byte at the
// offsets of NVMe Base Specification 2.0 Figure 207 (little-endian).
func nvmeSMARTPage() []byte {
	p := make([]byte, 512)
	p[0] = 0x04                                  // Critical Warning: reliability
	binary.LittleEndian.PutUint16(p[1:], 0x0143) // Composite Temperature 323 K
	p[3], p[4], p[5] = 97, 10, 12                // spare, threshold, used
	binary.LittleEndian.PutUint64(p[32:], 123456)
	binary.LittleEndian.PutUint64(p[48:], 654321)
	binary.LittleEndian.PutUint64(p[112:], 42)   // Power Cycles
	binary.LittleEndian.PutUint64(p[128:], 8760) // Power On Hours
	binary.LittleEndian.PutUint64(p[144:], 3)    // Unsafe Shutdowns
	binary.LittleEndian.PutUint64(p[160:], 1)    // Media Errors
	binary.LittleEndian.PutUint64(p[176:], 7)    // Error Log Entries
	binary.LittleEndian.PutUint64(p[176+8:], 1)  // ... beyond 64 bits
	return p
}

func TestHealthFromNVMe(t *testing.T) {
	want := Health{
		CriticalWarning: 4, TemperatureKelvin: 323, AvailableSpare: 97, AvailableSpareThreshold: 10,
		PercentageUsed: 12, DataUnitsRead: 123456, DataUnitsWritten: 654321, PowerCycles: 42,
		PowerOnHours: 8760, UnsafeShutdowns: 3, MediaErrors: 1, ErrorLogEntries: ^uint64(0),
	}
	var gotLID uint8
	var gotNSID uint32
	h, err := nvmeHealth(func(lid uint8, nsid uint32, buf []byte) error {
		gotLID, gotNSID = lid, nsid
		copy(buf, nvmeSMARTPage())
		return nil
	})
	if err != nil || h != want {
		t.Fatalf("nvmeHealth = %+v, %v\nwant %+v", h, err, want)
	}
	if gotLID != 0x02 || gotNSID != 0xffffffff {
		t.Errorf("read log %#x of NSID %#x, want 02h of FFFFFFFFh", gotLID, gotNSID)
	}
	fail := errors.New("status 0x4002")
	if _, err := nvmeHealth(func(uint8, uint32, []byte) error { return fail }); !errors.Is(err, fail) {
		t.Errorf("failed read: %v", err)
	}
	if _, err := healthFromNVMe(make([]byte, 511)); err == nil {
		t.Error("short page accepted")
	}
}

// qemuAttr is one row of QEMU's hw/ide/core.c smart_attributes: id,
// flags, hflags, value, worst, raw[6], threshold.
type qemuAttr [12]byte

// qemuAttrs is QEMU's emulated SMART table ("modified from a Seagate
// ST3500418AS"): power-on hours 1, airflow temperature 31 °C (min/max 31).
var qemuAttrs = []qemuAttr{
	{0x01, 0x03, 0x00, 0x64, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06},
	{0x03, 0x03, 0x00, 0x64, 0x64, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
	{0x04, 0x02, 0x00, 0x64, 0x64, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14},
	{0x05, 0x03, 0x00, 0x64, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x24},
	{0x09, 0x03, 0x00, 0x64, 0x64, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
	{0x0c, 0x03, 0x00, 0x64, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
	{190, 0x03, 0x00, 0x45, 0x45, 0x1f, 0x00, 0x1f, 0x1f, 0x00, 0x00, 0x32},
}

// checksum sets byte 511 so that the 512 bytes sum to zero.
func checksum(b []byte) []byte {
	var s byte
	for _, c := range b[:511] {
		s += c
	}
	b[511] = -s
	return b
}

// smartData lays attrs out as SMART READ DATA does (QEMU's ide core.c).
func smartData(attrs []qemuAttr) []byte {
	b := make([]byte, 512)
	b[0] = 1
	for n, a := range attrs {
		copy(b[2+12*n:], a[:11])
	}
	return checksum(b)
}

// smartThresholds lays attrs' thresholds out as READ THRESHOLDS does.
func smartThresholds(attrs []qemuAttr) []byte {
	b := make([]byte, 512)
	b[0] = 1
	for n, a := range attrs {
		b[2+12*n], b[3+12*n] = a[0], a[11]
	}
	return checksum(b)
}

// descSense is descriptor-format sense with an ATA Status Return
// descriptor holding LBA mid/high, as libata returns for CK_COND.
func descSense(mid, high uint8) []byte {
	s := make([]byte, 8+14)
	s[0], s[1], s[2], s[3], s[7] = 0x72, 0x01, 0x00, 0x1d, 14
	d := s[8:]
	d[0], d[1], d[9], d[11], d[13] = 0x09, 0x0c, mid, high, 0x50
	return s
}

// fakeDisk answers the SCSI and ATA pass-through commands of a disk.
type fakeDisk struct {
	vendor   string
	model    string // ATA model (IDENTIFY words 27-46)
	word85   uint16
	data     []byte // SMART READ DATA
	thresh   []byte // nil: command refused
	sense    []byte // RETURN STATUS registers; nil: refused
	logPages map[uint8][]byte
	sent     int
}

var errIllegal = &sgError{status: 2, sense: []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0}}

func (f *fakeDisk) sendCDB(cdb, buf []byte) ([]byte, error) {
	f.sent++
	switch cdb[0] {
	case 0x12: // INQUIRY
		copy(buf[8:16], f.vendor+"        ")
		return nil, nil
	case 0x85: // ATA PASS-THROUGH (16)
		switch {
		case cdb[14] == 0xec:
			binary.LittleEndian.PutUint16(buf[85*2:], f.word85)
			m := []byte(f.model + "                                        ")[:40]
			for i := 0; i < 40; i += 2 { // ATA strings are byte-swapped words
				buf[54+i], buf[54+i+1] = m[i+1], m[i]
			}
			return nil, nil
		case cdb[14] == 0xb0 && cdb[4] == 0xd0 && cdb[10] == 0x4f && cdb[12] == 0xc2:
			copy(buf, f.data)
			return nil, nil
		case cdb[14] == 0xb0 && cdb[4] == 0xd1 && f.thresh != nil:
			copy(buf, f.thresh)
			return nil, nil
		case cdb[14] == 0xb0 && cdb[4] == 0xda && cdb[2]&0x20 != 0 && f.sense != nil:
			return f.sense, nil
		}
	case 0x4d: // LOG SENSE
		if p, ok := f.logPages[cdb[2]&0x3f]; ok && cdb[2]>>6 == 1 {
			copy(buf, p)
			return nil, nil
		}
	}
	return errIllegal.sense, errIllegal
}

func qemuSATA() *fakeDisk {
	return &fakeDisk{vendor: "ATA", model: "QEMU HARDDISK", word85: 1<<14 | 1,
		data: smartData(qemuAttrs), thresh: smartThresholds(qemuAttrs), sense: descSense(0x4f, 0xc2)}
}

func TestATAHealth(t *testing.T) {
	qemu := Health{TemperatureKelvin: 304, PowerOnHours: 1, AvailableSpare: 100, AvailableSpareThreshold: 10}
	with := func(edit func(*fakeDisk)) *fakeDisk { d := qemuSATA(); edit(d); return d }
	attrs := func(a ...qemuAttr) []qemuAttr { return append(append([]qemuAttr{}, qemuAttrs...), a...) }
	tests := []struct {
		name    string
		disk    cdbSender
		want    Health
		wantErr error
	}{
		{"QEMU HARDDISK", qemuSATA(), qemu, nil},
		{"SMART says failing (fixed sense)", with(func(d *fakeDisk) {
			d.sense = []byte{0x70, 0, 0x01, 0, 0x50, 0, 0, 10, 0, 0, 0xf4, 0x2c, 0, 0x1d}
		}), Health{CriticalWarning: nvme.SMARTWarningReliability, TemperatureKelvin: 304, PowerOnHours: 1,
			AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
		{"no RETURN STATUS nor thresholds", with(func(d *fakeDisk) { d.sense, d.thresh = nil, nil }), qemu, nil},
		{"worn drive", with(func(d *fakeDisk) {
			a := attrs(
				qemuAttr{194, 0x22, 0, 60, 40, 40, 0, 15, 0, 55, 0, 0},         // 40 °C (min 15, max 55)
				qemuAttr{12, 0x32, 0, 100, 100, 0x39, 0x05, 0, 0, 0, 0, 0},     // duplicate id: first wins
				qemuAttr{187, 0x32, 0, 99, 99, 3, 0, 0, 0, 0, 0, 0},            // reported uncorrect
				qemuAttr{197, 0x12, 0, 100, 100, 2, 0, 0, 0, 0, 0, 0},          // pending sectors
				qemuAttr{192, 0x32, 0, 100, 100, 9, 0, 0, 0, 0, 0, 0},          // power-off retracts
				qemuAttr{233, 0x32, 0, 88, 88, 0, 0, 0, 0, 0, 0, 0},            // wearout 88 % left
				qemuAttr{5, 0x33, 0, 0x24, 0x24, 0x10, 0x02, 0x00, 0, 0, 0, 0}, // duplicate 5: ignored
			)
			a[3][3], a[3][5], a[3][6] = 0x20, 0x00, 0x01 // 5 at value 32 <= threshold 36, 256 sectors
			a[5][5], a[5][6] = 0x10, 0x27                // power cycles 10000
			d.data, d.thresh = smartData(a), smartThresholds(a)
		}), Health{CriticalWarning: nvme.SMARTWarningSpare | nvme.SMARTWarningReliability, TemperatureKelvin: 313,
			PowerOnHours: 1, PowerCycles: 10000, UnsafeShutdowns: 9, MediaErrors: 3, PercentageUsed: 12,
			AvailableSpare: 0, AvailableSpareThreshold: 10}, nil},
		{"hot drive", with(func(d *fakeDisk) {
			a := attrs()
			a[6][3] = 0x30 // airflow temperature at 48 <= threshold 50
			d.data, d.thresh = smartData(a), smartThresholds(a)
		}), Health{CriticalWarning: nvme.SMARTWarningTemperature | nvme.SMARTWarningReliability, TemperatureKelvin: 304,
			PowerOnHours: 1, AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
		{"SMART disabled", with(func(d *fakeDisk) { d.word85 = 0 }), Health{}, ErrNotSupported},
		{"SMART READ DATA refused", &refuseData{qemuSATA()}, Health{}, ErrNotSupported},
		{"bad checksum", with(func(d *fakeDisk) { d.data[511]++ }), Health{}, errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scsiDiskHealth(tt.disk)
			checkHealth(t, got, err, tt.want, tt.wantErr)
		})
	}
}

// refuseData refuses SMART READ DATA with ILLEGAL REQUEST.
type refuseData struct{ *fakeDisk }

func (r *refuseData) sendCDB(cdb, buf []byte) ([]byte, error) {
	if cdb[0] == 0x85 && cdb[4] == 0xd0 {
		return errIllegal.sense, errIllegal
	}
	return r.fakeDisk.sendCDB(cdb, buf)
}

// errAny matches any non-nil error in checkHealth.
var errAny = errors.New("any error")

func checkHealth(t *testing.T, got Health, err error, want Health, wantErr error) {
	t.Helper()
	switch {
	case wantErr == errAny:
		if err == nil {
			t.Fatalf("got %+v, want an error", got)
		}
	case wantErr != nil:
		if !errors.Is(err, wantErr) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
	case err != nil || got != want:
		t.Fatalf("got %+v, %v\nwant %+v", got, err, want)
	}
}

func TestLoadDriveDB(t *testing.T) {
	t.Cleanup(func() { driveDBMu.Lock(); driveDB = nil; driveDBMu.Unlock() })
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	// A model whose attribute 9 counts minutes and whose 231 is not a
	// temperature (as for some SSDs in smartmontools' drivedb.h).
	if err := os.WriteFile(good, []byte(`
drives:
- family: DEFAULT
  model_regex: '-'
  presets:
    "9": {conv: "raw24(raw8)", name: Power_On_Hours}
    "12": {conv: raw48, name: Power_Cycle_Count}
    "190": {conv: tempminmax, name: Airflow_Temperature_Cel}
- family: Fake SSDs
  model_regex: '^FAKE SSD'
  presets:
    "9": {conv: min2hour, name: Power_On_Minutes}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadDriveDB(good); err != nil {
		t.Fatal(err)
	}
	a := append([]qemuAttr{}, qemuAttrs...)
	a[4][5], a[4][6] = 0x10, 0x0e // 3600 minutes
	for _, c := range []struct {
		model string
		poh   uint64
	}{{"FAKE SSD 1TB", 60}, {"QEMU HARDDISK", 3600}, {"FAKE SSD 2TB", 60}} {
		d := qemuSATA()
		d.model, d.data = c.model, smartData(a)
		h, err := scsiDiskHealth(d)
		if err != nil || h.PowerOnHours != c.poh || h.TemperatureKelvin != 304 {
			t.Errorf("%s: %+v, %v; want %d power-on hours, 304 K", c.model, h, err, c.poh)
		}
	}
	for name, content := range map[string]string{
		"bad.yaml":        "drives: [",
		"badregex.yaml":   "drives:\n- family: DEFAULT\n  model_regex: '('\n",
		"nodefault.yaml":  "drives:\n- family: X\n  model_regex: 'X'\n",
		"defaultlast.yml": "drives:\n- family: X\n  model_regex: 'X'\n- family: DEFAULT\n  model_regex: '-'\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := LoadDriveDB(p); err == nil {
			t.Errorf("LoadDriveDB(%s) accepted it", name)
		}
	}
	if err := LoadDriveDB(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestBuiltinDriveDB(t *testing.T) {
	db, err := parseDriveDB(defaultDriveDB)
	if err != nil || !defaultFirst(db) {
		t.Fatalf("built-in drive database: %v (DEFAULT first: %v)", err, err == nil && defaultFirst(db))
	}
	m := lookupDrive("QEMU HARDDISK")
	for id, conv := range map[string]string{"9": "raw24(raw8)", "190": "tempminmax", "194": "tempminmax", "12": "raw48"} {
		if m.Presets[id].Conv != conv {
			t.Errorf("attribute %s: conversion %q, want %q", id, m.Presets[id].Conv, conv)
		}
	}
}

func TestATASMARTStatus(t *testing.T) {
	tests := []struct {
		name  string
		sense []byte
		want  int
	}{
		{"descriptor good", descSense(0x4f, 0xc2), ataStatusGood},
		{"descriptor failing", descSense(0xf4, 0x2c), ataStatusFailing},
		{"descriptor other", descSense(0x00, 0x00), ataStatusUnknown},
		{"descriptor without ATA return", []byte{0x72, 1, 0, 0x1d, 0, 0, 0, 4, 0x02, 0x02, 0, 0}, ataStatusUnknown},
		{"descriptor length past end", []byte{0x72, 1, 0, 0x1d, 0, 0, 0, 40, 0x09, 0x0c, 0}, ataStatusUnknown},
		{"fixed good", []byte{0x70, 0, 1, 0, 0x50, 0, 0, 10, 0, 0, 0x4f, 0xc2}, ataStatusGood},
		{"fixed failing", []byte{0xf0, 0, 1, 0, 0x50, 0, 0, 10, 0, 0, 0xf4, 0x2c, 0, 0x1d}, ataStatusFailing},
		{"fixed too short", []byte{0x70, 0, 1, 0, 0x50}, ataStatusUnknown},
		{"empty", nil, ataStatusUnknown},
		{"other format", []byte{0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xf4, 0x2c}, ataStatusUnknown},
	}
	for _, tt := range tests {
		if got := ataSMARTStatus(tt.sense); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// logPage builds a SCSI log page: header, then {code, control, value}.
func logPage(page uint8, params ...any) []byte {
	b := []byte{page, 0, 0, 0}
	for i := 0; i+1 < len(params); i += 2 {
		v := params[i+1].([]byte)
		b = binary.BigEndian.AppendUint16(b, uint16(params[i].(int)))
		b = append(b, 0x03, byte(len(v)))
		b = append(b, v...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)-4))
	return b
}

func sasDisk() *fakeDisk {
	return &fakeDisk{vendor: "SEAGATE", logPages: map[uint8][]byte{
		0x00: {0x00, 0, 0, 8, 0x00, 0x02, 0x03, 0x0d, 0x0e, 0x11, 0x15, 0x2f},
		0x02: logPage(0x02, 0x0006, []byte{0, 0, 0, 2}),
		0x03: logPage(0x03, 0x0000, []byte{0, 0, 0, 9}, 0x0006, []byte{0, 0, 0, 0, 0, 5}),
		0x0d: logPage(0x0d, 0x0000, []byte{0, 36}, 0x0001, []byte{0, 65}),
		0x0e: logPage(0x0e, 0x0001, []byte("20230101"), 0x0004, []byte{0, 0, 0x01, 0x00}),
		0x11: logPage(0x11, 0x0001, []byte{0, 0, 0, 7}),
		0x15: logPage(0x15, 0x0000, []byte{0, 0x01, 0x00, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0}),
		0x2f: logPage(0x2f, 0x0000, []byte{0, 0, 38}),
	}}
}

func TestSCSIHealth(t *testing.T) {
	with := func(edit func(*fakeDisk)) *fakeDisk { d := sasDisk(); edit(d); return d }
	tests := []struct {
		name    string
		disk    *fakeDisk
		want    Health
		wantErr error
	}{
		{"SAS disk", sasDisk(), Health{TemperatureKelvin: 309, PowerOnHours: 65536 / 60, PowerCycles: 256,
			MediaErrors: 7, PercentageUsed: 7, AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
		{"failure predicted, no temperature page", with(func(d *fakeDisk) {
			d.logPages[0x00] = []byte{0x00, 0, 0, 2, 0x00, 0x2f}
			d.logPages[0x2f] = logPage(0x2f, 0x0000, []byte{0x5d, 0x10, 41})
		}), Health{CriticalWarning: nvme.SMARTWarningReliability, TemperatureKelvin: 314,
			AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
		{"temperature warning", with(func(d *fakeDisk) {
			d.logPages[0x00] = []byte{0x00, 0, 0, 2, 0x00, 0x2f}
			d.logPages[0x2f] = logPage(0x2f, 0x0000, []byte{0x0b, 0x01, 0xff})
		}), Health{CriticalWarning: nvme.SMARTWarningReliability | nvme.SMARTWarningTemperature,
			AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
		{"page listed but refused or wrong", with(func(d *fakeDisk) {
			d.logPages[0x00] = []byte{0x00, 0, 0, 3, 0x00, 0x0d, 0x0e}
			delete(d.logPages, 0x0d)
			d.logPages[0x0e] = logPage(0x0d, 0x0000, []byte{0, 36})
		}), Health{}, ErrNotSupported},
		{"no log pages", with(func(d *fakeDisk) { d.logPages = nil }), Health{}, ErrNotSupported},
		{"unknown temperature", with(func(d *fakeDisk) {
			d.logPages[0x0d] = logPage(0x0d, 0x0000, []byte{0, 0xff})
		}), Health{TemperatureKelvin: 311, PowerOnHours: 65536 / 60, PowerCycles: 256,
			MediaErrors: 7, PercentageUsed: 7, AvailableSpare: 100, AvailableSpareThreshold: 10}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := scsiDiskHealth(tt.disk)
			checkHealth(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestParseLogPage(t *testing.T) {
	p, err := parseLogPage(logPage(0x0d, 0x0000, []byte{0, 36}, 0x0001, []byte{0, 65}), 0x0d)
	if err != nil || len(p) != 2 || p[0][1] != 36 || p[1][1] != 65 {
		t.Errorf("temperature page: %v, %v", p, err)
	}
	full := logPage(0x0d, 0x0000, []byte{0, 36}, 0x0001, []byte{0, 65})
	if p, err := parseLogPage(full[:len(full)-1], 0x0d); err != nil || len(p) != 1 {
		t.Errorf("truncated page: %v, %v; want the first parameter only", p, err)
	}
	for name, b := range map[string][]byte{"short": {0x0d, 0}, "other page": logPage(0x0e)} {
		if _, err := parseLogPage(b, 0x0d); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if v := beUint([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0}); v != ^uint64(0) {
		t.Errorf("beUint of 9 bytes over 64 bits = %d, want saturated", v)
	}
	if v := beUint([]byte{0, 0, 0, 0, 0, 0, 0, 1, 2}); v != 0x102 {
		t.Errorf("beUint = %#x, want 0x102", v)
	}
}

func TestHealthCache(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	var next error
	c := healthCache{
		now:  func() time.Time { return now },
		read: func() (Health, error) { reads++; return Health{PowerOnHours: uint64(reads)}, next },
	}
	steps := []struct {
		advance   time.Duration
		err       error // what the next read returns
		wantReads int
		wantPOH   uint64
	}{
		{0, nil, 1, 1},
		{HealthTTL - time.Nanosecond, nil, 1, 1},
		{time.Nanosecond, errors.New("timeout"), 2, 2},
		{time.Second, nil, 2, 2}, // the error is kept for the TTL too
		{HealthTTL, ErrNotSupported, 3, 3},
		{100 * HealthTTL, nil, 3, 3}, // not supported: for good
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		next = s.err
		h, _ := c.get(HealthTTL)
		if reads != s.wantReads || h.PowerOnHours != s.wantPOH {
			t.Fatalf("step %d: %d reads, power-on hours %d; want %d, %d", i, reads, h.PowerOnHours, s.wantReads, s.wantPOH)
		}
	}
}

func TestReadHealthNotSupported(t *testing.T) {
	file := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, "/dev/null"} {
		if _, err := ReadHealth(path); !errors.Is(err, ErrNotSupported) {
			t.Errorf("ReadHealth(%q) = %v, want ErrNotSupported", path, err)
		}
	}
	if _, err := ReadHealth(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ReadHealth of a missing path succeeded")
	}
}

func FuzzParseLogPage(f *testing.F) {
	f.Add(logPage(0x0d, 0x0000, []byte{0, 36}, 0x0001, []byte{0, 65}), uint8(0x0d))
	f.Add([]byte{0x2f, 0, 0xff, 0xff, 0, 0, 3, 200}, uint8(0x2f))
	f.Fuzz(func(t *testing.T, b []byte, page uint8) {
		p, err := parseLogPage(b, page)
		if err != nil {
			return
		}
		total := 0
		for _, v := range p {
			total += 4 + len(v)
		}
		if total > len(b) {
			t.Fatalf("parameters of %d bytes from a %d-byte page", total, len(b))
		}
		_ = healthFromSCSI(map[uint8]logParams{page: p})
	})
}

func FuzzATASMARTStatus(f *testing.F) {
	f.Add(descSense(0x4f, 0xc2))
	f.Add([]byte{0x70, 0, 1, 0, 0x50, 0, 0, 10, 0, 0, 0xf4, 0x2c})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s := ataSMARTStatus(b); s < ataStatusUnknown || s > ataStatusFailing {
			t.Fatalf("status %d", s)
		}
		_, _, _, _ = senseKey(b)
	})
}

func FuzzHealthFromATA(f *testing.F) {
	f.Add(smartData(qemuAttrs), smartThresholds(qemuAttrs))
	f.Add(make([]byte, 512), []byte(nil))
	f.Fuzz(func(t *testing.T, data, thresh []byte) {
		if len(data) >= 512 {
			checksum(data) // reach the attribute decoding
		}
		h, err := healthFromATA("QEMU HARDDISK", data, thresh, ataStatusUnknown)
		if err != nil {
			return
		}
		if h.AvailableSpare > 100 || h.PercentageUsed > 100 {
			t.Fatalf("out of range percentages: %+v", h)
		}
	})
}
