package provider

import (
	"errors"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/ibverbs"
)

// verbsDevice is an rdma-core device for Counters (no ibverbs build
// needed: only its name is used).
type verbsDevice struct {
	rdma.Device
	name string
}

func (d verbsDevice) Name() string       { return d.name }
func (d verbsDevice) Info() ibverbs.Info { return ibverbs.Info{Name: d.name} }

// TestCounters: a soft device gives every counter by name; an rdma-core
// device those of its sysfs files (the first file of a name it has,
// summed over its ports, scaled), mlx5's and rxe's; no sysfs or another
// provider is an error.
func TestCounters(t *testing.T) {
	dev, err := Open(Config{Provider: Soft, Addr: netip.MustParseAddr("127.77.2.4")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer dev.Close()
	got, err := Counters(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(SoftCounters) {
		t.Errorf("%d soft counters, want %d: %v", len(got), len(SoftCounters), got)
	}
	for _, name := range []string{"packets_sent", "retransmissions", "retransmission_timeouts", "np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "paced_drops"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no soft counter %s", name)
		}
	}

	root := t.TempDir()
	write := func(dev, port, file, v string) {
		p := filepath.Join(root, dev, "ports", port, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("mlx5_0", "1", "counters/port_xmit_packets", "10")
	write("mlx5_0", "2", "counters/port_xmit_packets", "5")
	write("mlx5_0", "1", "counters/port_xmit_data", "100")
	write("mlx5_0", "1", "hw_counters/sent_pkts", "999") // counters/ first
	write("mlx5_0", "1", "hw_counters/np_cnp_sent", "7")
	write("mlx5_0", "1", "hw_counters/rp_cnp_handled", "6")
	write("mlx5_0", "1", "hw_counters/local_ack_timeout_err", "2")
	write("mlx5_0", "1", "hw_counters/garbage", "x")
	write("rxe0", "1", "hw_counters/sent_pkts", "42")
	write("rxe0", "1", "hw_counters/rcvd_seq_err", "3")
	for _, tc := range []struct {
		name string
		dev  rdma.Device
		want map[string]uint64
		err  error
	}{
		{"mlx5", verbsDevice{name: "mlx5_0"}, map[string]uint64{"packets_sent": 15, "bytes_sent": 400, "np_cnp_sent": 7, "rp_cnp_handled": 6, "retransmission_timeouts": 2}, nil},
		{"rxe", verbsDevice{name: "rxe0"}, map[string]uint64{"packets_sent": 42, "seq_naks_received": 3}, nil},
		{"no sysfs", verbsDevice{name: "gone"}, nil, fs.ErrNotExist},
		{"other", otherDevice{}, nil, rdma.ErrNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := counters(tc.dev, root)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("counters: %v, want %v", err, tc.err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("counters %v, want %v", got, tc.want)
			}
		})
	}
}
