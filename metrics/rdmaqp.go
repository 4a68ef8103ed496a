package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nvmeof/nvmeof/rdma/soft"
)

// softQPStatser is the soft provider's device (*soft.Device): its
// per-QP counters.
type softQPStatser interface {
	QPStats([]soft.QPStats) []soft.QPStats
}

type qpCounter struct {
	desc *prometheus.Desc
	get  func(*soft.QPStats) uint64
}

var (
	// Per-QP series are labelled by device, QP number and peer address
	// only, so that a QP's series keep their identity across state
	// changes; qp_info carries the rest.
	qpLabels = []string{"device", "qpn", "peer"}

	qpDescs = func() []qpCounter {
		d := func(name, help string, get func(*soft.QPStats) uint64) qpCounter {
			return qpCounter{prometheus.NewDesc("nvmeof_rdma_qp_"+name, help, qpLabels, nil), get}
		}
		return []qpCounter{
			d("packets_sent_total", "Packets a soft RDMA QP sent.", func(s *soft.QPStats) uint64 { return s.PacketsSent }),
			d("packets_received_total", "Packets a soft RDMA QP took (its peer, its class; ICRC checked).", func(s *soft.QPStats) uint64 { return s.PacketsReceived }),
			d("bytes_sent_total", "UDP payload bytes a soft RDMA QP sent.", func(s *soft.QPStats) uint64 { return s.BytesSent }),
			d("bytes_received_total", "UDP payload bytes a soft RDMA QP took.", func(s *soft.QPStats) uint64 { return s.BytesReceived }),
			d("retransmissions_total", "Request packets a soft RDMA QP sent again (go-back-N).", func(s *soft.QPStats) uint64 { return s.Retransmissions }),
			d("retransmission_timeouts_total", "Retransmission timer expiries of a soft RDMA QP that caused a retry.", func(s *soft.QPStats) uint64 { return s.Timeouts }),
			d("rnr_naks_sent_total", "RNR NAKs a soft RDMA QP sent.", func(s *soft.QPStats) uint64 { return s.RNRNAKsSent }),
			d("rnr_naks_received_total", "RNR NAKs a soft RDMA QP received.", func(s *soft.QPStats) uint64 { return s.RNRNAKsReceived }),
			d("seq_naks_sent_total", "NAK PSN sequence errors a soft RDMA QP sent.", func(s *soft.QPStats) uint64 { return s.SeqNAKsSent }),
			d("seq_naks_received_total", "NAK PSN sequence errors a soft RDMA QP received.", func(s *soft.QPStats) uint64 { return s.SeqNAKsReceived }),
			d("error_naks_sent_total", "NAKs invalid request, remote access and remote operational error a soft RDMA QP sent.", func(s *soft.QPStats) uint64 { return s.ErrNAKsSent }),
			d("error_naks_received_total", "NAKs invalid request, remote access and remote operational error a soft RDMA QP received.", func(s *soft.QPStats) uint64 { return s.ErrNAKsReceived }),
			d("duplicate_requests_total", "Duplicate requests a soft RDMA QP received.", func(s *soft.QPStats) uint64 { return s.Duplicates }),
			d("out_of_sequence_total", "Requests a soft RDMA QP received after a PSN gap.", func(s *soft.QPStats) uint64 { return s.OutOfSequence }),
			d("np_ecn_marked_roce_packets_total", "CE-marked packets a soft RDMA QP received (congestion control on).", func(s *soft.QPStats) uint64 { return s.NPECNMarkedRoCEPackets }),
			d("np_cnp_sent_total", "CNPs a soft RDMA QP sent to its peer QP.", func(s *soft.QPStats) uint64 { return s.NPCNPSent }),
			d("rp_cnp_handled_total", "CNPs a soft RDMA QP received and acted on.", func(s *soft.QPStats) uint64 { return s.RPCNPHandled }),
			d("rp_cnp_ignored_total", "CNPs for a soft RDMA QP that it dropped.", func(s *soft.QPStats) uint64 { return s.RPCNPIgnored }),
		}
	}()

	// qpRate is DCQCN's current rate of a QP (0 with congestion control
	// off), and whether the pacer holds the QP to it.
	qpRate    = prometheus.NewDesc("nvmeof_rdma_qp_rp_rate_bytes_per_second", "A soft RDMA QP's current DCQCN rate in bytes per second (QPStats.RPRate / 8: its line rate until a CNP cuts it; 0 with congestion control off).", qpLabels, nil)
	qpLimited = prometheus.NewDesc("nvmeof_rdma_qp_rp_limited", "1 while a soft RDMA QP is paced below its line rate by DCQCN.", qpLabels, nil)

	qpInfo = prometheus.NewDesc("nvmeof_rdma_qp_info", "One series per live soft RDMA QP: its type, state and peer QP number.",
		[]string{"device", "qpn", "peer", "peer_qpn", "type", "state"}, nil)
	qpsNotExported = prometheus.NewDesc("nvmeof_rdma_qps_not_exported", "Live QPs of a soft RDMA device without series of their own (per-QP series off, or past their bound).",
		[]string{"device"}, nil)
)

// describeQPs sends the per-QP descriptions.
func describeQPs(ch chan<- *prometheus.Desc) {
	for _, c := range qpDescs {
		ch <- c.desc
	}
	ch <- qpInfo
	ch <- qpRate
	ch <- qpLimited
	ch <- qpsNotExported
}

// collectQPs exports the counters of the first limit of the soft device's
// live QPs (a destroyed QP's series go with it) and counts the others;
// limit < 0 exports none. buf is reused between the devices of one scrape.
func collectQPs(ch chan<- prometheus.Metric, name string, d softQPStatser, buf []soft.QPStats, limit int) []soft.QPStats {
	buf = d.QPStats(buf)
	n := min(len(buf), max(limit, 0))
	ch <- prometheus.MustNewConstMetric(qpsNotExported, prometheus.GaugeValue, float64(len(buf)-n), name)
	for i := range n {
		s := &buf[i]
		qpn := strconv.FormatUint(uint64(s.QPN), 10)
		peer, peerQPN := "", ""
		if s.Peer.IsValid() {
			peer, peerQPN = s.Peer.String(), strconv.FormatUint(uint64(s.DestQPN), 10)
		}
		ch <- prometheus.MustNewConstMetric(qpInfo, prometheus.GaugeValue, 1, name, qpn, peer, peerQPN, s.Type.String(), s.State.String())
		for _, c := range qpDescs {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.get(s)), name, qpn, peer)
		}
		limited := 0.0
		if s.RPLimited {
			limited = 1
		}
		ch <- prometheus.MustNewConstMetric(qpRate, prometheus.GaugeValue, float64(s.RPRate)/8, name, qpn, peer)
		ch <- prometheus.MustNewConstMetric(qpLimited, prometheus.GaugeValue, limited, name, qpn, peer)
	}
	return buf
}
