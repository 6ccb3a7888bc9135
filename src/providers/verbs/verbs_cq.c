/* SPDX-License-Identifier: MIT */
/*
 * verbs_cq.c - completion queues of the verbs provider: their fds, the
 * translation of ibv completions back to the caller's WRs (sequence
 * numbers in the wr_id), the bookkeeping of memory windows that binds and
 * invalidations complete, and the provider's own flushes (siw leaves work
 * posted in the error state in its ring; the provider completes it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>

#include "verbs_int.h"

/* ---------------------------------------------------------------- CQ */

int tf_verbs_cq_create(struct tf_context *ctx, uint32_t depth,
		       struct tf_cq **cq_p)
{
	struct tf_verbs_ctx *c = VERBS_CTX(ctx);
	struct tf_verbs_cq *cq;
	int ret, fl;

	if (depth > (uint32_t)c->dattr.orig_attr.max_cqe) {
		tf_log_debug(VERBS_SUBSYS, "%s: cq depth %u > max_cqe %d",
			     ctx->device, depth, c->dattr.orig_attr.max_cqe);
		return -EINVAL;
	}
	cq = tf__calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	/* One channel per CQ: tf_cq_fd() is per CQ. */
	cq->chan = ibv_create_comp_channel(c->ibctx);
	if (!cq->chan) {
		ret = tf_verbs_errno(ENOMEM);
		tf_log_error(VERBS_SUBSYS, "%s: ibv_create_comp_channel: %s",
			     ctx->device, strerror(-ret));
		goto err_free;
	}
	/* tf_cq_arm drains events without blocking. */
	fl = fcntl(cq->chan->fd, F_GETFL);
	if (fl < 0 || fcntl(cq->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		ret = tf_verbs_errno(EIO);
		tf_log_error(VERBS_SUBSYS, "fcntl(O_NONBLOCK): %m");
		goto err_chan;
	}
	/* A provider library may fail without setting errno (libsiw):
	 * then the error is EIO, not whatever errno held before. */
	errno = 0;
	cq->ibcq = ibv_create_cq(c->ibctx, (int)depth, cq, cq->chan, 0);
	if (!cq->ibcq) {
		ret = tf_verbs_errno(EIO);
		tf_log_error(VERBS_SUBSYS, "%s: ibv_create_cq(%u): %s",
			     ctx->device, depth, strerror(-ret));
		goto err_chan;
	}
	if (c->siw) {
		cq->flush_q = tf__calloc(depth, sizeof(*cq->flush_q));
		if (!cq->flush_q) {
			ret = -ENOMEM;
			ibv_destroy_cq(cq->ibcq);
			goto err_chan;
		}
		pthread_mutex_init(&cq->flush_lock, NULL);
	}
	cq->base.depth = depth;
	*cq_p = &cq->base;
	return 0;

err_chan:
	ibv_destroy_comp_channel(cq->chan);
err_free:
	tf__free(cq);
	return ret;
}

/* Consume and acknowledge the events delivered on the channel. */
static void cq_drain_events(struct tf_verbs_cq *cq)
{
	unsigned n = 0;
	struct ibv_cq *ev;
	void *ev_ctx;

	while (!ibv_get_cq_event(cq->chan, &ev, &ev_ctx))
		n++;
	if (n)
		ibv_ack_cq_events(cq->ibcq, n);
}

int tf_verbs_cq_destroy(struct tf_cq *bcq)
{
	struct tf_verbs_cq *cq = VERBS_CQ(bcq);
	int ret;

	/* ibv_destroy_cq waits for every event it delivered to be acked. */
	cq_drain_events(cq);
	ret = ibv_destroy_cq(cq->ibcq);
	if (ret) {
		tf_log_warn(VERBS_SUBSYS, "ibv_destroy_cq: %s", strerror(ret));
		return -ret;
	}
	ret = ibv_destroy_comp_channel(cq->chan);
	if (ret)
		tf_log_warn(VERBS_SUBSYS, "ibv_destroy_comp_channel: %s",
			    strerror(ret));
	if (cq->flush_q) {
		pthread_mutex_destroy(&cq->flush_lock);
		tf__free(cq->flush_q);
	}
	tf__free(cq);
	return 0;
}

int tf_verbs_cq_fd(struct tf_cq *bcq)
{
	return VERBS_CQ(bcq)->chan->fd;
}

int tf_verbs_cq_arm(struct tf_cq *bcq)
{
	struct tf_verbs_cq *cq = VERBS_CQ(bcq);
	int ret;

	cq_drain_events(cq);
	ret = ibv_req_notify_cq(cq->ibcq, 0);
	if (ret) {
		tf_log_error(VERBS_SUBSYS, "ibv_req_notify_cq: %s",
			     strerror(ret));
		return -ret;
	}
	return 0;
}

static enum tf_wc_status map_status(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return TF_WC_SUCCESS;
	case IBV_WC_LOC_LEN_ERR:
		return TF_WC_LOC_LEN_ERR;
	case IBV_WC_LOC_QP_OP_ERR:
	case IBV_WC_LOC_EEC_OP_ERR:
		return TF_WC_LOC_QP_OP_ERR;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return TF_WC_LOC_PROT_ERR;
	case IBV_WC_WR_FLUSH_ERR:
		return TF_WC_WR_FLUSH_ERR;
	case IBV_WC_MW_BIND_ERR:
		return TF_WC_MW_BIND_ERR;
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
		return TF_WC_REM_INV_REQ_ERR;
	case IBV_WC_REM_ACCESS_ERR:
		return TF_WC_REM_ACCESS_ERR;
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
		return TF_WC_REM_OP_ERR;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return TF_WC_RETRY_EXC_ERR;
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return TF_WC_RNR_RETRY_EXC_ERR;
	case IBV_WC_FATAL_ERR:
		return TF_WC_FATAL_ERR;
	default:
		return TF_WC_GENERAL_ERR;
	}
}

enum tf_wc_opcode tf_verbs_send_wc_opcode(uint8_t op)
{
	switch (op) {
	case TF_WR_RDMA_WRITE:
	case TF_WR_RDMA_WRITE_WITH_IMM:
		return TF_WC_RDMA_WRITE;
	case TF_WR_RDMA_READ:
		return TF_WC_RDMA_READ;
	case TF_WR_ATOMIC_FETCH_ADD:
		return TF_WC_FETCH_ADD;
	case TF_WR_ATOMIC_CMP_SWP:
		return TF_WC_COMP_SWAP;
	case TF_WR_BIND_MW:
		return TF_WC_BIND_MW;
	case TF_WR_LOCAL_INV:
		return TF_WC_LOCAL_INV;
	default:
		return TF_WC_SEND;
	}
}

/* ---------------------------------------------------------------- windows */

/* Lock must be held (ctx->mw_lock). */
static void mw_unlink(struct tf_verbs_mw *mw)
{
	struct tf_verbs_mw **pp;

	if (!mw->bound_qp)
		return;
	for (pp = &mw->bound_qp->bound_mws; *pp; pp = &(*pp)->next_bound)
		if (*pp == mw) {
			*pp = mw->next_bound;
			break;
		}
	mw->bound_qp = NULL;
	mw->next_bound = NULL;
}

void tf_verbs_mw_unbind(struct tf_verbs_ctx *c, struct tf_verbs_mw *mw)
{
	pthread_mutex_lock(&c->mw_lock);
	mw_unlink(mw);
	pthread_mutex_unlock(&c->mw_lock);
}

/* A BIND_MW through @qp completed: the window is bound through it. */
static void mw_bound(struct tf_verbs_qp *qp, struct tf_verbs_mw *mw)
{
	pthread_mutex_lock(&qp->ctx->mw_lock);
	mw_unlink(mw);
	mw->bound_qp = qp;
	mw->next_bound = qp->bound_mws;
	qp->bound_mws = mw;
	pthread_mutex_unlock(&qp->ctx->mw_lock);
}

/* @rkey, a window bound through @qp, was invalidated (LOCAL_INV on the
 * QP or a SEND_WITH_INV received on it). */
static void mw_invalidated(struct tf_verbs_qp *qp, uint32_t rkey)
{
	pthread_mutex_lock(&qp->ctx->mw_lock);
	for (struct tf_verbs_mw *mw = qp->bound_mws; mw; mw = mw->next_bound)
		if (mw->ibmw && mw->ibmw->rkey == rkey) {
			mw_unlink(mw);
			break;
		}
	pthread_mutex_unlock(&qp->ctx->mw_lock);
}

/*
 * Invalidate the windows still bound through a QP about to be destroyed.  Verbs has no
 * verb that unbinds a window without its QP, so each is replaced: the old
 * one is deallocated (which unbinds it and frees its region) and a fresh,
 * unbound one takes its place behind the same tf_mw.
 */
void tf_verbs_mw_revoke_all(struct tf_verbs_qp *qp)
{
	struct tf_verbs_ctx *c = qp->ctx;

	pthread_mutex_lock(&c->mw_lock);
	while (qp->bound_mws) {
		struct tf_verbs_mw *mw = qp->bound_mws;
		int ret;

		mw_unlink(mw);
		ret = ibv_dealloc_mw(mw->ibmw);
		if (ret) {
			tf_log_error(VERBS_SUBSYS,
				     "qp %u: ibv_dealloc_mw of a bound window: "
				     "%s",
				     qp->base.qpn, strerror(ret));
			continue;
		}
		mw->ibmw = ibv_alloc_mw(VERBS_PD(mw->base.pd)->ibpd,
					IBV_MW_TYPE_2);
		if (!mw->ibmw) {
			/* The window stays usable only for tf_mw_dealloc;
			 * BIND_MW on it fails with -EINVAL. */
			tf_log_error(VERBS_SUBSYS, "ibv_alloc_mw: %m");
			mw->base.rkey = 0;
			continue;
		}
		mw->base.rkey = mw->ibmw->rkey;
	}
	pthread_mutex_unlock(&c->mw_lock);
}

/* Account for a send-queue WR that completed successfully. */
static void swr_done(struct tf_verbs_qp *qp, const struct tf_verbs_swr *e)
{
	struct tf_context *ctx = &qp->ctx->base;

	/* Only the poller of the send CQ gets here: the counter has one
	 * writer.  The context's bytes_out is the sum over its QPs (core). */
	if (e->bytes)
		TF_STAT_ADD_OWNED(&qp->base, bytes_out, e->bytes);
	if (e->opcode == TF_WR_BIND_MW) {
		TF_STAT_ADD(ctx, mw_bind, 1);
		mw_bound(qp, e->mw);
	} else if (e->opcode == TF_WR_LOCAL_INV) {
		TF_STAT_ADD(ctx, mw_inval, 1);
		mw_invalidated(qp, e->new_rkey);
	}
}

/* The QP reached the error state (counted once per QP). */
void tf_verbs_qp_went_error(struct tf_verbs_qp *qp)
{
	if (qp->base.state == TF_QPS_ERR)
		return;
	qp->base.state = TF_QPS_ERR;
	TF_STAT_ADD(&qp->ctx->base, qp_errors, 1);
}

/* Full sequence number from the low bits carried in a wr_id, knowing that
 * it lies at or after @tail. */
static uint64_t seq_expand(uint64_t tail, uint64_t wr_id)
{
	return tail +
	       (((wr_id & VERBS_WRID_SEQ_MASK) - tail) & VERBS_WRID_SEQ_MASK);
}

/*
 * Translate one ibv_wc.  Returns false when the completion belongs to no
 * live QP (destroyed: its work is dropped, as tf_qp_destroy documents).
 * The QP-map lock must be held in read mode.
 */
static bool translate_wc(struct tf_verbs_ctx *c, const struct ibv_wc *iw,
			 struct tf_wc *wc)
{
	struct tf_verbs_qp *qp = tf_verbs_qp_find(c, iw->qp_num);
	struct tf_verbs_swr *e;
	uint64_t tail, head, seq;

	if (!qp || ((iw->wr_id >> VERBS_WRID_GEN_SHIFT) &
		    VERBS_WRID_GEN_MASK) != qp->gen)
		return false;
	memset(wc, 0, sizeof(*wc));
	wc->qp = &qp->base;
	wc->status = map_status(iw->status);
	wc->vendor_err = iw->vendor_err;

	if (iw->wr_id & VERBS_WRID_RECV) {
		tail = atomic_load_explicit(&qp->rq_tail, memory_order_relaxed);
		head = atomic_load_explicit(&qp->rq_head, memory_order_acquire);
		seq = seq_expand(tail, iw->wr_id);
		if (seq >= head) {
			tf_log_error(VERBS_SUBSYS,
				     "qp %u: receive completion for an "
				     "unposted WR",
				     qp->base.qpn);
			return false;
		}
		wc->wr_id = qp->rq[seq & qp->rq_mask];
		atomic_store_explicit(&qp->rq_tail, seq + 1,
				      memory_order_release);
		/* The opcode of an error completion is undefined in verbs. */
		wc->opcode =
			iw->status == IBV_WC_SUCCESS &&
					iw->opcode == IBV_WC_RECV_RDMA_WITH_IMM
				? TF_WC_RECV_RDMA_WITH_IMM
				: TF_WC_RECV;
		if (iw->status == IBV_WC_SUCCESS) {
			wc->byte_len = iw->byte_len;
			/* One writer: the poller of the receive CQ. */
			TF_STAT_ADD_OWNED(&qp->base, bytes_in, iw->byte_len);
			if (iw->wc_flags & IBV_WC_WITH_IMM) {
				wc->flags |= TF_WC_WITH_IMM;
				wc->imm_data = ntohl(iw->imm_data);
			}
			if ((iw->wc_flags & IBV_WC_WITH_INV) ||
			    (c->rxe_inv_quirk &&
			     (iw->wc_flags & IBV_WC_IP_CSUM_OK))) {
				wc->flags |= TF_WC_WITH_INV;
				wc->invalidated_rkey = iw->invalidated_rkey;
				TF_STAT_ADD(&c->base, mw_inval, 1);
				mw_invalidated(qp, iw->invalidated_rkey);
			}
		}
	} else {
		tail = atomic_load_explicit(&qp->sq_tail, memory_order_relaxed);
		head = atomic_load_explicit(&qp->sq_head, memory_order_acquire);
		seq = seq_expand(tail, iw->wr_id);
		if (seq >= head) {
			tf_log_error(VERBS_SUBSYS,
				     "qp %u: send completion for an unposted "
				     "WR",
				     qp->base.qpn);
			return false;
		}
		e = &qp->sq[seq & qp->sq_mask];
		if (e->completed) {
			tf_log_error(VERBS_SUBSYS,
				     "qp %u: second completion of a WR",
				     qp->base.qpn);
			return false;
		}
		wc->wr_id = e->wr_id;
		wc->opcode = tf_verbs_send_wc_opcode(e->opcode);
		if (iw->status == IBV_WC_SUCCESS) {
			swr_done(qp, e);
			if (e->opcode == TF_WR_RDMA_READ)
				wc->byte_len = (uint32_t)e->bytes;
		} else if (e->opcode == TF_WR_BIND_MW) {
			/* The device kept the old key; libibverbs hands
			 * ibv_mw->rkey to the next bind as the current key. */
			e->mw->ibmw->rkey = e->old_rkey;
		}
		e->completed = 1;
		if (seq >= qp->sq_done)
			qp->sq_done = seq + 1;
		/*
		 * Retire from the tail: WRs that completed, and unsignaled
		 * ones before the last completion, which completed without a
		 * CQE.  They succeeded unless this is a flush: a device may
		 * flush without a CQE per WR, so nothing is claimed for
		 * them.  A signaled WR that has not completed stops the
		 * walk: siw completes a READ when its response arrives,
		 * after WRs posted later that completed once sent.
		 */
		while (tail < head) {
			struct tf_verbs_swr *t = &qp->sq[tail & qp->sq_mask];

			if (t->completed) {
				t->completed = 0;
			} else if (!t->signaled && tail < qp->sq_done) {
				if (iw->status != IBV_WC_WR_FLUSH_ERR)
					swr_done(qp, t);
			} else {
				break;
			}
			tail++;
		}
		atomic_store_explicit(&qp->sq_tail, tail, memory_order_release);
	}
	if (iw->status != IBV_WC_SUCCESS) {
		tf_log_debug(VERBS_SUBSYS, "qp %u: wr %llu: %s (vendor 0x%x)",
			     qp->base.qpn, (unsigned long long)wc->wr_id,
			     ibv_wc_status_str(iw->status), iw->vendor_err);
		tf_verbs_qp_went_error(qp);
	}
	return true;
}

int tf_verbs_cq_poll(struct tf_cq *bcq, int n, struct tf_wc *wc)
{
	struct tf_verbs_cq *cq = VERBS_CQ(bcq);
	struct tf_verbs_ctx *c = VERBS_CTX(bcq->ctx);
	struct ibv_wc iw[VERBS_POLL_BATCH];
	int got = 0;

	while (got < n) {
		int want =
			n - got < VERBS_POLL_BATCH ? n - got : VERBS_POLL_BATCH;
		int r = ibv_poll_cq(cq->ibcq, want, iw);

		if (r < 0) {
			tf_log_error(VERBS_SUBSYS, "ibv_poll_cq: %d", r);
			return got ? got : -EIO;
		}
		/* An empty poll, a spinner's usual one, takes no lock. */
		if (r > 0) {
			pthread_rwlock_rdlock(&c->qp_lock);
			for (int i = 0; i < r; i++)
				if (translate_wc(c, &iw[i], &wc[got]))
					got++;
			pthread_rwlock_unlock(&c->qp_lock);
		}
		if (r < want)
			break;
	}
	/* After the device's: those it had were posted before these. */
	if (got < n && cq->flush_q &&
	    atomic_load_explicit(&cq->flush_n, memory_order_acquire)) {
		pthread_mutex_lock(&cq->flush_lock);
		while (got < n && cq->flush_tail < cq->flush_head) {
			wc[got++] =
				cq->flush_q[cq->flush_tail++ % cq->base.depth];
			atomic_fetch_sub(&cq->flush_n, 1);
		}
		pthread_mutex_unlock(&cq->flush_lock);
	}
	return got;
}

/*
 * siw: queue a flushed completion for a WR posted in the error state.
 * Returns 0, or -ENOMEM when the CQ has no room (then it is not posted).
 */
int tf_verbs_queue_flush(struct tf_verbs_cq *cq, struct tf_verbs_qp *qp,
			 uint64_t wr_id, enum tf_wc_opcode op)
{
	int ret = 0;

	pthread_mutex_lock(&cq->flush_lock);
	if (cq->flush_head - cq->flush_tail >= cq->base.depth) {
		ret = -ENOMEM;
	} else {
		struct tf_wc *wc =
			&cq->flush_q[cq->flush_head++ % cq->base.depth];

		memset(wc, 0, sizeof(*wc));
		wc->wr_id = wr_id;
		wc->status = TF_WC_WR_FLUSH_ERR;
		wc->opcode = op;
		wc->qp = &qp->base;
		atomic_fetch_add_explicit(&cq->flush_n, 1,
					  memory_order_release);
	}
	pthread_mutex_unlock(&cq->flush_lock);
	return ret;
}

/* siw: whether work posted to @qp now would stay in its ring forever. */
bool tf_verbs_siw_flushes_here(struct tf_verbs_qp *qp)
{
	return qp->ctx->siw &&
	       (qp->base.state == TF_QPS_ERR ||
		atomic_load_explicit(&qp->cm_broken, memory_order_relaxed));
}
