package bdev

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// smartText is what go-nvme's PrintSMART writes (its format strings, with
// values of a worn drive).
const smartText = `
SMART data follows:
Critical warning: 0x4
Temperature: 38° Celsius
Avail. spare: 97%
Avail. spare threshold: 10%
Percentage used: 12%
Data units read: 123456 [63.2 GB]
Data units written: 654321 [335 GB]
Host read commands: 1000
Host write commands: 2000
Controller busy time: 30
Power cycles: 42
Power on hours: 8760
Unsafe shutdowns: 3
Media & data integrity errors: 1
Error information log entries: 340282366920938463463374607431768211455
`

func TestParseNVMeSMART(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Health
		wantErr error
	}{
		{"worn drive", smartText, Health{
			CriticalWarning: 4, TemperatureKelvin: 311, AvailableSpare: 97, AvailableSpareThreshold: 10,
			PercentageUsed: 12, DataUnitsRead: 123456, DataUnitsWritten: 654321, PowerCycles: 42,
			PowerOnHours: 8760, UnsafeShutdowns: 3, MediaErrors: 1, ErrorLogEntries: math.MaxUint64,
		}, nil},
		{"below zero celsius wraps", "Temperature: 65535° Celsius\n", Health{TemperatureKelvin: 272}, nil},
		{"no fields", "Model: foo\n", Health{}, ErrNotSupported},
		{"empty", "", Health{}, ErrNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNVMeSMART(tt.text)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
	if _, err := parseNVMeSMART("Percentage used: lots%\n"); err == nil {
		t.Error("bad number accepted")
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
