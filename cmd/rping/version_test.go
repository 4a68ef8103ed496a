package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersion: --version prints one line naming rping and exits 0, without
// needing -s or -c (or -v, which is rping's verbose flag).
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := newApp(&out, &errOut).Run([]string{"rping", "--version"}); err != nil {
		t.Fatalf("--version: %v (%s)", err, errOut.String())
	}
	if l := out.String(); !strings.HasPrefix(l, "rping version ") || strings.Count(l, "\n") != 1 {
		t.Errorf("--version printed %q", l)
	}
}
