package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
)

// TestReload: nvmetctl reload has this nvmetd load its file again and
// apply it (kill -HUP $(pidof nvmetd) signals every nvmetd), and answers
// with the outcome: reloaded (with the unsaved changes it replaced), the
// file's errors, or no file to reload.
func TestReload(t *testing.T) {
	const twoNS = `
port "lp" {
  transport = "loop"
}
subsystem "` + nqn + `" {
  ports          = ["lp"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
  namespace "2" {
    backend = "null"
    size    = "1MiB"
  }
}
`
	for _, tt := range []struct {
		name    string
		load    func() (*configfs.Tree, error) // nil: no configuration file
		change  bool                           // make an unsaved change first
		status  int
		out     string // in stdout (status 0) or stderr
		warn    string // in stderr (status 0)
		wantNSs int    // namespaces after (the running configuration has 1)
	}{
		{name: "reloaded", load: func() (*configfs.Tree, error) { return configfs.ParseHCL([]byte(twoNS), "t.hcl") },
			out: "configuration reloaded", wantNSs: 2},
		{name: "unsaved change replaced", load: func() (*configfs.Tree, error) { return configfs.ParseHCL([]byte(twoNS), "t.hcl") },
			change: true, out: "configuration reloaded", warn: "warning: 1 changes made through the control API and not saved were replaced", wantNSs: 2},
		{name: "file with errors", load: func() (*configfs.Tree, error) { return nil, errors.New("t.hcl:3:7: bad") },
			status: 1, out: "reload refused: the configuration has errors; the running one stays:\nt.hcl:3:7: bad", wantNSs: 1},
		{name: "embedded default", status: 1, out: "no configuration file to reload", wantNSs: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sock, _, _ := serveWith(t, t.TempDir(), control.Options{Load: tt.load})
			nvmetctl := func(args ...string) (int, string, string) {
				var stdout, stderr bytes.Buffer
				status := run(append([]string{"nvmetctl", "--socket", sock}, args...), &stdout, &stderr)
				return status, stdout.String(), stderr.String()
			}
			if tt.change {
				if status, _, errs := nvmetctl("ns", "add", nqn, "--backend", "memory", "--size", "1MiB", "--nsid", "7"); status != 0 {
					t.Fatalf("ns add: %d %s", status, errs)
				}
			}
			status, out, errs := nvmetctl("reload")
			got := out
			if tt.status != 0 {
				got = errs
			}
			if status != tt.status || !strings.Contains(got, tt.out) || !strings.Contains(errs, tt.warn) {
				t.Errorf("reload: status %d (want %d), stdout %q, stderr %q; want %q and %q", status, tt.status, out, errs, tt.out, tt.warn)
			}
			_, out, _ = nvmetctl("-o", "json", "ns", "list", nqn)
			if n := strings.Count(out, `"nsid"`); n != tt.wantNSs {
				t.Errorf("after reload: %d namespaces, want %d:\n%s", n, tt.wantNSs, out)
			}
		})
	}
}
