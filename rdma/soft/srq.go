package soft

import (
	"fmt"
	"sync"

	"github.com/nvmeof/nvmeof/rdma"
)

// srq is a shared receive queue; it implements rdma.SRQ. Its WQEs are
// checked against its PD when posted, as a QP's receives are. A QP
// created with it takes the head WQE when a SEND (or an RDMA WRITE with
// immediate) begins, keeps it in its own rqOwn while the message is
// received, and completes it to its own receive CQ (qp.recvHead,
// qp.completeRecv).
type srq struct {
	pd     *pd
	maxSGE int

	mu         sync.Mutex
	wqes       []recvWQE
	head, tail uint64
	users      int // QPs created with it
	closed     bool
}

var _ rdma.SRQ = (*srq)(nil)

// CreateSRQ implements rdma.SRQCreator.
func (p *pd) CreateSRQ(a *rdma.SRQAttr) (rdma.SRQ, error) {
	if a == nil || a.MaxWR <= 0 || a.MaxWR > maxQPWR || a.MaxSGE < 0 || a.MaxSGE > maxSGE {
		return nil, fmt.Errorf("soft: SRQ attributes %+v: %w", a, rdma.ErrInvalidArgument)
	}
	s := &srq{pd: p, maxSGE: max(a.MaxSGE, 1), wqes: make([]recvWQE, a.MaxWR)}
	segs := make([]seg, a.MaxWR*s.maxSGE)
	for i := range s.wqes {
		s.wqes[i].segs = segs[i*s.maxSGE : i*s.maxSGE : (i+1)*s.maxSGE]
	}
	if err := p.use(false); err != nil {
		return nil, err
	}
	return s, nil
}

// PostRecv implements rdma.SRQ.
func (s *srq) PostRecv(wr *rdma.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for w := wr; w != nil; w = w.Next {
		if err := s.post(w); err != nil {
			return &rdma.PostError{Index: n, Err: err}
		}
		n++
	}
	return nil
}

func (s *srq) post(wr *rdma.RecvWR) error {
	switch {
	case s.closed:
		return fmt.Errorf("soft: SRQ: %w", rdma.ErrClosed)
	case s.tail-s.head >= uint64(len(s.wqes)):
		return fmt.Errorf("soft: SRQ: %w", rdma.ErrQueueFull)
	case len(wr.SGL) > s.maxSGE:
		return fmt.Errorf("soft: %d SGEs, the SRQ allows %d: %w", len(wr.SGL), s.maxSGE, rdma.ErrInvalidArgument)
	}
	s.wqes[s.tail%uint64(len(s.wqes))].fill(s.pd, wr)
	s.tail++
	return nil
}

// take moves the head WQE into dst (its segs have room for maxSGE); false
// if the SRQ is empty.
func (s *srq) take(dst *recvWQE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == s.tail || s.closed {
		return false
	}
	w := &s.wqes[s.head%uint64(len(s.wqes))]
	dst.wrid, dst.length, dst.status = w.wrid, w.length, w.status
	dst.segs = append(dst.segs[:0], w.segs...)
	s.head++
	return true
}

// untake puts back a WQE a QP took and did not complete (its reset or
// destruction in the middle of a message): at the head, where it was.
func (s *srq) untake(w *recvWQE) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.tail-s.head >= uint64(len(s.wqes)) {
		return
	}
	s.head--
	d := &s.wqes[s.head%uint64(len(s.wqes))]
	d.wrid, d.length, d.status = w.wrid, w.length, w.status
	d.segs = append(d.segs[:0], w.segs...)
}

// attach and detach count the QPs created with the SRQ.
func (s *srq) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("soft: SRQ: %w", rdma.ErrClosed)
	}
	s.users++
	return nil
}

func (s *srq) detach() {
	s.mu.Lock()
	s.users--
	s.mu.Unlock()
}

// Close implements rdma.SRQ.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("soft: SRQ: %w", rdma.ErrClosed)
	}
	if s.users > 0 {
		return fmt.Errorf("soft: SRQ with %d QPs: %w", s.users, rdma.ErrBusy)
	}
	s.closed = true
	s.pd.release(false)
	return nil
}

// srqRecvHead is recvHead for a QP with an SRQ: the WQE it holds for the
// message being received, or the SRQ's head taken now (q.mu held).
func (q *qp) srqRecvHead() *recvWQE {
	if !q.rqOwnHeld {
		if !q.srq.take(&q.rqOwn) {
			return nil
		}
		q.rqOwnHeld = true
	}
	return &q.rqOwn
}

// srqReturn gives a WQE the QP holds back to the SRQ (reset, destroy).
func (q *qp) srqReturn() {
	if q.srq != nil && q.rqOwnHeld {
		q.rqOwnHeld = false
		q.srq.untake(&q.rqOwn)
	}
}

// detachSRQ drops the QP's count on its SRQ, if it has one.
func (q *qp) detachSRQ() {
	if q.srq != nil {
		q.srq.detach()
	}
}
