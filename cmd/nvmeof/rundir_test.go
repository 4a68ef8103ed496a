package main

import (
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
