package reconcile

import (
	"errors"
	"fmt"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// A namespace whose size changes (a reload with a bigger size, the
// control API's ns.resize) is changed in place, never removed and added
// again: a host that rescans in between would find it missing, and Linux
// drops /dev/nvmeXnY under a mounted file system then. The backend grows
// first (bdev.Resizer; an rbd image is resized with `rbd resize` and its
// size only read again), then the namespace's block count, then every
// controller of the subsystem gets a Namespace Attribute Changed event, as
// for a backend that grew by itself (target.RefreshNamespaceSize). I/O in
// flight keeps running: the block count only grows, and the backend
// accepts the new range before hosts can address it.
//
// A shrink is refused (bdev.ShrinkError): NVMe has no namespace shrink and
// the data past the new end would go. Memory and null namespaces are the
// exception: they are created again at the smaller size (memory: empty),
// which the control API allows only with force.

// inPlace is a change of a running namespace applied without removing it.
type inPlace struct {
	nqn      string
	was, now *configfs.Namespace
	dev      bdev.Device
}

// planInPlace picks the namespaces of ch changed in their size, grow or
// enable attribute alone whose running backend can follow (bdev.Resizer,
// or an rbd image already of that size), and checks each resize without
// changing anything. The errors are placed at the namespace's size.
func (rc *Reconciler) planInPlace(tree, old *configfs.Tree, ch configfs.Changes) (map[nsKey]inPlace, error) {
	plan := map[nsKey]inPlace{}
	var errs []error
	for _, sc := range ch.Subsystems {
		for _, nsid := range sc.NamespacesChanged {
			was, now := old.Subsystem(sc.NQN).Namespace(nsid), tree.Subsystem(sc.NQN).Namespace(nsid)
			if was == nil || now == nil || onlyEnableDiffers(was, now) || !sameBackend(was, now) {
				continue
			}
			dev := rc.t.NamespaceDevice(sc.NQN, nsid)
			if dev == nil {
				continue
			}
			if _, off := dev.(*disabledDevice); off { // never opened: nothing to keep
				continue
			}
			err := checkInPlace(dev, now)
			switch {
			case errors.Is(err, bdev.ErrShrink) && (now.Backend == configfs.BackendMemory || now.Backend == configfs.BackendNull):
				continue // created again (see above)
			case errors.Is(err, errNoResize):
				continue
			case err != nil:
				errs = append(errs, tree.NamespaceError(sc.NQN, now, "size", err))
				continue
			}
			plan[nsKey{sc.NQN, nsid}] = inPlace{nqn: sc.NQN, was: was, now: now, dev: dev}
		}
	}
	return plan, errors.Join(errs...)
}

// errNoResize: the backend cannot change size in place.
var errNoResize = errors.New("target: backend not resizable in place")

// checkInPlace checks that dev can take namespace ns's size in place.
func checkInPlace(dev bdev.Device, ns *configfs.Namespace) error {
	if r, ok := dev.(bdev.Resizer); ok {
		_, err := r.Resize(nsSpec(ns), true)
		return err
	}
	if _, ok := dev.(bdev.SizeWatcher); ok { // rbd: the image's size rules
		if ns.Size != 0 && ns.Size != dev.Size() {
			return fmt.Errorf("target: size %d bytes (%s) differs from the image's %d bytes (%s): resize the image (rbd resize): the target follows it; leave size out",
				ns.Size, bdev.FormatBytes(ns.Size), dev.Size(), bdev.FormatBytes(dev.Size()))
		}
		return nil
	}
	return errNoResize
}

// applyInPlace resizes c's backend, updates the namespace's block count
// and raises the event when it changed, then enables or disables it.
func (rc *Reconciler) applyInPlace(c inPlace) error {
	if err := rc.resizeNamespace(c.nqn, c.now, c.dev); err != nil {
		return err
	}
	if c.was.Enable != c.now.Enable {
		return rc.t.SetNamespaceEnabled(c.nqn, c.now.NSID, c.now.Enable)
	}
	return nil
}

// sameBackend reports whether two versions of a namespace have the same
// backend and identity: everything but size, grow and enable is equal.
func sameBackend(a, b *configfs.Namespace) bool {
	return a != nil && b != nil && a.NSID == b.NSID && a.Backend == b.Backend && a.DevicePath == b.DevicePath &&
		a.BlockSize == b.BlockSize && a.DeviceUUID == b.DeviceUUID && a.DeviceNGUID == b.DeviceNGUID &&
		a.DeviceEUI64 == b.DeviceEUI64 && a.BufferedIO == b.BufferedIO && a.EffectiveQueueDepth() == b.EffectiveQueueDepth() && a.ResvEnable == b.ResvEnable && a.ResvPTPLFile == b.ResvPTPLFile &&
		a.Pool == b.Pool && a.Image == b.Image && a.CephConf == b.CephConf && a.ClientID == b.ClientID && a.Keyring == b.Keyring
}

// restoreNamespace puts namespace was back into tree (a change applied
// in place failed: the next apply tries it again).
func restoreNamespace(tree *configfs.Tree, nqn string, was *configfs.Namespace) {
	if s := tree.Subsystem(nqn); s != nil {
		if ns := s.Namespace(was.NSID); ns != nil {
			*ns = *was
		}
	}
}

// RevalidateNamespace reads the size of namespace nsid's backend again as
// its configuration says it (a file or block device without a configured
// size: the size the file or device has now, after it grew outside the
// target) and, when the block count changed, raises Namespace Attribute
// Changed. A backend that got smaller is refused (bdev.ShrinkError) and
// the namespace keeps its size. The control API's ns.resize without a size
// runs it.
func (rc *Reconciler) RevalidateNamespace(nqn string, nsid uint32) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var ns *configfs.Namespace
	if rc.applied != nil {
		if s := rc.applied.Subsystem(nqn); s != nil {
			ns = s.Namespace(nsid)
		}
	}
	dev := rc.t.NamespaceDevice(nqn, nsid)
	if ns == nil || dev == nil {
		return fmt.Errorf("target: subsystem %s namespace %d: %w", nqn, nsid, target.ErrNotFound)
	}
	return rc.resizeNamespace(nqn, ns, dev)
}

// resizeNamespace brings dev, the running backend of namespace ns of
// subsystem nqn, to ns's size (bdev.Resizer) and revalidates the
// namespace.
func (rc *Reconciler) resizeNamespace(nqn string, ns *configfs.Namespace, dev bdev.Device) error {
	if r, ok := dev.(bdev.Resizer); ok {
		if _, err := r.Resize(nsSpec(ns), false); err != nil {
			return fmt.Errorf("target: subsystem %s namespace %d: resize: %w", nqn, ns.NSID, err)
		}
	}
	return rc.t.RefreshNamespaceSize(nqn, ns.NSID)
}
