package server

import (
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
			src := `
port "p1" {
  address  = "127.78.3.` + string(rune('1'+i)) + `"
  provider = "soft"
  ` + tc.block + `
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
