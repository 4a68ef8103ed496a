package target

import (
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// connectDiscovery opens a discovery controller as host.
func (f *fixture) connectDiscovery(host string, kato uint32) *hq {
	f.t.Helper()
	h := f.dial(0, 31)
	r := h.connectRaw(31, kato, 0, fabrics.DiscoveryNQN, host, fabrics.CntlIDDynamic)
	expect(f.t, r, 0, "discovery Connect")
	h.cntlid = uint16(r.cqe.DW0())
	// The Linux host enables a discovery controller with CC.EN alone.
	expect(f.t, h.propSet(fabrics.PropCC, uint64(fabrics.CC(0).WithEN(true))), 0, "enable")
	return h
}

func (h *hq) discoveryLog(n int, off uint64) (fabrics.DiscoveryLog, result) {
	h.t.Helper()
	r := h.getLog(nvme.LIDDiscovery, 0, n, off, false)
	expect(h.t, r, 0, "discovery log")
	if off != 0 {
		return fabrics.DiscoveryLog{}, r
	}
	l, err := fabrics.ParseDiscoveryLog(r.data)
	must(h.t, err)
	return l, r
}

func TestDiscovery(t *testing.T) {
	f := newFixture(t)
	d := f.connectDiscovery(testHostNQN, 0)

	r := d.identify(nvme.CNSController, 0, 0)
	expect(t, r, 0, "Identify")
	id := nvme.IdentifyController(r.data)
	if id.CNTRLTYPE() != nvme.ControllerTypeDiscovery || id.SUBNQN() != fabrics.DiscoveryNQN || id.CNTLID() != d.cntlid ||
		id.OAES() != nvme.AECDiscoveryLogPageChange || id.LPA()&nvme.LPAExtendedData == 0 {
		t.Errorf("Identify: type %d subnqn %q cntlid %d oaes %#x lpa %#x", id.CNTRLTYPE(), id.SUBNQN(), id.CNTLID(), id.OAES(), id.LPA())
	}
	expect(t, d.identify(nvme.CNSNamespace, 1, 0), nvme.StatusInvalidField, "Identify Namespace")
	if v := d.getFeature(nvme.FeatKeepAliveTimer, 0).cqe.DW0(); v != DiscoveryKATO {
		t.Errorf("discovery KATO %d ms, want %d", v, DiscoveryKATO)
	}

	l, _ := d.discoveryLog(4096, 0)
	if l.NumRec != 2 || len(l.Entries) != 2 {
		t.Fatalf("%d records (%d entries), want 2", l.NumRec, len(l.Entries))
	}
	cur, nvm := l.Entries[0], l.Entries[1]
	want := fabrics.DiscoveryRecord{TRType: fabrics.TRTypeLoop, AdrFam: fabrics.AdrFamLoop, SubType: fabrics.SubTypeCurrentDiscovery,
		TREQ: fabrics.TREQDisableSQFlow, PortID: testPortID, CntlID: 0xffff, ASQSZ: 32, TRSVCID: "4420",
		SubNQN: fabrics.DiscoveryNQN, TRADDR: "127.0.0.1"}
	if cur != want {
		t.Errorf("current discovery entry\n%+v, want\n%+v", cur, want)
	}
	want.SubType, want.SubNQN = fabrics.SubTypeNVM, testSubNQN
	if nvm != want {
		t.Errorf("subsystem entry\n%+v, want\n%+v", nvm, want)
	}
	gen := l.GenCtr

	// Partial reads: the header alone, and one entry by offset.
	l, _ = d.discoveryLog(1024, 0)
	if l.NumRec != 2 || len(l.Entries) != 0 {
		t.Errorf("header only: numrec %d, %d entries", l.NumRec, len(l.Entries))
	}
	_, r = d.discoveryLog(1024, 2048)
	if e := fabrics.DiscoveryEntry(r.data).Record(); e.SubNQN != testSubNQN {
		t.Errorf("entry at offset 2048: %q", e.SubNQN)
	}
	expect(t, d.getLog(nvme.LIDDiscovery, 0, 1024, 3*1024+4, false), nvme.StatusInvalidField, "offset beyond the log")
	expect(t, d.getLog(nvme.LIDDiscovery, 0, 1024, 2, false), nvme.StatusInvalidField, "unaligned offset")
	expect(t, d.getLog(nvme.LIDSMART, 0, 512, 0, false), nvme.StatusInvalidField, "SMART on discovery")
	expect(t, d.run(newSQE(uint8(nvme.AdminAbort), 0), nil, fabrics.DirNone), nvme.StatusInvalidOpcode, "Abort on discovery")

	// A host not allowed sees only the discovery subsystem.
	o := f.connectDiscovery(otherHost, 0)
	if l, _ := o.discoveryLog(4096, 0); l.NumRec != 1 {
		t.Errorf("other host sees %d records, want 1", l.NumRec)
	}

	// Discovery log changes: genctr moves, AEN when enabled.
	expect(t, d.setFeature(nvme.FeatAsyncEventConfig, nvme.AECNamespaceAttribute), nvme.StatusInvalidField, "NS attribute AEN on discovery")
	expect(t, d.setFeature(nvme.FeatAsyncEventConfig, nvme.AECDiscoveryLogPageChange), 0, "enable discovery AEN")
	aer := d.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
	const nqn2 = "nqn.2026-11.io.nvmeof:second"
	must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: nqn2, AllowAnyHost: true}))
	must(t, f.tgt.LinkSubsystem(testPortID, nqn2))
	r = d.wait(aer)
	expect(t, r, 0, "AER")
	if ev := nvme.AsyncEvent(r.cqe.DW0()); ev != nvme.AENDiscoveryChange {
		t.Fatalf("event %v, want %v", ev, nvme.AENDiscoveryChange)
	}
	l, _ = d.discoveryLog(4096, 0)
	if l.NumRec != 3 || l.GenCtr <= gen || l.Entries[2].SubNQN != nqn2 {
		t.Fatalf("after linking: numrec %d genctr %d (was %d)", l.NumRec, l.GenCtr, gen)
	}
	gen = l.GenCtr
	aer = d.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
	must(t, f.tgt.DisallowHost(testSubNQN, testHostNQN))
	expect(t, d.wait(aer), 0, "AER after host removal")
	l, _ = d.discoveryLog(4096, 0)
	if l.NumRec != 2 || l.GenCtr <= gen {
		t.Fatalf("after disallowing: numrec %d genctr %d (was %d)", l.NumRec, l.GenCtr, gen)
	}

	// No I/O queues on a discovery controller.
	h := f.dial(1, 8)
	sqe, data := connectSQE(1, 8, 0, 0, fabrics.DiscoveryNQN, testHostNQN, d.cntlid)
	expect(t, h.run(sqe, data, fabrics.DirHostToCtrl), fabrics.StatusConnectInvalidParameters, "I/O queue on discovery")
}

func TestDiscoveryPortChanges(t *testing.T) {
	f := newFixture(t)
	d := f.connectDiscovery(testHostNQN, 0)
	l, _ := d.discoveryLog(4096, 0)
	gen := l.GenCtr
	must(t, f.tgt.UnlinkSubsystem(testPortID, testSubNQN))
	l, _ = d.discoveryLog(4096, 0)
	if l.NumRec != 1 || l.GenCtr == gen {
		t.Fatalf("after unlink: numrec %d genctr %d (was %d)", l.NumRec, l.GenCtr, gen)
	}
	// A controller of an unlinked subsystem is gone; new Connects fail.
	h := f.dial(0, 8)
	expect(t, h.connectRaw(8, 0, 0, testSubNQN, testHostNQN, 0xffff), fabrics.StatusConnectInvalidParameters, "Connect to an unlinked subsystem")

	// Removing the port ends Serve and its queues.
	must(t, f.tgt.RemovePort(testPortID))
	waitClosed(t, d, 2*time.Second)
}
