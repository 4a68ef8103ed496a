package hostcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/internal/journal"
	"github.com/nvmeof/nvmeof/internal/journal/journaltest"
)

// TestDaemonLogsToJournal: connect --log-target journal starts a
// connection daemon whose entries reach the journal socket
// ($NVMEOF_JOURNAL_SOCKET, a fake journald here) with SYSLOG_IDENTIFIER
// nvmeof, the controller and NQN fields, the key/values and priorities;
// its state and a failed connect name the journalctl command instead of a
// file, and the log file holds no log lines.
func TestDaemonLogsToJournal(t *testing.T) {
	j := journaltest.New(t)
	t.Setenv(journal.SocketEnv, j.Path)
	dir := t.TempDir()
	cfg := writeLoopTarget(t, dir)
	runDir := filepath.Join(dir, "run")
	cli := runDirCLI(t, runDir)
	base := []string{"connect", "-t", "loop", "-a", "127.0.0.1", "--target-config", cfg, "-q", tHost, "--map", "none", "--timeout", "20s", "--log-target", "journal"}

	code, out, errs := cli(append(base, "-n", tNQN)...)
	if code != 0 || strings.TrimSpace(out) != "nvmeof0" {
		t.Fatalf("connect: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	e := j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool { return e.Get("MESSAGE") == "connecting" })
	for k, want := range map[string]string{
		"SYSLOG_IDENTIFIER": "nvmeof",
		"PRIORITY":          "6",
		"NVMEOF_CONTROLLER": "nvmeof0",
		"NVMEOF_SUBSYSNQN":  tNQN,
		"LOGGER":            "nvmeof.nvmeof0",
		"TRANSPORT":         "loop",
		"TRADDR":            "127.0.0.1",
		"NQN":               tNQN,
	} {
		if got := e.Get(k); got != want {
			t.Errorf("%s = %q, want %q; entry %v", k, got, want, e)
		}
	}
	if !strings.HasSuffix(e.Get("CODE_FILE"), "daemon.go") || e.Get("CODE_LINE") == "" {
		t.Errorf("entry without the code location: %v", e)
	}
	e = j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool {
		return e.Get("MESSAGE") == "connected" && e.Get("LOGGER") == "nvmeof.nvmeof0"
	})
	if e.Get("CNTLID") == "" || e.Get("NAMESPACES") != "1" {
		t.Errorf("connected entry %v", e)
	}
	live, _, err := session.Scan(runDir)
	if err != nil || len(live) != 1 || live[0].State == nil {
		t.Fatalf("scan: %v, %v", live, err)
	}
	wantWhere := "journalctl -t nvmeof NVMEOF_CONTROLLER=nvmeof0"
	if got := live[0].State.Log; got != wantWhere {
		t.Errorf("state log %q, want %q", got, wantWhere)
	}
	if code, _, errs := cli("disconnect-all"); code != 0 {
		t.Fatalf("disconnect-all: exit %d, %q", code, errs)
	}
	j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool { return e.Get("MESSAGE") == "controller disconnected" })

	// A failure names the journalctl command; the error entry is there
	// at priority err.
	code, _, errs = cli(append(base, "-n", tNQN+"-unknown")...)
	if code != 1 || !strings.Contains(errs, "(log: "+wantWhere+")") {
		t.Errorf("connect to an unknown NQN: exit %d, stderr %q; want the journalctl command", code, errs)
	}
	e = j.WaitFor(t, 30*time.Second, func(e journaltest.Entry) bool { return e.Get("MESSAGE") == "connect failed" })
	if e.Get("PRIORITY") != "3" || e.Get("ERROR") == "" || e.Get("NVMEOF_SUBSYSNQN") != tNQN+"-unknown" {
		t.Errorf("connect failed entry %v", e)
	}
	if b, err := os.ReadFile(session.LogPath(runDir, "nvmeof0")); err == nil && (strings.Contains(string(b), "connect failed") || strings.Contains(string(b), "[INFO]")) {
		t.Errorf("the log file has log lines with the journal target: %q", b)
	}
}

// TestLogTargetRefused: an unknown --log-target, and journal without a
// journal socket, fail connect before any daemon starts.
func TestLogTargetRefused(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	base := []string{"--run-dir", runDir, "connect", "-t", "loop", "-a", "127.0.0.1", "-n", tNQN, "-q", tHost, "--map", "none",
		"--target-config", filepath.Join(t.TempDir(), "t.hcl")}
	code, _, errs := runCLI(append(base, "--log-target", "syslog")...)
	if code != 1 || !strings.Contains(errs, `--log-target "syslog": want file, journal or stderr`) {
		t.Errorf("--log-target syslog: exit %d, %q", code, errs)
	}
	missing := filepath.Join(t.TempDir(), "no-journal")
	t.Setenv(journal.SocketEnv, missing)
	code, _, errs = runCLI(append(base, "--log-target", "journal")...)
	if code != 1 || !strings.Contains(errs, "--log-target journal: journal socket "+missing) {
		t.Errorf("--log-target journal without journald: exit %d, %q", code, errs)
	}
	if _, err := os.Stat(session.LogPath(runDir, "nvmeof0")); err == nil {
		t.Errorf("a daemon was started")
	}
	if got := logWhere(logFile, "/run/nvmeof", "nvmeof2"); got != session.LogPath("/run/nvmeof", "nvmeof2") {
		t.Errorf("logWhere file: %q", got)
	}
}
