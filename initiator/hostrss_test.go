package initiator

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"net/netip"

	"github.com/nvmeof/nvmeof/fabrics"
	frdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// countingDialer counts Dial calls (reconnect attempts).
type countingDialer struct {
	fabrics.Dialer
	n atomic.Int64
}

func (d *countingDialer) Dial(ctx context.Context, a fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	d.n.Add(1)
	return d.Dialer.Dial(ctx, a, p)
}

func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestMeasureHostMemory (NVMEOF_MEASURE_HOSTMEM=1; docs/host-memory.md):
// 20 controllers over soft RoCE, their heap each, then the target stops
// and they reconnect every 200 ms: the process's RSS and heap after ten
// attempts each.
func TestMeasureHostMemory(t *testing.T) {
	if os.Getenv("NVMEOF_MEASURE_HOSTMEM") == "" {
		t.Skip("a measurement: NVMEOF_MEASURE_HOSTMEM=1")
	}
	const ctrls, attempts = 20, 10
	p := byte(os.Getpid())
	tdev := openSoftDev(t, [4]byte{127, 43, p, 1})
	hdev := openSoftDev(t, [4]byte{127, 43, p, 2})
	const port = 4420
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: tdev.Addr(), ServiceID: port}
	tgt := target.New(target.Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tgt.AddSubsystem(target.SubsystemConfig{NQN: tgtNQN, Serial: "SOFT0001", AllowedHosts: []string{testHostNQN}, MaxControllersPerHost: ctrls}))
	mem, err := bdev.NewMemory(1<<20, 512)
	must(err)
	must(tgt.AddNamespace(tgtNQN, target.NamespaceConfig{NSID: 1, Device: mem}))
	must(tgt.AddPort(target.PortConfig{ID: 1, Address: addr, Subsystems: []string{tgtNQN}}))
	l, err := frdma.Listen(frdma.TargetConfig{Device: tdev, ServiceID: port})
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- tgt.Serve(ctx, 1, l) }()

	d := &countingDialer{Dialer: frdma.NewDialer(frdma.HostConfig{Device: hdev})}
	o := Options{SubsystemNQN: tgtNQN, HostNQN: testHostNQN, NrIOQueues: 1, QueueSize: 16,
		KeepAliveTimeout: time.Second, ReconnectDelay: 200 * time.Millisecond,
		ConnectTimeout: 100 * time.Millisecond, CtrlLossTimeout: -1}
	base, rss0 := heapInuse(), vmRSS(t)
	var cs []*Controller
	for range ctrls {
		c, err := Connect(ctx, d, addr, o)
		must(err)
		cs = append(cs, c)
	}
	live := heapInuse()
	t.Logf("%d controllers (1 I/O queue of 16, admin 32): heap %.2f MiB each; RSS %.1f MiB (%.1f before)",
		ctrls, float64(live-base)/ctrls/(1<<20), float64(vmRSS(t))/(1<<20), float64(rss0)/(1<<20))

	// The target stops: its port and device go.
	cancel()
	<-served
	_ = tgt.Close()
	tdev.Close()
	start := d.n.Load()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for d.n.Load()-start < ctrls*attempts {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("only %d reconnect attempts", d.n.Load()-start)
		}
	}
	rss := vmRSS(t) // as it is, no GC forced
	t.Logf("after %d reconnect attempts: RSS %.1f MiB, heap in use %.1f MiB after a GC",
		d.n.Load()-start, float64(rss)/(1<<20), float64(heapInuse())/(1<<20))
	for _, c := range cs {
		_ = c.Close()
	}
}

func openSoftDev(t *testing.T, a [4]byte) *soft.Device {
	t.Helper()
	d, err := soft.Open(soft.Config{Addr: netip.AddrFrom4(a)})
	if err != nil {
		t.Skipf("soft device: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
