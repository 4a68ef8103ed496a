package control

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestEveryMethodRefusesUnknownParams: every method but rpc.methods
// decodes its params strictly (a typo must not be ignored), and none
// panics on params of the wrong types.
func TestEveryMethodRefusesUnknownParams(t *testing.T) {
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	defer srv.Close()
	svc := New(srv, Options{})
	tree, err := configfs.ParseHCL([]byte(baseConfig), "u.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	for _, name := range Methods() {
		if name == "rpc.methods" {
			continue
		}
		for _, params := range []string{
			`{"no_such_member":1}`,
			`{"nqn":7,"id":[],"nsid":"x","cntlid":-1,"size":{},"format":false}`,
		} {
			_, rerr := svc.call(name, json.RawMessage(params))
			if rerr == nil || rerr.Code != CodeInvalidParams || !strings.HasPrefix(rerr.Message, "invalid params: ") {
				t.Errorf("%s %s: error %+v, want code %d", name, params, rerr, CodeInvalidParams)
			}
		}
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if svc.unsaved != 0 {
		t.Errorf("refused params counted %d unsaved changes", svc.unsaved)
	}
}

// TestRescanIsNoChange: ns.resize without a size reads a file namespace's
// size again; the configuration does not change, so no unsaved change is
// counted (before, it was applied as a change, and the next reload warned
// of a change lost). Its refusals are those of a resize.
func TestRescanIsNoChange(t *testing.T) {
	img := filepath.Join(t.TempDir(), "r.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 1<<20); err != nil {
		t.Fatal(err)
	}
	config := baseConfig + `
subsystem "` + nqnB + `" {
  ports          = ["lp"]
  allow_any_host = true
  namespace "1" {
    backend = "file"
    path    = "` + img + `"
  }
}
`
	e := start(t, config)
	if err := os.Truncate(img, 2<<20); err != nil {
		t.Fatal(err)
	}
	var ns Namespace
	e.call(t, "ns.resize", m{"nqn": nqnB, "nsid": 1}, &ns)
	if ns.NSID != 1 || ns.Size == nil || *ns.Size != 0 { // the configured size: none
		t.Errorf("after the rescan: %+v", ns)
	}
	e.svc.mu.Lock()
	unsaved := e.svc.unsaved
	e.svc.mu.Unlock()
	if unsaved != 0 {
		t.Errorf("a rescan counted %d unsaved changes", unsaved)
	}
	e.fails(t, "ns.resize", m{"nqn": nqnA, "nsid": 1}, CodeInvalidParams, "size is required")
	e.fails(t, "ns.resize", m{"nqn": nqnB, "nsid": 9}, CodeNotFound, "no namespace 9")
	e.fails(t, "ns.resize", m{"nqn": "nqn.2026-11.io.nvmeof:none", "nsid": 1}, CodeNotFound, "does not exist")
}

// TestChangesBeforeFirstApply: nvmetd listens before it applies its
// configuration; a change in between would be applied to an empty tree and
// then replaced, and config.save to a file would write an empty
// configuration. Both are refused until the first Apply.
func TestChangesBeforeFirstApply(t *testing.T) {
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	defer srv.Close()
	svc := New(srv, Options{})
	path := filepath.Join(t.TempDir(), "saved.hcl")
	for _, tc := range []struct{ method, params string }{
		{"host.add", `{"nqn":"` + hostA + `"}`},
		{"config.save", `{"path":"` + path + `"}`},
		{"ns.resize", `{"nqn":"` + nqnA + `","nsid":1}`},
	} {
		_, rerr := svc.call(tc.method, json.RawMessage(tc.params))
		if rerr == nil || rerr.Code != CodeNotApplied || !strings.Contains(rerr.Message, "not applied its configuration yet") {
			t.Errorf("%s before the first Apply: %+v, want code %d", tc.method, rerr, CodeNotApplied)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("config.save wrote a file before the first Apply")
	}
	if _, rerr := svc.call("config.save", nil); rerr != nil {
		t.Errorf("config.save without a path before the first Apply: %v", rerr)
	}
	tree, err := configfs.ParseHCL([]byte(baseConfig), "f.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if _, rerr := svc.call("host.add", json.RawMessage(`{"nqn":"`+hostA+`"}`)); rerr != nil {
		t.Errorf("host.add after the first Apply: %v", rerr)
	}
}
