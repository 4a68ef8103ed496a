package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckNvmetcliKeys: nvmetd --check of nvmetcli JSON names each key
// it would not apply, with its line:col: an error for an unknown key and
// for one whose loss hosts would notice, a warning for one whose loss only
// changes what they are told.
func TestCheckNvmetcliKeys(t *testing.T) {
	dir := t.TempDir()
	const sub = `{"subsystems": [{"nqn": "nqn.2026-11.io.nvmeof:j", "namespaces": [],
  "attr": {%s}}]}
`
	tests := []struct {
		name, attr string
		status     int
		want       string
	}{
		{"typo", `"alow_any_host": "1"`, 1, `:2:29: subsystems[0].attr: alow_any_host: unknown key, not applied; did you mean "allow_any_host"?`},
		{"pi_enable", `"pi_enable": "1"`, 1, `:2:25: subsystems[0].attr: pi_enable: "1": end-to-end protection information`},
		{"ieee_oui", `"ieee_oui": "0x0025b3", "allow_any_host": "1"`, 0, `:2:24: subsystems[0].attr: ieee_oui: "0x0025b3" ignored`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(dir, tt.name+".json")
			writeFile(t, f, strings.Replace(sub, "%s", tt.attr, 1))
			status, _, stderr := runNvmetd(t, dir, "--check", "--config", f)
			want := f + tt.want
			if tt.status == 0 {
				want = "warning: " + want
			}
			if status != tt.status || !strings.Contains(stderr, want) {
				t.Errorf("status %d (want %d), stderr:\n%s\nwant it to contain %q", status, tt.status, stderr, want)
			}
		})
	}
}
