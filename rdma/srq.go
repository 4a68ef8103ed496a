package rdma

// SRQ is a shared receive queue (struct ibv_srq): receive work requests
// that any QP created with it (QPInitAttr.SRQ) consumes, in the order
// they were posted, for the SENDs it receives. A responder that finds
// it empty answers with an RNR NAK, as for an empty receive queue. The
// completion of a receive goes to the receive CQ of the QP that consumed
// it, with the work request's WRID. A QP that enters the error state
// flushes only a receive it has begun to fill; the SRQ's other work
// requests stay for the other QPs. Methods are safe for concurrent use.
type SRQ interface {
	// PostRecv queues a chain of receive work requests (linked by Next),
	// with the rules of QP.PostRecv; an SRQ takes them in any QP state.
	PostRecv(wr *RecvWR) error
	// Close destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy
	// while QPs use it. Its outstanding work requests are dropped
	// without completions.
	Close() error
}

// SRQAttr sizes a shared receive queue (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR  int // receive work requests outstanding at once
	MaxSGE int // SGEs per work request
}

// SRQCreator is implemented by the PD of a provider that has shared
// receive queues (rdma/soft, rdma/ibverbs). CreateSRQ fails with an
// error wrapping ErrNotSupported when the device has none.
type SRQCreator interface {
	CreateSRQ(attr *SRQAttr) (SRQ, error)
}
