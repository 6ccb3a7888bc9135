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

/*
 * Look at one QP of the context: its inbound work (messages, the peer's
 * error flag), its acknowledgements, its peer's liveness when @check (the
 * liveness pass's number; 0: not a liveness pass).
 * Adds the QP to @keep when progress is to visit it again without
 * a doorbell (messages in flight, a stalled RNR, its lock was busy, or a
 * connect still under way).  Cheap for a QP with nothing to see.
 */
/* Which QPs to visit again: bit w of sum says keep[w] is in use. */
struct shm_keep {
	uint64_t sum;
	uint64_t bits[SOFT_MAX_QP / 64];
};

static void keep_qp(struct shm_keep *k, uint32_t qpn)
{
	uint32_t w = shm_bit_word(qpn);

	if (!(k->sum & (1ull << w))) {
		k->sum |= 1ull << w;
		k->bits[w] = 0;
	}
	k->bits[w] |= shm_bit_mask(qpn);
}

static int shm_visit(struct soft_qp *qp, uint64_t check, struct shm_keep *keep)
{
	uint32_t qpn = SOFT_READ_ONCE(qp->base.qpn);
	struct shm_qp *h;
	struct shm_seg *seg;
	int n = 0;

	if (SOFT_READ_ONCE(qp->tp) != &soft_shm_transport)
		return 0;
	/* Look before taking the lock: polling an idle QP must cost a few
	 * loads of lines that stay in this core's cache.  The reads race
	 * with the QP's owner; they are hints only and everything is read
	 * again under the lock. */
	h = __atomic_load_n(&qp->tp_priv, __ATOMIC_ACQUIRE);
	if (!h || !SOFT_READ_ONCE(qp->connected) ||
	    SOFT_READ_ONCE(qp->base.state) == TF_QPS_INIT) {
		/* Connecting (tp is reset if that fails): the peer may
		 * already send (its connect can return first), and its ring
		 * will not come again.  Look again until it is connected. */
		keep_qp(keep, qpn);
		return 0;
	}
	if (SOFT_READ_ONCE(qp->base.state) != TF_QPS_RTS)
		return 0;
	seg = own_seg(qp);
	if (!check && !READ_ONCE(h->n_inflight) &&
	    atomic_load_explicit(&seg->tail, memory_order_relaxed) ==
		    READ_ONCE(h->rx_head) &&
	    !atomic_load_explicit(&seg->peer_err, memory_order_relaxed))
		return 0;
	if (!soft_qp_trylock(qp)) {
		keep_qp(keep, qpn);
		return 0;
	}
	n += soft_shm_qp_progress(qp, h, check);
	if (h->n_inflight || h->rnr_stalled)
		keep_qp(keep, qpn);
	soft_qp_unlock(qp);
	return n;
}

/*
 * Progress over the context's QPs.  Only those that may have something
 * to see are visited: the QPs a peer flagged in tpt_ctl->ready (it sets
 * the bit, then rings the doorbell) and our own with work in flight
 * (sc->pend); every QP only for the liveness check, every few ms.  So an
 * idle connection costs nothing per pass, and a peer holding hundreds of
 * them does not slow the others (a hostile peer that sets every ready bit
 * buys at most one cheap look per QP, what every pass cost before).
 *
 * Nothing is lost, because each side writes its flag before the word the
 * other side reads first:
 *  - ready: the peer publishes its message (ring tail, peer_err, rnr_go),
 *    sets the bit, then increments the doorbell (both seq_cst RMWs).  We
 *    read the doorbell (acquire) into db_seen, then read and exchange the
 *    ready words.  If our read saw the increment (or a later one: the
 *    increments are a release sequence), the bit was set before it and
 *    the exchange takes it (or an earlier pass already did, after the
 *    message was published: bits are cleared only here, under
 *    progress_lock).  If it did not, db_seen stays behind the doorbell
 *    and the next poll comes back here (soft_shm_need_progress,
 *    soft_shm_doorbell_unseen; the wake-up and armed logic are the
 *    doorbell's, unchanged).  So a pass whose doorbell did not move skips
 *    the ready words: a bit set without a ring yet is taken on the pass
 *    its ring causes (or earlier).
 *  - pend: a post queues its message, sets the QP's bit in pend[w], then
 *    bit w of any_pending (release).  We exchange any_pending with 0
 *    (acq_rel) and take the pend words it names: if we read that post's
 *    bit, its pend bit is visible to us; if its fetch_or comes after our
 *    exchange, its bit stands in any_pending and the next poll comes back
 *    here.  A QP that still has work after its visit (or whose lock was
 *    busy) goes back into pend, and into any_pending.
 * The QP table changes only under progress_lock, which the caller holds:
 * a bit whose slot is empty is dropped; one whose slot holds another QP
 * than the peer meant (destroyed, its number reused) costs a cheap look.
 */
static int shm_progress(struct soft_ctx *ctx)
{
	struct shm_ctx *sc = ctx->shm_priv;
	struct shm_keep keep;
	uint64_t db, db_prev, pending;
	uint64_t check = 0;
	bool rung;
	int n = 0;

	if (liveness_due(ctx, sc)) {
		atomic_store_explicit(&sc->next_check_ns,
				      tf__now_ns() + SHM_LIVENESS_NS,
				      memory_order_relaxed);
		check = ++sc->check_pass;
		if (atomic_load_explicit(&sc->n_idle, memory_order_relaxed))
			soft_shm_sweep_idle(ctx);
	}
	/* Read the doorbell before looking at the QPs, so that a ring
	 * after our look is never lost; clear the pending words before
	 * taking the pending QPs, which set them again if needed (a post
	 * racing with us sets its word after its bit). */
	db = atomic_load_explicit(&ctx->tpt_ctl->doorbell,
				  memory_order_acquire);
	db_prev = atomic_load_explicit(&sc->db_seen, memory_order_relaxed);
	rung = db != db_prev;
	atomic_store_explicit(&sc->db_seen, db, memory_order_relaxed);
	pending = atomic_exchange_explicit(&sc->any_pending, 0,
					   memory_order_acq_rel);
	keep.sum = 0;
	/* Order our stores (db_seen, the pending words) before our reads
	 * of the bits and the QPs (stores then loads: only a full fence
	 * does that). */
	atomic_thread_fence(memory_order_seq_cst);
	if (check) {
		/* Every QP: the bits are taken only not to visit twice. */
		for (uint32_t w = 0; w < SOFT_MAX_QP / 64; w++) {
			atomic_exchange_explicit(&ctx->tpt_ctl->ready[w], 0,
						 memory_order_acq_rel);
			atomic_exchange_explicit(&sc->pend[w], 0,
						 memory_order_acq_rel);
		}
		for (uint32_t i = 0; i < ctx->n_qps; i++)
			n += shm_visit(ctx->qps[i], check, &keep);
		goto out;
	}
	for (uint32_t w = 0; w < SOFT_MAX_QP / 64; w++) {
		uint64_t bits = 0;

		if (rung && atomic_load_explicit(&ctx->tpt_ctl->ready[w],
						 memory_order_relaxed))
			bits = atomic_exchange_explicit(&ctx->tpt_ctl->ready[w],
							0,
							memory_order_acq_rel);
		if (pending & (1ull << w))
			bits |= atomic_exchange_explicit(&sc->pend[w], 0,
							 memory_order_acq_rel);
		while (bits) {
			struct soft_qp *qp =
				ctx->qp_tab[w * 64 +
					    (uint32_t)__builtin_ctzll(bits)];

			bits &= bits - 1;
			if (qp)
				n += shm_visit(qp, 0, &keep);
		}
	}
out:
	for (uint64_t sum = keep.sum; sum; sum &= sum - 1) {
		uint32_t w = (uint32_t)__builtin_ctzll(sum);

		atomic_fetch_or_explicit(&sc->pend[w], keep.bits[w],
					 memory_order_relaxed);
	}
	if (keep.sum)
		atomic_fetch_or_explicit(&sc->any_pending, keep.sum,
					 memory_order_release);
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
