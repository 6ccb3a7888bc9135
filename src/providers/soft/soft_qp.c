/* SPDX-License-Identifier: MIT */
/*
 * soft_qp.c - the engine of the soft provider: RC QP state machine, work
 * request validation, send and receive queues, completions and flushes,
 * and the local operations (BIND_MW, LOCAL_INV) that complete in order
 * with the rest of the send queue.
 *
 * Send queue discipline: WQEs are started strictly in order.  A WQE that
 * only the engine can execute (BIND_MW, LOCAL_INV), a fenced one, and one
 * that fails its local check waits until every earlier WQE completed, so
 * that its completion (or error) lands in order.  Transports complete the
 * WQEs they accepted in order through soft_engine_send_done().
 */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "soft_int.h"

void soft_qp_lock_slow(struct soft_qp *qp)
{
	for (uint32_t spins = 0;; spins++) {
		if (!atomic_load_explicit(&qp->lock, memory_order_relaxed) &&
		    !atomic_exchange_explicit(&qp->lock, 1,
					      memory_order_acquire))
			return;
		/* The holder may be descheduled (a long copy, or simply
		 * more threads than cores): yield after a short spin. */
		if (spins < 100)
			tf__cpu_relax();
		else
			sched_yield();
	}
}

static enum tf_wc_opcode wc_opcode(enum tf_wr_opcode op)
{
	switch (op) {
	case TF_WR_SEND:
	case TF_WR_SEND_WITH_IMM:
	case TF_WR_SEND_WITH_INV:
		return TF_WC_SEND;
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
	}
	return TF_WC_SEND;
}

static void push_send_cqe(struct soft_qp *qp, const struct soft_swqe *wqe,
			  enum tf_wc_status status)
{
	struct tf_wc wc = {
		.wr_id = wqe->wr_id,
		.status = status,
		.opcode = wc_opcode(wqe->opcode),
		.qp = &qp->base,
	};

	soft_cq_push((struct soft_cq *)qp->base.send_cq, &wc);
}

static void push_recv_cqe(struct soft_qp *qp, const struct soft_rwqe *rwqe,
			  enum tf_wc_status status)
{
	struct tf_wc wc = {
		.wr_id = rwqe->wr_id,
		.status = status,
		.opcode = TF_WC_RECV,
		.qp = &qp->base,
	};

	soft_cq_push((struct soft_cq *)qp->base.recv_cq, &wc);
}

/* Flush send WQEs [from, sq_tail); the first one gets @first_status. */
static void flush_sq(struct soft_qp *qp, uint32_t from,
		     enum tf_wc_status first_status)
{
	for (uint32_t i = from; i != qp->sq_tail; i++) {
		struct soft_swqe *wqe = soft_sq_wqe(qp, i);

		if (wqe->opcode == TF_WR_BIND_MW &&
		    wqe->state == SOFT_WQE_POSTED)
			soft_mw_bind_cancel(qp, wqe);
		wqe->state = SOFT_WQE_DONE;
		/* Flushed work always completes, signalled or not. */
		push_send_cqe(qp, wqe,
			      i == from ? first_status : TF_WC_WR_FLUSH_ERR);
	}
	qp->sq_head = qp->sq_next = qp->sq_tail;
}

static void flush_rq(struct soft_qp *qp)
{
	for (uint32_t i = qp->rq_head; i != qp->rq_tail; i++)
		push_recv_cqe(qp, soft_rq_wqe(qp, i), TF_WC_WR_FLUSH_ERR);
	qp->rq_head = qp->rq_tail;
}

void soft_engine_qp_error(struct soft_qp *qp, enum tf_wc_status why)
{
	enum tf_wc_status first = TF_WC_WR_FLUSH_ERR;

	if (qp->base.state == TF_QPS_ERR)
		return;
	soft_qp_set_state(qp, TF_QPS_ERR);
	TF_STAT_ADD(&qp->ctx->base, qp_errors, 1);
	tf_log_debug(SOFT_SUBSYS, "qp %#x: error state (%s)", qp->base.qpn,
		     tf_wc_status_str(why));
	/* The transport first, so that it stops completing WQEs. */
	if (qp->tp && qp->tp->qp_fini)
		qp->tp->qp_fini(qp);
	/* The oldest unfinished send WQE reports why, if the transport had
	 * started it.  A lost peer is reported in any case, as on RC, where
	 * a QP fails for it only when a WQE's retries run out: by the
	 * oldest unfinished WQE, started or not, or with none, by the next
	 * one posted (soft_post_send). */
	if (why == TF_WC_RETRY_EXC_ERR && qp->sq_head == qp->sq_tail)
		qp->err_owed = why;
	else if (why != TF_WC_WR_FLUSH_ERR &&
		 (qp->sq_head != qp->sq_next || why == TF_WC_RETRY_EXC_ERR))
		first = why;
	flush_sq(qp, qp->sq_head, first);
	flush_rq(qp);
}

/* A failed WQE always completes (signalled or not) and takes the QP to
 * error; a successful one completes only if signalled, as in verbs. */
void soft_engine_send_done(struct soft_qp *qp, struct soft_swqe *wqe,
			   enum tf_wc_status status)
{
	if (qp->base.state == TF_QPS_ERR)
		return;
	if (qp->sq_head == qp->sq_next || wqe != soft_sq_wqe(qp, qp->sq_head)) {
		tf_log_error(SOFT_SUBSYS,
			     "qp %#x: completion out of order (transport "
			     "bug); moving the QP to error",
			     qp->base.qpn);
		soft_engine_qp_error(qp, TF_WC_GENERAL_ERR);
		return;
	}
	wqe->state = SOFT_WQE_DONE;
	qp->sq_head++;
	if (status != TF_WC_SUCCESS) {
		push_send_cqe(qp, wqe, status);
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		return;
	}
	/* The context's bytes_out is the sum over its QPs (core). */
	SOFT_STAT_ADD_LOCKED(&qp->base, bytes_out, wqe->total_len);
	if (wqe->send_flags & TF_SEND_SIGNALED)
		push_send_cqe(qp, wqe, TF_WC_SUCCESS);
	/* Work that waited for this one (ordering, fences, local ops). */
	if (!qp->in_kick && qp->sq_next != qp->sq_tail)
		soft_engine_kick(qp);
}

/* Execute a local operation (BIND_MW, LOCAL_INV): it is the oldest WQE. */
static void exec_local(struct soft_qp *qp, struct soft_swqe *wqe)
{
	enum tf_wc_status st;

	if (wqe->opcode == TF_WR_BIND_MW)
		st = soft_mw_bind(qp, wqe);
	else
		st = soft_local_inv(qp, wqe->invalidate_rkey);
	wqe->state = SOFT_WQE_SUBMITTED;
	qp->sq_next++;
	soft_engine_send_done(qp, wqe, st);
}

void soft_engine_kick(struct soft_qp *qp)
{
	bool was = qp->in_kick;

	qp->in_kick = true;
	if (atomic_load_explicit(&qp->kick_pending, memory_order_relaxed) &&
	    atomic_exchange(&qp->kick_pending, false))
		atomic_fetch_sub(&qp->ctx->n_kick, 1);
	while (qp->base.state == TF_QPS_RTS && qp->sq_next != qp->sq_tail) {
		struct soft_swqe *wqe = soft_sq_wqe(qp, qp->sq_next);
		bool oldest = qp->sq_next == qp->sq_head;
		enum tf_wc_status st = TF_WC_SUCCESS;
		int ret;

		if (wqe->opcode == TF_WR_BIND_MW ||
		    wqe->opcode == TF_WR_LOCAL_INV) {
			if (!oldest)
				break; /* send_done of the older ones kicks */
			exec_local(qp, wqe);
			continue;
		}
		if ((wqe->send_flags & TF_SEND_FENCE) && !oldest)
			break;
		if (wqe->num_sge) {
			unsigned acc = (wqe->opcode == TF_WR_RDMA_READ ||
					wqe->opcode == TF_WR_ATOMIC_FETCH_ADD ||
					wqe->opcode == TF_WR_ATOMIC_CMP_SWP)
					       ? TF_ACCESS_LOCAL_WRITE
					       : 0;

			st = soft_sge_check(qp, wqe->sge, wqe->num_sge, acc);
		}
		if (st != TF_WC_SUCCESS) {
			if (!oldest)
				break;
			wqe->state = SOFT_WQE_SUBMITTED;
			qp->sq_next++;
			soft_engine_send_done(qp, wqe, st);
			continue;
		}
		wqe->state = SOFT_WQE_SUBMITTED;
		qp->sq_next++;
		ret = qp->tp->submit(qp, wqe);
		if (ret == -EAGAIN) {
			/* Not taken: it stays the next one to start. */
			if (qp->base.state == TF_QPS_RTS) {
				wqe->state = SOFT_WQE_POSTED;
				qp->sq_next--;
				if (!atomic_exchange(&qp->kick_pending, true))
					atomic_fetch_add(&qp->ctx->n_kick, 1);
			}
			break;
		}
		if (ret < 0) {
			tf_log_error(SOFT_SUBSYS, "qp %#x: %s submit: %s",
				     qp->base.qpn, qp->tp->name,
				     tf_strerror(ret));
			soft_engine_qp_error(qp, TF_WC_GENERAL_ERR);
			break;
		}
	}
	/* Work left waiting (a full ring, a fence, a local operation
	 * behind older work) moves on with the peer's acknowledgements:
	 * the peer must then wake this side for them. */
	if (qp->shm_seg && (qp->sq_next != qp->sq_tail) != qp->tx_wait_pub)
		soft_shm_tx_wait(qp, qp->sq_next != qp->sq_tail);
	qp->in_kick = was;
}

int soft_engine_progress(struct soft_ctx *ctx)
{
	int n = 0;

	if (!atomic_load_explicit(&ctx->n_kick, memory_order_relaxed))
		return 0;
	for (uint32_t i = 0; i < ctx->n_qps; i++) {
		struct soft_qp *qp = ctx->qps[i];

		if (!atomic_load_explicit(&qp->kick_pending,
					  memory_order_relaxed))
			continue;
		if (!soft_qp_trylock(qp))
			continue;
		soft_engine_kick(qp);
		soft_qp_unlock(qp);
		n++;
	}
	return n;
}

/* ------------------------------------------------------------ receive */

/*
 * The receive WQE's buffers are checked when a message arrives, as a NIC
 * does (an lkey may be revoked after the post): a bad one completes the
 * receive with LOC_QP_OP_ERR, moves the QP to error, and the sender is
 * told TF_WC_REM_OP_ERR (rxe's responder: a malformed WQE is class A).
 */
struct soft_rwqe *soft_engine_recv_peek(struct soft_qp *qp)
{
	struct soft_rwqe *rwqe;

	if (qp->base.state != TF_QPS_RTS && qp->base.state != TF_QPS_RTR)
		return NULL;
	if (qp->rq_head == qp->rq_tail)
		return NULL;
	rwqe = soft_rq_wqe(qp, qp->rq_head);
	if (soft_sge_check(qp, rwqe->sge, rwqe->num_sge,
			   TF_ACCESS_LOCAL_WRITE) != TF_WC_SUCCESS) {
		qp->rq_head++;
		push_recv_cqe(qp, rwqe, TF_WC_LOC_QP_OP_ERR);
		qp->recv_err = TF_WC_REM_OP_ERR;
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		return NULL;
	}
	return rwqe;
}

/* Status for the sender when no receive WQE can take a message. */
static enum tf_wc_status no_rwqe_status(struct soft_qp *qp)
{
	if (qp->base.state == TF_QPS_ERR)
		return qp->recv_err ? qp->recv_err : TF_WC_WR_FLUSH_ERR;
	return TF_WC_RNR_RETRY_EXC_ERR;
}

enum tf_wc_status soft_engine_recv_commit(struct soft_qp *qp,
					  enum tf_wr_opcode op, uint32_t len,
					  uint32_t imm, uint32_t inv_rkey)
{
	struct soft_rwqe *rwqe;
	struct tf_wc wc = {.qp = &qp->base};

	if (qp->base.state != TF_QPS_RTS && qp->base.state != TF_QPS_RTR)
		return no_rwqe_status(qp);
	if (qp->rq_head == qp->rq_tail)
		return no_rwqe_status(qp);
	rwqe = soft_rq_wqe(qp, qp->rq_head);
	wc.wr_id = rwqe->wr_id;
	/* The receive is consumed whatever happens next: a length or key
	 * error completes it with an error status. */
	qp->rq_head++;
	if (op != TF_WR_RDMA_WRITE_WITH_IMM && len > rwqe->total_len) {
		tf_log_debug(SOFT_SUBSYS,
			     "qp %#x: %u-byte message, receive of %u bytes",
			     qp->base.qpn, len, rwqe->total_len);
		wc.status = TF_WC_LOC_LEN_ERR;
		wc.opcode = TF_WC_RECV;
		soft_cq_push((struct soft_cq *)qp->base.recv_cq, &wc);
		soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
		return TF_WC_REM_INV_REQ_ERR;
	}
	wc.byte_len = len;
	wc.opcode = op == TF_WR_RDMA_WRITE_WITH_IMM ? TF_WC_RECV_RDMA_WITH_IMM
						    : TF_WC_RECV;
	if (op == TF_WR_SEND_WITH_IMM || op == TF_WR_RDMA_WRITE_WITH_IMM) {
		wc.flags |= TF_WC_WITH_IMM;
		wc.imm_data = imm;
	}
	if (op == TF_WR_SEND_WITH_INV) {
		if (soft_remote_inv(qp, inv_rkey) != TF_WC_SUCCESS) {
			/* As rxe's responder (class J): the receive completes
			 * with REM_INV_REQ_ERR and the QP goes to error, but
			 * the message itself was accepted: the sender gets
			 * its ACK. */
			wc.status = TF_WC_REM_INV_REQ_ERR;
			wc.byte_len = 0;
			soft_cq_push((struct soft_cq *)qp->base.recv_cq, &wc);
			soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
			return TF_WC_SUCCESS;
		}
		wc.flags |= TF_WC_WITH_INV;
		wc.invalidated_rkey = inv_rkey;
	}
	SOFT_STAT_ADD_LOCKED(&qp->base, bytes_in, len);
	soft_cq_push((struct soft_cq *)qp->base.recv_cq, &wc);
	return TF_WC_SUCCESS;
}

enum tf_wc_status soft_engine_recv(struct soft_qp *qp, enum tf_wr_opcode op,
				   const void *data, uint32_t len, uint32_t imm,
				   uint32_t inv_rkey)
{
	struct soft_rwqe *rwqe = soft_engine_recv_peek(qp);

	if (!rwqe)
		return no_rwqe_status(qp);
	if (op != TF_WR_RDMA_WRITE_WITH_IMM && len <= rwqe->total_len && len)
		soft_sge_scatter(rwqe->sge, rwqe->num_sge, 0, data, len);
	return soft_engine_recv_commit(qp, op, len, imm, inv_rkey);
}

void soft_sge_scatter(const struct tf_sge *sge, uint32_t n, uint64_t off,
		      const void *src, uint64_t len)
{
	const uint8_t *p = src;

	for (uint32_t i = 0; i < n && len; i++) {
		uint64_t take;

		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		take = sge[i].length - off;
		if (take > len)
			take = len;
		memcpy((void *)(uintptr_t)(sge[i].addr + off), p, take);
		p += take;
		len -= take;
		off = 0;
	}
}

void soft_wqe_gather(const struct soft_swqe *wqe, uint64_t off, void *dst,
		     uint64_t len)
{
	uint8_t *p = dst;

	if (wqe->inline_data) {
		memcpy(p, wqe->inline_data + off, len);
		return;
	}
	for (uint32_t i = 0; i < wqe->num_sge && len; i++) {
		uint64_t take;

		if (off >= wqe->sge[i].length) {
			off -= wqe->sge[i].length;
			continue;
		}
		take = wqe->sge[i].length - off;
		if (take > len)
			take = len;
		memcpy(p, (const void *)(uintptr_t)(wqe->sge[i].addr + off),
		       take);
		p += take;
		len -= take;
		off = 0;
	}
}

/* ------------------------------------------------------------ QP objects */

/* @qp's queues and their sizes, as soft_qmem.c keeps them. */
static struct soft_qmem qp_mem(const struct soft_qp *qp)
{
	return (struct soft_qmem){.sq_size = qp->sq_size,
				  .rq_size = qp->rq_size,
				  .max_sge = qp->base.max_sge,
				  .max_inline = qp->base.max_inline_data,
				  .sq = qp->sq,
				  .rq = qp->rq,
				  .sq_sge = qp->sq_sge,
				  .rq_sge = qp->rq_sge,
				  .sq_inline = qp->sq_inline};
}

static int qp_mem_get(struct soft_qp *qp)
{
	struct soft_qmem m = qp_mem(qp);
	int ret = soft_qmem_get(qp->ctx, &m);

	if (ret)
		return ret;
	qp->sq = m.sq;
	qp->rq = m.rq;
	qp->sq_sge = m.sq_sge;
	qp->rq_sge = m.rq_sge;
	qp->sq_inline = m.sq_inline;
	return 0;
}

static void qp_mem_put(struct soft_qp *qp)
{
	struct soft_qmem m = qp_mem(qp);

	soft_qmem_put(qp->ctx, &m);
	qp->sq = NULL;
	qp->rq = NULL;
	qp->sq_sge = qp->rq_sge = NULL;
	qp->sq_inline = NULL;
}

/* Queues are allocated whole at create time (power-of-two rings of the
 * requested depth), so that posting never allocates. */
int soft_qp_create(struct tf_pd *pd, const struct tf_qp *attr,
		   struct tf_qp **qp_p)
{
	struct soft_ctx *ctx = soft_ctx_of(pd->ctx);
	struct soft_qp *qp;
	uint32_t idx;
	int ret;

	qp = tf__calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	qp->ctx = ctx;
	qp->pd_id = ((struct soft_pd *)pd)->pd_id;
	qp->base.pd = pd;
	qp->base.send_cq = attr->send_cq;
	qp->base.recv_cq = attr->recv_cq;
	qp->base.max_send_wr = attr->max_send_wr;
	qp->base.max_recv_wr = attr->max_recv_wr;
	qp->base.max_sge = attr->max_sge;
	qp->base.max_inline_data = attr->max_inline_data;
	qp->base.access = attr->access;
	qp->base.rnr_retry = attr->rnr_retry;
	qp->base.timeout_ms = attr->timeout_ms;
	qp->sq_size = soft_pow2(attr->max_send_wr);
	qp->rq_size = soft_pow2(attr->max_recv_wr);
	qp->shm_seg_fd = -1;
	ret = qp_mem_get(qp);
	if (ret)
		goto err_free;
	if (ctx->want_shm) {
		ret = soft_shm_qp_init(qp);
		if (ret)
			goto err_free;
	}

	pthread_mutex_lock(&ctx->progress_lock);
	for (idx = 0; idx < SOFT_MAX_QP && ctx->qp_tab[idx]; idx++)
		;
	if (idx == SOFT_MAX_QP) {
		pthread_mutex_unlock(&ctx->progress_lock);
		tf_log_warn(SOFT_SUBSYS, "qp_create: %u QPs in use",
			    SOFT_MAX_QP);
		ret = -ENOSPC;
		goto err_shm;
	}
	/* The generation keeps a stale QP number from reaching a new QP
	 * that took the same table index. */
	ctx->qp_gen = (ctx->qp_gen + 1) & 0xfffff;
	if (!ctx->qp_gen)
		ctx->qp_gen = 1;
	qp->base.qpn = (ctx->qp_gen << 12) | idx;
	qp->base.state = TF_QPS_INIT;
	ctx->qp_tab[idx] = qp;
	ctx->qps[ctx->n_qps++] = qp;
	qp->in_list = true;
	pthread_mutex_unlock(&ctx->progress_lock);
	*qp_p = &qp->base;
	return 0;

err_shm:
	soft_shm_qp_destroy(qp);
err_free:
	qp_mem_put(qp);
	tf__free(qp);
	return ret;
}

int soft_qp_destroy(struct tf_qp *base)
{
	struct soft_qp *qp = soft_qp_of(base);
	struct soft_ctx *ctx = qp->ctx;

	/* Out of the progress list first: no progress runs on it after
	 * this, since progress holds progress_lock throughout. */
	pthread_mutex_lock(&ctx->progress_lock);
	for (uint32_t i = 0; i < ctx->n_qps; i++) {
		if (ctx->qps[i] == qp) {
			ctx->qps[i] = ctx->qps[--ctx->n_qps];
			break;
		}
	}
	ctx->qp_tab[qp->base.qpn % SOFT_MAX_QP] = NULL;
	qp->in_list = false;
	if (atomic_exchange(&qp->kick_pending, false))
		atomic_fetch_sub(&ctx->n_kick, 1);
	pthread_mutex_unlock(&ctx->progress_lock);

	if (qp->tp && qp->tp->qp_fini)
		qp->tp->qp_fini(qp);
	if (qp->connected && qp->tp == &soft_tcp_transport)
		atomic_fetch_sub(&ctx->n_tcp_qps, 1);
	/* Windows bound to the QP are invalidated (and waited for) while
	 * the QP's shared segment still exists. */
	soft_mw_unbind_qp(qp);
	for (uint32_t i = qp->sq_head; i != qp->sq_tail; i++) {
		struct soft_swqe *wqe = soft_sq_wqe(qp, i);

		if (wqe->opcode == TF_WR_BIND_MW &&
		    wqe->state == SOFT_WQE_POSTED)
			soft_mw_bind_cancel(qp, wqe);
	}
	soft_shm_qp_destroy(qp);
	soft_cq_clean((struct soft_cq *)qp->base.send_cq, &qp->base);
	if (qp->base.recv_cq != qp->base.send_cq)
		soft_cq_clean((struct soft_cq *)qp->base.recv_cq, &qp->base);
	qp_mem_put(qp);
	tf__free(qp);
	return 0;
}

int soft_qp_set_error(struct tf_qp *base)
{
	struct soft_qp *qp = soft_qp_of(base);

	soft_qp_lock(qp);
	soft_engine_qp_error(qp, TF_WC_WR_FLUSH_ERR);
	soft_qp_unlock(qp);
	return 0;
}

struct soft_qp *soft_ctx_qp(struct soft_ctx *ctx, uint32_t qpn)
{
	struct soft_qp *qp = ctx->qp_tab[qpn % SOFT_MAX_QP];

	return qp && qp->base.qpn == qpn ? qp : NULL;
}

/* ------------------------------------------------------------ posting */

static bool is_atomic(enum tf_wr_opcode op)
{
	return op == TF_WR_ATOMIC_FETCH_ADD || op == TF_WR_ATOMIC_CMP_SWP;
}

/* Check one WR and copy it into @wqe.  Returns 0 or -errno.  The WR is
 * the caller's memory and may be reused once the post returns, so
 * everything the engine needs later is copied, SGE lists included. */
static int fill_wqe(struct soft_qp *qp, const struct tf_send_wr *wr,
		    struct soft_swqe *wqe)
{
	uint64_t total = 0;
	uint32_t nsge;

	if ((unsigned)wr->opcode > TF_WR_LOCAL_INV || wr->num_sge < 0 ||
	    (uint32_t)wr->num_sge > qp->base.max_sge ||
	    (wr->num_sge && !wr->sg_list) ||
	    (wr->send_flags &
	     ~(unsigned)(TF_SEND_SIGNALED | TF_SEND_INLINE | TF_SEND_FENCE)))
		return -EINVAL;
	nsge = (uint32_t)wr->num_sge;
	for (uint32_t i = 0; i < nsge; i++)
		total += wr->sg_list[i].length;
	if (total > qp->ctx->base.cfg.soft_max_msg || total > UINT32_MAX)
		return -EINVAL;
	if (is_atomic(wr->opcode) &&
	    ((wr->wr.atomic.remote_addr & 7) || total != 8 ||
	     (wr->send_flags & TF_SEND_INLINE)))
		return -EINVAL;
	if ((wr->send_flags & TF_SEND_INLINE) &&
	    (total > qp->base.max_inline_data ||
	     !(wr->opcode <= TF_WR_RDMA_WRITE_WITH_IMM)))
		return -EINVAL;
	if (wr->opcode == TF_WR_BIND_MW &&
	    (!wr->wr.bind_mw.mw ||
	     wr->wr.bind_mw.mw->pd->ctx != &qp->ctx->base))
		return -EINVAL;

	wqe->wr_id = wr->wr_id;
	wqe->opcode = wr->opcode;
	wqe->send_flags = wr->send_flags;
	wqe->imm_data = wr->imm_data;
	wqe->invalidate_rkey = wr->invalidate_rkey;
	wqe->total_len = (uint32_t)total;
	wqe->inline_data = NULL;
	wqe->num_sge = 0;
	wqe->retries = 0;
	wqe->tp_state = 0;
	wqe->psn = 0;
	wqe->t_post_ns = 0;
	switch (wr->opcode) {
	case TF_WR_ATOMIC_FETCH_ADD:
	case TF_WR_ATOMIC_CMP_SWP:
		wqe->remote_addr = wr->wr.atomic.remote_addr;
		wqe->rkey = wr->wr.atomic.rkey;
		wqe->compare_add = wr->wr.atomic.compare_add;
		wqe->swap = wr->wr.atomic.swap;
		break;
	case TF_WR_BIND_MW:
		wqe->bind = *wr;
		wqe->bind.next = NULL;
		wqe->total_len = 0;
		break;
	case TF_WR_LOCAL_INV:
		wqe->total_len = 0;
		break;
	default:
		wqe->remote_addr = wr->wr.rdma.remote_addr;
		wqe->rkey = wr->wr.rdma.rkey;
		break;
	}
	if (wr->opcode == TF_WR_BIND_MW || wr->opcode == TF_WR_LOCAL_INV)
		return 0;
	if (wr->send_flags & TF_SEND_INLINE) {
		/* The payload is copied now; lkeys are not used (verbs). */
		uint8_t *dst = qp->sq_inline + (size_t)(wqe - qp->sq) *
						       qp->base.max_inline_data;

		for (uint32_t i = 0; i < nsge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			memcpy(dst,
			       (const void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			dst += wr->sg_list[i].length;
		}
		wqe->inline_data =
			qp->sq_inline +
			(size_t)(wqe - qp->sq) * qp->base.max_inline_data;
		return 0;
	}
	if (nsge)
		memcpy(wqe->sge, wr->sg_list, nsge * sizeof(struct tf_sge));
	wqe->num_sge = nsge;
	return 0;
}

/*
 * Queue the chain, then start what can start.  Requests are checked at
 * post time (malformed ones fail the post, as in verbs); the lkeys are
 * checked when a request starts, and fail its completion instead.  The
 * fast path of a WRITE on shm completes inside this call: no thread, no
 * system call, no allocation.  Returns the number of WRs queued (the
 * core counts them) or -errno.
 */
int soft_post_send(struct tf_qp *base, struct tf_send_wr *wr,
		   struct tf_send_wr **bad_wr_p)
{
	struct soft_qp *qp = soft_qp_of(base);
	uint32_t first = 0, posted = 0;
	int ret = 0;

	soft_qp_lock(qp);
	if (qp->base.state != TF_QPS_RTS && qp->base.state != TF_QPS_ERR) {
		ret = -ENOTCONN;
		goto out;
	}
	first = qp->sq_tail;
	for (; wr; wr = wr->next) {
		struct soft_swqe *wqe;

		if (qp->sq_tail - qp->sq_head >= qp->base.max_send_wr) {
			ret = -ENOMEM;
			break;
		}
		wqe = soft_sq_wqe(qp, qp->sq_tail);
		ret = fill_wqe(qp, wr, wqe);
		if (ret) {
			tf_log_debug(SOFT_SUBSYS,
				     "qp %#x: malformed work request "
				     "(opcode %d)",
				     qp->base.qpn, (int)wr->opcode);
			break;
		}
		if (wr->opcode == TF_WR_BIND_MW) {
			struct soft_mw *mw =
				(struct soft_mw *)wr->wr.bind_mw.mw;
			uint32_t key = soft_mw_reserve_key(qp, mw);

			if (!key) {
				ret = -ENOSPC;
				break;
			}
			/* tf_mw_rkey() gives the new key right away. */
			wqe->rkey = key;
			mw->base.rkey = key;
		}
		wqe->state = SOFT_WQE_POSTED;
		qp->sq_tail++;
	}
	posted = qp->sq_tail - first;
	/* In the error state work is accepted and flushed at once (verbs);
	 * the first WQE after a lost peer fails for it (err_owed). */
	if (qp->base.state == TF_QPS_ERR) {
		enum tf_wc_status st =
			qp->err_owed ? qp->err_owed : TF_WC_WR_FLUSH_ERR;

		flush_sq(qp, first, st);
		if (posted)
			qp->err_owed = 0;
	} else
		soft_engine_kick(qp);
out:
	soft_qp_unlock(qp);
	if (ret) {
		if (bad_wr_p)
			*bad_wr_p = wr;
		return ret;
	}
	/* At most the queue depth (a uint32_t bounded by QP_MAX_WR). */
	return (int)posted;
}

int soft_post_recv(struct tf_qp *base, struct tf_recv_wr *wr,
		   struct tf_recv_wr **bad_wr_p)
{
	struct soft_qp *qp = soft_qp_of(base);
	int ret = 0, posted = 0;

	soft_qp_lock(qp);
	for (; wr; wr = wr->next) {
		struct soft_rwqe *rwqe;
		uint64_t total = 0;

		if (wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > qp->base.max_sge ||
		    (wr->num_sge && !wr->sg_list)) {
			ret = -EINVAL;
			break;
		}
		if (qp->rq_tail - qp->rq_head >= qp->base.max_recv_wr) {
			ret = -ENOMEM;
			break;
		}
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total > UINT32_MAX) {
			ret = -EINVAL;
			break;
		}
		rwqe = soft_rq_wqe(qp, qp->rq_tail);
		rwqe->wr_id = wr->wr_id;
		rwqe->num_sge = (uint32_t)wr->num_sge;
		rwqe->total_len = (uint32_t)total;
		if (wr->num_sge)
			memcpy(rwqe->sge, wr->sg_list,
			       (size_t)wr->num_sge * sizeof(struct tf_sge));
		qp->rq_tail++;
		posted++;
	}
	if (qp->base.state == TF_QPS_ERR)
		flush_rq(qp);
	soft_qp_unlock(qp);
	if (ret) {
		if (bad_wr_p)
			*bad_wr_p = wr;
		return ret;
	}
	return posted;
}
