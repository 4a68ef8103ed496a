package hostcli

import (
	"bytes"
	"strings"
	"testing"
)

// TestSelftestLoop runs `nvmeof selftest --transport loop` end to end:
// an in-process target and initiator, verified I/O, no privileges.
func TestSelftestLoop(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Run([]string{"nvmeof", "selftest", "--transport", "loop", "--size", "16MiB", "--seconds", "20s", "--seed", "3"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"namespace 1: 1 GiB", "write:", "flush:   ok", "read:", "verified",
		"trim:", "reads back as zeroes", "rewrite:", "verify:", "OK (16.0 MiB checked, seed 3)", "selftest passed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSelftestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "tcp"},
		{"--size", "10KiB"},
		{"--queue-depth", "0"},
		{"--seconds", "0s"},
		{"--target-addr", "::1"},
		{"--provider", "hw"},
		{"--provider", "soft", "--device", "mlx5_0"},
	} {
		var out, errOut bytes.Buffer
		code := Run(append([]string{"nvmeof", "selftest"}, args...), &out, &errOut)
		if code != 1 || strings.Count(errOut.String(), "\n") != 1 || !strings.HasPrefix(errOut.String(), "nvmeof: ") {
			t.Errorf("selftest %q: status %d, stderr %q; want status 1 and one line", args, code, errOut.String())
		}
	}
}
