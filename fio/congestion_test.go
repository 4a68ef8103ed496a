package fio

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestConfigCongestion parses the congestion option: ':' separates its
// pairs as ',' does (fio splits options at ','), and it is refused where
// the soft provider does not run.
func TestConfigCongestion(t *testing.T) {
	const nqn = "nqn.2026-11.io.nvmeof:x"
	for _, tc := range []struct {
		name string
		in   Config
		want *soft.CongestionConfig
		err  string
	}{
		{name: "default off", in: Config{SubNQN: nqn}},
		{name: "off", in: Config{SubNQN: nqn, Congestion: "off"}},
		{name: "on", in: Config{SubNQN: nqn, Congestion: "on"}, want: &soft.CongestionConfig{Enabled: true}},
		{name: "colons", in: Config{SubNQN: nqn, Provider: "soft", Congestion: "line_rate=3Gbit:ecn=ect1:min_cnp_interval=4us"},
			want: &soft.CongestionConfig{Enabled: true, LineRate: 3e9, ECT1: true, MinCNPInterval: 4000}},
		{name: "commas", in: Config{SubNQN: nqn, Congestion: "line_rate=3Gbit,g=0.5"}, want: &soft.CongestionConfig{Enabled: true, LineRate: 3e9, G: 0.5}},
		{name: "bad key", in: Config{SubNQN: nqn, Congestion: "speed=1"}, err: `unknown key "speed"`},
		{name: "bad value", in: Config{SubNQN: nqn, Congestion: "ecn=ce"}, err: `unknown ECN codepoint "ce"`},
		{name: "tcp", in: Config{Transport: "tcp", SubNQN: nqn, Congestion: "on"}, err: "not for transport tcp"},
		{name: "loop", in: Config{Transport: "loop", Congestion: "on"}, err: "not for transport loop"},
		{name: "ibverbs", in: Config{SubNQN: nqn, Provider: "ibverbs", Congestion: "on"}, err: "provider ibverbs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.withDefaults()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.cc == nil) != (tc.want == nil) || got.cc != nil && *got.cc != *tc.want {
				t.Errorf("congestion %+v, want %+v", got.cc, tc.want)
			}
		})
	}
}

// TestRDMADeviceCongestion: the process's soft device runs the
// congestion control its first job asked for (its RC QPs' DCQCN rate),
// and a job asking for other settings on the same address is refused.
func TestRDMADeviceCongestion(t *testing.T) {
	addr := netip.MustParseAddr("127.0.46.1")
	cc := &soft.CongestionConfig{Enabled: true, LineRate: 4e9}
	cfg := provider.Config{Provider: provider.Soft, Addr: addr, Congestion: cc, Logger: hclog.NewNullLogger()}
	d, err := rdmaDevice(cfg)
	if err != nil {
		t.Skipf("soft device on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		shared.Lock()
		delete(shared.devices, deviceKey{provider: provider.Soft, addr: addr})
		shared.Unlock()
		d.Close()
	})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	var rate uint64
	for _, s := range d.(*soft.Device).QPStats(nil) {
		if s.QPN == qp.QPN() {
			rate = s.RPRate
		}
	}
	if rate != 4e9 {
		t.Errorf("QP rate %d b/s, want 4e9", rate)
	}
	same := *cc
	cfg.Congestion = &same
	if d2, err := rdmaDevice(cfg); err != nil || d2 != d {
		t.Errorf("a second job with the same settings: %v, %v", d2, err)
	}
	cfg.Congestion = nil
	if _, err := rdmaDevice(cfg); err == nil || !strings.Contains(err.Error(), "other congestion settings") {
		t.Errorf("a second job without congestion control: %v", err)
	}
}
