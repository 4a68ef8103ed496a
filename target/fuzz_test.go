package target

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/nvme"
	"github.com/nvmeof/nvmeof/target/bdev"
)

// countingQueue is a transport queue for the fuzz target: it hands
// commands straight to the handler and counts how often each request is
// completed, which fabrics/loop cannot tell.
type countingQueue struct {
	params fabrics.QueueParams
	h      fabrics.CommandHandler

	mu     sync.Mutex
	closed bool
	count  map[*fabrics.Request]int
	gone   sync.WaitGroup
}

func newCountingQueue(qid uint16) *countingQueue {
	q := &countingQueue{params: fabrics.QueueParams{QID: qid, SQSize: 33}, count: map[*fabrics.Request]int{}}
	q.gone.Add(1)
	return q
}

func (q *countingQueue) Params() fabrics.QueueParams { return q.params }
func (q *countingQueue) Depth() int                  { return 32 }
func (q *countingQueue) Remote() fabrics.Address {
	return fabrics.Address{Transport: fabrics.TransportLoop, Addr: netip.IPv6Loopback()}
}
func (q *countingQueue) Serve(h fabrics.CommandHandler) { q.h = h }
func (q *countingQueue) MaxTransfer() int               { return 128 << 10 }
func (q *countingQueue) InCapsuleDataSize() int         { return 0 }
func (q *countingQueue) Close() error {
	q.mu.Lock()
	was := q.closed
	q.closed = true
	q.mu.Unlock()
	if !was {
		go func() { q.h.QueueClosed(fabrics.ErrQueueClosed); q.gone.Done() }()
	}
	return nil
}

func (q *countingQueue) CompleteRequest(r *fabrics.Request) {
	q.mu.Lock()
	q.count[r]++
	q.mu.Unlock()
}

// deliver passes a command to the handler unless the queue is closed.
func (q *countingQueue) deliver(sqe [64]byte, data []byte) *fabrics.Request {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	r := &fabrics.Request{SQE: sqe, Data: data, Queue: q, Completer: q}
	q.count[r] = 0
	q.mu.Unlock()
	q.h.HandleCommand(r)
	return r
}

// waitDone waits until every delivered request has completed at least
// once: in the test's synctest bubble, until every goroutine is blocked,
// when nothing more can complete.
func (q *countingQueue) waitDone(t *testing.T) {
	t.Helper()
	synctest.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	pending := 0
	for _, n := range q.count {
		if n == 0 {
			pending++
		}
	}
	if pending != 0 {
		t.Fatalf("queue %d: %d commands never completed", q.params.QID, pending)
	}
}

func (q *countingQueue) checkOnce(t *testing.T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for r, n := range q.count {
		if n != 1 {
			t.Fatalf("queue %d: command %x completed %d times", q.params.QID, r.SQE[:8], n)
		}
	}
}

// fuzzSession builds a target with a connected, enabled controller with
// one I/O queue, over countingQueues (in a synctest bubble).
func fuzzSession(t *testing.T) (*Target, *countingQueue, *countingQueue) {
	tgt := New(Options{Logger: testLogger(t), WorkersPerNamespace: 2})
	must(t, tgt.AddSubsystem(SubsystemConfig{NQN: testSubNQN, AllowAnyHost: true}))
	mem, err := bdev.NewMemory(1<<20, 512)
	must(t, err)
	must(t, tgt.AddNamespace(testSubNQN, NamespaceConfig{NSID: 1, Device: mem, Reservations: true}))
	must(t, tgt.AddPort(PortConfig{ID: 1, Address: fabrics.Address{Transport: fabrics.TransportLoop}, Subsystems: []string{testSubNQN}}))
	p := tgt.ports[1]

	admin, io := newCountingQueue(0), newCountingQueue(1)
	p.attach(admin)
	p.attach(io)
	run := func(q *countingQueue, sqe [64]byte, data []byte) nvme.CQE {
		r := q.deliver(sqe, data)
		q.waitDone(t)
		return nvme.CQE(r.CQE[:])
	}
	sqe, d := connectSQE(0, 31, 0, 0, testSubNQN, testHostNQN, 0xffff)
	cqe := run(admin, sqe, d)
	if cqe.Status() != 0 {
		t.Fatalf("admin Connect: %v", cqe)
	}
	cmd := fabrics.NewCommand(fabrics.FCTypePropertySet)
	cmd.PropertySet().SetOffset(fabrics.PropCC)
	cmd.PropertySet().SetValue(uint64(enableCC))
	run(admin, [64]byte(cmd), nil)
	sqe, d = connectSQE(1, 31, 0, 0, testSubNQN, testHostNQN, uint16(cqe.DW0()))
	if cqe := run(io, sqe, d); cqe.Status() != 0 {
		t.Fatalf("I/O Connect: %v", cqe)
	}
	return tgt, admin, io
}

// FuzzCommands feeds random commands with random data to a connected
// controller's admin and I/O queues: nothing panics and every command
// completes exactly once.
//
// Input: records of one byte (bit 0: queue), a 64-byte SQE, a 2-byte data
// length and the data (zero-padded when the input runs out).
func FuzzCommands(f *testing.F) {
	rec := func(io bool, sqe [64]byte, data []byte) []byte {
		b := []byte{0}
		if io {
			b[0] = 1
		}
		b = append(b, sqe[:]...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(data)))
		return append(b, data...)
	}
	idf := newSQE(uint8(nvme.AdminIdentify), 0)
	nvme.IdentifyCommand{SQE: nvme.SQE(idf[:])}.SetCNS(nvme.CNSController)
	f.Add(rec(false, idf, make([]byte, 4096)))
	f.Add(rec(false, logSQE(nvme.LIDSMART, nvme.NSIDAll, 512, 0, false), make([]byte, 512)))
	f.Add(append(rec(false, newSQE(uint8(nvme.AdminAsyncEventRequest), 0), nil),
		rec(false, featSQE(true, nvme.FeatNumberOfQueues, 0x00030003), nil)...))
	f.Add(append(rec(true, rwSQE(nvme.IOWrite, 1, 0, 2), make([]byte, 1024)),
		rec(true, rwSQE(nvme.IORead, 1, 0, 2), make([]byte, 1024))...))
	f.Add(rec(true, rwSQE(nvme.IOCompare, 1, 10, 1), make([]byte, 512)))
	f.Add(rec(true, dsmSQE(1, 2, true), dsmData([2]uint64{0, 8}, [2]uint64{100, 8})))
	f.Add(rec(true, newSQE(uint8(nvme.IOFlush), nvme.NSIDAll), nil))
	f.Add(rec(false, [64]byte(fabrics.NewCommand(fabrics.FCTypeDisconnect)), nil))
	cc := fabrics.NewCommand(fabrics.FCTypePropertySet)
	cc.PropertySet().SetOffset(fabrics.PropCC)
	f.Add(append(rec(false, [64]byte(cc), nil), rec(true, rwSQE(nvme.IORead, 1, 0, 1), make([]byte, 512))...))
	f.Add(rec(true, [64]byte(fabrics.NewCommand(fabrics.FCTypeConnect)), make([]byte, 1024)))
	// Reservations: register, acquire Write Exclusive, a write, report,
	// release.
	reg := newSQE(uint8(nvme.IOReservationRegister), 1)
	acq := newSQE(uint8(nvme.IOReservationAcquire), 1)
	nvme.ReservationCommand{SQE: nvme.SQE(acq[:])}.SetRTYPE(nvme.ResvWriteExclusive)
	rep := newSQE(uint8(nvme.IOReservationReport), 1)
	nvme.ReservationReportCommand{SQE: nvme.SQE(rep[:])}.SetLength(128)
	nvme.ReservationReportCommand{SQE: nvme.SQE(rep[:])}.SetEDS(true)
	rel := newSQE(uint8(nvme.IOReservationRelease), 1)
	nvme.ReservationCommand{SQE: nvme.SQE(rel[:])}.SetRTYPE(nvme.ResvWriteExclusive)
	key := []byte{7, 0, 0, 0, 0, 0, 0, 0}
	f.Add(slices.Concat(rec(true, reg, append(make([]byte, 8), key...)), rec(true, acq, append(key, make([]byte, 8)...)),
		rec(true, rwSQE(nvme.IOWrite, 1, 0, 1), make([]byte, 512)), rec(true, rep, make([]byte, 128)), rec(true, rel, key)))

	f.Fuzz(func(t *testing.T, in []byte) {
		// In a bubble: "every command completed" is "every goroutine is
		// blocked and none is pending", without waiting on the clock.
		synctest.Test(t, func(t *testing.T) {
			tgt, admin, io := fuzzSession(t)
			for n := 0; len(in) >= 67 && n < 64; n++ {
				q := admin
				if in[0]&1 != 0 {
					q = io
				}
				sqe := [64]byte(in[1:65])
				dlen := int(binary.LittleEndian.Uint16(in[65:67]))
				in = in[67:]
				data := make([]byte, dlen)
				in = in[copy(data, in):]
				q.deliver(sqe, data)
			}
			// Tear everything down: outstanding AERs complete, in-flight I/O
			// finishes before the namespaces close.
			if err := tgt.Close(); err != nil && !errors.Is(err, bdev.ErrClosed) {
				t.Fatalf("Close: %v", err)
			}
			for _, q := range []*countingQueue{admin, io} {
				q.waitDone(t)
				q.gone.Wait()
			}
			// Every goroutine done or blocked: a late second completion
			// would have happened by now.
			synctest.Wait()
			admin.checkOnce(t)
			io.checkOnce(t)
		})
	})
}
