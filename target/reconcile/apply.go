package reconcile

import (
	"errors"
	"fmt"
	"slices"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// ApplyWith applies tree all or nothing. First it prepares what can
// fail outside the target: it validates the tree, checks that the memory
// backends together fit in the machine's memory (CheckMemory), opens every
// backend to add or replace (bdev.Open), and calls prepare, if not nil,
// with the ports that will start and stop (the caller opens the ports'
// RDMA devices there). An error up to there leaves the target as it was
// (the backends opened are closed) and is returned, each error placed at
// its FILE:LINE (configfs.Tree.NamespaceError), in a *NotAppliedError.
// Then it changes the target. What fails from then on (which validation
// should rule out) is logged and returned, and left out of the applied
// tree so that the next call tries again; Start then lists only the ports
// added.
func (rc *Reconciler) ApplyWith(tree *configfs.Tree, prepare func(Changes) error) (Changes, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := tree.Validate(); err != nil {
		return Changes{}, &NotAppliedError{Err: fmt.Errorf("target: configuration: %w", err)}
	}
	p, err := rc.plan(tree)
	if err == nil && prepare != nil {
		err = prepare(p.changes)
	}
	if err != nil {
		p.closeDevs()
		rc.log.Debug("configuration refused: nothing changed", "error", err)
		return Changes{}, &NotAppliedError{Err: err}
	}
	return rc.commit(p)
}

// applyPlan is what an apply changes, prepared before anything changes.
type applyPlan struct {
	tree, old      *configfs.Tree
	ch             configfs.Changes
	oldIDs, newIDs map[string]uint16
	// inplace: namespaces changed without removing them (resize.go).
	inplace map[nsKey]inPlace
	// devs: the backends opened for the namespaces to add or replace.
	devs map[nsKey]bdev.Device
	// restart: ports whose listener changes (stopped, then started).
	restart map[string]bool
	stopped []string // ports removed or restarted
	start   []string // ports added or restarted
	changes Changes  // what prepare is told
}

func (p *applyPlan) closeDevs() {
	for _, d := range p.devs {
		d.Close()
	}
}

// plan prepares the apply of a validated tree: the namespaces to change
// in place, the backends to open (checked together first, so that
// nothing is created unless all can open; then opened), the ports to
// stop and start. Its error changed nothing (the backends opened are
// closed).
func (rc *Reconciler) plan(tree *configfs.Tree) (*applyPlan, error) {
	p := &applyPlan{tree: tree, old: rc.applied, oldIDs: rc.portIDs, newIDs: tree.PortIDs(), devs: map[nsKey]bdev.Device{}}
	if p.old == nil {
		p.old = &configfs.Tree{}
	}
	p.ch = configfs.Diff(p.old, tree)
	var err error
	// A namespace resized keeps running (resize.go).
	if p.inplace, err = rc.planInPlace(tree, p.old, p.ch); err != nil {
		return p, err
	}
	opens := rc.toOpen(p)
	if err := checkBackends(tree, opens); err != nil {
		return p, err
	}
	var errs []error
	for _, o := range opens {
		d, err := bdev.Open(nsSpec(o.ns))
		if err != nil {
			errs = append(errs, tree.NamespaceError(o.nqn, o.ns, backendAttr(o.ns), err))
			continue
		}
		p.devs[nsKey{o.nqn, o.ns.NSID}] = d
	}
	// Ports whose listener changes restart: stop, then start again.
	p.restart = map[string]bool{}
	for _, pc := range p.ch.Ports {
		if pc.Listener || p.oldIDs[pc.ID] != p.newIDs[pc.ID] {
			p.restart[pc.ID] = true
		}
	}
	p.stopped = append([]string(nil), p.ch.PortsRemoved...)
	p.start = append([]string(nil), p.ch.PortsAdded...)
	for _, port := range tree.Ports {
		if p.restart[port.ID] {
			p.stopped = append(p.stopped, port.ID)
			p.start = append(p.start, port.ID)
		}
	}
	p.changes.Stopped = p.stopped
	for _, name := range p.start {
		port := tree.Port(name)
		cfg, err := rc.portConfig(port, p.newIDs[name])
		if err != nil {
			errs = append(errs, tree.PortError(port, "", err))
			continue
		}
		p.changes.Start = append(p.changes.Start, portListener(port, cfg))
	}
	return p, errors.Join(errs...)
}

// toOpen lists the enabled namespaces whose backend an apply opens: those
// of new subsystems, new namespaces, and namespaces replaced (not changed
// in place, not only enabled or disabled). A namespace configured
// disabled opens nothing (disabled.go); one enabled now whose backend was
// never opened does.
func (rc *Reconciler) toOpen(p *applyPlan) []nsRef {
	var opens []nsRef
	for _, nqn := range p.ch.SubsystemsAdded {
		for _, ns := range p.tree.Subsystem(nqn).Namespaces {
			if ns.Enable {
				opens = append(opens, nsRef{nqn, ns})
			}
		}
	}
	for _, sc := range p.ch.Subsystems {
		s := p.tree.Subsystem(sc.NQN)
		for _, nsid := range sc.NamespacesChanged {
			was, now := p.old.Subsystem(sc.NQN).Namespace(nsid), s.Namespace(nsid)
			if _, ok := p.inplace[nsKey{sc.NQN, nsid}]; ok {
				continue
			}
			switch {
			case !now.Enable:
			case onlyEnableDiffers(was, now):
				// Enabled now: a backend never opened opens.
				if rc.neverOpened(sc.NQN, nsid) {
					opens = append(opens, nsRef{sc.NQN, now})
				}
			case !sameBlockDevice(was, now):
				// A block device stays claimed (O_EXCL) by the running
				// namespace until it goes: reopened in the commit.
				opens = append(opens, nsRef{sc.NQN, now})
			}
		}
		for _, nsid := range sc.NamespacesAdded {
			if ns := s.Namespace(nsid); ns.Enable {
				opens = append(opens, nsRef{sc.NQN, ns})
			}
		}
	}
	return opens
}

// commit changes the target as p says: ports stopped, subsystems and
// namespaces, port links and ANA, ports started. What fails is logged,
// returned, and left out of the tree recorded as applied.
func (rc *Reconciler) commit(p *applyPlan) (Changes, error) {
	for _, w := range p.tree.Warnings() {
		rc.log.Warn("configuration accepted with a warning", "warning", w.Error())
	}
	rc.applyHostAuth(p.tree) // DH-HMAC-CHAP keys first: controllers created from now on use them (auth.go)
	c := &committer{rc: rc, p: p, applied: p.tree.Clone()}
	var res Changes
	for _, name := range p.stopped { // removed and restarted ports
		if err := rc.t.RemovePort(p.oldIDs[name]); err != nil && !errors.Is(err, target.ErrNotFound) {
			c.fail(err)
		}
		res.Stopped = append(res.Stopped, name)
	}
	c.subsystems()
	p.closeDevs() // none left unless a subsystem failed to add
	c.ports()
	for _, name := range p.start {
		port := p.tree.Port(name)
		cfg, err := rc.portConfig(port, p.newIDs[name])
		if err == nil {
			err = rc.t.AddPort(cfg)
		}
		if err != nil {
			c.fail(err)
			dropPort(c.applied, name)
			continue
		}
		res.Start = append(res.Start, portListener(port, cfg))
	}

	rc.applied = c.applied
	rc.portIDs = c.applied.PortIDs()
	for name := range rc.portIDs {
		rc.portIDs[name] = p.newIDs[name]
	}
	return res, errors.Join(c.errs...)
}

// committer carries a commit's state: the tree recorded as applied (what
// fails is taken out of it) and the errors.
type committer struct {
	rc      *Reconciler
	p       *applyPlan
	applied *configfs.Tree
	errs    []error
}

func (c *committer) fail(err error) {
	c.errs = append(c.errs, err)
	c.rc.log.Error("configuration not applied", "err", err)
}

// add adds namespace ns of subsystem nqn on the backend the plan opened,
// a stand-in when it is disabled and was not, or one opened now (a block
// device the namespace replaced held).
func (c *committer) add(nqn string, ns *configfs.Namespace) {
	k := nsKey{nqn, ns.NSID}
	d, ok := c.p.devs[k]
	delete(c.p.devs, k)
	if !ok && !ns.Enable {
		d, ok = newDisabledDevice(ns), true
	}
	if !ok {
		var err error
		if d, err = bdev.Open(nsSpec(ns)); err != nil {
			c.fail(c.p.tree.NamespaceError(nqn, ns, backendAttr(ns), err))
			dropNamespace(c.applied, nqn, ns.NSID)
			return
		}
	}
	if err := c.rc.addConfigNamespace(nqn, ns, d); err != nil {
		c.fail(err)
		dropNamespace(c.applied, nqn, ns.NSID)
	}
}

// subsystems removes, adds and updates the subsystems and their
// namespaces.
func (c *committer) subsystems() {
	rc, p := c.rc, c.p
	for _, nqn := range p.ch.SubsystemsRemoved {
		if err := rc.t.RemoveSubsystem(nqn); err != nil && !errors.Is(err, target.ErrNotFound) {
			c.fail(err)
		}
	}
	for _, nqn := range p.ch.SubsystemsAdded {
		s := p.tree.Subsystem(nqn)
		if err := rc.t.AddSubsystem(subsystemConfig(s)); err != nil {
			c.fail(err)
			dropSubsystem(c.applied, nqn)
			continue
		}
		for _, ns := range s.Namespaces {
			c.add(nqn, ns)
		}
	}
	for _, sc := range p.ch.Subsystems {
		s := p.tree.Subsystem(sc.NQN)
		if sc.Attrs || sc.Access {
			if err := rc.t.UpdateSubsystem(subsystemConfig(s)); err != nil {
				c.fail(err)
			}
		}
		for _, nsid := range sc.NamespacesRemoved {
			if err := rc.t.RemoveNamespace(sc.NQN, nsid); err != nil && !errors.Is(err, target.ErrNotFound) {
				c.fail(err)
			}
		}
		for _, nsid := range sc.NamespacesChanged {
			c.namespaceChanged(sc.NQN, p.old.Subsystem(sc.NQN).Namespace(nsid), s.Namespace(nsid))
		}
		for _, nsid := range sc.NamespacesAdded {
			c.add(sc.NQN, s.Namespace(nsid))
		}
	}
}

// namespaceChanged applies the change of namespace was into now: in
// place (resize, enable), by enabling or disabling it, or by replacing
// it.
func (c *committer) namespaceChanged(nqn string, was, now *configfs.Namespace) {
	rc, nsid := c.rc, now.NSID
	if ip, ok := c.p.inplace[nsKey{nqn, nsid}]; ok {
		if err := rc.applyInPlace(ip); err != nil {
			c.fail(err)
			restoreNamespace(c.applied, nqn, was)
		}
		rc.applyANAGroup(nqn, was, now, c.fail)
		return
	}
	_, opened := c.p.devs[nsKey{nqn, nsid}] // enabled, never opened before
	if onlyEnableDiffers(was, now) && !opened {
		if was.Enable != now.Enable {
			if err := rc.t.SetNamespaceEnabled(nqn, nsid, now.Enable); err != nil {
				c.fail(err)
				dropNamespace(c.applied, nqn, nsid)
				return
			}
		}
		rc.applyANAGroup(nqn, was, now, c.fail)
		return
	}
	if err := rc.t.RemoveNamespace(nqn, nsid); err != nil && !errors.Is(err, target.ErrNotFound) {
		c.fail(err)
	}
	c.add(nqn, now)
}

// ports applies the subsystem links and ANA states of the ports that
// stay (not restarted).
func (c *committer) ports() {
	rc, p := c.rc, c.p
	for _, pc := range p.ch.Ports {
		if p.restart[pc.ID] {
			continue
		}
		id := p.newIDs[pc.ID]
		for _, nqn := range pc.SubsystemsRemoved {
			if err := rc.t.UnlinkSubsystem(id, nqn); err != nil && !errors.Is(err, target.ErrNotFound) {
				c.fail(err)
			}
		}
		for _, nqn := range pc.SubsystemsAdded {
			if err := rc.t.LinkSubsystem(id, nqn); err != nil {
				c.fail(err)
				dropLink(c.applied, pc.ID, nqn)
			}
		}
		if pc.ANA {
			port := p.tree.Port(pc.ID)
			groups, err := anaGroupStates(port)
			if err == nil {
				err = rc.t.SetPortANA(id, groups)
			}
			if err != nil {
				c.fail(p.tree.PortError(port, "", err))
				if op := p.old.Port(pc.ID); op != nil {
					c.applied.Port(pc.ID).ANAGroups = slices.Clone(op.ANAGroups)
				}
			}
		}
	}
}
