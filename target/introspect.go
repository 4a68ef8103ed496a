package target

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// Introspection for operators (the control API of cmd/nvmetd): read-only
// snapshots of the connected controllers, and a Disconnect. Nothing here
// is on the I/O path.

// ControllerInfo describes a connected controller.
type ControllerInfo struct {
	Subsystem string // subsystem NQN
	Discovery bool   // a discovery controller
	CntlID    uint16
	HostNQN   string
	HostID    [16]byte
	// Port is the name of the port the host connected through, PortID
	// its number.
	Port   string
	PortID uint16
	// Remote is the host's transport address (that of the admin queue).
	Remote fabrics.Address
	// KATO is the keep-alive timeout; 0: keep-alive off.
	KATO time.Duration
	// AuthRequired: the host has a DH-HMAC-CHAP key, every queue must
	// authenticate. Authenticated: every connected queue has.
	AuthRequired, Authenticated bool
	Ready                       bool // CC.EN = 1 and CSTS.RDY = 1
	Created                     time.Time
	// Queues lists the connected queues by QID (0 is the admin queue).
	Queues []QueueInfo
}

// QueueInfo describes one queue of a controller.
type QueueInfo struct {
	QID   uint16
	Depth int // SQ entries the host asked for (SQSIZE + 1)
	// Authenticated is set once the queue completed DH-HMAC-CHAP; false
	// without authentication.
	Authenticated bool
}

// Controllers returns the controllers connected now, every subsystem's
// (the discovery subsystem's too), ordered by subsystem NQN and
// controller ID.
func (t *Target) Controllers() []ControllerInfo {
	t.mu.RLock()
	var cs []*controller
	cs = append(cs, t.disc.controllersLocked()...)
	for _, s := range t.subsys {
		cs = append(cs, s.controllersLocked()...)
	}
	portNames := make(map[*Port]string, len(t.ports))
	for _, p := range t.ports {
		portNames[p] = p.cfg.Name
	}
	t.mu.RUnlock()

	out := make([]ControllerInfo, 0, len(cs))
	for _, c := range cs {
		info := ControllerInfo{
			Subsystem:    c.subsys.nqn,
			Discovery:    c.subsys.disc,
			CntlID:       c.cntlid,
			HostNQN:      c.hostNQN,
			HostID:       c.hostID,
			Port:         portNames[c.port],
			PortID:       c.port.id,
			AuthRequired: c.needAuth,
			Ready:        c.ready(),
			Created:      c.created,
		}
		c.mu.Lock()
		if c.dead {
			c.mu.Unlock()
			continue
		}
		info.KATO = c.kato
		authed := c.needAuth
		for qid, q := range c.queues {
			if q == nil {
				continue
			}
			qi := QueueInfo{QID: uint16(qid), Depth: int(q.size)}
			if a := q.auth.Load(); a != nil {
				qi.Authenticated = a.authenticated.Load()
			}
			authed = authed && qi.Authenticated
			if qid == 0 {
				info.Remote = q.tq.Remote()
			}
			info.Queues = append(info.Queues, qi)
		}
		c.mu.Unlock()
		info.Authenticated = authed
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b ControllerInfo) int {
		return cmp.Or(cmp.Compare(a.Subsystem, b.Subsystem), cmp.Compare(a.CntlID, b.CntlID))
	})
	return out
}

// Disconnect tears down controller cntlid of subsystem nqn (the discovery
// subsystem's NQN names it): its queues are closed, as when its keep-alive
// expires; a host that reconnects gets a new controller. ErrNotFound when
// there is no such controller.
func (t *Target) Disconnect(nqn string, cntlid uint16, reason string) error {
	t.mu.RLock()
	s := t.subsys[nqn]
	if s == nil && (nqn == t.disc.nqn) {
		s = t.disc
	}
	var c *controller
	if s != nil {
		c = s.ctrls[cntlid]
	}
	t.mu.RUnlock()
	if c == nil {
		return fmt.Errorf("target: subsystem %s controller %d: %w", nqn, cntlid, ErrNotFound)
	}
	c.shutdown(reason)
	return nil
}
