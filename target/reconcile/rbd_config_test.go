//go:build !rbd

package reconcile

import (
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
)

// TestRBDWithoutTag: a binary built without the rbd tag refuses an rbd
// namespace at the backend attribute's FILE:LINE:COL, both in the check
// (nvmetd --check) and when applying.
func TestRBDWithoutTag(t *testing.T) {
	src := `subsystem "nqn.2026-11.io.nvmeof:rbd" {
  allow_any_host = true
  namespace "1" {
    backend = "rbd"
    pool    = "rbd"
    image   = "img1"
  }
}
`
	tree, err := configfs.ParseHCL([]byte(src), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	const want = "t.hcl:4:15: subsystems/nqn.2026-11.io.nvmeof:rbd/namespaces/1: backend: this nvmetd was built without RBD support: build with -tags rbd"
	if err := CheckBackends(tree); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckBackends: %v\nwant %s", err, want)
	}
	if _, err := newFixture(t).rc.Apply(tree); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Apply: %v\nwant %s", err, want)
	}
}
