package server

import (
	"slices"
	"strings"

	"github.com/nvmeof/nvmeof/rdma"
)

// Devices returns the RDMA devices open now (for their counters; the
// caller must not close them), sorted by name.
func (s *Server) Devices() []rdma.Device {
	s.mu.Lock()
	out := make([]rdma.Device, 0, len(s.devices))
	for _, d := range s.devices {
		out = append(out, d.dev)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b rdma.Device) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// PortDevice returns the RDMA device port name (its ID) listens on, for
// its counters (the caller must not close it); nil for a port that is
// not running or not rdma.
func (s *Server) PortDevice(name string) rdma.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.ports[name]
	if p == nil || p.devKey == nil {
		return nil
	}
	if d := s.devices[*p.devKey]; d != nil {
		return d.dev
	}
	return nil
}
