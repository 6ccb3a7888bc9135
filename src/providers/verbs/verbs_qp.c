/* SPDX-License-Identifier: MIT */
/*
 * verbs_qp.c - RC queue pairs, the address blob and the post path of the
 * verbs provider (completion queues and completions: verbs_cq.c).
 *
 * The post path translates a chain of tf WRs into at most VERBS_POST_BATCH
 * ibv WRs on the stack at a time and never allocates.  SGE lists are handed
 * to libibverbs as they are: struct tf_sge has the layout of struct ibv_sge
 * (checked below), and libibverbs copies them into the send queue before
 * ibv_post_send returns.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>

#include "verbs_int.h"

_Static_assert(sizeof(struct tf_sge) == sizeof(struct ibv_sge),
	       "tf_sge must match ibv_sge");
_Static_assert(offsetof(struct tf_sge, addr) == offsetof(struct ibv_sge, addr),
	       "tf_sge.addr");
_Static_assert(offsetof(struct tf_sge, length) ==
		       offsetof(struct ibv_sge, length),
	       "tf_sge.length");
_Static_assert(offsetof(struct tf_sge, lkey) == offsetof(struct ibv_sge, lkey),
	       "tf_sge.lkey");

/* ---------------------------------------------------------------- QP map */

static uint32_t qpn_hash(uint32_t qpn)
{
	return qpn * 2654435761u;
}

/* Lock must be held in write mode. */
static int qp_map_grow(struct tf_verbs_ctx *c)
{
	uint32_t nmask = c->qp_tab_mask * 2 + 1;
	struct tf_verbs_qp **nt = tf__calloc(nmask + 1, sizeof(*nt));

	if (!nt)
		return -ENOMEM;
	for (uint32_t i = 0; i <= c->qp_tab_mask; i++) {
		struct tf_verbs_qp *qp = c->qp_tab[i];
		uint32_t j;

		if (!qp)
			continue;
		for (j = qpn_hash(qp->base.qpn) & nmask; nt[j];
		     j = (j + 1) & nmask)
			;
		nt[j] = qp;
	}
	tf__free(c->qp_tab);
	c->qp_tab = nt;
	c->qp_tab_mask = nmask;
	return 0;
}

static int qp_map_insert(struct tf_verbs_ctx *c, struct tf_verbs_qp *qp)
{
	uint32_t i;
	int ret = 0;

	pthread_rwlock_wrlock(&c->qp_lock);
	/* Keep the load under one half so that probe runs stay short. */
	if ((c->qp_count + 1) * 2 > c->qp_tab_mask + 1) {
		ret = qp_map_grow(c);
		if (ret)
			goto out_unlock;
	}
	for (i = qpn_hash(qp->base.qpn) & c->qp_tab_mask; c->qp_tab[i];
	     i = (i + 1) & c->qp_tab_mask)
		;
	c->qp_tab[i] = qp;
	c->qp_count++;
out_unlock:
	pthread_rwlock_unlock(&c->qp_lock);
	return ret;
}

/* Lock must be held (either mode). */
static struct tf_verbs_qp *qp_map_find(struct tf_verbs_ctx *c, uint32_t qpn)
{
	for (uint32_t i = qpn_hash(qpn) & c->qp_tab_mask; c->qp_tab[i];
	     i = (i + 1) & c->qp_tab_mask)
		if (c->qp_tab[i]->base.qpn == qpn)
			return c->qp_tab[i];
	return NULL;
}

struct tf_verbs_qp *tf_verbs_qp_find(struct tf_verbs_ctx *c, uint32_t qpn)
{
	return qp_map_find(c, qpn);
}

/* Remove with backward-shift deletion, which keeps every probe run
 * unbroken without tombstones. */
static void qp_map_remove(struct tf_verbs_ctx *c, struct tf_verbs_qp *qp)
{
	uint32_t m = c->qp_tab_mask, i, j;

	pthread_rwlock_wrlock(&c->qp_lock);
	for (i = qpn_hash(qp->base.qpn) & m; c->qp_tab[i] && c->qp_tab[i] != qp;
	     i = (i + 1) & m)
		;
	if (!c->qp_tab[i])
		goto out_unlock;
	c->qp_tab[i] = NULL;
	c->qp_count--;
	for (j = (i + 1) & m; c->qp_tab[j]; j = (j + 1) & m) {
		uint32_t home = qpn_hash(c->qp_tab[j]->base.qpn) & m;

		/* Move the entry into the hole unless its home lies in
		 * (i, j] cyclically, where it is still reachable. */
		if (((j - home) & m) >= ((j - i) & m)) {
			c->qp_tab[i] = c->qp_tab[j];
			c->qp_tab[j] = NULL;
			i = j;
		}
	}
out_unlock:
	pthread_rwlock_unlock(&c->qp_lock);
}

void tf_verbs_qp_map_free(struct tf_verbs_ctx *c)
{
	tf__free(c->qp_tab);
	c->qp_tab = NULL;
}

/* ---------------------------------------------------------------- QP */

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

/*
 * Transport retries (VERBS_RETRY_CNT, 6).  rxe (rxe_comp.c) treats
 * retry_cnt 7 as "retry forever", like rnr_retry 7, although the IB
 * specification makes only the RNR count special; 6 is the largest count
 * that ends on every device.
 */

/*
 * Local ACK timeout exponent: one try waits 4.096 us << t.  Spread
 * @timeout_ms over the initial try and the retries, rounding down, so that
 * a WR to a dead peer fails with RETRY_EXC within @timeout_ms (and no
 * sooner than half of it).
 */
uint8_t tf_verbs_ack_timeout(uint32_t timeout_ms)
{
	uint64_t per_try_ns =
		(uint64_t)timeout_ms * 1000000ull / (VERBS_RETRY_CNT + 1);
	uint8_t t = 1;

	while (t < 31 && (4096ull << (t + 1)) <= per_try_ns)
		t++;
	return t;
}

/* ibv_modify_qp to the state @a names (@name, for the log): 0 or the
 * negative errno, logged. */
static int qp_modify(struct tf_verbs_qp *qp, struct ibv_qp_attr *a, int mask,
		     const char *name)
{
	int ret = ibv_modify_qp(qp->ibqp, a, mask);

	if (ret)
		tf_log_error(VERBS_SUBSYS, "qp %u: modify to %s: %s",
			     qp->base.qpn, name, strerror(ret));
	return -ret;
}

/* A QP's next generation: never the provider's own (VERBS_WRID_GEN_PROV). */
static uint32_t next_gen(struct tf_verbs_ctx *c)
{
	uint32_t gen;

	do
		gen = atomic_fetch_add(&c->qp_gen, 1) & VERBS_WRID_GEN_MASK;
	while (gen == VERBS_WRID_GEN_PROV);
	return gen;
}

/* RESET -> INIT with the access flags of the QP's create. */
static int qp_to_init(struct tf_verbs_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = qp->ctx->port,
		.qp_access_flags = tf_verbs_access(qp->base.access),
	};
	int ret = qp_modify(qp, &a,
			    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS,
			    "INIT");

	if (!ret)
		qp->base.state = TF_QPS_INIT;
	return ret;
}

int tf_verbs_qp_create(struct tf_pd *bpd, const struct tf_qp *attr,
		       struct tf_qp **qp_p)
{
	struct tf_verbs_ctx *c = VERBS_CTX(bpd->ctx);
	struct ibv_qp_init_attr ia = {
		.send_cq = VERBS_CQ(attr->send_cq)->ibcq,
		.recv_cq = VERBS_CQ(attr->recv_cq)->ibcq,
		.cap = {.max_send_wr = attr->max_send_wr,
			.max_recv_wr = attr->max_recv_wr,
			.max_send_sge = attr->max_sge,
			.max_recv_sge = attr->max_sge,
			.max_inline_data = attr->max_inline_data},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	const struct ibv_device_attr *da = &c->dattr.orig_attr;
	/* iWARP: one send and one receive more, the provider's
	 * (verbs_iw.c), within the device's limit. */
	uint32_t prov = c->iwarp ? 1 : 0;
	struct tf_verbs_qp *qp;
	uint32_t psn;
	int ret;

	if (prov) {
		if (ia.cap.max_send_wr < (uint32_t)da->max_qp_wr)
			ia.cap.max_send_wr++;
		if (ia.cap.max_recv_wr < (uint32_t)da->max_qp_wr)
			ia.cap.max_recv_wr++;
	}
	/* Ask no more inline data than the device was seen to take: siw
	 * takes 80 bytes, and the caller's 256 would cost a refused QP and
	 * then inline sends altogether. */
	if (ia.cap.max_inline_data > tf_verbs_max_inline(c)) {
		tf_log_debug(VERBS_SUBSYS, "%s: inline %u -> %u bytes",
			     c->base.device, ia.cap.max_inline_data,
			     c->max_inline_data);
		ia.cap.max_inline_data = c->max_inline_data;
	}
	qp = tf__calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	ia.qp_context = qp;
	/* As for CQs (verbs_cq.c): no stale errno for a silent failure. */
	errno = 0;
	qp->ibqp = ibv_create_qp(VERBS_PD(bpd)->ibpd, &ia);
	if (!qp->ibqp && errno == EINVAL && ia.cap.max_inline_data) {
		/* Some devices have no inline sends at all; a QP without
		 * them beats no QP (TF_CAP_INLINE tells the caller). */
		tf_log_info(VERBS_SUBSYS,
			    "%s: QP with %u bytes inline refused, retrying "
			    "without inline data",
			    c->base.device, attr->max_inline_data);
		ia.cap.max_inline_data = 0;
		errno = 0;
		qp->ibqp = ibv_create_qp(VERBS_PD(bpd)->ibpd, &ia);
	}
	if (!qp->ibqp) {
		ret = tf_verbs_errno(EIO);
		tf_log_error(VERBS_SUBSYS,
			     "%s: ibv_create_qp(wr %u/%u, sge %u, inline %u): "
			     "%s",
			     c->base.device, attr->max_send_wr,
			     attr->max_recv_wr, attr->max_sge,
			     attr->max_inline_data, strerror(-ret));
		goto err_free;
	}
	qp->ctx = c;
	qp->base.qpn = qp->ibqp->qp_num;
	qp->base.max_send_wr = ia.cap.max_send_wr - prov;
	qp->base.max_recv_wr = ia.cap.max_recv_wr - prov;
	qp->base.max_sge = attr->max_sge; /* what the post path checks */
	qp->base.max_inline_data = ia.cap.max_inline_data;
	qp->base.access = attr->access;
	qp->base.rnr_retry = attr->rnr_retry;
	qp->base.timeout_ms = attr->timeout_ms;
	qp->gen = next_gen(c);
	ret = tf__random(&psn, sizeof(psn));
	if (ret)
		goto err_destroy;
	qp->psn = psn & 0xffffff;

	qp->sq_max = qp->base.max_send_wr;
	qp->sq_mask = pow2_at_least(qp->sq_max) - 1;
	qp->sq = tf__calloc(qp->sq_mask + 1, sizeof(*qp->sq));
	qp->rq_max = qp->base.max_recv_wr;
	qp->rq_mask = pow2_at_least(qp->rq_max) - 1;
	qp->rq = tf__calloc(qp->rq_mask + 1, sizeof(*qp->rq));
	if (!qp->sq || !qp->rq) {
		ret = -ENOMEM;
		goto err_rings;
	}

	ret = qp_to_init(qp);
	if (ret)
		goto err_rings;
	/* Before the application can post a receive. */
	if (prov) {
		ret = tf_verbs_iw_qp_init(VERBS_PD(bpd), qp);
		if (ret)
			goto err_rings;
	}
	ret = qp_map_insert(c, qp);
	if (ret)
		goto err_rings;
	*qp_p = &qp->base;
	return 0;

err_rings:
	tf__free(qp->sq);
	tf__free(qp->rq);
err_destroy:
	ibv_destroy_qp(qp->ibqp);
	/* After the QP: its receive took the slot. */
	tf_verbs_iw_qp_fini(VERBS_PD(bpd), qp);
err_free:
	tf__free(qp);
	return ret;
}

int tf_verbs_qp_destroy(struct tf_qp *bqp)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	int ret;

	/* Windows first: a type-2 window holds a reference on its QP, and
	 * rxe's destroy waits (tens of seconds) for it to go away, then
	 * leaves the window bound anyway. */
	tf_verbs_mw_revoke_all(qp);
	/* Then the connection: its cm id refers to the QP. */
	if (qp->ctx->use_cm)
		tf_verbs_cm_qp_close(qp);
	ret = ibv_destroy_qp(qp->ibqp);
	if (ret) {
		tf_log_warn(VERBS_SUBSYS, "qp %u: ibv_destroy_qp: %s",
			    qp->base.qpn, strerror(ret));
		return -ret;
	}
	/* Completions still queued for the QP are dropped by the poller
	 * once the QP is out of the map. */
	qp_map_remove(qp->ctx, qp);
	/* The provider's receive went with the QP. */
	tf_verbs_iw_qp_fini(VERBS_PD(qp->base.pd), qp);
	tf__free(qp->sq);
	tf__free(qp->rq);
	tf__free(qp);
	return 0;
}

/* ---------------------------------------------------------------- blob */

/* The blob carries the IB MTU code, which is enum ibv_mtu. */
_Static_assert(IBV_MTU_256 == VERBS_MTU_MIN && IBV_MTU_4096 == VERBS_MTU_MAX &&
		       IBV_MTU_4096 - IBV_MTU_256 == 4,
	       "enum ibv_mtu must be the IB MTU codes 1..5");

int tf_verbs_qp_get_addr(struct tf_qp *bqp, void *buf, size_t *len_p)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct tf_verbs_ctx *c = qp->ctx;
	struct tf_verbs_addr a = {.qpn = qp->base.qpn,
				  .psn = qp->psn,
				  .lid = c->pattr.lid,
				  .mtu = (uint8_t)c->mtu,
				  .link_layer = c->link_layer,
				  .port = c->port};
	int ret;

	memcpy(a.gid, c->gid.raw, 16);
	if (c->use_cm) {
		ret = tf_verbs_cm_addr(qp, &a);
		if (ret)
			return ret;
	}
	return tf_verbs_addr_encode(&a, buf, len_p);
}

int tf_verbs_qp_connect(struct tf_qp *bqp, const void *addr, size_t len)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct tf_verbs_ctx *c = qp->ctx;
	const struct ibv_device_attr *da = &c->dattr.orig_attr;
	struct tf_verbs_addr peer;
	struct ibv_qp_attr a;
	int ret;

	if (qp->base.state == TF_QPS_RTS)
		return -EISCONN;
	if (qp->base.state != TF_QPS_INIT)
		return -EINVAL;
	/* Both log which field is wrong. */
	ret = tf_verbs_addr_decode(addr, len, &peer);
	if (!ret)
		ret = tf_verbs_addr_reachable(&peer, c->link_layer, c->use_cm);
	if (ret)
		return ret;
	if (c->use_cm) {
		ret = tf_verbs_cm_connect(qp, &peer);
		if (ret)
			return ret;
		qp->base.state = TF_QPS_RTS;
		return 0;
	}

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = peer.mtu < c->mtu ? (enum ibv_mtu)peer.mtu : c->mtu;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic =
		(uint8_t)(da->max_qp_rd_atom < 16 ? da->max_qp_rd_atom : 16);
	/* 0.64 ms: the shortest delay a receiver asks for after an RNR NAK
	 * that still gives a polling peer time to post receives. */
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = c->port;
	a.ah_attr.dlid = peer.lid;
	if (c->link_layer == VERBS_LL_ETH) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)c->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	ret = ibv_modify_qp(qp->ibqp, &a,
			    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				    IBV_QP_MAX_DEST_RD_ATOMIC |
				    IBV_QP_MIN_RNR_TIMER);
	if (ret) {
		/* A well-formed blob the device cannot use: an address it
		 * cannot resolve (rxe: ETIMEDOUT from the neighbour lookup)
		 * or attributes it refuses.  The peer is unreachable. */
		bool unreachable = ret == EINVAL || ret == ETIMEDOUT ||
				   ret == EHOSTUNREACH || ret == ENETUNREACH ||
				   ret == EADDRNOTAVAIL || ret == ENODATA;

		if (unreachable)
			tf_log_info(VERBS_SUBSYS,
				    "qp %u: peer qp %u unreachable (modify to "
				    "RTR: %s)",
				    qp->base.qpn, peer.qpn, strerror(ret));
		else
			tf_log_error(VERBS_SUBSYS,
				     "qp %u: modify to RTR (peer qp %u): %s",
				     qp->base.qpn, peer.qpn, strerror(ret));
		return unreachable ? -TF_EPEER : -ret;
	}
	qp->base.state = TF_QPS_RTR;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = tf_verbs_ack_timeout(qp->base.timeout_ms);
	a.retry_cnt = VERBS_RETRY_CNT;
	a.rnr_retry = qp->base.rnr_retry;
	a.sq_psn = qp->psn;
	a.max_rd_atomic =
		(uint8_t)(da->max_qp_init_rd_atom < 16 ? da->max_qp_init_rd_atom
						       : 16);
	ret = qp_modify(qp, &a,
			IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				IBV_QP_MAX_QP_RD_ATOMIC,
			"RTS");
	if (ret)
		return ret;
	qp->base.state = TF_QPS_RTS;
	return 0;
}

int tf_verbs_qp_set_error(struct tf_qp *bqp)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int ret;

	ret = qp_modify(qp, &a, IBV_QP_STATE, "ERR");
	if (ret)
		return ret;
	tf_verbs_qp_went_error(qp);
	return 0;
}

/*
 * Back to INIT, as tf_verbs_qp_create left it: RESET discards the QP's
 * connection state and its queues, and INIT takes the access flags of the
 * create.  Only a quiet QP: no send outstanding (an unreaped bind would
 * leave its window's bookkeeping behind), no receive posted (rxe's RESET
 * empties the send queue but not the receive queue, whose entries would
 * then take the next peer's SENDs into this peer's buffers), no window
 * bound.  A new generation in the wr_ids makes the completions of the
 * old connection still in the CQ unrecognisable to the poller
 * (translate_wc), and a new initial PSN keeps the old peer's late packets
 * out of the new connection.  Not through rdma_cm, whose cm id is the
 * connection.
 */
int tf_verbs_qp_reset(struct tf_qp *bqp)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct tf_verbs_ctx *c = qp->ctx;
	struct ibv_qp_attr ra = {.qp_state = IBV_QPS_RESET};
	uint32_t psn;
	int ret;

	if (c->use_cm)
		return -EOPNOTSUPP;
	if (qp->bound_mws ||
	    atomic_load(&qp->sq_head) != atomic_load(&qp->sq_tail) ||
	    atomic_load(&qp->rq_head) != atomic_load(&qp->rq_tail))
		return -EBUSY;
	ret = tf__random(&psn, sizeof(psn));
	if (ret)
		return ret;
	ret = qp_modify(qp, &ra, IBV_QP_STATE, "RESET");
	if (ret)
		return ret;
	qp->base.state = TF_QPS_RESET;
	qp->gen = next_gen(c);
	qp->psn = psn & 0xffffff;
	atomic_store(&qp->sq_head, 0);
	atomic_store(&qp->sq_tail, 0);
	qp->sq_done = 0;
	atomic_store(&qp->rq_head, 0);
	atomic_store(&qp->rq_tail, 0);
	return qp_to_init(qp);
}

/* ---------------------------------------------------------------- post */

static uint64_t make_wrid(const struct tf_verbs_qp *qp, uint64_t seq, bool recv)
{
	return (recv ? VERBS_WRID_RECV : 0) |
	       (uint64_t)qp->gen << VERBS_WRID_GEN_SHIFT |
	       (seq & VERBS_WRID_SEQ_MASK);
}

/* A new key for a window: the same index (upper 24 bits), new random low
 * 8 bits that differ from the current ones, so that a key revoked by
 * LOCAL_INV or SEND_WITH_INV does not come back on the next bind. */
static uint32_t next_mw_rkey(uint32_t cur)
{
	uint8_t r;

	do {
		if (tf__random(&r, 1))
			r = (uint8_t)(cur + 1);
	} while (r == (uint8_t)cur);
	return (cur & ~0xffu) | r;
}

/*
 * Translate @wr into @iw and record it in @e.  Checks what verbs leaves to
 * the device or leaves undefined, so that a malformed request fails here
 * with -EINVAL, and an operation the device lacks with -EOPNOTSUPP.
 */
static int xlate_send(struct tf_verbs_qp *qp, const struct tf_send_wr *wr,
		      struct ibv_send_wr *iw, struct tf_verbs_swr *e)
{
	uint64_t caps = qp->ctx->cap_flags;
	uint64_t bytes = 0;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->base.max_sge ||
	    (wr->num_sge && !wr->sg_list) ||
	    (wr->send_flags &
	     ~(unsigned)(TF_SEND_SIGNALED | TF_SEND_INLINE | TF_SEND_FENCE)))
		return -EINVAL;
	for (int i = 0; i < wr->num_sge; i++)
		bytes += wr->sg_list[i].length;
	if (bytes > qp->ctx->pattr.max_msg_sz)
		return -EINVAL;
	if ((wr->send_flags & TF_SEND_INLINE) &&
	    bytes > qp->base.max_inline_data)
		return -EINVAL;

	memset(iw, 0, sizeof(*iw));
	iw->sg_list = (struct ibv_sge *)wr->sg_list;
	iw->num_sge = wr->num_sge;
	if (wr->send_flags & TF_SEND_SIGNALED)
		iw->send_flags |= IBV_SEND_SIGNALED;
	if (wr->send_flags & TF_SEND_FENCE)
		iw->send_flags |= IBV_SEND_FENCE;
	if (wr->send_flags & TF_SEND_INLINE)
		iw->send_flags |= IBV_SEND_INLINE;

	e->wr_id = wr->wr_id;
	e->bytes = bytes;
	e->mw = NULL;
	e->opcode = (uint8_t)wr->opcode;
	e->signaled = !!(wr->send_flags & TF_SEND_SIGNALED);
	e->completed = 0;

	switch (wr->opcode) {
	case TF_WR_SEND:
		iw->opcode = IBV_WR_SEND;
		break;
	case TF_WR_SEND_WITH_IMM:
		if (!(caps & TF_CAP_IMM_DATA))
			return -EOPNOTSUPP;
		iw->opcode = IBV_WR_SEND_WITH_IMM;
		iw->imm_data = htonl(wr->imm_data);
		break;
	case TF_WR_SEND_WITH_INV:
		if (!(caps & TF_CAP_SEND_WITH_INV))
			return -EOPNOTSUPP;
		iw->opcode = IBV_WR_SEND_WITH_INV;
		iw->invalidate_rkey = wr->invalidate_rkey;
		break;
	case TF_WR_RDMA_WRITE:
	case TF_WR_RDMA_WRITE_WITH_IMM:
		if (wr->opcode == TF_WR_RDMA_WRITE_WITH_IMM &&
		    !(caps & TF_CAP_IMM_DATA))
			return -EOPNOTSUPP;
		iw->opcode = wr->opcode == TF_WR_RDMA_WRITE
				     ? IBV_WR_RDMA_WRITE
				     : IBV_WR_RDMA_WRITE_WITH_IMM;
		if (wr->opcode == TF_WR_RDMA_WRITE_WITH_IMM)
			iw->imm_data = htonl(wr->imm_data);
		iw->wr.rdma.remote_addr = wr->wr.rdma.remote_addr;
		iw->wr.rdma.rkey = wr->wr.rdma.rkey;
		break;
	case TF_WR_RDMA_READ:
		/* siw reads into the first SGE only (max_sge_rd 1). */
		if ((wr->send_flags & TF_SEND_INLINE) ||
		    (uint32_t)wr->num_sge > qp->ctx->max_sge_rd)
			return -EINVAL;
		iw->opcode = IBV_WR_RDMA_READ;
		iw->wr.rdma.remote_addr = wr->wr.rdma.remote_addr;
		iw->wr.rdma.rkey = wr->wr.rdma.rkey;
		break;
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		if (!(caps & TF_CAP_ATOMIC))
			return -EOPNOTSUPP;
		/* One 8-byte local buffer receives the old value. */
		if ((wr->wr.atomic.remote_addr & 7) || wr->num_sge != 1 ||
		    bytes != 8 || (wr->send_flags & TF_SEND_INLINE))
			return -EINVAL;
		iw->opcode = wr->opcode == TF_WR_ATOMIC_FETCH_ADD
				     ? IBV_WR_ATOMIC_FETCH_AND_ADD
				     : IBV_WR_ATOMIC_CMP_AND_SWP;
		iw->wr.atomic.remote_addr = wr->wr.atomic.remote_addr;
		iw->wr.atomic.rkey = wr->wr.atomic.rkey;
		iw->wr.atomic.compare_add = wr->wr.atomic.compare_add;
		iw->wr.atomic.swap = wr->wr.atomic.swap;
		break;
	case TF_WR_BIND_MW: {
		struct tf_verbs_mw *mw = VERBS_MW(wr->wr.bind_mw.mw);

		if (!(caps & TF_CAP_MW_TYPE2))
			return -EOPNOTSUPP;
		if (!mw || !mw->ibmw || !wr->wr.bind_mw.mr ||
		    (wr->wr.bind_mw.access &
		     ~(unsigned)(TF_ACCESS_REMOTE_READ |
				 TF_ACCESS_REMOTE_WRITE |
				 TF_ACCESS_REMOTE_ATOMIC)))
			return -EINVAL;
		iw->opcode = IBV_WR_BIND_MW;
		iw->sg_list = NULL;
		iw->num_sge = 0;
		iw->send_flags &= ~(unsigned)IBV_SEND_INLINE;
		e->bytes = 0;
		e->mw = mw;
		e->old_rkey = mw->ibmw->rkey;
		e->new_rkey = next_mw_rkey(e->old_rkey);
		iw->bind_mw.mw = mw->ibmw;
		iw->bind_mw.rkey = e->new_rkey;
		iw->bind_mw.bind_info.mr = VERBS_MR(wr->wr.bind_mw.mr)->ibmr;
		iw->bind_mw.bind_info.addr = wr->wr.bind_mw.addr;
		iw->bind_mw.bind_info.length = wr->wr.bind_mw.length;
		iw->bind_mw.bind_info.mw_access_flags =
			(unsigned)tf_verbs_access(wr->wr.bind_mw.access);
		break;
	}
	case TF_WR_LOCAL_INV:
		if (!(caps & TF_CAP_SEND_WITH_INV) || qp->ctx->siw)
			return -EOPNOTSUPP;
		iw->opcode = IBV_WR_LOCAL_INV;
		iw->sg_list = NULL;
		iw->num_sge = 0;
		iw->send_flags &= ~(unsigned)IBV_SEND_INLINE;
		iw->invalidate_rkey = wr->invalidate_rkey;
		e->bytes = 0;
		e->new_rkey = wr->invalidate_rkey;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* The first @n translated WRs were accepted by the device: publish them
 * to the poller and give bound windows their new keys. */
static void commit_send(struct tf_verbs_qp *qp, uint64_t head, int n)
{
	for (int i = 0; i < n; i++) {
		struct tf_verbs_swr *e =
			&qp->sq[(head + (uint64_t)i) & qp->sq_mask];

		if (e->opcode == TF_WR_BIND_MW) {
			/* libibverbs passes ibv_mw->rkey to the device as
			 * the window's current key on the next bind. */
			e->mw->ibmw->rkey = e->new_rkey;
			e->mw->base.rkey = e->new_rkey;
		}
	}
	atomic_store_explicit(&qp->sq_head, head + (uint64_t)n,
			      memory_order_release);
}

/* siw, error state: check each WR as the device path would, then
 * complete it as flushed. */
static int post_send_flushed(struct tf_verbs_qp *qp, struct tf_send_wr *wr,
			     struct tf_send_wr **bad_wr_p)
{
	struct tf_verbs_cq *cq = VERBS_CQ(qp->base.send_cq);
	int posted = 0, ret;

	for (; wr; wr = wr->next, posted++) {
		struct ibv_send_wr iw;
		struct tf_verbs_swr e;

		ret = xlate_send(qp, wr, &iw, &e);
		if (!ret)
			ret = tf_verbs_queue_flush(
				cq, qp, wr->wr_id,
				tf_verbs_send_wc_opcode(e.opcode));
		if (ret) {
			*bad_wr_p = wr;
			return ret;
		}
	}
	return posted;
}

int tf_verbs_post_send(struct tf_qp *bqp, struct tf_send_wr *wr,
		       struct tf_send_wr **bad_wr_p)
{
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct ibv_send_wr iw[VERBS_POST_BATCH], *ibad;
	struct tf_send_wr *src[VERBS_POST_BATCH];
	int ret = 0, posted = 0;

	/* Verbs refuses sends before RTS with EINVAL; say what it means.
	 * In the error state work is accepted and flushed, as in verbs. */
	if (qp->base.state != TF_QPS_RTS && qp->base.state != TF_QPS_ERR) {
		*bad_wr_p = wr;
		return -ENOTCONN;
	}
	/* rdma_cm: the peer starts the connection and it is not known to
	 * be established yet (verbs_cm.c). */
	if (atomic_load_explicit(&qp->cm_wait, memory_order_relaxed)) {
		ret = tf_verbs_cm_wait(qp);
		if (ret) {
			*bad_wr_p = wr;
			return ret;
		}
	}
	if (tf_verbs_siw_flushes_here(qp))
		return post_send_flushed(qp, wr, bad_wr_p);
	while (wr) {
		uint64_t head = atomic_load_explicit(&qp->sq_head,
						     memory_order_relaxed);
		uint64_t tail = atomic_load_explicit(&qp->sq_tail,
						     memory_order_acquire);
		int n = 0, r;

		for (; wr && n < VERBS_POST_BATCH; wr = wr->next, n++) {
			uint64_t seq = head + (uint64_t)n;

			if (seq - tail >= qp->sq_max) {
				ret = -ENOMEM;
				break;
			}
			ret = xlate_send(qp, wr, &iw[n],
					 &qp->sq[seq & qp->sq_mask]);
			if (ret)
				break;
			iw[n].wr_id = make_wrid(qp, seq, false);
			iw[n].next = NULL;
			if (n)
				iw[n - 1].next = &iw[n];
			src[n] = wr;
		}
		if (n) {
			r = ibv_post_send(qp->ibqp, iw, &ibad);
			if (r) {
				int k = ibad ? (int)(ibad - iw) : 0;

				/* libibverbs says a positive errno; libsiw
				 * returns a negative one. */
				r = r < 0 ? -r : r;

				tf_log_debug(VERBS_SUBSYS,
					     "qp %u: ibv_post_send: %s",
					     qp->base.qpn, strerror(r));
				commit_send(qp, head, k);
				*bad_wr_p = src[k];
				return -r;
			}
			commit_send(qp, head, n);
			posted += n;
		}
		if (ret) {
			tf_log_debug(VERBS_SUBSYS, "qp %u: send WR refused: %s",
				     qp->base.qpn, tf_strerror(ret));
			*bad_wr_p = wr;
			return ret;
		}
	}
	return posted;
}

/*
 * Receives posted in the error state must complete with FLUSH_ERR.  rxe
 * (6.1) flushes the receive queue only when its responder task runs, which
 * posting a receive does not trigger; moving the QP to the error state
 * again (allowed from any state) runs it.
 */
static void kick_flush(struct tf_verbs_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	int ret = ibv_modify_qp(qp->ibqp, &a, IBV_QP_STATE);

	if (ret)
		tf_log_debug(VERBS_SUBSYS, "qp %u: modify to ERR: %s",
			     qp->base.qpn, strerror(ret));
}

int tf_verbs_post_recv(struct tf_qp *bqp, struct tf_recv_wr *wr,
		       struct tf_recv_wr **bad_wr_p)
{
	/* A receive of nothing (siw): a zero-length SGE is never read. */
	static struct ibv_sge no_sge = {.addr = 0, .length = 0, .lkey = 0};
	struct tf_verbs_qp *qp = VERBS_QP(bqp);
	struct ibv_recv_wr iw[VERBS_POST_BATCH], *ibad;
	struct tf_recv_wr *src[VERBS_POST_BATCH];
	int ret = 0, posted = 0;

	if (tf_verbs_siw_flushes_here(qp)) {
		for (; wr; wr = wr->next, posted++) {
			if (wr->num_sge < 0 ||
			    (uint32_t)wr->num_sge > qp->base.max_sge ||
			    (wr->num_sge && !wr->sg_list))
				ret = -EINVAL;
			else
				ret = tf_verbs_queue_flush(
					VERBS_CQ(qp->base.recv_cq), qp,
					wr->wr_id, TF_WC_RECV);
			if (ret) {
				*bad_wr_p = wr;
				return ret;
			}
		}
		return posted;
	}
	while (wr) {
		uint64_t head = atomic_load_explicit(&qp->rq_head,
						     memory_order_relaxed);
		uint64_t tail = atomic_load_explicit(&qp->rq_tail,
						     memory_order_acquire);
		int n = 0, r;

		for (; wr && n < VERBS_POST_BATCH; wr = wr->next, n++) {
			uint64_t seq = head + (uint64_t)n;

			if (seq - tail >= qp->rq_max) {
				ret = -ENOMEM;
				break;
			}
			if (wr->num_sge < 0 ||
			    (uint32_t)wr->num_sge > qp->base.max_sge ||
			    (wr->num_sge && !wr->sg_list)) {
				ret = -EINVAL;
				break;
			}
			qp->rq[seq & qp->rq_mask] = wr->wr_id;
			iw[n].wr_id = make_wrid(qp, seq, true);
			iw[n].sg_list = (struct ibv_sge *)wr->sg_list;
			iw[n].num_sge = wr->num_sge;
			if (!wr->num_sge && qp->ctx->siw) {
				iw[n].sg_list = &no_sge;
				iw[n].num_sge = 1;
			}
			iw[n].next = NULL;
			if (n)
				iw[n - 1].next = &iw[n];
			src[n] = wr;
		}
		if (n) {
			r = ibv_post_recv(qp->ibqp, iw, &ibad);
			if (r) {
				int k = ibad ? (int)(ibad - iw) : 0;

				r = r < 0 ? -r : r;

				tf_log_debug(VERBS_SUBSYS,
					     "qp %u: ibv_post_recv: %s",
					     qp->base.qpn, strerror(r));
				atomic_store_explicit(&qp->rq_head,
						      head + (uint64_t)k,
						      memory_order_release);
				*bad_wr_p = src[k];
				return -r;
			}
			atomic_store_explicit(&qp->rq_head, head + (uint64_t)n,
					      memory_order_release);
			posted += n;
		}
		if (ret) {
			*bad_wr_p = wr;
			return ret;
		}
	}
	if (qp->base.state == TF_QPS_ERR)
		kick_flush(qp);
	return posted;
}
