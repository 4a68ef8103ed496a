package initiator

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/nvme"
)

func hostOp(t *testing.T, st HostStats, nsid uint32, op nvme.IOOpcode) HostOpStats {
	t.Helper()
	for _, n := range st.Namespaces {
		if n.NSID != nsid {
			continue
		}
		for _, o := range n.Ops {
			if o.Opcode == op {
				return o
			}
		}
	}
	t.Fatalf("no counters for NSID %d %v in %+v", nsid, op, st.Namespaces)
	return HostOpStats{}
}

// TestHostStats runs I/O of known count through the synchronous and the
// asynchronous paths and checks the controller's counters.
func TestHostStats(t *testing.T) {
	for _, latency := range []bool{false, true} {
		t.Run(map[bool]string{false: "nolatency", true: "latency"}[latency], func(t *testing.T) {
			ft := newFakeTarget(t, 1<<20)
			c := connectFake(t, ft, testOpts())
			c.EnableLatencyStats(latency)
			ns, err := c.Namespace(1)
			if err != nil {
				t.Fatal(err)
			}
			const writes, reads, starts = 5, 9, 4
			buf := make([]byte, 4096)
			for i := range writes {
				if _, err := ns.WriteAt(buf, int64(i)*4096); err != nil {
					t.Fatal(err)
				}
			}
			for i := range reads {
				if _, err := ns.ReadAt(buf, int64(i)*4096); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan struct{}, 1)
			x := &IO{Op: OpRead, Buf: buf, Off: 8192, Done: func(*IO) { done <- struct{}{} }}
			for range starts {
				ns.Start(x)
				<-done
				if x.Err != nil {
					t.Fatal(x.Err)
				}
			}
			if err := ns.Flush(); err != nil {
				t.Fatal(err)
			}
			st := c.Stats()
			for _, tc := range []struct {
				op          nvme.IOOpcode
				cmds, bytes uint64
			}{
				{nvme.IOWrite, writes, writes * 4096},
				{nvme.IORead, reads + starts, (reads + starts) * 4096},
				{nvme.IOFlush, 1, 0},
				{nvme.IOWriteZeroes, 0, 0},
			} {
				o := hostOp(t, st, 1, tc.op)
				if o.Commands != tc.cmds || o.Bytes != tc.bytes || o.Errors != 0 {
					t.Errorf("%v: %d commands %d bytes %d errors, want %d, %d, 0", tc.op, o.Commands, o.Bytes, o.Errors, tc.cmds, tc.bytes)
				}
				var in uint64
				for _, n := range o.LatencyBuckets {
					in += n
				}
				want := uint64(0)
				if latency {
					want = tc.cmds
				}
				if o.LatencyCount != want || in != want {
					t.Errorf("%v: latency count %d, in buckets %d, want %d", tc.op, o.LatencyCount, in, want)
				}
			}
			if st.Timeouts != 0 || st.Reconnects != 0 || st.QueueResets != 0 {
				t.Errorf("timeouts %d reconnects %d resets %d on a healthy controller", st.Timeouts, st.Reconnects, st.QueueResets)
			}
			if len(st.Queues) != c.NumIOQueues() {
				t.Fatalf("%d queues in stats, %d I/O queues", len(st.Queues), c.NumIOQueues())
			}
			for _, q := range st.Queues {
				if q.InUse != 0 || q.Depth == 0 {
					t.Errorf("queue %d: %d of %d slots in use when idle", q.QID, q.InUse, q.Depth)
				}
			}
		})
	}
}

// TestHostStatsAllocs: counting and the latency histogram allocate
// nothing on the fast path.
func TestHostStatsAllocs(t *testing.T) {
	ft := newFakeTarget(t, 1<<20)
	c := connectFake(t, ft, testOpts())
	c.EnableLatencyStats(true)
	ns, _ := c.Namespace(1)
	done := make(chan struct{}, 1)
	x := &IO{Buf: make([]byte, 4096), Off: 8192, Done: func(*IO) { done <- struct{}{} }}
	for _, op := range []Op{OpRead, OpWrite} {
		x.Op = op
		allocs := testing.AllocsPerRun(200, func() {
			ns.Start(x)
			<-done
			if x.Err != nil {
				t.Fatal(x.Err)
			}
		})
		if allocs > 0 {
			t.Errorf("%v: %v allocations per Start with latency stats", op, allocs)
		}
	}
	buf := make([]byte, 4096)
	if allocs := testing.AllocsPerRun(200, func() {
		if _, err := ns.ReadAt(buf, 8192); err != nil {
			t.Fatal(err)
		}
	}); allocs > 0 {
		t.Errorf("%v allocations per ReadAt with latency stats", allocs)
	}
}

// TestHostStatsTimeouts: a Read the controller never answers counts a
// timeout and an Abort; then an I/O queue reset when the Abort is
// answered (not aborted), or a recovery and a reconnect when it is not.
func TestHostStatsTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name                                          string
		stallAbort                                    bool
		timeouts, aborts, resets, recoveries, reconns uint64
	}{
		{"not-aborted", false, 1, 1, 1, 0, 0},
		{"abort-unanswered", true, 2, 0, 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft, _, c, ns := oneQueue(t, 100*time.Millisecond)
				ft.stallAbrt.Store(tc.stallAbort)
				ft.stallRead.Store(true)
				buf := make([]byte, 4096)
				if _, err := ns.ReadAt(buf, 0); err == nil {
					t.Fatal("a stalled Read succeeded")
				}
				ft.mu.Lock()
				held := ft.held
				ft.held = nil
				ft.mu.Unlock()
				for _, r := range held {
					r.Complete()
				}
				waitFor(t, "live again", func() bool { return c.State() == StateLive && c.Stats().QueueResets+c.Stats().Reconnects > 0 })
				synctest.Wait()
				st := c.Stats()
				got := []uint64{st.Timeouts, st.Aborts, st.QueueResets, st.Recoveries, st.Reconnects}
				want := []uint64{tc.timeouts, tc.aborts, tc.resets, tc.recoveries, tc.reconns}
				if !slices.Equal(got, want) {
					t.Errorf("timeouts, aborts, resets, recoveries, reconnects = %v, want %v", got, want)
				}
				if o := hostOp(t, st, 1, nvme.IORead); o.Commands != 0 {
					t.Errorf("%d Reads counted as completed; the one that timed out is not", o.Commands)
				}
			})
		})
	}
}
