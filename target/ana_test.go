package target

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// anaLogOf reads and decodes the ANA log page (RGO as asked).
func anaLogOf(t *testing.T, a *hq, rgo, rae bool) nvme.ANALog {
	t.Helper()
	sqe := logSQE(nvme.LIDANA, 0, 4096, 0, rae)
	if rgo {
		nvme.GetLogPageCommand{SQE: nvme.SQE(sqe[:])}.SetLSP(nvme.ANALSPRGO)
	}
	r := a.run(sqe, make([]byte, 4096), fabrics.DirCtrlToHost)
	expect(t, r, 0, "Get Log Page ANA")
	l, err := nvme.DecodeANALog(r.data)
	must(t, err)
	return l
}

// TestANALogAndIO: the port's states of its groups show in the ANA log
// (with and without RGO), in Identify Namespace, and in the status of I/O
// to each group's namespaces.
func TestANALogAndIO(t *testing.T) {
	f := newFixture(t, func(_ *SubsystemConfig, p *PortConfig) {
		p.ANAGroups = []ANAGroupState{{2, nvme.ANANonOptimized}, {3, nvme.ANAInaccessible}, {4, nvme.ANAPersistentLoss}, {5, nvme.ANAChange}}
	})
	for nsid, grp := range map[uint32]uint32{2: 2, 3: 3, 4: 4, 5: 5, 6: 9} {
		mem, err := bdev.NewMemory(1<<20, 512)
		must(t, err)
		must(t, f.tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: nsid, Device: mem, ANAGrpID: grp}))
	}
	s := f.session()

	l := anaLogOf(t, s.admin, false, false)
	want := []struct {
		grp   uint32
		state nvme.ANAState
		nsids []uint32
	}{
		{1, nvme.ANAOptimized, []uint32{1}},
		{2, nvme.ANANonOptimized, []uint32{2}},
		{3, nvme.ANAInaccessible, []uint32{3}},
		{4, nvme.ANAPersistentLoss, []uint32{4}},
		{5, nvme.ANAChange, []uint32{5}},
		{9, nvme.ANAInaccessible, []uint32{6}}, // not configured on the port
	}
	if len(l.Groups) != len(want) {
		t.Fatalf("ANA log: %d groups %+v, want %d", len(l.Groups), l.Groups, len(want))
	}
	for i, w := range want {
		g := l.Groups[i]
		if g.GroupID != w.grp || g.State != w.state || len(g.NSIDs) != len(w.nsids) || g.NSIDs[0] != w.nsids[0] {
			t.Errorf("group %d: %+v, want %+v", i, g, w)
		}
	}
	// nvme-cli reads the log in 4 KiB pieces up to the size Identify
	// Controller implies (16 + NANAGRPID*32 + MNAN*4 = 8208 bytes).
	for _, off := range []uint64{4096, 8192} {
		n := min(4096, anaLogMaxSize-int(off))
		r := s.admin.getLog(nvme.LIDANA, 0, n, off, true)
		expect(t, r, 0, fmt.Sprintf("ANA log at offset %d", off))
		if !bytes.Equal(r.data, make([]byte, n)) {
			t.Errorf("ANA log at offset %d: not zeroes", off)
		}
	}
	expect(t, s.admin.getLog(nvme.LIDANA, 0, 16, anaLogMaxSize+4, true), nvme.StatusInvalidField, "ANA log past its size")
	for _, g := range anaLogOf(t, s.admin, true, false).Groups {
		if len(g.NSIDs) != 0 {
			t.Errorf("RGO: group %d lists NSIDs %v", g.GroupID, g.NSIDs)
		}
	}

	for _, tc := range []struct {
		nsid   uint32
		status nvme.Status
		nuse   bool
	}{
		{1, 0, true},
		{2, 0, true},
		{3, nvme.StatusANAInaccessible, false},
		{4, nvme.StatusANAPersistentLoss, false},
		{5, nvme.StatusANATransition, true},
		{6, nvme.StatusANAInaccessible, false},
	} {
		r := s.io.read(tc.nsid, 0, 1)
		if r.status() != tc.status {
			t.Errorf("read nsid %d: status %s, want %s", tc.nsid, fabrics.StatusString(r.status()), fabrics.StatusString(tc.status))
		}
		if tc.status != 0 && r.cqe.DNR() {
			t.Errorf("read nsid %d: ANA status with DNR: another path may serve it", tc.nsid)
		}
		id := nvme.IdentifyNamespace(s.admin.identify(nvme.CNSNamespace, tc.nsid, 0).data)
		if (id.NUSE() != 0) != tc.nuse {
			t.Errorf("nsid %d: NUSE %d, want in use %v", tc.nsid, id.NUSE(), tc.nuse)
		}
		if id.ANAGRPID() == 0 {
			t.Errorf("nsid %d: ANAGRPID 0", tc.nsid)
		}
	}
}

// TestANAChangeEvent: a port's state change moves CHGCNT and completes an
// outstanding AER with an ANA Change notice (log page 0Ch); the next one
// waits until the host reads the log without RAE. Moving a namespace to
// another group does the same.
func TestANAChangeEvent(t *testing.T) {
	f := newFixture(t, func(_ *SubsystemConfig, p *PortConfig) {
		p.ANAGroups = []ANAGroupState{{2, nvme.ANANonOptimized}}
	})
	s := f.session()
	before := anaLogOf(t, s.admin, false, false).ChangeCount
	aer := s.admin.submit(aerSQE(), nil, fabrics.DirNone)

	must(t, f.tgt.SetANAState(testPortID, 1, nvme.ANAInaccessible))
	r := s.admin.wait(aer)
	expect(t, r, 0, "AER")
	if got, want := r.cqe.DW0(), uint32(2|0x03<<8|0x0c<<16); got != want {
		t.Fatalf("AER dw0 %#x, want %#x (notice, ANA change, log 0Ch)", got, want)
	}
	if r := s.io.read(1, 0, 1); r.status() != nvme.StatusANAInaccessible {
		t.Fatalf("read after the change: %s", fabrics.StatusString(r.status()))
	}

	// Masked until the log is read without RAE.
	aer = s.admin.submit(aerSQE(), nil, fabrics.DirNone)
	must(t, f.tgt.SetANAState(testPortID, 1, nvme.ANANonOptimized))
	select {
	case r := <-aer:
		t.Fatalf("second ANA event before the log was read: %+v", r)
	default:
	}
	l := anaLogOf(t, s.admin, false, true) // RAE: stays masked
	if l.ChangeCount <= before {
		t.Fatalf("CHGCNT %d after changes, was %d", l.ChangeCount, before)
	}
	anaLogOf(t, s.admin, false, false)
	must(t, f.tgt.SetNamespaceANAGroup(testSubNQN, 1, 2))
	expect(t, s.admin.wait(aer), 0, "AER after the log was read")
	if g := anaLogOf(t, s.admin, false, false).Groups; len(g) != 2 || g[1].GroupID != 2 || len(g[1].NSIDs) != 1 {
		t.Fatalf("namespace 1 not in group 2: %+v", g)
	}
	if r := s.io.read(1, 0, 1); r.status() != 0 {
		t.Fatalf("read in the non-optimized group: %s", fabrics.StatusString(r.status()))
	}
	// Setting the same state again changes nothing and raises nothing.
	c := f.tgt.anaChanged.Load()
	must(t, f.tgt.SetANAState(testPortID, 2, nvme.ANANonOptimized))
	if f.tgt.anaChanged.Load() != c {
		t.Fatal("CHGCNT moved without a change")
	}
}

// TestANAInvalid: out-of-range groups and states are refused.
func TestANAInvalid(t *testing.T) {
	f := newFixture(t)
	for _, g := range [][]ANAGroupState{{{0, nvme.ANAOptimized}}, {{129, nvme.ANAOptimized}}, {{2, 0}}, {{2, 7}}} {
		if err := f.tgt.SetPortANA(testPortID, g); err == nil {
			t.Errorf("SetPortANA(%v) accepted", g)
		}
	}
	if err := f.tgt.SetNamespaceANAGroup(testSubNQN, 1, 200); err == nil {
		t.Error("SetNamespaceANAGroup(200) accepted")
	}
	if err := f.tgt.SetANAState(99, 1, nvme.ANAOptimized); err == nil {
		t.Error("SetANAState on a missing port accepted")
	}
}
