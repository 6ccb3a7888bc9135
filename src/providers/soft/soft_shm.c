/* SPDX-License-Identifier: MIT */
/*
 * soft_shm.c - transport "shm" (RC between processes of one host): its
 * ops table, submit (a message goes to the peer's ring, a one-sided
 * operation is executed here) and the progress loop over the context's
 * QPs.  The design is described in soft_shm_int.h.
 */
#include <errno.h>

#include "soft_shm_int.h"

static int shm_submit(struct soft_qp *qp, struct soft_swqe *wqe)
{
	struct shm_qp *s = qp->tp_priv;
	enum tf_wc_status st;

	if (atomic_load_explicit(&s->peer->dead, memory_order_relaxed)) {
		soft_engine_send_done(qp, wqe, TF_WC_RETRY_EXC_ERR);
		return 0;
	}
	switch (wqe->opcode) {
	case TF_WR_SEND:
	case TF_WR_SEND_WITH_IMM:
	case TF_WR_SEND_WITH_INV:
		return soft_shm_ring_send(qp, s, wqe);
	default:
		break;
	}
	/* One-sided: RC ordering says earlier messages are placed first. */
	if (s->n_inflight)
		return -EAGAIN;
	st = soft_shm_one_sided(qp, s, wqe);
	/* WRITE_WITH_IMM: the immediate follows as a message, and the WQE
	 * completes on its acknowledgement. */
	if (st == TF_WC_SUCCESS && wqe->opcode == TF_WR_RDMA_WRITE_WITH_IMM)
		return soft_shm_ring_send(qp, s, wqe);
	soft_engine_send_done(qp, wqe, st);
	return 0;
}

/* Liveness costs a syscall per peer: every few ms only, and the clock is
 * read every 64 progress calls. */
static bool liveness_due(struct soft_ctx *ctx, struct shm_ctx *sc)
{
	return !(atomic_load_explicit(&ctx->tick, memory_order_relaxed) & 63) &&
	       tf__now_ns() >= atomic_load_explicit(&sc->next_check_ns,
						    memory_order_relaxed);
}

/*
 * The test every poll makes before taking any lock: an idle context with
 * nothing in flight costs a few loads of lines that stay in this core's
 * cache, which is what keeps a polling loop from slowing its peer.
 */
bool soft_shm_doorbell_unseen(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	return sc &&
	       atomic_load_explicit(&ctx->tpt_ctl->doorbell,
				    memory_order_seq_cst) !=
		       atomic_load_explicit(&sc->db_seen, memory_order_seq_cst);
}

bool soft_shm_need_progress(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = atomic_load_explicit(
		(void *_Atomic *)&ctx->shm_priv, memory_order_acquire);

	if (!sc)
		return false;
	return atomic_load_explicit(&ctx->tpt_ctl->doorbell,
				    memory_order_relaxed) !=
		       atomic_load_explicit(&sc->db_seen,
					    memory_order_relaxed) ||
	       atomic_load_explicit(&sc->any_pending, memory_order_relaxed) ||
	       liveness_due(ctx, sc);
}

static int shm_progress(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;
	bool check = false, pending = false;
	int n = 0;

	if (liveness_due(ctx, sc)) {
		atomic_store_explicit(&sc->next_check_ns,
				      tf__now_ns() + SHM_LIVENESS_NS,
				      memory_order_relaxed);
		check = true;
		if (atomic_load_explicit(&sc->n_idle, memory_order_relaxed))
			soft_shm_sweep_idle(ctx);
	}
	/* Read the doorbell before looking at the QPs, so that a ring
	 * after our look is never lost; clear the pending flag before the
	 * walk, which sets it again if needed (a post racing with us sets
	 * it after queueing). */
	atomic_store_explicit(&sc->db_seen,
			      atomic_load_explicit(&ctx->tpt_ctl->doorbell,
						   memory_order_acquire),
			      memory_order_relaxed);
	atomic_store_explicit(&sc->any_pending, false, memory_order_relaxed);
	/* Order the flag's clearing before our reads of the QPs (a store
	 * then loads: only a full fence does that). */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < ctx->n_qps; i++) {
		struct soft_qp *qp = ctx->qps[i];

		struct shm_qp *h;
		struct shm_seg *seg;

		if (SOFT_READ_ONCE(qp->tp) != &soft_shm_transport ||
		    !SOFT_READ_ONCE(qp->connected) ||
		    SOFT_READ_ONCE(qp->base.state) != TF_QPS_RTS)
			continue;
		/* Look before taking the lock: polling an idle QP must cost
		 * a few loads of lines that stay in this core's cache.  The
		 * reads race with the QP's owner; they are hints only and
		 * everything is read again under the lock. */
		h = __atomic_load_n(&qp->tp_priv, __ATOMIC_ACQUIRE);
		seg = own_seg(qp);
		if (!check && h && !READ_ONCE(h->n_inflight) &&
		    atomic_load_explicit(&seg->tail, memory_order_relaxed) ==
			    READ_ONCE(h->rx_head) &&
		    !atomic_load_explicit(&seg->peer_err, memory_order_relaxed))
			continue;
		if (!soft_qp_trylock(qp)) {
			pending = true;
			continue;
		}
		if (h) {
			n += soft_shm_qp_progress(qp, h, check);
			if (h->n_inflight || h->rnr_stalled)
				pending = true;
		}
		soft_qp_unlock(qp);
	}
	if (pending)
		atomic_store_explicit(&sc->any_pending, true,
				      memory_order_relaxed);
	return n;
}

const struct soft_transport_ops soft_shm_transport = {
	.name = "shm",
	.ctx_init = soft_shm_ctx_init,
	.ctx_fini = soft_shm_ctx_fini,
	.qp_addr = soft_shm_qp_addr,
	.connect = soft_shm_connect,
	.submit = shm_submit,
	.progress = shm_progress,
	.qp_fini = soft_shm_qp_fini,
};
