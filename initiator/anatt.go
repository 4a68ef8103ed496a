package initiator

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

// ANA Transition Time, as the Linux host enforces it (drivers/nvme/host/
// multipath.c: nvme_read_ana_log arms anatt_timer while the log shows a
// group in the change state and deletes it when none is;
// nvme_anatt_timeout resets the controller; nvme_mpath_stop deletes the
// timer when the controller stops). A group left in change past its
// transition time means the controller is stuck: a path in change takes
// no I/O anyway, so only a reset (a new association, whose log is read
// afresh) can bring the path back, and resetting is what the kernel does.
//
// The time allowed is twice ANATT, as the kernel's (slack for the
// transport and the AEN's delivery), counted per group from the first
// read of this association that showed it in change: the kernel re-arms
// one timer at every read showing a change, so a target sending notices
// while stuck would postpone the reset for ever, and one group entering
// change just as another leaves it would be reset early (the kernel's
// comment calls a timer per group too costly; a time per group in a map
// rebuilt on each read is not).

// defaultANATT is the transition time assumed when Identify Controller
// reports none (ANATT 0, which the specification forbids with ANA
// reporting; the kernel would reset at once): Linux nvmet's 10 s.
const defaultANATT = 10 * time.Second

// anattState is an association's ANATT tracking (assoc.anatt).
type anattState struct {
	mu       sync.Mutex
	since    map[uint32]time.Time // the groups in change, since when
	timer    *time.Timer
	deadline time.Time // when timer fires
	stopped  bool      // the association ended: never armed again
}

// anattLimit is how long association a lets a group stay in change:
// twice its ANATT (defaultANATT when 0).
func anattLimit(a *assoc) time.Duration {
	t := time.Duration(a.id.ANATT()) * time.Second
	if t == 0 {
		t = defaultANATT
	}
	return 2 * t
}

// changeSince returns, for each group in change in l, since when it is
// (its time in old, else now), nil when none is, and the earliest time.
func changeSince(old map[uint32]time.Time, l nvme.ANALog, now time.Time) (map[uint32]time.Time, time.Time) {
	var since map[uint32]time.Time
	var first time.Time
	for _, g := range l.Groups {
		if g.State != nvme.ANAChange {
			continue
		}
		t, ok := old[g.GroupID]
		if !ok {
			t = now
		}
		if since == nil {
			since = make(map[uint32]time.Time, len(l.Groups))
		}
		since[g.GroupID] = t
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return since, first
}

// updateANATT applies the ANA log l just read from association a: the
// timer runs until the earliest group in change has been so for
// anattLimit, and is stopped when no group is in change.
func (c *Controller) updateANATT(a *assoc, l nvme.ANALog) {
	s := &a.anatt
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	since, first := changeSince(s.since, l, time.Now())
	s.since = since
	if since == nil {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
			c.log.Debug("no ANA group in change: ANATT timer stopped")
		}
		return
	}
	deadline := first.Add(anattLimit(a))
	if s.timer != nil && deadline.Equal(s.deadline) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.deadline = deadline
	s.timer = time.AfterFunc(time.Until(deadline), func() { c.anattExpired(a, deadline) })
	c.log.Debug("ANA group in change: ANATT timer armed", "anatt", a.id.ANATT(), "deadline", deadline)
}

// stopANATT stops association a's ANATT timer for good (its teardown).
func (a *assoc) stopANATT() {
	s := &a.anatt
	s.mu.Lock()
	s.stopped = true
	s.since = nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
}

// anattExpired runs when association a's ANATT timer set for deadline
// fires: the controller is reset if a is still its live association and a
// group is still in change (nvme_anatt_timeout).
func (c *Controller) anattExpired(a *assoc, deadline time.Time) {
	s := &a.anatt
	s.mu.Lock()
	if s.stopped || s.since == nil || !s.deadline.Equal(deadline) {
		s.mu.Unlock()
		return // stopped, or re-armed, after it fired
	}
	s.timer = nil
	groups := make([]uint32, 0, len(s.since))
	for g := range s.since {
		groups = append(groups, g)
	}
	s.mu.Unlock()
	if a.ctx.Err() != nil || c.cur.Load() != a {
		return
	}
	slices.Sort(groups)
	c.log.Warn("ANATT timeout, resetting controller", "cntlid", a.cntlid, "anagrpids", groups,
		"anatt", a.id.ANATT(), "limit", anattLimit(a))
	err := c.reset(context.Background(), a)
	if err != nil && !errors.Is(err, ErrNotLive) && !errors.Is(err, ErrClosed) {
		c.log.Warn("reset after ANATT timeout failed", "cntlid", a.cntlid, "error", err)
	}
}
