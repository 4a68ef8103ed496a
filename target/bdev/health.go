package bdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ReadHealth reads SMART / health data from the disk behind the block
// device node at path (a partition is read through its whole disk):
//
//   - NVMe (/dev/nvmeXnY): the SMART / Health Information log page
//     (controller-wide, NSID FFFFFFFFh) through the NVMe admin pass-through
//     ioctl, decoded with the nvme package's view of the page.
//   - SATA, directly or behind a SAS HBA (INQUIRY vendor "ATA"): ATA SMART
//     READ DATA, READ THRESHOLDS and RETURN STATUS sent as SCSI ATA
//     PASS-THROUGH (16) over SG_IO; the attributes are decoded with the
//     drive database of github.com/dswarbrick/smart (see DriveDB) and mapped
//     onto the NVMe fields (see healthFromATA).
//   - other SCSI disks (SAS): LOG SENSE pages for temperature, start-stop
//     cycles, power-on time, informational exceptions, uncorrected errors
//     and SSD endurance, where the disk has them (see healthFromSCSI).
//
// Devices that answer none of these (loop, device mapper, virtio-blk,
// regular files) return an error matching ErrNotSupported. Reading sends
// commands to the disk and may block; callers cache (Block.Health does).
// It needs CAP_SYS_ADMIN (NVMe) or CAP_SYS_RAWIO (SG_IO pass-through).
func ReadHealth(path string) (Health, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: %w", path, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		return Health{}, fmt.Errorf("bdev: health of %q: not a block device: %w", path, ErrNotSupported)
	}
	node := wholeDisk(real)
	var h Health
	if strings.HasPrefix(filepath.Base(node), "nvme") {
		h, err = readNVMeHealth(node)
	} else {
		h, err = readSCSIHealth(node)
	}
	if err != nil {
		return Health{}, fmt.Errorf("bdev: health of %q: %w", path, err)
	}
	return h, nil
}

// wholeDisk returns the node of the disk a partition node belongs to
// (/dev/sda1 -> /dev/sda, /dev/nvme0n1p2 -> /dev/nvme0n1), found in sysfs;
// any other node is returned as is. SG_IO is refused on partitions.
func wholeDisk(node string) string {
	name := filepath.Base(node)
	if _, err := os.Stat(filepath.Join("/sys/class/block", name, "partition")); err != nil {
		return node
	}
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", name))
	if err != nil {
		return node
	}
	parent := filepath.Join(filepath.Dir(node), filepath.Base(filepath.Dir(link)))
	if _, err := os.Stat(parent); err != nil {
		return node
	}
	return parent
}

// HealthTTL is how long Block.Health reuses what it read from the disk, so
// that hosts polling the SMART / Health log do not send a SMART command to
// the disk each time (drives update their attributes about once a minute
// at most).
const HealthTTL = 10 * time.Second

// healthCache holds the last health read of a device for HealthTTL. An
// ErrNotSupported answer is kept for good: the kind of a disk does not
// change. Concurrent callers during a refresh wait for that one read
// instead of sending their own.
type healthCache struct {
	mu   sync.Mutex
	at   time.Time
	h    Health
	err  error
	now  func() time.Time // time.Now; replaced by tests
	read func() (Health, error)
}

// get returns the cached health, reading it again when older than ttl.
func (c *healthCache) get(ttl time.Duration) (Health, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	t := now()
	if !c.at.IsZero() && (errors.Is(c.err, ErrNotSupported) || t.Sub(c.at) < ttl) {
		return c.h, c.err
	}
	c.h, c.err = c.read()
	c.at = t
	return c.h, c.err
}

// kelvin converts degrees Celsius to the Kelvin of the NVMe log page; 0
// (unknown) for values no disk reports.
func kelvin(c int) uint16 {
	if c < -273 || c > 1000 {
		return 0
	}
	return uint16(c + 273)
}
