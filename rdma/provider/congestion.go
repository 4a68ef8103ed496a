package provider

import (
	"fmt"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// SetCongestion changes the RoCEv2 congestion control of an open device
// (Config.Congestion; nil or not Enabled: off) without closing it: a
// soft device's through soft.Device.SetCongestion, whose errors it
// returns. Another provider's device (ibverbs: a NIC's congestion
// control is set in firmware) takes only off, which changes nothing;
// anything else is an error wrapping rdma.ErrNotSupported.
func SetCongestion(dev rdma.Device, cc *soft.CongestionConfig) error {
	if d, ok := dev.(*soft.Device); ok {
		return d.SetCongestion(cc)
	}
	if cc == nil || !cc.Enabled {
		return nil
	}
	return fmt.Errorf("RDMA device %s: congestion control is the soft provider's: %w", dev.Name(), rdma.ErrNotSupported)
}
