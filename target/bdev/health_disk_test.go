package bdev

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dswarbrick/smart/ata"
)

// TestReadHealthDisks reads real disks: the block device nodes listed in
// BDEV_HEALTH_DISKS (tests/interop's guest/smart.sh runs this test binary
// in a kernel-peer guest with QEMU's emulated NVMe and SATA drives and a
// partition of the latter). Every disk must give health data with a
// temperature; a partition the same as its whole disk; a SATA disk must
// answer SMART READ THRESHOLDS with a valid checksum and SMART RETURN
// STATUS with registers this package decodes as "good" (so the optional
// parts of the ATA path are exercised on a real SAT layer, libata).
func TestReadHealthDisks(t *testing.T) {
	disks := strings.Fields(os.Getenv("BDEV_HEALTH_DISKS"))
	if len(disks) == 0 {
		t.Skip("BDEV_HEALTH_DISKS not set (tests/interop's TestSMARTEmulatedDisks sets it in a guest)")
	}
	for _, disk := range disks {
		t.Run(filepath.Base(disk), func(t *testing.T) {
			h, err := ReadHealth(disk)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %+v", disk, h)
			if h.TemperatureKelvin == 0 {
				t.Errorf("%s: no temperature", disk)
			}
			if whole := wholeDisk(disk); whole != disk {
				wh, err := ReadHealth(whole)
				if err != nil || wh != h {
					t.Errorf("partition %s: %+v; its disk %s: %+v, %v", disk, h, whole, wh, err)
				}
				return
			}
			if strings.HasPrefix(filepath.Base(disk), "nvme") {
				return
			}
			d, err := openSG(disk)
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			th := make([]byte, 512)
			if _, err := d.sendCDB(ataCDB(ataProtoPIOIn, ataPIOInBlocks, smartReadThresh, 1, ata.ATA_SMART), th); err != nil {
				t.Errorf("SMART READ THRESHOLDS: %v", err)
			} else if !ataChecksumOK(th) {
				t.Errorf("SMART READ THRESHOLDS: bad checksum: % x", th[:32])
			}
			sense, err := d.sendCDB(ataCDB(ataProtoNonData, ataCkCond, ata.SMART_RETURN_STATUS, 0, ata.ATA_SMART), nil)
			t.Logf("SMART RETURN STATUS sense: % x", sense)
			if err != nil || ataSMARTStatus(sense) != ataStatusGood {
				t.Errorf("SMART RETURN STATUS: %v, status %d (want good, %d)", err, ataSMARTStatus(sense), ataStatusGood)
			}
		})
	}
}
