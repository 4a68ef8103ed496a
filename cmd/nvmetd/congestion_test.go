package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCongestionCheck: nvmetd --check takes a soft port's congestion
// block and refuses a bad one with its position.
func TestCongestionCheck(t *testing.T) {
	for _, tc := range []struct {
		name, port, block string
		err               string // "" for none
	}{
		{"soft", `provider = "soft"`, `enabled = true
    line_rate = "25Gbit"`, ""},
		{"auto", ``, `enabled = true`, `n.hcl:5:3: ports/p/congestion: congestion control is the soft provider's: set provider = "soft"`},
		{"unknown key", `provider = "soft"`, `enable = true`, `n.hcl:6:5: Unsupported argument`},
		{"out of range", `provider = "soft"`, `min_cnp_interval = "2s"`, `min_cnp_interval: 2s is out of range`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "n.hcl")
			writeFile(t, cfg, `port "p" {
  address  = "127.79.3.1"
  service  = 4420
  `+tc.port+`
  congestion {
    `+tc.block+`
  }
}
`)
			code, _, errs := runNvmetd(t, dir, "--config", cfg, "--check")
			if tc.err == "" {
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errs)
				}
				return
			}
			if code == 0 || !strings.Contains(errs, tc.err) {
				t.Errorf("exit %d, stderr %q; want an error with %q", code, errs, tc.err)
			}
		})
	}
}
