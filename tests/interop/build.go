// Package interop holds the tests that pit our binaries against the Linux
// kernel's NVMe-oF and RDMA stacks, booted under QEMU by kernel-peer
// (see package kpeer). They need root; in CI (.ci/run) they must run.
package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildBinary builds one of the repository's commands (e.g. "./cmd/nvmetd")
// into a temporary directory and returns its path.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	t.Fatal("go.mod not found")
	return ""
}
