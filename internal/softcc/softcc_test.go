package softcc

import (
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestConfig converts every field, and opens a soft device with the
// result: the soft provider accepts what configfs validated.
func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *configfs.Congestion
		want *soft.CongestionConfig
	}{
		{"nil", nil, nil},
		{"off", &configfs.Congestion{LineRate: 1e9}, nil},
		{"on", &configfs.Congestion{Enabled: true}, &soft.CongestionConfig{Enabled: true}},
		{"ect0", &configfs.Congestion{Enabled: true, ECN: configfs.ECNECT0}, &soft.CongestionConfig{Enabled: true}},
		{"all", &configfs.Congestion{Enabled: true, ECN: configfs.ECNECT1, MinCNPInterval: 4 * time.Microsecond, CNPDSCP: -1,
			LineRate: 25e9, MinRate: 1e6, AdditiveIncrease: 5e6, HyperIncrease: 50e6, G: 0.5, AlphaPeriod: time.Microsecond,
			IncreasePeriod: 2 * time.Microsecond, RateReducePeriod: 3 * time.Microsecond, ByteCounter: 4096, FastRecoverySteps: 3},
			&soft.CongestionConfig{Enabled: true, ECT1: true, MinCNPInterval: 4 * time.Microsecond, CNPDSCP: -1,
				LineRate: 25e9, MinRate: 1e6, AdditiveIncrease: 5e6, HyperIncrease: 50e6, G: 0.5, AlphaPeriod: time.Microsecond,
				IncreasePeriod: 2 * time.Microsecond, RateReducePeriod: 3 * time.Microsecond, ByteCounter: 4096, FastRecoverySteps: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Config(tc.in)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("Config(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
			if got == nil {
				return
			}
			d, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.78.1.1"), Congestion: got})
			if err != nil {
				t.Fatalf("soft.Open refuses it: %v", err)
			}
			d.Close()
		})
	}
}

// TestParse: the one-string form reaches the soft configuration.
func TestParse(t *testing.T) {
	got, err := Parse("line_rate=2Gbit,ecn=ect1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (soft.CongestionConfig{Enabled: true, LineRate: 2e9, ECT1: true}); got == nil || *got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, err := Parse("off"); got != nil || err != nil {
		t.Errorf("off: %+v, %v", got, err)
	}
	if _, err := Parse("ecn=x"); err == nil {
		t.Error("ecn=x accepted")
	}
}
