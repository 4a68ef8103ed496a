package metrics

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
)

// manyControllers is a target with n controllers of one host in one
// subsystem, an admin and an I/O queue each (issue 22: one allowed host
// creating 300 controllers took nvmetd from 457 series to 11,257).
func manyControllers(n int) fakeTarget {
	ss := target.SubsystemStats{NQN: testNQN}
	for i := range n {
		ss.Controllers = append(ss.Controllers, target.ControllerStats{CntlID: uint16(i + 1), HostNQN: testHost, Port: 1,
			Queues: []target.QueueStats{{QID: 0, Size: 32}, {QID: 1, Size: 128}}})
	}
	return fakeTarget{target.Stats{Subsystems: []target.SubsystemStats{ss}}}
}

// fakeSoftDevice is a soft device with n live QPs.
type fakeSoftDevice struct {
	rdma.Device // not called
	n           int
}

func (f fakeSoftDevice) Name() string      { return "soft-fake" }
func (f fakeSoftDevice) Addr() netip.Addr  { return netip.MustParseAddr("127.62.0.1") }
func (f fakeSoftDevice) Stats() soft.Stats { return soft.Stats{} }
func (f fakeSoftDevice) QPStats(buf []soft.QPStats) []soft.QPStats {
	buf = buf[:0]
	for i := range f.n {
		buf = append(buf, soft.QPStats{QPN: uint32(i + 2), Type: rdma.QPTypeRC, State: rdma.QPSRTS, Peer: netip.MustParseAddr("127.62.0.2"), DestQPN: uint32(i + 2)})
	}
	return buf
}

// gather returns the families of a registry of cs, by name.
func gather(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func series(fams map[string]*dto.MetricFamily, name string) int {
	if mf := fams[name]; mf != nil {
		return len(mf.GetMetric())
	}
	return 0
}

// TestTargetSeriesBounded: by default the target's series do not grow
// with the controllers hosts create beyond a bound: no per-queue series,
// per-controller series for DefaultMaxControllers controllers, the rest
// counted; controller_info has no hostnqn (an unauthenticated endpoint
// must not hand out what an I/O queue Connect to another host's
// controller needs besides its CNTLID).
func TestTargetSeriesBounded(t *testing.T) {
	const n = 300
	fams := gather(t, NewTargetCollector(manyControllers(n)))
	for _, name := range []string{"nvmeof_target_queue_size", "nvmeof_target_queue_inflight_commands"} {
		if got := series(fams, name); got != 0 {
			t.Errorf("%s: %d series by default, want none", name, got)
		}
	}
	for _, name := range []string{"nvmeof_target_controller_info", "nvmeof_target_controller_io_queues", "nvmeof_target_controller_inflight_commands"} {
		if got := series(fams, name); got != DefaultMaxControllers {
			t.Errorf("%s: %d series for %d controllers, want %d", name, got, n, DefaultMaxControllers)
		}
	}
	wantValue(t, fams, "nvmeof_target_controllers_not_exported", map[string]string{"subnqn": testNQN}, n-DefaultMaxControllers)
	wantValue(t, fams, "nvmeof_target_controllers", map[string]string{"subnqn": testNQN}, n)
	for _, m := range fams["nvmeof_target_controller_info"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "hostnqn" {
				t.Fatalf("controller_info has a hostnqn label by default: %v", m)
			}
		}
	}

	// Opted in: per-queue series and hostnqn, still bounded.
	fams = gather(t, NewTargetCollectorWith(manyControllers(n), TargetOptions{PerQueue: true, HostNQN: true, MaxControllers: 10}))
	if got := series(fams, "nvmeof_target_queue_size"); got != 20 {
		t.Errorf("queue_size: %d series, want 20 (10 controllers, 2 queues)", got)
	}
	if got := series(fams, "nvmeof_target_queue_inflight_commands"); got != 10 {
		t.Errorf("queue_inflight_commands: %d series, want 10", got)
	}
	wantValue(t, fams, "nvmeof_target_controller_info", map[string]string{"subnqn": testNQN, "cntlid": "1", "hostnqn": testHost, "port": "1"}, 1)
	wantValue(t, fams, "nvmeof_target_controllers_not_exported", map[string]string{"subnqn": testNQN}, n-10)
}

// TestRDMAQPSeriesBounded: per-QP series cover at most MaxQPs QPs of a
// device (DefaultMaxQPs when 0, none when negative, nvmetd's default);
// the rest are counted.
func TestRDMAQPSeriesBounded(t *testing.T) {
	const n = 601
	dev := func() []rdma.Device { return []rdma.Device{fakeSoftDevice{n: n}} }
	for _, tc := range []struct {
		max, want int
	}{{0, DefaultMaxQPs}, {-1, 0}, {5, 5}} {
		fams := gather(t, &RDMACollector{Devices: dev, MaxQPs: tc.max})
		for _, name := range []string{"nvmeof_rdma_qp_info", "nvmeof_rdma_qp_packets_sent_total"} {
			if got := series(fams, name); got != tc.want {
				t.Errorf("MaxQPs %d: %s: %d series, want %d", tc.max, name, got, tc.want)
			}
		}
		wantValue(t, fams, "nvmeof_rdma_qps_not_exported", map[string]string{"device": "soft-fake"}, float64(n-tc.want))
		if tc.want > 0 {
			// The first by QP number.
			wantValue(t, fams, "nvmeof_rdma_qp_info", map[string]string{"device": "soft-fake", "qpn": strconv.Itoa(2)}, 1)
		}
	}
}
