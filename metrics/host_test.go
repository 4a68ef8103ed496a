package metrics

import (
	"testing"

	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target"
)

// TestLatencyBoundsAgree: the host and target histograms share the
// bucket bounds constHistogram exports.
func TestLatencyBoundsAgree(t *testing.T) {
	if initiator.LatencyBuckets != target.LatencyBuckets {
		t.Fatalf("buckets: host %d, target %d", initiator.LatencyBuckets, target.LatencyBuckets)
	}
	for i := range target.LatencyBuckets {
		if initiator.LatencyBound(i) != target.LatencyBound(i) {
			t.Errorf("bound %d: host %v, target %v", i, initiator.LatencyBound(i), target.LatencyBound(i))
		}
	}
}

// TestHostMetrics runs I/O of known count from an in-process host and
// checks that the host's and the target's counters both agree with it.
func TestHostMetrics(t *testing.T) {
	lt := newLoopTarget(t)
	lt.ctrl.EnableLatencyStats(true)
	reg, err := NewRegistry(NewTargetCollector(lt.tgt), NewHostCollector(lt.ctrl, "nvmeof7"))
	must(t, err)
	const writes, reads, size = 13, 8, 8192
	buf := make([]byte, size)
	for i := range writes {
		_, err := lt.ns.WriteAt(buf, int64(i*size))
		must(t, err)
	}
	for i := range reads {
		_, err := lt.ns.ReadAt(buf, int64(i*size))
		must(t, err)
	}
	fams, body := scrape(t, Handler(reg, false))
	host := func(op string) map[string]string {
		return map[string]string{"controller": "nvmeof7", "subnqn": testNQN, "nsid": "1", "opcode": op}
	}
	for _, c := range []struct {
		op string
		n  int
	}{{"write", writes}, {"read", reads}} {
		wantValue(t, fams, "nvmeof_host_io_commands_total", host(c.op), float64(c.n))
		wantValue(t, fams, "nvmeof_host_io_bytes_total", host(c.op), float64(c.n*size))
		wantValue(t, fams, "nvmeof_host_io_latency_seconds", host(c.op), float64(c.n))
		wantValue(t, fams, "nvmeof_host_io_errors_total", host(c.op), 0)
		tl := map[string]string{"subnqn": testNQN, "nsid": "1", "opcode": c.op}
		wantValue(t, fams, "nvmeof_target_io_commands_total", tl, float64(c.n))
		wantValue(t, fams, "nvmeof_target_io_bytes_total", tl, float64(c.n*size))
	}
	base := map[string]string{"controller": "nvmeof7", "subnqn": testNQN}
	wantValue(t, fams, "nvmeof_host_controller_live", base, 1)
	wantValue(t, fams, "nvmeof_host_reconnects_total", base, 0)
	wantValue(t, fams, "nvmeof_host_command_timeouts_total", base, 0)
	wantValue(t, fams, "nvmeof_host_inflight_commands", base, 0)
	checkPromtool(t, body)
}
