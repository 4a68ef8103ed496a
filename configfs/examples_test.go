package configfs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// commentKeyRE finds the attribute names a comment line of an example
// starts with: "# name: ...", "# name (configfs_name): ...", "# a, b (...)"
// and commented-out settings "#   name = value".
var commentKeyRE = regexp.MustCompile(`^\s*#\s*([a-z][a-z0-9_]*(?:,\s*[a-z][a-z0-9_]*)*)\s*[:(=]`)

// TestExampleComments: the examples load, and every attribute their
// comments name is one the loader takes (the full example used to explain
// "enable" and "device_uuid", which the parser rejects); the names in
// parentheses are configfs's and are not checked here.
func TestExampleComments(t *testing.T) {
	known := map[string]bool{"port": true, "subsystem": true, "namespace": true, "host": true, "ana_group": true, "congestion": true}
	for _, m := range []map[string]string{treeHCLNames, portHCLNames, anaGroupHCLNames, subsysHCLNames, nsHCLNames, hostHCLNames, congestionHCLNames} {
		for _, n := range m {
			known[n] = true
		}
	}
	files, err := filepath.Glob("../examples/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := LoadFile(f); err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			named := 0
			for i, line := range strings.Split(string(src), "\n") {
				m := commentKeyRE.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				for _, name := range strings.Split(m[1], ",") {
					name = strings.TrimSpace(name)
					named++
					if !known[name] {
						t.Errorf("%s:%d: the comment names %q, which is not an attribute: %s", f, i+1, name, line)
					}
				}
			}
			if named == 0 {
				t.Errorf("%s: no attribute is explained", f)
			}
		})
	}
}

// TestExampleCommentRE: the pattern finds the names it should, so that
// TestExampleComments can fail.
func TestExampleCommentRE(t *testing.T) {
	for line, want := range map[string]string{
		"  # enable: expose the namespace":        "enable",
		"# uuid, nguid, eui64 (device_uuid, ...)": "uuid, nguid, eui64",
		"#   dhchap_key           = \"DHHC-1\"":   "dhchap_key",
		"  # device = \"mlx5_0\"":                 "device",
		"# A port: an address":                    "",
		"#   sudo modprobe null_blk nr_devices=1": "",
		"# Default: none.":                        "",
	} {
		got := ""
		if m := commentKeyRE.FindStringSubmatch(line); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
}
