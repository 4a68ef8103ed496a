package target

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/nvme/auth"
)

func opStats(t *testing.T, ns NamespaceStats, op nvme.IOOpcode) OpStats {
	t.Helper()
	for _, o := range ns.Ops {
		if o.Opcode == op {
			return o
		}
	}
	t.Fatalf("no counters for %v", op)
	return OpStats{}
}

func findSubsys(t *testing.T, st Stats, nqn string) SubsystemStats {
	t.Helper()
	for _, s := range st.Subsystems {
		if s.NQN == nqn {
			return s
		}
	}
	t.Fatalf("no stats for subsystem %s", nqn)
	return SubsystemStats{}
}

// TestStatsCounts runs I/O of known count and size and checks every
// counter it moves.
func TestStatsCounts(t *testing.T) {
	for _, latency := range []bool{false, true} {
		t.Run(map[bool]string{false: "nolatency", true: "latency"}[latency], func(t *testing.T) {
			f := newFixture(t)
			f.tgt.EnableLatencyStats(latency)
			s := f.session()
			const writes, reads, blocks = 7, 5, 4
			data := make([]byte, blocks*512)
			for i := range writes {
				expect(t, s.io.write(1, uint64(i*blocks), data), 0, "write")
			}
			for i := range reads {
				expect(t, s.io.read(1, uint64(i*blocks), blocks), 0, "read")
			}
			expect(t, s.io.run(newSQE(uint8(nvme.IOFlush), 1), nil, fabrics.DirNone), 0, "flush")
			// Refused before the backend: an error by status, no Read.
			expect(t, s.io.read(1, testNSSize/512, 1), nvme.StatusLBAOutOfRange, "read past the end")
			expect(t, s.io.read(1, testNSSize/512, 1), nvme.StatusLBAOutOfRange, "read past the end")

			st := f.tgt.Stats()
			if st.LatencyEnabled != latency {
				t.Errorf("LatencyEnabled = %v, want %v", st.LatencyEnabled, latency)
			}
			if len(st.Subsystems) < 2 || !st.Subsystems[0].Discovery {
				t.Fatalf("subsystems %+v: want the discovery subsystem first", st.Subsystems)
			}
			ss := findSubsys(t, st, testSubNQN)
			if ss.ControllersCreated != 1 || ss.ControllersRemoved != 0 {
				t.Errorf("controllers created/removed %d/%d, want 1/0", ss.ControllersCreated, ss.ControllersRemoved)
			}
			if len(ss.Namespaces) != 1 || ss.Namespaces[0].NSID != 1 || !ss.Namespaces[0].Enabled {
				t.Fatalf("namespaces %+v", ss.Namespaces)
			}
			ns := ss.Namespaces[0]
			for _, tc := range []struct {
				op          nvme.IOOpcode
				cmds, bytes uint64
			}{
				{nvme.IOWrite, writes, writes * blocks * 512},
				{nvme.IORead, reads, reads * blocks * 512},
				{nvme.IOFlush, 1, 0},
				{nvme.IOCompare, 0, 0},
			} {
				o := opStats(t, ns, tc.op)
				if o.Commands != tc.cmds || o.Bytes != tc.bytes || o.Errors != 0 {
					t.Errorf("%v: %d commands %d bytes %d errors, want %d, %d, 0", tc.op, o.Commands, o.Bytes, o.Errors, tc.cmds, tc.bytes)
				}
				var inBuckets uint64
				for _, n := range o.LatencyBuckets {
					inBuckets += n
				}
				want := uint64(0)
				if latency {
					want = tc.cmds
				}
				if o.LatencyCount != want || inBuckets != want {
					t.Errorf("%v: latency count %d, in buckets %d, want %d", tc.op, o.LatencyCount, inBuckets, want)
				}
				if (o.LatencySum > 0) != (want > 0) {
					t.Errorf("%v: latency sum %v with %d observations", tc.op, o.LatencySum, want)
				}
			}
			if len(ss.Errors) != 1 || ss.Errors[0].Status != nvme.StatusLBAOutOfRange || ss.Errors[0].Count != 2 {
				t.Errorf("errors %+v, want 2 × LBA Out of Range", ss.Errors)
			}
			if len(ss.Controllers) != 1 || ss.Controllers[0].CntlID != s.admin.cntlid || ss.Controllers[0].HostNQN != testHostNQN {
				t.Fatalf("controllers %+v", ss.Controllers)
			}
			qs := ss.Controllers[0].Queues
			if len(qs) != 2 || qs[0].QID != 0 || qs[1].QID != 1 || qs[1].Size != 33 {
				t.Fatalf("queues %+v, want QID 0 and 1 (33 entries)", qs)
			}
			for _, q := range qs {
				if q.InFlight != 0 {
					t.Errorf("queue %d: %d in flight when idle", q.QID, q.InFlight)
				}
			}

			// Losing the admin queue removes the controller.
			s.admin.q.Close()
			waitUntil(t, "controller removed", 10*time.Second, func() bool {
				return findSubsys(t, f.tgt.Stats(), testSubNQN).ControllersRemoved == 1
			})
			if c := findSubsys(t, f.tgt.Stats(), testSubNQN).Controllers; len(c) != 0 {
				t.Errorf("controllers after removal: %+v", c)
			}
		})
	}
}

// TestStatsAllocs checks that the counters and the latency histogram
// allocate nothing per command.
func TestStatsAllocs(t *testing.T) {
	f := newFixture(t)
	f.tgt.EnableLatencyStats(true)
	s := f.session()
	for _, op := range []nvme.IOOpcode{nvme.IORead, nvme.IOWrite} {
		l := newIOLoop(t, s, op, 8)
		for range 100 {
			l.once(t)
		}
		if n := testing.AllocsPerRun(1000, func() { l.once(t) }); n != 0 {
			t.Errorf("%v: %.2f allocations per command with latency stats, want 0", op, n)
		}
	}
}

// BenchmarkStats measures a snapshot (one scrape's worth of target work).
func BenchmarkStats(b *testing.B) {
	f := newFixture(b)
	f.session()
	for b.Loop() {
		_ = f.tgt.Stats()
	}
}

// BenchmarkRead4KLatencyStats is BenchmarkRead4K with the latency
// histograms on: the cost of their two clock reads per command.
func BenchmarkRead4KLatencyStats(b *testing.B) {
	f := newFixture(b)
	f.tgt.EnableLatencyStats(true)
	s := f.session()
	l := newIOLoop(b, s, nvme.IORead, 8)
	l.once(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		l.once(b)
	}
}

// TestStatsKeepAliveTimeout: a controller whose host falls silent counts
// one keep-alive timeout and one removal (synctest: the timer's clock is
// the bubble's).
func TestStatsKeepAliveTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.connectAdmin(testSubNQN, 1000)
		a.enable()
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		ss := findSubsys(t, f.tgt.Stats(), testSubNQN)
		if ss.KeepAliveTimeouts != 1 || ss.ControllersCreated != 1 || ss.ControllersRemoved != 1 {
			t.Errorf("keep-alive timeouts %d, controllers created %d removed %d; want 1, 1, 1",
				ss.KeepAliveTimeouts, ss.ControllersCreated, ss.ControllersRemoved)
		}
	})
}

// TestStatsAuthentications counts a successful and a failed DH-HMAC-CHAP
// transaction.
func TestStatsAuthentications(t *testing.T) {
	f := newFixture(t)
	hk, other := genKey(t, auth.HashSHA256), genKey(t, auth.HashSHA256)
	must(t, f.tgt.SetHostAuth(testHostNQN, &HostAuth{Key: hk}))
	for _, tc := range []struct {
		key      *auth.Key
		ok, fail uint64
	}{
		{hk, 1, 0},
		{other, 1, 1},
	} {
		a := f.dial(0, 31)
		expect(t, a.connectRaw(31, 0, 0, testSubNQN, testHostNQN, fabrics.CntlIDDynamic), 0, "admin Connect")
		err := a.authenticate(auth.HostConfig{Key: tc.key})
		if (err == nil) != (tc.key == hk) {
			t.Fatalf("authenticate: %v", err)
		}
		ss := findSubsys(t, f.tgt.Stats(), testSubNQN)
		if ss.AuthSucceeded != tc.ok || ss.AuthFailed != tc.fail {
			t.Errorf("authentications %d succeeded %d failed, want %d, %d", ss.AuthSucceeded, ss.AuthFailed, tc.ok, tc.fail)
		}
	}
}

// TestStatsAERsAbortedApart: the AERs a host leaves outstanding, which a
// disconnect ends with Internal Error (as Linux), are counted as aborted
// AERs, not as errors: a clean disconnect adds nothing to Errors.
func TestStatsAERsAbortedApart(t *testing.T) {
	f := newFixture(t)
	a := f.connectAdmin(testSubNQN, 0)
	a.enable()
	for range 2 {
		a.submit(newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil, fabrics.DirNone)
	}
	waitUntil(t, "2 AERs outstanding", 10*time.Second, func() bool {
		f.tgt.mu.Lock()
		c := f.tgt.subsys[testSubNQN].ctrls[a.cntlid]
		f.tgt.mu.Unlock()
		if c == nil {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.aers) == 2
	})
	a.q.Close()
	waitUntil(t, "controller removed", 10*time.Second, func() bool {
		return findSubsys(t, f.tgt.Stats(), testSubNQN).ControllersRemoved == 1
	})
	ss := findSubsys(t, f.tgt.Stats(), testSubNQN)
	if ss.AERsAborted != 2 || len(ss.Errors) != 0 {
		t.Errorf("AERs aborted %d, errors %+v; want 2 and none", ss.AERsAborted, ss.Errors)
	}
}
