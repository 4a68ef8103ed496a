package rdma

import (
	"fmt"
	"sync/atomic"

	"github.com/nvmeof/nvmeof/rdma"
)

// DefaultSRQSize is the number of command capsule buffers of a port's
// shared receive queue, as Linux nvmet-rdma's srq_size.
const DefaultSRQSize = 1024

// recvPool is a port's shared receive queue with its capsule buffers
// (SQE + in-capsule data each): the receive buffers of all its queues,
// where the provider has SRQs, instead of 2 × depth per queue. A buffer
// is the command's from its capsule's arrival until its response SEND
// has completed (in-capsule data is read from it), then it is posted
// again. The WRID of its receive is wrRecv | its index.
type recvPool struct {
	srq  rdma.SRQ
	mr   rdma.MR
	size int // bytes per buffer
	bufs []recvBuf
	// out counts the buffers receives have consumed and not yet given
	// back (taken, counted by the queue that got the completion).
	out atomic.Int64
}

type recvBuf struct {
	buf []byte
	sge [1]rdma.SGE
	wr  rdma.RecvWR
}

// newRecvPool creates an SRQ of n buffers of size bytes on pd and posts
// them all. It fails with an error wrapping rdma.ErrNotSupported when
// the provider has no SRQs.
func newRecvPool(pd rdma.PD, n, size int) (*recvPool, error) {
	sc, ok := pd.(rdma.SRQCreator)
	if !ok {
		return nil, fmt.Errorf("shared receive queue: %w", rdma.ErrNotSupported)
	}
	srq, err := sc.CreateSRQ(&rdma.SRQAttr{MaxWR: n, MaxSGE: 1})
	if err != nil {
		return nil, fmt.Errorf("create SRQ of %d: %w", n, err)
	}
	p := &recvPool{srq: srq, size: size, bufs: make([]recvBuf, n)}
	mem := make([]byte, n*size)
	if p.mr, err = pd.RegMR(mem, rdma.AccessLocalWrite); err != nil {
		srq.Close()
		return nil, fmt.Errorf("register %d bytes of SRQ buffers: %w", len(mem), err)
	}
	for i := range p.bufs {
		b := &p.bufs[i]
		off := i * size
		b.buf = mem[off : off+size : off+size]
		b.sge[0] = rdma.SGE{Addr: p.mr.Addr() + uint64(off), Length: uint32(size), LKey: p.mr.LKey()}
		b.wr = rdma.RecvWR{WRID: wrRecv | uint64(i), SGL: b.sge[:]}
		if i > 0 {
			p.bufs[i-1].wr.Next = &b.wr
		}
	}
	err = srq.PostRecv(&p.bufs[0].wr)
	for i := range p.bufs {
		p.bufs[i].wr.Next = nil
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("post %d SRQ receives: %w", n, err)
	}
	return p, nil
}

// taken counts a buffer a receive consumed (its completion seen).
func (p *recvPool) taken() { p.out.Add(1) }

// repost gives buffer i back to the SRQ.
func (p *recvPool) repost(i int) error {
	p.out.Add(-1)
	if err := p.srq.PostRecv(&p.bufs[i].wr); err != nil {
		return fmt.Errorf("repost SRQ receive: %w", err)
	}
	return nil
}

// bytes returns the registered size of the buffers.
func (p *recvPool) bytes() int64 { return int64(len(p.bufs) * p.size) }

// close destroys the SRQ (its QPs gone) and deregisters the buffers.
func (p *recvPool) close() error {
	err := p.srq.Close()
	if p.mr != nil {
		p.mr.Deregister()
	}
	return err
}
