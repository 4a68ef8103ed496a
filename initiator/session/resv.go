package session

import (
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// OpReservation runs a reservation command (Reservation Register,
// Acquire, Release with Request.Data; Report with Request.DataLen) on the
// namespace the SQE names.
const OpReservation = "reservation"

// maxReportData bounds Reservation Report's data.
const maxReportData = 64 << 10

// reservation runs a reservation command for a client: the four
// reservation opcodes only, as OpAdmin passes only commands that read.
func (d *Daemon) reservation(req Request) Response {
	if len(req.SQE) != 64 {
		return Response{Error: fmt.Sprintf("reservation command: SQE of %d bytes, want 64", len(req.SQE))}
	}
	var sqe [64]byte
	copy(sqe[:], req.SQE)
	op := nvme.IOOpcode(sqe[0])
	var data []byte
	dir := fabrics.DirHostToCtrl
	switch op {
	case nvme.IOReservationRegister, nvme.IOReservationAcquire:
		if len(req.Data) != nvme.ResvRegisterDataSize {
			return Response{Error: fmt.Sprintf("%v: %d data bytes, want %d", op, len(req.Data), nvme.ResvRegisterDataSize)}
		}
		data = req.Data
	case nvme.IOReservationRelease:
		if len(req.Data) != nvme.ResvReleaseDataSize {
			return Response{Error: fmt.Sprintf("%v: %d data bytes, want %d", op, len(req.Data), nvme.ResvReleaseDataSize)}
		}
		data = req.Data
	case nvme.IOReservationReport:
		if req.DataLen < 4 || req.DataLen > maxReportData || req.DataLen%4 != 0 {
			return Response{Error: fmt.Sprintf("%v: data length %d: want a multiple of 4 from 4 to %d", op, req.DataLen, maxReportData)}
		}
		data = make([]byte, req.DataLen)
		dir = fabrics.DirCtrlToHost
	default:
		return Response{Error: fmt.Sprintf("I/O command %v (%#02x) is not allowed through the control socket (only the reservation commands)", op, uint8(op))}
	}
	// One live path: as Linux multipath, a reservation goes down one path
	// (all paths of a host share its registration).
	if err := d.adminCtrl().IOCommand(sqe, data, dir); err != nil {
		return Response{Error: describe(err)}
	}
	if dir == fabrics.DirCtrlToHost {
		return Response{Data: data}
	}
	return Response{}
}
