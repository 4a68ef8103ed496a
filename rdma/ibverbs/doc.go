// Package ibverbs is the rdma provider over rdma-core: libibverbs for the
// verbs (PD, MR, CQ, QP) and librdmacm for the connection manager, so the
// same target and host code runs on any device rdma-core drives (mlx5,
// irdma, bnxt_re, rxe, siw).
//
// It is built only with the build tag ibverbs and cgo (`go build -tags
// ibverbs`, with libibverbs-dev and librdmacm-dev installed); without
// them Open and Devices return an error wrapping ErrNotBuilt that says
// how to build with it, and the rest of the module stays pure Go.
//
// Completion queues sleep on a completion channel whose file descriptor
// is polled by the Go runtime's netpoller (no thread parked in a cgo call
// per CQ); Config.Poll switches them to busy polling for latency. Posting
// work requests and polling completions allocate nothing: each QP and CQ
// owns C arrays sized at creation that the Go structures are copied into.
package ibverbs
