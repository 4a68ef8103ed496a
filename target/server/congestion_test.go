package server

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestCongestionPort: a soft port's congestion block reaches its device:
// the device's RC QPs run DCQCN at the block's line rate; without the
// block (or with enabled = false) they run none.
func TestCongestionPort(t *testing.T) {
	for i, tc := range []struct {
		name  string
		block string
		rate  uint64
	}{
		{"on", "congestion {\n enabled = true\n line_rate = \"3Gbit\"\n ecn = \"ect1\"\n}", 3e9},
		{"defaults", "congestion {\n enabled = true\n}", soft.DefaultLineRate},
		{"off", "congestion {\n enabled = false\n line_rate = \"3Gbit\"\n}", 0},
		{"none", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := ccTree(t, "127.78.3."+string(rune('1'+i)), tc.block)
			s := New(Options{Logger: hclog.NewNullLogger(), LoopNetwork: loop.NewNetwork()})
			defer s.Close()
			if err := s.Apply(tree); err != nil {
				t.Fatal(err)
			}
			devs := s.Devices()
			if len(devs) != 1 {
				t.Fatalf("%d devices", len(devs))
			}
			sd, ok := devs[0].(*soft.Device)
			if !ok {
				t.Fatalf("device %T, want soft", devs[0])
			}
			pd, err := sd.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			cq, err := sd.CreateCQ(4)
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
			for _, st := range sd.QPStats(nil) {
				if st.QPN == qp.QPN() {
					rate = st.RPRate
				}
			}
			if rate != tc.rate {
				t.Errorf("QP rate %d b/s, want %d", rate, tc.rate)
			}
		})
	}
}

// TestCongestionReload: a reload that changes a soft port's congestion
// block reaches the open device, which stays open (the same device, its
// QPs carry on): an existing RC QP moves to the new line rate, then runs
// no DCQCN once the block is gone; each change is logged at info, an
// unchanged reload changes and logs nothing.
func TestCongestionReload(t *testing.T) {
	top := t
	var logs syncBuffer
	s := New(Options{Logger: testLog(&logs), LoopNetwork: loop.NewNetwork()})
	defer s.Close()
	var dev *soft.Device
	var qp rdma.QP
	for i, tc := range []struct {
		name  string
		block string
		port  string // the port's other attributes
		rate  uint64 // the existing QP's
		want  *soft.CongestionConfig
		log   string
	}{
		{name: "open", block: "congestion {\n enabled = true\n line_rate = \"3Gbit\"\n}", rate: 3e9,
			want: &soft.CongestionConfig{Enabled: true, LineRate: 3e9}},
		{name: "rate", block: "congestion {\n enabled = true\n line_rate = \"5Gbit\"\n ecn = \"ect1\"\n}", rate: 5e9,
			want: &soft.CongestionConfig{Enabled: true, LineRate: 5e9, ECT1: true}, log: "changes=\"ECT1 false -> true, LineRate 3e+09 -> 5e+09\""},
		{name: "unchanged", block: "congestion {\n enabled = true\n line_rate = \"5Gbit\"\n ecn = \"ect1\"\n}", port: "max_pending = 64", rate: 5e9,
			want: &soft.CongestionConfig{Enabled: true, LineRate: 5e9, ECT1: true}},
		{name: "off", block: "", rate: 0, log: "changes=\"on -> off\""},
		{name: "on", block: "congestion {\n enabled = true\n}", rate: soft.DefaultLineRate,
			want: &soft.CongestionConfig{Enabled: true}, log: "changes=\"off -> on: defaults\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := ccTree(t, "127.78.4.1", tc.port+"\n  "+tc.block)
			before := logs.String()
			if err := s.Apply(tree); err != nil {
				t.Fatal(err)
			}
			devs := s.Devices()
			if len(devs) != 1 {
				t.Fatalf("%d devices", len(devs))
			}
			sd, ok := devs[0].(*soft.Device)
			if !ok {
				t.Fatalf("device %T, want soft", devs[0])
			}
			if i == 0 {
				dev = sd
				pd, err := sd.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				cq, err := sd.CreateCQ(4)
				if err != nil {
					t.Fatal(err)
				}
				qp, err = pd.CreateQP(&rdma.QPInitAttr{Type: rdma.QPTypeRC, SendCQ: cq, RecvCQ: cq,
					Cap: rdma.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				top.Cleanup(func() { qp.Destroy() })
			} else if sd != dev {
				t.Fatal("the device was reopened")
			}
			if pd := s.PortDevice("p1"); pd != dev || s.PortDevice("p2") != nil {
				t.Fatalf("PortDevice: %v, %v", pd, s.PortDevice("p2"))
			}
			var rate uint64
			for _, st := range sd.QPStats(nil) {
				if st.QPN == qp.QPN() {
					rate = st.RPRate
				}
			}
			if rate != tc.rate {
				t.Errorf("QP rate %d b/s, want %d", rate, tc.rate)
			}
			if got := sd.Congestion(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("device's congestion control %+v, want %+v", got, tc.want)
			}
			logged := strings.TrimPrefix(logs.String(), before)
			changed := strings.Contains(logged, "congestion control changed")
			if changed != (tc.log != "") || !strings.Contains(logged, tc.log) {
				t.Errorf("log, want %q:\n%s", tc.log, logged)
			}
			if strings.Contains(logged, "[WARN]") || strings.Contains(logged, "[ERROR]") {
				t.Errorf("log:\n%s", logged)
			}
		})
	}
}

// ccTree is a valid configuration of one soft port on addr, with body
// (port attributes and blocks) added, exporting one subsystem.
func ccTree(t *testing.T, addr, body string) *configfs.Tree {
	t.Helper()
	src := `
port "p1" {
  address  = "` + addr + `"
  provider = "soft"
  ` + body + `
}
subsystem "` + nqn + `" {
  ports          = ["p1"]
  allow_any_host = true
  ` + ns1 + `
}
`
	tree, err := configfs.ParseHCL([]byte(src), "cc.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Validate(); err != nil {
		t.Fatal(err)
	}
	return tree
}
