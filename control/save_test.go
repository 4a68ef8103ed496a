package control

import (
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSaveRefusesNonRegular: config.save with a path replaces only a
// regular file (or creates one): a FIFO, a directory, another socket and
// the control socket itself are refused and left as they were (before,
// the rename replaced them, and the control API was gone with its
// socket). A symlink to a regular file writes that file.
func TestSaveRefusesNonRegular(t *testing.T) {
	e := start(t, baseConfig)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		path string
		typ  fs.FileMode
	}{{fifo, fs.ModeNamedPipe}, {sub, fs.ModeDir}, {other, fs.ModeSocket}, {e.sock, fs.ModeSocket}} {
		e.fails(t, "config.save", m{"path": tc.path}, CodeRefused, "not a regular file")
		st, err := os.Lstat(tc.path)
		if err != nil || st.Mode().Type() != tc.typ {
			t.Errorf("%s after config.save: %v, type %v, want %v", tc.path, err, st.Mode().Type(), tc.typ)
		}
	}
	// The API still answers on its socket.
	var names []string
	if err := e.dial(t).Call("rpc.methods", nil, &names); err != nil {
		t.Fatalf("control API after config.save onto its socket: %v", err)
	}

	// A new file, a regular file and a symlink to one are written.
	plain := filepath.Join(dir, "plain.hcl")
	if err := os.WriteFile(plain, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.hcl")
	target := filepath.Join(sub, "target.hcl")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "new.hcl"), plain, link} {
		var res SaveResult
		e.call(t, "config.save", m{"path": p}, &res)
		data, err := os.ReadFile(p)
		if err != nil || string(data) != res.Config {
			t.Errorf("%s: %v; holds the configuration: %t", p, err, string(data) == res.Config)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 || !st.Mode().IsRegular() {
			t.Errorf("%s: %v, mode %v", p, err, st.Mode())
		}
	}
	if st, err := os.Lstat(link); err != nil || st.Mode().Type() != fs.ModeSymlink {
		t.Errorf("the symlink was replaced: %v %v", err, st.Mode())
	}
	// No temporary file is left behind.
	for _, d := range []string{dir, sub} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range ents {
			if strings.Contains(en.Name(), ".tmp") {
				t.Errorf("temporary file left: %s", filepath.Join(d, en.Name()))
			}
		}
	}
}

// TestAddRacingDel: an ns.add answers with the namespace it applied even
// when an ns.del of that namespace runs right after it (before, the
// answer was read from the running configuration once the lock was
// released, and said "gone" for an add that was applied).
func TestAddRacingDel(t *testing.T) {
	e := start(t, baseConfig)
	var once atomic.Bool
	var delErr *Error
	e.svc.testHookChanged = func() {
		if once.CompareAndSwap(false, true) { // the del's own hook does nothing
			_, delErr = e.svc.call("ns.del", json.RawMessage(`{"nqn":"`+nqnA+`","nsid":2}`))
		}
	}
	var ns Namespace
	e.call(t, "ns.add", m{"nqn": nqnA, "nsid": 2, "backend": "memory", "size": "1MiB"}, &ns)
	if delErr != nil {
		t.Fatalf("ns.del after the add: %v", delErr)
	}
	if ns.NSID != 2 || ns.Backend == nil || *ns.Backend != "memory" {
		t.Errorf("ns.add answered %+v, want namespace 2", ns)
	}
}

// TestWriteAtomicSyncsDir: the rename is made durable by syncing the
// directory it happened in (the symlink's target's, for a symlink), after
// the rename.
func TestWriteAtomicSyncsDir(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, "t.hcl")
	link := filepath.Join(dir, "l.hcl")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(other)
	if err != nil {
		t.Fatal(err)
	}
	saved := syncDir
	defer func() { syncDir = saved }()
	var synced []string
	syncDir = func(d string) error {
		if data, err := os.ReadFile(target); err != nil || string(data) != "x" {
			t.Errorf("directory synced before the rename: %q %v", data, err)
		}
		synced = append(synced, d)
		return saved(d)
	}
	if err := writeAtomic(link, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || synced[0] != real {
		t.Errorf("synced %q, want [%s]", synced, real)
	}
}
