package initiator

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
)

// deadPeerDialer dials with d. Once dead is set its queues carry nothing
// more, as to a gateway SIGKILLed (soft RoCE: no disconnect, no
// completion): commands submitted stay in flight until the queue is
// closed, and the close takes closeWait first, as fabrics/rdma's host
// queue waits (up to 5 s) for the dead peer's DREP before it fails them.
type deadPeerDialer struct {
	d         fabrics.Dialer
	dead      *atomic.Bool
	closeWait time.Duration
}

func (dd deadPeerDialer) Dial(ctx context.Context, addr fabrics.Address, p fabrics.QueueParams) (fabrics.HostQueue, error) {
	if dd.dead.Load() {
		return nil, errors.New("dead peer: no answer")
	}
	q, err := dd.d.Dial(ctx, addr, p)
	if err != nil {
		return nil, err
	}
	return &deadPeerQueue{HostQueue: q, dd: dd}, nil
}

type deadPeerQueue struct {
	fabrics.HostQueue
	dd   deadPeerDialer
	mu   sync.Mutex
	held []*fabrics.HostCommand
	once sync.Once
}

func (q *deadPeerQueue) Submit(cmd *fabrics.HostCommand) error {
	if q.dd.dead.Load() {
		q.mu.Lock()
		q.held = append(q.held, cmd)
		q.mu.Unlock()
		return nil
	}
	return q.HostQueue.Submit(cmd)
}

func (q *deadPeerQueue) Close() error {
	q.once.Do(func() {
		if q.dd.dead.Load() {
			time.Sleep(q.dd.closeWait)
		}
		q.mu.Lock()
		held := q.held
		q.held = nil
		q.mu.Unlock()
		for _, c := range held {
			c.Err = fabrics.ErrQueueClosed
			c.Done(c)
		}
	})
	return q.HostQueue.Close()
}

// TestFailoverTiming pins how long I/O in flight on a gateway that died
// without a word (SIGKILL: no disconnect, no completion) takes to fail
// over to the other path. The host notices by keep-alive: Keep Alive goes
// every KATO/2 (KATO/4 with TBKAS, skipped after other completions) and
// times out after KATO, seen by the admin queue's timeout scan, which
// looks every KATO/8: the controller fails at most 1.625 KATO after the
// last Keep Alive answered (here the gateway dies just after one: the
// worst case; 8.125 s with the default 5 s). Then its I/O queues are torn
// down side by side; each transport close fails its commands in flight
// once it is done waiting for the dead peer (fabrics/rdma: 5 s for the
// DREP), and they go to the other path: one close wait in all, not one
// per queue as before. Neither the reconnect delay nor fast_io_fail_tmo
// changes that: they concern I/O waiting for this controller, not I/O
// another path takes.
func TestFailoverTiming(t *testing.T) {
	const ms = time.Millisecond
	const ioQueues = 2 // the most a 2-CPU machine gives: one read in flight on each
	tests := []struct {
		name      string
		kato      time.Duration // Options.KeepAliveTimeout (nvmeof connect -k)
		closeWait time.Duration // the transport's close of a queue to a dead peer
		fastFail  time.Duration // Options.FastIOFailTimeout (--fast_io_fail_tmo)
		// detect: the controller leaves live that long after the gateway
		// died; failover: the I/O in flight completes on the other path.
		detect, failover time.Duration
	}{
		{name: "defaults (nvmeof connect: -k 5, rdma)", kato: 5 * time.Second, closeWait: 5 * time.Second,
			detect: 8125*ms - ms, failover: 13125*ms - ms},
		{name: "keep-alive-tmo 2", kato: 2 * time.Second, closeWait: 5 * time.Second,
			detect: 3250*ms - ms, failover: 8250*ms - ms},
		{name: "keep-alive-tmo 1", kato: time.Second, closeWait: 5 * time.Second,
			detect: 1625*ms - ms, failover: 6625*ms - ms},
		{name: "fast_io_fail_tmo 1 does not shorten it", kato: 5 * time.Second, closeWait: 5 * time.Second,
			fastFail: time.Second, detect: 8125*ms - ms, failover: 13125*ms - ms},
		{name: "a transport close that does not wait", kato: 5 * time.Second,
			detect: 8125*ms - ms, failover: 8125*ms - ms},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := newFakeTarget(t, 1<<20)
				b := newFakePeer(t, a, "127.0.0.2", nvme.ANANonOptimized)
				var dead atomic.Bool
				o := Options{SubsystemNQN: fakeNQN, HostNQN: testHostNQN, KeepAliveTimeout: tc.kato,
					NrIOQueues: ioQueues, FastIOFailTimeout: tc.fastFail} // reconnect delay, command timeout: defaults
				connect := func(ft *fakeTarget, d fabrics.Dialer) *Controller {
					t.Helper()
					c, err := Connect(context.Background(), d, ft.addr, o)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = c.Close() })
					return c
				}
				start := time.Now() // keep-alive runs from here, every KATO/2
				ca := connect(a, deadPeerDialer{d: a.dialer(), dead: &dead, closeWait: tc.closeWait})
				cb := connect(b, b.dialer())
				if ca.NumIOQueues() != ioQueues {
					t.Fatalf("%d I/O queues, want %d", ca.NumIOQueues(), ioQueues)
				}
				m := NewMultipath(fakeNQN, MultipathOptions{})
				t.Cleanup(func() { _ = m.Close() })
				for _, c := range []*Controller{ca, cb} {
					if err := m.AddPath(c); err != nil {
						t.Fatal(err)
					}
				}
				ns, err := m.Namespace(1)
				if err != nil {
					t.Fatal(err)
				}
				w := bytes.Repeat([]byte{0x5a}, 4096)
				if _, err := ns.WriteAt(w, 0); err != nil {
					t.Fatal(err)
				}

				// The gateway dies just after its first Keep Alive.
				time.Sleep(tc.kato/2 + ms - time.Since(start))
				synctest.Wait()
				if got := a.kasSeen[ca.CntlID()]; got != 1 {
					t.Fatalf("%d Keep Alives before the gateway died, want 1", got)
				}
				died := time.Now()
				dead.Store(true)
				// One read in flight on each I/O queue (round robin).
				done := make(chan time.Duration, ioQueues)
				for range ioQueues {
					go func() {
						r := make([]byte, len(w))
						if _, err := ns.ReadAt(r, 0); err != nil || !bytes.Equal(r, w) {
							t.Errorf("read in flight when the gateway died: %v", err)
						}
						done <- time.Since(died)
					}()
				}
				synctest.Wait()

				time.Sleep(tc.detect - ms)
				synctest.Wait()
				if ca.State() != StateLive {
					t.Fatalf("controller %v %v after the gateway died, want live until %v", ca.State(), time.Since(died), tc.detect)
				}
				time.Sleep(ms)
				synctest.Wait()
				if ca.State() == StateLive {
					t.Fatalf("controller still live %v after the gateway died", time.Since(died))
				}
				for range ioQueues {
					if d := <-done; d != tc.failover {
						t.Errorf("read in flight failed over after %v, want %v", d, tc.failover)
					}
				}
				if rb := b.count("Read"); rb != ioQueues {
					t.Errorf("%d reads on the other path, want %d", rb, ioQueues)
				}
			})
		})
	}
}
