/* SPDX-License-Identifier: MIT */
/*
 * soft_cq.c - completion queues of the soft provider: a ring of struct
 * tf_wc filled by the engine (from any thread: the posting thread for
 * operations that complete at post time, a poller, the progress thread or
 * the waker for the rest) and an eventfd for blocking waits.
 *
 * tf_cq_fd is that eventfd, written by the producer of the first
 * completion after an arm.  Completions that remote events produce while
 * the application sleeps come from the waker (soft.c), which watches the
 * context's one wait set while any CQ is armed.  A CQ therefore costs one
 * file descriptor and no epoll nesting, however many there are.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "soft_int.h"

/* A word of tpt_ctl->cq_wake for @cq, with a new generation; none when
 * all are taken (its sleepers are then woken through the waker). */
static void wake_slot_get(struct soft_ctx *ctx, struct soft_cq *cq)
{
	cq->wake_slot = -1;
	pthread_mutex_lock(&ctx->lock);
	for (unsigned w = 0; w < SOFT_CQ_WAKE_SLOTS / 64; w++) {
		unsigned b;

		if (ctx->cq_slots[w] == UINT64_MAX)
			continue;
		b = (unsigned)__builtin_ctzll(~ctx->cq_slots[w]);
		ctx->cq_slots[w] |= 1ull << b;
		cq->wake_slot = (int)(w * 64 + b);
		/* Never 0: a word of 0 names no CQ. */
		if (++ctx->cq_wake_gen > UINT32_MAX >> 1)
			ctx->cq_wake_gen = 1;
		cq->wake_gen = ctx->cq_wake_gen;
		break;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (cq->wake_slot >= 0)
		atomic_store(&ctx->tpt_ctl->cq_wake[cq->wake_slot],
			     cq->wake_gen << 1);
}

static void wake_slot_put(struct soft_ctx *ctx, struct soft_cq *cq)
{
	if (cq->wake_slot < 0)
		return;
	atomic_store(&ctx->tpt_ctl->cq_wake[cq->wake_slot], 0);
	pthread_mutex_lock(&ctx->lock);
	ctx->cq_slots[cq->wake_slot / 64] &= ~(1ull << (cq->wake_slot % 64));
	pthread_mutex_unlock(&ctx->lock);
	cq->wake_slot = -1;
}

/* The arm is over (consumed by a completion, or dropped): peers no
 * longer find it in cq_wake. */
static void wake_slot_disarm(struct soft_ctx *ctx, struct soft_cq *cq)
{
	if (cq->wake_slot >= 0)
		atomic_store(&ctx->tpt_ctl->cq_wake[cq->wake_slot],
			     cq->wake_gen << 1);
}

int soft_cq_create(struct tf_context *base, uint32_t depth, struct tf_cq **cq_p)
{
	struct soft_cq *cq;
	int ret;

	cq = tf__calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->size = soft_pow2(depth);
	cq->ring = soft_cqmem_get(soft_ctx_of(base), cq->size);
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
	wake_slot_get(soft_ctx_of(base), cq);
	*cq_p = &cq->base;
	return 0;

err_ring:
	soft_cqmem_put(soft_ctx_of(base), cq->ring, cq->size);
err_free:
	tf__free(cq);
	return ret;
}

/* The last armed CQ of the context is no longer armed: peers need not
 * wake us any more.  Re-checked, since another CQ may arm meanwhile. */
static void disarm_ctx(struct soft_ctx *ctx)
{
	if (atomic_fetch_sub(&ctx->n_armed, 1) != 1)
		return;
	atomic_store(&ctx->tpt_ctl->armed, 0);
	if (atomic_load(&ctx->n_armed))
		atomic_store(&ctx->tpt_ctl->armed, 1);
}

int soft_cq_destroy(struct tf_cq *base)
{
	struct soft_cq *cq = (struct soft_cq *)base;

	if (atomic_exchange(&cq->armed, false))
		disarm_ctx(soft_ctx_of(base->ctx));
	wake_slot_put(soft_ctx_of(base->ctx), cq);
	close(cq->efd);
	pthread_spin_destroy(&cq->lock);
	soft_cqmem_put(soft_ctx_of(base->ctx), cq->ring, cq->size);
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
	bool wake = false;
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
		/* The arm flag is consumed by exactly one producer, which
		 * signals the fd once per arm, as ibv_req_notify_cq.  Read
		 * under the lock that soft_cq_arm sets it under: either
		 * the arm came first and is seen here, or this completion
		 * came first and the arm's caller, polling after it, finds
		 * it.  Outside the lock the flag could be read before the
		 * count's store was visible, and each side miss the other
		 * (store buffering): a completion neither signalled nor
		 * found, and its consumer asleep on the fd. */
		wake = atomic_load_explicit(&cq->armed, memory_order_relaxed) &&
		       atomic_exchange(&cq->armed, false);
	}
	pthread_spin_unlock(&cq->lock);
	if (wake) {
		uint64_t one = 1;

		wake_slot_disarm(soft_ctx_of(cq->base.ctx), cq);
		if (write(cq->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			tf_log_warn(SOFT_SUBSYS, "cq eventfd write: %m");
		disarm_ctx(soft_ctx_of(cq->base.ctx));
	}
	return ret;
}

/* Drop the completions of a QP being destroyed (as verbs providers clean
 * the CQ in destroy_qp): their qp pointer is about to dangle. */
void soft_cq_clean(struct soft_cq *cq, const struct tf_qp *qp)
{
	uint32_t mask = cq->size - 1, keep;

	/* head only moves under the lock: read it there. */
	pthread_spin_lock(&cq->lock);
	keep = cq->head;
	for (uint32_t i = cq->head; i != cq->tail; i++) {
		if (cq->ring[i & mask].qp == qp)
			continue;
		if (keep != i)
			cq->ring[keep & mask] = cq->ring[i & mask];
		keep++;
	}
	cq->tail = keep;
	atomic_store_explicit(&cq->count, cq->tail - cq->head,
			      memory_order_release);
	pthread_spin_unlock(&cq->lock);
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
	struct soft_ctx *ctx = soft_ctx_of(base->ctx);
	bool first, was_armed;
	uint64_t v;
	int ret;

	/* Consume the event already delivered, then arm.  The caller polls
	 * once more after this, which closes the window in which a peer saw
	 * no armed flag.  The context's wake-ups are the waker's to read. */
	if (read(cq->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
		ret = -errno;
		tf_log_error(SOFT_SUBSYS, "cq eventfd read: %m");
		return ret;
	}
	/* About to sleep: a peer we rang without waking anyone, and whose
	 * acknowledgement we may be waiting for, is woken now.  Before the
	 * arm is as good as after: an acknowledgement that comes before it
	 * is found by the caller's look once more. */
	if (ctx->shm_up)
		soft_shm_pay_owed(ctx);
	/* Under the CQ's lock, against soft_cq_push's look at the flag. */
	pthread_spin_lock(&cq->lock);
	was_armed = atomic_exchange(&cq->armed, true);
	pthread_spin_unlock(&cq->lock);
	if (was_armed) {
		/* Still armed, and its bit maybe taken by a peer that woke
		 * the sleeper directly: offer it again. */
		if (cq->wake_slot >= 0)
			atomic_fetch_or(&ctx->tpt_ctl->cq_wake[cq->wake_slot],
					1u);
		return 0;
	}
	first = atomic_fetch_add(&ctx->n_armed, 1) == 0;
	if (first)
		atomic_store(&ctx->tpt_ctl->armed, 1);
	ret = soft_waker_armed(ctx, first);
	/* No waker, no wake-up for remote completions: not armed. */
	if (ret && atomic_exchange(&cq->armed, false))
		disarm_ctx(ctx);
	/* Peers may now wake this CQ's sleeper themselves (after the
	 * context's flag: a peer that sees this bit saw that flag too).
	 * Sequentially consistent, as the doorbell a peer rings before it
	 * looks here: the caller's look once more, or the peer, sees the
	 * other's write. */
	if (!ret && cq->wake_slot >= 0)
		atomic_fetch_or(&ctx->tpt_ctl->cq_wake[cq->wake_slot], 1u);
	/* A doorbell rung before the arm (so without waking anyone) and
	 * not yet seen: the caller's look once more may make no progress
	 * (another thread, the waker itself, holds the progress lock and
	 * read the doorbell before it rang), and the waker would then
	 * sleep with the message unread.  Let it make one more pass. */
	if (!ret && ctx->shm_up && soft_shm_doorbell_unseen(ctx)) {
		uint64_t one = 1;

		if (write(ctx->waker_efd, &one, sizeof(one)) < 0 &&
		    errno != EAGAIN)
			tf_log_warn(SOFT_SUBSYS, "waker eventfd write: %m");
	}
	return ret;
}
