package rdma

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/rdma"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// Loopback addresses of this package's tests (distinct from other
// packages' so that tests can run in parallel).
var (
	targetAddr = netip.MustParseAddr("127.0.20.1")
	hostAddr   = netip.MustParseAddr("127.0.20.2")
)

func openSoft(t testing.TB, a netip.Addr) rdma.Device {
	t.Helper()
	d, err := soft.Open(soft.Config{Addr: a})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission) {
			t.Skipf("soft device needs CAP_NET_RAW: %v", err)
		}
		t.Fatalf("soft.Open(%v): %v", a, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// memHandler is a tiny controller: opcode 0x01 stores the data, 0x02 returns
// it, anything else completes with Invalid Opcode. DW0 echoes the data length.
type memHandler struct {
	mu     sync.Mutex
	stored []byte
	closed chan error
}

func (m *memHandler) HandleCommand(r *fabrics.Request) {
	cqe := nvme.CQE(r.CQE[:])
	m.mu.Lock()
	switch r.SQE[0] {
	case 0x01:
		m.stored = append(m.stored[:0], r.Data...)
	case 0x02:
		copy(r.Data, m.stored)
	case fabricsOpcode: // the Fabrics Connect every queue starts with
	default:
		cqe.SetStatus(nvme.StatusInvalidOpcode)
	}
	m.mu.Unlock()
	cqe.SetDW0(uint32(len(r.Data)))
	go r.Complete() // from another goroutine, as a backend worker would
}

func (m *memHandler) QueueClosed(err error) { m.closed <- err }

type setup struct {
	tdev, hdev rdma.Device
	l          *Listener
	h          *memHandler
	hq         fabrics.HostQueue
}

func start(t *testing.T, ctx context.Context, inline int) *setup {
	t.Helper()
	h := &memHandler{closed: make(chan error, 1)}
	s := startWith(t, ctx, inline, h)
	s.h = h
	return s
}

// startWith serves the first queue of a soft RoCE listener with h and
// connects an I/O queue to it (Fabrics Connect done).
func startWith(t *testing.T, ctx context.Context, inline int, h fabrics.CommandHandler) *setup {
	t.Helper()
	tdev, hdev := openSoft(t, targetAddr), openSoft(t, hostAddr)
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420, InlineDataSize: inline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		q, err := l.Accept(ctx)
		if err == nil {
			q.Serve(h)
		}
	}()
	d := NewDialer(HostConfig{Device: hdev})
	hq, err := d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: targetAddr, ServiceID: 4420},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hq.Close() })
	fabricsConnect(t, ctx, hq)
	return &setup{tdev: tdev, hdev: hdev, l: l, hq: hq}
}

func submit(t *testing.T, ctx context.Context, hq fabrics.HostQueue, op byte, data []byte, dir fabrics.DataDirection) *fabrics.HostCommand {
	t.Helper()
	select {
	case c := <-submitAsync(t, hq, op, data, dir):
		if c.Err != nil {
			t.Fatalf("command %#x: %v", op, c.Err)
		}
		return c
	case <-ctx.Done():
		t.Fatalf("command %#x: no completion", op)
	}
	return nil
}

// TestSoftRoundTrip moves data both ways through the NVMe/RDMA binding over
// two soft RoCE devices: in-capsule writes, keyed-SGL writes (the target
// RDMA-READs them), reads (RDMA WRITE, then the CQE by SEND), a command
// without data and an error status.
func TestSoftRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := start(t, ctx, 4096)
	s.hq.SetInCapsuleDataSize(4096)
	for _, n := range []int{512, 4096, 4097, 64 << 10, DefaultMaxTransfer} {
		want := bytes.Repeat([]byte{byte(n), byte(n >> 8), 0xa5}, n/3+1)[:n]
		w := submit(t, ctx, s.hq, 0x01, want, fabrics.DirHostToCtrl)
		if cqe := nvme.CQE(w.CQE[:]); cqe.Status() != 0 || cqe.DW0() != uint32(n) || cqe.SQID() != 1 {
			t.Fatalf("write %d: status %v dw0 %d sqid %d", n, cqe.Status(), cqe.DW0(), cqe.SQID())
		}
		got := make([]byte, n)
		r := submit(t, ctx, s.hq, 0x02, got, fabrics.DirCtrlToHost)
		if !bytes.Equal(got, want) || nvme.CQE(r.CQE[:]).Status() != 0 {
			t.Fatalf("read %d bytes back: differs or failed (%v)", n, nvme.CQE(r.CQE[:]).Status())
		}
	}
	e := submit(t, ctx, s.hq, 0x7e, nil, fabrics.DirNone)
	if st := nvme.CQE(e.CQE[:]).Status(); st != nvme.StatusInvalidOpcode {
		t.Fatalf("unknown opcode: status %v", st)
	}
	if err := s.hq.Submit(&fabrics.HostCommand{Data: make([]byte, DefaultMaxTransfer+1), Done: func(*fabrics.HostCommand) {}}); err == nil {
		t.Fatal("oversize transfer accepted by the host queue")
	}
}

// TestSoftConcurrent keeps the queue full of writes and reads.
func TestSoftConcurrent(t *testing.T) {
	// A bound against a hang, not a speed goal: under -race on a loaded
	// 2-CPU machine the 2000 commands take 5 to 10 s.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t, ctx, 0)
	const n = 2000
	done := make(chan *fabrics.HostCommand, 64)
	cmds := make([]fabrics.HostCommand, 31)
	free := make(chan *fabrics.HostCommand, len(cmds))
	for i := range cmds {
		cmds[i].Data = make([]byte, 4096)
		cmds[i].Tag = uint16(i)
		cmds[i].Done = func(c *fabrics.HostCommand) { done <- c }
		free <- &cmds[i]
	}
	completed := 0
	for sent := 0; completed < n; {
		select {
		case c := <-free:
			if sent == n {
				continue
			}
			c.SQE[0], c.Direction = 0x02, fabrics.DirCtrlToHost
			if sent%2 == 0 {
				c.SQE[0], c.Direction = 0x01, fabrics.DirHostToCtrl
			}
			if err := s.hq.Submit(c); err != nil {
				t.Fatal(err)
			}
			sent++
		case c := <-done:
			if c.Err != nil || nvme.CQE(c.CQE[:]).Status() != 0 {
				t.Fatalf("completion %d: %v %v", completed, c.Err, nvme.CQE(c.CQE[:]).Status())
			}
			completed++
			free <- c
		case <-ctx.Done():
			t.Logf("target device: %+v", s.tdev.(*soft.Device).Stats())
			t.Logf("host device: %+v", s.hdev.(*soft.Device).Stats())
			t.Fatalf("%d of %d completed", completed, n)
		}
	}
}

// TestSoftRejects: the target refuses bad queue requests with the NVMe/RDMA
// reject status, and the host reports it.
func TestSoftRejects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tdev, hdev := openSoft(t, targetAddr), openSoft(t, hostAddr)
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4421})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := NewDialer(HostConfig{Device: hdev})
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: targetAddr, ServiceID: 4421}
	_, err = d.Dial(ctx, addr, fabrics.QueueParams{QID: 0, SQSize: 64})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Status != CMInvalidHSQSize {
		t.Fatalf("admin queue of 64 entries: %v, want reject %v", err, CMInvalidHSQSize)
	}
	_, err = d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: targetAddr, ServiceID: 4499}, fabrics.QueueParams{QID: 0, SQSize: 32})
	if err == nil {
		t.Fatal("dial to a port nobody listens on succeeded")
	}
}

// syncHandler completes every command at once, on the transport's goroutine.
type syncHandler struct{}

func (syncHandler) HandleCommand(r *fabrics.Request) { r.Complete() }
func (syncHandler) QueueClosed(error)                {}

// BenchmarkSoftRead4K measures 4 KiB controller-to-host commands (keyed SGL,
// RDMA WRITE + SEND) at queue depth 1 over two soft devices, with -benchmem
// for the allocations of both sides' transport and the soft provider.
func BenchmarkSoftRead4K(b *testing.B) {
	benchSoft(b, 0x02, fabrics.DirCtrlToHost, 4096, 1)
}

// BenchmarkSoftWrite4K: 4 KiB host-to-controller commands (the target
// RDMA-READs the data) at queue depth 1.
func BenchmarkSoftWrite4K(b *testing.B) {
	benchSoft(b, 0x01, fabrics.DirHostToCtrl, 4096, 1)
}

// BenchmarkSoftRead4KQD16: 4 KiB reads with 16 in flight.
func BenchmarkSoftRead4KQD16(b *testing.B) {
	benchSoft(b, 0x02, fabrics.DirCtrlToHost, 4096, 16)
}

func benchSoft(b *testing.B, op byte, dir fabrics.DataDirection, size, qd int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tdev, hdev := openSoft(b, targetAddr), openSoft(b, hostAddr)
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4430})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		if q, err := l.Accept(ctx); err == nil {
			q.Serve(syncHandler{})
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: targetAddr, ServiceID: 4430},
		fabrics.QueueParams{QID: 1, SQSize: 64, RQSize: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer hq.Close()
	fabricsConnect(b, ctx, hq)
	done := make(chan *fabrics.HostCommand, qd)
	cmds := make([]fabrics.HostCommand, qd)
	for i := range cmds {
		cmds[i].Data = make([]byte, size)
		cmds[i].Direction = dir
		cmds[i].SQE[0] = op
		cmds[i].Tag = uint16(i)
		cmds[i].Done = func(c *fabrics.HostCommand) { done <- c }
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := range cmds {
		if i >= b.N {
			break
		}
		if err := hq.Submit(&cmds[i]); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for sent := inflight; inflight > 0; {
		c := <-done
		inflight--
		if c.Err != nil {
			b.Fatal(c.Err)
		}
		if sent < b.N {
			if err := hq.Submit(c); err != nil {
				b.Fatal(err)
			}
			sent++
			inflight++
		}
	}
}
