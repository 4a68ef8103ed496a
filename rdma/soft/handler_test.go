package soft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmeof/nvmeof/rdma"
)

// echoServer answers every SEND it receives with a SEND of the same bytes,
// from its receive CQ's handler: it reposts the receive and posts the
// answer on the goroutine that delivered the completion.
type echoServer struct {
	t       testing.TB
	e       *end
	buf     rdma.MR
	msg     int
	slots   int
	running atomic.Int32 // handler calls in progress (must never exceed 1)
	overlap atomic.Bool
	errs    chan error
	sendWR  []rdma.SendWR
	sendSGE []rdma.SGE
	recvWR  []rdma.RecvWR
	recvSGE []rdma.SGE
}

func newEchoServer(t testing.TB, e *end, slots, msg int) *echoServer {
	s := &echoServer{t: t, e: e, msg: msg, slots: slots, errs: make(chan error, 16)}
	s.buf = regMR(t, e.pd, 2*slots*msg, rdma.AccessLocalWrite)
	s.sendWR = make([]rdma.SendWR, slots)
	s.sendSGE = make([]rdma.SGE, slots)
	s.recvWR = make([]rdma.RecvWR, slots)
	s.recvSGE = make([]rdma.SGE, slots)
	for i := range slots {
		s.recvSGE[i] = sge(s.buf, i*msg, msg)
		s.recvWR[i] = rdma.RecvWR{WRID: uint64(i), SGL: s.recvSGE[i : i+1]}
		s.sendSGE[i] = sge(s.buf, (slots+i)*msg, msg)
		s.sendWR[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, SGL: s.sendSGE[i : i+1]}
		if err := e.qp.PostRecv(&s.recvWR[i]); err != nil {
			t.Fatal(err)
		}
	}
	e.rcq.(rdma.HandlerCQ).SetHandler(s.onRecvs)
	e.scq.(rdma.HandlerCQ).SetHandler(s.onSends)
	return s
}

func (s *echoServer) fail(err error) {
	select {
	case s.errs <- err:
	default:
	}
}

func (s *echoServer) enter() {
	if s.running.Add(1) != 1 {
		s.overlap.Store(true)
	}
}

func (s *echoServer) onRecvs(wcs []rdma.WorkCompletion) {
	s.enter()
	defer s.running.Add(-1)
	for i := range wcs {
		s.onRecv(&wcs[i])
	}
}

func (s *echoServer) onRecv(wc *rdma.WorkCompletion) {
	if wc.Status != rdma.Success {
		if wc.Status != rdma.WRFlushError {
			s.fail(wc.Err())
		}
		return
	}
	i := int(wc.WRID)
	n := int(wc.ByteLen)
	b := s.buf.Bytes()
	copy(b[(s.slots+i)*s.msg:], b[i*s.msg:i*s.msg+n])
	s.sendSGE[i].Length = uint32(n)
	if err := s.e.qp.PostRecv(&s.recvWR[i]); err != nil {
		s.fail(err)
		return
	}
	if err := s.e.qp.PostSend(&s.sendWR[i]); err != nil {
		s.fail(err)
	}
}

func (s *echoServer) onSends(wcs []rdma.WorkCompletion) {
	for _, wc := range wcs {
		if wc.Status != rdma.Success && wc.Status != rdma.WRFlushError {
			s.fail(wc.Err())
		}
	}
}

// TestCQHandlerEcho runs request/response traffic where both sides handle
// completions in CQ handlers: the server answers from its handler, the
// client posts the next request from its handler. Every answer must come
// back intact and in order, handler calls must never overlap, and Poll
// must see nothing while a handler is set. It runs clean and through
// loss, reordering and duplication (which exercise the handlers run from
// the retransmission timer and from PostSend).
func TestCQHandlerEcho(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults *FaultConfig
		n      int
	}{
		{"clean", nil, 4000},
		{"faults", &FaultConfig{Drop: 0.02, Reorder: 0.01, Duplicate: 0.01, Seed: 7}, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openPair(t, Config{SendFaults: tc.faults}, Config{SendFaults: tc.faults})
			// The default timeout without faults (a retry there is
			// spurious), the loss tests' with them: 4.2 ms ran out of
			// retries on a loaded machine.
			o := qpOpts{psnA: 0xfffff0, psnB: 5}
			if tc.faults != nil {
				o.timeout = lossTimeout
			}
			ea, eb := connect(t, a, b, o)
			const window, msg = 16, 600
			srv := newEchoServer(t, eb, 2*window, msg)

			c := &echoServer{t: t, e: ea, msg: msg, slots: window, errs: make(chan error, 16)}
			c.buf = regMR(t, ea.pd, 2*window*msg, rdma.AccessLocalWrite)
			var (
				mu       sync.Mutex
				next     int // next request number to send
				got      int // answers received
				sendWRs  = make([]rdma.SendWR, window)
				sendSGEs = make([]rdma.SGE, window)
				recvWRs  = make([]rdma.RecvWR, window)
				recvSGEs = make([]rdma.SGE, window)
				done     = make(chan struct{})
			)
			payload := func(k int, b []byte) {
				binary.BigEndian.PutUint32(b, uint32(k))
				fill(b[4:], k)
			}
			size := func(k int) int { return 8 + k%(msg-8) }
			// prepare fills the slot of the next request (mu held).
			prepare := func(slot int) {
				k := next
				next++
				n := size(k)
				payload(k, c.buf.Bytes()[(window+slot)*msg:(window+slot)*msg+n])
				sendSGEs[slot].Length = uint32(n)
			}
			send := func(slot int) {
				if err := ea.qp.PostSend(&sendWRs[slot]); err != nil {
					c.fail(err)
				}
			}
			post := func(slot int) { prepare(slot); send(slot) }
			for i := range window {
				recvSGEs[i] = sge(c.buf, i*msg, msg)
				recvWRs[i] = rdma.RecvWR{WRID: uint64(i), SGL: recvSGEs[i : i+1]}
				sendSGEs[i] = sge(c.buf, (window+i)*msg, msg)
				sendWRs[i] = rdma.SendWR{WRID: uint64(i), Opcode: rdma.WRSend, SGL: sendSGEs[i : i+1]}
				postRecv(t, ea.qp, uint64(i), recvSGEs[i])
			}
			want := make([]byte, msg)
			onAnswer := func(wc *rdma.WorkCompletion) {
				if wc.Status != rdma.Success {
					if wc.Status != rdma.WRFlushError {
						c.fail(wc.Err())
					}
					return
				}
				mu.Lock()
				defer mu.Unlock()
				i := int(wc.WRID)
				b := c.buf.Bytes()[i*msg : i*msg+int(wc.ByteLen)]
				n := size(got)
				payload(got, want[:n])
				if !bytes.Equal(b, want[:n]) {
					c.fail(errorf("answer %d: %d bytes, differs from the request (%d bytes)", got, len(b), n))
				}
				got++
				if err := ea.qp.PostRecv(&recvWRs[i]); err != nil {
					c.fail(err)
				}
				if next < tc.n {
					post(int(uint32(next) % window))
				}
				if got == tc.n {
					close(done)
				}
			}
			ea.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) {
				c.enter()
				defer c.running.Add(-1)
				for i := range wcs {
					onAnswer(&wcs[i])
				}
			})
			ea.scq.(rdma.HandlerCQ).SetHandler(c.onSends)
			// The first window as one chain (copies of the slots' WRs,
			// whose Next stays nil), without holding mu across PostSend:
			// the provider may run the pending handlers (onAnswer, which
			// takes mu) inside PostSend. One PostSend keeps the order:
			// posted one by one, a handler could post request k+1 before
			// this loop posted request k, and the answers would come out
			// of order.
			first := make([]rdma.SendWR, window)
			mu.Lock()
			for i := range window {
				prepare(i)
				first[i] = sendWRs[i]
				if i > 0 {
					first[i-1].Next = &first[i]
				}
			}
			mu.Unlock()
			if err := ea.qp.PostSend(&first[0]); err != nil {
				c.fail(err)
			}
			select {
			case <-done:
			case err := <-c.errs:
				t.Fatal(err)
			case err := <-srv.errs:
				t.Fatal(err)
			case <-time.After(60 * time.Second):
				mu.Lock()
				t.Fatalf("timeout: %d of %d answers", got, tc.n)
			}
			if srv.overlap.Load() || c.overlap.Load() {
				t.Fatal("handler calls overlapped")
			}
			var wc [1]rdma.WorkCompletion
			if ea.rcq.Poll(wc[:]) != 0 {
				t.Fatal("Poll returned a completion while a handler was set")
			}

			// Without a handler, completions queue for Poll again.
			eb.rcq.(rdma.HandlerCQ).SetHandler(nil)
			ea.rcq.(rdma.HandlerCQ).SetHandler(nil)
			postSend(t, ea.qp, &rdma.SendWR{WRID: 99, Opcode: rdma.WRSend, SGL: []rdma.SGE{sge(c.buf, window*msg, 8)}})
			last := poll(t, eb.rcq, 1, 5*time.Second)
			if last[0].Status != rdma.Success || last[0].ByteLen != 8 {
				t.Fatalf("completion after SetHandler(nil): %+v", last[0])
			}
		})
	}
}

// TestCQHandlerFlush checks that completions pushed outside the receive
// goroutine reach the handler: moving the QP to the error state flushes
// its receive queue on the caller's goroutine.
func TestCQHandlerFlush(t *testing.T) {
	a, b := openPair(t, Config{}, Config{})
	ea, _ := connect(t, a, b, qpOpts{})
	buf := regMR(t, ea.pd, 4096, rdma.AccessLocalWrite)
	var (
		mu  sync.Mutex
		got []uint64
	)
	ea.rcq.(rdma.HandlerCQ).SetHandler(func(wcs []rdma.WorkCompletion) {
		for _, wc := range wcs {
			if wc.Status != rdma.WRFlushError {
				t.Errorf("completion %+v, want a flush", wc)
			}
			mu.Lock()
			got = append(got, wc.WRID)
			mu.Unlock()
		}
	})
	for i := range 8 {
		postRecv(t, ea.qp, uint64(i), sge(buf, i*512, 512))
	}
	if err := ea.qp.Modify(&rdma.QPAttr{State: rdma.QPSErr}, rdma.QPAttrState); err != nil {
		t.Fatal(err)
	}
	// The flush ran the handler before Modify returned.
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 8 {
		t.Fatalf("handler saw %d flushed receives, want 8", len(got))
	}
	for i, w := range got {
		if w != uint64(i) {
			t.Fatalf("flushed receives in order %v", got)
		}
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
