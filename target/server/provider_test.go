package server

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// rdmaConfig is a configuration with two rdma ports on one loopback
// address; %s are extra attributes of port p1, then of port p2.
func rdmaConfig(t *testing.T, p1, p2 string) *configfs.Tree {
	t.Helper()
	src := `
port "p1" {
  address = "127.78.0.1"
  service = 4420
  ` + p1 + `
}
port "p2" {
  address = "127.78.0.1"
  service = 4421
  ` + p2 + `
}
subsystem "` + nqn + `" {
  ports          = ["p1", "p2"]
  allow_any_host = true
  ` + ns1 + `
}
`
	tree, err := configfs.ParseHCL([]byte(src), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func (s *Server) deviceCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.devices)
}

// TestRDMAPortsProviders serves rdma ports on a loopback address through
// rdma/provider: auto and soft ports on one address share one soft device,
// the listening log names the device, a changed tos restarts the port, and
// a provider the binary lacks refuses the whole reload.
func TestRDMAPortsProviders(t *testing.T) {
	var logs syncBuffer
	s := New(Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), LoopNetwork: loop.NewNetwork()})
	defer s.Close()

	steps := []struct {
		name        string
		tree        *configfs.Tree
		wantErr     error // nil: applies
		wantDevices int
		wantLog     []string
	}{
		{name: "auto and soft share a device", tree: rdmaConfig(t, ``, `provider = "soft"`), wantDevices: 1,
			wantLog: []string{`RDMA device opened: address=127.78.0.1 provider=soft device=soft-127.78.0.1 mtu=`, `listening: port=p1 `, `listening: port=p2 `, `provider=soft device=soft-127.78.0.1 mtu=`}},
		{name: "tos change restarts the port", tree: rdmaConfig(t, `tos = 106`, `provider = "soft"`), wantDevices: 1,
			wantLog: []string{`port stopped: port=p1`, `tos ignored: port=p1`, `listening: port=p1 `}},
		{name: "back to one port", tree: rdmaConfig(t, `tos = 106`, `transport = "loop"`), wantDevices: 1},
	}
	if !ibverbs.Built {
		steps = append(steps, struct {
			name        string
			tree        *configfs.Tree
			wantErr     error
			wantDevices int
			wantLog     []string
		}{name: "ibverbs not built in", tree: rdmaConfig(t, `tos = 106`, `provider = "ibverbs"`), wantErr: ibverbs.ErrNotBuilt, wantDevices: 1,
			wantLog: []string{`port cannot start: port=p2`, "-tags ibverbs"}})
	}
	for _, st := range steps {
		before := len(logs.String())
		err := s.Apply(st.tree)
		switch {
		case st.wantErr == nil && err != nil:
			t.Fatalf("%s: Apply: %v", st.name, err)
		case st.wantErr != nil && !errors.Is(err, st.wantErr):
			t.Fatalf("%s: Apply: %v, want %v", st.name, err, st.wantErr)
		}
		if n := s.deviceCount(); n != st.wantDevices {
			t.Errorf("%s: %d devices open, want %d", st.name, n, st.wantDevices)
		}
		got := logs.String()[before:]
		for _, w := range st.wantLog {
			if !strings.Contains(got, w) {
				t.Errorf("%s: log lacks %q:\n%s", st.name, w, got)
			}
		}
	}
	// Without rdma ports, the device is closed.
	if err := s.Apply(config(t, ns1)); err != nil {
		t.Fatal(err)
	}
	if n := s.deviceCount(); n != 0 {
		t.Errorf("%d devices open after the rdma ports went away", n)
	}
}
