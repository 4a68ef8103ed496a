package target

import (
	"fmt"

	"github.com/nvmeof/nvmeof/fabrics"
	"slices"
	"sync/atomic"
)

// Subsystem is an NVM subsystem (or the discovery subsystem) of a Target.
// Its exported state changes only through the Target's methods.
type Subsystem struct {
	t    *Target
	nqn  string
	disc bool

	// Guarded by t.mu.
	cfg      SubsystemConfig
	hosts    map[string]bool
	ctrls    map[uint16]*controller
	nextCtrl uint16

	// The namespaces, replaced as a whole (copy on write) under t.mu so
	// that the I/O path reads them without locking.
	ns atomic.Pointer[nsTable]

	stats subsysStats // counters (stats.go)
}

// nsTable is an immutable snapshot of a subsystem's namespaces.
type nsTable struct {
	byID   map[uint32]*namespace // every namespace, enabled or not
	active []*namespace          // the enabled ones, by NSID
	nn     uint32                // NN: MaxNamespaces, or the largest NSID
}

var emptyNSTable = &nsTable{byID: map[uint32]*namespace{}, nn: MaxNamespaces}

func newSubsystem(t *Target, cfg SubsystemConfig, disc bool) *Subsystem {
	if disc {
		cfg.Serial = DerivedSerial(cfg.NQN)
		cfg.FirmwareRevision = DefaultFirmwareRevision
		cfg.CntlIDMin, cfg.CntlIDMax = DefaultCntlIDMin, DefaultCntlIDMax
		cfg.Version = fabrics.VS13
	}
	s := &Subsystem{
		t:        t,
		nqn:      cfg.NQN,
		disc:     disc,
		cfg:      cfg,
		hosts:    hostSet(cfg.AllowedHosts),
		ctrls:    map[uint16]*controller{},
		nextCtrl: cfg.CntlIDMin,
	}
	s.ns.Store(emptyNSTable)
	return s
}

// NQN returns the subsystem's NQN.
func (s *Subsystem) NQN() string { return s.nqn }

func (s *Subsystem) table() *nsTable { return s.ns.Load() }

// hostAllowedLocked reports whether a host may connect (t.mu held).
// Every host may use the discovery subsystem.
func (s *Subsystem) hostAllowedLocked(hostNQN string) bool {
	return s.disc || s.cfg.AllowAnyHost || s.hosts[hostNQN]
}

// allocCntlIDLocked picks a free controller ID in the subsystem's range,
// next-fit from the last one given out (t.mu held).
func (s *Subsystem) allocCntlIDLocked() (uint16, bool) {
	lo, hi := s.cfg.CntlIDMin, s.cfg.CntlIDMax
	n := int(hi) - int(lo) + 1
	id := s.nextCtrl
	for range n {
		if id < lo || id > hi {
			id = lo
		}
		if _, used := s.ctrls[id]; !used {
			s.nextCtrl = id + 1
			return id, true
		}
		id++
	}
	return 0, false
}

func (s *Subsystem) controllersLocked() []*controller {
	out := make([]*controller, 0, len(s.ctrls))
	for _, c := range s.ctrls {
		out = append(out, c)
	}
	return out
}

// publish replaces the namespace table (t.mu held).
func (s *Subsystem) publish(byID map[uint32]*namespace) {
	tab := &nsTable{byID: byID, nn: MaxNamespaces}
	for _, ns := range byID {
		tab.nn = max(tab.nn, ns.nsid)
		if ns.enabled.Load() {
			tab.active = append(tab.active, ns)
		}
	}
	slices.SortFunc(tab.active, func(a, b *namespace) int { return int64cmp(int64(a.nsid), int64(b.nsid)) })
	s.ns.Store(tab)
}

func int64cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Subsystem) addNamespace(ns *namespace) error {
	old := s.table()
	if _, ok := old.byID[ns.nsid]; ok {
		return fmt.Errorf("target: subsystem %s namespace %d: %w", s.nqn, ns.nsid, ErrExists)
	}
	if len(old.byID) >= MaxNamespaces {
		return fmt.Errorf("target: subsystem %s: more than %d namespaces: %w", s.nqn, MaxNamespaces, ErrInvalid)
	}
	m := make(map[uint32]*namespace, len(old.byID)+1)
	for k, v := range old.byID {
		m[k] = v
	}
	m[ns.nsid] = ns
	s.publish(m)
	if ns.enabled.Load() {
		s.nsChangedLocked(ns.nsid)
	}
	return nil
}

func (s *Subsystem) removeNamespace(nsid uint32) (*namespace, error) {
	old := s.table()
	ns, ok := old.byID[nsid]
	if !ok {
		return nil, fmt.Errorf("target: subsystem %s namespace %d: %w", s.nqn, nsid, ErrNotFound)
	}
	m := make(map[uint32]*namespace, len(old.byID))
	for k, v := range old.byID {
		if k != nsid {
			m[k] = v
		}
	}
	wasEnabled := ns.enabled.Swap(false)
	s.publish(m)
	if wasEnabled {
		s.nsChangedLocked(nsid)
	}
	return ns, nil
}

// removeAllNamespaces empties the table without events (the subsystem or
// target is going away).
func (s *Subsystem) removeAllNamespaces() []*namespace {
	old := s.table()
	out := make([]*namespace, 0, len(old.byID))
	for _, ns := range old.byID {
		ns.enabled.Store(false)
		out = append(out, ns)
	}
	s.ns.Store(emptyNSTable)
	return out
}

func (s *Subsystem) setNamespaceEnabled(nsid uint32, enabled bool) error {
	old := s.table()
	ns, ok := old.byID[nsid]
	if !ok {
		return fmt.Errorf("target: subsystem %s namespace %d: %w", s.nqn, nsid, ErrNotFound)
	}
	if ns.enabled.Swap(enabled) == enabled {
		return nil
	}
	if enabled {
		ns.revalidate()
	}
	s.publish(old.byID)
	s.nsChangedLocked(nsid)
	s.t.log.Info("namespace enable changed", "subsys", s.nqn, "nsid", nsid, "enabled", enabled)
	return nil
}

// nsChangedLocked adds nsid to every controller's Changed Namespace List
// and raises a Namespace Attribute Changed event where enabled (Linux
// nvmet_ns_changed).
func (s *Subsystem) nsChangedLocked(nsid uint32) {
	for _, c := range s.ctrls {
		c.nsChanged(nsid)
	}
}

// activeNamespace returns the enabled namespace nsid, or nil.
func (s *Subsystem) activeNamespace(nsid uint32) *namespace {
	ns := s.table().byID[nsid]
	if ns == nil || !ns.enabled.Load() {
		return nil
	}
	return ns
}
