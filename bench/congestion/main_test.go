package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRun reads two rounds of a real run (testdata/run, 2026-12-05:
// congestion control off, then on, through a 40 Mb/s tbf + red ecn).
func TestLoadRun(t *testing.T) {
	res, err := load("testdata/run", 40e6, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(res.Rounds))
	}
	off, on := res.Rounds[0], res.Rounds[1]
	for _, c := range []struct {
		what      string
		got, want uint64
	}{
		{"off retransmissions", off.Retransmissions, 29878},
		{"off timeouts", off.Timeouts, 75},
		{"off drops", off.Early + off.PDrop, 18134},
		{"off marks", off.Marked, 0},
		{"on retransmissions", on.Retransmissions, 225},
		{"on timeouts", on.Timeouts, 1},
		{"on CNPs", on.CNPHandled, 5502},
		{"on marks", on.Marked, 8903},
		{"on drops", on.Early + on.PDrop, 111},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	if off.Mode != "off" || on.Mode != "on" || len(on.Flows) != 3 {
		t.Fatalf("rounds %+v %+v", off, on)
	}
	if on.GoodputMBps < 4 || on.GoodputMBps > 5 || on.Utilization < 0.8 || on.Utilization > 0.95 || on.Share < 0.9 {
		t.Errorf("round on: goodput %.2f MB/s, use %.2f, share %.2f", on.GoodputMBps, on.Utilization, on.Share)
	}
	if p := on.Flows["probe"]; p == nil || p.P99ms <= p.P50ms || p.P50ms <= 0 {
		t.Errorf("probe %+v", p)
	}
	if len(res.Summary) != 2 || len(res.Goals) != 5 {
		t.Fatalf("summary %+v goals %+v", res.Summary, res.Goals)
	}
	var sb strings.Builder
	printReport(&sb, res)
	if !strings.Contains(sb.String(), "goal: retransmissions off/on >= 10: 132.79, met") {
		t.Errorf("report:\n%s", sb.String())
	}
}

func TestUtilization(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples string
		skip    float64
		want    float64
	}{
		// 1 Mb/s sent from t=1 to t=7 on a 1 Mb/s link.
		{"full", "0 0\n1 0\n2 125000\n3 250000\n4 375000\n5 500000\n6 625000\n7 750000\n8 750000\n", 0, 1},
		// The first 2 s (the ramp) at half speed are left out.
		{"skip", "0 0\n1 62500\n2 125000\n3 250000\n4 375000\n5 500000\n6 500000\n", 2, 1},
		{"idle", "0 5\n1 5\n2 5\n", 0, 0},
		{"empty", "", 0, 0},
		{"junk", "x y\n1\n", 0, 0},
	} {
		got := utilization(strings.NewReader(tc.samples), 1e6, tc.skip)
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{{"40mbit", 40e6, true}, {"1Gbit", 1e9, true}, {"500kbit", 500e3, true}, {"1000", 1000, true},
		{"", 0, false}, {"fast", 0, false}, {"-1mbit", 0, false}} {
		got, err := parseRate(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%q: %v, %v", tc.in, got, err)
		}
	}
}

// TestReadCounters: device series summed by name, per-QP series left out.
func TestReadCounters(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.txt")
	text := `# HELP nvmeof_rdma_retransmissions_total x
nvmeof_rdma_retransmissions_total{device="soft-a",provider="soft"} 7
nvmeof_rdma_retransmissions_total{device="soft-b",provider="soft"} 3
nvmeof_rdma_qp_retransmissions_total{device="soft-a",peer="x",qpn="17"} 100
nvmeof_rdma_rp_cnp_handled_total{device="soft-a",provider="soft"} 1.5e+06
nvmeof_target_commands_total{op="read"} 9
`
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := readCounters(p)
	if err != nil {
		t.Fatal(err)
	}
	if m["retransmissions_total"] != 10 || m["rp_cnp_handled_total"] != 1.5e6 || len(m) != 2 {
		t.Fatalf("%v", m)
	}
}
