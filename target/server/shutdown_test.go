package server

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// maxShutdown bounds Server.Close whatever the hosts did (issue 22, item
// 11): it used to take 10 s after a vanished host with KATO 5 s (a 5 s
// DREQ wait per queue, one queue after the other) and 31 to 67 s after
// one with KATO 0.
const maxShutdown = 4 * time.Second

// TestShutdownVanishedHost connects a host over soft RoCE, makes it
// vanish mid-association (its device drops every packet from then on:
// no DREQ, no ACK), and stops the server: Close returns within
// maxShutdown and logs nothing at ERROR.
func TestShutdownVanishedHost(t *testing.T) {
	for i, tc := range []struct {
		name string
		kato time.Duration
	}{
		{"kato5s", 5 * time.Second},
		{"kato0", -1}, // negative: no keep-alive
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 127.78.30.0/24 is this test's: target .2i+1, host .2i+2.
			taddr := netip.AddrFrom4([4]byte{127, 78, 30, byte(2*i + 1)})
			haddr := netip.AddrFrom4([4]byte{127, 78, 30, byte(2*i + 2)})
			testShutdownVanished(t, taddr, haddr, tc.kato)
		})
	}
}

func testShutdownVanished(t *testing.T, taddr, haddr netip.Addr, kato time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var logs syncBuffer
	s := New(Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})})
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	src := `
port "p1" {
  address = "` + taddr.String() + `"
  service = 4420
}
subsystem "` + nqn + `" {
  ports          = ["p1"]
  allow_any_host = true
  ` + ns1 + `
}
`
	tree, err := configfs.ParseHCL([]byte(src), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(tree); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device: %v", err)
		}
		t.Fatal(err)
	}
	hdev, err := soft.Open(soft.Config{Addr: haddr})
	if err != nil {
		t.Fatal(err)
	}
	defer hdev.Close()
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: taddr, ServiceID: 4420}
	ctrl, err := initiator.Connect(ctx, nvmerdma.NewDialer(nvmerdma.HostConfig{Device: hdev}), addr,
		initiator.Options{SubsystemNQN: nqn, NrIOQueues: 1, KeepAliveTimeout: kato, CtrlLossTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ns := ctrl.Namespaces()
	if len(ns) != 1 {
		t.Fatalf("%d namespaces", len(ns))
	}
	if _, err := ns[0].ReadAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	// The host vanishes: from now on its device neither sends nor
	// receives anything.
	all := &soft.FaultConfig{Drop: 1}
	hdev.SetFaults(all, all)

	start := time.Now()
	s.Close()
	closed = true
	took := time.Since(start)
	t.Logf("Close took %v", took)
	if took > maxShutdown {
		t.Errorf("Close took %v, want at most %v", took, maxShutdown)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "[ERROR]") {
			t.Errorf("logged at ERROR: %s", line)
		}
	}
	hdev.Close()
	ctrl.Close()
}
