package session

import (
	"errors"
	"strings"
	"testing"
)

// TestRDMAStatsRequest: an OpRDMAStats request answers with what the
// Config's RDMAStats reads, its error, or, without one, says the
// transport has no RDMA device.
func TestRDMAStatsRequest(t *testing.T) {
	want := []DeviceCounters{{Device: "soft-127.0.0.2", Provider: "soft", Counters: map[string]uint64{"np_cnp_sent": 3}}}
	for _, tc := range []struct {
		name    string
		stats   func() ([]DeviceCounters, error)
		wantErr string
	}{
		{"counters", func() ([]DeviceCounters, error) { return want, nil }, ""},
		{"error", func() ([]DeviceCounters, error) { return nil, errors.New("initiator: device gone") }, "device gone"},
		{"tcp", nil, "no RDMA device: the controller's transport is tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slot, err := Allocate(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer slot.Release()
			d := NewDaemon(slot, State{Transport: "tcp"}, Config{None: true, RDMAStats: tc.stats}, nil)
			resp := d.handle(Request{Op: OpRDMAStats})
			if tc.wantErr != "" {
				if !strings.Contains(resp.Error, tc.wantErr) || strings.Contains(resp.Error, "initiator: ") || resp.RDMA != nil {
					t.Fatalf("response %+v, want error %q", resp, tc.wantErr)
				}
				return
			}
			if resp.Error != "" || len(resp.RDMA) != 1 || resp.RDMA[0].Counters["np_cnp_sent"] != 3 {
				t.Fatalf("response %+v", resp)
			}
		})
	}
}
