package configfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadFileRelativePaths: relative backend paths resolve against the
// directory of the configuration file, not the working directory (HCL and
// nvmetcli JSON); absolute ones and /dev/ nodes stay.
func TestLoadFileRelativePaths(t *testing.T) {
	dir := t.TempDir()
	cfgDir := filepath.Join(dir, "etc")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	hcl := `subsystem "nqn.2026-11.io.nvmeof:a" {
  allow_any_host = true
  namespace "1" {
    path = "disk.img"
    size = "1MiB"
  }
  namespace "2" {
    path = "../data/disk2.img"
    size = "1MiB"
  }
  namespace "3" {
    path = "/var/disk3.img"
    size = "1MiB"
  }
}
`
	json := `{"subsystems": [{"nqn": "nqn.2026-11.io.nvmeof:a", "attr": {"allow_any_host": "1"},
  "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "disk.img"}, "nvmeof": {"size": 1048576}}]}]}`
	if err := os.WriteFile(filepath.Join(cfgDir, "n.hcl"), []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "n.json"), []byte(json), 0o600); err != nil {
		t.Fatal(err)
	}
	// Load through a relative name from another working directory.
	t.Chdir(dir)
	tests := []struct {
		file string
		want map[uint32]string
	}{
		{"etc/n.hcl", map[uint32]string{
			1: filepath.Join(cfgDir, "disk.img"),
			2: filepath.Join(dir, "data", "disk2.img"),
			3: "/var/disk3.img",
		}},
		{"etc/n.json", map[uint32]string{1: filepath.Join(cfgDir, "disk.img")}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			tree, err := LoadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			s := tree.Subsystem("nqn.2026-11.io.nvmeof:a")
			if len(s.Namespaces) != len(tt.want) {
				t.Fatalf("%d namespaces, want %d", len(s.Namespaces), len(tt.want))
			}
			for _, ns := range s.Namespaces {
				if ns.DevicePath != tt.want[ns.NSID] {
					t.Errorf("namespace %d: path %q, want %q", ns.NSID, ns.DevicePath, tt.want[ns.NSID])
				}
			}
		})
	}
	// ParseHCL has no file to resolve against: paths stay as written.
	tree, err := ParseHCL([]byte(hcl), "(embedded)")
	if err != nil {
		t.Fatal(err)
	}
	if got := tree.Subsystems[0].Namespaces[0].DevicePath; got != "disk.img" {
		t.Errorf("ParseHCL: path %q, want disk.img", got)
	}
}

// TestPlacedErrors: a program's errors about a namespace or a port carry
// the position of the attribute (HCL) or the file name (JSON), and unwrap
// to the cause.
func TestPlacedErrors(t *testing.T) {
	hcl := `port "p" {
  transport = "rdma"
  address   = "127.0.0.1"
  service   = 4420
}

subsystem "nqn.2026-11.io.nvmeof:a" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    path = "/nonexistent/disk.img"
    size = "1MiB"
  }
  namespace "2" {
    backend = "memory"
    size    = "1MiB"
  }
}
`
	tree, err := ParseHCL([]byte(hcl), "n.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := tree.Subsystems[0]
	cause := fs.ErrNotExist
	tests := []struct {
		err  *Error
		want string
	}{
		{tree.NamespaceError(s.NQN, s.Namespaces[0], "device_path", cause),
			"n.hcl:11:12: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/1: path: file does not exist"},
		{tree.NamespaceError(s.NQN, s.Namespaces[1], "size", cause),
			"n.hcl:16:15: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/2: size: file does not exist"},
		// Not written: the block's label.
		{tree.NamespaceError(s.NQN, s.Namespaces[1], "device_path", cause),
			"n.hcl:14:13: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/2: path: file does not exist"},
		{tree.PortError(tree.Ports[0], "addr_traddr", cause),
			"n.hcl:3:15: ports/p: address: file does not exist"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
		if !errors.Is(tt.err, cause) {
			t.Errorf("%v does not unwrap to %v", tt.err, cause)
		}
	}

	// nvmetcli JSON: the line of the value, else of the object.
	json := `{"ports": [{"portid": 3, "addr": {"trtype": "rdma", "traddr": "127.0.0.1", "trsvcid": "4420"},
    "subsystems": ["nqn.2026-11.io.nvmeof:a"]}],
  "subsystems": [{"nqn": "nqn.2026-11.io.nvmeof:a", "attr": {"allow_any_host": "1"},
  "namespaces": [{"nsid": 1, "enable": 1,
      "device": {"path": "/x.img"}, "nvmeof": {"size": 1048576}}]}]}`
	jt, err := ParseNvmetcliJSON([]byte(json), "c.json")
	if err != nil {
		t.Fatal(err)
	}
	jns := jt.Subsystems[0].Namespaces[0]
	for _, tt := range []struct {
		err  *Error
		want string
	}{
		{jt.NamespaceError("nqn.2026-11.io.nvmeof:a", jns, "device_path", cause),
			"c.json:5:26: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/1: device_path: file does not exist"},
		{jt.NamespaceError("nqn.2026-11.io.nvmeof:a", jns, "size", cause),
			"c.json:5:56: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/1: size: file does not exist"},
		{jt.NamespaceError("nqn.2026-11.io.nvmeof:a", jns, "block_size", cause),
			"c.json:4:18: subsystems/nqn.2026-11.io.nvmeof:a/namespaces/1: block_size: file does not exist"},
		{jt.PortError(jt.Ports[0], "addr_traddr", cause),
			"c.json:1:63: ports/3: addr_traddr: file does not exist"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("JSON: got  %s\nwant %s", got, tt.want)
		}
		if !errors.Is(tt.err, cause) {
			t.Errorf("%v does not unwrap to %v", tt.err, cause)
		}
	}
	// Validation errors of JSON trees keep their form: file and path.
	_, err = ParseNvmetcliJSON([]byte(strings.Replace(json, `"trsvcid": "4420"`, `"trsvcid": "x"`, 1)), "c.json")
	if err == nil || !strings.HasPrefix(err.Error(), "c.json: ports/3: ") {
		t.Errorf("validation error %v", err)
	}
}

// FuzzJSONOffsets: the JSON position walker never panics, and on JSON it
// walks every offset is inside the data at the start of a value.
func FuzzJSONOffsets(f *testing.F) {
	f.Add([]byte(`{"ports": [{"portid": 1, "addr": {"traddr": "127.0.0.1"}}]}`))
	f.Add([]byte(`[1, [2, {"a": null}], "x"]`))
	f.Add([]byte(`{"a":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		offs, ok := jsonOffsets(data)
		if !ok {
			return
		}
		for path, off := range offs {
			if off < 0 || off >= int64(len(data)) || bytes.IndexByte([]byte(" \t\r\n:,"), data[off]) >= 0 {
				t.Fatalf("%q: offset %d of %q", data, off, path)
			}
		}
	})
}
