package initiator

import (
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// IOCommand runs an I/O command (a passthrough, e.g. the reservation
// commands) on one of the I/O queues: the SQE as given, NSID included (the
// transport sets CID and SGL), with data moving in direction dir. It waits
// while the controller reconnects and retries a status without DNR, as
// reads and writes do; a status other than success comes back as a
// *CommandError.
func (c *Controller) IOCommand(sqe [64]byte, data []byte, dir fabrics.DataDirection) error {
	return c.ioSync(&sqe, data, dir, nvme.IOOpcode(sqe[0]).String())
}
