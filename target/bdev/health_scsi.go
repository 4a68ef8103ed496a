package bdev

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/nvmeof/nvmeof/nvme"
)

// SCSI LOG SENSE (SPC-5 6.8) and the log pages read for health (SPC-5 7.3,
// SBC-4 6.4). github.com/dswarbrick/smart's scsi package has no LOG SENSE
// yet; the pages are decoded here.
const (
	scsiLogSense       = 0x4d
	logPageSupported   = 0x00
	logPageWriteErrors = 0x02
	logPageReadErrors  = 0x03
	logPageTemperature = 0x0d
	logPageStartStop   = 0x0e
	logPageSSDMedia    = 0x11
	logPageBackground  = 0x15
	logPageInfoExcept  = 0x2f
	logPCCumulative    = 1 << 6 // page control: cumulative values
	logSenseAlloc      = 1024
)

// logSenseCDB builds LOG SENSE (10) for a page's cumulative values.
func logSenseCDB(page uint8, alloc uint16) []byte {
	cdb := make([]byte, 10)
	cdb[0] = scsiLogSense
	cdb[2] = logPCCumulative | page&0x3f
	binary.BigEndian.PutUint16(cdb[7:], alloc)
	return cdb
}

// logParams maps the parameter codes of a log page to their values.
type logParams map[uint16][]byte

// parseLogPage decodes a log page (big-endian, SPC-5 7.3.1): a 4-byte
// header whose page code must be page, then parameters of {code (2
// bytes), control byte, length, value}. A page truncated by the allocation
// length keeps the whole parameters it has.
func parseLogPage(b []byte, page uint8) (logParams, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("log page %#x: %d bytes, want at least 4", page, len(b))
	}
	if b[0]&0x3f != page {
		return nil, fmt.Errorf("log page %#x: device returned page %#x", page, b[0]&0x3f)
	}
	end := min(len(b), 4+int(binary.BigEndian.Uint16(b[2:])))
	params := logParams{}
	for p := b[4:end]; len(p) >= 4; {
		n := 4 + int(p[3])
		if n > len(p) {
			break
		}
		code := binary.BigEndian.Uint16(p)
		if _, dup := params[code]; !dup {
			params[code] = p[4:n:n]
		}
		p = p[n:]
	}
	return params, nil
}

// beUint returns a big-endian unsigned value of up to 8 bytes (longer
// values saturate).
func beUint(b []byte) uint64 {
	var v uint64
	for i, c := range b {
		if len(b)-i > 8 && c != 0 {
			return ^uint64(0)
		}
		v = v<<8 | uint64(c)
	}
	return v
}

// scsiLogHealth reads the log pages a SCSI disk supports.
func scsiLogHealth(s cdbSender) (Health, error) {
	buf := make([]byte, logSenseAlloc)
	if _, err := s.sendCDB(logSenseCDB(logPageSupported, logSenseAlloc), buf); err != nil {
		if illegalRequest(err) {
			return Health{}, fmt.Errorf("LOG SENSE: %w: %w", err, ErrNotSupported)
		}
		return Health{}, fmt.Errorf("LOG SENSE supported pages: %w", err)
	}
	if len(buf) < 4 || buf[0]&0x3f != logPageSupported {
		return Health{}, fmt.Errorf("LOG SENSE supported pages: bad page header % x: %w", buf[:4], ErrNotSupported)
	}
	supported := buf[4:min(len(buf), 4+int(binary.BigEndian.Uint16(buf[2:])))]
	pages := map[uint8]logParams{}
	for _, pg := range []uint8{logPageWriteErrors, logPageReadErrors, logPageTemperature, logPageStartStop,
		logPageSSDMedia, logPageBackground, logPageInfoExcept} {
		if !slices.Contains(supported, pg) {
			continue
		}
		b := make([]byte, logSenseAlloc)
		if _, err := s.sendCDB(logSenseCDB(pg, logSenseAlloc), b); err != nil {
			continue // a page the disk lists but cannot read: leave its fields out
		}
		if p, err := parseLogPage(b, pg); err == nil {
			pages[pg] = p
		}
	}
	if len(pages) == 0 {
		return Health{}, fmt.Errorf("no health log page: %w", ErrNotSupported)
	}
	return healthFromSCSI(pages), nil
}

// healthFromSCSI maps SCSI log parameters onto the NVMe SMART / Health
// fields:
//
//   - Composite Temperature: Temperature page (0Dh) parameter 0000h, else
//     the most recent temperature of Informational Exceptions (2Fh); FFh
//     is "unknown".
//   - Power On Hours: Background Scan Results (15h) accumulated power on
//     minutes / 60. Power Cycles: Start-Stop Cycle Counter (0Eh)
//     accumulated start-stop cycles (0004h).
//   - Media and Data Integrity Errors: total uncorrected errors (0006h) of
//     the Read (03h) and Write (02h) Error Counter pages.
//   - Percentage Used: Solid State Media (11h) percentage used endurance
//     indicator (0001h).
//   - Critical Warning: reliability when Informational Exceptions reports
//     a predicted failure (ASC other than 0), temperature when that ASC is
//     0Bh (warning: temperature).
//   - Available Spare has no SCSI counterpart: 100 % over 10 %.
func healthFromSCSI(pages map[uint8]logParams) Health {
	h := Health{AvailableSpare: 100, AvailableSpareThreshold: 10}
	if p, ok := pages[logPageTemperature][0x0000]; ok && len(p) >= 2 && p[1] != 0xff {
		h.TemperatureKelvin = kelvin(int(p[1]))
	}
	if p, ok := pages[logPageInfoExcept][0x0000]; ok && len(p) >= 1 {
		asc := p[0]
		if asc != 0 {
			h.CriticalWarning |= nvme.SMARTWarningReliability
			if asc == 0x0b {
				h.CriticalWarning |= nvme.SMARTWarningTemperature
			}
		}
		if h.TemperatureKelvin == 0 && len(p) >= 3 && p[2] != 0xff && p[2] != 0 {
			h.TemperatureKelvin = kelvin(int(p[2]))
		}
	}
	if p, ok := pages[logPageBackground][0x0000]; ok && len(p) >= 4 {
		h.PowerOnHours = beUint(p[:4]) / 60
	}
	if p, ok := pages[logPageStartStop][0x0004]; ok && len(p) >= 4 {
		h.PowerCycles = beUint(p[:4])
	}
	for _, pg := range []uint8{logPageReadErrors, logPageWriteErrors} {
		if p, ok := pages[pg][0x0006]; ok {
			if v := beUint(p); h.MediaErrors+v >= h.MediaErrors {
				h.MediaErrors += v
			} else {
				h.MediaErrors = ^uint64(0)
			}
		}
	}
	if p, ok := pages[logPageSSDMedia][0x0001]; ok && len(p) >= 4 {
		h.PercentageUsed = min(p[3], 255)
	}
	return h
}
