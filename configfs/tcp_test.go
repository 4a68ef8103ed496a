package configfs

import (
	"strings"
	"testing"
)

// TestTCPPort: a tcp port reads from HCL with its defaults (family from
// the address, service 4420), survives nvmetcli JSON (addr_trtype tcp)
// and HCL again.
func TestTCPPort(t *testing.T) {
	src := `port "t0" {
  transport        = "tcp"
  address          = "2001:db8::7"
  tos              = 32
  inline_data_size = 16384
  connect_timeout  = 5
  max_pending      = 64
}
subsystem "nqn.2026-12.io.nvmeof:tcp" {
  ports          = ["t0"]
  allow_any_host = true
  namespace "1" {
    backend = "null"
    size    = "1MiB"
  }
}
`
	tree, err := ParseHCL([]byte(src), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, tr *Tree) {
		t.Helper()
		p := tr.Port("t0")
		if p == nil {
			t.Fatalf("%s: no port t0", what)
		}
		if p.Trtype != TransportTCP || p.Traddr != "2001:db8::7" || p.Adrfam != AdrfamIPv6 || p.Trsvcid != DefaultTrsvcid ||
			p.TOS != 32 || p.InlineDataSize != 16384 {
			t.Errorf("%s: port %+v", what, *p)
		}
	}
	check("HCL", tree)
	js, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"trtype": "tcp"`) {
		t.Errorf("nvmetcli JSON without trtype tcp:\n%s", js)
	}
	back, err := ParseNvmetcliJSON(js, "t.json")
	if err != nil {
		t.Fatal(err)
	}
	check("nvmetcli JSON", back)
	again, err := ParseHCL(back.HCL(), "again.hcl")
	if err != nil {
		t.Fatalf("%v\n%s", err, back.HCL())
	}
	check("HCL again", again)
}
