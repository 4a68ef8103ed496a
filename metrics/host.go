package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmeof/nvmeof/initiator"
)

// HostStatser is what the host collector reads at scrape time:
// *initiator.Controller implements it.
type HostStatser interface {
	Stats() initiator.HostStats
	State() initiator.State
	SubsystemNQN() string
}

type hostCollector struct {
	src  HostStatser
	name string // the controller's name (nvmeofN)

	ioCmds, ioBytes, ioErrors, ioLatency        *prometheus.Desc
	timeouts, aborts, resets                    *prometheus.Desc
	recoveries, reconnects, reconnectFails      *prometheus.Desc
	queueInUse, queueDepth, ctrlInUse, ctrlLive *prometheus.Desc
}

// NewHostCollector returns a collector of a host controller's counters
// (docs/metrics.md), labelled with its subsystem NQN and name (the
// connection daemon's nvmeofN).
func NewHostCollector(src HostStatser, name string) prometheus.Collector {
	d := func(n, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("nvmeof_host_"+n, help, append([]string{"controller", "subnqn"}, labels...), nil)
	}
	return &hostCollector{
		src:            src,
		name:           name,
		ioCmds:         d("io_commands_total", "I/O commands the transport completed, failed or not (nsid 0: NSIDs above 32).", "nsid", "opcode"),
		ioBytes:        d("io_bytes_total", "Data bytes of the successful I/O commands.", "nsid", "opcode"),
		ioErrors:       d("io_errors_total", "I/O commands completed with an error status or a transport error.", "nsid", "opcode"),
		ioLatency:      d("io_latency_seconds", "I/O command time from submission to completion.", "nsid", "opcode"),
		timeouts:       d("command_timeouts_total", "Commands (admin and I/O) that timed out."),
		aborts:         d("aborts_total", "Abort commands for timed-out commands that the controller answered."),
		resets:         d("queue_resets_total", "I/O queues reset after a command timed out."),
		recoveries:     d("recoveries_total", "Association failures that started error recovery (reconnecting)."),
		reconnects:     d("reconnects_total", "Successful reconnects."),
		reconnectFails: d("reconnect_failures_total", "Reconnect attempts that failed."),
		queueInUse:     d("queue_inflight_commands", "Command slots of an I/O queue in use.", "qid"),
		queueDepth:     d("queue_depth", "Command slots of an I/O queue.", "qid"),
		ctrlInUse:      d("inflight_commands", "Command slots in use over the I/O queues."),
		ctrlLive:       d("controller_live", "1 while the controller is live, 0 while it reconnects or after it ended."),
	}
}

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ioCmds, c.ioBytes, c.ioErrors, c.ioLatency, c.timeouts, c.aborts,
		c.resets, c.recoveries, c.reconnects, c.reconnectFails, c.queueInUse, c.queueDepth, c.ctrlInUse, c.ctrlLive} {
		ch <- d
	}
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	base := []string{c.name, c.src.SubsystemNQN()}
	lv := func(extra ...string) []string { return append(append([]string(nil), base...), extra...) }
	counter := func(d *prometheus.Desc, v uint64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.timeouts, st.Timeouts, base)
	counter(c.aborts, st.Aborts, base)
	counter(c.resets, st.QueueResets, base)
	counter(c.recoveries, st.Recoveries, base)
	counter(c.reconnects, st.Reconnects, base)
	counter(c.reconnectFails, st.ReconnectFailures, base)
	live := 0.0
	if c.src.State() == initiator.StateLive {
		live = 1
	}
	gauge(c.ctrlLive, live, base)
	for _, n := range st.Namespaces {
		nsid := strconv.FormatUint(uint64(n.NSID), 10)
		for _, o := range n.Ops {
			l := lv(nsid, opcodeName(o.Opcode))
			counter(c.ioCmds, o.Commands, l)
			counter(c.ioBytes, o.Bytes, l)
			counter(c.ioErrors, o.Errors, l)
			if st.LatencyEnabled {
				ch <- constHistogram(c.ioLatency, o.LatencyBuckets[:], o.LatencyCount, o.LatencySum.Seconds(), l...)
			}
		}
	}
	inUse := 0
	for _, q := range st.Queues {
		qid := strconv.Itoa(int(q.QID))
		gauge(c.queueInUse, float64(q.InUse), lv(qid))
		gauge(c.queueDepth, float64(q.Depth), lv(qid))
		inUse += q.InUse
	}
	gauge(c.ctrlInUse, float64(inUse), base)
}
