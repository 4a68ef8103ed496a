package target

import (
	"context"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/fabrics/loop"
)

// waitingListener wraps a loop listener so that its queues' Close waits
// until the handler's QueueClosed has returned, as fabrics/rdma's Close
// does (it waits for the queue goroutine that runs the teardown). A Close
// of a queue from inside its own QueueClosed would deadlock there; here it
// is counted instead.
type waitingListener struct {
	fabrics.Listener
	selfClose atomic.Int32
}

func (l *waitingListener) Accept(ctx context.Context) (fabrics.TargetQueue, error) {
	q, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &waitingQueue{TargetQueue: q, l: l, done: make(chan struct{})}, nil
}

type waitingQueue struct {
	fabrics.TargetQueue
	l *waitingListener
	// inClosed is the goroutine running the queue's QueueClosed (0:
	// none): a Close from that goroutine is the deadlock; one from
	// another goroutine (a port closing its queues at once) waits.
	inClosed atomic.Uint64
	done     chan struct{}
}

// goroutineID returns the calling goroutine's number, from its stack
// header ("goroutine N [...").
func goroutineID() uint64 {
	var b [64]byte
	s := string(b[:runtime.Stack(b[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	if i := strings.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	id, _ := strconv.ParseUint(s, 10, 64)
	return id
}

func (q *waitingQueue) Serve(h fabrics.CommandHandler) { q.TargetQueue.Serve(closeHook{h, q}) }

func (q *waitingQueue) Close() error {
	if id := q.inClosed.Load(); id != 0 && id == goroutineID() {
		q.l.selfClose.Add(1)
		return q.TargetQueue.Close()
	}
	err := q.TargetQueue.Close()
	select {
	case <-q.done:
	case <-time.After(5 * time.Second):
		panic("waitingQueue: QueueClosed did not return within 5 s of Close")
	}
	return err
}

type closeHook struct {
	fabrics.CommandHandler
	q *waitingQueue
}

func (c closeHook) QueueClosed(err error) {
	c.q.inClosed.Store(goroutineID())
	c.CommandHandler.QueueClosed(err)
	c.q.inClosed.Store(0)
	close(c.q.done)
}

// TestAdminQueueCloseNotReentrant: when the admin queue goes away (the
// host drops it, or the target shuts down with the host connected), the
// controller's shutdown closes the other queues but not the admin queue
// whose QueueClosed it runs in. Found against the Linux host: nvmetd hung
// on SIGTERM in fabrics/rdma's Close of the admin queue.
func TestAdminQueueCloseNotReentrant(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(f *fixture, admin *hq)
	}{
		{"host drops the admin queue", func(_ *fixture, admin *hq) { admin.q.Close() }},
		{"target closes", func(f *fixture, _ *hq) { must(f.t, f.tgt.Close()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fixture{t: t, net: loop.NewNetwork(), tgt: New(Options{Logger: testLogger(t)})}
			f.addr = fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.MustParseAddr("127.0.0.1"), ServiceID: 4420}
			must(t, f.tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowedHosts: []string{testHostNQN}}))
			must(t, f.tgt.AddPort(PortConfig{ID: testPortID, Address: f.addr, Subsystems: []string{testSubNQN}}))
			l, err := f.net.Listen(f.addr)
			must(t, err)
			wl := &waitingListener{Listener: l}
			f.serve(wl)

			admin := f.connectAdmin(testSubNQN, 0)
			admin.enable()
			io := f.connectIO(admin, 1, 8)
			tc.drop(f, admin)
			waitClosed(t, io, 2*time.Second)
			if n := wl.selfClose.Load(); n != 0 {
				t.Fatalf("%d queue(s) closed from inside their own QueueClosed", n)
			}
		})
	}
}
