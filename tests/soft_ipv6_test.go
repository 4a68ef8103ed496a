package tests

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/reconcile"
)

// NVMe-oF over RoCEv2 over IPv6, end to end in process: the target and
// the initiator, each on its soft device on ::1.
//
// ::1 is the only IPv6 loopback address, and two devices cannot both
// bind [::1]:4791; go test runs the packages of ./... in parallel, so the
// soft, ibcm and tests packages all open devices on ::1 at the same time.
// Each device here binds a UDP port the kernel picks (soft.Config.UDPPort
// -1) and sends to its peer's (PeerUDPPort, SetPeerUDPPort): no device of
// any test binary ever shares a port with another, nothing waits on
// another binary, and no root or extra address on lo is needed (adding
// addresses to lo would need root and change the host). Port 4791 over
// IPv6 is what the kernel interop test exercises, in its own namespace.

const (
	v6NQN     = "nqn.2026-11.io.nvmeof:soft-ipv6"
	v6HostNQN = "nqn.2014-08.org.nvmexpress:uuid:6a1e5c7a-2b4d-4e6f-8a9b-0c1d2e3f4a66"
	v6Svc     = 4420
)

const v6HCL = `log_level = "debug"

port "p6" {
  transport        = "rdma"
  provider         = "soft"
  address          = "::1"
  service          = 4420
  inline_data_size = 8192
}

subsystem "` + v6NQN + `" {
  ports          = ["p6"]
  allow_any_host = true
  serial         = "SOFTIPV6001"
  model          = "nvmeof-soft-ipv6"

  namespace "1" {
    backend    = "memory"
    size       = "16MiB"
    block_size = 512
  }
}
`

// openV6Pair opens the target's and the host's soft devices on ::1, each
// on its own UDP port and sending to the other's.
func openV6Pair(t *testing.T) (tdev, hdev *soft.Device) {
	t.Helper()
	lo := netip.IPv6Loopback()
	tdev, err := soft.Open(soft.Config{Addr: lo, UDPPort: -1})
	if err != nil {
		t.Fatalf("soft device on ::1: %v", err)
	}
	t.Cleanup(func() { tdev.Close() })
	hdev, err = soft.Open(soft.Config{Addr: lo, UDPPort: -1, PeerUDPPort: tdev.UDPPort()})
	if err != nil {
		t.Fatalf("soft device on ::1: %v", err)
	}
	t.Cleanup(func() { hdev.Close() })
	tdev.SetPeerUDPPort(hdev.UDPPort())
	return tdev, hdev
}

// TestSoftIPv6 serves a subsystem on [::1]:4420 over the soft provider
// and, from the host device: discovers it (the log page entry says
// adrfam ipv6, traddr ::1), connects with two I/O queues, writes and
// reads back patterns of 512 B to 1 MiB (in-capsule data, keyed SGLs
// the target RDMA-READs, reads it RDMA-WRITEs), flushes and disconnects.
func TestSoftIPv6(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var log syncBuffer
	defer func() {
		if t.Failed() {
			t.Logf("target log:\n%s", log.String())
		}
	}()
	tdev, hdev := openV6Pair(t)
	tgt := target.New(target.Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "target", Level: hclog.Debug, Output: &log})})
	t.Cleanup(func() { tgt.Close() })
	tree, err := configfs.ParseHCL([]byte(v6HCL), "ipv6.hcl")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := reconcile.New(tgt, nil).Apply(tree)
	if err != nil || len(ch.Start) != 1 {
		t.Fatalf("apply: %v (%d ports to start)", err, len(ch.Start))
	}
	pl := ch.Start[0]
	if pl.Address.Addr != netip.IPv6Loopback() || pl.Address.ServiceID != v6Svc {
		t.Fatalf("port address %v", pl.Address)
	}
	l, err := nvmerdma.Listen(nvmerdma.TargetConfig{Device: tdev, ServiceID: pl.Address.ServiceID, InlineDataSize: pl.InlineDataSize})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- tgt.Serve(ctx, pl.ID, l) }()

	dialer := nvmerdma.NewDialer(nvmerdma.HostConfig{Device: hdev})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.IPv6Loopback(), ServiceID: v6Svc}
	opts := initiator.Options{HostNQN: v6HostNQN, CommandTimeout: 10 * time.Second}
	entries, err := initiator.Discover(ctx, dialer, addr, opts)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	var found bool
	for _, e := range entries {
		if e.SubNQN != v6NQN {
			continue
		}
		found = true
		if e.AdrFam != fabrics.AdrFamIPv6 || e.TRADDR != "::1" || e.TRSVCID != fmt.Sprint(v6Svc) || e.TRType != fabrics.TRTypeRDMA {
			t.Errorf("discovery entry %+v", e.DiscoveryRecord)
		}
		if a, err := e.Address(); err != nil || a != addr {
			t.Errorf("entry address %v, %v; want %v", a, err, addr)
		}
	}
	if !found {
		t.Fatalf("%s not in the discovery log: %+v", v6NQN, entries)
	}

	opts.SubsystemNQN, opts.NrIOQueues = v6NQN, 2
	c, err := initiator.Connect(ctx, dialer, addr, opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Size() != 16<<20 || ns.BlockSize() != 512 {
		t.Fatalf("namespace of %d bytes, blocks of %d", ns.Size(), ns.BlockSize())
	}
	off := int64(0)
	for i, n := range []int{512, 4096, 8192, 64 << 10, 128<<10 + 512, 1 << 20} {
		want := make([]byte, n)
		for k := range want {
			want[k] = byte(k*31 + i*7 + k>>9)
		}
		if _, err := ns.WriteAt(want, off); err != nil {
			t.Fatalf("write %d bytes at %d: %v", n, off, err)
		}
		got := make([]byte, n)
		if _, err := ns.ReadAt(got, off); err != nil {
			t.Fatalf("read %d bytes at %d: %v", n, off, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes at %d read back differ", n, off)
		}
		off += int64(n)
	}
	if err := ns.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("disconnect: %v", err)
	}
	for _, d := range []*soft.Device{tdev, hdev} {
		if s := d.Stats(); s.ICRCErrors != 0 || s.Malformed != 0 || s.SendErrors != 0 {
			t.Errorf("%s: %+v", d.Name(), s)
		}
	}
	cancel()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}
