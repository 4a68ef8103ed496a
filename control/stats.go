package control

import (
	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/rdma/provider"
)

// PortStats are a port's device counters (port.stats).
type PortStats struct {
	ID        string `json:"id"`
	PortID    uint16 `json:"portid"`
	Transport string `json:"transport"`
	Address   string `json:"address"`
	// Provider and Device are the RDMA device's (rdma ports that run).
	Provider string `json:"provider,omitempty"`
	Device   string `json:"device,omitempty"`
	// Counters are the device's counters by name (rdma/provider.Counters:
	// the soft provider's own, an rdma-core device's sysfs ones); none
	// for a port without an RDMA device, and then Note says why.
	Counters map[string]uint64 `json:"counters,omitempty"`
	Note     string            `json:"note,omitempty"`
}

// portStatsParams are port.stats' params: one port, or every one.
type portStatsParams struct {
	ID string `json:"id,omitempty"`
}

// portStats answers port.stats: the counters of each port's RDMA device,
// read now. Ports that share a device show the same counters.
func (s *Service) portStats(q *portStatsParams) (any, *Error) {
	tree := s.Tree()
	if q.ID != "" && tree.Port(q.ID) == nil {
		return nil, notFound("no port %q", q.ID)
	}
	ids := tree.PortIDs()
	out := []PortStats{}
	for _, p := range tree.Ports {
		if q.ID != "" && p.ID != q.ID {
			continue
		}
		st := PortStats{ID: p.ID, PortID: ids[p.ID], Transport: p.Trtype, Address: p.Traddr}
		if p.Trtype != configfs.TransportRDMA {
			st.Note = p.Trtype + " ports have no device counters"
			out = append(out, st)
			continue
		}
		dev := s.srv.PortDevice(p.ID)
		if dev == nil {
			st.Note = "not running"
			out = append(out, st)
			continue
		}
		info := provider.Describe(dev)
		st.Provider, st.Device = info.Provider, info.Name
		c, err := provider.Counters(dev)
		if err != nil {
			st.Note = err.Error()
		}
		st.Counters = c
		out = append(out, st)
	}
	return out, nil
}
