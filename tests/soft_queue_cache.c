/* SPDX-License-Identifier: MIT */
/*
 * soft_queue_cache: the soft provider keeps the queue memory of destroyed
 * queue pairs and completion queues for new ones of the same sizes
 * (TOLLFREE_SOFT_QUEUE_CACHE), not cleared, and that is invisible to the
 * data path.  Two contexts A and B of this process, per round:
 *  - each makes a CQ and a queue pair on it; from the second round on
 *    they take the memory the round before left (queue_cache_bytes goes
 *    down when they are made, up when they are destroyed);
 *  - SENDs from A to B, inline and gathered from two SGEs into receives
 *    scattered over two, their number different each round, so that the
 *    slots of a round held other work requests the round before: every
 *    byte and completion is checked;
 *  - a queue pair of other sizes takes nothing kept.
 * At most TOLLFREE_SOFT_QUEUE_CACHE sets of each kind are kept, and with
 * 0 none (in a child: settings are read once per process).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_util.h"

#define ROUNDS	 4
#define BUFSZ	 4096
#define BOUND_MS 20000

struct side {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq0; /* ft_shm_side_open's, unused */
	tf_mr_t *mr;
	uint8_t buf[BUFSZ];
};

static uint64_t cache_bytes(const struct side *s)
{
	tf_context_stats_t st;

	CHECK_OK(tf_context_query_stats(s->ctx, &st));
	return st.queue_cache_bytes;
}

static tf_cq_t *new_cq(struct side *s)
{
	tf_cq_t *cq;

	CHECK_OK(tf_cq_create(s->ctx, NULL, &cq));
	return cq;
}

static tf_qp_t *new_qp(struct side *s, tf_cq_t *cq, uint32_t depth)
{
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_MAX_SEND_WR |
					    TF_QP_PARAM_MAX_RECV_WR,
			      .send_cq = cq,
			      .recv_cq = cq,
			      .max_send_wr = depth,
			      .max_recv_wr = depth};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(s->pd, &qpp, &qp));
	return qp;
}

static void wait_wc(tf_cq_t *cq, struct side *s, struct side *o,
		    struct tf_wc *wc)
{
	ft_shm_wait_wc(cq, s->ctx, o->ctx, wc, BOUND_MS);
}

/* The payload of message @i of round @r. */
static uint8_t pat(uint32_t r, uint32_t i, uint32_t j)
{
	return (uint8_t)(r * 71 + i * 13 + j * 7 + 1);
}

/*
 * @n SENDs of 96 bytes from A to B, all posted before any completes:
 * even ones inline, odd ones gathered from two SGEs; each lands in a
 * receive of its own scattered over two SGEs.
 */
static void sends(struct side *a, tf_cq_t *ca, tf_qp_t *qa, struct side *b,
		  tf_cq_t *cb, tf_qp_t *qb, uint32_t r, uint32_t n)
{
	const uint32_t len = 96;

	memset(b->buf, 0, BUFSZ);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *dst = b->buf + i * 128;
		struct tf_sge rs[2] = {{.addr = (uintptr_t)dst,
					.length = 40,
					.lkey = tf_mr_lkey(b->mr)},
				       {.addr = (uintptr_t)dst + 40,
					.length = 88,
					.lkey = tf_mr_lkey(b->mr)}};
		struct tf_recv_wr rwr = {
			.wr_id = 1000 * r + i, .sg_list = rs, .num_sge = 2};

		CHECK_OK(tf_post_recv(qb, &rwr, NULL));
	}
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *src = a->buf + i * 128;
		struct tf_sge ss[2] = {{.addr = (uintptr_t)src,
					.length = 50,
					.lkey = tf_mr_lkey(a->mr)},
				       {.addr = (uintptr_t)src + 50,
					.length = len - 50,
					.lkey = tf_mr_lkey(a->mr)}};
		struct tf_send_wr swr = {.wr_id = 1000 * r + i,
					 .sg_list = ss,
					 .num_sge = i % 2 ? 2 : 1,
					 .opcode = TF_WR_SEND,
					 .send_flags =
						 TF_SEND_SIGNALED |
						 (i % 2 ? 0 : TF_SEND_INLINE)};

		for (uint32_t j = 0; j < len; j++)
			src[j] = pat(r, i, j);
		if (!(i % 2))
			ss[0].length = len;
		CHECK_OK(tf_post_send(qa, &swr, NULL));
		/* Inline: copied at post, so the buffer may change. */
		if (!(i % 2))
			memset(src, 0xee, len);
	}
	for (uint32_t i = 0; i < n; i++) {
		struct tf_wc wc;

		wait_wc(ca, a, b, &wc);
		CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 1000 * r + i,
		       "round %u send %u: %s", r, i, tf_test_wc_str(&wc));
		wait_wc(cb, b, a, &wc);
		CHECKF(wc.status == TF_WC_SUCCESS && wc.wr_id == 1000 * r + i &&
			       wc.byte_len == len,
		       "round %u recv %u: %s", r, i, tf_test_wc_str(&wc));
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < 128; j++) {
			uint8_t want = j < len ? pat(r, i, j) : 0;

			CHECKF(b->buf[i * 128 + j] == want,
			       "round %u message %u byte %u: %#x, not %#x", r,
			       i, j, b->buf[i * 128 + j], want);
		}
}

/* With TOLLFREE_SOFT_QUEUE_CACHE=0: nothing kept. */
static bool zero_keeps_none(void)
{
	struct side a = {0};
	tf_cq_t *cq;
	tf_qp_t *qp;
	bool none;

	ft_shm_side_open(&a.ctx, &a.pd, &a.cq0, a.buf, BUFSZ, &a.mr);
	cq = new_cq(&a);
	qp = new_qp(&a, cq, 32);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_cq_destroy(cq));
	none = cache_bytes(&a) == 0;
	ft_shm_side_close(a.ctx, a.pd, a.cq0, a.mr);
	return none;
}

int main(void)
{
	/* SENDs per round, a different count each, so that a round's slots
	 * held other work requests the round before. */
	static const uint32_t nmsg[ROUNDS] = {30, 3, 17, 8};
	struct side a = {0}, b = {0};
	uint64_t kept = 0;

	tf_test_begin("soft_queue_cache");
	/* The settings are read once per process: the case of 0 runs in a
	 * child forked before any. */
	{
		pid_t pid = fork();
		int st;

		CHECK(pid >= 0);
		if (!pid) {
			setenv("TOLLFREE_SOFT_QUEUE_CACHE", "0", 1);
			_exit(zero_keeps_none() ? 0 : 1);
		}
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && !WEXITSTATUS(st),
		       "with TOLLFREE_SOFT_QUEUE_CACHE=0 memory was kept");
	}
	setenv("TOLLFREE_SOFT_QUEUE_CACHE", "2", 1);
	ft_shm_side_open(&a.ctx, &a.pd, &a.cq0, a.buf, BUFSZ, &a.mr);
	ft_shm_side_open(&b.ctx, &b.pd, &b.cq0, b.buf, BUFSZ, &b.mr);
	CHECK(cache_bytes(&a) == 0);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		tf_cq_t *ca = new_cq(&a), *cb = new_cq(&b);
		tf_qp_t *qa = new_qp(&a, ca, 32), *qb = new_qp(&b, cb, 32);

		/* What the round before left was taken. */
		CHECKF(cache_bytes(&a) < kept || !r,
		       "round %u: A kept %llu B, then %llu after creating", r,
		       (unsigned long long)kept,
		       (unsigned long long)cache_bytes(&a));
		if (r)
			CHECK(cache_bytes(&a) == 0);
		tf_test_qp_connect_local(qa, qb);
		sends(&a, ca, qa, &b, cb, qb, r, nmsg[r]);
		CHECK_OK(tf_qp_destroy(qa));
		CHECK_OK(tf_qp_destroy(qb));
		CHECK_OK(tf_cq_destroy(ca));
		CHECK_OK(tf_cq_destroy(cb));
		kept = cache_bytes(&a);
		CHECKF(kept > 0, "round %u: nothing kept", r);
		CHECK(cache_bytes(&b) == kept);
	}
	/* Other sizes take nothing kept, and the third set of a kind is
	 * not kept (the cap is 2). */
	{
		tf_cq_t *cq = new_cq(&a);
		tf_qp_t *q[3];
		uint64_t one;

		CHECK(cache_bytes(&a) < kept); /* the CQ ring was taken */
		kept = cache_bytes(&a);
		q[0] = new_qp(&a, cq, 64);
		CHECK(cache_bytes(&a) == kept);
		q[1] = new_qp(&a, cq, 32); /* takes the kept one */
		q[2] = new_qp(&a, cq, 32);
		CHECK(cache_bytes(&a) < kept);
		kept = cache_bytes(&a);
		CHECK_OK(tf_qp_destroy(q[1]));
		one = cache_bytes(&a) - kept;
		CHECK(one > 0);
		CHECK_OK(tf_qp_destroy(q[2]));
		CHECK(cache_bytes(&a) == kept + 2 * one);
		CHECK_OK(tf_qp_destroy(q[0]));
		/* The 64-deep set is kept, the oldest 32-deep one went. */
		CHECK(cache_bytes(&a) > kept + 2 * one);
		CHECK(cache_bytes(&a) < kept + 4 * one);
		CHECK_OK(tf_cq_destroy(cq));
	}
	ft_shm_side_close(a.ctx, a.pd, a.cq0, a.mr);
	ft_shm_side_close(b.ctx, b.pd, b.cq0, b.mr);

	return tf_test_end();
}
