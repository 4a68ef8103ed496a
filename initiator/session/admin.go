package session

import (
	"context"
	"fmt"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/nvme"
)

// AdminOpcodes are the admin commands OpAdmin passes to the controller:
// the ones that only read (Identify, Get Log Page, Get Features). The
// socket is root's only, but a daemon that keeps mapped devices must not
// be made to format or detach them through a side door.
var AdminOpcodes = map[nvme.AdminOpcode]bool{
	nvme.AdminIdentify:    true,
	nvme.AdminGetLogPage:  true,
	nvme.AdminGetFeatures: true,
}

// MaxAdminData bounds OpAdmin's data (it travels in one control message).
const MaxAdminData = 1 << 20

// resetTimeout bounds a reset: the disable, and the new association's
// connect, which reconnects by itself afterwards if it fails.
const resetTimeout = 60 * time.Second

// admin runs a read-only admin command for a client.
func (d *Daemon) admin(ctx context.Context, req Request) Response {
	if len(req.SQE) != 64 {
		return Response{Error: fmt.Sprintf("admin command: SQE of %d bytes, want 64", len(req.SQE))}
	}
	op := nvme.AdminOpcode(req.SQE[0])
	if !AdminOpcodes[op] {
		return Response{Error: fmt.Sprintf("admin command %v (%#02x) is not allowed through the control socket (only Identify, Get Log Page, Get Features)", op, uint8(op))}
	}
	if req.DataLen < 0 || req.DataLen > MaxAdminData {
		return Response{Error: fmt.Sprintf("admin command: data length %d out of range 0..%d", req.DataLen, MaxAdminData)}
	}
	ctrl, err := d.pathCtrl(req)
	if err != nil {
		return Response{Error: err.Error()}
	}
	var sqe [64]byte
	copy(sqe[:], req.SQE)
	var data []byte
	dir := fabrics.DirNone
	if req.DataLen > 0 {
		data = make([]byte, req.DataLen)
		dir = fabrics.DirCtrlToHost
	}
	if op == nvme.AdminGetLogPage && len(data) > 0 {
		// In pieces when the page is larger than one command may move.
		g := nvme.GetLogPageCommand{SQE: nvme.SQE(sqe[:])}
		err := ctrl.ReadLogPage(ctx, initiator.LogPageRequest{LID: g.LID(), NSID: g.NSID(), LSP: g.LSP(), RAE: g.RAE(), Offset: g.LPO()}, data)
		if err != nil {
			return Response{Error: describe(err)}
		}
		return Response{Data: data}
	}
	cqe, err := ctrl.AdminCommand(ctx, sqe, data, dir)
	if err != nil {
		return Response{Error: describe(err)}
	}
	return Response{Data: data, Result: nvme.CQE(cqe[:]).DW0()}
}

// reset resets the controller (Controller.Reset) and reports the state
// it ends in.
func (d *Daemon) reset() Response {
	ctx, cancel := context.WithTimeout(context.Background(), resetTimeout)
	defer cancel()
	d.log.Info("controller reset requested")
	if err := d.adminCtrl().Reset(ctx); err != nil {
		d.log.Error("controller reset failed", "error", err)
		return Response{Error: describe(err), State: d.Snapshot()}
	}
	if err := d.writeState(); err != nil {
		d.log.Warn("state file not written", "error", err)
	}
	return Response{State: d.Snapshot()}
}
