//go:build ibverbs && cgo

#include "ibverbs.h"


// nv_poll_cq polls up to n completions into out (wc is scratch of n).
// rxe: the CQ is an rxe device's, whose user completions carry the
// kernel's wc_flags: there IB_WC_WITH_INVALIDATE is 1 << 2, which
// libibverbs reads as IBV_WC_IP_CSUM_OK (rxe never sets that one).
int nv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc, struct gwc *out, int rxe) {
	int r = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < r; i++) {
		struct ibv_wc *w = &wc[i];
		struct gwc *g = &out[i];
		if (rxe && w->status == IBV_WC_SUCCESS && (w->opcode & IBV_WC_RECV) && (w->wc_flags & IBV_WC_IP_CSUM_OK))
			w->wc_flags = (w->wc_flags & ~IBV_WC_IP_CSUM_OK) | IBV_WC_WITH_INV;
		g->wr_id = w->wr_id;
		g->status = w->status;
		g->opcode = w->opcode;
		g->vendor_err = w->vendor_err;
		g->byte_len = w->byte_len;
		g->imm = (w->wc_flags & IBV_WC_WITH_IMM) ? ntohl(w->imm_data) : 0;
		g->inv_rkey = (w->wc_flags & IBV_WC_WITH_INV) ? w->invalidated_rkey : 0;
		g->qp_num = w->qp_num;
		g->src_qp = w->src_qp;
		g->wc_flags = w->wc_flags;
		g->pkey_index = w->pkey_index;
	}
	return r;
}


// nv_post_send posts n requests as one chain; *bad is the index of the
// first one not posted (n when all were).
int nv_post_send(struct ibv_qp *qp, struct gsend *g, int n, struct ibv_sge *sge, struct ibv_send_wr *wr, int *bad) {
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &wr[i];
		memset(w, 0, sizeof(*w));
		w->wr_id = g[i].wr_id;
		w->next = i + 1 < n ? &wr[i + 1] : NULL;
		w->sg_list = g[i].num_sge ? &sge[g[i].sge_off] : NULL;
		w->num_sge = g[i].num_sge;
		w->opcode = g[i].opcode;
		w->send_flags = g[i].flags;
		switch (g[i].opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			w->imm_data = htonl(g[i].imm);
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			w->invalidate_rkey = g[i].inv_rkey;
			break;
		case IBV_WR_BIND_MW:
			w->bind_mw.mw = g[i].mw;
			w->bind_mw.rkey = g[i].bind_rkey;
			w->bind_mw.bind_info.mr = g[i].bind_mr;
			w->bind_mw.bind_info.addr = g[i].bind_addr;
			w->bind_mw.bind_info.length = g[i].bind_len;
			w->bind_mw.bind_info.mw_access_flags = g[i].bind_access;
			continue;
		}
		w->wr.rdma.remote_addr = g[i].remote_addr;
		w->wr.rdma.rkey = g[i].rkey;
	}
	struct ibv_send_wr *badwr = NULL;
	int r = ibv_post_send(qp, wr, &badwr);
	*bad = r && badwr ? (int)(badwr - wr) : (r ? 0 : n);
	// A type-2 window's ibv_mw.rkey is the consumer's to keep: providers
	// name the window by it in the next bind (rxe's mw_rkey, mlx5's imm),
	// so it follows each bind posted, as ibv_bind_mw does for type 1.
	for (int i = 0; i < *bad; i++)
		if (g[i].opcode == IBV_WR_BIND_MW)
			g[i].mw->rkey = g[i].bind_rkey;
	return r;
}

struct ibv_mw *nv_alloc_mw(struct ibv_pd *pd) { return ibv_alloc_mw(pd, IBV_MW_TYPE_2); }
int nv_dealloc_mw(struct ibv_mw *mw) { return ibv_dealloc_mw(mw); }

int nv_post_recv(struct ibv_qp *qp, uint64_t *wrid, uint32_t *nsge, int n, struct ibv_sge *sge, struct ibv_recv_wr *wr, int *bad) {
	int off = 0;
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &wr[i];
		w->wr_id = wrid[i];
		w->next = i + 1 < n ? &wr[i + 1] : NULL;
		w->sg_list = nsge[i] ? &sge[off] : NULL;
		w->num_sge = nsge[i];
		off += nsge[i];
	}
	struct ibv_recv_wr *badwr = NULL;
	int r = ibv_post_recv(qp, wr, &badwr);
	*bad = r && badwr ? (int)(badwr - wr) : (r ? 0 : n);
	return r;
}

int nv_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

int nv_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

int nv_query_gid(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *e) {
	return ibv_query_gid_ex(ctx, port, index, e, 0);
}

int nv_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void nv_set_ctx(struct rdma_cm_id *id, uintptr_t v) { id->context = (void *)v; }
uintptr_t nv_get_ctx(struct rdma_cm_id *id) { return (uintptr_t)id->context; }


// nv_get_event reads one event, copies it and acknowledges it.
int nv_get_event(struct rdma_event_channel *ch, struct gevent *g) {
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return -1;
	memset(g, 0, sizeof(*g));
	g->id = e->id;
	g->ctx = e->listen_id ? (uintptr_t)e->listen_id->context : (uintptr_t)e->id->context;
	g->event = e->event;
	g->status = e->status;
	if (e->event != RDMA_CM_EVENT_MULTICAST_JOIN && e->event != RDMA_CM_EVENT_MULTICAST_ERROR) {
		struct rdma_conn_param *c = &e->param.conn;
		if (c->private_data && c->private_data_len) {
			g->priv_len = c->private_data_len;
			memcpy(g->priv, c->private_data, c->private_data_len);
		}
		g->responder_resources = c->responder_resources;
		g->initiator_depth = c->initiator_depth;
		g->flow_control = c->flow_control;
		g->retry_count = c->retry_count;
		g->rnr_retry_count = c->rnr_retry_count;
		g->srq = c->srq;
		g->qp_num = c->qp_num;
	}
	rdma_ack_cm_event(e);
	return 0;
}

// nv_sockaddr fills ss with an IPv4 (len 4) or IPv6 (len 16) address and port.
void nv_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int len, uint16_t port, uint32_t scope) {
	memset(ss, 0, sizeof(*ss));
	if (len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		s->sin6_scope_id = scope;
		memcpy(&s->sin6_addr, ip, 16);
	}
}

// nv_addr reads an address: returns its length (4, 16; 0 if none) and port.
int nv_addr(struct sockaddr *sa, uint8_t *ip, uint16_t *port) {
	if (!sa) return 0;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 16;
	}
	return 0;
}

int nv_local_addr(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) { return nv_addr(rdma_get_local_addr(id), ip, port); }
int nv_peer_addr(struct rdma_cm_id *id, uint8_t *ip, uint16_t *port) { return nv_addr(rdma_get_peer_addr(id), ip, port); }

int nv_set_u8_option(struct rdma_cm_id *id, int name, uint8_t v) {
	return rdma_set_option(id, RDMA_OPTION_ID, name, &v, sizeof v);
}

int nv_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *src, struct sockaddr_storage *dst, int ms) {
	return rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, ms);
}

int nv_bind_addr(struct rdma_cm_id *id, struct sockaddr_storage *a) {
	return rdma_bind_addr(id, (struct sockaddr *)a);
}

int nv_conn_param(struct rdma_conn_param *p, const void *priv, int len, uint8_t rr, uint8_t id, uint8_t fc, uint8_t retry, uint8_t rnr, uint32_t qpn) {
	memset(p, 0, sizeof(*p));
	p->private_data = len ? priv : NULL;
	p->private_data_len = len;
	p->responder_resources = rr;
	p->initiator_depth = id;
	p->flow_control = fc;
	p->retry_count = retry;
	p->rnr_retry_count = rnr;
	p->qp_num = qpn;
	return 0;
}

uint8_t nv_port_num(struct rdma_cm_id *id) { return id->port_num; }
const char *nv_cm_dev_name(struct rdma_cm_id *id) { return id->verbs ? ibv_get_device_name(id->verbs->device) : ""; }

// nv_keep does nothing with p: Go calls it to have cgo's pointer check
// (GODEBUG=cgocheck=1) judge whether C may keep p (pincheck.go).
void nv_keep(void *p) { (void)p; }
