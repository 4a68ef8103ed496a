package server

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/nvmeof/nvmeof/internal/softcc"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target/reconcile"
)

// setCongestion gives the open device of key (which port pl starts on)
// pl's congestion block, if the device runs other settings: a reload
// that changed the block of a soft port finds the device open, shared
// with the port's old listener. The device changes without closing
// (provider.SetCongestion); its QPs carry on.
func (s *Server) setCongestion(pl reconcile.PortListener, key deviceKey) error {
	cc := softcc.Config(pl.Congestion)
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.devices[key]
	if d == nil || reflect.DeepEqual(d.congestion, cc) {
		return nil
	}
	if err := provider.SetCongestion(d.dev, cc); err != nil {
		return fmt.Errorf("congestion control of RDMA device %s: %w", d.dev.Name(), err)
	}
	s.log.Info("RDMA device congestion control changed", "port", pl.Name, "device", d.dev.Name(), "changes", ccChanges(d.congestion, cc))
	d.congestion = cc
	return nil
}

// ccChanges describes what differs between two congestion settings
// (nil: off), for the log: "off -> on", or the changed fields, as
// "LineRate 1e+10 -> 2.5e+10, ECT1 false -> true".
func ccChanges(was, now *soft.CongestionConfig) string {
	switch {
	case was == nil && now == nil:
		return "none"
	case was == nil:
		return "off -> on: " + ccChanges(&soft.CongestionConfig{Enabled: true}, now)
	case now == nil:
		return "on -> off"
	}
	a, b := reflect.ValueOf(*was), reflect.ValueOf(*now)
	var out []string
	for i := range a.NumField() {
		if x, y := a.Field(i).Interface(), b.Field(i).Interface(); x != y {
			out = append(out, fmt.Sprintf("%s %v -> %v", a.Type().Field(i).Name, x, y))
		}
	}
	if len(out) == 0 {
		return "defaults"
	}
	return strings.Join(out, ", ")
}
