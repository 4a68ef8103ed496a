package rdma

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// closingHandler answers every command after the Connect and closes its
// queue right after, as nvmetd does with an I/O queue whose
// authentication failed (its AUTH_Failure1, then the close). The reply is
// completed on the queue goroutine (inside a batch of completions) and
// the close comes from another goroutine.
type closingHandler struct {
	q      fabrics.TargetQueue
	closed chan error
}

const closeDW0 = 0xfa11

func (h *closingHandler) HandleCommand(r *fabrics.Request) {
	if r.SQE[0] == fabricsOpcode {
		go r.Complete()
		return
	}
	if r.SQE[0] == 0x02 {
		for i := range r.Data {
			r.Data[i] = byte(i)
		}
	}
	nvme.CQE(r.CQE[:]).SetDW0(closeDW0)
	r.Complete()
	go h.q.Close()
}

func (h *closingHandler) QueueClosed(err error) { h.closed <- err }

// TestReplyBeforeClose: a response posted before the target closes the
// queue reaches the host (issue 22: the AUTH_Failure1 posted before the
// close of the queue was flushed by the disconnect). Each round opens a
// queue, sends one command, and expects its completion, not the queue's
// close; the reads check the RDMA WRITE before the response as well.
func TestReplyBeforeClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	taddr, haddr := pidAddr(39), pidAddr(40)
	tdev, hdev := openSoft(t, taddr), openSoft(t, haddr)
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	d := NewDialer(HostConfig{Device: hdev})
	want := make([]byte, 8192)
	for i := range want {
		want[i] = byte(i)
	}
	const rounds = 20
	for i := range rounds {
		h := &closingHandler{closed: make(chan error, 1)}
		accepted := make(chan struct{})
		go func() {
			defer close(accepted)
			q, err := l.Accept(ctx)
			if err != nil {
				return
			}
			h.q = q
			q.Serve(h)
		}()
		hq, err := d.Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: taddr, ServiceID: 4420},
			fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
		if err != nil {
			t.Fatal(err)
		}
		fabricsConnect(t, ctx, hq)
		<-accepted
		op, buf, dir := byte(0x09), []byte(nil), fabrics.DirNone
		if i%2 == 1 {
			op, buf, dir = 0x02, make([]byte, len(want)), fabrics.DirCtrlToHost
		}
		c := waitDone(t, ctx, submitAsync(t, hq, op, buf, dir))
		if c.Err != nil {
			t.Fatalf("round %d: the reply posted before the close was lost: %v", i, c.Err)
		}
		if dw0 := nvme.CQE(c.CQE[:]).DW0(); dw0 != closeDW0 {
			t.Fatalf("round %d: DW0 %#x, want %#x (status %v, cqe %x)", i, dw0, closeDW0, nvme.CQE(c.CQE[:]).Status(), c.CQE)
		}
		if buf != nil && !bytes.Equal(buf, want) {
			t.Fatalf("round %d: read data differs", i)
		}
		select {
		case <-h.closed:
		case <-ctx.Done():
			t.Fatalf("round %d: the target queue did not close", i)
		}
		hq.Close()
	}
}
