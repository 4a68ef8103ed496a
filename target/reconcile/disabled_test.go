package reconcile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
)

// TestDisabledNamespaceOpensNothing: a namespace configured disabled does
// not open (or create) its backend, at start or in CheckBackends; enabling
// it opens the backend, and a backend that cannot open refuses that apply;
// disabling it again keeps the backend (memory data survives).
func TestDisabledNamespaceOpensNothing(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "state", "disk.img")
	conf := func(path string, enabled bool) *configfs.Tree {
		t.Helper()
		en := "false"
		if enabled {
			en = "true"
		}
		tree, err := configfs.ParseHCL([]byte(`subsystem "nqn.2026-11.io.nvmeof:dis" {
  allow_any_host = true
  namespace "1" {
    backend = "file"
    path    = "`+path+`"
    size    = "1MiB"
    enabled = `+en+`
  }
  namespace "2" {
    backend = "memory"
    size    = "1MiB"
  }
}
`), "dis.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return tree
	}
	const nqn = "nqn.2026-11.io.nvmeof:dis"
	rc := newFixture(t).rc

	bad := "/dev/null/no/disk.img" // cannot be made: /dev/null is no directory
	if err := CheckBackends(conf(bad, false)); err != nil {
		t.Errorf("CheckBackends of a disabled namespace: %v", err)
	}
	if _, err := rc.Apply(conf(bad, false)); err != nil {
		t.Fatalf("apply with a disabled namespace whose backend cannot open: %v", err)
	}
	if !rc.neverOpened(nqn, 1) || rc.neverOpened(nqn, 2) {
		t.Errorf("never opened: ns 1 %v, ns 2 %v", rc.neverOpened(nqn, 1), rc.neverOpened(nqn, 2))
	}

	// Enabling it opens the backend: refused while it cannot open.
	_, err := rc.Apply(conf(bad, true))
	var na *NotAppliedError
	if !errors.As(err, &na) || !strings.Contains(err.Error(), "dis.hcl:5:15: subsystems/"+nqn+"/namespaces/1: path: ") {
		t.Fatalf("enabling with a backend that cannot open: %v", err)
	}
	if !rc.neverOpened(nqn, 1) {
		t.Error("a refused apply replaced the namespace")
	}

	// A path that opens, still disabled: nothing is created.
	if _, err := rc.Apply(conf(img, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(img)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a disabled namespace created its backend's directory: %v", err)
	}
	// Enabled: opened (and created).
	if _, err := rc.Apply(conf(img, true)); err != nil {
		t.Fatal(err)
	}
	if rc.neverOpened(nqn, 1) {
		t.Error("enabled namespace still without its backend")
	}
	if st, err := os.Stat(img); err != nil || st.Size() != 1<<20 {
		t.Errorf("backend file: %v", err)
	}
	// Disabled again: the backend stays open, as before this change.
	if _, err := rc.Apply(conf(img, false)); err != nil {
		t.Fatal(err)
	}
	if rc.neverOpened(nqn, 1) {
		t.Error("disabling closed the backend")
	}
}
