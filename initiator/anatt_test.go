package initiator

import (
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/nvme"
)

// anattFixture is a controller of a fake target with ANA reporting and
// ANATT 1 s (a group may stay in change 2 s), logging at warn level.
type anattFixture struct {
	ft  *fakeTarget
	c   *Controller
	log *syncBuf
}

func newANATTFixture(t *testing.T) *anattFixture {
	t.Helper()
	ft := newFakeTarget(t, 1<<20)
	ft.anaOn = true
	ft.anatt = 1
	ft.anaState.Store(uint32(nvme.ANAOptimized))
	f := &anattFixture{ft: ft, log: &syncBuf{}}
	o := testOpts()
	o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: f.log})
	f.c = connectFake(t, ft, o)
	synctest.Wait() // the AER is outstanding: the fake drops notices otherwise
	return f
}

// setANA changes the group's state with a notice and waits until the
// controller has read the log.
func (f *anattFixture) setANA(t *testing.T, s nvme.ANAState) {
	t.Helper()
	f.ft.setANA(s, true)
	synctest.Wait()
	if l, ok := f.c.ANALog(); !ok || len(l.Groups) != 1 || l.Groups[0].State != s {
		t.Fatalf("ANA log after the notice: %+v", l)
	}
}

// TestANATTReset: a group left in change for twice ANATT resets the
// controller (a new association, CC.EN cleared on the old one), with a
// warning naming it; the new association's read of the log, still in
// change, arms the timer again, and leaving change stops it.
func TestANATTReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newANATTFixture(t)
		old, connects, sets := f.c.CntlID(), f.ft.count("Connect"), f.ft.count("Property Set")
		f.setANA(t, nvme.ANAChange)
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		if f.ft.count("Connect") != connects || f.c.CntlID() != old {
			t.Fatal("reset before twice ANATT")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if f.c.State() != StateLive || f.c.CntlID() == old || f.ft.count("Connect") == connects {
			t.Fatalf("after twice ANATT: state %v, cntlid %d (was %d): want a reset", f.c.State(), f.c.CntlID(), old)
		}
		if got := f.ft.count("Property Set") - sets; got != 2 {
			t.Errorf("%d Property Sets, want 2 (disable, enable)", got)
		}
		logs := f.log.String()
		if !strings.Contains(logs, "[WARN]  initiator: ANATT timeout, resetting controller") ||
			!strings.Contains(logs, "cntlid="+strconv.Itoa(int(old))) || !strings.Contains(logs, `addr="`+f.ft.addr.String()+`"`) {
			t.Errorf("log:\n%s", logs)
		}
		// Still in change on the new association: reset again 2 s later.
		second := f.c.CntlID()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if f.c.CntlID() == second {
			t.Fatal("no second reset while the group stays in change")
		}
		f.setANA(t, nvme.ANAOptimized)
		third := f.c.CntlID()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f.c.CntlID() != third {
			t.Fatal("reset after the group left change")
		}
	})
}

// TestANATTLeftInTime: a group leaving change before the limit, even with
// notices meanwhile, resets nothing.
func TestANATTLeftInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newANATTFixture(t)
		old, connects := f.c.CntlID(), f.ft.count("Connect")
		f.setANA(t, nvme.ANAChange)
		time.Sleep(time.Second)
		f.setANA(t, nvme.ANAChange) // a notice while in change does not extend the time
		time.Sleep(500 * time.Millisecond)
		f.setANA(t, nvme.ANAInaccessible)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f.c.CntlID() != old || f.ft.count("Connect") != connects {
			t.Fatalf("reset although the group left change in time (cntlid %d, was %d)", f.c.CntlID(), old)
		}
		if strings.Contains(f.log.String(), "ANATT") {
			t.Errorf("log:\n%s", f.log.String())
		}
	})
}

// TestANATTNoticesDoNotPostpone: notices while the group stays in change
// do not postpone the reset (the kernel's timer would be re-armed).
func TestANATTNoticesDoNotPostpone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newANATTFixture(t)
		old := f.c.CntlID()
		f.setANA(t, nvme.ANAChange)
		for range 3 {
			time.Sleep(600 * time.Millisecond)
			f.setANA(t, nvme.ANAChange)
		}
		time.Sleep(200*time.Millisecond + time.Millisecond)
		synctest.Wait()
		if f.c.CntlID() == old {
			t.Fatal("no reset 2 s after the group entered change")
		}
	})
}

// TestANATTClose: a controller closed while its timer is armed is not
// reset and leaves nothing running (the bubble would not end otherwise).
func TestANATTClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newANATTFixture(t)
		f.setANA(t, nvme.ANAChange)
		time.Sleep(time.Second)
		connects := f.ft.count("Connect")
		if err := f.c.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if f.ft.count("Connect") != connects || f.c.State() != StateDeleted {
			t.Fatalf("after Close: state %v, %d Connects (was %d)", f.c.State(), f.ft.count("Connect"), connects)
		}
		if strings.Contains(f.log.String(), "ANATT") {
			t.Errorf("log:\n%s", f.log.String())
		}
	})
}

// TestANATTLimit: twice ANATT, twice defaultANATT when ANATT is 0.
func TestANATTLimit(t *testing.T) {
	for _, tc := range []struct {
		anatt uint8
		want  time.Duration
	}{
		{0, 2 * defaultANATT},
		{1, 2 * time.Second},
		{10, 20 * time.Second},
		{255, 510 * time.Second},
	} {
		id := nvme.NewIdentifyController()
		id.SetANATT(tc.anatt)
		if got := anattLimit(&assoc{id: id}); got != tc.want {
			t.Errorf("ANATT %d: limit %v, want %v", tc.anatt, got, tc.want)
		}
	}
}

// TestChangeSince: each group in change keeps the time it entered it;
// the earliest decides.
func TestChangeSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	grp := func(id uint32, s nvme.ANAState) nvme.ANAGroup { return nvme.ANAGroup{GroupID: id, State: s} }
	for _, tc := range []struct {
		name      string
		old       map[uint32]time.Time
		groups    []nvme.ANAGroup
		want      map[uint32]time.Time
		wantFirst time.Time
	}{
		{"none", nil, []nvme.ANAGroup{grp(1, nvme.ANAOptimized)}, nil, time.Time{}},
		{"enters", nil, []nvme.ANAGroup{grp(1, nvme.ANAChange)}, map[uint32]time.Time{1: t1}, t1},
		{"stays", map[uint32]time.Time{1: t0}, []nvme.ANAGroup{grp(1, nvme.ANAChange)}, map[uint32]time.Time{1: t0}, t0},
		{"leaves", map[uint32]time.Time{1: t0}, []nvme.ANAGroup{grp(1, nvme.ANAInaccessible)}, nil, time.Time{}},
		{"one leaves as another enters", map[uint32]time.Time{1: t0},
			[]nvme.ANAGroup{grp(1, nvme.ANAOptimized), grp(2, nvme.ANAChange)}, map[uint32]time.Time{2: t1}, t1},
		{"two", map[uint32]time.Time{2: t0},
			[]nvme.ANAGroup{grp(1, nvme.ANAChange), grp(2, nvme.ANAChange)}, map[uint32]time.Time{1: t1, 2: t0}, t0},
	} {
		got, first := changeSince(tc.old, nvme.ANALog{Groups: tc.groups}, t1)
		if len(got) != len(tc.want) || !first.Equal(tc.wantFirst) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: %v first %v, want %v first %v", tc.name, got, first, tc.want, tc.wantFirst)
			continue
		}
		for g, w := range tc.want {
			if !got[g].Equal(w) {
				t.Errorf("%s: group %d since %v, want %v", tc.name, g, got[g], w)
			}
		}
	}
}
