package initiator

import (
	"context"

	"github.com/nvmeof/nvmeof/nvme"
)

// LogPageRequest is a Get Log Page with nvme-cli's get-log fields.
type LogPageRequest struct {
	LID    nvme.LogPageID
	NSID   uint32 // nvme.NSIDAll for the controller's page
	LSP    uint8  // Log Specific Field
	RAE    bool   // Retain Asynchronous Event
	Offset uint64 // Log Page Offset in bytes (a multiple of 4)
}

// ReadLogPage reads len(buf) bytes (a multiple of 4) of a log page from
// r.Offset on, in as many commands as the admin transfer limit needs
// (each with RAE set but the last unless r.RAE, as Linux's
// nvme_get_log_lsi callers).
func (c *Controller) ReadLogPage(ctx context.Context, r LogPageRequest, buf []byte) error {
	a, err := c.liveAssoc(ctx)
	if err != nil {
		return err
	}
	return c.getLogPageAt(ctx, a, r.LID, r.NSID, r.LSP, r.RAE, r.Offset, buf)
}
