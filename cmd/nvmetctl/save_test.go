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
