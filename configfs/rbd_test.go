package configfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRBDNamespace loads an rbd namespace from HCL, saves it as HCL and as
// nvmetcli JSON (our "nvmeof" extension object: nvmetcli has no RBD
// backend) and loads both back unchanged; relative ceph_conf and keyring
// paths resolve against the file's directory like device paths.
func TestRBDNamespace(t *testing.T) {
	src := lines(
		`subsystem "`+nqnA+`" {`,
		`  allow_any_host = true`,
		`  namespace "1" {`,
		`    backend = "rbd"`,
		`    pool = "rbd"`,
		`    image = "img1"`,
		`    ceph_conf = "ceph.conf"`,
		`    client_id = "nvmeof"`,
		`    keyring = "/etc/ceph/ceph.client.nvmeof.keyring"`,
		`  }`,
		`}`,
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "t.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ns := tree.Subsystem(nqnA).Namespace(1)
	want := Namespace{Pool: "rbd", Image: "img1", CephConf: filepath.Join(dir, "ceph.conf"), ClientID: "nvmeof",
		Keyring: "/etc/ceph/ceph.client.nvmeof.keyring"}
	if ns.Backend != BackendRBD || ns.Pool != want.Pool || ns.Image != want.Image || ns.CephConf != want.CephConf ||
		ns.ClientID != want.ClientID || ns.Keyring != want.Keyring {
		t.Fatalf("namespace %+v", ns)
	}
	for _, tc := range []struct {
		name string
		save func() ([]byte, error)
		load func([]byte) (*Tree, error)
	}{
		{"hcl", func() ([]byte, error) { return tree.HCL(), nil }, func(b []byte) (*Tree, error) { return ParseHCL(b, "saved.hcl") }},
		{"json", tree.NvmetcliJSON, func(b []byte) (*Tree, error) { return ParseNvmetcliJSON(b, "saved.json") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.save()
			if err != nil {
				t.Fatal(err)
			}
			again, err := tc.load(b)
			if err != nil {
				t.Fatalf("saved config does not load: %v\n%s", err, b)
			}
			if c := Diff(tree, again); !c.Empty() {
				t.Errorf("round trip changed the tree: %+v\n%s", c, b)
			}
		})
	}
	// A changed image is a changed namespace (reload reopens it).
	changed := tree.Clone()
	changed.Subsystem(nqnA).Namespace(1).Image = "img2"
	if c := Diff(tree, changed); len(c.Subsystems) != 1 || len(c.Subsystems[0].NamespacesChanged) != 1 {
		t.Errorf("diff after an image change: %+v", c)
	}
}

// TestRBDNvmetcliJSONErrors: the nvmetcli import checks rbd namespaces as
// the HCL does, and an unknown backend stays an error.
func TestRBDNvmetcliJSONErrors(t *testing.T) {
	doc := func(nvmeof string) string {
		return `{"hosts": [], "ports": [], "subsystems": [{"allowed_hosts": [], "attr": {"allow_any_host": "1"},
  "namespaces": [{"device": {"path": ""}, "enable": 1, "nsid": 1, "nvmeof": ` + nvmeof + `}], "nqn": "` + nqnA + `"}]}`
	}
	tests := []struct {
		name, nvmeof, want string
	}{
		{"no pool", `{"backend": "rbd", "image": "i"}`, "pool: a pool is required for backend rbd"},
		{"no image", `{"backend": "rbd", "pool": "rbd"}`, "image: an image is required for backend rbd"},
		{"unknown backend", `{"backend": "sheepdog"}`, `unknown backend "sheepdog"`},
		{"pool on file", `{"backend": "memory", "size": 4096, "pool": "rbd"}`, "only backend rbd takes pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNvmetcliJSON([]byte(doc(tt.nvmeof)), "t.json")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := ParseNvmetcliJSON([]byte(doc(`{"backend": "rbd", "pool": "rbd", "image": "i"}`)), "t.json"); err != nil {
		t.Errorf("valid rbd namespace: %v", err)
	}
}
