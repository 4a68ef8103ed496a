package bdev

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	gonvme "github.com/dswarbrick/go-nvme/nvme"
)

// ReadHealth reads SMART / health data from the disk at path. Only NVMe
// devices (/dev/nvmeX or /dev/nvmeXnY, or a symlink to one) are read, with
// an admin Get Log Page passed through by github.com/dswarbrick/go-nvme;
// every other path returns an error matching ErrNotSupported. (The ATA and
// SCSI readers of github.com/dswarbrick/smart need a drive database to
// decode attribute values, so they are not used.)
func ReadHealth(path string) (Health, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: %w", path, err)
	}
	if !strings.HasPrefix(filepath.Base(real), "nvme") || !strings.HasPrefix(real, "/dev/") {
		return Health{}, fmt.Errorf("bdev: health of %q: not an NVMe device: %w", path, ErrNotSupported)
	}
	dev := gonvme.NewNVMeDevice(real)
	if err := dev.Open(); err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: %w", path, err)
	}
	defer dev.Close()
	// go-nvme decodes the log page only to print it; parse that text.
	var out bytes.Buffer
	if err := dev.PrintSMART(&out); err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: get log page: %v: %w", path, err, ErrNotSupported)
	}
	return parseNVMeSMART(out.String())
}

// parseNVMeSMART parses the text go-nvme's PrintSMART writes, one
// "Name: value" line per field of the SMART / Health log page.
func parseNVMeSMART(text string) (Health, error) {
	var h Health
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if i := strings.IndexAny(value, " %°["); i >= 0 {
			value = value[:i]
		}
		var err error
		switch strings.TrimSpace(name) {
		case "Critical warning":
			h.CriticalWarning, err = parseUint8(value)
		case "Temperature":
			// go-nvme prints uint16(kelvin - 273), wrapping below 0 °C.
			var v uint64
			v, err = strconv.ParseUint(value, 10, 16)
			h.TemperatureKelvin = uint16(v + 273)
		case "Avail. spare":
			h.AvailableSpare, err = parseUint8(value)
		case "Avail. spare threshold":
			h.AvailableSpareThreshold, err = parseUint8(value)
		case "Percentage used":
			h.PercentageUsed, err = parseUint8(value)
		case "Data units read":
			h.DataUnitsRead, err = parseCounter(value)
		case "Data units written":
			h.DataUnitsWritten, err = parseCounter(value)
		case "Power cycles":
			h.PowerCycles, err = parseCounter(value)
		case "Power on hours":
			h.PowerOnHours, err = parseCounter(value)
		case "Unsafe shutdowns":
			h.UnsafeShutdowns, err = parseCounter(value)
		case "Media & data integrity errors":
			h.MediaErrors, err = parseCounter(value)
		case "Error information log entries":
			h.ErrorLogEntries, err = parseCounter(value)
		default:
			continue
		}
		if err != nil {
			return Health{}, fmt.Errorf("bdev: SMART field %q: %w", name, err)
		}
		seen++
	}
	if seen == 0 {
		return Health{}, fmt.Errorf("bdev: no SMART fields in log output: %w", ErrNotSupported)
	}
	return h, nil
}

func parseUint8(s string) (uint8, error) {
	v, err := strconv.ParseUint(s, 0, 8)
	return uint8(v), err
}

// parseCounter parses a decimal 128-bit counter, saturating at 2^64-1.
func parseCounter(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return math.MaxUint64, nil
		}
		return 0, err
	}
	return v, nil
}
