package configfs

import (
	"strings"
	"testing"
)

// TestSubsystemLimits: qid_max (attr_qid_max) and max_controllers are
// read, range-checked, written back, carried through nvmetcli's JSON
// (qid_max only: Linux has no max_controllers) and seen by Diff.
func TestSubsystemLimits(t *testing.T) {
	const sub = `subsystem "nqn.2026-11.io.nvmeof:limits" {
  allow_any_host = true
%s
}
`
	tr, err := ParseHCL([]byte(strings.ReplaceAll(sub, "%s", "  qid_max = 4\n  max_controllers = 2\n  max_controllers_per_host = 1")), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := tr.Subsystem("nqn.2026-11.io.nvmeof:limits")
	if s.QIDMax != 4 || s.MaxControllers != 2 || s.MaxControllersPerHost != 1 {
		t.Fatalf("qid_max %d, max_controllers %d, max_controllers_per_host %d, want 4, 2 and 1", s.QIDMax, s.MaxControllers, s.MaxControllersPerHost)
	}
	again, err := ParseHCL(tr.HCL(), "again.hcl")
	if err != nil {
		t.Fatalf("written back: %v\n%s", err, tr.HCL())
	}
	if s2 := again.Subsystem(s.NQN); s2.QIDMax != 4 || s2.MaxControllers != 2 || s2.MaxControllersPerHost != 1 {
		t.Fatalf("written back: qid_max %d, max_controllers %d, max_controllers_per_host %d", s2.QIDMax, s2.MaxControllers, s2.MaxControllersPerHost)
	}
	js, err := tr.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"qid_max": "4"`) || strings.Contains(string(js), "max_controllers") { // nvmetd only
		t.Fatalf("nvmetcli JSON:\n%s", js)
	}
	fromJSON, err := ParseNvmetcliJSON(js, "saved.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := fromJSON.Subsystem(s.NQN).QIDMax; got != 4 {
		t.Fatalf("qid_max from nvmetcli JSON: %d, want 4", got)
	}
	plain, err := ParseHCL([]byte(strings.ReplaceAll(sub, "%s", "")), "plain.hcl")
	if err != nil {
		t.Fatal(err)
	}
	ch := Diff(plain, tr)
	if len(ch.Subsystems) != 1 || !ch.Subsystems[0].Attrs {
		t.Fatalf("Diff without and with the limits: %+v", ch.Subsystems)
	}
	perHostOnly, err := ParseHCL([]byte(strings.ReplaceAll(sub, "%s", "  max_controllers_per_host = 3")), "host.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if ch := Diff(plain, perHostOnly); len(ch.Subsystems) != 1 || !ch.Subsystems[0].Attrs {
		t.Fatalf("Diff without and with max_controllers_per_host: %+v", ch.Subsystems)
	}
	for _, bad := range []string{"  qid_max = 0", "  qid_max = 65535", "  max_controllers = 0", "  max_controllers = 65520",
		"  max_controllers_per_host = 0", "  max_controllers_per_host = 65520"} {
		if _, err := ParseHCL([]byte(strings.ReplaceAll(sub, "%s", bad)), "bad.hcl"); err == nil {
			t.Errorf("%q accepted", strings.TrimSpace(bad))
		}
	}
}

// TestPortConnectTimeout: connect_timeout, max_pending and
// max_pending_per_host are read, range-checked, written back (HCL and
// nvmetcli JSON's nvmeof block) and restart the listener when changed.
func TestPortConnectTimeout(t *testing.T) {
	const port = `port "rdma0" {
  transport = "rdma"
  address   = "127.0.0.1"
%s
}
`
	tr, err := ParseHCL([]byte(strings.ReplaceAll(port, "%s", "  connect_timeout = 3\n  max_pending = 20\n  max_pending_per_host = 10")), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := func(what string, p *Port) {
		t.Helper()
		if p.ConnectTimeout != 3 || p.MaxPending != 20 || p.MaxPendingPerHost != 10 {
			t.Fatalf("%s: connect_timeout %d, max_pending %d, max_pending_per_host %d, want 3, 20, 10", what, p.ConnectTimeout, p.MaxPending, p.MaxPendingPerHost)
		}
	}
	want("parsed", tr.Port("rdma0"))
	again, err := ParseHCL(tr.HCL(), "again.hcl")
	if err != nil {
		t.Fatalf("written back: %v\n%s", err, tr.HCL())
	}
	want("written back", again.Port("rdma0"))
	js, err := tr.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := ParseNvmetcliJSON(js, "saved.json")
	if err != nil {
		t.Fatalf("through nvmetcli JSON: %v\n%s", err, js)
	}
	want("through nvmetcli JSON", fromJSON.Port("rdma0"))
	plain, err := ParseHCL([]byte(strings.ReplaceAll(port, "%s", "")), "plain.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if ch := Diff(plain, tr); len(ch.Ports) != 1 || !ch.Ports[0].Listener {
		t.Fatalf("Diff without and with connect_timeout: %+v", ch.Ports)
	}
	for _, bad := range []string{"  connect_timeout = 0", "  connect_timeout = 3601", "  max_pending = 0", "  max_pending_per_host = 65537"} {
		if _, err := ParseHCL([]byte(strings.ReplaceAll(port, "%s", bad)), "bad.hcl"); err == nil {
			t.Errorf("%q accepted", strings.TrimSpace(bad))
		}
	}
}
