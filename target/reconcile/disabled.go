package reconcile

import (
	"errors"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// A namespace configured disabled does not open its backend, as Linux
// nvmet opens a namespace's device only when it is enabled: the file or
// disk may not exist yet, or belong to something else until then. The
// target holds it with a disabledDevice instead; enabling it on a later
// apply opens the backend (ApplyWith's prepare step, so a backend
// that does not open refuses the apply) and replaces the namespace. A
// namespace disabled after it was enabled keeps its backend open, so that
// enabling it again cannot fail (and a memory backend keeps its data).

// errDisabled is what a disabledDevice answers: hosts never reach it, as
// commands to a disabled namespace fail before the device.
var errDisabled = errors.New("target: namespace disabled: its backend is not open")

// disabledDevice stands for the backend of a namespace configured
// disabled: the configured size and block size, no data.
type disabledDevice struct {
	size int64
	bs   uint32
}

var _ bdev.Device = (*disabledDevice)(nil)

// newDisabledDevice returns the stand-in of namespace ns's backend.
func newDisabledDevice(ns *configfs.Namespace) *disabledDevice {
	bs := ns.BlockSize
	if bs == 0 {
		bs = 512
	}
	size := ns.Size / int64(bs) * int64(bs)
	return &disabledDevice{size: max(size, int64(bs)), bs: bs}
}

func (d *disabledDevice) ReadAt(p []byte, off int64) (int, error)  { return 0, errDisabled }
func (d *disabledDevice) WriteAt(p []byte, off int64) (int, error) { return 0, errDisabled }
func (d *disabledDevice) Flush() error                             { return errDisabled }
func (d *disabledDevice) WriteZeroes(off, n int64) error           { return errDisabled }
func (d *disabledDevice) Discard(off, n int64) error               { return errDisabled }
func (d *disabledDevice) Size() int64                              { return d.size }
func (d *disabledDevice) BlockSize() uint32                        { return d.bs }
func (d *disabledDevice) Close() error                             { return nil }

// neverOpened reports whether namespace nsid of subsystem nqn runs on a
// disabledDevice: configured disabled, its backend never opened.
func (rc *Reconciler) neverOpened(nqn string, nsid uint32) bool {
	_, ok := rc.t.NamespaceDevice(nqn, nsid).(*disabledDevice)
	return ok
}
