// C glue between the Go provider and rdma-core: unions and inline
// functions resolved into plain structs and calls cgo can use.
#ifndef NVMEOF_IBVERBS_H
#define NVMEOF_IBVERBS_H
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <net/if.h>

// gwc is a work completion with its unions resolved: what Go reads.
struct gwc {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len;
	uint32_t imm, inv_rkey, qp_num, src_qp, wc_flags;
	uint16_t pkey_index;
};

// gsend is a send work request without unions; its SGEs are
// sge[sge_off : sge_off+num_sge] of the array passed with it. The bind_*
// fields and mw are a BIND_MW's (bind_rkey: the window's new rkey).
struct gsend {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t rkey, imm, inv_rkey, opcode, flags, num_sge, sge_off;
	uint32_t bind_rkey, bind_access;
	uint64_t bind_addr, bind_len;
	struct ibv_mw *mw;
	struct ibv_mr *bind_mr;
};

// gevent is an rdma_cm event copied out of librdmacm's memory.
struct gevent {
	uintptr_t ctx;          // the id's context (for CONNECT_REQUEST: the listener's)
	struct rdma_cm_id *id;  // the id (for CONNECT_REQUEST: the new one)
	int event, status;
	uint8_t priv[256];
	uint8_t priv_len, responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num;
};

int nv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, struct gwc *out, int rxe);
int nv_post_send(struct ibv_qp *qp, struct gsend *g, int n, struct ibv_sge *sge, struct ibv_send_wr *wr, int *bad);
int nv_post_recv(struct ibv_qp *qp, uint64_t *wrid, uint32_t *nsge, int n, struct ibv_sge *sge, struct ibv_recv_wr *wr, int *bad);
int nv_req_notify(struct ibv_cq *cq);
struct ibv_mw *nv_alloc_mw(struct ibv_pd *pd);
int nv_dealloc_mw(struct ibv_mw *mw);
int nv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
int nv_query_gid(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e);
int nv_set_nonblock(int fd);
void nv_set_ctx(struct rdma_cm_id *id, uintptr_t v);
uintptr_t nv_get_ctx(struct rdma_cm_id *id);
int nv_get_event(struct rdma_event_channel *ch, struct gevent *g);
void nv_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int len, uint16_t port, uint32_t scope);
int nv_addr(struct sockaddr *sa, uint8_t *ip, uint16_t *port);
int nv_local_addr(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port);
int nv_peer_addr(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port);
int nv_set_u8_option(struct rdma_cm_id *id, int name, uint8_t v);
int nv_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *src, struct sockaddr_storage *dst, int ms);
int nv_bind_addr(struct rdma_cm_id *id, struct sockaddr_storage *a);
int nv_conn_param(struct rdma_conn_param *p, const void *priv, int len, uint8_t rr, uint8_t id, uint8_t fc, uint8_t retry, uint8_t rnr, uint32_t qpn);
uint8_t nv_port_num(struct rdma_cm_id *id);
const char *nv_cm_dev_name(struct rdma_cm_id *id);
void nv_keep(void *p);

#endif
