package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionFlag(t *testing.T) {
	status, stdout, stderr := runNvmetd(t, t.TempDir(), "--version")
	if status != 0 || !strings.HasPrefix(stdout, "nvmetd version ") || strings.Count(stdout, "\n") != 1 || stderr != "" {
		t.Errorf("--version: status %d, stdout %q, stderr %q", status, stdout, stderr)
	}
}

// TestLogLevelFlag: unknown levels are usage errors with the level meant;
// "verbose" used to be taken and mean info. The configuration checked
// listens on an address of its own: the embedded default's 127.0.0.1:4791
// is taken while a ./nvmetd runs, as README's order has it.
func TestLogLevelFlag(t *testing.T) {
	dir := t.TempDir()
	cfg := onePortConfig(t, dir, "127.83.62.1")
	for _, tt := range []struct {
		level  string
		status int
		want   string
	}{
		{"verbose", 2, `--log-level "verbose": unknown level (want one of trace, debug, info, warn, error, off); did you mean debug?`},
		{"warning", 2, "did you mean warn?"},
		{"debgu", 2, "did you mean debug?"},
		{"loud", 2, "(want one of trace, debug, info, warn, error, off)\n"},
		{"TRACE", 0, ""},
		{"off", 0, ""},
	} {
		status, _, stderr := runNvmetd(t, dir, "--config", cfg, "--log-level", tt.level, "--check")
		if status != tt.status || !strings.Contains(stderr, tt.want) {
			t.Errorf("--log-level %s: status %d (want %d), stderr %q, want %q", tt.level, status, tt.status, stderr, tt.want)
		}
	}
}

// TestTraceLogsCommands: at trace, the target logs each command and its
// completion (and debug does not); each line carries qid once.
func TestTraceLogsCommands(t *testing.T) {
	for i, level := range []string{"debug", "trace"} {
		t.Run(level, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "t.hcl")
			writeFile(t, cfg, `port "p" {
  address  = "127.83.`+[]string{"60", "61"}[i]+`.1"
  provider = "soft"
}
subsystem "nqn.2026-11.io.nvmeof:trace" {
  ports          = ["p"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`)
			d := startDaemon(t, dir, "--config", cfg, "--log-level", level)
			d.waitFor("serving subsystem")
			smokeIO(t, cfg, 59+i) // host on 127.83.60.200 / 127.83.61.200
			if level == "trace" {
				l := d.waitFor("completion: ")
				d.waitFor("op=Write")
				if strings.Count(l, "qid=") != 1 {
					t.Errorf("qid repeated: %s", l)
				}
			}
			d.cmd.Process.Kill()
			for l := range d.lines {
				d.seen = append(d.seen, l)
			}
			all := strings.Join(d.seen, "\n")
			for _, l := range d.seen {
				for _, k := range []string{"qid", "cntlid", "port", "host", "subsys", "nsid"} {
					if strings.Count(l, " "+k+"=") > 1 {
						t.Errorf("key %s repeated: %s", k, l)
					}
				}
			}
			if level == "debug" && strings.Contains(all, "command: ") {
				t.Errorf("debug logs per-command lines:\n%s", all)
			}
		})
	}
}
