package configfs

import (
	"strings"
	"testing"
	"time"
)

// congestionTree is a soft port with the given transport, provider line
// and congestion block body.
func congestionTree(transport, provider, block string) string {
	addr := "127.0.0.1"
	return `port "p0" {
  transport = "` + transport + `"
  address   = "` + addr + `"
  ` + provider + `
  congestion {
` + block + `
  }
}
`
}

// TestCongestionBlock parses congestion blocks, good and bad: values,
// their defaults, clear errors for unknown keys, values out of range and
// the block where the soft provider does not run.
func TestCongestionBlock(t *testing.T) {
	soft := `provider = "soft"`
	for _, tc := range []struct {
		name, transport, provider, block string
		want                             Congestion
		err                              string // a part of the error; "" for none
	}{
		{name: "enabled", transport: "rdma", provider: soft, block: `enabled = true`, want: Congestion{Enabled: true}},
		{name: "all", transport: "rdma", provider: soft, block: `
    enabled             = true
    ecn                 = "ect1"
    min_cnp_interval    = "4us"
    cnp_dscp            = -1
    line_rate           = "25Gbit"
    min_rate            = 1000000
    additive_increase   = "5Mbit"
    hyper_increase      = "50Mbit"
    g                   = 0.00390625
    alpha_period        = "55us"
    increase_period     = "300us"
    rate_reduce_period  = "4us"
    byte_counter        = "1MiB"
    fast_recovery_steps = 3`,
			want: Congestion{Enabled: true, ECN: ECNECT1, MinCNPInterval: 4 * time.Microsecond, CNPDSCP: -1, LineRate: 25e9, MinRate: 1e6,
				AdditiveIncrease: 5e6, HyperIncrease: 50e6, G: 1.0 / 256, AlphaPeriod: 55 * time.Microsecond, IncreasePeriod: 300 * time.Microsecond,
				RateReducePeriod: 4 * time.Microsecond, ByteCounter: 1 << 20, FastRecoverySteps: 3}},
		{name: "off", transport: "rdma", provider: soft, block: `enabled = false`, want: Congestion{}},
		{name: "unknown key", transport: "rdma", provider: soft, block: `enabeld = true`, err: `An argument named "enabeld" is not expected here. Did you mean "enabled"?`},
		{name: "unknown ecn", transport: "rdma", provider: soft, block: `ecn = "ce"`, err: `unknown ECN codepoint "ce"`},
		{name: "dscp", transport: "rdma", provider: soft, block: `cnp_dscp = 64`, err: "cnp_dscp: 64 is not a whole number from -1 to 63"},
		{name: "rate unit", transport: "rdma", provider: soft, block: `line_rate = "10GB"`, err: `rate "10GB"`},
		{name: "rate range", transport: "rdma", provider: soft, block: `line_rate = "100Tbit"`, err: "line_rate: 1e+14 bits per second is out of range"},
		{name: "min above line", transport: "rdma", provider: soft, block: "line_rate = \"1Gbit\"\nmin_rate = \"2Gbit\"", err: "min_rate 2e+09 is above line_rate 1e+09"},
		{name: "g", transport: "rdma", provider: soft, block: `g = 2`, err: "g: 2 is not in (0, 1]"},
		{name: "duration", transport: "rdma", provider: soft, block: `alpha_period = "55"`, err: `want a duration like "50us"`},
		{name: "duration range", transport: "rdma", provider: soft, block: `increase_period = "2s"`, err: "increase_period: 2s is out of range"},
		{name: "negative duration", transport: "rdma", provider: soft, block: `min_cnp_interval = "-1us"`, err: "min_cnp_interval: -1µs is out of range"},
		{name: "steps", transport: "rdma", provider: soft, block: `fast_recovery_steps = 0`, err: "fast_recovery_steps: 0 is not a whole number from 1 to 1000"},
		{name: "byte counter", transport: "rdma", provider: soft, block: `byte_counter = "2TiB"`, err: "byte_counter: 2199023255552 bytes is out of range"},
		{name: "ibverbs", transport: "rdma", provider: `provider = "ibverbs"`, block: `enabled = true`, err: `set provider = "soft" (provider "ibverbs"`},
		{name: "auto", transport: "rdma", provider: "", block: `enabled = true`, err: `set provider = "soft" (provider "auto"`},
		{name: "tcp", transport: "tcp", provider: "", block: `enabled = true`, err: `needs transport rdma with provider "soft" (transport "tcp")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := ParseHCL([]byte(congestionTree(tc.transport, tc.provider, tc.block)), "cc.hcl")
			if err == nil {
				err = tree.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				if !strings.Contains(err.Error(), "cc.hcl:") {
					t.Errorf("error %v does not say where", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := tree.Port("p0").Congestion
			if c == nil {
				t.Fatal("no congestion block")
			}
			got := *c
			got.src = nil
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			// Tree.HCL writes it back as it was.
			again, err := ParseHCL(tree.HCL(), "again.hcl")
			if err != nil {
				t.Fatalf("%v\n%s", err, tree.HCL())
			}
			if !congestionEqual(c, again.Port("p0").Congestion) {
				t.Errorf("HCL round trip: %+v\n%s", again.Port("p0").Congestion, tree.HCL())
			}
			if !congestionEqual(c, tree.Clone().Port("p0").Congestion) {
				t.Error("Clone lost the congestion block")
			}
		})
	}
}

// TestCongestionDiff: a change of the congestion block restarts the
// port's listener (and so reopens its device), as other port settings.
func TestCongestionDiff(t *testing.T) {
	parse := func(block string) *Tree {
		t.Helper()
		src := `port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.0.0.1"
` + block + `
}
`
		tree, err := ParseHCL([]byte(src), "d.hcl")
		if err != nil {
			t.Fatal(err)
		}
		return tree
	}
	for _, tc := range []struct {
		name, was, now string
		restart        bool
	}{
		{"same", "congestion {\nenabled = true\n}", "congestion {\nenabled = true\n}", false},
		{"added", "", "congestion {\nenabled = true\n}", true},
		{"removed", "congestion {\nenabled = true\n}", "", true},
		{"rate", "congestion {\nenabled = true\n}", "congestion {\nenabled = true\nline_rate = \"1Gbit\"\n}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Diff(parse(tc.was), parse(tc.now))
			restart := false
			for _, p := range c.Ports {
				restart = restart || p.ID == "p0" && p.Listener
			}
			if restart != tc.restart {
				t.Errorf("listener restart %v, want %v (%+v)", restart, tc.restart, c.Ports)
			}
		})
	}
}

// TestParseRate reads rates as tc writes them.
func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"10Gbit", 10e9, true}, {"40mbit", 40e6, true}, {"2.5Gbit", 2.5e9, true}, {"1000", 1000, true}, {"7 kbit", 7e3, true},
		{"10GB", 0, false}, {"", 0, false}, {"-1Gbit", 0, false}, {"Gbit", 0, false},
	} {
		got, err := ParseRate(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseRate(%q) = %g, %v; want %g, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestCongestionShared: soft ports on one address share a device, so
// they must agree on congestion control.
func TestCongestionShared(t *testing.T) {
	port := func(name, svc, block string) string {
		return `port "` + name + `" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.0.0.1"
  service   = "` + svc + `"
` + block + `
}
`
	}
	on := "congestion {\nenabled = true\n}"
	for _, tc := range []struct {
		name, a, b string
		err        bool
	}{
		{"both on", on, on, false},
		{"both off", "", "", false},
		{"one on", on, "", true},
		{"other on", "", on, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := ParseHCL([]byte(port("a", "4420", tc.a)+port("b", "4421", tc.b)), "s.hcl")
			if err == nil {
				err = tree.Validate()
			}
			if (err != nil) != tc.err || err != nil && !strings.Contains(err.Error(), "port a on 127.0.0.1 shares its soft RDMA device") {
				t.Errorf("error %v, want one: %v", err, tc.err)
			}
		})
	}
}

// TestParseCongestionSpec reads the host CLI's and fio's one-string form.
func TestParseCongestionSpec(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Congestion
		err  string
	}{
		{spec: "on", want: Congestion{Enabled: true}},
		{spec: "off", want: Congestion{}},
		{spec: "", want: Congestion{}},
		{spec: "line_rate=25Gbit,ecn=ect1,min_cnp_interval=4us", want: Congestion{Enabled: true, LineRate: 25e9, ECN: ECNECT1, MinCNPInterval: 4 * time.Microsecond}},
		{spec: "enabled=false,min_rate=1Mbit", want: Congestion{MinRate: 1e6}},
		{spec: "g=0.5,byte_counter=1MiB,fast_recovery_steps=2,cnp_dscp=-1,alpha_period=10us,increase_period=20us,rate_reduce_period=1us,additive_increase=1Mbit,hyper_increase=10Mbit",
			want: Congestion{Enabled: true, G: 0.5, ByteCounter: 1 << 20, FastRecoverySteps: 2, CNPDSCP: -1, AlphaPeriod: 10 * time.Microsecond,
				IncreasePeriod: 20 * time.Microsecond, RateReducePeriod: time.Microsecond, AdditiveIncrease: 1e6, HyperIncrease: 10e6}},
		{spec: "yes", err: `"yes": want KEY=VALUE`},
		{spec: "line_rat=1Gbit", err: `unknown key "line_rat" (want additive_increase,`},
		{spec: "ecn=ce", err: `ecn: unknown ECN codepoint "ce"`},
		{spec: "cnp_dscp=64", err: "cnp_dscp: 64 is not a DSCP"},
		{spec: "line_rate=1Gbit,min_rate=2Gbit", err: "min_rate 2e+09 is above line_rate"},
		{spec: "min_cnp_interval=fast", err: `min_cnp_interval=fast: time: invalid duration`},
		{spec: "fast_recovery_steps=0", err: "fast_recovery_steps=0: want 1 or more"},
		{spec: "g=0", want: Congestion{Enabled: true}}, // the default
		{spec: "g=-1", err: "g: -1 is not in (0, 1]"},
	} {
		c, err := ParseCongestionSpec(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one with %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if *c != tc.want {
			t.Errorf("%q: got %+v\nwant %+v", tc.spec, *c, tc.want)
		}
	}
}

// TestCongestionSpecRoundTrip: Spec writes what ParseCongestionSpec
// reads back to the same settings.
func TestCongestionSpecRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		c    *Congestion
		want string
	}{
		{nil, "off"},
		{&Congestion{}, "off"},
		{&Congestion{Enabled: true}, "on"},
		{&Congestion{Enabled: true, ECN: "ect1", CNPDSCP: -1, LineRate: 25e9, MinRate: 1e6, AdditiveIncrease: 400e3,
			HyperIncrease: 4e6, G: 0.0625, MinCNPInterval: time.Millisecond, AlphaPeriod: 5 * time.Millisecond,
			IncreasePeriod: 55 * time.Microsecond, RateReducePeriod: 400 * time.Microsecond, ByteCounter: 100 << 10,
			FastRecoverySteps: 3},
			"enabled=true,ecn=ect1,cnp_dscp=-1,line_rate=2.5e+10,min_rate=1e+06,additive_increase=400000,hyper_increase=4e+06,g=0.0625," +
				"min_cnp_interval=1ms,alpha_period=5ms,increase_period=55µs,rate_reduce_period=400µs,byte_counter=102400,fast_recovery_steps=3"},
		{&Congestion{LineRate: 1e9}, "enabled=false,line_rate=1e+09"},
	} {
		got := tc.c.Spec()
		if got != tc.want {
			t.Errorf("Spec %q, want %q", got, tc.want)
		}
		back, err := ParseCongestionSpec(got)
		if err != nil {
			t.Fatalf("ParseCongestionSpec(%q): %v", got, err)
		}
		want := tc.c
		if want == nil {
			want = &Congestion{}
		}
		if !congestionEqual(back, want) {
			t.Errorf("%q read back as %+v, want %+v", got, back, want)
		}
	}
}
