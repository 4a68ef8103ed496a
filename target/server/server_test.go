package server

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/target"
)

const nqn = "nqn.2026-11.io.nvmeof:server-test"

func config(t *testing.T, namespaces string) *configfs.Tree {
	t.Helper()
	src := `
port "p1" {
  transport = "loop"
  service   = 4420
}
subsystem "` + nqn + `" {
  ports          = ["p1"]
  allow_any_host = true
` + namespaces + `
}
`
	tree, err := configfs.ParseHCL([]byte(src), "test.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

const ns1 = `namespace "1" {
    backend = "memory"
    size    = "8MiB"
  }`

const ns2 = `namespace "2" {
    backend    = "memory"
    size       = "4MiB"
    block_size = 4096
  }`

// TestServeApplyAndReload runs a configuration over the loop transport,
// does verified I/O through the initiator, then reloads a configuration
// with a second namespace and expects the host to learn of it by an
// asynchronous event while it stays connected.
func TestServeApplyAndReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	net := loop.NewNetwork()
	s := New(Options{LoopNetwork: net})
	defer s.Close()
	if err := s.Apply(config(t, ns1)); err != nil {
		t.Fatal(err)
	}
	events := make(chan initiator.AsyncEvent, 4)
	ctrl, err := initiator.Connect(ctx, loop.Dialer{Net: net},
		fabrics.Address{Transport: fabrics.TransportLoop, ServiceID: 4420},
		initiator.Options{SubsystemNQN: nqn, NrIOQueues: 2, OnAsyncEvent: func(ev initiator.AsyncEvent) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	nss := ctrl.Namespaces()
	if len(nss) != 1 || nss[0].Size() != 8<<20 {
		t.Fatalf("namespaces after connect: %d", len(nss))
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 8192) // 128 KiB
	if _, err := nss[0].WriteAt(want, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := nss[0].ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: err %v, equal %t", err, bytes.Equal(got, want))
	}

	if err := s.Apply(config(t, ns1+"\n"+ns2)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if len(ev.ChangedNSIDs) != 1 || ev.ChangedNSIDs[0] != 2 {
			t.Fatalf("event for namespaces %v, want [2]", ev.ChangedNSIDs)
		}
	case <-ctx.Done():
		t.Fatal("no asynchronous event after adding a namespace")
	}
	nss = ctrl.Namespaces()
	if len(nss) != 2 || nss[1].BlockSize() != 4096 {
		t.Fatalf("after reload: %d namespaces", len(nss))
	}
	// The first namespace kept its data across the reload.
	if _, err := nss[0].ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back after reload: err %v", err)
	}
}

// TestApplyErrors: a port whose transport this process cannot serve is
// reported, and nothing of the configuration applies.
func TestApplyErrors(t *testing.T) {
	s := New(Options{}) // no loop network
	defer s.Close()
	err := s.Apply(config(t, ns1))
	if err == nil || !strings.Contains(err.Error(), "test.hcl:2:6: ports/p1: address: loop transport not available") {
		t.Fatalf("loop port without a loop network: %v", err)
	}
	if err := s.Target.AddSubsystem(target.SubsystemConfig{NQN: nqn}); err != nil {
		t.Errorf("the subsystem was added: %v", err)
	}
}
