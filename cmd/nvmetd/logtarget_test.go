package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/internal/cliutil"
	"github.com/nvmeof/nvmeof/internal/journal"
	"github.com/nvmeof/nvmeof/internal/journal/journaltest"
)

// onePortConfig is a one-port configuration on addr (a distinct loopback
// address per test).
func onePortConfig(t *testing.T, dir, addr string) string {
	t.Helper()
	cfg := filepath.Join(dir, "j.hcl")
	writeFile(t, cfg, `port "p" {
  address  = "`+addr+`"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:journal" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "null"
    size    = "1MiB"
  }
}
`)
	return cfg
}

// TestLogTargetJournal: with --log-target journal, and with auto when
// stderr is the journal stream $JOURNAL_STREAM names (as systemd starts a
// service), nvmetd's start-up entries reach the journal socket with their
// fields (identifier, priority, key/values, code location) and nothing is
// logged on stderr; with auto and a stderr that is not the journal
// stream, the lines go to stderr and nothing to the journal.
func TestLogTargetJournal(t *testing.T) {
	for i, tc := range []struct {
		name    string
		args    []string
		stream  bool // JOURNAL_STREAM names the child's stderr
		journal bool // entries expected in the journal
	}{
		{"journal", []string{"--log-target", "journal"}, false, true},
		{"auto under systemd", nil, true, true},
		{"auto elsewhere", []string{"--log-target", "auto"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j := journaltest.New(t)
			t.Setenv(journal.SocketEnv, j.Path)
			cfg := onePortConfig(t, dir, fmt.Sprintf("127.83.90.%d", i+1))
			stderr, err := os.Create(filepath.Join(dir, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			stream := "0:0"
			if tc.stream {
				var st syscall.Stat_t
				if err := syscall.Fstat(int(stderr.Fd()), &st); err != nil {
					t.Fatal(err)
				}
				stream = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := nvmetd(t, ctx, dir, append([]string{"--config", cfg}, tc.args...)...)
			cmd.Env = append(cmd.Env, journal.StreamEnv+"="+stream)
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					<-exited
				}
			}()
			if !tc.journal {
				// The line that says it serves, on stderr; then nothing in
				// the journal (the line comes after any entry would have).
				waitFileContains(t, stderr.Name(), "serving subsystem", exited)
				cmd.Process.Signal(syscall.SIGTERM)
				if err := <-exited; err != nil {
					t.Errorf("nvmetd: %v", err)
				}
				exited <- nil
				if e, ok := j.TryNext(); ok {
					t.Errorf("auto with a stderr that is not the journal stream sent %v", e)
				}
				return
			}
			e := j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool { return e.Get("MESSAGE") == "serving subsystem" })
			for k, want := range map[string]string{
				"SYSLOG_IDENTIFIER": "nvmetd",
				"PRIORITY":          "6",
				"NQN":               "nqn.2026-11.io.nvmeof:journal",
				"NAMESPACES":        "1",
				"PORT":              "p",
				"LOGGER":            "nvmetd",
			} {
				if got := e.Get(k); got != want {
					t.Errorf("%s = %q, want %q; entry %v", k, got, want, e)
				}
			}
			if !strings.HasPrefix(e.Get("CONNECT"), "nvme connect -t rdma -a 127.83.90.") || e.Get("CODE_FILE") == "" || e.Get("CODE_LINE") == "" {
				t.Errorf("entry %v: want CONNECT, CODE_FILE and CODE_LINE", e)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool {
				return e.Get("MESSAGE") == "shutting down" && e.Get("SIGNAL") == "terminated"
			})
			if err := <-exited; err != nil {
				t.Errorf("nvmetd: %v", err)
			}
			exited <- nil
			if b, _ := os.ReadFile(stderr.Name()); len(b) != 0 {
				t.Errorf("stderr with the journal target: %q", b)
			}
		})
	}
}

// TestLogTargetRefusals: an unknown target is a usage error; journal
// without a journal socket fails the start with the socket named.
func TestLogTargetRefusals(t *testing.T) {
	dir := t.TempDir()
	code, _, errs := runNvmetd(t, dir, "--log-target", "syslog")
	if code != cliutil.ExitUsage || !strings.Contains(errs, `--log-target "syslog": want stderr, journal or auto`) {
		t.Errorf("--log-target syslog: exit %d, %q", code, errs)
	}
	missing := filepath.Join(dir, "no-journal")
	t.Setenv(journal.SocketEnv, missing)
	cfg := onePortConfig(t, dir, "127.83.91.1")
	code, _, errs = runNvmetd(t, dir, "--config", cfg, "--log-target", "journal")
	if code != cliutil.ExitError || !strings.Contains(errs, "--log-target journal: journal socket "+missing) {
		t.Errorf("--log-target journal without journald: exit %d, %q", code, errs)
	}
}

// waitFileContains waits (at most 30 s, or until the process exits) for
// path to contain s.
func waitFileContains(t *testing.T, path, s string, exited chan error) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), s) {
			return
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("nvmetd exited (%v) before logging %q: %s", err, s, b)
		case <-deadline:
			t.Fatalf("no %q within 30 s: %s", s, b)
		case <-tick.C:
		}
	}
}
