/* SPDX-License-Identifier: MIT */
/*
 * soft_cq.c - completion queues of the soft provider: a ring of struct
 * tf_wc filled by the engine (from any thread: the posting thread for
 * operations that complete at post time, a poller or the progress thread
 * for the rest) and an eventfd for blocking waits.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "soft_int.h"

int soft_cq_create(struct tf_context *ctx, uint32_t depth, struct tf_cq **cq_p)
{
	struct soft_cq *cq;
	int ret;

	(void)ctx;
	cq = tf__calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->size = soft_pow2(depth);
	cq->ring = tf__calloc(cq->size, sizeof(*cq->ring));
	if (!cq->ring) {
		ret = -ENOMEM;
		goto err_free;
	}
	cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cq->efd < 0) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "cq: eventfd: %m");
		goto err_ring;
	}
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->base.depth = depth;
	*cq_p = &cq->base;
	return 0;

err_ring:
	tf__free(cq->ring);
err_free:
	tf__free(cq);
	return ret;
}

int soft_cq_destroy(struct tf_cq *base)
{
	struct soft_cq *cq = (struct soft_cq *)base;

	close(cq->efd);
	pthread_spin_destroy(&cq->lock);
	tf__free(cq->ring);
	tf__free(cq);
	return 0;
}

/*
 * Add one completion.  A full CQ is an overrun as in verbs: the entry is
 * lost and the condition is logged once; the caller carries on, since the
 * QP state machine must not depend on the consumer's polling.
 */
int soft_cq_push(struct soft_cq *cq, const struct tf_wc *wc)
{
	int ret = 0;

	pthread_spin_lock(&cq->lock);
	if (cq->tail - cq->head >= cq->base.depth) {
		if (!cq->overflow)
			tf_log_error(SOFT_SUBSYS,
				     "cq %p overrun (depth %u): completion of "
				     "wr_id %llu lost",
				     (void *)cq, cq->base.depth,
				     (unsigned long long)wc->wr_id);
		cq->overflow = true;
		ret = -EOVERFLOW;
	} else {
		cq->ring[cq->tail & (cq->size - 1)] = *wc;
		cq->tail++;
		atomic_store_explicit(&cq->count, cq->tail - cq->head,
				      memory_order_release);
	}
	pthread_spin_unlock(&cq->lock);
	/* The arm flag is consumed by exactly one producer, which signals
	 * the fd once per arm, as ibv_req_notify_cq. */
	if (!ret && atomic_load_explicit(&cq->armed, memory_order_relaxed) &&
	    atomic_exchange(&cq->armed, false)) {
		uint64_t one = 1;

		if (write(cq->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			tf_log_warn(SOFT_SUBSYS, "cq eventfd write: %m");
	}
	return ret;
}

int soft_cq_poll(struct tf_cq *base, int n, struct tf_wc *wc)
{
	struct soft_cq *cq = (struct soft_cq *)base;
	int got = 0;

	soft_progress(base->ctx);
	/* Cheap check first, so that an empty poll takes no lock. */
	if (!atomic_load_explicit(&cq->count, memory_order_acquire))
		return 0;
	pthread_spin_lock(&cq->lock);
	while (got < n && cq->head != cq->tail) {
		wc[got++] = cq->ring[cq->head & (cq->size - 1)];
		cq->head++;
	}
	atomic_store_explicit(&cq->count, cq->tail - cq->head,
			      memory_order_relaxed);
	pthread_spin_unlock(&cq->lock);
	return got;
}

int soft_cq_fd(struct tf_cq *base)
{
	return ((struct soft_cq *)base)->efd;
}

int soft_cq_arm(struct tf_cq *base)
{
	struct soft_cq *cq = (struct soft_cq *)base;
	uint64_t v;

	/* Consume events already delivered, then arm. */
	if (read(cq->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
		int ret = -errno;

		tf_log_error(SOFT_SUBSYS, "cq eventfd read: %m");
		return ret;
	}
	atomic_store(&cq->armed, true);
	return 0;
}
