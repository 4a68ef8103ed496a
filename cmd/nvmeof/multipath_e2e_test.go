package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
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
	if out := must(connect(a)...); !strings.Contains(out, `"device": "nvmeof0"`) {
		t.Fatalf("first connect: %s", out)
	}
	if out := must(connect(b, "--iopolicy", "round-robin")...); !strings.Contains(out, `"device": "nvmeof0"`) {
		t.Fatalf("second connect did not add a path to nvmeof0: %s", out)
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
