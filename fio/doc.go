// Package fio is the Go half of nvmeof's fio external I/O engine: an
// asynchronous submit/reap interface over an initiator namespace, which
// the C shim in fio/engine wraps as fio's struct ioengine_ops.
//
// Build the engine with scripts/build-fio-engine.sh (it compiles against
// the headers of the installed fio version) and load it with
// ioengine=external:PATH:
//
//	fio --thread --ioengine=external:$PWD/out/fio-nvmeof.so \
//	    --traddr=127.0.0.1 --trsvcid=4420 --subnqn=nqn.2026-11.io.nvmeof:bench \
//	    --host_traddr=127.0.0.2 --nsid=1 job.fio
//
// The engine's options (fio --enghelp=external:PATH lists them):
//
//	transport     rdma (default; RoCEv2 through the provider below), tcp
//	              (NVMe/TCP; the provider options do not apply) or loop
//	              (an in-process target with one memory namespace; for
//	              tests, it needs neither root nor a target daemon)
//	provider      the RDMA provider: auto (default; ibverbs when the engine
//	              has it and an RDMA device holds host_traddr, else soft),
//	              soft (pure-Go RoCEv2) or ibverbs (rdma-core: an RDMA NIC or
//	              rxe; build the engine with NVMEOF_TAGS=ibverbs)
//	device        the ibverbs device (mlx5_0, rxe0; default: the one holding
//	              host_traddr)
//	traddr        the target port's IP address (default 127.0.0.1)
//	trsvcid       the NVMe-oF service ID, RDMA CM port (default 4420)
//	subnqn        the subsystem NQN (rdma: required; loop: default
//	              nqn.2026-11.io.nvmeof:fio-loop)
//	hostnqn       the host NQN (default: /etc/nvme/hostnqn, else a UUID NQN)
//	host_traddr   the local address of the RDMA device (default: the
//	              source address the kernel routes traddr from; 127.0.0.2 when
//	              traddr is a loopback address, since the target's device holds
//	              UDP 4791 on 127.0.0.1)
//	dhchap_secret the host's DH-HMAC-CHAP secret, DHHC-1:hh:base64: (as
//	              nvme-cli --dhchap-secret); needed when the target
//	              requires authentication. With transport=loop the
//	              in-process target then requires it (and
//	              dhchap_ctrl_secret) from the host
//	dhchap_ctrl_secret
//	              the controller's secret, for bidirectional
//	              authentication (--dhchap-ctrl-secret)
//	nsid          the namespace ID (default 1)
//	nr_io_queues  I/O queues per job (default 1, a job being one thread; 0: one per CPU, as nvme-cli)
//	queue_size    I/O queue size in entries (default 128)
//	loop_size     size of the loop target's memory namespace (default 1g)
//
// Every fio job (each of numjobs) opens its own controller: an association
// with its own admin and I/O queues, as SPDK's fio plugin opens one per
// thread. All jobs of one fio process share one RDMA device per provider,
// device and host_traddr and, for transport=loop, one in-process target per
// (trsvcid, subnqn), which lives until fio exits so that a verify job reads
// what an earlier job wrote.
//
// fio must run jobs as threads (--thread): the engine is a Go c-shared
// library whose runtime starts when fio loads it, and a Go runtime does not
// survive fork. The engine's setup hook switches a job to thread mode as
// fio's rbd engine does; with create_serialize=0 (setup after the fork) it
// refuses to run instead.
//
// Engine.Submit hands each request to the initiator's asynchronous API
// (initiator.Namespace.Start) on the submitting fio thread: a read, write
// or flush that is one NVMe command (at most MDTS and the transport's
// limit) is posted to the transport right there, and its completion
// callback, on the transport's goroutine, pushes the request's slot onto
// the completion ring that Reap drains, waking Reap if it waits. That is
// one goroutine hand-off per I/O beyond the transport's own (completion to
// the fio thread) and no allocation: requests live in preallocated slots
// indexed by fio's io_u index, each with its initiator.IO, and data moves
// directly between the transport and fio's buffers. Larger transfers,
// trims, and I/O that meets a full queue or a reconnecting controller run
// the initiator's synchronous methods on a goroutine of their own.
package fio
