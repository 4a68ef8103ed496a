package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target"
)

// TargetStatser is what the target collector reads at scrape time:
// *target.Target implements it.
type TargetStatser interface {
	Stats() target.Stats
}

// Opcode label values of the I/O commands.
func opcodeName(op nvme.IOOpcode) string {
	switch op {
	case nvme.IORead:
		return "read"
	case nvme.IOWrite:
		return "write"
	case nvme.IOFlush:
		return "flush"
	case nvme.IOWriteZeroes:
		return "write_zeroes"
	case nvme.IODatasetManagement:
		return "dataset_management"
	case nvme.IOCompare:
		return "compare"
	}
	return "0x" + strconv.FormatUint(uint64(op), 16)
}

// statusName is the status label: the status's name in snake case
// ("lba_out_of_range"), as stable as nvme.Status.Name.
func statusName(s nvme.Status) string { return snake(s.Name()) }

// snake turns a name into a lower-case label value with underscores.
func snake(name string) string {
	n := strings.ToLower(name)
	var b strings.Builder
	under := false
	for _, r := range n {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if under && b.Len() > 0 {
				b.WriteByte('_')
			}
			under = false
			b.WriteRune(r)
			continue
		}
		under = true
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

type targetCollector struct {
	src  TargetStatser
	opts TargetOptions

	ioCmds, ioBytes, ioErrors, ioLatency          *prometheus.Desc
	nsEnabled                                     *prometheus.Desc
	errors                                        *prometheus.Desc
	ctrlCreated, ctrlRemoved, ctrls, kaTimeouts   *prometheus.Desc
	auths                                         *prometheus.Desc
	ctrlInfo, ctrlInFlight, queueInFlight, qDepth *prometheus.Desc
	ctrlQueues, ctrlsNotExported                  *prometheus.Desc
	aersAborted                                   *prometheus.Desc
}

// DefaultMaxControllers is how many controllers have series of their own
// unless TargetOptions.MaxControllers says otherwise.
const DefaultMaxControllers = 256

// TargetOptions say which per-controller and per-queue series the target
// collector exports: hosts create controllers and queues, and an
// unauthenticated endpoint's series must not grow with what they do, nor
// tell them what another host's controller is.
type TargetOptions struct {
	// PerQueue adds queue_size and queue_inflight_commands, one series per
	// queue of each controller exported (off: they were most of the
	// series when one host created 300 controllers).
	PerQueue bool
	// HostNQN adds the hostnqn label to controller_info. Off, because an
	// I/O queue Connect to a controller needs its CNTLID and its host NQN
	// only (without DH-HMAC-CHAP): the endpoint must not publish both.
	HostNQN bool
	// MaxControllers bounds the controllers, over all subsystems, with
	// series of their own (controller_info, controller_io_queues,
	// controller_inflight_commands, and the per-queue ones); the others
	// are counted in controllers_not_exported. 0: DefaultMaxControllers;
	// negative: none.
	MaxControllers int
}

// NewTargetCollector returns a collector of the target's counters
// (docs/metrics.md lists them), read from src at every scrape, with the
// default TargetOptions.
func NewTargetCollector(src TargetStatser) prometheus.Collector {
	return NewTargetCollectorWith(src, TargetOptions{})
}

// NewTargetCollectorWith is NewTargetCollector with options.
func NewTargetCollectorWith(src TargetStatser, opts TargetOptions) prometheus.Collector {
	if opts.MaxControllers == 0 {
		opts.MaxControllers = DefaultMaxControllers
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("nvmeof_target_"+name, help, labels, nil)
	}
	ns := []string{"subnqn", "nsid", "opcode"}
	ctrl := []string{"subnqn", "cntlid"}
	info := []string{"subnqn", "cntlid", "port"}
	if opts.HostNQN {
		info = []string{"subnqn", "cntlid", "hostnqn", "port"}
	}
	return &targetCollector{
		src:              src,
		opts:             opts,
		ioCmds:           d("io_commands_total", "I/O commands completed by the backend, failed or not.", ns...),
		ioBytes:          d("io_bytes_total", "Data bytes carried by successful I/O commands (Read, Write, Compare).", ns...),
		ioErrors:         d("io_errors_total", "I/O commands the backend completed with an error status.", ns...),
		ioLatency:        d("io_latency_seconds", "I/O command time from the transport's hand-off to completion (measured while the endpoint is on).", ns...),
		nsEnabled:        d("namespace_enabled", "1 for an enabled namespace, 0 for a disabled one.", "subnqn", "nsid"),
		errors:           d("errors_total", "Completions with an error status, every queue and command kind, by NVMe status.", "subnqn", "status", "sct", "sc"),
		ctrlCreated:      d("controllers_created_total", "Controllers created by an admin Connect.", "subnqn"),
		ctrlRemoved:      d("controllers_removed_total", "Controllers torn down (disconnect, keep-alive timeout, fatal error, reconfiguration).", "subnqn"),
		ctrls:            d("controllers", "Controllers connected now.", "subnqn"),
		ctrlsNotExported: d("controllers_not_exported", "Connected controllers without series of their own (past the daemon's bound on per-controller series).", "subnqn"),
		kaTimeouts:       d("keep_alive_timeouts_total", "Controllers torn down because their keep-alive timer expired.", "subnqn"),
		aersAborted:      d("aers_aborted_total", "Asynchronous Event Requests ended with Internal Error because their controller went away (every disconnect ends the host's; not in errors_total).", "subnqn"),
		auths:            d("authentications_total", "DH-HMAC-CHAP transactions by result (a queue that timed out counts as a failure).", "subnqn", "result"),
		ctrlInfo:         d("controller_info", "One series per connected controller (up to the daemon's bound), naming its port (and host, if the daemon is told to).", info...),
		ctrlQueues:       d("controller_io_queues", "I/O queues connected to the controller.", ctrl...),
		ctrlInFlight:     d("controller_inflight_commands", "I/O commands handed to the backend and not completed, over the controller's queues.", ctrl...),
		queueInFlight:    d("queue_inflight_commands", "I/O commands handed to the backend and not completed, per queue.", "subnqn", "cntlid", "qid"),
		qDepth:           d("queue_size", "Queue entries (SQSIZE + 1).", "subnqn", "cntlid", "qid"),
	}
}

func (c *targetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ioCmds, c.ioBytes, c.ioErrors, c.ioLatency, c.nsEnabled, c.errors,
		c.ctrlCreated, c.ctrlRemoved, c.ctrls, c.ctrlsNotExported, c.kaTimeouts, c.aersAborted, c.auths, c.ctrlInfo, c.ctrlQueues, c.ctrlInFlight,
		c.queueInFlight, c.qDepth} {
		ch <- d
	}
}

// latencyUpperBounds are the histogram's bucket bounds in seconds.
var latencyUpperBounds = func() []float64 {
	b := make([]float64, target.LatencyBuckets)
	for i := range b {
		b[i] = target.LatencyBound(i).Seconds()
	}
	return b
}()

func (c *targetCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	budget := c.opts.MaxControllers
	for _, s := range st.Subsystems {
		nqn := s.NQN
		counter(c.ctrlCreated, s.ControllersCreated, nqn)
		counter(c.ctrlRemoved, s.ControllersRemoved, nqn)
		gauge(c.ctrls, float64(len(s.Controllers)), nqn)
		counter(c.kaTimeouts, s.KeepAliveTimeouts, nqn)
		counter(c.aersAborted, s.AERsAborted, nqn)
		if !s.Discovery {
			counter(c.auths, s.AuthSucceeded, nqn, "success")
			counter(c.auths, s.AuthFailed, nqn, "failure")
		}
		for _, e := range s.Errors {
			counter(c.errors, e.Count, nqn, statusName(e.Status),
				strconv.Itoa(int(e.Status.SCT())), "0x"+strconv.FormatUint(uint64(e.Status.SC()), 16))
		}
		for _, n := range s.Namespaces {
			nsid := strconv.FormatUint(uint64(n.NSID), 10)
			enabled := 0.0
			if n.Enabled {
				enabled = 1
			}
			gauge(c.nsEnabled, enabled, nqn, nsid)
			for _, o := range n.Ops {
				op := opcodeName(o.Opcode)
				counter(c.ioCmds, o.Commands, nqn, nsid, op)
				counter(c.ioBytes, o.Bytes, nqn, nsid, op)
				counter(c.ioErrors, o.Errors, nqn, nsid, op)
				if st.LatencyEnabled {
					ch <- constHistogram(c.ioLatency, o.LatencyBuckets[:], o.LatencyCount, o.LatencySum.Seconds(), nqn, nsid, op)
				}
			}
		}
		budget = c.collectControllers(ch, nqn, s.Controllers, budget)
	}
}

// collectControllers exports the series of up to budget of a subsystem's
// controllers, counts the others, and returns what is left of budget.
func (c *targetCollector) collectControllers(ch chan<- prometheus.Metric, nqn string, ctrls []target.ControllerStats, budget int) int {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n := min(len(ctrls), max(budget, 0))
	gauge(c.ctrlsNotExported, float64(len(ctrls)-n), nqn)
	for _, ct := range ctrls[:n] {
		id := strconv.Itoa(int(ct.CntlID))
		port := strconv.Itoa(int(ct.Port))
		if c.opts.HostNQN {
			gauge(c.ctrlInfo, 1, nqn, id, labelValue(ct.HostNQN), port)
		} else {
			gauge(c.ctrlInfo, 1, nqn, id, port)
		}
		var inflight int64
		ioqs := 0
		for _, q := range ct.Queues {
			qid := strconv.Itoa(int(q.QID))
			if c.opts.PerQueue {
				gauge(c.qDepth, float64(q.Size), nqn, id, qid)
			}
			if q.QID == 0 {
				continue
			}
			ioqs++
			inflight += q.InFlight
			if c.opts.PerQueue {
				gauge(c.queueInFlight, float64(q.InFlight), nqn, id, qid)
			}
		}
		gauge(c.ctrlQueues, float64(ioqs), nqn, id)
		gauge(c.ctrlInFlight, float64(inflight), nqn, id)
	}
	return budget - n
}

// constHistogram builds a histogram from per-bucket counts (the last one
// above every bound in latencyUpperBounds). The count is the sum of the
// buckets, read in one pass, so that the exposition stays consistent
// while the counters move (count ≥ every bucket).
func constHistogram(d *prometheus.Desc, perBucket []uint64, _ uint64, sum float64, labels ...string) prometheus.Metric {
	cum := make(map[float64]uint64, len(latencyUpperBounds))
	var n uint64
	for i, ub := range latencyUpperBounds {
		n += perBucket[i]
		cum[ub] = n
	}
	n += perBucket[len(latencyUpperBounds)]
	return prometheus.MustNewConstHistogram(d, n, sum, cum, labels...)
}
