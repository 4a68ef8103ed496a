package metrics

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/provider"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// fakeVerbs stands for an rdma-core device: only its name and address
// are used by the collector.
type fakeVerbs struct {
	rdma.Device
	name string
}

func (f fakeVerbs) Name() string     { return f.name }
func (f fakeVerbs) Addr() netip.Addr { return netip.MustParseAddr("192.0.2.7") }

func writeSysfs(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, v := range files {
		full := filepath.Join(root, p)
		must(t, os.MkdirAll(filepath.Dir(full), 0o755))
		must(t, os.WriteFile(full, []byte(v), 0o644))
	}
}

// TestRDMASysfs reads a copy of an rdma-core device's sysfs counters: each
// file is exported as is, the named metrics take the first source file a
// device has, summed over its ports, in their unit.
func TestRDMASysfs(t *testing.T) {
	root := t.TempDir()
	writeSysfs(t, root, map[string]string{
		"mlx5_0/ports/1/counters/port_xmit_packets":       "100\n",
		"mlx5_0/ports/1/counters/port_rcv_packets":        "40\n",
		"mlx5_0/ports/1/counters/port_xmit_data":          "250\n", // 4-byte words
		"mlx5_0/ports/2/counters/port_xmit_packets":       "5\n",
		"mlx5_0/ports/1/hw_counters/rnr_nak_retry_err":    "3\n",
		"mlx5_0/ports/1/hw_counters/out_of_sequence":      "2\n",
		"mlx5_0/ports/1/hw_counters/np_cnp_sent":          "9\n",
		"mlx5_0/ports/1/hw_counters/garbage":              "not a number\n",
		"rxe0/ports/1/hw_counters/sent_pkts":              "77\n",
		"rxe0/ports/1/hw_counters/rcvd_seq_err":           "4\n",
		"rxe0/ports/1/hw_counters/duplicate_request":      "6\n",
		"rxe0/ports/1/counters/port_xmit_packets":         "70\n", // preferred over sent_pkts
		"rxe0/ports/1/hw_counters/retry_exceeded_err":     "1\n",
		"rxe0/ports/1/hw_counters/rdma_sends":             "12\n",
		"gone0/ports/1/counters/port_rcv_packets/oops/no": "1\n",
	})
	devs := []rdma.Device{fakeVerbs{name: "mlx5_0"}, fakeVerbs{name: "rxe0"}, fakeVerbs{name: "absent0"}, fakeVerbs{name: "mlx5_0"}}
	reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return devs }, SysfsRoot: root})
	must(t, err)
	fams, body := scrape(t, Handler(reg, false))
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nvmeof_rdma_packets_sent_total", map[string]string{"device": "mlx5_0", "provider": "ibverbs"}, 105},
		{"nvmeof_rdma_packets_received_total", map[string]string{"device": "mlx5_0"}, 40},
		{"nvmeof_rdma_bytes_sent_total", map[string]string{"device": "mlx5_0"}, 1000},
		{"nvmeof_rdma_rnr_naks_received_total", map[string]string{"device": "mlx5_0"}, 3},
		{"nvmeof_rdma_out_of_sequence_total", map[string]string{"device": "mlx5_0"}, 2},
		{"nvmeof_rdma_sysfs_port_total", map[string]string{"device": "mlx5_0", "port": "1", "group": "hw_counters", "name": "np_cnp_sent"}, 9},
		{"nvmeof_rdma_sysfs_port_total", map[string]string{"device": "mlx5_0", "port": "2", "group": "counters", "name": "port_xmit_packets"}, 5},
		{"nvmeof_rdma_packets_sent_total", map[string]string{"device": "rxe0"}, 70},
		{"nvmeof_rdma_seq_naks_received_total", map[string]string{"device": "rxe0"}, 4},
		{"nvmeof_rdma_duplicate_requests_total", map[string]string{"device": "rxe0"}, 6},
		{"nvmeof_rdma_retransmission_timeouts_total", map[string]string{"device": "rxe0"}, 1},
		{"nvmeof_rdma_device_info", map[string]string{"device": "absent0", "provider": "ibverbs"}, 1},
	} {
		wantValue(t, fams, tc.name, tc.labels, tc.want)
	}
	if _, ok := value(fams, "nvmeof_rdma_sysfs_port_total", map[string]string{"name": "garbage"}); ok {
		t.Error("an unparsable counter file was exported")
	}
	if _, ok := value(fams, "nvmeof_rdma_packets_received_total", map[string]string{"device": "rxe0"}); ok {
		t.Error("rxe0 has no received-packets file, yet the metric is there")
	}
	checkPromtool(t, body)
}

// TestRDMASoft exports a soft device's own counters: the scrape shows
// what Stats says (a device that carried no traffic: zeroes), and every
// named metric the sysfs table feeds exists.
func TestRDMASoft(t *testing.T) {
	d, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.61.9.1")})
	if err != nil {
		t.Skipf("soft RoCE device on a loopback address: %v", err)
	}
	defer d.Close()
	reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return []rdma.Device{d} }})
	must(t, err)
	fams, body := scrape(t, Handler(reg, false))
	st := d.Stats()
	l := map[string]string{"device": d.Name(), "provider": "soft"}
	wantValue(t, fams, "nvmeof_rdma_device_info", map[string]string{"device": d.Name(), "addr": "127.61.9.1"}, 1)
	wantValue(t, fams, "nvmeof_rdma_packets_sent_total", l, float64(st.PacketsSent))
	wantValue(t, fams, "nvmeof_rdma_icrc_errors_total", l, float64(st.ICRCErrors))
	wantValue(t, fams, "nvmeof_rdma_rnr_naks_received_total", l, float64(st.RNRNAKsReceived))
	if len(softDescs) != len(softByName) {
		t.Errorf("%d soft counters, %d names: a name is used twice", len(softDescs), len(softByName))
	}
	for _, m := range provider.SysfsCounters {
		if softByName[m.Name+"_total"] == nil {
			t.Errorf("sysfs %v feeds unknown metric %s", m.Files, m.Name)
		}
	}
	for _, c := range provider.SoftCounters {
		if softHelp[c.Name] == "" {
			t.Errorf("counter %s has no help text", c.Name)
		}
	}
	checkPromtool(t, body)
}

func TestParseCounter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0\n", 0, true},
		{"18446744073709551615\n", 1<<64 - 1, true},
		{" 42 ", 42, true},
		{"18446744073709551616\n", 0, false},
		{"-1\n", 0, false},
		{"", 0, false},
		{"N/A\n", 0, false},
	} {
		got, ok := parseCounter([]byte(tc.in))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseCounter(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseCounter(f *testing.F) {
	for _, s := range []string{"0\n", "123", "x", "", "99999999999999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := parseCounter(b)
		if !ok && v != 0 {
			t.Errorf("parseCounter(%q) = %d with an error", b, v)
		}
	})
}

// TestRDMASysfsOddFiles: a FIFO, a device node or a huge file among the
// counters is skipped, and the scrape neither blocks nor reads it all.
func TestRDMASysfsOddFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "odd0", "ports", "1", "hw_counters")
	writeSysfs(t, root, map[string]string{"odd0/ports/1/counters/port_rcv_packets": "8\n"})
	must(t, os.MkdirAll(dir, 0o755))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "huge"), bytes.Repeat([]byte("1"), 1<<20), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "long"), []byte(strings.Repeat("0", 64)+"7\n"), 0o644))
	reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return []rdma.Device{fakeVerbs{name: "odd0"}} }, SysfsRoot: root})
	must(t, err)
	done := make(chan struct{})
	var mfs []*dto.MetricFamily
	go func() {
		defer close(done)
		mfs, err = reg.Gather()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second): // against a hang only
		t.Fatal("the scrape blocks on a FIFO among the counters")
	}
	must(t, err)
	fams := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	wantValue(t, fams, "nvmeof_rdma_packets_received_total", map[string]string{"device": "odd0"}, 8)
	for _, name := range []string{"fifo", "huge", "long"} {
		if _, ok := value(fams, "nvmeof_rdma_sysfs_port_total", map[string]string{"name": name}); ok {
			t.Errorf("counter file %q exported", name)
		}
	}
}

// fakeSoft stands for a soft device with chosen counters.
type fakeSoft struct {
	fakeVerbs
	st soft.Stats
}

func (f fakeSoft) Stats() soft.Stats { return f.st }

// TestRDMACongestionCounters exports the congestion control counters
// under ConnectX's names: a soft device's from its Stats, an rdma-core
// device's from its hw_counters files.
func TestRDMACongestionCounters(t *testing.T) {
	root := t.TempDir()
	writeSysfs(t, root, map[string]string{
		"mlx5_0/ports/1/hw_counters/np_ecn_marked_roce_packets": "11\n",
		"mlx5_0/ports/1/hw_counters/np_cnp_sent":                "12\n",
		"mlx5_0/ports/1/hw_counters/rp_cnp_handled":             "13\n",
		"mlx5_0/ports/1/hw_counters/rp_cnp_ignored":             "14\n",
	})
	sd := fakeSoft{fakeVerbs{name: "soft0"}, soft.Stats{NPECNMarkedRoCEPackets: 1, NPCNPSent: 2, RPCNPHandled: 3, RPCNPIgnored: 4, PacedDrops: 5}}
	devs := []rdma.Device{sd, fakeVerbs{name: "mlx5_0"}}
	reg, err := NewRegistry(&RDMACollector{Devices: func() []rdma.Device { return devs }, SysfsRoot: root})
	must(t, err)
	fams, body := scrape(t, Handler(reg, false))
	for _, tc := range []struct {
		name          string
		soft, ibverbs float64
	}{
		{"nvmeof_rdma_np_ecn_marked_roce_packets_total", 1, 11},
		{"nvmeof_rdma_np_cnp_sent_total", 2, 12},
		{"nvmeof_rdma_rp_cnp_handled_total", 3, 13},
		{"nvmeof_rdma_rp_cnp_ignored_total", 4, 14},
	} {
		wantValue(t, fams, tc.name, map[string]string{"device": "soft0", "provider": "soft"}, tc.soft)
		wantValue(t, fams, tc.name, map[string]string{"device": "mlx5_0", "provider": "ibverbs"}, tc.ibverbs)
	}
	wantValue(t, fams, "nvmeof_rdma_paced_drops_total", map[string]string{"device": "soft0"}, 5)
	checkPromtool(t, body)
}
