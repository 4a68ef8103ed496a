package control

import (
	"net"
	"strings"
	"testing"
	"time"
)

// statsConfig exports subsystem A through a loop, a soft RDMA and a TCP
// port.
const statsConfig = `
port "lp" {
  transport = "loop"
  service   = 4420
}
port "r" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.83.7.2"
}
port "t" {
  transport = "tcp"
  address   = "127.83.7.1"
  service   = 4420
}
subsystem "` + nqnA + `" {
  ports          = ["lp", "r", "t"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "4MiB"
  }
}
`

// TestPortStats: port.stats gives the soft RDMA port's device counters,
// live (a junk datagram sent to the device shows in them), every one by
// name, congestion control's among them; the loop and TCP ports say they
// have none; id selects one port, an unknown id is not found.
func TestPortStats(t *testing.T) {
	e := start(t, statsConfig)
	var all []PortStats
	e.call(t, "port.stats", nil, &all)
	if len(all) != 3 {
		t.Fatalf("port.stats: %+v", all)
	}
	for _, st := range all {
		switch st.ID {
		case "lp", "t":
			if st.Counters != nil || !strings.Contains(st.Note, st.Transport+" ports have no device counters") {
				t.Errorf("%s: %+v", st.ID, st)
			}
		case "r":
			if st.Provider != "soft" || st.Device != "soft-127.83.7.2" || st.Address != "127.83.7.2" || st.PortID == 0 || st.Note != "" {
				t.Errorf("r: %+v", st)
			}
			for _, name := range []string{"packets_received", "retransmissions", "retransmission_timeouts", "np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "paced_drops"} {
				if _, ok := st.Counters[name]; !ok {
					t.Errorf("r: no counter %s: %v", name, st.Counters)
				}
			}
		default:
			t.Errorf("port %q", st.ID)
		}
	}

	c, err := net.Dial("udp", "127.83.7.2:4791")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 40)); err != nil {
		t.Fatal(err)
	}
	var one []PortStats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		e.call(t, "port.stats", m{"id": "r"}, &one)
		if len(one) != 1 || one[0].ID != "r" {
			t.Fatalf("port.stats r: %+v", one)
		}
		if one[0].Counters["packets_received"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the datagram is not counted: %v", one[0].Counters)
		}
	}
	e.fails(t, "port.stats", m{"id": "nope"}, CodeNotFound, `no port "nope"`)
}
