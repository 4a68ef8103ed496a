package rdma

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// TestHostCloseVanishedTarget: closing a host queue whose target vanished
// does not wait for the DREP that will never come (it held the commands
// in flight 5 s longer, and a multipath failover with them); the QP is in
// the error state at once, so nothing lands in their buffers afterwards.
func TestHostCloseVanishedTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tdev := openSoft(t, netip.MustParseAddr("127.0.20.11"))
	hdev := openSoft(t, netip.MustParseAddr("127.0.20.12"))
	l, err := Listen(TargetConfig{Device: tdev, ServiceID: 4420})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		q, err := l.Accept(ctx)
		if err == nil {
			q.Serve(&memHandler{closed: make(chan error, 1)})
		}
	}()
	hq, err := NewDialer(HostConfig{Device: hdev}).Dial(ctx, fabrics.Address{Transport: fabrics.TransportRDMA, Addr: tdev.Addr(), ServiceID: 4420},
		fabrics.QueueParams{QID: 1, SQSize: 32, RQSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	fabricsConnect(t, ctx, hq)
	all := &soft.FaultConfig{Drop: 1}
	tdev.(*soft.Device).SetFaults(all, all)

	start := time.Now()
	hq.Close()
	// The old wait was 5 s; 4 leaves room for a loaded machine.
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Close took %v with the target gone, want it not to wait for a DREP", took)
	}
}
