package provider

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// otherDevice is a device of no provider here (as an ibverbs one).
type otherDevice struct{ rdma.Device }

func (otherDevice) Name() string { return "mlx5_0" }

// TestSetCongestion: a soft device's congestion control changes while
// it is open (its new RC QPs run at the new line rate, or without DCQCN);
// bad settings are the soft provider's errors; another provider's device
// takes only off.
func TestSetCongestion(t *testing.T) {
	dev, err := Open(Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.2.3")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer dev.Close()
	for _, tc := range []struct {
		name string
		dev  rdma.Device
		cc   *soft.CongestionConfig
		err  error
		want uint64 // the soft device's new RC QP's rate
	}{
		{name: "on", dev: dev, cc: &soft.CongestionConfig{Enabled: true, LineRate: 3e9}, want: 3e9},
		{name: "other rate", dev: dev, cc: &soft.CongestionConfig{Enabled: true, LineRate: 5e9}, want: 5e9},
		{name: "bad", dev: dev, cc: &soft.CongestionConfig{Enabled: true, G: -1}, err: rdma.ErrInvalidArgument, want: 5e9},
		{name: "off", dev: dev, cc: &soft.CongestionConfig{LineRate: 3e9}, want: 0},
		{name: "other provider on", dev: otherDevice{}, cc: &soft.CongestionConfig{Enabled: true}, err: rdma.ErrNotSupported},
		{name: "other provider off", dev: otherDevice{}, cc: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := SetCongestion(tc.dev, tc.cc); !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("SetCongestion: %v, want %v", err, tc.err)
			}
			if tc.dev != dev {
				return
			}
			if got := rcQPRate(t, dev); got != tc.want {
				t.Errorf("QP rate %d b/s, want %d", got, tc.want)
			}
		})
	}
}
