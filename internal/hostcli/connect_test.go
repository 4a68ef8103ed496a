package hostcli

import (
	"slices"
	"testing"

	"github.com/nvmeof/nvmeof/initiator/session"
)

// TestConnectNotes: connect says on stderr what its output leaves
// implicit: the mapping --map auto chose, and a path added to a connected
// subsystem instead of a new controller.
func TestConnectNotes(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:notes"
	ns := func(gen, method string) session.Namespace {
		return session.Namespace{Generic: gen, Method: method}
	}
	state := func(nss ...session.Namespace) *session.State {
		return &session.State{Name: "nvmeof2", SubsysNQN: nqn, Namespaces: nss,
			Paths: []session.PathState{{Name: "nvmeof2", Traddr: "127.0.0.1", Trsvcid: "4420"}, {Name: "nvmeof2c1", Traddr: "127.0.0.3", Trsvcid: "4420"}}}
	}
	for _, tc := range []struct {
		name string
		cn   connected
		want []string
	}{
		{"auto, one method", connected{args: connectArgs{Map: "auto"}, state: state(ns("nvmeof2n1", "fuse+loop"), ns("nvmeof2n2", "fuse+loop"))},
			[]string{"nvmeof2: --map auto chose fuse+loop"}},
		{"auto, methods differ", connected{args: connectArgs{Map: "auto"}, state: state(ns("nvmeof2n1", "ublk"), ns("nvmeof2n2", "nbd"))},
			[]string{"nvmeof2: --map auto chose nvmeof2n1 ublk, nvmeof2n2 nbd"}},
		{"auto, one unmapped", connected{args: connectArgs{Map: "auto"}, state: state(ns("nvmeof2n1", ""), ns("nvmeof2n2", "nbd"))},
			[]string{"nvmeof2: --map auto chose nbd"}},
		{"auto, nothing mapped", connected{args: connectArgs{Map: "auto"}, state: state()}, nil},
		{"explicit method", connected{args: connectArgs{Map: "nbd"}, state: state(ns("nvmeof2n1", "nbd"))}, nil},
		{"none", connected{args: connectArgs{Map: "none"}, state: state(ns("nvmeof2n1", ""))}, nil},
		{"added path", connected{args: connectArgs{Map: "auto"}, state: state(ns("nvmeof2n1", "ublk")), added: true, path: "nvmeof2c1"},
			[]string{"nvmeof2: added path nvmeof2c1 to " + nqn + ", connected already: no new controller or device (-D makes a separate controller)"}},
		{"added path, name unknown", connected{args: connectArgs{Map: "auto"}, state: state(), added: true},
			[]string{"nvmeof2: added a path to " + nqn + ", connected already: no new controller or device (-D makes a separate controller)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := connectNotes(tc.cn); !slices.Equal(got, tc.want) {
				t.Errorf("connectNotes:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestAddedPath: the path a connect added is the last of the daemon's
// paths with its addresses.
func TestAddedPath(t *testing.T) {
	st := &session.State{Paths: []session.PathState{
		{Name: "nvmeof0", Traddr: "127.0.0.1", Trsvcid: "4420", HostTraddr: "127.0.0.2"},
		{Name: "nvmeof0c1", Traddr: "127.0.0.3", Trsvcid: "4420", HostTraddr: "127.0.0.2"},
		{Name: "nvmeof0c2", Traddr: "127.0.0.1", Trsvcid: "4420", HostTraddr: "127.0.0.4"},
	}}
	for _, tc := range []struct {
		a    connectArgs
		want string
	}{
		{connectArgs{Traddr: "127.0.0.3", Trsvcid: "4420"}, "nvmeof0c1"},
		{connectArgs{Traddr: "127.0.0.1", Trsvcid: "4420"}, "nvmeof0c2"},
		{connectArgs{Traddr: "127.0.0.1", Trsvcid: "4420", HostTraddr: "127.0.0.2"}, "nvmeof0"},
		{connectArgs{Traddr: "127.0.0.1", Trsvcid: "4421"}, ""},
	} {
		if got := addedPath(st, tc.a); got != tc.want {
			t.Errorf("addedPath(%s:%s from %q) = %q, want %q", tc.a.Traddr, tc.a.Trsvcid, tc.a.HostTraddr, got, tc.want)
		}
	}
}
