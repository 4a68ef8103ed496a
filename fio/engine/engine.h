//go:build fioengine

/*
 * Types shared by the C shim (engine.c, which sees fio's headers) and the
 * Go side (main.go, which does not). Nothing here depends on fio.
 */
#ifndef NVMEOF_FIO_ENGINE_H
#define NVMEOF_FIO_ENGINE_H

#include <stddef.h>
#include <stdint.h>

/* Operations: the values of fio.Op. */
enum {
	NVMEOF_OP_READ = 0,
	NVMEOF_OP_WRITE = 1,
	NVMEOF_OP_TRIM = 2,
	NVMEOF_OP_FLUSH = 3,
};

/* The engine's configuration, from fio's options; size and block_size are
 * filled in by nvmeofOpen. */
/* poll_sleep: the transport chooses (on for tcp, off for rdma). */
#define NVMEOF_POLL_SLEEP_AUTO 2

struct nvmeof_config {
	const char *transport;
	const char *traddr;
	const char *subnqn;
	const char *hostnqn;
	const char *host_traddr;
	const char *provider; /* "auto", "soft" or "ibverbs" */
	const char *device;   /* ibverbs device name, or NULL */
	const char *dhchap_secret;      /* DHHC-1 host secret, or NULL */
	const char *dhchap_ctrl_secret; /* DHHC-1 controller secret, or NULL */
	const char *congestion;         /* soft congestion control: "on", "off" or KEY=VALUE:..., or NULL */
	uint32_t trsvcid;
	uint32_t nsid;
	uint32_t nr_io_queues;
	uint32_t queue_size;
	uint64_t loop_size;
	uint32_t busy_poll_us; /* busy-poll window in microseconds (0: none) */
	uint32_t delay_submit; /* hold commands until getevents (1) or send at commit (0) */
	uint32_t poll_sleep;   /* spend the busy-poll window asleep on the socket (1), spinning (0), or NVMEOF_POLL_SLEEP_AUTO */
	uint32_t depth;
	uint64_t size;
	uint32_t block_size;
};

/* One queued I/O: slot is the io_u's index; buf points into fio's I/O
 * buffers (C memory) and stays valid until the I/O is reaped. */
struct nvmeof_req {
	void *buf;
	uint64_t len;
	uint64_t off;
	int32_t slot;
	int32_t op;
};

/* One completion: err is 0 or a positive errno, resid the bytes not moved. */
struct nvmeof_cqe {
	int32_t slot;
	int32_t err;
	uint64_t resid;
};

#endif
