package provider

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// DefaultSysfsRoot is where rdma-core devices' port counters are read
// (/sys/class/infiniband/DEV/ports/N/{counters,hw_counters}).
const DefaultSysfsRoot = "/sys/class/infiniband"

// SoftCounter is a soft device's counter by name.
type SoftCounter struct {
	Name string
	Get  func(*soft.Stats) uint64
}

// SoftCounters are a soft device's counters by name, as Counters returns
// them and package metrics exports them (nvmeof_rdma_NAME_total); the
// congestion control ones are ConnectX's hw_counters names
// (docs/congestion.md).
var SoftCounters = []SoftCounter{
	{"packets_sent", func(s *soft.Stats) uint64 { return s.PacketsSent }},
	{"packets_received", func(s *soft.Stats) uint64 { return s.PacketsReceived }},
	{"bytes_sent", func(s *soft.Stats) uint64 { return s.BytesSent }},
	{"bytes_received", func(s *soft.Stats) uint64 { return s.BytesReceived }},
	{"send_errors", func(s *soft.Stats) uint64 { return s.SendErrors }},
	{"retransmissions", func(s *soft.Stats) uint64 { return s.Retransmissions }},
	{"retransmission_timeouts", func(s *soft.Stats) uint64 { return s.Timeouts }},
	{"rnr_naks_sent", func(s *soft.Stats) uint64 { return s.RNRNAKsSent }},
	{"rnr_naks_received", func(s *soft.Stats) uint64 { return s.RNRNAKsReceived }},
	{"seq_naks_sent", func(s *soft.Stats) uint64 { return s.SeqNAKsSent }},
	{"seq_naks_received", func(s *soft.Stats) uint64 { return s.SeqNAKsReceived }},
	{"error_naks_sent", func(s *soft.Stats) uint64 { return s.ErrNAKsSent }},
	{"error_naks_received", func(s *soft.Stats) uint64 { return s.ErrNAKsReceived }},
	{"icrc_errors", func(s *soft.Stats) uint64 { return s.ICRCErrors }},
	{"duplicate_requests", func(s *soft.Stats) uint64 { return s.Duplicates }},
	{"out_of_sequence", func(s *soft.Stats) uint64 { return s.OutOfSequence }},
	{"malformed_packets", func(s *soft.Stats) uint64 { return s.Malformed }},
	{"unknown_qp_packets", func(s *soft.Stats) uint64 { return s.UnknownQP }},
	{"dropped_packets", func(s *soft.Stats) uint64 { return s.Dropped }},
	{"acks_sent", func(s *soft.Stats) uint64 { return s.ACKsSent }},
	{"acks_received", func(s *soft.Stats) uint64 { return s.ACKsReceived }},
	{"np_ecn_marked_roce_packets", func(s *soft.Stats) uint64 { return s.NPECNMarkedRoCEPackets }},
	{"np_cnp_sent", func(s *soft.Stats) uint64 { return s.NPCNPSent }},
	{"rp_cnp_handled", func(s *soft.Stats) uint64 { return s.RPCNPHandled }},
	{"rp_cnp_ignored", func(s *soft.Stats) uint64 { return s.RPCNPIgnored }},
	{"paced_drops", func(s *soft.Stats) uint64 { return s.PacedDrops }},
}

// SysfsCounter maps an rdma-core device's sysfs counter files to a
// counter name: the first file of Files (group/name: hw_counters/ names
// differ by driver, mlx5's then rxe's) the device has, summed over its
// ports, times Scale, so that two names of one count are not added up.
type SysfsCounter struct {
	Name  string
	Scale uint64
	Files []string
}

// SysfsCounters are the names of SoftCounters an rdma-core device has,
// from its sysfs port counters.
var SysfsCounters = []SysfsCounter{
	{"packets_sent", 1, []string{"counters/port_xmit_packets", "hw_counters/sent_pkts"}},
	{"packets_received", 1, []string{"counters/port_rcv_packets", "hw_counters/rcvd_pkts"}},
	{"bytes_sent", 4, []string{"counters/port_xmit_data"}}, // in 4-byte words
	{"bytes_received", 4, []string{"counters/port_rcv_data"}},
	{"rnr_naks_received", 1, []string{"hw_counters/rnr_nak_retry_err", "hw_counters/rcvd_rnr_err"}},
	{"rnr_naks_sent", 1, []string{"hw_counters/send_rnr_err"}},
	{"seq_naks_received", 1, []string{"hw_counters/packet_seq_err", "hw_counters/rcvd_seq_err"}},
	{"out_of_sequence", 1, []string{"hw_counters/out_of_sequence"}},
	{"duplicate_requests", 1, []string{"hw_counters/duplicate_request"}},
	{"retransmission_timeouts", 1, []string{"hw_counters/local_ack_timeout_err", "hw_counters/retry_exceeded_err"}},
	{"icrc_errors", 1, []string{"hw_counters/rx_icrc_encapsulated"}},
	{"np_ecn_marked_roce_packets", 1, []string{"hw_counters/np_ecn_marked_roce_packets"}},
	{"np_cnp_sent", 1, []string{"hw_counters/np_cnp_sent"}},
	{"rp_cnp_handled", 1, []string{"hw_counters/rp_cnp_handled"}},
	{"rp_cnp_ignored", 1, []string{"hw_counters/rp_cnp_ignored"}},
}

// Counters returns the counters of an open device by name: a soft
// device's own (soft.Device.Stats), an rdma-core device's from its sysfs
// port counters under DefaultSysfsRoot (those the device's driver has).
// Another device is an error wrapping rdma.ErrNotSupported.
func Counters(dev rdma.Device) (map[string]uint64, error) {
	return counters(dev, DefaultSysfsRoot)
}

func counters(dev rdma.Device, root string) (map[string]uint64, error) {
	switch d := dev.(type) {
	case *soft.Device:
		st := d.Stats()
		out := make(map[string]uint64, len(SoftCounters))
		for _, c := range SoftCounters {
			out[c.Name] = c.Get(&st)
		}
		return out, nil
	case ibverbs.Device:
		return sysfsPortCounters(root, d.Info().Name)
	}
	return nil, fmt.Errorf("RDMA device %s: counters of a %T: %w", dev.Name(), dev, rdma.ErrNotSupported)
}

// sysfsPortCounters reads device name's port counters under root.
func sysfsPortCounters(root, name string) (map[string]uint64, error) {
	ports, err := os.ReadDir(filepath.Join(root, name, "ports"))
	if err != nil {
		return nil, fmt.Errorf("RDMA device %s: counters: %w", name, err)
	}
	out := map[string]uint64{}
	for _, c := range SysfsCounters {
		for _, f := range c.Files {
			sum, found := uint64(0), false
			for _, p := range ports {
				b, err := os.ReadFile(filepath.Join(root, name, "ports", p.Name(), f))
				if err != nil {
					continue
				}
				v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
				if err != nil {
					continue
				}
				sum, found = sum+v, true
			}
			if found {
				out[c.Name] = sum * c.Scale
				break
			}
		}
	}
	return out, nil
}
