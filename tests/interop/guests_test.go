package interop

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/tests/interop/kpeer"
)

// Our binaries inside kernel-peer guests (issue 10): the guests run Debian
// bookworm with rdma-core's runtime libraries, so binaries built here with
// cgo and the ibverbs build tag run there on the guest's rxe0 (a real
// uverbs device). guestShare lays out a run's share directory (mounted at
// /share in the guests):
//
//	bin/       binaries built for the guests (guest path /share/bin/NAME)
//	interop/   tests/interop/guest and tests/interop/host (the guest
//	           scripts source interop/guest/lib.sh; host/nvmetd-restart.sh
//	           supervises nvmetd inside a guest as well)
//	cfg/       configuration files written by the test

// guestShare is a share directory being prepared for a session.
type guestShare struct {
	Dir string
}

// Guest paths of the share's parts.
const (
	guestBin = "/share/bin"
	guestCfg = "/share/cfg"
)

// newGuestShare creates a share directory with our scripts in interop/.
// With NVMEOF_INTEROP_KEEP=DIR it is DIR/<test>/share and outlives the
// test.
func newGuestShare(t *testing.T) *guestShare {
	t.Helper()
	dir := t.TempDir()
	if k := os.Getenv("NVMEOF_INTEROP_KEEP"); k != "" {
		dir = filepath.Join(k, strings.ReplaceAll(t.Name(), "/", "-"), "share")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	s := &guestShare{Dir: dir}
	for _, d := range []string{"bin", "cfg", "interop/guest", "interop/host"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"guest", "host"} {
		files, err := filepath.Glob(filepath.Join(moduleRoot(t), "tests", "interop", sub, "*.sh"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no scripts in tests/interop/%s: %v", sub, err)
		}
		for _, f := range files {
			if err := copyFile(f, filepath.Join(dir, "interop", sub, filepath.Base(f))); err != nil {
				t.Fatal(err)
			}
		}
	}
	return s
}

// writeConfig writes a configuration file into cfg/ and returns its guest
// path.
func (s *guestShare) writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir, "cfg", name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return guestCfg + "/" + name
}

// addVerbsBinary builds pkg (e.g. "./cmd/nvmetd") with cgo and the ibverbs
// build tag into bin/NAME and returns its guest path. The binary must link
// libibverbs and librdmacm dynamically: one that does not was built from
// the provider's stub (or without cgo), which would only fail later in
// the guest with a less clear message.
func (s *guestShare) addVerbsBinary(t *testing.T, pkg, name string) string {
	t.Helper()
	out := filepath.Join(s.Dir, "bin", name)
	buildTagged(t, pkg, out, true)
	needs, err := elfNeeded(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range []string{"libibverbs.so.1", "librdmacm.so.1"} {
		if !slices.Contains(needs, lib) {
			t.Fatalf("%s built with CGO_ENABLED=1 -tags ibverbs does not link %s (it needs %v): the ibverbs provider is not built into it", pkg, lib, needs)
		}
	}
	return guestBin + "/" + name
}

// addStaticBinary builds pkg as the default pure-Go static binary into
// bin/NAME and returns its guest path.
func (s *guestShare) addStaticBinary(t *testing.T, pkg, name string) string {
	t.Helper()
	buildTagged(t, pkg, filepath.Join(s.Dir, "bin", name), false)
	return guestBin + "/" + name
}

// buildTagged builds pkg into out: with verbs, CGO_ENABLED=1 and -tags
// ibverbs; otherwise CGO_ENABLED=0 (static). NVMEOF_INTEROP_SRC=DIR builds
// from another copy of the module (e.g. a `git archive` of a commit) while
// the tests and scripts come from this one.
func buildTagged(t *testing.T, pkg, out string, verbs bool) {
	t.Helper()
	args := []string{"build", "-o", out}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if verbs {
		args = append(args, "-tags", "ibverbs")
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = moduleRoot(t)
	if src := os.Getenv("NVMEOF_INTEROP_SRC"); src != "" {
		cmd.Dir = src
	}
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s %s: %v\n%s", strings.Join(args, " "), pkg, err, b)
	}
}

// elfNeeded returns the shared libraries an ELF binary needs (DT_NEEDED).
func elfNeeded(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return libs, nil
}

// guestScriptPath is the share path of one of our guest scripts, for
// kpeer.Run.Scripts (run.sh runs a script that is already in the share
// from there).
func (s *guestShare) script(name string) string {
	return filepath.Join(s.Dir, "interop", "guest", name)
}

// passLines returns the PASS:/FAIL:/INFO: lines of a log.
func passLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "PASS:") || strings.HasPrefix(l, "FAIL:") || strings.HasPrefix(l, "INFO:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// writeFile writes a small text file.
func writeFile(path, content string) error {
	return os.WriteFile(path, []byte(content), 0o644)
}

// standIn reports whether the harness runs with stand-ins for our
// ibverbs binaries (NVMEOF_INTEROP_STANDIN=1): the kernel's rping, and
// static builds on the soft provider (in a guest without rdma_rxe, which
// holds UDP 4791) for nvmetd, nvmeof and kpeer-host. It checks the
// scripts and their wiring without the ibverbs provider.
func standIn() bool { return os.Getenv("NVMEOF_INTEROP_STANDIN") == "1" }

// partLog returns the log of part i (from 1) of a guest/seq.sh session in
// guest g, and its exit status line.
func partLog(res *kpeer.Result, g string, i int, name string) (log, status string) {
	log = res.Log(fmt.Sprintf("%s/part-%d-%s", g, i, name) + ".log")
	all := res.Log(g + "/script.log")
	prefix := fmt.Sprintf("PART %d %s: ", i, name)
	for _, l := range strings.Split(all, "\n") {
		if strings.HasPrefix(l, prefix) {
			status = strings.TrimPrefix(l, prefix)
		}
	}
	return log, status
}

// lastResult returns the last "RESULT: ..." line of a log.
func lastResult(log string) string {
	res := ""
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "RESULT:") {
			res = strings.TrimSpace(l)
		}
	}
	return res
}
