package target

import (
	"fmt"
	"slices"

	"github.com/nvmeof/nvmeof/nvme"
)

// Asymmetric Namespace Access (NVMe Base 2.0 §8.1.3), as Linux nvmet does
// it: every namespace is in one ANA group; every port has a state for
// each group, which is what hosts connected through that port see of the
// group's namespaces. Several gateways exporting the same namespaces give
// each group optimized on one and non-optimized (or inaccessible) on the
// others; a host's multipath sends I/O where the state is best.

// ANA limits and values (Linux nvmet).
const (
	// MaxANAGroups is the largest ANA group ID, ANAGRPMAX and NANAGRPID
	// (Linux NVMET_MAX_ANAGRPS).
	MaxANAGroups = 128
	// DefaultANAGroup is the group of namespaces that name none, optimized
	// on every port unless configured otherwise (NVMET_DEFAULT_ANA_GRPID).
	DefaultANAGroup = 1
	// anaTransitionTime is ANATT in seconds: how long a group may stay in
	// the change state (Linux reports 10).
	anaTransitionTime = 10
	// anaCapabilities is ANACAP: every state may be reported (Linux).
	anaCapabilities = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4
)

// anaLogMaxSize is the ANA log page's size: every group and every
// namespace (Linux nvme_mpath_init_identify sizes its buffer so).
const anaLogMaxSize = nvme.ANALogHeaderSize + MaxANAGroups*nvme.ANAGroupHeaderSize + 4*MaxNamespaces

// Asynchronous event information and log page of ANA Change notices.
const (
	aerInfoANAChange = 0x03
	logANA           = uint32(nvme.LIDANA)
)

// ANAGroupState is a port's state of one ANA group.
type ANAGroupState struct {
	GrpID uint32        // 1..MaxANAGroups
	State nvme.ANAState // optimized, non-optimized, inaccessible, persistent loss or change
}

// anaStates is a port's state of every group, by group ID; 0 means the
// port has no state for the group (reported, and served, as
// inaccessible). A port's table is replaced whole, never written in
// place, so the I/O path reads it without a lock.
type anaStates [MaxANAGroups + 1]nvme.ANAState

// validANAState reports whether s is a state a group may be set to.
func validANAState(s nvme.ANAState) bool {
	switch s {
	case nvme.ANAOptimized, nvme.ANANonOptimized, nvme.ANAInaccessible, nvme.ANAPersistentLoss, nvme.ANAChange:
		return true
	}
	return false
}

// newANAStates builds a port's table from its configuration: group 1 is
// optimized unless the configuration says otherwise.
func newANAStates(groups []ANAGroupState) (*anaStates, error) {
	var st anaStates
	st[DefaultANAGroup] = nvme.ANAOptimized
	for _, g := range groups {
		if g.GrpID == 0 || g.GrpID > MaxANAGroups {
			return nil, fmt.Errorf("ANA group %d outside 1-%d: %w", g.GrpID, MaxANAGroups, ErrInvalid)
		}
		if !validANAState(g.State) {
			return nil, fmt.Errorf("ANA group %d: state %v: %w", g.GrpID, g.State, ErrInvalid)
		}
		st[g.GrpID] = g.State
	}
	return &st, nil
}

// state returns the port's state of group grpid as hosts see it.
func (a *anaStates) state(grpid uint32) nvme.ANAState {
	if grpid == 0 || grpid > MaxANAGroups || a[grpid] == 0 {
		return nvme.ANAInaccessible
	}
	return a[grpid]
}

// anaStatus is the status of an I/O command to namespace ns through port
// p: success, or the ANA status of a group the port cannot serve it from
// (Linux nvmet_check_ana_state; without DNR: another path may).
func (p *Port) anaStatus(ns *namespace) nvme.Status {
	switch p.ana.Load().state(ns.anagrp.Load()) {
	case nvme.ANAInaccessible:
		return nvme.StatusANAInaccessible
	case nvme.ANAPersistentLoss:
		return nvme.StatusANAPersistentLoss
	case nvme.ANAChange:
		return nvme.StatusANATransition
	}
	return nvme.StatusSuccess
}

// ANAStates returns the port's ANA state of every group it has one for,
// in group order.
func (p *Port) ANAStates() []ANAGroupState {
	a := p.ana.Load()
	var out []ANAGroupState
	for g := uint32(1); g <= MaxANAGroups; g++ {
		if a[g] != 0 {
			out = append(out, ANAGroupState{GrpID: g, State: a[g]})
		}
	}
	return out
}

// SetPortANA replaces port portID's ANA group states (group 1 is
// optimized unless groups say otherwise). When a state changed, the ANA
// change count moves and the I/O controllers connected through the port
// get an ANA Change event.
func (t *Target) SetPortANA(portID uint16, groups []ANAGroupState) error {
	st, err := newANAStates(groups)
	if err != nil {
		return fmt.Errorf("target: port %d: %w", portID, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.ports[portID]
	if !ok {
		return fmt.Errorf("target: port %d: %w", portID, ErrNotFound)
	}
	p.cfg.ANAGroups = slices.Clone(groups)
	t.setPortANALocked(p, st)
	return nil
}

// setPortANALocked gives port p the states st (t.mu held): when they
// differ, the change count moves and the I/O controllers connected
// through p get an ANA Change event.
func (t *Target) setPortANALocked(p *Port, st *anaStates) {
	if *p.ana.Load() == *st {
		return
	}
	p.ana.Store(st)
	t.anaChanged.Add(1)
	t.log.Info("ANA states changed", "port", p.id, "groups", fmtANA(p.ANAStates()))
	for _, c := range p.controllersLocked() {
		if !c.subsys.disc {
			c.anaChanged()
		}
	}
}

// SetANAState sets port portID's state of one ANA group, as
// ports/<id>/ana_groups/<grpid>/ana_state does in Linux (SetPortANA).
func (t *Target) SetANAState(portID uint16, grpid uint32, state nvme.ANAState) error {
	t.mu.RLock()
	p, ok := t.ports[portID]
	var groups []ANAGroupState
	if ok {
		groups = p.ANAStates()
	}
	t.mu.RUnlock()
	if !ok {
		return fmt.Errorf("target: port %d: %w", portID, ErrNotFound)
	}
	i := slices.IndexFunc(groups, func(g ANAGroupState) bool { return g.GrpID == grpid })
	if i < 0 {
		groups = append(groups, ANAGroupState{GrpID: grpid, State: state})
	} else {
		groups[i].State = state
	}
	return t.SetPortANA(portID, groups)
}

// SetNamespaceANAGroup moves a namespace to ANA group grpid (Linux: the
// ana_grpid attribute, which may change while the namespace is enabled);
// the subsystem's controllers get an ANA Change event.
func (t *Target) SetNamespaceANAGroup(subsysNQN string, nsid, grpid uint32) error {
	if grpid == 0 || grpid > MaxANAGroups {
		return fmt.Errorf("target: subsystem %s namespace %d: ANA group %d outside 1-%d: %w", subsysNQN, nsid, grpid, MaxANAGroups, ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ns, err := t.namespaceLocked(subsysNQN, nsid)
	if err != nil {
		return err
	}
	if ns.anagrp.Swap(grpid) == grpid {
		return nil
	}
	t.anaChanged.Add(1)
	t.log.Info("namespace ANA group changed", "subsys", subsysNQN, "nsid", nsid, "ana_grpid", grpid)
	for _, c := range s.ctrls {
		c.anaChanged()
	}
	return nil
}

// anaChanged raises an ANA Change notice when enabled and not masked
// (Linux nvmet_port_send_ana_event).
func (c *controller) anaChanged() {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if c.aenAllowedLocked(aenBitANA) {
		c.events = append(c.events, aerTypeNotice|aerInfoANAChange<<8|logANA<<16)
	}
	done := c.matchEventsLocked()
	c.mu.Unlock()
	c.completeAERs(done)
}

// anaLog builds the ANA log page as the controller's port reports it: a
// descriptor for every group the port has a state for or an active
// namespace of the subsystem is in, each with the port's state and,
// unless rgo (Return Groups Only), the group's active NSIDs (Linux
// nvmet_execute_get_log_page_ana). Reading it without RAE unmasks ANA
// Change events.
func (c *controller) anaLog(rgo, rae bool) ([]byte, error) {
	a := c.port.ana.Load()
	chg := c.t.anaChanged.Load()
	var members [MaxANAGroups + 1][]uint32
	var used [MaxANAGroups + 1]bool
	for g := range a {
		used[g] = a[g] != 0
	}
	for _, ns := range c.subsys.table().active {
		g := ns.anagrp.Load()
		if g == 0 || g > MaxANAGroups {
			continue
		}
		used[g] = true
		if !rgo {
			members[g] = append(members[g], ns.nsid)
		}
	}
	l := nvme.ANALog{ChangeCount: chg}
	for g := uint32(1); g <= MaxANAGroups; g++ {
		if used[g] {
			l.Groups = append(l.Groups, nvme.ANAGroup{GroupID: g, ChangeCount: chg, State: a.state(g), NSIDs: members[g]})
		}
	}
	// The log's size is the largest it can be, what hosts size their reads
	// by (NANAGRPID groups, MNAN NSIDs): nvme-cli reads it in 4 KiB pieces
	// at growing offsets, which must not run past the end.
	page, err := l.AppendBinary(make([]byte, 0, max(l.Size(), anaLogMaxSize)))
	if err != nil {
		return nil, err
	}
	page = page[:max(len(page), anaLogMaxSize)]
	if !rae {
		c.mu.Lock()
		c.clearAENLocked(aenBitANA)
		c.mu.Unlock()
	}
	return page, nil
}

// fmtANA formats group states for logs: "1:optimized 2:inaccessible".
func fmtANA(gs []ANAGroupState) string {
	var b []byte
	for i, g := range gs {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%d:%v", g.GrpID, g.State)
	}
	return string(b)
}
