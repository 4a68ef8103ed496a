package target

import (
	"github.com/nvmeof/nvmeof/target/bdev"
)

// A namespace whose size changes is changed in place, never removed and
// added again: a host that rescans in between would find it missing, and
// Linux drops /dev/nvmeXnY under a mounted file system then. Whoever
// resizes the backend (target/reconcile, for a reload or the control
// API's ns.resize) grows it first, then calls RefreshNamespaceSize: the
// namespace's block count follows and every controller of the subsystem
// gets a Namespace Attribute Changed event. I/O in flight keeps running:
// the block count only grows, and the backend accepts the new range
// before hosts can address it.

// RefreshNamespaceSize reads the size of namespace nsid's backend again
// and, when its block count changed, raises Namespace Attribute Changed
// (NamespaceChanged raises it always).
func (t *Target) RefreshNamespaceSize(nqn string, nsid uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ns, err := t.namespaceLocked(nqn, nsid)
	if err != nil {
		return err
	}
	before := ns.nblocks.Load()
	ns.revalidate()
	if ns.nblocks.Load() != before {
		s.nsChangedLocked(nsid)
	}
	return nil
}

// NamespaceDevice returns the backend of namespace nsid of subsystem
// nqn, or nil when there is no such namespace.
func (t *Target) NamespaceDevice(nqn string, nsid uint32) bdev.Device {
	t.mu.RLock()
	defer t.mu.RUnlock()
	s, err := t.subsystemLocked(nqn)
	if err != nil {
		return nil
	}
	if ns := s.table().byID[nsid]; ns != nil {
		return ns.dev
	}
	return nil
}
