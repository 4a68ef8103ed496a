package target

import (
	"errors"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
)

// TestNonConformingNQNs serves names Linux nvmet accepts and nvmetcli
// examples use: a subsystem "testnqn" and a host "testhost" accept a
// Connect; unsafe names are still refused.
func TestNonConformingNQNs(t *testing.T) {
	f := newFixture(t)
	must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: "testnqn", AllowedHosts: []string{"testhost"}}))
	must(t, f.tgt.LinkSubsystem(testPortID, "testnqn"))
	h := f.dial(0, 31)
	expect(t, h.connectRaw(31, 0, 0, "testnqn", "testhost", fabrics.CntlIDDynamic), 0, "Connect to testnqn as testhost")
	h2 := f.dial(0, 31)
	expect(t, h2.connectRaw(31, 0, 0, "testnqn", testHostNQN, fabrics.CntlIDDynamic),
		fabrics.StatusConnectInvalidHost, "Connect by a host not allowed")

	for _, err := range []error{
		f.tgt.AddSubsystem(SubsystemConfig{NQN: "test nqn"}),
		f.tgt.AddSubsystem(SubsystemConfig{NQN: "nqn.2026-11.io.nvmeof:x", AllowedHosts: []string{"nqn.2014-08.org.nvmexpress:uuid:zz"}}),
		f.tgt.AllowHost("testnqn", "host\n1"),
	} {
		if !errors.Is(err, ErrInvalid) || !errors.Is(err, fabrics.ErrInvalidNQN) {
			t.Errorf("unsafe name: %v", err)
		}
	}
	must(t, f.tgt.AllowHost("testnqn", "otherhost"))
}
