package hostcli

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
)

func TestLogLevelValidated(t *testing.T) {
	for _, tc := range []struct {
		level, want string // want: "" accepted, else in the error
	}{
		{"trace", ""}, {"DEBUG", ""}, {"info", ""}, {"warn", ""}, {"error", ""}, {"off", ""},
		{"verbose", "did you mean debug?"},
		{"debg", "did you mean debug?"},
		{"warning", "did you mean warn?"},
		{"loud", "want one of trace, debug, info, warn, error, off"},
	} {
		code, _, errs := runCLI("--log-level", tc.level, "--run-dir", t.TempDir(), "list")
		if tc.want == "" {
			if code != 0 {
				t.Errorf("--log-level %s: exit %d, %q", tc.level, code, errs)
			}
			continue
		}
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("--log-level %s: exit %d, %q; want one line with %q", tc.level, code, errs, tc.want)
		}
		if tc.level == "loud" && strings.Contains(errs, "did you mean") {
			t.Errorf("--log-level loud suggests a level: %q", errs)
		}
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI("--version")
	if code != 0 || !strings.HasPrefix(out, "nvmeof version ") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := formatVersion(bi), "v1.2.3 (rev 0123456789ab, 2026-11-30T10:00:00Z, modified, go1.26.8)"; got != want {
		t.Errorf("formatVersion: %q, want %q", got, want)
	}
	if got := formatVersion(&debug.BuildInfo{GoVersion: "go1.26.8"}); got != "(devel) (go1.26.8)" {
		t.Errorf("formatVersion without VCS: %q", got)
	}
}

// TestConnectFailureNamesLog checks that a connect the daemon could not
// make names the daemon's log, which stays with the reason in it, and that
// --log-level debug tells where the daemon logs.
func TestConnectFailureNamesLog(t *testing.T) {
	dir := t.TempDir()
	cfg := writeLoopTarget(t, dir)
	runDir := filepath.Join(dir, "run")
	code, _, errs := runCLI("--run-dir", runDir, "--log-level", "debug", "connect", "-t", "loop", "-a", "127.0.0.1",
		"--target-config", cfg, "-n", tNQN+"-unknown", "-q", tHost, "--map", "none", "--timeout", "20s")
	logPath := session.LogPath(runDir, "nvmeof0")
	if code != 1 || !strings.Contains(errs, "(log: "+logPath+")") || !strings.Contains(errs, "starting the connection daemon") {
		t.Fatalf("connect to an unknown NQN: exit %d, stderr %q; want the log path %s", code, errs, logPath)
	}
	b, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(b), "connect failed") {
		t.Errorf("the failed daemon's log: %v, %q", err, b)
	}
}
