package server

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
)

// takeUDP4791 binds the RoCEv2 UDP port on addr, as another soft RoCE
// device (another nvmetd) would, until the test ends.
func takeUDP4791(t *testing.T, addr string) {
	t.Helper()
	c, err := net.ListenPacket("udp", net.JoinHostPort(addr, "4791"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
}

// reloadConfig is config(ns1) plus port p2 (extra attributes p2) exporting
// the subsystem, and namespaces.
func reloadConfig(t *testing.T, p2, namespaces string) *configfs.Tree {
	t.Helper()
	src := `
port "p1" {
  transport = "loop"
  service   = 4420
}
port "p2" {
` + p2 + `
}
subsystem "` + nqn + `" {
  ports          = ["p1", "p2"]
  allow_any_host = true
  ` + ns1 + `
` + namespaces + `
}
`
	tree, err := configfs.ParseHCL([]byte(src), "reload.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// TestApplyAllOrNothing: a reload that cannot apply in full (a backend
// that does not open, an RDMA port whose address is taken) changes nothing:
// the new namespace and port stay out, the running ones serve on, and the
// error says FILE:LINE. Before, it was half applied.
func TestApplyAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	takeUDP4791(t, "127.78.9.1")
	var logs syncBuffer
	s := New(Options{LoopNetwork: loop.NewNetwork(), Logger: testLog(&logs)})
	defer s.Close()
	if err := s.Apply(config(t, ns1)); err != nil {
		t.Fatal(err)
	}
	missing := `namespace "3" {
    path = "` + filepath.Join(dir, "no", "disk.img") + `"
    size = "1MiB"
  }
  namespace "4" {
    path = "/dev/null/no/disk.img"
    backend = "file"
    size = "1MiB"
  }`
	tests := []struct {
		name  string
		tree  *configfs.Tree
		want  []string
		cause error
	}{
		{"backend does not open", reloadConfig(t, `  transport = "loop"
  service   = 4421`, ns2+"\n"+missing),
			[]string{`reload.hcl:27:12: subsystems/` + nqn + `/namespaces/4: path: bdev: file`}, syscall.ENOTDIR},
		{"port address taken", reloadConfig(t, `  address  = "127.78.9.1"
  provider = "soft"`, ns2),
			[]string{`reload.hcl:7:14: ports/p2: address: `, "address already in use"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Apply(tt.tree)
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("error %v is not %v", err, tt.cause)
			}
			if _, ok := s.Target.Port(2); ok {
				t.Error("port p2 was added")
			}
			if _, ok := s.Target.Port(1); !ok {
				t.Error("port p1 is gone")
			}
			if n := s.deviceCount(); n != 0 {
				t.Errorf("%d RDMA devices left open", n)
			}
			// Namespace 2 was not added: adding it by hand works.
			if err := s.Target.RemoveNamespace(nqn, 2); err == nil {
				t.Error("namespace 2 was added")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("refused reload created files: %v", err)
	}
	// The same reload without the failures applies.
	if err := s.Apply(reloadConfig(t, `  transport = "loop"
  service   = 4421`, ns2)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Target.Port(2); !ok {
		t.Error("port p2 not added")
	}
}

// TestCheck: Check finds what Apply would refuse, without serving or
// creating anything: a missing directory, a directory or a character
// device as a file, a memory namespace larger than the machine, an RDMA
// address already taken, a loop port in a process without loop network.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	takeUDP4791(t, "127.78.9.2")
	src := `port "ok" {
  address = "127.78.9.3"
  provider = "soft"
}
port "taken" {
  address  = "127.78.9.2"
  provider = "soft"
}
port "loop" {
  transport = "loop"
}
subsystem "` + nqn + `" {
  ports          = ["ok", "taken", "loop"]
  allow_any_host = true
  namespace "1" {
    path = "` + filepath.Join(dir, "no", "disk.img") + `"
    size = "1MiB"
  }
  namespace "6" {
    path = "/dev/null/no/disk.img"
    backend = "file"
    size = "1MiB"
  }
  namespace "2" {
    path = "` + dir + `"
  }
  namespace "3" {
    path    = "/dev/zero"
    backend = "file"
  }
  namespace "4" {
    backend = "memory"
    size    = "1000000TiB"
  }
  namespace "5" {
    path = "` + filepath.Join(dir, "new.img") + `"
    size = "1MiB"
  }
}
`
	tree, err := configfs.ParseHCL([]byte(src), "check.hcl")
	if err != nil {
		t.Fatal(err)
	}
	err = Check(tree, Options{})
	if err == nil {
		t.Fatal("Check passed")
	}
	for _, w := range []string{
		"check.hcl:6:14: ports/taken: address: ",
		"check.hcl:9:6: ports/loop: address: loop transport not available",
		"check.hcl:20:12: subsystems/" + nqn + "/namespaces/6: path: bdev: file: stat /dev/null/no/disk.img: not a directory",
		"check.hcl:25:12: subsystems/" + nqn + "/namespaces/2: path: bdev: file \"" + dir + "\" is a directory",
		"check.hcl:28:15: subsystems/" + nqn + "/namespaces/3: path: bdev: file \"/dev/zero\" is not a regular file",
		"check.hcl:33:15: subsystems/" + nqn + "/namespaces/4: size: bdev: memory: size",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Check error lacks %q:\n%v", w, err)
		}
	}
	// Namespace 1's missing directory would be created at the start
	// (its nearest existing parent is writable), so it passes.
	for _, bad := range []string{"ports/ok", "namespaces/1", "namespaces/5"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("Check refused %s:\n%v", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check created a backend file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "no")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Check created a backend directory: %v", err)
	}
}

func testLog(w *syncBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Info})
}
