package bdev

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/nvme"
)

// nvmeAdminCmd is Linux struct nvme_admin_cmd (<linux/nvme_ioctl.h>).
type nvmeAdminCmd struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2, cdw3  uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMs   uint32
	result      uint32
}

// nvmeIoctlAdminCmd is NVME_IOCTL_ADMIN_CMD: _IOWR('N', 0x41, struct
// nvme_admin_cmd).
const nvmeIoctlAdminCmd = 3<<30 | uint(unsafe.Sizeof(nvmeAdminCmd{}))<<16 | 'N'<<8 | 0x41

// nvmeLogReader reads log page lid of nsid into buf with an admin Get Log
// Page passed through the kernel. buf must be a multiple of 4 bytes.
type nvmeLogReader func(lid uint8, nsid uint32, buf []byte) error

// readNVMeHealth reads the controller's SMART / Health log through the
// NVMe device node (a namespace node accepts admin pass-through too).
func readNVMeHealth(node string) (Health, error) {
	f, err := os.OpenFile(node, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Health{}, err
	}
	defer f.Close()
	fd := int(f.Fd())
	return nvmeHealth(func(lid uint8, nsid uint32, buf []byte) error {
		cmd := nvmeAdminCmd{
			opcode:    uint8(nvme.AdminGetLogPage),
			nsid:      nsid,
			addr:      uint64(uintptr(unsafe.Pointer(&buf[0]))),
			dataLen:   uint32(len(buf)),
			cdw10:     uint32(lid) | uint32(len(buf)/4-1)<<16,
			timeoutMs: 10000,
		}
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(nvmeIoctlAdminCmd), uintptr(unsafe.Pointer(&cmd)))
		runtime.KeepAlive(buf)
		if errno != 0 {
			if errno == unix.ENOTTY || errno == unix.EINVAL {
				return fmt.Errorf("NVMe admin pass-through: %w: %w", errno, ErrNotSupported)
			}
			return fmt.Errorf("NVMe admin pass-through: %w", errno)
		}
		if r != 0 {
			return fmt.Errorf("get log page %#x: NVMe status %#x", lid, r)
		}
		return nil
	})
}

// nvmeHealth reads the SMART / Health log with read and decodes it.
func nvmeHealth(read nvmeLogReader) (Health, error) {
	page := make([]byte, nvme.SMARTLogSize)
	if err := read(uint8(nvme.LIDSMART), nvme.NSIDAll, page); err != nil {
		return Health{}, err
	}
	return healthFromNVMe(page)
}

// healthFromNVMe decodes a SMART / Health Information log page (at least
// 512 bytes, little-endian as on the wire).
func healthFromNVMe(page []byte) (Health, error) {
	l, err := nvme.ParseSMARTLog(page)
	if err != nil {
		return Health{}, fmt.Errorf("SMART / Health log: %w", err)
	}
	u := func(v nvme.Uint128) uint64 { n, _ := v.Uint64(); return n }
	return Health{
		CriticalWarning:         l.CriticalWarning(),
		TemperatureKelvin:       l.CompositeTemperature(),
		AvailableSpare:          l.AvailableSpare(),
		AvailableSpareThreshold: l.AvailableSpareThreshold(),
		PercentageUsed:          l.PercentageUsed(),
		DataUnitsRead:           u(l.DataUnitsRead()),
		DataUnitsWritten:        u(l.DataUnitsWritten()),
		PowerCycles:             u(l.PowerCycles()),
		PowerOnHours:            u(l.PowerOnHours()),
		UnsafeShutdowns:         u(l.UnsafeShutdowns()),
		MediaErrors:             u(l.MediaErrors()),
		ErrorLogEntries:         u(l.ErrorLogEntries()),
	}, nil
}
