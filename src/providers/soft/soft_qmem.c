/* SPDX-License-Identifier: MIT */
/*
 * soft_qmem.c - the queue memory of destroyed QPs and CQs, kept for new
 * ones of the same sizes (TOLLFREE_SOFT_QUEUE_CACHE sets of each).
 *
 * A QP's queues are allocated whole at create time: with the session
 * layer's depths, 512 send WQEs with their SGEs and inline buffers and
 * 512 receive WQEs, about 300 KiB, and a CQ's ring of 1024 entries, 48
 * KiB.  A connection that comes and goes freed and allocated all of it:
 * malloc gave the top of its heap back to the system and took it again,
 * and the new pages faulted in while calloc zeroed them.  Per connection
 * (tollfree-bench crr --modes pool+mw/new) that was 6-8 us of a stock
 * entry's making and as much of a connection's destroy, on each side.
 *
 * Reused memory is not cleared: a queue's entries are read only between
 * its head and tail, each written whole by the post or the completion
 * that put it there, and a QP's WQEs keep pointing into their own SGE
 * array, which moves with them.  The memory is the process's own (a
 * peer's one-sided access goes through the shm segment and the TPT,
 * never here), so what a former queue held reaches nobody.
 *
 * The sets kept are counted in tf_context_stats_t.queue_cache_bytes; they
 * are freed when the context closes.
 */
#include <errno.h>
#include <string.h>

#include "soft_int.h"

static size_t qp_bytes(const struct soft_qmem *m)
{
	return (size_t)m->sq_size * (sizeof(*m->sq) +
				     (size_t)m->max_sge * sizeof(*m->sq_sge) +
				     m->max_inline) +
	       (size_t)m->rq_size * (sizeof(*m->rq) +
				     (size_t)m->max_sge * sizeof(*m->rq_sge));
}

static void qmem_free(struct soft_qmem *m)
{
	tf__free(m->sq_inline);
	tf__free(m->rq_sge);
	tf__free(m->sq_sge);
	tf__free(m->rq);
	tf__free(m->sq);
	memset(m, 0, sizeof(*m));
}

void soft_qmem_init(struct soft_ctx *ctx)
{
	uint32_t cap = ctx->base.cfg.soft_queue_cache;

	if (cap > SOFT_QMEM_MAX)
		cap = SOFT_QMEM_MAX;
	ctx->qmem_cap = cap;
	pthread_mutex_init(&ctx->qmem_lock, NULL);
}

void soft_qmem_fini(struct soft_ctx *ctx)
{
	for (uint32_t i = 0; i < ctx->n_qmem; i++)
		qmem_free(&ctx->qmem[i]);
	for (uint32_t i = 0; i < ctx->n_cqmem; i++)
		tf__free(ctx->cqmem[i].ring);
	ctx->n_qmem = ctx->n_cqmem = 0;
	atomic_store_explicit(&ctx->base.queue_cache_bytes, 0,
			      memory_order_relaxed);
	pthread_mutex_destroy(&ctx->qmem_lock);
}

int soft_qmem_get(struct soft_ctx *ctx, struct soft_qmem *m)
{
	pthread_mutex_lock(&ctx->qmem_lock);
	for (uint32_t i = ctx->n_qmem; i-- > 0;) {
		struct soft_qmem *k = &ctx->qmem[i];

		if (k->sq_size != m->sq_size || k->rq_size != m->rq_size ||
		    k->max_sge != m->max_sge || k->max_inline != m->max_inline)
			continue;
		*m = *k;
		*k = ctx->qmem[--ctx->n_qmem];
		atomic_fetch_sub_explicit(&ctx->base.queue_cache_bytes,
					  qp_bytes(m), memory_order_relaxed);
		pthread_mutex_unlock(&ctx->qmem_lock);
		return 0;
	}
	pthread_mutex_unlock(&ctx->qmem_lock);

	m->sq = tf__calloc(m->sq_size, sizeof(*m->sq));
	m->rq = tf__calloc(m->rq_size, sizeof(*m->rq));
	m->sq_sge =
		tf__calloc((size_t)m->sq_size * m->max_sge, sizeof(*m->sq_sge));
	m->rq_sge =
		tf__calloc((size_t)m->rq_size * m->max_sge, sizeof(*m->rq_sge));
	if (m->max_inline)
		m->sq_inline = tf__malloc((size_t)m->sq_size * m->max_inline);
	if (!m->sq || !m->rq || !m->sq_sge || !m->rq_sge ||
	    (m->max_inline && !m->sq_inline)) {
		qmem_free(m);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->sq_size; i++)
		m->sq[i].sge = &m->sq_sge[(size_t)i * m->max_sge];
	for (uint32_t i = 0; i < m->rq_size; i++)
		m->rq[i].sge = &m->rq_sge[(size_t)i * m->max_sge];
	return 0;
}

void soft_qmem_put(struct soft_ctx *ctx, struct soft_qmem *m)
{
	struct soft_qmem old = {0};

	if (!m->sq)
		return;
	pthread_mutex_lock(&ctx->qmem_lock);
	if (ctx->qmem_cap) {
		/* Full: the oldest goes. */
		if (ctx->n_qmem == ctx->qmem_cap) {
			old = ctx->qmem[0];
			memmove(ctx->qmem, ctx->qmem + 1,
				(ctx->n_qmem - 1) * sizeof(ctx->qmem[0]));
			ctx->n_qmem--;
			atomic_fetch_sub_explicit(&ctx->base.queue_cache_bytes,
						  qp_bytes(&old),
						  memory_order_relaxed);
		}
		ctx->qmem[ctx->n_qmem++] = *m;
		atomic_fetch_add_explicit(&ctx->base.queue_cache_bytes,
					  qp_bytes(m), memory_order_relaxed);
	} else {
		old = *m;
	}
	pthread_mutex_unlock(&ctx->qmem_lock);
	memset(m, 0, sizeof(*m));
	if (old.sq)
		qmem_free(&old);
}

struct tf_wc *soft_cqmem_get(struct soft_ctx *ctx, uint32_t size)
{
	pthread_mutex_lock(&ctx->qmem_lock);
	for (uint32_t i = ctx->n_cqmem; i-- > 0;) {
		struct soft_cqmem *k = &ctx->cqmem[i];
		struct tf_wc *ring = k->ring;

		if (k->size != size)
			continue;
		*k = ctx->cqmem[--ctx->n_cqmem];
		atomic_fetch_sub_explicit(&ctx->base.queue_cache_bytes,
					  (size_t)size * sizeof(*ring),
					  memory_order_relaxed);
		pthread_mutex_unlock(&ctx->qmem_lock);
		return ring;
	}
	pthread_mutex_unlock(&ctx->qmem_lock);
	return tf__calloc(size, sizeof(struct tf_wc));
}

void soft_cqmem_put(struct soft_ctx *ctx, struct tf_wc *ring, uint32_t size)
{
	struct soft_cqmem old = {0};

	if (!ring)
		return;
	pthread_mutex_lock(&ctx->qmem_lock);
	if (ctx->qmem_cap) {
		if (ctx->n_cqmem == ctx->qmem_cap) {
			old = ctx->cqmem[0];
			memmove(ctx->cqmem, ctx->cqmem + 1,
				(ctx->n_cqmem - 1) * sizeof(ctx->cqmem[0]));
			ctx->n_cqmem--;
			atomic_fetch_sub_explicit(&ctx->base.queue_cache_bytes,
						  (size_t)old.size *
							  sizeof(*ring),
						  memory_order_relaxed);
		}
		ctx->cqmem[ctx->n_cqmem++] =
			(struct soft_cqmem){.ring = ring, .size = size};
		atomic_fetch_add_explicit(&ctx->base.queue_cache_bytes,
					  (size_t)size * sizeof(*ring),
					  memory_order_relaxed);
		ring = NULL;
	}
	pthread_mutex_unlock(&ctx->qmem_lock);
	tf__free(old.ring);
	tf__free(ring);
}
