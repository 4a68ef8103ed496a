package hostcli

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

// TestMain lets this test binary serve as the connection daemon that
// connect starts (it re-executes os.Executable with the hidden daemon
// command), so that connect runs end to end without building nvmeof.
func TestMain(m *testing.M) {
	for i, a := range os.Args {
		if a == daemonCommand && i > 0 && os.Args[1] == "--run-dir" {
			os.Exit(Run(os.Args, os.Stdout, os.Stderr))
		}
	}
	os.Exit(m.Run())
}

const authTargetHCL = `port "p0" {
  transport = "loop"
  address   = "127.0.0.1"
  service   = 4420
}

host %q {
  dhchap_key      = %q
  dhchap_ctrl_key = %q
  dhchap_dhgroup  = "ffdhe2048"
}

subsystem %q {
  ports         = ["p0"]
  allowed_hosts = [%q]

  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`

// TestConnectDHChap connects through a connection daemon to a loop target
// that requires bidirectional DH-HMAC-CHAP, and checks that the secrets
// appear nowhere: not in the daemon's command line or environment, not in
// the run directory (state, log), not in list -o json; missing and wrong
// secrets fail with one clear line.
func TestConnectDHChap(t *testing.T) {
	host, ctrl, _ := secretArgs(t)
	wrong, err := auth.GenerateKey(auth.HashNone, 32, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "target.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(authTargetHCL, tHost, host, ctrl, tNQN, tHost)), 0o600); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	cli := runDirCLI(t, runDir)
	base := []string{"-t", "loop", "-a", "127.0.0.1", "-s", "4420", "--target-config", cfg, "-n", tNQN, "-q", tHost, "--map", "none", "--timeout", "30s"}

	// Refusals: one line each, naming the cause, no secret.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "target requires DH-HMAC-CHAP authentication: give the host secret (--dhchap-secret)"},
		{[]string{"-S", wrong.Encode()}, "the controller refused the host's response"},
		{[]string{"-S", host, "-C", wrong.Encode()}, "the controller did not prove its key"},
	} {
		code, out, errs := cli(append(append([]string{"connect"}, base...), tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("connect %v: exit %d, stdout %q, stderr %q; want one line with %q", tc.args, code, out, errs, tc.want)
		}
		noSecretIn(t, "the error", errs, host, ctrl, wrong.Encode())
	}

	code, out, errs := cli(append(append([]string{"connect"}, base...), "-S", host, "-C", ctrl, "-o", "json")...)
	if code != 0 {
		t.Fatalf("connect: exit %d, stderr %q", code, errs)
	}
	var made struct {
		Device string `json:"device"`
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil || !strings.HasPrefix(made.Device, "nvmeof") {
		t.Fatalf("connect printed %q: %v", out, err)
	}
	live, _, err := session.Scan(runDir)
	if err != nil || len(live) != 1 || live[0].State == nil {
		t.Fatalf("run directory: %d live daemons, %v", len(live), err)
	}
	st := live[0].State
	if st.State != "live" {
		t.Errorf("daemon state %q", st.State)
	}
	pid := st.PID
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		noSecretIn(t, "the daemon's "+f, string(b), host, ctrl)
		if f == "cmdline" && !strings.Contains(string(b), `"dhchap":true`) {
			t.Errorf("the daemon's command line does not say secrets follow: %q", b)
		}
	}
	// Every file the daemon wrote: state, log, socket names.
	err = filepath.WalkDir(runDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		noSecretIn(t, p, string(b), host, ctrl)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"list", "-o", "json"}, {"list"}, {"id-ctrl", made.Device, "-o", "json"}} {
		code, out, errs := cli(args...)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
		noSecretIn(t, strings.Join(args, " "), out+errs, host, ctrl)
	}
	if code, _, errs := cli("disconnect", "-n", tNQN); code != 0 {
		t.Errorf("disconnect: exit %d, stderr %q", code, errs)
	}
}
