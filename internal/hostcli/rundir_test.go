package hostcli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
)

// runDirCLI returns a runner of the CLI with --run-dir runDir, and ends
// every connection daemon under runDir when the test ends: disconnect-all,
// then SIGKILL for any daemon still there.
func runDirCLI(t *testing.T, runDir string) func(args ...string) (int, string, string) {
	t.Helper()
	cli := func(args ...string) (int, string, string) {
		return runCLI(append([]string{"--run-dir", runDir}, args...)...)
	}
	t.Cleanup(func() {
		cli("disconnect-all")
		live, _, _ := session.Scan(runDir)
		for _, e := range live {
			if e.State != nil && e.State.PID > 0 {
				_ = syscall.Kill(e.State.PID, syscall.SIGKILL)
			}
		}
	})
	return cli
}

// writeLoopTarget writes dir/t.hcl, an in-process target config for
// connect --target-config: subsystem tNQN open to any host, one 1 MiB
// memory namespace, on the loop transport at 127.0.0.1:4420. It returns
// the file's path.
func writeLoopTarget(t *testing.T, dir string) string {
	t.Helper()
	cfg := filepath.Join(dir, "t.hcl")
	hcl := "port \"p0\" {\n  transport = \"loop\"\n  address   = \"127.0.0.1\"\n  service   = 4420\n}\n" +
		"subsystem \"" + tNQN + "\" {\n  ports          = [\"p0\"]\n  allow_any_host = true\n  namespace \"1\" {\n    backend = \"memory\"\n    size    = \"1MiB\"\n  }\n}\n"
	if err := os.WriteFile(cfg, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}
