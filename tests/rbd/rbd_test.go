//go:build rbd

package rbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/fabrics"
	nvmerdma "github.com/nvmeof/nvmeof/fabrics/rdma"
	"github.com/nvmeof/nvmeof/initiator"
	"github.com/nvmeof/nvmeof/internal/cephtest"
	"github.com/nvmeof/nvmeof/rdma/soft"
	"github.com/nvmeof/nvmeof/target/bdev"
	"github.com/nvmeof/nvmeof/target/server"
)

const (
	tgtAddr  = "127.0.61.1"
	hostAddr = "127.0.61.2"
	svc      = 4461
	nqn      = "nqn.2026-11.io.nvmeof:rbd-e2e"
	hostNQN  = "nqn.2014-08.org.nvmexpress:uuid:6c1a7e0b-3d2f-4b5a-9e8c-1f0a2b3c4d5e"
)

var (
	cluster     *cephtest.Cluster
	clusterSkip string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rbd-e2e-ceph-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cluster, err = cephtest.Start(dir + "/cluster")
	switch {
	case errors.Is(err, cephtest.ErrNoCeph):
		clusterSkip = err.Error()
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	default:
		defer func() {
			if err := cluster.Purge(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}()
	}
	return m.Run()
}

// syncBuffer is the target's log, shown when a test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const hclTmpl = `port "p0" {
  transport = "rdma"
  provider  = "soft"
  address   = "` + tgtAddr + `"
  service   = %d
}

subsystem "` + nqn + `" {
  ports          = ["p0"]
  allow_any_host = true
  namespace "1" {
    backend   = "rbd"
    pool      = "rbd"
    image     = "e2e"
    ceph_conf = %q
  }
}
`

// TestRBDEndToEnd writes a pattern through the initiator to an RBD-backed
// namespace (plain, FUA-less writes with the volatile write cache on,
// Write Zeroes and Flush), reads it back, compares the image's bytes from
// rbd export with what was written, then resizes the image and waits for
// the Namespace Attribute Changed event and the new size at the host.
func TestRBDEndToEnd(t *testing.T) {
	if cluster == nil {
		t.Skip(clusterSkip)
	}
	const size = 32 << 20
	if err := cluster.CreateImage("e2e", size); err != nil {
		t.Fatal(err)
	}
	old := bdev.RBDPollInterval
	bdev.RBDPollInterval = 50 * time.Millisecond
	t.Cleanup(func() { bdev.RBDPollInterval = old })

	logs := &syncBuffer{}
	srv := server.New(server.Options{Logger: hclog.New(&hclog.LoggerOptions{Name: "target", Level: hclog.Debug, Output: logs})})
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		if t.Failed() {
			l := logs.String()
			if len(l) > 16<<10 {
				l = "…" + l[len(l)-16<<10:]
			}
			t.Logf("target and host log:\n%s", l)
		}
	})
	src := fmt.Sprintf(hclTmpl, svc, cluster.Conf)
	tree, err := configfs.ParseHCL([]byte(src), "rbd-e2e.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(tree); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("soft RoCE device needs CAP_NET_RAW: %v", err)
		}
		t.Fatalf("apply: %v", err)
	}
	hdev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(hostAddr)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hdev.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := make(chan initiator.AsyncEvent, 8)
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: netip.MustParseAddr(tgtAddr), ServiceID: svc}
	c, err := initiator.Connect(ctx, nvmerdma.NewDialer(nvmerdma.HostConfig{Device: hdev}), addr, initiator.Options{
		SubsystemNQN: nqn, HostNQN: hostNQN, CommandTimeout: 30 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Debug, Output: logs}),
		OnAsyncEvent: func(ev initiator.AsyncEvent) {
			select {
			case events <- ev:
			default:
			}
		},
	})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace(1)
	if err != nil {
		t.Fatal(err)
	}
	if ns.Size() != size {
		t.Fatalf("namespace size %d, want %d", ns.Size(), size)
	}

	want := make([]byte, size)
	writes := []struct {
		off int64
		n   int
	}{
		{0, 512}, {4096, 4096}, {1 << 20, 128 << 10}, {4<<20 - 2048, 8192}, // across an object boundary
		{size - 64<<10, 64 << 10},
	}
	for i, w := range writes {
		p := make([]byte, w.n)
		for j := range p {
			p[j] = byte(j*31+i) ^ byte(j>>9)
		}
		if n, err := ns.WriteAt(p, w.off); err != nil || n != w.n {
			t.Fatalf("write %d bytes at %d: %d, %v", w.n, w.off, n, err)
		}
		copy(want[w.off:], p)
	}
	if err := ns.WriteZeroes(1<<20+4096, 8192); err != nil {
		t.Fatal(err)
	}
	clear(want[1<<20+4096 : 1<<20+4096+8192])
	if err := ns.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		got := make([]byte, w.n)
		if _, err := ns.ReadAt(got, w.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[w.off:w.off+int64(w.n)]) {
			t.Fatalf("read back at %d differs", w.off)
		}
	}
	exp, err := cluster.Export("e2e")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(exp, want) {
		i := 0
		for i < len(exp) && i < len(want) && exp[i] == want[i] {
			i++
		}
		t.Fatalf("rbd export (%d bytes) differs from what the host wrote (%d bytes) from byte %d", len(exp), len(want), i)
	}

	// Resize: the target sees it, the host gets the event and rescans.
	if _, err := cluster.RBD("resize", "--size", "48M", "rbd/e2e"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		// Rescan: a reconnect (a keep-alive lost on a loaded machine) came
		// between, and the host's rescan found the change.
		t.Logf("event %v, changed namespaces %v, rescan %v", ev.Event, ev.ChangedNSIDs, ev.Rescan)
		if len(ev.ChangedNSIDs) != 1 || ev.ChangedNSIDs[0] != 1 {
			t.Errorf("event %v, changed namespaces %v", ev.Event, ev.ChangedNSIDs)
		}
	case <-ctx.Done():
		t.Fatal("no asynchronous event after the resize")
	}
	if ns.Size() != 48<<20 {
		t.Errorf("size after the resize %d, want %d", ns.Size(), 48<<20)
	}
	tail := bytes.Repeat([]byte{0xa5}, 4096)
	if _, err := ns.WriteAt(tail, 48<<20-4096); err != nil {
		t.Errorf("write at the new end: %v", err)
	}
}
