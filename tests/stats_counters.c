/* SPDX-License-Identifier: MIT */
/*
 * stats_counters: a context's per-operation counters (send_posted,
 * recv_posted, cqe_ok, cqe_err, bytes_out) live in its QPs and CQs, where
 * only their owners write them, and tf_context_query_stats sums them (soft
 * provider over shm, one process).
 *  - Two threads, each with its own QP pair and CQ, post and poll while
 *    the main thread queries the context: no counter ever goes back, and
 *    at the end the context's equal what was done and the QPs' sums.
 *  - Destroying a QP pair and its CQ leaves the context's counters as
 *    they were (the totals of destroyed objects are kept).
 *  - A chain that fails in the middle counts the WRs before the bad one.
 *  - A QP with separate send and receive CQs, moved to the error state:
 *    its flushes are counted on the QP (flushed, per queue) and in the
 *    context (cqe_err).
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "tf_test.h"

#define N_ITERS	  20000
#define WRITE_LEN 1024
#define SEND_LEN  256

static tf_context_t *ctx;
static tf_pd_t *pd;

struct lane {
	tf_cq_t *cq;
	tf_qp_t *a, *b; /* a writes and sends to b */
	uint8_t *buf;	/* [0, 4K): source, [4K, 8K): target */
	tf_mr_t *mr;
	pthread_t thread;
};

static tf_qp_t *new_qp(tf_cq_t *scq, tf_cq_t *rcq)
{
	tf_qp_params_t qpp = {.send_cq = scq, .recv_cq = rcq};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	return qp;
}

static void lane_open(struct lane *l)
{
	CHECK_OK(tf_cq_create(ctx, NULL, &l->cq));
	l->a = new_qp(l->cq, l->cq);
	l->b = new_qp(l->cq, l->cq);
	tf_test_qp_connect_local(l->a, l->b);
	CHECK_OK(tf_mem_alloc(ctx, 8192, (void **)&l->buf));
	CHECK_OK(tf_mr_reg(pd, l->buf, 8192,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &l->mr));
}

static void lane_close(struct lane *l)
{
	CHECK_OK(tf_qp_destroy(l->a));
	CHECK_OK(tf_qp_destroy(l->b));
	CHECK_OK(tf_cq_destroy(l->cq));
	CHECK_OK(tf_mr_dereg(l->mr));
	tf_mem_free(ctx, l->buf, 8192);
}

/* Wait for @n successful completions on @cq. */
static void reap(tf_cq_t *cq, int n)
{
	struct tf_wc wc[4];

	while (n > 0) {
		int r = tf_cq_wait(cq, n < 4 ? n : 4, wc, tf_test_timeout_ms());

		CHECKF(r > 0, "no completion (%d)", r);
		for (int i = 0; i < r; i++)
			CHECKF(wc[i].status == TF_WC_SUCCESS, "status %s",
			       tf_wc_status_str(wc[i].status));
		n -= r;
	}
}

/* One iteration: a receive on b, then a chain of a WRITE and a SEND on a;
 * three completions. */
static void *lane_run(void *arg)
{
	struct lane *l = arg;
	uint32_t lkey = tf_mr_lkey(l->mr);

	for (int i = 0; i < N_ITERS; i++) {
		struct tf_sge rs = {(uintptr_t)l->buf + 4096, SEND_LEN, lkey};
		struct tf_recv_wr rwr = {
			.wr_id = 1, .sg_list = &rs, .num_sge = 1};
		struct tf_sge ws = {(uintptr_t)l->buf, WRITE_LEN, lkey};
		struct tf_sge ss = {(uintptr_t)l->buf, SEND_LEN, lkey};
		struct tf_send_wr swr = {.wr_id = 3,
					 .sg_list = &ss,
					 .num_sge = 1,
					 .opcode = TF_WR_SEND,
					 .send_flags = TF_SEND_SIGNALED};
		struct tf_send_wr wwr = {
			.wr_id = 2,
			.next = &swr,
			.sg_list = &ws,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {(uintptr_t)l->buf + 4096 + 2048,
				    tf_mr_rkey(l->mr)}};

		CHECK_OK(tf_post_recv(l->b, &rwr, NULL));
		CHECK_OK(tf_post_send(l->a, &wwr, NULL));
		reap(l->cq, 3);
	}
	return NULL;
}

#define EACH_CTR(_X) \
	_X(send_posted) _X(recv_posted) _X(cqe_ok) _X(cqe_err) _X(bytes_out)

static void check_growing(const tf_context_stats_t *prev,
			  const tf_context_stats_t *now)
{
#define GROWS(_f)                                                      \
	CHECKF(now->_f >= prev->_f, #_f " went back: %llu after %llu", \
	       (unsigned long long)now->_f, (unsigned long long)prev->_f);
	EACH_CTR(GROWS)
#undef GROWS
}

static void check_same(const tf_context_stats_t *a, const tf_context_stats_t *b)
{
#define SAME(_f)                                        \
	CHECKF(a->_f == b->_f, #_f ": %llu, then %llu", \
	       (unsigned long long)a->_f, (unsigned long long)b->_f);
	EACH_CTR(SAME)
#undef SAME
}

static void concurrent(void)
{
	struct lane lanes[2];
	tf_context_stats_t s0, prev, now;
	tf_qp_stats_t qa, qb;
	uint64_t queries = 0;

	for (int i = 0; i < 2; i++)
		lane_open(&lanes[i]);
	CHECK_OK(tf_context_query_stats(ctx, &s0));
	prev = s0;
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_create(&lanes[i].thread, NULL, lane_run,
				      &lanes[i]));
	/* Query while both lanes post and poll (a lane that fails exits). */
	for (;;) {
		CHECK_OK(tf_context_query_stats(ctx, &now));
		check_growing(&prev, &now);
		prev = now;
		queries++;
		if (now.cqe_ok - s0.cqe_ok == 2ull * 3 * N_ITERS)
			break;
		usleep(20);
	}
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_join(lanes[i].thread, NULL));
	tf_test_info("%llu queries while posting", (unsigned long long)queries);

	CHECK_OK(tf_context_query_stats(ctx, &now));
	check_growing(&prev, &now);
	CHECK(now.send_posted - s0.send_posted == 2ull * 2 * N_ITERS);
	CHECK(now.recv_posted - s0.recv_posted == 2ull * N_ITERS);
	CHECK(now.cqe_ok - s0.cqe_ok == 2ull * 3 * N_ITERS);
	CHECK(now.cqe_err == s0.cqe_err);
	CHECK(now.bytes_out - s0.bytes_out ==
	      2ull * N_ITERS * (WRITE_LEN + SEND_LEN));
	for (int i = 0; i < 2; i++) {
		CHECK_OK(tf_qp_query_stats(lanes[i].a, &qa));
		CHECK_OK(tf_qp_query_stats(lanes[i].b, &qb));
		CHECK(qa.send_posted == 2ull * N_ITERS &&
		      qa.send_completed == 2ull * N_ITERS);
		CHECK(qa.bytes_out ==
		      (uint64_t)N_ITERS * (WRITE_LEN + SEND_LEN));
		CHECK(qb.recv_posted == N_ITERS &&
		      qb.recv_completed == N_ITERS);
		CHECK(qb.bytes_in == (uint64_t)N_ITERS * SEND_LEN);
		CHECK(!qa.errors && !qa.flushed && !qb.errors && !qb.flushed);
	}

	/* What destroyed objects counted stays in the context. */
	lane_close(&lanes[1]);
	CHECK_OK(tf_context_query_stats(ctx, &prev));
	check_same(&now, &prev);
	lane_close(&lanes[0]);
	CHECK_OK(tf_context_query_stats(ctx, &prev));
	check_same(&now, &prev);
}

/* A chain whose second WR is malformed: the first is posted and counted,
 * the post fails at the second. */
static void failed_chains(void)
{
	struct lane l;
	tf_context_stats_t s0, s1;
	tf_qp_stats_t qa, qb;
	uint32_t lkey;

	lane_open(&l);
	lkey = tf_mr_lkey(l.mr);
	CHECK_OK(tf_context_query_stats(ctx, &s0));
	{
		struct tf_sge ws = {(uintptr_t)l.buf, 64, lkey};
		struct tf_send_wr w3 = {
			.wr_id = 3,
			.sg_list = &ws,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.wr.rdma = {(uintptr_t)l.buf + 4096, tf_mr_rkey(l.mr)}};
		struct tf_send_wr w2 = w3, w1 = w3, *bad = NULL;

		w2.wr_id = 2;
		w2.num_sge = 1000; /* above max_sge */
		w2.next = &w3;
		w1.wr_id = 1;
		w1.send_flags = TF_SEND_SIGNALED;
		w1.next = &w2;
		CHECK_ERR(tf_post_send(l.a, &w1, &bad), -EINVAL);
		CHECK(bad == &w2);
		reap(l.cq, 1);
	}
	{
		struct tf_sge rs = {(uintptr_t)l.buf + 4096, 64, lkey};
		struct tf_recv_wr r2 = {
			.wr_id = 2, .sg_list = &rs, .num_sge = 1000};
		struct tf_recv_wr r1 = {
			.wr_id = 1, .next = &r2, .sg_list = &rs, .num_sge = 1};
		struct tf_recv_wr *bad = NULL;

		CHECK_ERR(tf_post_recv(l.b, &r1, &bad), -EINVAL);
		CHECK(bad == &r2);
	}
	{
		/* Consume the receive that was posted. */
		struct tf_sge ss = {(uintptr_t)l.buf, 64, lkey};
		struct tf_send_wr swr = {.wr_id = 4,
					 .sg_list = &ss,
					 .num_sge = 1,
					 .opcode = TF_WR_SEND,
					 .send_flags = TF_SEND_SIGNALED};
		struct tf_send_wr *bad = &swr;

		CHECK_OK(tf_post_send(l.a, &swr, &bad));
		CHECK(bad == NULL);
		reap(l.cq, 2);
	}
	CHECK_OK(tf_qp_query_stats(l.a, &qa));
	CHECK_OK(tf_qp_query_stats(l.b, &qb));
	CHECKF(qa.send_posted == 2, "send_posted %llu",
	       (unsigned long long)qa.send_posted);
	CHECKF(qb.recv_posted == 1, "recv_posted %llu",
	       (unsigned long long)qb.recv_posted);
	CHECK_OK(tf_context_query_stats(ctx, &s1));
	CHECK(s1.send_posted - s0.send_posted == 2);
	CHECK(s1.recv_posted - s0.recv_posted == 1);
	CHECK(s1.cqe_ok - s0.cqe_ok == 3);
	CHECK(s1.bytes_out - s0.bytes_out == 64 + 64);
	lane_close(&l);
}

/* Flushes on a QP whose queues complete on two CQs. */
static void flushes(void)
{
	tf_cq_t *scq, *rcq;
	tf_qp_t *c, *d;
	uint8_t *buf;
	tf_mr_t *mr;
	tf_context_stats_t s0, s1;
	tf_qp_stats_t qs;
	struct tf_wc wc;

	CHECK_OK(tf_cq_create(ctx, NULL, &scq));
	CHECK_OK(tf_cq_create(ctx, NULL, &rcq));
	c = new_qp(scq, rcq);
	d = new_qp(scq, scq);
	tf_test_qp_connect_local(c, d);
	CHECK_OK(tf_mem_alloc(ctx, 4096, (void **)&buf));
	CHECK_OK(tf_mr_reg(pd, buf, 4096, TF_ACCESS_LOCAL_WRITE, &mr));
	CHECK_OK(tf_context_query_stats(ctx, &s0));
	CHECK_OK(tf_qp_set_error(c));
	{
		struct tf_sge sge = {(uintptr_t)buf, 64, tf_mr_lkey(mr)};
		struct tf_recv_wr rwr = {
			.wr_id = 1, .sg_list = &sge, .num_sge = 1};
		struct tf_send_wr swr = {.wr_id = 2,
					 .sg_list = &sge,
					 .num_sge = 1,
					 .opcode = TF_WR_SEND,
					 .send_flags = TF_SEND_SIGNALED};

		CHECK_OK(tf_post_recv(c, &rwr, NULL));
		CHECK_OK(tf_post_send(c, &swr, NULL));
	}
	CHECK(tf_cq_wait(rcq, 1, &wc, tf_test_timeout_ms()) == 1);
	CHECK(wc.status == TF_WC_WR_FLUSH_ERR && wc.wr_id == 1);
	CHECK(tf_cq_wait(scq, 1, &wc, tf_test_timeout_ms()) == 1);
	CHECK(wc.status == TF_WC_WR_FLUSH_ERR && wc.wr_id == 2);
	CHECK_OK(tf_qp_query_stats(c, &qs));
	CHECK(qs.flushed == 2 && qs.errors == 0);
	CHECK(qs.send_completed == 1 && qs.recv_completed == 1);
	CHECK_OK(tf_context_query_stats(ctx, &s1));
	CHECK(s1.cqe_err - s0.cqe_err == 2 && s1.cqe_ok == s0.cqe_ok);
	CHECK(s1.bytes_out == s0.bytes_out);

	CHECK_OK(tf_qp_destroy(c));
	CHECK_OK(tf_qp_destroy(d));
	CHECK_OK(tf_cq_destroy(scq));
	CHECK_OK(tf_cq_destroy(rcq));
	CHECK_OK(tf_context_query_stats(ctx, &s0));
	check_same(&s1, &s0);
	CHECK_OK(tf_mr_dereg(mr));
	tf_mem_free(ctx, buf, 4096);
}

int main(void)
{
	tf_context_params_t cp = {
		.field_mask =
			TF_CONTEXT_PARAM_PROVIDER | TF_CONTEXT_PARAM_TRANSPORT,
		.provider = "soft",
		.transport = "shm",
	};

	tf_test_begin("stats_counters");
	CHECK_OK(tf_context_open(&cp, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	concurrent();
	failed_chains();
	flushes();
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}
