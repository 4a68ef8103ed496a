package bdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dswarbrick/smart/ata"
	"github.com/dswarbrick/smart/drivedb"
	"github.com/dswarbrick/smart/scsi"

	"github.com/nvmeof/nvmeof/nvme"
)

// readSCSIHealth reads the health of a disk that takes SG_IO: ATA SMART
// for SATA disks, LOG SENSE for the others.
func readSCSIHealth(node string) (Health, error) {
	d, err := openSG(node)
	if err != nil {
		return Health{}, err
	}
	defer d.close()
	return scsiDiskHealth(d)
}

// ataVendor is the INQUIRY vendor of a SATA disk behind a SCSI/ATA
// Translation layer (libata, SAS HBAs).
var ataVendor = [8]byte{'A', 'T', 'A', ' ', ' ', ' ', ' ', ' '}

// scsiDiskHealth asks INQUIRY and reads ATA SMART or SCSI log pages.
func scsiDiskHealth(s cdbSender) (Health, error) {
	buf := make([]byte, scsi.INQ_REPLY_LEN)
	cdb := scsi.CDB6{scsi.SCSI_INQUIRY}
	binary.BigEndian.PutUint16(cdb[3:], uint16(len(buf)))
	if _, err := s.sendCDB(cdb[:], buf); err != nil {
		return Health{}, fmt.Errorf("INQUIRY: %w", err)
	}
	var inq scsi.InquiryResponse
	if err := binary.Read(bytes.NewReader(buf), binary.BigEndian, &inq); err != nil {
		return Health{}, fmt.Errorf("INQUIRY: %w", err)
	}
	if inq.VendorIdent == ataVendor {
		return ataHealth(s)
	}
	return scsiLogHealth(s)
}

// ATA PASS-THROUGH (16) fields (SAT-4 12.2.2).
const (
	ataProtoNonData = 3 << 1
	ataProtoPIOIn   = 4 << 1
	ataCkCond       = 1 << 5 // return the ATA registers in the sense data
	ataPIOInBlocks  = 0x0e   // T_DIR from device, BYT_BLOK, T_LENGTH in the count field
	smartReadThresh = 0xd1   // SMART READ ATTRIBUTE THRESHOLDS
	ataSMARTLBAMid  = 0x4f
	ataSMARTLBAHigh = 0xc2
	ataSMARTFailMid = 0xf4 // RETURN STATUS: threshold exceeded
	ataSMARTFailHi  = 0x2c
)

// ataCDB builds an ATA PASS-THROUGH (16) CDB for a SMART or IDENTIFY
// command.
func ataCDB(proto, flags, feature, count, command uint8) []byte {
	cdb := scsi.CDB16{scsi.SCSI_ATA_PASSTHRU_16}
	cdb[1] = proto
	cdb[2] = flags
	cdb[4] = feature
	cdb[6] = count
	cdb[14] = command
	if command == ata.ATA_SMART {
		cdb[10], cdb[12] = ataSMARTLBAMid, ataSMARTLBAHigh
	}
	return cdb[:]
}

// ataHealth reads IDENTIFY DEVICE, SMART READ DATA, the thresholds and
// RETURN STATUS of a SATA disk.
func ataHealth(s cdbSender) (Health, error) {
	buf := make([]byte, 512)
	if _, err := s.sendCDB(ataCDB(ataProtoPIOIn, ataPIOInBlocks, 0, 1, ata.ATA_IDENTIFY_DEVICE), buf); err != nil {
		return Health{}, fmt.Errorf("ATA IDENTIFY DEVICE: %w", err)
	}
	var id ata.IdentifyDeviceData
	if err := binary.Read(bytes.NewReader(buf), binary.LittleEndian, &id); err != nil {
		return Health{}, fmt.Errorf("ATA IDENTIFY DEVICE: %w", err)
	}
	// Word 82 bit 0 (SMART supported) is not in IdentifyDeviceData; word
	// 85 bit 0 is "enabled", which implies it.
	if id.Word85&1 == 0 {
		return Health{}, fmt.Errorf("ATA SMART is disabled or not supported: %w", ErrNotSupported)
	}
	model := string(id.ModelNumber())
	data := make([]byte, 512)
	if _, err := s.sendCDB(ataCDB(ataProtoPIOIn, ataPIOInBlocks, ata.SMART_READ_DATA, 1, ata.ATA_SMART), data); err != nil {
		if illegalRequest(err) {
			return Health{}, fmt.Errorf("ATA SMART READ DATA: %w: %w", err, ErrNotSupported)
		}
		return Health{}, fmt.Errorf("ATA SMART READ DATA: %w", err)
	}
	// Thresholds and status are optional (the former is obsolete since
	// ATA8-ACS, the latter needs a HBA that returns the registers).
	thresh := make([]byte, 512)
	if _, err := s.sendCDB(ataCDB(ataProtoPIOIn, ataPIOInBlocks, smartReadThresh, 1, ata.ATA_SMART), thresh); err != nil {
		thresh = nil
	}
	status := ataStatusUnknown
	if sense, err := s.sendCDB(ataCDB(ataProtoNonData, ataCkCond, ata.SMART_RETURN_STATUS, 0, ata.ATA_SMART), nil); err == nil {
		status = ataSMARTStatus(sense)
	}
	return healthFromATA(model, data, thresh, status)
}

// ATA SMART RETURN STATUS outcomes.
const (
	ataStatusUnknown = iota
	ataStatusGood
	ataStatusFailing
)

// ataSMARTStatus decodes SMART RETURN STATUS from the ATA registers in
// sense data: the ATA Status Return descriptor (code 09h) of descriptor
// format sense, or the fixed format's command-specific bytes (SAT-4
// 12.2.2.6, 12.2.2.7).
func ataSMARTStatus(sense []byte) int {
	var mid, high uint8
	switch {
	case len(sense) >= 8 && (sense[0]&0x7f == 0x72 || sense[0]&0x7f == 0x73):
		end := min(len(sense), 8+int(sense[7]))
		found := false
		for d := sense[8:end]; len(d) >= 2; {
			n := 2 + int(d[1])
			if n > len(d) {
				break
			}
			if d[0] == 0x09 && n >= 14 {
				mid, high, found = d[9], d[11], true
				break
			}
			d = d[n:]
		}
		if !found {
			return ataStatusUnknown
		}
	case len(sense) >= 12 && (sense[0]&0x7f == 0x70 || sense[0]&0x7f == 0x71):
		mid, high = sense[10], sense[11]
	default:
		return ataStatusUnknown
	}
	switch {
	case mid == ataSMARTLBAMid && high == ataSMARTLBAHigh:
		return ataStatusGood
	case mid == ataSMARTFailMid && high == ataSMARTFailHi:
		return ataStatusFailing
	}
	return ataStatusUnknown
}

// ataAttr is one SMART attribute with its threshold (0 when unknown).
type ataAttr struct {
	id, value, worst, reserved, thresh uint8
	flags                              uint16
	vendor                             [6]byte
	conv                               drivedb.AttrConv
}

// failing reports an attribute at or below its threshold (smartctl's
// "FAILING_NOW"); a zero threshold means "never fails".
func (a ataAttr) failing() bool { return a.thresh != 0 && a.value <= a.thresh }

// raw assembles the raw value in the byte order the conversion asks for,
// as smartmontools and github.com/dswarbrick/smart do (543210: vendor
// bytes 5..0; r: the reserved byte; v, w: the normalized and worst value).
func (a ataAttr) raw() uint64 {
	order := "543210"
	switch a.conv.Conv {
	case "raw64", "hex64":
		order = "543210wv"
	case "raw56", "hex56", "raw24/raw32", "msec24hour32":
		order = "r543210"
	}
	var r uint64
	for _, c := range order {
		var b byte
		switch c {
		case 'r':
			b = a.reserved
		case 'v':
			b = a.value
		case 'w':
			b = a.worst
		default:
			b = a.vendor[c-'0']
		}
		r = r<<8 | uint64(b)
	}
	return r
}

// count is the raw value as a counter, per conversion.
func (a ataAttr) count() uint64 {
	v := a.raw()
	switch a.conv.Conv {
	case "raw16(raw16)", "raw16(avg16)", "raw16":
		return v & 0xffff
	case "raw24(raw8)", "raw24/raw24":
		return v & 0xffffff
	case "raw24/raw32":
		return v & 0xffffffff
	}
	return v
}

// hours is the raw value of a power-on time attribute in hours.
func (a ataAttr) hours() uint64 {
	v := a.raw()
	switch a.conv.Conv {
	case "min2hour":
		return (v & 0xffffffff) / 60
	case "sec2hour":
		return v / 3600
	case "halfmin2hour":
		return v / 120
	case "msec24hour32":
		return v & 0xffffffff
	}
	return a.count()
}

// celsius is the current temperature of a temperature attribute: the
// signed low byte of the raw value (tempminmax keeps min/max above it),
// or a tenth of the low word for temp10x.
func (a ataAttr) celsius() int {
	v := a.raw()
	if a.conv.Conv == "temp10x" {
		return int(v&0xffff) / 10
	}
	return int(int8(v))
}

// SMART READ DATA layout: 2-byte revision, 30 attributes of 12 bytes, ...,
// checksum in byte 511 (ACS-3 Table A.x "Device SMART data structure").
const (
	ataSMARTAttrBytes = 2 + 30*12
	ataThreshOffset   = 2 // thresholds: revision, then 30 × {id, threshold, 10 reserved}
)

// ataChecksumOK: the 512 bytes of a SMART data structure sum to zero.
func ataChecksumOK(b []byte) bool {
	var sum byte
	for _, c := range b[:512] {
		sum += c
	}
	return sum == 0
}

// ataAttrs decodes the attribute table of SMART READ DATA (data, 512
// bytes) with ata.SmartPage, its thresholds (thresh, 512 bytes or nil) and
// the drive database's conversions for model.
func ataAttrs(model string, data, thresh []byte) ([]ataAttr, error) {
	if len(data) < 512 {
		return nil, fmt.Errorf("ATA SMART data: %d bytes, want 512", len(data))
	}
	if !ataChecksumOK(data) {
		return nil, errors.New("ATA SMART data: bad checksum")
	}
	var page ata.SmartPage
	if err := binary.Read(bytes.NewReader(data[:ataSMARTAttrBytes]), binary.LittleEndian, &page); err != nil {
		return nil, fmt.Errorf("ATA SMART data: %w", err)
	}
	th := map[uint8]uint8{}
	if len(thresh) >= 512 && ataChecksumOK(thresh) {
		for i := range 30 {
			e := thresh[ataThreshOffset+12*i:]
			if _, dup := th[e[0]]; e[0] != 0 && !dup {
				th[e[0]] = e[1]
			}
		}
	}
	drive := lookupDrive(model)
	var attrs []ataAttr
	for _, p := range page.Attrs {
		if p.Id == 0 {
			continue
		}
		attrs = append(attrs, ataAttr{
			id: p.Id, flags: p.Flags, value: p.Value, worst: p.Worst, reserved: p.Reserved,
			vendor: p.VendorBytes, thresh: th[p.Id], conv: drive.Presets[strconv.Itoa(int(p.Id))],
		})
	}
	return attrs, nil
}

// healthFromATA maps ATA SMART attributes onto the NVMe SMART / Health
// fields:
//
//   - Composite Temperature: the first attribute the drive database names
//     Temperature_Celsius (194, 231), else any *Temperature* one (190
//     Airflow_Temperature_Cel), in Kelvin.
//   - Power On Hours: attribute 9 in its database unit (hours, minutes,
//     seconds, half minutes); Power Cycles: 12; Unsafe Shutdowns: 174
//     Unexpect_Power_Loss_Ct, else 192 Power-Off_Retract_Count.
//   - Media and Data Integrity Errors: 187 Reported_Uncorrect, else 198
//     Offline_Uncorrectable.
//   - Percentage Used: 100 minus the normalized value of a wear attribute
//     (Media_Wearout_Indicator, SSD_Life_Left, Wear_Leveling_Count, ...).
//   - Available Spare: the normalized value of Available_Reservd_Space and
//     its threshold where the drive has it, else 100 % over 10 %; 0 when
//     Reallocated_Sector_Ct (5) is at its threshold.
//   - Critical Warning: spare (5 failing or spare below threshold),
//     temperature (the temperature attribute failing), reliability (SMART
//     RETURN STATUS "threshold exceeded", any pre-fail attribute failing,
//     or sectors pending reallocation, 197 > 0).
//
// Data units and the error log are the target's own; they stay 0 here.
func healthFromATA(model string, data, thresh []byte, status int) (Health, error) {
	attrs, err := ataAttrs(model, data, thresh)
	if err != nil {
		return Health{}, err
	}
	h := Health{AvailableSpare: 100, AvailableSpareThreshold: 10}
	byID := map[uint8]ataAttr{}
	var temp *ataAttr
	for i, a := range attrs {
		if _, dup := byID[a.id]; !dup {
			byID[a.id] = a
		}
		switch {
		case a.conv.Name == "Temperature_Celsius" && (temp == nil || temp.conv.Name != "Temperature_Celsius"):
			temp = &attrs[i]
		case temp == nil && strings.Contains(a.conv.Name, "Temperature"):
			temp = &attrs[i]
		}
		if a.flags&1 != 0 && a.failing() { // pre-fail attribute failing
			h.CriticalWarning |= nvme.SMARTWarningReliability
		}
		switch a.conv.Name {
		case "Media_Wearout_Indicator", "SSD_Life_Left", "Wear_Leveling_Count", "Percent_Lifetime_Remain", "Remaining_Lifetime_Perc":
			if h.PercentageUsed == 0 {
				h.PercentageUsed = 100 - min(a.value, 100)
			}
		case "Available_Reservd_Space":
			h.AvailableSpare, h.AvailableSpareThreshold = min(a.value, 100), a.thresh
		}
	}
	if temp != nil {
		h.TemperatureKelvin = kelvin(temp.celsius())
		if temp.failing() {
			h.CriticalWarning |= nvme.SMARTWarningTemperature
		}
	}
	if a, ok := byID[9]; ok {
		h.PowerOnHours = a.hours()
	}
	if a, ok := byID[12]; ok {
		h.PowerCycles = a.count()
	}
	if a, ok := byID[174]; ok {
		h.UnsafeShutdowns = a.count()
	} else if a, ok := byID[192]; ok {
		h.UnsafeShutdowns = a.count()
	}
	if a, ok := byID[187]; ok {
		h.MediaErrors = a.count()
	} else if a, ok := byID[198]; ok {
		h.MediaErrors = a.count()
	}
	if a, ok := byID[5]; ok && a.failing() {
		h.AvailableSpare = 0
	}
	if h.AvailableSpare < h.AvailableSpareThreshold {
		h.CriticalWarning |= nvme.SMARTWarningSpare
	}
	if a, ok := byID[197]; ok && a.count() > 0 {
		h.CriticalWarning |= nvme.SMARTWarningReliability
	}
	if status == ataStatusFailing {
		h.CriticalWarning |= nvme.SMARTWarningReliability
	}
	return h, nil
}
