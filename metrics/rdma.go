package metrics

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// softStatser is the soft provider's device (*soft.Device).
type softStatser interface {
	Stats() soft.Stats
}

// DefaultSysfsRoot is where rdma-core devices' counters are read
// (/sys/class/infiniband/DEV/ports/N/{counters,hw_counters}).
const DefaultSysfsRoot = "/sys/class/infiniband"

// RDMACollector exports the counters of RDMA devices: the soft provider's
// own counters, and for other (rdma-core) devices the kernel's port
// counters read from sysfs at scrape time.
type RDMACollector struct {
	// Devices returns the devices open now; called at every scrape.
	Devices func() []rdma.Device
	// SysfsRoot is the sysfs class directory (DefaultSysfsRoot when
	// empty); a test points it at a copy.
	SysfsRoot string
	// MaxQPs bounds the live QPs of a soft device that have series of
	// their own (nvmeof_rdma_qp_*), the first by QP number; the others
	// are counted in nvmeof_rdma_qps_not_exported. 0: DefaultMaxQPs;
	// negative: no per-QP series (nvmetd's default: its hosts create
	// the QPs).
	MaxQPs int
}

// DefaultMaxQPs is RDMACollector's bound on QPs with series of their own
// when MaxQPs is 0: a connection daemon's own queues fit well under it.
const DefaultMaxQPs = 256

var (
	rdmaLabels = []string{"device", "provider"}

	// softHelp is the help text of each named counter
	// (provider.SoftCounters, nvmeof_rdma_NAME_total).
	softHelp = map[string]string{
		"packets_sent":               "Packets sent (soft: each packet of a GSO send; sysfs: port_xmit_packets).",
		"packets_received":           "Packets received (sysfs: port_rcv_packets).",
		"bytes_sent":                 "Bytes sent (soft: UDP payload; sysfs: port_xmit_data × 4).",
		"bytes_received":             "Bytes received (soft: UDP payload; sysfs: port_rcv_data × 4).",
		"send_errors":                "Packets the kernel refused to send (soft).",
		"retransmissions":            "Request packets sent again (soft: go-back-N; sysfs hw_counters: rnr/seq retries, duplicate requests).",
		"retransmission_timeouts":    "Retransmission timer expiries that caused a retry (sysfs hw_counters: local_ack_timeout_err).",
		"rnr_naks_sent":              "RNR NAKs sent.",
		"rnr_naks_received":          "RNR NAKs received (sysfs hw_counters: rnr_nak_retry_err).",
		"seq_naks_sent":              "NAK PSN sequence errors sent (sysfs hw_counters: out_of_sequence).",
		"seq_naks_received":          "NAK PSN sequence errors received (sysfs hw_counters: packet_seq_err).",
		"error_naks_sent":            "NAKs invalid request, remote access and remote operational error sent (soft).",
		"error_naks_received":        "NAKs invalid request, remote access and remote operational error received (soft).",
		"icrc_errors":                "Received packets dropped for a bad ICRC (sysfs: rx_icrc_encapsulated or port_rcv_errors).",
		"duplicate_requests":         "Duplicate requests received (sysfs hw_counters: duplicate_request).",
		"out_of_sequence":            "Requests received after a gap in PSNs (sysfs hw_counters: out_of_sequence).",
		"malformed_packets":          "Received packets dropped as unparsable or truncated (soft).",
		"unknown_qp_packets":         "Received packets for a QP number not in use (soft).",
		"dropped_packets":            "Received packets dropped for the QP's state, opcode class or P_Key (soft).",
		"acks_sent":                  "Acknowledge packets sent, ACKs and NAKs (soft).",
		"acks_received":              "Acknowledge packets received (soft).",
		"np_ecn_marked_roce_packets": "CE-marked RoCE packets received for RC QPs, the notification point's input (soft: counted with congestion control on; sysfs hw_counters: np_ecn_marked_roce_packets).",
		"np_cnp_sent":                "Congestion Notification Packets sent (sysfs hw_counters: np_cnp_sent).",
		"rp_cnp_handled":             "CNPs received that cut or held a QP's rate (sysfs hw_counters: rp_cnp_handled).",
		"rp_cnp_ignored":             "CNPs received and dropped: unknown QP, congestion control off, QP not sending (sysfs hw_counters: rp_cnp_ignored).",
		"paced_drops":                "Responder packets a rate-limited soft QP's full paced queue dropped (go-back-N resends them).",
	}

	softDescs = func() []softCounter {
		out := make([]softCounter, 0, len(provider.SoftCounters))
		for _, c := range provider.SoftCounters {
			name := c.Name + "_total"
			out = append(out, softCounter{name, prometheus.NewDesc("nvmeof_rdma_"+name, softHelp[c.Name], rdmaLabels, nil), c.Get})
		}
		return out
	}()

	// sysfsDesc exports every sysfs counter file as is (promtool wants
	// _total on counters and no "counter" in the name).
	sysfsDesc = prometheus.NewDesc("nvmeof_rdma_sysfs_port_total",
		"A counter of an rdma-core device's port as the kernel reports it in sysfs (counters/ and hw_counters/), named by counter; "+
			"RoCE ECN/CNP counters (np_cnp_sent, rp_cnp_handled, np_ecn_marked_roce_packets, rp_cnp_ignored) show here where the NIC has them, and in nvmeof_rdma_np_*/rp_* too.",
		[]string{"device", "port", "group", "name"}, nil)
	rdmaInfo = prometheus.NewDesc("nvmeof_rdma_device_info", "One series per open RDMA device.", []string{"device", "provider", "addr"}, nil)
)

type softCounter struct {
	name string
	desc *prometheus.Desc
	get  func(*soft.Stats) uint64
}

// softByName finds the named metrics by their name without the prefix.
var softByName = func() map[string]*prometheus.Desc {
	m := map[string]*prometheus.Desc{}
	for _, c := range softDescs {
		m[c.name] = c.desc
	}
	return m
}()

// Describe implements prometheus.Collector.
func (c *RDMACollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range softDescs {
		ch <- s.desc
	}
	ch <- sysfsDesc
	ch <- rdmaInfo
	describeQPs(ch)
}

// Collect implements prometheus.Collector.
func (c *RDMACollector) Collect(ch chan<- prometheus.Metric) {
	if c.Devices == nil {
		return
	}
	root := c.SysfsRoot
	if root == "" {
		root = DefaultSysfsRoot
	}
	seen := map[string]bool{}
	var qps []soft.QPStats
	for _, d := range c.Devices() {
		name := d.Name()
		if seen[name] {
			continue // a device shared by several ports, listed twice
		}
		seen[name] = true
		if s, ok := d.(softStatser); ok {
			ch <- prometheus.MustNewConstMetric(rdmaInfo, prometheus.GaugeValue, 1, name, "soft", d.Addr().String())
			st := s.Stats()
			for _, sc := range softDescs {
				ch <- prometheus.MustNewConstMetric(sc.desc, prometheus.CounterValue, float64(sc.get(&st)), name, "soft")
			}
			if q, ok := d.(softQPStatser); ok {
				limit := c.MaxQPs
				if limit == 0 {
					limit = DefaultMaxQPs
				}
				qps = collectQPs(ch, name, q, qps, limit)
			}
			continue
		}
		ch <- prometheus.MustNewConstMetric(rdmaInfo, prometheus.GaugeValue, 1, name, "ibverbs", d.Addr().String())
		collectSysfs(ch, root, name)
	}
}

// collectSysfs exports the port counters of device name: each file as
// nvmeof_rdma_sysfs_port_total, and those provider.SysfsCounters names summed over the
// ports into the named metrics.
func collectSysfs(ch chan<- prometheus.Metric, root, name string) {
	ports, err := os.ReadDir(filepath.Join(root, name, "ports"))
	if err != nil {
		return // no sysfs (a container) or the device went away
	}
	sums := map[string]uint64{} // by group/file
	for _, p := range ports {
		for _, group := range []string{"counters", "hw_counters"} {
			dir := filepath.Join(root, name, "ports", p.Name(), group)
			files, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, f := range files {
				if !f.Type().IsRegular() {
					continue // a FIFO or device would block the scrape
				}
				v, ok := readCounter(filepath.Join(dir, f.Name()))
				if !ok {
					continue
				}
				ch <- prometheus.MustNewConstMetric(sysfsDesc, prometheus.CounterValue, float64(v), name, labelValue(p.Name()), group, labelValue(f.Name()))
				sums[group+"/"+f.Name()] += v
			}
		}
	}
	for _, m := range provider.SysfsCounters {
		for _, f := range m.Files {
			if v, ok := sums[f]; ok {
				ch <- prometheus.MustNewConstMetric(softByName[m.Name+"_total"], prometheus.CounterValue, float64(v*m.Scale), name, "ibverbs")
				break
			}
		}
	}
}

// readCounter reads a sysfs counter file: one unsigned decimal number.
// It reads at most maxCounterLen+1 bytes: a longer file is no counter.
func readCounter(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var b [maxCounterLen + 1]byte
	n, err := io.ReadFull(f, b[:])
	if n > maxCounterLen || err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, false
	}
	return parseCounter(b[:n])
}

// maxCounterLen bounds a counter file's text.
const maxCounterLen = 64

// parseCounter parses a sysfs counter's text (a decimal number and a
// newline).
func parseCounter(b []byte) (uint64, bool) {
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}
