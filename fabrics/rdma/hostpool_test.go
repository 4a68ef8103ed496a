package rdma

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/rdma"
)

func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// fixedDevice hides the soft provider's region remapping: its queues
// take the fallback of fixed rkeys over bounce buffers.
type fixedDevice struct{ rdma.Device }

type fixedPD struct{ rdma.PD }

type fixedMR struct{ rdma.MR } // no Remap: not an rdma.RemappableMR

func (d fixedDevice) AllocPD() (rdma.PD, error) {
	pd, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return fixedPD{pd}, nil
}

func (p fixedPD) RegMR(buf []byte, access rdma.Access) (rdma.MR, error) {
	m, err := p.PD.RegMR(buf, access)
	if err != nil {
		return nil, err
	}
	return fixedMR{m}, nil
}

// TestHostDialMemory (issue 22, item 10): a reconnect attempt against a
// target that is not listening allocates no bounce buffers (the soft
// provider remaps its regions to each command's buffer, and the admin
// queue's capsules carry no data); on a device that needs bounce buffers
// they come from the process's pool, and a queue opened after another
// was closed reuses them instead of allocating.
func TestHostDialMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	taddr, haddr := pidAddr(41), pidAddr(42)
	tdev, hdev := openSoft(t, taddr), openSoft(t, haddr)
	addr := fabrics.Address{Transport: fabrics.TransportRDMA, Addr: taddr, ServiceID: 4421}

	t.Run("refused attempts", func(t *testing.T) {
		d := NewDialer(HostConfig{Device: hdev})
		const attempts = 5
		var before uint64
		for i := range attempts + 1 {
			if i == 1 {
				// The first attempt warmed the devices up (their
				// receive buffers, the connection manager).
				before = allocated()
			}
			// No listener on the service: the REQ goes unanswered, as
			// to a stopped target, until the host's connect timeout.
			actx, acancel := context.WithTimeout(ctx, 100*time.Millisecond)
			hq, err := d.Dial(actx, addr, fabrics.QueueParams{QID: 0, SQSize: 32})
			acancel()
			if err == nil {
				hq.Close()
				t.Fatal("Dial succeeded without a listener")
			}
		}
		per := (allocated() - before) / attempts
		t.Logf("%d bytes allocated per refused admin queue attempt", per)
		// TotalAlloc counts the whole process: the other tests'
		// goroutines still ending (under -race, 500 KB an attempt was
		// seen) share it. The bounce buffers this guards against were
		// 4.6 MB an attempt.
		if per > 1<<20 {
			t.Errorf("%d bytes allocated per refused attempt, want at most 1 MiB (no bounce buffers)", per)
		}
	})

	t.Run("fixed rkeys reuse the pool", func(t *testing.T) {
		l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4421})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				q, err := l.Accept(ctx)
				if err != nil {
					return
				}
				q.Serve(&memHandler{closed: make(chan error, 1)})
			}
		}()
		d := NewDialer(HostConfig{Device: fixedDevice{hdev}})
		cycle := func() {
			hq, err := d.Dial(ctx, addr, fabrics.QueueParams{QID: 1, SQSize: 32})
			if err != nil {
				t.Fatal(err)
			}
			fabricsConnect(t, ctx, hq)
			data := make([]byte, 8192)
			for i := range data {
				data[i] = byte(i * 7)
			}
			submit(t, ctx, hq, 0x01, data, fabrics.DirHostToCtrl)
			got := make([]byte, len(data))
			submit(t, ctx, hq, 0x02, got, fabrics.DirCtrlToHost)
			if string(got) != string(data) {
				t.Fatal("data read back differs")
			}
			if _, held := HostBounceBytes(); held < 31*DefaultMaxTransfer {
				t.Fatalf("the queue holds %d bytes of bounce buffers, want its 31 slots' worth", held)
			}
			hq.Close()
		}
		cycle()
		total, held := HostBounceBytes()
		if held != 0 {
			t.Fatalf("%d bytes of bounce buffers held after the queue closed", held)
		}
		before := allocated()
		const cycles = 5
		for range cycles {
			cycle()
		}
		per := (allocated() - before) / cycles
		t2, _ := HostBounceBytes()
		t.Logf("%d bytes allocated per queue opened, used and closed; pool %d bytes", per, t2)
		if t2 != total {
			t.Errorf("the pool grew from %d to %d bytes over reopened queues", total, t2)
		}
		if per > 3<<20 {
			t.Errorf("%d bytes allocated per reopened queue, want at most 3 MiB (its 4 MiB of bounce buffers reused)", per)
		}
	})
}
