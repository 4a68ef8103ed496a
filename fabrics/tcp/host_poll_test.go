package tcp

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/fabrics"
)

// hostCounters are the queue's send and read counters.
type hostCounters struct{ inlined, handedTo, rdPDUs, pdus uint64 }

func hostCountersOf(q *hostQueue) hostCounters {
	q.wmu.Lock()
	c := hostCounters{inlined: q.inlined, handedTo: q.handedTo}
	q.wmu.Unlock()
	q.rmu.Lock()
	c.rdPDUs, c.pdus = q.rdPDUs, q.pdus
	q.rmu.Unlock()
	return c
}

// hostPollRun submits cmd and spins on Poll until its Done has run
// (bounded by 10 s).
func hostPollRun(t *testing.T, q *hostQueue, cmd *fabrics.HostCommand) {
	t.Helper()
	var done atomic.Bool
	cmd.Done = func(*fabrics.HostCommand) { done.Store(true) }
	if err := q.Submit(cmd); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); !done.Load(); {
		q.Poll()
		if time.Now().After(end) {
			t.Fatal("no completion within 10 s of polling")
		}
	}
	if cmd.Err != nil {
		t.Fatal(cmd.Err)
	}
}

// hostPollWarm polls writes until the reader goroutine has left the
// socket to the poller: the first Poll takes it, but the reader may still
// read PDUs until it has seen Poll's flag (once data woke it).
func hostPollWarm(t *testing.T, q *hostQueue) {
	t.Helper()
	data := hostPattern(512, 9)
	hostPollRun(t, q, hostIOCmd(0x01, 0, data, 0))
	for end := time.Now().Add(10 * time.Second); !q.parked.Load(); runtime.Gosched() {
		if time.Now().After(end) {
			t.Fatal("the reader goroutine did not leave the socket to the poller within 10 s")
		}
		hostPollRun(t, q, hostIOCmd(0x01, 0, data, 0))
	}
}

// TestHostQD1NoHandOff: at QD1 the submitter writes its PDUs itself (the
// capsule, and the H2CData answering an R2T from whoever read the R2T)
// and, while it polls, reads the response itself: the writer and reader
// goroutines do nothing for the command (each would be a wake-up), and
// the poll that takes the response reads the socket once, not again to
// find it empty. After PollDone the reader goroutine delivers
// completions again.
func TestHostQD1NoHandOff(t *testing.T) {
	for _, tc := range []struct {
		name        string
		op          byte
		n, inl      int
		wantInlined uint64 // batches written inline per command
		wantPDUs    uint64 // PDUs read per command
	}{
		{"read 4K", 0x02, 4096, 0, 1, 2},                // capsule; C2HData, CapsuleResp
		{"write 4K in capsule", 0x01, 4096, 8192, 1, 1}, // capsule; CapsuleResp
		{"write 64K by R2T", 0x01, 64 << 10, 0, 2, 2},   // capsule, H2CData; R2T, CapsuleResp
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHostFake(t)
			q := hostDialFake(t, f, HostConfig{}, 1, 3)
			q.SetInCapsuleDataSize(tc.inl)
			data := hostPattern(tc.n, 7)
			hostPollWarm(t, q)
			hostPollRun(t, q, hostIOCmd(0x01, 0, data, 0)) // what the reads read
			before := hostCountersOf(q)
			const rounds = 20
			for i := range rounds {
				buf := data
				if tc.op == 0x02 {
					buf = make([]byte, tc.n)
				}
				hostPollRun(t, q, hostIOCmd(tc.op, 0, buf, uint16(i%2)))
				if !bytes.Equal(buf, data) {
					t.Fatalf("round %d: data differs", i)
				}
				// The read that took the response was short: the poll
				// did not read again only to find the socket empty.
				q.rmu.Lock()
				empty := q.lastEmpty
				q.rmu.Unlock()
				if empty {
					t.Fatalf("round %d: the poll's last read found the socket empty (one system call too many)", i)
				}
			}
			after := hostCountersOf(q)
			if got := after.inlined - before.inlined; got != rounds*tc.wantInlined {
				t.Errorf("%d batches written inline, want %d", got, rounds*tc.wantInlined)
			}
			if got := after.handedTo - before.handedTo; got != 0 {
				t.Errorf("%d batches written by the writer goroutine, want 0", got)
			}
			if got := after.rdPDUs - before.rdPDUs; got != 0 {
				t.Errorf("%d PDUs read by the reader goroutine while polling, want 0", got)
			}
			if got := after.pdus - before.pdus; got != rounds*tc.wantPDUs {
				t.Errorf("%d PDUs read, want %d", got, rounds*tc.wantPDUs)
			}

			// PollDone: completions come without Poll.
			q.PollDone()
			hostRun(t, q, hostIOCmd(0x02, 0, make([]byte, tc.n), 0))
			if got := hostCountersOf(q).rdPDUs - after.rdPDUs; got == 0 {
				t.Error("after PollDone the reader goroutine read nothing")
			}
		})
	}
}

// TestHostPollWait: PollWait sleeps on the socket until the response
// comes (the fake answers only once PollWait has begun), and runs the
// completion on the caller's goroutine; after a poll that found the
// socket empty it sleeps without reading first.
func TestHostPollWait(t *testing.T) {
	f := newHostFake(t)
	release := make(chan struct{})
	f.hook = func(c *hostFakeConn, sqe []byte) bool {
		cid := binary.LittleEndian.Uint16(sqe[2:])
		go func() {
			<-release
			c.resp(cid, 0)
		}()
		return true
	}
	q := hostDialFake(t, f, HostConfig{}, 1, 3)
	var done atomic.Bool
	cmd := hostIOCmd(0x01, 0, hostPattern(512, 1), 0)
	cmd.Done = func(*fabrics.HostCommand) { done.Store(true) }
	if err := q.Submit(cmd); err != nil {
		t.Fatal(err)
	}
	if q.PollWait(0) || done.Load() {
		t.Fatal("PollWait(0) found a completion before the response")
	}
	// The response leaves 20 ms after PollWait begins.
	timer := time.AfterFunc(20*time.Millisecond, func() { close(release) })
	defer timer.Stop()
	q.rmu.Lock()
	reads := q.reads
	q.rmu.Unlock()
	if !q.PollWait(10 * time.Second) {
		t.Fatal("PollWait(10 s) returned without the completion")
	}
	if !done.Load() {
		t.Fatal("PollWait reported work but Done did not run")
	}
	// The poll before found the socket empty: PollWait sleeps at once,
	// and reads once, the response.
	q.rmu.Lock()
	reads = q.reads - reads
	q.rmu.Unlock()
	if reads != 1 {
		t.Fatalf("PollWait read the socket %d times, want 1", reads)
	}
}

// TestHostPollPartialPDU: a C2HData of which half has arrived is not begun
// by Poll (which would wait for the rest, parking fio's thread): Poll
// returns false at once until it is whole; PollWait sleeps until it is
// whole (SO_RCVLOWAT), not until its next piece (the rest comes in two).
func TestHostPollPartialPDU(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "Poll", true: "PollWait"}[wait], func(t *testing.T) {
			f := newHostFake(t)
			const n = 128 << 10
			half, release := make(chan int, 1), make(chan struct{})
			var once sync.Once
			rel := func() { once.Do(func() { close(release) }) }
			defer rel()
			f.hook = func(c *hostFakeConn, sqe []byte) bool {
				if sqe[0] != 0x02 {
					return false
				}
				p := c.pdu(TypeC2HData, FlagDataLast|FlagDataSuccess, hostPattern(n, 3), func(p PDU) {
					p.DataPDU().SetDataL(n)
					copy(p[8:10], sqe[2:4])
				})
				c.c.Write(p[:len(p)/2])
				half <- len(p) - len(p)/2
				go func() {
					// The rest in two pieces, 20 ms apart.
					<-release
					mid := len(p)/2 + 4096
					c.c.Write(p[len(p)/2 : mid])
					<-time.After(20 * time.Millisecond)
					c.c.Write(p[mid:])
				}()
				return true
			}
			q := hostDialFake(t, f, HostConfig{}, 1, 3)
			hostPollWarm(t, q)
			var done atomic.Bool
			buf := make([]byte, n)
			cmd := hostIOCmd(0x02, 0, buf, 0)
			cmd.Done = func(*fabrics.HostCommand) { done.Store(true) }
			if err := q.Submit(cmd); err != nil {
				t.Fatal(err)
			}
			rest := <-half
			// A Poll that waits for the rest is freed after 5 s (and
			// then fails the test).
			watchdog := time.AfterFunc(5*time.Second, rel)
			defer watchdog.Stop()
			for end := time.Now().Add(10 * time.Second); ; {
				got, need := q.poll()
				if got || done.Load() {
					t.Fatal("Poll completed the command before all of its data was sent")
				}
				if need == rest {
					break // the first half is all in
				}
				if time.Now().After(end) {
					t.Fatalf("need %d after 10 s, want %d", need, rest)
				}
			}
			if wait {
				time.AfterFunc(20*time.Millisecond, rel)
				if !q.PollWait(10 * time.Second) {
					t.Fatal("PollWait returned before the PDU was whole")
				}
			} else {
				rel()
				for end := time.Now().Add(10 * time.Second); !done.Load(); q.Poll() {
					if time.Now().After(end) {
						t.Fatal("no completion within 10 s of polling")
					}
				}
			}
			if !done.Load() || !bytes.Equal(buf, hostPattern(n, 3)) {
				t.Fatal("the read did not complete with its data")
			}
		})
	}
}
