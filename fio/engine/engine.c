//go:build fioengine

/*
 * nvmeof fio external I/O engine: the fio side.
 *
 * fio 3.33 loads an external engine with ioengine=external:PATH: it
 * dlopen()s PATH and takes the struct ioengine_ops named "ioengine"
 * (ioengines.c, dlopen_ioengine), refusing it unless .version is the
 * FIO_IOOPS_VERSION fio was built with. This file is compiled against that
 * fio's own headers and config-host.h (scripts/build-fio-engine.sh), so
 * the structures match. It calls no fio function by link: the few it needs
 * (add_file, fio_gettime, io_u_queued, log_err) are looked up with dlsym
 * in the fio executable, which exports them (-rdynamic).
 *
 * The engine is asynchronous: ->queue() records the io_u and returns
 * FIO_Q_QUEUED, ->commit() hands the batch to Go in one call, ->getevents()
 * waits in Go for completions, which it writes into a C array that
 * ->event() reads. Go sees slot indices (io_u->index, which fio sets to
 * 0..iodepth-1 and otherwise leaves to the engine) and C buffers only.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fio.h"
#include "optgroup.h"

#include "engine.h"
#include "_cgo_export.h"

struct nvmeof_options {
	void *pad; /* fio keeps the thread_data pointer here (offset 0) */
	unsigned int transport;
	char *traddr;
	unsigned int trsvcid;
	char *subnqn;
	char *hostnqn;
	char *host_traddr;
	unsigned int provider;
	char *device;
	char *dhchap_secret;
	char *dhchap_ctrl_secret;
	char *congestion;
	unsigned int nsid;
	unsigned int nr_io_queues;
	unsigned int queue_size;
	unsigned long long loop_size;
	unsigned int busy_poll;
	unsigned int delay_submit;
	unsigned int poll_sleep;
};

enum { NVMEOF_TRANSPORT_RDMA = 0, NVMEOF_TRANSPORT_LOOP = 1, NVMEOF_TRANSPORT_TCP = 2 };
static const char *const transport_names[] = { "rdma", "loop", "tcp" };

/* The provider option's values, as rdma/provider names them. */
enum { NVMEOF_PROVIDER_AUTO = 0, NVMEOF_PROVIDER_SOFT = 1, NVMEOF_PROVIDER_IBVERBS = 2 };
static const char *const provider_names[] = { "auto", "soft", "ibverbs" };

static struct fio_option options[] = {
	{
		.name = "transport",
		.lname = "NVMe-oF transport",
		.type = FIO_OPT_STR,
		.off1 = offsetof(struct nvmeof_options, transport),
		.help = "NVMe-oF transport",
		.def = "rdma",
		.posval = {
			{ .ival = "rdma", .oval = NVMEOF_TRANSPORT_RDMA,
			  .help = "RDMA (RoCEv2) through the provider option's RDMA provider" },
			{ .ival = "tcp", .oval = NVMEOF_TRANSPORT_TCP,
			  .help = "NVMe/TCP (the provider options do not apply)" },
			{ .ival = "loop", .oval = NVMEOF_TRANSPORT_LOOP,
			  .help = "in-process target with one memory namespace (tests)" },
		},
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "traddr",
		.lname = "target address",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, traddr),
		.help = "Target port IP address (nvme-cli -a)",
		.def = "127.0.0.1",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "trsvcid",
		.lname = "target service ID",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct nvmeof_options, trsvcid),
		.help = "Target service ID, the RDMA CM port (nvme-cli -s)",
		.def = "4420",
		.minval = 1,
		.maxval = 65535,
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "subnqn",
		.lname = "subsystem NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, subnqn),
		.help = "Subsystem NQN (nvme-cli -n); required for rdma",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "hostnqn",
		.lname = "host NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, hostnqn),
		.help = "Host NQN (nvme-cli -q); default /etc/nvme/hostnqn, else a UUID NQN",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "dhchap_secret",
		.lname = "DH-HMAC-CHAP host secret",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, dhchap_secret),
		.help = "Host secret DHHC-1:hh:base64: for DH-HMAC-CHAP authentication (nvme-cli --dhchap-secret); needed when the target requires it",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "dhchap_ctrl_secret",
		.lname = "DH-HMAC-CHAP controller secret",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, dhchap_ctrl_secret),
		.help = "Controller secret DHHC-1:hh:base64: for bidirectional authentication (nvme-cli --dhchap-ctrl-secret)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "host_traddr",
		.lname = "host transport address",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, host_traddr),
		.help = "Local IP address of the RDMA device (nvme-cli -w); default: the route's source, 127.0.0.2 for a loopback traddr",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "provider",
		.lname = "RDMA provider",
		.type = FIO_OPT_STR,
		.off1 = offsetof(struct nvmeof_options, provider),
		.help = "RDMA provider (transport=rdma)",
		.def = "auto",
		.posval = {
			{ .ival = "auto", .oval = NVMEOF_PROVIDER_AUTO,
			  .help = "ibverbs when an RDMA device holds host_traddr (or device is set), else soft" },
			{ .ival = "soft", .oval = NVMEOF_PROVIDER_SOFT,
			  .help = "the pure-Go soft RoCEv2 provider (root, except on loopback)" },
			{ .ival = "ibverbs", .oval = NVMEOF_PROVIDER_IBVERBS,
			  .help = "rdma-core: an RDMA NIC or rxe (engine built with -tags ibverbs)" },
		},
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "device",
		.lname = "RDMA device",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, device),
		.help = "RDMA device name for provider ibverbs (mlx5_0, rxe0); default: the one holding host_traddr",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "congestion",
		.lname = "RoCEv2 congestion control",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct nvmeof_options, congestion),
		.help = "Soft provider's RoCEv2 congestion control (ECN, CNPs, DCQCN): on, off, or KEY=VALUE:... with nvmetd's congestion block keys (line_rate=10Gbit:ecn=ect1), which turn it on (nvmeof --congestion with ':' for ',')",
		.def = "off",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "nsid",
		.lname = "namespace ID",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct nvmeof_options, nsid),
		.help = "Namespace ID",
		.def = "1",
		.minval = 1,
		.maxval = 0xfffffffe,
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "nr_io_queues",
		.lname = "number of I/O queues",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct nvmeof_options, nr_io_queues),
		.help = "I/O queues per job (nvme-cli -i); 0: one per CPU. A job is one thread: one queue keeps its commands in one chain and its polling on one socket, as SPDK's fio plugin keeps one qpair per job",
		.def = "1",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "queue_size",
		.lname = "I/O queue size",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct nvmeof_options, queue_size),
		.help = "I/O queue size in entries (nvme-cli -Q), 16..1024; 0: 128",
		.def = "0",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "loop_size",
		.lname = "loop target size",
		.type = FIO_OPT_STR_VAL,
		.off1 = offsetof(struct nvmeof_options, loop_size),
		.help = "transport=loop: size of the in-process target's memory namespace",
		.def = "1g",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "busy_poll",
		.lname = "busy-poll window",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct nvmeof_options, busy_poll),
		.help = "Microseconds to poll for completions on fio's thread before sleeping (0: sleep at once, completions then arrive through the provider's goroutine)",
		.def = "50",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "poll_sleep",
		.lname = "sleep through the busy-poll window",
		.type = FIO_OPT_STR,
		.off1 = offsetof(struct nvmeof_options, poll_sleep),
		.help = "Spend the busy_poll window asleep in the kernel on the queue's socket, woken by the completion, instead of spinning: less CPU, a few microseconds more latency (auto: on, with a window of at least 1000 us, where the queue can sleep: tcp, and the soft provider with one I/O queue; off elsewhere)",
		.def = "auto",
		.posval = {
			{ .ival = "auto", .oval = NVMEOF_POLL_SLEEP_AUTO,
			  .help = "on where the queue can sleep (tcp; soft RoCE, one I/O queue), else off" },
			{ .ival = "0", .oval = 0, .help = "spin" },
			{ .ival = "1", .oval = 1, .help = "sleep on the socket" },
		},
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "delay_submit",
		.lname = "delay command submission",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct nvmeof_options, delay_submit),
		.help = "Hold committed commands until fio reaps completions and send them together (SPDK's delay_cmd_submit); 0 sends each at commit",
		.def = "1",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/* Per job (thread_data) state. */
struct nvmeof_data {
	uintptr_t h; /* Go handle */
	unsigned int depth;
	uint64_t size;
	struct io_u **io_us;       /* by io_u->index */
	struct nvmeof_req *queued; /* queued since the last commit */
	unsigned int nr_queued;
	struct nvmeof_cqe *cqes;   /* filled by getevents, read by event */
};

/* fio functions, found in the fio executable at load time. */
static int (*fio_add_file)(struct thread_data *, const char *, int, int);
static void (*fio_gettime_fn)(struct timespec *, void *);
static void (*fio_io_u_queued)(struct thread_data *, struct io_u *);
static ssize_t (*fio_log_err)(const char *, ...);

/* The process that loaded the engine: a job in another process was forked
 * from it, and the Go runtime does not survive fork. */
static pid_t load_pid;

__attribute__((constructor)) static void nvmeof_loaded(void)
{
	load_pid = getpid();
	fio_add_file = dlsym(RTLD_DEFAULT, "add_file");
	fio_gettime_fn = dlsym(RTLD_DEFAULT, "fio_gettime");
	fio_io_u_queued = dlsym(RTLD_DEFAULT, "io_u_queued");
	fio_log_err = dlsym(RTLD_DEFAULT, "log_err");
}

#define nvmeof_err(fmt, ...)                                                   \
	do {                                                                   \
		if (fio_log_err)                                               \
			fio_log_err("fio: nvmeof: " fmt "\n", ##__VA_ARGS__);  \
		else                                                           \
			fprintf(stderr, "fio: nvmeof: " fmt "\n", ##__VA_ARGS__); \
	} while (0)

static int nvmeof_check_process(struct thread_data *td)
{
	if (getpid() == load_pid)
		return 0;
	nvmeof_err("job %s runs in a forked process: this engine needs --thread (thread=1) and create_serialize=1", td->o.name);
	td_verror(td, EINVAL, "nvmeof: needs --thread");
	return 1;
}

static void nvmeof_free(struct nvmeof_data *d)
{
	free(d->io_us);
	free(d->queued);
	free(d->cqes);
	free(d);
}

/*
 * ->setup: connect (in fio's main thread with the default
 * create_serialize=1, before the job's thread exists) to learn the
 * namespace size, which fio needs to lay out the job. The connection is
 * kept for the job. Like fio's rbd engine, switch the job to a thread: the
 * Go runtime loaded with the engine cannot follow a fork.
 */
static int nvmeof_setup(struct thread_data *td)
{
	struct nvmeof_options *o = td->eo;
	struct nvmeof_data *d = td->io_ops_data;
	struct nvmeof_config cfg;
	struct fio_file *f;
	char errbuf[512];
	unsigned int i;

	if (nvmeof_check_process(td))
		return 1;
	td->o.use_thread = 1;

	if (!fio_add_file || !fio_gettime_fn || !fio_io_u_queued) {
		nvmeof_err("fio's add_file, fio_gettime or io_u_queued not found in the executable: not fio 3.33?");
		return 1;
	}

	/* Pretend to deal with files, as fio's rbd and nbd engines do. */
	if (!td->files_index) {
		fio_add_file(td, td->o.filename ? td->o.filename : "nvmeof", 0, 0);
		td->o.nr_files = td->o.nr_files ? td->o.nr_files : 1;
		td->o.open_files++;
	}

	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d) {
			td_verror(td, errno, "calloc");
			return 1;
		}
		d->depth = td->o.iodepth ? td->o.iodepth : 1;
		d->io_us = calloc(d->depth, sizeof(*d->io_us));
		d->queued = calloc(d->depth, sizeof(*d->queued));
		d->cqes = calloc(d->depth, sizeof(*d->cqes));
		if (!d->io_us || !d->queued || !d->cqes) {
			nvmeof_free(d);
			td_verror(td, ENOMEM, "calloc");
			return 1;
		}

		memset(&cfg, 0, sizeof(cfg));
		cfg.transport = transport_names[o->transport];
		cfg.traddr = o->traddr;
		cfg.subnqn = o->subnqn;
		cfg.hostnqn = o->hostnqn;
		cfg.host_traddr = o->host_traddr;
		cfg.provider = o->provider < sizeof(provider_names) / sizeof(provider_names[0]) ?
			provider_names[o->provider] : "auto";
		cfg.device = o->device;
		cfg.dhchap_secret = o->dhchap_secret;
		cfg.dhchap_ctrl_secret = o->dhchap_ctrl_secret;
		cfg.congestion = o->congestion;
		cfg.trsvcid = o->trsvcid;
		cfg.nsid = o->nsid;
		cfg.nr_io_queues = o->nr_io_queues;
		cfg.queue_size = o->queue_size;
		cfg.loop_size = o->loop_size;
		cfg.busy_poll_us = o->busy_poll;
		cfg.delay_submit = o->delay_submit;
		cfg.poll_sleep = o->poll_sleep;
		cfg.depth = d->depth;
		errbuf[0] = '\0';
		d->h = nvmeofOpen(&cfg, errbuf, sizeof(errbuf));
		if (!d->h) {
			nvmeof_err("%s", errbuf);
			nvmeof_free(d);
			td_vmsg(td, ECONNREFUSED, "connect failed", "nvmeof_setup");
			return 1;
		}
		d->size = cfg.size;
		td->io_ops_data = d;
	}

	for_each_file(td, f, i) {
		f->real_file_size = d->size;
		fio_file_set_size_known(f);
		FILE_SET_ENG_DATA(f, d);
	}
	return 0;
}

/* ->init runs in the job's thread (before ->setup with create_serialize=0). */
static int nvmeof_init(struct thread_data *td)
{
	if (nvmeof_check_process(td))
		return 1;
	if (!td->io_ops_data)
		return nvmeof_setup(td);
	return 0;
}

static void nvmeof_cleanup(struct thread_data *td)
{
	struct nvmeof_data *d = td->io_ops_data;

	if (!d)
		return;
	if (getpid() == load_pid)
		nvmeofClose(d->h);
	nvmeof_free(d);
	td->io_ops_data = NULL;
}

static enum fio_q_status nvmeof_queue(struct thread_data *td, struct io_u *io_u)
{
	struct nvmeof_data *d = td->io_ops_data;
	struct nvmeof_req *r;
	int op;

	fio_ro_check(td, io_u);

	switch (io_u->ddir) {
	case DDIR_READ:
		op = NVMEOF_OP_READ;
		break;
	case DDIR_WRITE:
		op = NVMEOF_OP_WRITE;
		break;
	case DDIR_TRIM:
		op = NVMEOF_OP_TRIM;
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
		op = NVMEOF_OP_FLUSH;
		break;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (io_u->index >= d->depth) {
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	if (d->nr_queued == d->depth)
		return FIO_Q_BUSY;

	d->io_us[io_u->index] = io_u;
	r = &d->queued[d->nr_queued++];
	r->buf = io_u->xfer_buf;
	r->len = io_u->xfer_buflen;
	r->off = io_u->offset;
	r->slot = io_u->index;
	r->op = op;
	return FIO_Q_QUEUED;
}

/*
 * ->commit: stamp the issue time (FIO_ASYNCIO_SETS_ISSUE_TIME, as libaio
 * does, so that latency starts when the I/O is really submitted) and
 * account the submission latency, then hand the batch to Go.
 */
static int nvmeof_commit(struct thread_data *td)
{
	struct nvmeof_data *d = td->io_ops_data;
	struct timespec now;
	unsigned int i;

	if (!d->nr_queued)
		return 0;
	if (fio_fill_issue_time(td)) {
		fio_gettime_fn(&now, NULL);
		for (i = 0; i < d->nr_queued; i++) {
			struct io_u *io_u = d->io_us[d->queued[i].slot];

			memcpy(&io_u->issue_time, &now, sizeof(now));
			fio_io_u_queued(td, io_u);
		}
		if (td->o.read_iolog_file)
			memcpy(&td->last_issue, &now, sizeof(now));
	}
	nvmeofSubmit(d->h, d->queued, d->nr_queued);
	d->nr_queued = 0;
	return 0;
}

static int nvmeof_getevents(struct thread_data *td, unsigned int min,
			    unsigned int max, const struct timespec *t)
{
	struct nvmeof_data *d = td->io_ops_data;
	int64_t ns = -1;

	if (max > d->depth)
		max = d->depth;
	if (min > max)
		min = max;
	if (t)
		ns = (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec;
	return nvmeofGetEvents(d->h, min, max, ns, d->cqes);
}

static struct io_u *nvmeof_event(struct thread_data *td, int event)
{
	struct nvmeof_data *d = td->io_ops_data;
	struct nvmeof_cqe *c = &d->cqes[event];
	struct io_u *io_u = d->io_us[c->slot];

	io_u->error = c->err;
	io_u->resid = c->resid;
	return io_u;
}

static char *nvmeof_errdetails(struct io_u *io_u)
{
	struct nvmeof_data *d = io_u->file ? FILE_ENG_DATA(io_u->file) : NULL;
	char *msg = NULL;

	if (d)
		msg = nvmeofErrDetails(d->h, io_u->index);
	return msg ? msg : strdup(strerror(io_u->error));
}

static int nvmeof_open_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int nvmeof_close_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int nvmeof_get_file_size(struct thread_data *td, struct fio_file *f)
{
	struct nvmeof_data *d = td->io_ops_data;

	if (!d)
		return EINVAL;
	f->real_file_size = d->size;
	fio_file_set_size_known(f);
	return 0;
}

/*
 * FIO_DISKLESSIO: the target is no local file or device (no stat, no
 * create, no cache invalidation, no disk utilization); FIO_NODISKUTIL and
 * FIO_NOEXTEND say the same for disk stats and file extension.
 * FIO_ASYNCIO_SETS_ISSUE_TIME: ->commit stamps issue_time. FIO_NO_OFFLOAD:
 * one thread per job submits and reaps (io_submit_mode=offload would queue
 * from several). Not FIO_SYNCIO: ->queue returns FIO_Q_QUEUED. Not
 * FIO_MEMALIGN: neither transport needs page-aligned buffers.
 */
struct ioengine_ops ioengine = {
	.name = "nvmeof",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND | FIO_ASYNCIO_SETS_ISSUE_TIME | FIO_NO_OFFLOAD,
	.setup = nvmeof_setup,
	.init = nvmeof_init,
	.queue = nvmeof_queue,
	.commit = nvmeof_commit,
	.getevents = nvmeof_getevents,
	.event = nvmeof_event,
	.errdetails = nvmeof_errdetails,
	.cleanup = nvmeof_cleanup,
	.open_file = nvmeof_open_file,
	.close_file = nvmeof_close_file,
	.get_file_size = nvmeof_get_file_size,
	.options = options,
	.option_struct_size = sizeof(struct nvmeof_options),
};
