package server

import (
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
)

// TestDefaultLoopbackOnly fails if the embedded default ever listens on
// an address that is not loopback: it lets any host in.
func TestDefaultLoopbackOnly(t *testing.T) {
	tree, err := configfs.ParseHCL(DefaultConfig, "(embedded default)")
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Ports) == 0 {
		t.Fatal("the default has no port")
	}
	got, err := LoopbackListeners(tree)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "127.0.0.1:4420" {
		t.Errorf("default listens on %v, want 127.0.0.1:4420", got)
	}
	for _, p := range tree.Ports {
		if p.Trtype != configfs.TransportRDMA {
			t.Errorf("port %s: transport %q", p.ID, p.Trtype)
		}
	}
}

// TestLoopbackListeners: a non-loopback port is refused with its position.
func TestLoopbackListeners(t *testing.T) {
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"127.9.9.9", true},
		{"::1", true},
		{"0.0.0.0", false},
		{"192.0.2.1", false},
		{"::", false},
	} {
		src := `port "p" {
  address = "` + tt.addr + `"
}
`
		tree, err := configfs.ParseHCL([]byte(src), "l.hcl")
		if err != nil {
			t.Fatal(err)
		}
		_, err = LoopbackListeners(tree)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.addr, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "l.hcl:2:13: ports/p: address: ") {
			t.Errorf("%s: %v lacks the position", tt.addr, err)
		}
	}
}
