package configfs

import (
	"slices"
)

// Changes is what a reload from one tree to another must do. Names are
// port IDs, subsystem NQNs and host NQNs; lists keep the trees' order.
type Changes struct {
	LogLevel bool // log_level differs

	HostsAdded, HostsRemoved []string
	// HostsChanged lists hosts in both trees whose DH-HMAC-CHAP settings
	// differ.
	HostsChanged []string

	PortsAdded, PortsRemoved []string
	// Ports lists ports present in both trees that differ.
	Ports []PortChanges

	SubsystemsAdded, SubsystemsRemoved []string
	// Subsystems lists subsystems present in both trees that differ.
	Subsystems []SubsystemChanges
}

// PortChanges is how a port present in both trees changed.
type PortChanges struct {
	ID string
	// Listener is true when the port's transport, address, service,
	// provider, device, tos, port ID, treq or inline data size changed:
	// its listener must be restarted.
	Listener bool
	// SubsystemsAdded and SubsystemsRemoved are the export links that
	// changed (only these when Listener is false).
	SubsystemsAdded, SubsystemsRemoved []string
	// ANA is true when the port's ANA group states changed, compared as
	// ANAState does (group 1 absent is group 1 optimized): applied
	// without restarting the listener (Listener stays false for it).
	ANA bool
}

// SubsystemChanges is how a subsystem present in both trees changed.
type SubsystemChanges struct {
	NQN string
	// Attrs is true when an attr_* attribute changed (identity strings,
	// version, cntlid range, qid_max) or max_controllers(_per_host).
	Attrs bool
	// Access is true when allow_any_host or allowed_hosts changed.
	Access bool
	// Namespaces added, removed, and present in both but different
	// (backend, path, size, block size, IDs, enable, buffered_io, grow,
	// reservations, ana_grpid).
	NamespacesAdded, NamespacesRemoved, NamespacesChanged []uint32
}

// Empty reports whether nothing changed.
func (c *Changes) Empty() bool {
	return !c.LogLevel && len(c.HostsAdded)+len(c.HostsRemoved)+len(c.HostsChanged)+len(c.PortsAdded)+len(c.PortsRemoved)+
		len(c.Ports)+len(c.SubsystemsAdded)+len(c.SubsystemsRemoved)+len(c.Subsystems) == 0
}

// Diff compares two trees. Lists compared as sets (port and subsystem
// links, allowed hosts) ignore order; source positions are ignored.
func Diff(old, new *Tree) Changes {
	if old == nil {
		old = &Tree{}
	}
	if new == nil {
		new = &Tree{}
	}
	var c Changes
	c.LogLevel = old.LogLevel != new.LogLevel

	c.HostsAdded, c.HostsRemoved = addedRemoved(names(old.Hosts, hostName), names(new.Hosts, hostName))
	for _, nh := range new.Hosts {
		if oh := old.Host(nh.NQN); oh != nil && !oh.authEqual(nh) {
			c.HostsChanged = append(c.HostsChanged, nh.NQN)
		}
	}

	c.PortsAdded, c.PortsRemoved = addedRemoved(names(old.Ports, portName), names(new.Ports, portName))
	oldIDs, newIDs := old.PortIDs(), new.PortIDs()
	for _, np := range new.Ports {
		op := old.Port(np.ID)
		if op == nil {
			continue
		}
		pc := PortChanges{ID: np.ID}
		pc.Listener = oldIDs[op.ID] != newIDs[np.ID] || op.Trtype != np.Trtype || op.Adrfam != np.Adrfam ||
			op.Traddr != np.Traddr || op.Trsvcid != np.Trsvcid || op.Treq != np.Treq ||
			op.EffectiveInlineDataSize() != np.EffectiveInlineDataSize() ||
			op.EffectiveProvider() != np.EffectiveProvider() || op.Device != np.Device || max(op.TOS, -1) != max(np.TOS, -1) ||
			op.ConnectTimeout != np.ConnectTimeout || op.MaxPending != np.MaxPending || op.MaxPendingPerHost != np.MaxPendingPerHost ||
			op.DataPoolSize != np.DataPoolSize || max(op.SRQSize, -1) != max(np.SRQSize, -1) ||
			!congestionEqual(op.Congestion, np.Congestion)
		pc.SubsystemsAdded, pc.SubsystemsRemoved = addedRemoved(op.Subsystems, np.Subsystems)
		pc.ANA = !anaEqual(op, np)
		if pc.Listener || pc.ANA || len(pc.SubsystemsAdded)+len(pc.SubsystemsRemoved) > 0 {
			c.Ports = append(c.Ports, pc)
		}
	}

	c.SubsystemsAdded, c.SubsystemsRemoved = addedRemoved(names(old.Subsystems, subsysName), names(new.Subsystems, subsysName))
	for _, ns := range new.Subsystems {
		osub := old.Subsystem(ns.NQN)
		if osub == nil {
			continue
		}
		sc := SubsystemChanges{NQN: ns.NQN}
		olo, ohi := osub.EffectiveCntlidRange()
		nlo, nhi := ns.EffectiveCntlidRange()
		sc.Attrs = osub.Serial != ns.Serial || osub.Model != ns.Model || osub.Firmware != ns.Firmware ||
			osub.EffectiveVersion() != ns.EffectiveVersion() || olo != nlo || ohi != nhi ||
			osub.QIDMax != ns.QIDMax || osub.MaxControllers != ns.MaxControllers ||
			osub.MaxControllersPerHost != ns.MaxControllersPerHost
		ah, rh := addedRemoved(osub.AllowedHosts, ns.AllowedHosts)
		sc.Access = osub.AllowAnyHost != ns.AllowAnyHost || len(ah)+len(rh) > 0
		for _, n := range ns.Namespaces {
			o := osub.Namespace(n.NSID)
			switch {
			case o == nil:
				sc.NamespacesAdded = append(sc.NamespacesAdded, n.NSID)
			case !o.equal(n, ns.NQN):
				sc.NamespacesChanged = append(sc.NamespacesChanged, n.NSID)
			}
		}
		for _, o := range osub.Namespaces {
			if ns.Namespace(o.NSID) == nil {
				sc.NamespacesRemoved = append(sc.NamespacesRemoved, o.NSID)
			}
		}
		if sc.Attrs || sc.Access || len(sc.NamespacesAdded)+len(sc.NamespacesRemoved)+len(sc.NamespacesChanged) > 0 {
			c.Subsystems = append(c.Subsystems, sc)
		}
	}
	return c
}

// anaEqual reports whether two ports give every ANA group the same
// state: group 1 absent is group 1 optimized.
func anaEqual(a, b *Port) bool {
	return slices.Equal(a.EffectiveANAGroups(), b.EffectiveANAGroups())
}

// equal compares two namespaces' configuration (not their source), with
// their effective identifiers: a derived identifier equals the same value
// written out.
func (ns *Namespace) equal(o *Namespace, subnqn string) bool {
	a, b := *ns, *o
	a.src, b.src = nil, nil
	a.ANAGrpID, b.ANAGrpID = ns.EffectiveANAGrpID(), o.EffectiveANAGrpID()
	a.QueueDepth, b.QueueDepth = ns.EffectiveQueueDepth(), o.EffectiveQueueDepth()
	a.DeviceUUID, a.DeviceNGUID, a.DeviceEUI64 = ns.IDs(subnqn)
	b.DeviceUUID, b.DeviceNGUID, b.DeviceEUI64 = o.IDs(subnqn)
	return a == b
}

// Equal reports whether two trees hold the same configuration (Diff finds
// nothing).
func Equal(a, b *Tree) bool {
	c := Diff(a, b)
	return c.Empty()
}

func hostName(h *Host) string        { return h.NQN }
func portName(p *Port) string        { return p.ID }
func subsysName(s *Subsystem) string { return s.NQN }

func names[T any](objs []T, name func(T) string) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = name(o)
	}
	return out
}

// addedRemoved returns the elements of b not in a, and of a not in b.
func addedRemoved(a, b []string) (added, removed []string) {
	for _, x := range b {
		if !slices.Contains(a, x) && !slices.Contains(added, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) && !slices.Contains(removed, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}
