package hostcli

import (
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/initiator/session"
)

func TestConnectExtraFlags(t *testing.T) {
	base := connectArgs{Transport: "rdma", Traddr: "192.0.2.1", Trsvcid: "4420", NQN: tNQN, Timeout: time.Second,
		Provider: "soft", FastIOFailTmo: -1, TOS: -1}
	tests := []struct {
		name    string
		fast    int
		tos     int
		wantFF  time.Duration
		wantTOS int // -1: not set
		wantErr string
	}{
		{"defaults", -1, -1, 0, -1, ""},
		{"fail at once", 0, -1, time.Nanosecond, -1, ""},
		{"seconds", 15, 184, 15 * time.Second, 184, ""},
		{"tos 0", -1, 0, 0, 0, ""},
		{"fast too small", -2, -1, 0, -1, "fast_io_fail_tmo -2"},
		{"tos too large", -1, 256, 0, -1, "tos 256: want 0 to 255"},
		{"tos negative", -1, -5, 0, -1, "tos -5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := base
			a.FastIOFailTmo, a.TOS = tc.fast, tc.tos
			o, err := a.options()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.FastIOFailTimeout != tc.wantFF {
				t.Errorf("FastIOFailTimeout %v, want %v", o.FastIOFailTimeout, tc.wantFF)
			}
			v, set, _ := a.tos()
			if (tc.wantTOS < 0) == set || (set && int(v) != tc.wantTOS) {
				t.Errorf("tos %d set %v, want %d", v, set, tc.wantTOS)
			}
		})
	}
	// The flags reach connectArgs through the command line, and a bad
	// value is one line before any daemon starts.
	code, _, errs := runCLI("--run-dir", t.TempDir(), "connect", "-t", "rdma", "-a", "192.0.2.1", "-n", tNQN, "-T", "300")
	if code != 1 || !strings.Contains(errs, "tos 300") || strings.Count(errs, "\n") != 1 {
		t.Errorf("connect -T 300: exit %d, %q", code, errs)
	}
}

func TestSameConnection(t *testing.T) {
	st := &session.State{Transport: "rdma", Traddr: "192.0.2.1", Trsvcid: "4420", SubsysNQN: tNQN, HostNQN: tHost, HostTraddr: "192.0.2.2"}
	a := connectArgs{Transport: "rdma", Traddr: "192.0.2.1", Trsvcid: "4420", NQN: tNQN, HostNQN: tHost}
	for _, tc := range []struct {
		name string
		mod  func(*connectArgs)
		want bool
	}{
		{"same", func(*connectArgs) {}, true},
		{"same host address", func(a *connectArgs) { a.HostTraddr = "192.0.2.2" }, true},
		{"other host address", func(a *connectArgs) { a.HostTraddr = "192.0.2.3" }, false},
		{"other host NQN", func(a *connectArgs) {
			a.HostNQN = "nqn.2014-08.org.nvmexpress:uuid:0c2d9a4e-7b1f-4e3a-8d5c-6f7a8b9c0d1e"
		}, false},
		{"other port", func(a *connectArgs) { a.Trsvcid = "4421" }, false},
		{"other subsystem", func(a *connectArgs) { a.NQN = tNQN + "x" }, false},
	} {
		b := a
		tc.mod(&b)
		if got := sameConnection(st, b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
