package metrics

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmeof/nvmeof/target"
)

type fakeTarget struct{ st target.Stats }

func (f fakeTarget) Stats() target.Stats { return f.st }

// TestInvalidUTF8HostNQN: a host may connect (allow_any_host) with a host
// NQN that is not UTF-8; a scrape must export it, not panic the daemon
// (client_golang's MustNewConstMetric panics on such a label value, and a
// collector's panic is not recovered).
func TestInvalidUTF8HostNQN(t *testing.T) {
	bad := "nqn.2026-11.io.nvmeof:\xff\xfehost"
	src := fakeTarget{target.Stats{Subsystems: []target.SubsystemStats{{
		NQN:         testNQN,
		Controllers: []target.ControllerStats{{CntlID: 1, HostNQN: bad, Port: 1, Queues: []target.QueueStats{{QID: 0, Size: 32}}}},
	}}}}
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewTargetCollectorWith(src, TargetOptions{HostNQN: true})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "nvmeof_target_controller_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "hostnqn" {
					continue
				}
				found = true
				if !utf8.ValidString(l.GetValue()) || !strings.HasPrefix(l.GetValue(), "nqn.2026-11.io.nvmeof:") || !strings.HasSuffix(l.GetValue(), "host") {
					t.Errorf("hostnqn label %q", l.GetValue())
				}
			}
		}
	}
	if !found {
		t.Error("no nvmeof_target_controller_info series with a hostnqn label")
	}
}
