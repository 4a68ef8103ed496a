package rdma

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// TestTargetPoolExhausted: with a data pool of one 128 KiB unit, 30
// commands of 4, 64 and 128 KiB in flight at once on each of two queues
// (RDMA READs and WRITEs) wait for buffers in turn and all complete;
// nothing is left held, with the port's SRQ and with per-queue receive
// rings alike.
func TestTargetPoolExhausted(t *testing.T) {
	for _, c := range []struct {
		name string
		srq  int
	}{{"srq", 0}, {"rings", -1}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			port := uint16(4444)
			if c.srq < 0 {
				port++
			}
			tdev, hdev := openSoft(t, pidAddr(31)), openSoft(t, pidAddr(32))
			l, err := Listen(TargetConfig{Device: tdev, ServiceID: port, DataPoolBytes: 1, SRQSize: c.srq})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if l.UsesSRQ() != (c.srq == 0) {
				t.Fatalf("port uses an SRQ: %v, want %v", l.UsesSRQ(), c.srq == 0)
			}
			h := &memHandler{closed: make(chan error, 2)}
			go func() {
				for range 2 {
					q, err := l.Accept(ctx)
					if err != nil {
						return
					}
					q.Serve(h)
				}
			}()
			d := NewDialer(HostConfig{Device: hdev})
			var hqs []fabrics.HostQueue
			for qid := uint16(1); qid <= 2; qid++ {
				hq, err := d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(31), ServiceID: port},
					fabrics.QueueParams{QID: qid, SQSize: 32, RQSize: 32})
				if err != nil {
					t.Fatal(err)
				}
				defer hq.Close()
				fabricsConnect(t, ctx, hq)
				hqs = append(hqs, hq)
			}
			// Rounds of 30 commands in flight on each queue: 4 KiB,
			// 64 KiB and 128 KiB, to the controller and from it (a
			// 4 KiB one holds the unit as a slab until all its 4 KiB
			// buffers are back).
			sizes := []int{64 << 10, 4 << 10, 128 << 10}
			for round := range 3 {
				type sent struct {
					done <-chan *fabrics.HostCommand
					size int
				}
				var all []sent
				for i := range 30 {
					for _, hq := range hqs {
						op, dir := byte(0x01), fabrics.DirHostToCtrl
						if i%2 == 1 {
							op, dir = 0x02, fabrics.DirCtrlToHost
						}
						size := sizes[(i/2+round)%len(sizes)]
						all = append(all, sent{submitAsync(t, hq, op, make([]byte, size), dir), size})
					}
				}
				for i, c := range all {
					cmd := waitDone(t, ctx, c.done)
					cqe := nvme.CQE(cmd.CQE[:])
					if cmd.Err != nil || !cqe.Status().Success() || int(cqe.DW0()) != c.size {
						t.Fatalf("round %d command %d: %v, status %v, DW0 %d", round, i, cmd.Err, cqe.Status(), cqe.DW0())
					}
				}
			}
			// The last buffer comes back when the target sees its
			// response's SEND complete, which may be after the host
			// has the response.
			waitFor(t, ctx, "all data buffers back", func() bool { _, _, inUse := l.SharedBytes(); return inUse == 0 })
			srq, pool, inUse := l.SharedBytes()
			t.Logf("SRQ buffers %d bytes, data pool %d bytes registered, %d in use", srq, pool, inUse)
			if pool != DefaultMaxTransfer || inUse != 0 || (srq > 0) != l.UsesSRQ() {
				t.Fatalf("shared: SRQ %d, pool %d bytes (%d in use); want the pool at its cap of %d and all back", srq, pool, inUse, DefaultMaxTransfer)
			}
		})
	}
}

// holdHandler keeps the commands it is given until told to complete them.
type holdHandler struct {
	got    chan *fabrics.Request
	closed chan error
}

func (h *holdHandler) HandleCommand(r *fabrics.Request) { h.got <- r }
func (h *holdHandler) QueueClosed(err error)            { h.closed <- err }

// TestSRQPreConnectOverrun: with the port's SRQ a queue before its
// Connect has two slots; a host that sends a third command while the
// first two are outstanding (no Connect at all here) has its queue
// closed rather than holding more of the SRQ's buffers. The handler
// completes the two it held after the close, which gives their buffers
// back.
func TestSRQPreConnectOverrun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const port = 4446
	tdev, hdev := openSoft(t, pidAddr(33)), openSoft(t, pidAddr(34))
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: port})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.UsesSRQ() {
		t.Fatal("the soft provider's port has no SRQ")
	}
	h := &holdHandler{got: make(chan *fabrics.Request, 4), closed: make(chan error, 1)}
	go func() {
		if q, err := l.Accept(ctx); err == nil {
			q.Serve(h)
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(33), ServiceID: port},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer hq.Close()
	var held []*fabrics.Request
	for i := range 3 {
		submitAsync(t, hq, 0x02, make([]byte, 4096), fabrics.DirCtrlToHost)
		if i == 2 {
			break
		}
		select {
		case r := <-h.got:
			held = append(held, r)
		case <-ctx.Done():
			t.Fatalf("command %d not delivered", i)
		}
	}
	select {
	case err := <-h.closed:
		if err == nil || !strings.Contains(err.Error(), "before its Connect") {
			t.Fatalf("queue closed with %v, want the host's command before its Connect", err)
		}
	case r := <-h.got:
		t.Fatalf("third command delivered: %x", r.SQE[:4])
	case <-ctx.Done():
		t.Fatal("queue not closed")
	}
	for _, r := range held {
		r.Complete()
	}
	waitFor(t, ctx, "data buffers back", func() bool { _, _, inUse := l.SharedBytes(); return inUse == 0 })
}
