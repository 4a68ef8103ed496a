package hostcli

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestCongestionFlag: --congestion reaches the host's soft device (its RC
// QPs run DCQCN at the line rate given), off by default; bad values and
// the flag with another transport are refused before anything opens.
func TestCongestionFlag(t *testing.T) {
	target := netip.MustParseAddr("127.0.97.1")
	for i, tc := range []struct {
		name, transport, flag string
		rate                  uint64 // the QP's RPRate
		err                   string
	}{
		{name: "off", transport: "rdma", flag: "", rate: 0},
		{name: "on", transport: "rdma", flag: "on", rate: soft.DefaultLineRate},
		{name: "line rate", transport: "rdma", flag: "line_rate=3Gbit,ecn=ect1", rate: 3e9},
		{name: "explicitly off", transport: "rdma", flag: "enabled=false,line_rate=3Gbit", rate: 0},
		{name: "bad key", transport: "rdma", flag: "rate=3Gbit", err: `--congestion "rate=3Gbit": unknown key "rate"`},
		{name: "bad value", transport: "rdma", flag: "min_cnp_interval=-4us", err: "min_cnp_interval: -4µs is out of range"},
		{name: "tcp", transport: "tcp", flag: "on", err: "not for transport tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := netip.AddrFrom4([4]byte{127, 0, 97, byte(2 + i)})
			a := connectArgs{Transport: tc.transport, Traddr: target.String(), Trsvcid: "4420", HostTraddr: host.String(),
				Provider: "soft", FastIOFailTmo: -1, TOS: -1, Congestion: tc.flag}
			_, err := a.options()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dev, err := openRDMA(a, target, hclog.NewNullLogger())
			if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
				t.Skipf("soft device: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			qp := newRCQP(t, dev)
			defer qp.Destroy()
			var got uint64
			for _, s := range dev.(*soft.Device).QPStats(nil) {
				if s.QPN == qp.QPN() {
					got = s.RPRate
				}
			}
			if got != tc.rate {
				t.Errorf("QP rate %d b/s, want %d", got, tc.rate)
			}
		})
	}
}
