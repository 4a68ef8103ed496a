package initiator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	frdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// Benchmarks of 4 KiB reads through the host engine, Start-based and
// ReadAt-based, against the real target over the loop transport and over
// NVMe/RDMA on two rdma/soft devices on loopback. Each reports the
// allocations of the whole process (host, transport and target): the
// steady state allocates nothing.

// softSeq gives each soft fixture addresses of its own: 127.23.P.2k+1
// (target) and 127.23.P.2k+2 (host), P from the process ID.
var softSeq uint32

// newSoftTgt serves a 16 MiB namespace over NVMe/RDMA on a soft device and
// connects the host to it over another, both on loopback.
func newSoftTgt(b testing.TB, o Options) *Controller {
	b.Helper()
	softSeq++
	k, p := byte(softSeq%120), byte(os.Getpid())
	taddr := netip.AddrFrom4([4]byte{127, 23, p, 2*k + 1})
	haddr := netip.AddrFrom4([4]byte{127, 23, p, 2*k + 2})
	open := func(a netip.Addr) *soft.Device {
		d, err := soft.Open(soft.Config{Addr: a})
		if err != nil {
			if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
				b.Skipf("soft device needs CAP_NET_RAW: %v", err)
			}
			b.Fatalf("soft.Open(%v): %v", a, err)
		}
		b.Cleanup(func() { d.Close() })
		return d
	}
	tdev, hdev := open(taddr), open(haddr)
	must := func(err error) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
	}
	const port = 4420
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: taddr, ServiceID: port}
	tgt := target.New(target.Options{})
	must(tgt.AddSubsystem(target.SubsystemConfig{NQN: tgtNQN, Serial: "SOFT0001", AllowedHosts: []string{testHostNQN}}))
	mem, err := bdev.NewMemory(16<<20, 512)
	must(err)
	must(tgt.AddNamespace(tgtNQN, target.NamespaceConfig{NSID: 1, Device: mem}))
	must(tgt.AddPort(target.PortConfig{ID: 1, Address: addr, InlineDataSize: 8192, Subsystems: []string{tgtNQN}}))
	l, err := frdma.Listen(frdma.TargetConfig{Device: tdev, ServiceID: port})
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tgt.Serve(ctx, 1, l) }()
	b.Cleanup(func() {
		cancel()
		<-served
		_ = tgt.Close()
	})
	o.SubsystemNQN, o.HostNQN = tgtNQN, testHostNQN
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	c, err := Connect(cctx, frdma.NewDialer(frdma.HostConfig{Device: hdev}), addr, o)
	must(err)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// benchTransports are the transports the engine benchmarks run over.
var benchTransports = []struct {
	name    string
	connect func(b testing.TB) *Controller
}{
	{"loop", func(b testing.TB) *Controller { return newTgtFixture(b, 16<<20).connect(b, Options{NrIOQueues: 1}) }},
	{"soft", func(b testing.TB) *Controller { return newSoftTgt(b, Options{NrIOQueues: 1}) }},
}

// BenchmarkEngineStart4K: 4 KiB reads through Start at queue depth 1 and
// 16, over each transport.
func BenchmarkEngineStart4K(b *testing.B) {
	for _, tr := range benchTransports {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/qd%d", tr.name, depth), func(b *testing.B) {
				c := tr.connect(b)
				ns, err := c.Namespace(1)
				if err != nil {
					b.Fatal(err)
				}
				benchStart(b, ns, depth)
			})
		}
	}
}

// BenchmarkEngineReadAt4K: 4 KiB reads through ReadAt (one at a time),
// over each transport.
func BenchmarkEngineReadAt4K(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			c := tr.connect(b)
			ns, err := c.Namespace(1)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 4096)
			b.ReportAllocs()
			b.SetBytes(4096)
			for i := 0; b.Loop(); i++ {
				if _, err := ns.ReadAt(buf, int64(i%4096)*4096); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
