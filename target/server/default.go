package server

import (
	_ "embed" // the default configuration
	"fmt"
	"net"
	"net/netip"

	"github.com/nvmeof/nvmeof/configfs"
)

// DefaultConfig is nvmetd's embedded default configuration (HCL): one
// 1 GiB memory-backed namespace in DefaultNQN on 127.0.0.1:4420 over the
// soft RoCEv2 provider, open to any host but on loopback only. The
// initiator's self-test serves it too, with its address and size
// adjusted.
//
//go:embed default.hcl
var DefaultConfig []byte

// DefaultNQN is the subsystem of DefaultConfig.
const DefaultNQN = "nqn.2026-11.io.nvmeof:default"

// LoopbackListeners returns the "address:service" of every port of tree,
// or an error naming the first port that is not on a loopback address. A
// configuration open to any host, like the default, must pass it.
func LoopbackListeners(tree *configfs.Tree) ([]string, error) {
	var out []string
	for _, p := range tree.Ports {
		a, err := netip.ParseAddr(p.Traddr)
		if err != nil || !a.IsLoopback() {
			return nil, tree.PortError(p, "addr_traddr", fmt.Errorf("%q is not a loopback address", p.Traddr))
		}
		svc := p.Trsvcid
		if svc == "" {
			svc = configfs.DefaultTrsvcid
		}
		out = append(out, net.JoinHostPort(a.String(), svc))
	}
	return out, nil
}
