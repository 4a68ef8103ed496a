package bdev

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cdbSender sends a SCSI command with a data-in phase into buf (nil for
// none) and returns the sense data the device returned. A CHECK CONDITION
// whose sense key is NO SENSE or RECOVERED ERROR is not an error: the
// caller reads the sense (ATA PASS-THROUGH with CK_COND answers so).
type cdbSender interface {
	sendCDB(cdb, buf []byte) (sense []byte, err error)
}

// sgIOHdr is Linux struct sg_io_hdr (<scsi/sg.h>), interface 'S'. The
// github.com/dswarbrick/smart scsi package has the same structure but does
// not export its sender, so the pass-through is issued here.
type sgIOHdr struct {
	interfaceID    int32
	dxferDirection int32
	cmdLen         uint8
	mxSbLen        uint8
	iovecCount     uint16
	dxferLen       uint32
	dxferp         unsafe.Pointer
	cmdp           unsafe.Pointer
	sbp            unsafe.Pointer
	timeout        uint32
	flags          uint32
	packID         int32
	usrPtr         unsafe.Pointer
	status         uint8
	maskedStatus   uint8
	msgStatus      uint8
	sbLenWr        uint8
	hostStatus     uint16
	driverStatus   uint16
	resid          int32
	duration       uint32
	info           uint32
}

const (
	sgIO             = 0x2285 // SG_IO
	sgDxferNone      = -1
	sgDxferFromDev   = -3
	sgInfoOKMask     = 0x1
	sgTimeoutMs      = 10000
	scsiCheckCond    = 0x02 // SCSI status CHECK CONDITION
	driverSense      = 0x08 // DRIVER_SENSE in driver_status
	maxSenseLen      = 32
	hostStatusOK     = 0
	driverStatusMask = 0x0f
)

// sgDev is a SCSI disk (sd, or any node that takes SG_IO) opened for
// pass-through.
type sgDev struct{ f *os.File }

func openSG(node string) (*sgDev, error) {
	f, err := os.OpenFile(node, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &sgDev{f: f}, nil
}

func (d *sgDev) close() { d.f.Close() }

func (d *sgDev) sendCDB(cdb, buf []byte) ([]byte, error) {
	sense := make([]byte, maxSenseLen)
	hdr := &sgIOHdr{
		interfaceID:    'S',
		dxferDirection: sgDxferNone,
		cmdLen:         uint8(len(cdb)),
		mxSbLen:        maxSenseLen,
		cmdp:           unsafe.Pointer(&cdb[0]),
		sbp:            unsafe.Pointer(&sense[0]),
		timeout:        sgTimeoutMs,
	}
	if len(buf) > 0 {
		hdr.dxferDirection = sgDxferFromDev
		hdr.dxferLen = uint32(len(buf))
		hdr.dxferp = unsafe.Pointer(&buf[0])
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), sgIO, uintptr(unsafe.Pointer(hdr)))
	runtime.KeepAlive(cdb)
	runtime.KeepAlive(buf)
	runtime.KeepAlive(sense)
	if errno != 0 {
		if errno == unix.ENOTTY || errno == unix.EINVAL {
			return nil, fmt.Errorf("SG_IO: %w: %w", errno, ErrNotSupported)
		}
		return nil, fmt.Errorf("SG_IO: %w", errno)
	}
	sense = sense[:min(int(hdr.sbLenWr), maxSenseLen)]
	if hdr.info&sgInfoOKMask == 0 {
		return sense, nil
	}
	if hdr.hostStatus == hostStatusOK && (hdr.status == scsiCheckCond || hdr.driverStatus&driverStatusMask == driverSense) {
		// NO SENSE or RECOVERED ERROR: done, with information in the
		// sense data (ATA PASS-THROUGH's CK_COND returns the registers so).
		if key, _, _, ok := senseKey(sense); ok && key <= 0x01 {
			return sense, nil
		}
	}
	return sense, &sgError{status: hdr.status, host: hdr.hostStatus, driver: hdr.driverStatus, sense: sense}
}

// sgError is a command that failed in the device, the HBA or the driver.
type sgError struct {
	status       uint8
	host, driver uint16
	sense        []byte
}

func (e *sgError) Error() string {
	return fmt.Sprintf("SCSI status %#x, host status %#x, driver status %#x, sense % x", e.status, e.host, e.driver, e.sense)
}

// senseKey returns the sense key and additional sense code/qualifier of
// fixed (70h/71h) or descriptor (72h/73h) format sense data; ok is false
// for anything else.
func senseKey(s []byte) (key, asc, ascq uint8, ok bool) {
	if len(s) < 4 {
		return 0, 0, 0, false
	}
	switch s[0] & 0x7f {
	case 0x70, 0x71:
		if len(s) < 14 {
			return s[2] & 0x0f, 0, 0, true
		}
		return s[2] & 0x0f, s[12], s[13], true
	case 0x72, 0x73:
		return s[1] & 0x0f, s[2], s[3], true
	}
	return 0, 0, 0, false
}

// illegalRequest reports whether err is a command the device refused as
// unsupported (sense key ILLEGAL REQUEST), i.e. the device lacks the
// feature rather than failing.
func illegalRequest(err error) bool {
	var e *sgError
	if !errors.As(err, &e) {
		return false
	}
	key, _, _, ok := senseKey(e.sense)
	return ok && key == 0x05
}
