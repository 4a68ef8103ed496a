package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/control"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/target/server"
)

// TestPortStats: nvmetctl port stats prints each counter of the soft
// RDMA port's device in a row, and a row for the loop and TCP ports,
// which have none; -o json gives the API's result; a port ID selects
// one.
func TestPortStats(t *testing.T) {
	tree, err := configfs.ParseHCL([]byte(`
port "lp" {
  transport = "loop"
}
port "r" {
  transport = "rdma"
  provider  = "soft"
  address   = "127.83.8.1"
}
port "t" {
  transport = "tcp"
  address   = "127.83.8.2"
  service   = 4420
}
subsystem "`+nqn+`" {
  ports          = ["lp", "r", "t"]
  allow_any_host = true
  namespace "1" {
    backend = "memory"
    size    = "1MiB"
  }
}
`), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(server.Options{LoopNetwork: loop.NewNetwork()})
	t.Cleanup(func() { srv.Close() })
	svc := control.New(srv, control.Options{})
	if err := svc.Apply(tree); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "c.sock")
	if err := svc.Listen(sock); err != nil {
		t.Fatal(err)
	}
	go svc.Serve()
	t.Cleanup(func() { svc.Close() })

	for _, tt := range []struct {
		args   string
		status int
		out    []string // in stdout (status 0) or stderr
		not    []string
	}{
		{"port stats", 0, []string{"PORT  TRANSPORT  DEVICE           COUNTER", "r     rdma       soft-127.83.8.1  np_cnp_sent ", "r     rdma       soft-127.83.8.1  rp_cnp_handled ",
			"r     rdma       soft-127.83.8.1  retransmissions ", "r     rdma       soft-127.83.8.1  paced_drops ",
			"lp    loop       -                -   ", "(loop ports have no device counters)", "(tcp ports have no device counters)"}, nil},
		{"port stats r", 0, []string{"r     rdma       soft-127.83.8.1  np_ecn_marked_roce_packets  0"}, []string{"tcp", "loop"}},
		{"port stats t", 0, []string{"t     tcp        -       -        (tcp ports have no device counters)"}, []string{"rdma"}},
		{"port stats nope", 1, []string{`no port "nope"`}, nil},
		{"port stats r t", 2, []string{`unexpected argument "t"`}, nil},
	} {
		t.Run(tt.args, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			status := run(append([]string{"nvmetctl", "--socket", sock}, strings.Fields(tt.args)...), &stdout, &stderr)
			got := stdout.String()
			if tt.status != 0 {
				got = stderr.String()
			}
			if status != tt.status {
				t.Fatalf("status %d, want %d:\n%s%s", status, tt.status, stdout.String(), stderr.String())
			}
			for _, w := range tt.out {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
		})
	}

	var stdout bytes.Buffer
	if status := run([]string{"nvmetctl", "--socket", sock, "-o", "json", "port", "stats", "r"}, &stdout, &stdout); status != 0 {
		t.Fatalf("-o json port stats r: status %d:\n%s", status, stdout.String())
	}
	var res []control.PortStats
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	if len(res) != 1 || res[0].Provider != "soft" || res[0].Device != "soft-127.83.8.1" || len(res[0].Counters) < 20 {
		t.Errorf("-o json port stats r: %+v", res)
	}
	if _, ok := res[0].Counters["rp_cnp_ignored"]; !ok {
		t.Errorf("no rp_cnp_ignored: %v", res[0].Counters)
	}
}
