package target

import (
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// TestRefreshNamespaceSize: after the backend grew (bdev.Resizer), the
// namespace keeps its backend (NamespaceDevice), RefreshNamespaceSize
// raises Namespace Attribute Changed and Identify shows the new size; a
// refresh without a change raises nothing; unknown names are ErrNotFound.
func TestRefreshNamespaceSize(t *testing.T) {
	f := newFixture(t)
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	nsze := func() uint64 {
		t.Helper()
		r := a.identify(nvme.CNSNamespace, 1, 0)
		expect(t, r, 0, "Identify Namespace")
		return nvme.IdentifyNamespace(r.data).NSZE()
	}
	if !f.tgt.HasSubsystem(testSubNQN) || f.tgt.HasSubsystem("nqn.2026-11.io.nvmeof:none") {
		t.Fatal("HasSubsystem")
	}
	if d := f.tgt.NamespaceDevice(testSubNQN, 1); d != bdev.Device(f.mem) {
		t.Fatalf("NamespaceDevice = %v, want the fixture's memory backend", d)
	}
	if d := f.tgt.NamespaceDevice(testSubNQN, 9); d != nil {
		t.Fatalf("NamespaceDevice of namespace 9 = %v", d)
	}
	aer := a.submit(aerSQE(), nil, fabrics.DirNone)
	must(t, f.tgt.RefreshNamespaceSize(testSubNQN, 1)) // unchanged: no event
	select {
	case r := <-aer:
		t.Fatalf("event %#x without a change", r.cqe.DW0())
	default:
	}
	if _, err := f.mem.Resize(bdev.Spec{Kind: bdev.KindMemory, Size: 2 * testNSSize, BlockSize: 512}, false); err != nil {
		t.Fatal(err)
	}
	if got := nsze(); got != testNSSize/512 {
		t.Errorf("NSZE %d before the refresh, want %d", got, testNSSize/512)
	}
	must(t, f.tgt.RefreshNamespaceSize(testSubNQN, 1))
	r := a.wait(aer)
	expect(t, r, 0, "Asynchronous Event Request")
	if ev := nvme.AsyncEvent(r.cqe.DW0()); ev != nvme.AENNamespaceChanged {
		t.Errorf("event %v, want Namespace Attribute Changed", ev)
	}
	if got := nsze(); got != 2*testNSSize/512 {
		t.Errorf("NSZE %d after the refresh, want %d", got, 2*testNSSize/512)
	}
	if err := f.tgt.RefreshNamespaceSize(testSubNQN, 9); err == nil {
		t.Error("namespace 9 refreshed")
	}
	if err := f.tgt.RefreshNamespaceSize("nqn.2026-11.io.nvmeof:none", 1); err == nil {
		t.Error("unknown subsystem refreshed")
	}
}
