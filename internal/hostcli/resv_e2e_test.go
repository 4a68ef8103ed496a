package hostcli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestResvCommands runs resv-register, resv-acquire, resv-release and
// resv-report from two hosts (own host NQN and host ID, own connection
// daemons) against an in-process nvmetd over the soft RoCE provider.
func TestResvCommands(t *testing.T) {
	const (
		target = "127.61.9.1"
		nqn    = "nqn.2026-11.io.nvmeof:e2e-resv"
	)
	tree, err := configfs.ParseHCL([]byte(fmt.Sprintf(`port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = %q
  service   = 4420
}
subsystem %q {
  ports          = ["p0"]
  allow_any_host = true
  namespace "1" {
    backend     = "memory"
    size        = "1MiB"
    resv_enable = true
  }
}
`, target, nqn)), "resv.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{Logger: hclog.NewNullLogger()})
	if err := srv.Apply(tree); err != nil {
		srv.Close()
		t.Skipf("cannot serve on %s with the soft provider: %v", target, err)
	}
	t.Cleanup(func() { srv.Close() })

	type host struct {
		cli func(args ...string) (int, string, string)
	}
	connect := func(addr, id string) host {
		cli := runDirCLI(t, filepath.Join(t.TempDir(), "run"))
		code, _, errs := cli("connect", "-t", "rdma", "-a", target, "-s", "4420", "--provider", "soft", "-w", addr,
			"-n", nqn, "-q", "nqn.2014-08.org.nvmexpress:uuid:"+id, "-I", id, "--map", "none", "--timeout", "30s")
		if code != 0 {
			t.Fatalf("connect as %s: exit %d, stderr %q", id, code, errs)
		}
		return host{cli: cli}
	}
	a := connect("127.61.9.2", "6b706565-7200-4000-8000-0000000000a1")
	b := connect("127.61.9.3", "6b706565-7200-4000-8000-0000000000b2")
	must := func(h host, want string, args ...string) string {
		t.Helper()
		code, out, errs := h.cli(args...)
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %q", args, code, out, errs, want)
		}
		return out
	}
	fails := func(h host, want string, args ...string) {
		t.Helper()
		code, out, errs := h.cli(args...)
		if code == 0 || !strings.Contains(errs, want) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want a failure with %q", args, code, out, errs, want)
		}
	}

	must(a, "NVME Reservation  success\n", "resv-register", "nvmeof0n1", "--nrkey", "0xa", "--rrega", "0")
	must(b, "NVME Reservation  success\n", "resv-register", "nvmeof0", "-n", "1", "-k", "0xb")
	must(a, "NVME Reservation Acquire success\n", "resv-acquire", "nvmeof0n1", "-c", "0xa", "-t", "1", "-a", "0")
	fails(b, "Reservation Conflict", "resv-acquire", "nvmeof0n1", "-c", "0xb", "-t", "1")
	fails(b, "Host Identifier Inconsistent Format", "resv-report", "nvmeof0n1")

	out := must(b, "rtype     : 1\nregctl    : 2\n", "resv-report", "nvmeof0n1", "--eds")
	if !strings.Contains(out, "regctlext[0] :\n  cntlid     : ffff\n  rcsts      : 1\n  rkey       : a\n  hostid     : 6b7065657200400080000000000000a1\n") {
		t.Errorf("resv-report:\n%s", out)
	}
	var js struct {
		Gen     uint32 `json:"gen"`
		RType   int    `json:"rtype"`
		RegCtl  int    `json:"regctl"`
		RegCtls []struct {
			RCSTS  int    `json:"rcsts"`
			HostID string `json:"hostid"`
			RKey   uint64 `json:"rkey"`
		} `json:"regctls"`
	}
	if err := json.Unmarshal([]byte(must(b, "", "resv-report", "nvmeof0n1", "-e", "-o", "json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.RType != 1 || js.RegCtl != 2 || len(js.RegCtls) != 2 || js.RegCtls[1].RKey != 0xb || js.RegCtls[1].RCSTS != 0 ||
		js.RegCtls[1].HostID != "6b7065657200400080000000000000b2" {
		t.Errorf("resv-report -o json: %+v", js)
	}

	must(b, "NVME Reservation Acquire success\n", "resv-acquire", "nvmeof0n1", "-c", "0xb", "-p", "0xa", "-t", "1", "--racqa", "1")
	out = must(a, "regctl    : 1\n", "resv-report", "nvmeof0n1", "-e")
	if !strings.Contains(out, "rcsts      : 1\n  rkey       : b\n") {
		t.Errorf("resv-report after the preemption:\n%s", out)
	}
	fails(a, "Reservation Conflict", "resv-release", "nvmeof0n1", "-c", "0xa", "-t", "1")
	must(b, "NVME Reservation Release success\n", "resv-release", "nvmeof0n1", "-c", "0xb", "--rrela", "1")
	must(a, "rtype     : 0\nregctl    : 0\n", "resv-report", "nvmeof0n1", "-e")
	fails(a, "--rrega 9", "resv-register", "nvmeof0n1", "-r", "9")
}
