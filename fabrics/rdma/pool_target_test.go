package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// TestTargetPoolExhausted: with a data pool of one 128 KiB unit, 30
// commands of 64 KiB in flight at once (RDMA READs and WRITEs) wait for
// the buffer in turn and all complete; nothing is left held, with the
// port's SRQ and with per-queue receive rings alike.
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
			h := &memHandler{closed: make(chan error, 1)}
			go func() {
				if q, err := l.Accept(ctx); err == nil {
					q.Serve(h)
				}
			}()
			hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: pidAddr(31), ServiceID: port},
				fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
			if err != nil {
				t.Fatal(err)
			}
			defer hq.Close()
			fabricsConnect(t, ctx, hq)
			const n, size = 30, 64 << 10
			var done []<-chan *fabrics.HostCommand
			for i := range n {
				op, dir := byte(0x01), fabrics.DirHostToCtrl
				if i%2 == 1 {
					op, dir = 0x02, fabrics.DirCtrlToHost
				}
				done = append(done, submitAsync(t, hq, op, make([]byte, size), dir))
			}
			for i, d := range done {
				cmd := waitDone(t, ctx, d)
				cqe := nvme.CQE(cmd.CQE[:])
				if cmd.Err != nil || !cqe.Status().Success() || cqe.DW0() != size {
					t.Fatalf("command %d: %v, status %v, DW0 %d", i, cmd.Err, cqe.Status(), cqe.DW0())
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
