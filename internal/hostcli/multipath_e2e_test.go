package hostcli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestMultipathConnect connects two ports of one subsystem (two
// in-process targets serving the same NQN over the soft RoCE provider)
// and checks that the second connect adds a path to the first daemon:
// one controller name, one set of namespaces, two paths in list-subsys.
func TestMultipathConnect(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:e2e-mpath"
	const a, b, host = "127.61.7.1", "127.61.7.3", "127.61.7.2"
	startSoftTarget(t, a, nqn)
	startSoftTarget(t, b, nqn)
	runDir := filepath.Join(t.TempDir(), "run")
	cli := runDirCLI(t, runDir)
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		return out
	}
	connect := func(addr string, extra ...string) []string {
		return append([]string{"connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", host,
			"-n", nqn, "-q", tHost, "--map", "none", "--timeout", "30s", "-o", "json"}, extra...)
	}
	if code, out, errs := cli(connect(a)...); code != 0 || !strings.Contains(out, `"device": "nvmeof0"`) || errs != "" {
		t.Fatalf("first connect: exit %d, %s, stderr %q (want none: a new controller, --map none)", code, out, errs)
	}
	// The second connect says on stderr that it added a path, as its
	// output is the first controller's.
	code, out, errs := cli(connect(b, "--iopolicy", "round-robin")...)
	if code != 0 || !strings.Contains(out, `"device": "nvmeof0"`) {
		t.Fatalf("second connect did not add a path to nvmeof0: exit %d, %s, stderr %q", code, out, errs)
	}
	if want := "nvmeof0: added path nvmeof0c1 to " + nqn + ", connected already"; !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("second connect: stderr %q, want one line starting %q", errs, want)
	}
	live, _, err := session.Scan(runDir)
	if err != nil || len(live) != 1 || live[0].State == nil {
		t.Fatalf("scan: %v, %d daemons, want 1", err, len(live))
	}
	st := live[0].State
	if len(st.Paths) != 2 || st.Paths[1].Traddr != b || st.Paths[1].Name != "nvmeof0c1" || st.IOPolicy != "round-robin" {
		t.Fatalf("state paths %+v policy %q", st.Paths, st.IOPolicy)
	}
	want := "nvmeof-subsys0 - NQN=" + nqn + "\n" +
		"                 hostnqn=" + tHost + "\n" +
		"                 iopolicy=round-robin\n" +
		"\\\n" +
		" +- nvmeof0 rdma traddr=" + a + ",trsvcid=4420 live optimized\n" +
		" +- nvmeof0c1 rdma traddr=" + b + ",trsvcid=4420 live optimized\n"
	if out := must("list-subsys"); out != want {
		t.Errorf("list-subsys:\n%s\nwant:\n%s", out, want)
	}
	var js struct {
		Devices []struct {
			NameSpace int
			Paths     []struct{ Name, ANAState string }
		}
	}
	if err := json.Unmarshal([]byte(must("list", "-o", "json")), &js); err != nil || len(js.Devices) != 2 || len(js.Devices[0].Paths) != 2 {
		t.Fatalf("list -o json: %v %+v", err, js)
	}
	// A third connect to a connected address is refused as before.
	if code, _, errs := cli(connect(b)...); code != 1 || !strings.Contains(errs, "already connected as nvmeof0") {
		t.Fatalf("connect to a connected path: exit %d, %q", code, errs)
	}
	// The namespaces answer through the daemon.
	if out := must("id-ns", "nvmeof0n1", "-o", "json"); !strings.Contains(out, `"nguid"`) {
		t.Fatalf("id-ns: %s", out)
	}
	must("disconnect", "-n", nqn)
	if live, _, _ := session.Scan(runDir); len(live) != 0 {
		t.Fatalf("%d daemons after disconnect", len(live))
	}
}

// TestMultipathDisconnectPath disconnects single paths of a multipath
// subsystem with disconnect -d (two in-process targets with one NQN over
// the soft provider, every path from one host address and so one shared
// RDMA device): the second path, then the first while another remains,
// each time leaving the daemon, its devices and the other path working;
// an unknown path is refused; disconnect -n ends the rest.
func TestMultipathDisconnectPath(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:e2e-mpath-dpath"
	const a, b, host = "127.61.8.1", "127.61.8.3", "127.61.8.2"
	startSoftTarget(t, a, nqn)
	startSoftTarget(t, b, nqn)
	runDir := filepath.Join(t.TempDir(), "run")
	cli := runDirCLI(t, runDir)
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		return out
	}
	connect := func(addr string) {
		t.Helper()
		out := must("connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", host,
			"-n", nqn, "-q", tHost, "--map", "none", "--timeout", "30s", "-o", "json")
		if !strings.Contains(out, `"device": "nvmeof0"`) {
			t.Fatalf("connect %s: %s", addr, out)
		}
	}
	subsys := func(paths ...string) string {
		s := "nvmeof-subsys0 - NQN=" + nqn + "\n" +
			"                 hostnqn=" + tHost + "\n" +
			"                 iopolicy=numa\n" +
			"\\\n"
		for _, p := range paths {
			s += " +- " + p + " live optimized\n"
		}
		return s
	}
	state := func() *session.State {
		t.Helper()
		live, _, err := session.Scan(runDir)
		if err != nil || len(live) != 1 || live[0].State == nil {
			t.Fatalf("scan: %v, %d daemons, want 1", err, len(live))
		}
		return live[0].State
	}
	idNS := func() {
		t.Helper()
		if out := must("id-ns", "nvmeof0n1", "-o", "json"); !strings.Contains(out, `"nguid"`) {
			t.Fatalf("id-ns: %s", out)
		}
	}
	done := "" // nvme-cli's disconnect -d prints nothing

	connect(a)
	connect(b)
	pid := state().PID
	if out := must("disconnect", "-d", "nvmeof0c1"); out != done {
		t.Fatalf("disconnect -d nvmeof0c1: %q, want %q", out, done)
	}
	if out := must("list-subsys"); out != subsys("nvmeof0 rdma traddr="+a+",trsvcid=4420") {
		t.Fatalf("list-subsys after disconnecting nvmeof0c1:\n%s", out)
	}
	if st := state(); st.PID != pid || len(st.Paths) != 1 {
		t.Fatalf("daemon %d (was %d), paths %+v", st.PID, pid, st.Paths)
	}
	idNS()

	// b again (nvmeof0c2), then the first path goes while it remains:
	// the RDMA device they share stays open for nvmeof0c2.
	connect(b)
	if out := must("disconnect", "-d", "nvmeof0"); out != done {
		t.Fatalf("disconnect -d nvmeof0: %q", out)
	}
	if out := must("list-subsys"); out != subsys("nvmeof0c2 rdma traddr="+b+",trsvcid=4420") {
		t.Fatalf("list-subsys after disconnecting nvmeof0:\n%s", out)
	}
	if st := state(); st.Traddr != b || st.PID != pid {
		t.Fatalf("state after the first path went: traddr %s pid %d", st.Traddr, st.PID)
	}
	idNS()
	// a is no longer held: connecting it adds a path again.
	connect(a)
	if st := state(); len(st.Paths) != 2 || st.Paths[1].Name != "nvmeof0c3" || st.Paths[1].Traddr != a {
		t.Fatalf("paths after reconnecting a: %+v", st.Paths)
	}
	idNS()

	if code, _, errs := cli("disconnect", "-d", "nvmeof0c9"); code == 0 || !strings.Contains(errs, "nvmeof0c9") {
		t.Fatalf("disconnect -d of an unknown path: exit %d, %q", code, errs)
	}
	if out := must("disconnect", "-n", nqn); out != "NQN:"+nqn+" disconnected 2 controller(s)\n" {
		t.Fatalf("disconnect -n: %q", out)
	}
	if live, _, _ := session.Scan(runDir); len(live) != 0 {
		t.Fatalf("%d daemons after disconnect", len(live))
	}
}

// TestMultipathPathCommands: admin commands given a path name
// (nvmeof0c1) run on that path's controller, as nvme-cli's do on
// /dev/nvme1: the second gateway's cntlid in id-ctrl, its ANA state in
// ana-log, its error count in smart-log; nvmeof0 and nvmeof0n1 stay on
// the daemon's choice.
func TestMultipathPathCommands(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:e2e-mpath-cmds"
	const a, b, host = "127.61.9.1", "127.61.9.3", "127.61.9.2"
	gateway := func(addr, state string, cntlidMin int) {
		hcl := fmt.Sprintf(`port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
  ana_group "1" { state = %q }
}
subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  serial         = "E2EMPATH1"
  cntlid_min     = %d
  cntlid_max     = %d
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
    nguid   = "00112233445566778899aabbccddeeff"
  }
}
`, addr, state, nqn, cntlidMin, cntlidMin+99)
		tree, err := configfs.ParseHCL([]byte(hcl), "gw.hcl")
		if err != nil {
			t.Fatal(err)
		}
		srv := server.New(server.Options{Logger: hclog.NewNullLogger()})
		t.Cleanup(func() { srv.Close() })
		if err := srv.Apply(tree); err != nil {
			t.Skipf("cannot serve on %s with the soft provider: %v", addr, err)
		}
	}
	gateway(a, "optimized", 1)
	gateway(b, "non-optimized", 100)
	cli := runDirCLI(t, filepath.Join(t.TempDir(), "run"))
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := cli(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errs)
		}
		return out
	}
	for _, addr := range []string{a, b} {
		must("connect", "-t", "rdma", "-a", addr, "-s", "4420", "--provider", "soft", "-w", host,
			"-n", nqn, "-q", tHost, "--map", "none", "--timeout", "30s")
	}
	t.Cleanup(func() { cli("disconnect", "-n", nqn) })
	cntlid := func(dev string) int {
		var id struct{ Cntlid int }
		if err := json.Unmarshal([]byte(must("id-ctrl", dev, "-o", "json")), &id); err != nil {
			t.Fatal(err)
		}
		return id.Cntlid
	}
	if got := cntlid("nvmeof0c1"); got != 100 {
		t.Errorf("id-ctrl nvmeof0c1: cntlid %d, want 100 (the second gateway's)", got)
	}
	if got := cntlid("nvmeof0"); got != 1 {
		t.Errorf("id-ctrl nvmeof0: cntlid %d, want 1", got)
	}
	if out := must("ana-log", "nvmeof0c1"); !strings.Contains(out, "state\t:\tnon-optimized\n") || !strings.Contains(out, "device: nvmeof0c1\n") {
		t.Errorf("ana-log nvmeof0c1:\n%s", out)
	}
	if out := must("ana-log", "nvmeof0"); !strings.Contains(out, "state\t:\toptimized\n") {
		t.Errorf("ana-log nvmeof0:\n%s", out)
	}
	if code, _, errs := cli("id-ctrl", "nvmeof0c7"); code != 1 || !strings.Contains(errs, "nvmeof0c7") {
		t.Errorf("id-ctrl nvmeof0c7: exit %d, %q", code, errs)
	}

	// smart-log: the error log entry count is the controller's own, so
	// failing commands on nvmeof0c1 show in its SMART log only.
	errEntries := func(dev string) int {
		var l struct {
			N int `json:"num_err_log_entries"`
		}
		if err := json.Unmarshal([]byte(must("smart-log", dev, "-o", "json")), &l); err != nil {
			t.Fatal(err)
		}
		return l.N
	}
	first, second := errEntries("nvmeof0"), errEntries("nvmeof0c1")
	const failures = 2
	for range failures {
		if code, _, _ := cli("get-log", "nvmeof0c1", "--log-id", "126", "--log-len", "4"); code != 1 {
			t.Fatalf("get-log nvmeof0c1 --log-id 126 (no such log page): exit %d, want 1", code)
		}
	}
	if got := errEntries("nvmeof0c1"); got != second+failures {
		t.Errorf("smart-log nvmeof0c1: %d error log entries, want %d (%d before, then %d failed commands on that path)", got, second+failures, second, failures)
	}
	if got := errEntries("nvmeof0"); got != first {
		t.Errorf("smart-log nvmeof0: %d error log entries, want %d (the failures were on nvmeof0c1)", got, first)
	}
	if code, _, errs := cli("smart-log", "nvmeof0c7"); code != 1 || !strings.Contains(errs, "nvmeof0c7") {
		t.Errorf("smart-log nvmeof0c7: exit %d, %q", code, errs)
	}
}
