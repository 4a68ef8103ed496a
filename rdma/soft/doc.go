// Package soft is a RoCEv2 host channel adapter in software over UDP port
// 4791: RC requester and responder, UD on QP1 for the connection manager,
// memory-region checks, batching and fault injection. It implements the
// rdma package's verbs API.
//
// One Device serves one IPv4 or IPv6 address. An IPv4 device sends from
// unconnected UDP sockets (IP_PMTUDISC_DO, so the kernel sends DF and IP
// ID 0, which the ICRC covers): each QP from its own source port, as rxe
// chooses it (sport.go), to port 4791, where the device receives. In raw
// mode (any address outside 127.0.0.0/8, or Config.DisableGSO) it
// receives through raw sockets with a BPF filter, so that it sees the
// sender's IP header and can verify every packet's ICRC; opening such a
// device needs CAP_NET_RAW.
// In GSO mode (loopback addresses) runs of equal-length packets leave as
// one UDP GSO send and arrive whole on the UDP socket (UDP_GRO), which
// rebuilds each packet's headers for the ICRC; no privilege is needed (see
// gso.go and net_linux.go). An IPv6 device (its GID is its address) sends
// and receives on its UDP socket alone, on any address and without
// privilege: nothing in an IPv6 header that the ICRC covers is hidden from
// a UDP socket, so every packet's ICRC is verified against exactly what
// its sender sent (net_linux.go); towards ::1 it uses GSO as an IPv4
// loopback device does.
//
// Receive goroutines (Config.RecvQueues, one socket each; the kernel
// steers every datagram to the socket of its destination QP number) read
// batches with recvmmsg and demultiplex by destination QP; the responder
// and the completer run in them to completion, under the QP's lock, each
// QP's packets in one goroutine. The requester runs in the goroutine that
// posts, in a receive goroutine when acknowledgements open the window,
// and in the retransmission timer.
//
// The RC protocol follows Linux rxe (drivers/infiniband/sw/rxe): go-back-N
// from the oldest unacknowledged PSN on a NAK sequence error, a lost READ
// response or a timeout; one NAK sequence error per gap; duplicates
// re-acknowledged and duplicate READs re-executed; RNR NAKs with the
// responder's min RNR timer. Differences: the requester sets AckReq on the
// last packet of every burst as well as at message ends and every
// Config.AckReqEvery packets; a large RDMA READ work request is issued as
// several READ requests of Config.ReadChunk packets (paced by max_rd_atomic
// and the window); the retry count 7 means 7 retries (the IBA rule; rxe
// treats it as infinite), the RNR retry count 7 means infinite; the
// connection manager gives the QPs it connects a min RNR timer of 1.28 ms
// (Config.MinRNRTimer), not ib_cm's 655.36 ms.
//
// Memory regions are checked on every remote access, not only when an
// operation starts: Invalidate, Rekey, Remap, Deregister, a SEND with
// Invalidate and LOCAL_INV fence the operations under way on the old
// rkey (a multi-packet RDMA WRITE, whose rkey only its FIRST packet
// carries, and the responses of an RDMA READ), which then fail with a
// remote access error and never touch a buffer bound later (mr.go).
//
// Config.Congestion turns on RoCEv2 congestion control, off by default as
// in rxe: ECN-capable data packets, CNPs answering CE marks, and DCQCN
// pacing each RC QP's requester (congestion.go, dcqcn.go,
// docs/congestion.md).
package soft
