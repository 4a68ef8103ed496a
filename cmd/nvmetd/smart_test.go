package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmartDriveDB: a drive database that cannot be read or is not one
// stops nvmetd before it serves, with an error naming the flag and the
// file; --check reports it the same way; a good one (the built-in
// DEFAULT entry as a file) passes (flags are checked before
// --print-default, which then exits 0).
func TestSmartDriveDB(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("drives:\n- family: Some family\n  model_regex: 'X'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.yaml")
	if err := os.WriteFile(garbage, []byte("drives: [: not yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good, err := filepath.Abs(filepath.Join("..", "..", "target", "bdev", "drivedb.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		status int
		want   []string
	}{
		{[]string{"--smart-drivedb", filepath.Join(dir, "missing.yaml")}, 1, []string{"--smart-drivedb", "missing.yaml", "no such file"}},
		{[]string{"--smart-drivedb", bad}, 1, []string{"--smart-drivedb", "bad.yaml", "does not start with the DEFAULT family"}},
		{[]string{"--smart-drivedb", garbage, "--check"}, 1, []string{"--smart-drivedb", "garbage.yaml"}},
		{[]string{"--smart-drivedb", good, "--print-default"}, 0, nil},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			status, _, stderr := runNvmetd(t, dir, tt.args...)
			if status != tt.status {
				t.Fatalf("status %d, want %d; stderr %q", status, tt.status, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}
