package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
)

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConfigSaveByDaemon: nvmetctl config save FILE has the daemon write
// FILE (config.save with a path, made absolute here), so the daemon's
// count of unsaved changes is reset and the next reload does not warn of
// changes that were saved (before, nvmetctl wrote the file itself); what
// the daemon refuses to replace (a FIFO) is refused with its message.
func TestConfigSaveByDaemon(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	sock, svc, tree := serveWith(t, dir, control.Options{Logger: log})
	t.Chdir(dir)
	nvmetctl := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		status := run(append([]string{"nvmetctl", "--socket", sock}, args...), &stdout, &stderr)
		return status, stdout.String(), stderr.String()
	}
	if status, _, errs := nvmetctl("ns", "add", nqn, "--backend", "memory", "--size", "1MiB"); status != 0 {
		t.Fatalf("ns add: %d %s", status, errs)
	}
	saved := filepath.Join(dir, "saved.hcl")
	if status, out, errs := nvmetctl("config", "save", "saved.hcl"); status != 0 || !strings.Contains(out, "configuration saved to "+saved) {
		t.Fatalf("config save: %d %q %q", status, out, errs)
	}
	back, err := configfs.LoadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Subsystems) != 1 || len(back.Subsystems[0].Namespaces) != 2 {
		t.Errorf("saved configuration lacks the namespace added:\n%s", back.HCL())
	}
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "not saved since") {
		t.Errorf("the reload after nvmetctl config save warns of unsaved changes:\n%s", logs.String())
	}

	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if status, _, errs := nvmetctl("config", "save", fifo); status != 1 || !strings.Contains(errs, "not a regular file") {
		t.Errorf("config save onto a FIFO: status %d, stderr %q", status, errs)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode().Type() != os.ModeNamedPipe {
		t.Errorf("the FIFO after config save: %v %v", err, st.Mode())
	}
}

// TestConfigSaveFormat: config save takes the format from FILE's
// extension (a .json file got HCL, which nvmetd then refused to load), and
// refuses a --format the extension contradicts; every file written loads.
func TestConfigSaveFormat(t *testing.T) {
	dir := t.TempDir()
	sock := serve(t, dir)
	for _, tt := range []struct {
		args     []string // after "config save"
		status   int
		wantJSON bool   // the file (or stdout) holds nvmetcli JSON
		wantErr  string // in stderr
	}{
		{args: []string{"a.json"}, wantJSON: true},
		{args: []string{"b.hcl"}},
		{args: []string{"c.conf"}},
		{args: []string{"-f", "json", "d.json"}, wantJSON: true},
		{args: []string{"--format", "json", "e.conf"}, wantJSON: true},
		{args: []string{"-f", "hcl", "f.hcl"}},
		{args: []string{"-f", "hcl", "g.json"}, status: 2, wantErr: "--format hcl: " + filepath.Join(dir, "g.json") + " is read as json"},
		{args: []string{"-f", "json", "h.hcl"}, status: 2, wantErr: "give a FILE ending in .json"},
		{args: []string{"-f", "yaml", "i.json"}, status: 2, wantErr: `--format "yaml": want hcl or json`},
		{args: []string{"-f", "json"}, wantJSON: true},
		{args: nil},
	} {
		var stdout, stderr bytes.Buffer
		args := tt.args
		if len(args) > 0 && !strings.HasPrefix(args[len(args)-1], "-") && strings.Contains(args[len(args)-1], ".") {
			args = append(append([]string(nil), args[:len(args)-1]...), filepath.Join(dir, args[len(args)-1]))
		}
		status := run(append([]string{"nvmetctl", "--socket", sock, "config", "save"}, args...), &stdout, &stderr)
		if status != tt.status || !strings.Contains(stderr.String(), tt.wantErr) {
			t.Errorf("config save %v: status %d (want %d), stderr %q (want %q)", tt.args, status, tt.status, stderr.String(), tt.wantErr)
			continue
		}
		if status != 0 {
			if _, err := os.Stat(args[len(args)-1]); !os.IsNotExist(err) {
				t.Errorf("config save %v refused, but the file exists: %v", tt.args, err)
			}
			continue
		}
		text := stdout.String()
		if len(args) > 0 && strings.Contains(args[len(args)-1], string(filepath.Separator)) {
			file := args[len(args)-1]
			b, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("config save %v: %v", tt.args, err)
				continue
			}
			text = string(b)
			// A file whose extension names its format must load (e.conf holds
			// JSON by --format, and nvmetd reads it as HCL: the user asked).
			if _, err := configfs.LoadFile(file); err != nil && strings.HasSuffix(file, ".json") == tt.wantJSON {
				t.Errorf("config save %v: nvmetd cannot load the file: %v", tt.args, err)
			}
		}
		if isJSON := strings.HasPrefix(strings.TrimSpace(text), "{"); isJSON != tt.wantJSON {
			t.Errorf("config save %v: JSON %v, want %v:\n%s", tt.args, isJSON, tt.wantJSON, text)
		}
	}
}
