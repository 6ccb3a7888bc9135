/* SPDX-License-Identifier: MIT */
/*
 * conf_session_revoke: after a session closes, a peer that kept the old
 * address and key gets a remote access error, and the memory is
 * unchanged, including when the pool handed it to the next session.
 *
 * Each attempt: session 1 on a new connection; the server exposes a slice
 * filled with pattern 2i (read, write, atomic); the client READs it (the
 * key works) and keeps address and key; both close (the server revokes).
 * Session 2 takes the kept connection (same QP pair: type-2 windows are
 * bound to a QP, so only this QP could ever use the old key); the server
 * rents a slice (usually the same memory), fills it with pattern 2i+1 and
 * exposes it with a new key.  The client then posts ONE real access with
 * the old key straight on the QP: READ, WRITE, FETCH_ADD or CMP_SWP in
 * turn.  It must complete with TF_WC_REM_ACCESS_ERR (the access breaks
 * the QP, so every attempt starts on a fresh one), and the server checks
 * that session 2's slice still holds pattern 2i+1.  Only these single
 * attempts are counted: no flushed work request counts as an attempt.
 *
 * Also: the window keys of consecutive sessions do not follow a constant
 * step, and no key repeats between consecutive sessions.
 *
 * TF_TEST_REVOKE_ATTEMPTS overrides the number of attempts (10000 on the
 * soft provider, 200 elsewhere).
 */
#include <stdlib.h>
#include <time.h>

#include "session_util.h"

#define LEN 4096

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* On the verbs provider (rxe in an emulated guest, where a session
 * takes ~100 ms) the default is 200, so that the test fits the guest's
 * per-test limit; the environment overrides either default. */
static int attempts(struct tf_pair *p)
{
	const char *e = getenv("TF_TEST_REVOKE_ATTEMPTS");

	if (e)
		return atoi(e);
	return strcmp(tf_context_provider(p->ctx), "soft") ? 200 : 10000;
}

static void server(struct tf_pair *p, tf_node_t *node, int n)
{
	tf_listener_t *l;
	unsigned same = 0;

	CHECK_OK(st_listen(node, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (int i = 0; i < n; i++) {
		tf_session_t *s;
		uint8_t *a1, *a2;
		int b, x, st;

		s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		CHECK(!tf_session_reused(s));
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&a1));
		tf_test_fill(a1, LEN, 2 * (uint32_t)i);
		CHECK_OK(tf_session_expose(s, b, 0, LEN,
					   TF_ACCESS_REMOTE_READ |
						   TF_ACCESS_REMOTE_WRITE |
						   TF_ACCESS_REMOTE_ATOMIC,
					   &x));
		CHECK_OK(tf_session_establish(s));
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		tf_session_close(s);

		s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		if (!tf_session_reused(s))
			st_print_conn_stats(node);
		CHECKF(tf_session_reused(s), "attempt %d: not reused", i);
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&a2));
		same += a1 == a2;
		tf_test_fill(a2, LEN, 2 * (uint32_t)i + 1);
		CHECK_OK(tf_session_expose(s, b, 0, LEN,
					   TF_ACCESS_REMOTE_READ |
						   TF_ACCESS_REMOTE_WRITE |
						   TF_ACCESS_REMOTE_ATOMIC,
					   &x));
		CHECK_OK(tf_session_establish(s));
		st = st_serve(s);
		CHECKF(st == TF_SESSION_BROKEN || st == TF_SESSION_PEER_CLOSED,
		       "state %d", st);
		CHECK_FILL(a2, LEN, 2 * (uint32_t)i + 1);
		tf_session_close(s);
	}
	tf_test_info("server: slice of session 2 was session 1's memory in "
		     "%u of %d attempts",
		     same, n);
	tf_listener_destroy(l);
}

static void client(struct tf_pair *p, tf_node_t *node, int n)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	uint32_t *keys = calloc((size_t)n, sizeof(*keys));
	unsigned denied[4] = {0}, deltas = 0;
	uint8_t *lbuf;
	tf_mr_t *lmr;
	double t0 = 0;
	struct tf_wc wc;

	CHECK(keys);
	CHECK_OK(tf_mem_alloc(p->ctx, LEN, (void **)&lbuf));
	CHECK_OK(tf_mr_reg(tf_node_pd(node), lbuf, LEN, TF_ACCESS_LOCAL_WRITE,
			   &lmr));
	for (int i = 0; i < n; i++) {
		enum tf_wr_opcode ops[4] = {TF_WR_RDMA_READ, TF_WR_RDMA_WRITE,
					    TF_WR_ATOMIC_FETCH_ADD,
					    TF_WR_ATOMIC_CMP_SWP};
		struct tf_sge sge = {.addr = (uintptr_t)lbuf,
				     .length = 64,
				     .lkey = tf_mr_lkey(lmr)};
		struct tf_send_wr wr = {.wr_id = 1000 + (uint64_t)i,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = ops[i % 4],
					.send_flags = TF_SEND_SIGNALED};
		tf_exposure_info_t old;
		tf_session_t *s;
		uint8_t *m;
		int b, ret;

		CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
		CHECK_OK(tf_session_peer_exposure(s, 0, &old));
		keys[i] = old.rkey;
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		CHECK_OK(tf_session_read(s, b, 0, 0, 0, LEN, 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
		CHECK_FILL(m, LEN, 2 * (uint32_t)i);
		tf_session_close(s);

		ret = tf_session_connect(node, st_host(), port, NULL, &s);
		if (ret || !tf_session_reused(s))
			st_print_conn_stats(node);
		CHECKF(!ret, "attempt %d: second connect: %s", i,
		       tf_strerror(ret));
		CHECKF(tf_session_reused(s), "attempt %d: not reused", i);
		if (ops[i % 4] == TF_WR_ATOMIC_FETCH_ADD ||
		    ops[i % 4] == TF_WR_ATOMIC_CMP_SWP) {
			sge.length = 8;
			wr.wr.atomic.remote_addr = old.addr;
			wr.wr.atomic.rkey = old.rkey;
			wr.wr.atomic.compare_add = 1;
			wr.wr.atomic.swap = 2;
			/* Compare with what is there, so that a swap
			 * that got through would change the memory. */
			for (int k = 0; k < 8; k++)
				((uint8_t *)&wr.wr.atomic.compare_add)[k] =
					tf_test_pattern((size_t)k,
							2 * (uint32_t)i + 1);
			if (ops[i % 4] == TF_WR_ATOMIC_FETCH_ADD)
				wr.wr.atomic.compare_add = 1;
		} else {
			wr.wr.rdma.remote_addr = old.addr;
			wr.wr.rdma.rkey = old.rkey;
			memset(lbuf, 0xee, 64);
		}
		if (i == 0)
			t0 = now_s();
		CHECK_OK(tf_post_send(tf_session_qp(s), &wr, NULL));
		st_expect(s, wr.wr_id, TF_WC_REM_ACCESS_ERR, &wc);
		denied[i % 4]++;
		if (ops[i % 4] == TF_WR_RDMA_READ)
			CHECK_BYTES(lbuf, 64, 0xee);
		CHECK(tf_session_state(s) == TF_SESSION_BROKEN);
		tf_session_close(s);
		/* A step that differs from the previous step. */
		if (i > 1 && keys[i] - keys[i - 1] != keys[i - 1] - keys[i - 2])
			deltas++;
		if (i > 0)
			CHECKF(keys[i] != keys[i - 1],
			       "consecutive sessions got key 0x%x", keys[i]);
	}
	tf_test_info("%d of %d attempts denied (READ %u, WRITE %u, FETCH_ADD "
		     "%u, CMP_SWP %u) in %.1f s",
		     n, n, denied[0], denied[1], denied[2], denied[3],
		     now_s() - t0);
	/* Even an 8-bit random key byte (verbs) repeats a step only about
	 * once in 256 sessions; a counter would repeat it every time. */
	tf_test_info("key step changed in %u of %d consecutive sessions",
		     deltas, n - 2);
	if (n > 2)
		CHECKF(deltas >= (unsigned)(n - 2) * 9 / 10,
		       "window keys are predictable: the step changed in "
		       "only %u of %d sessions",
		       deltas, n - 2);
	CHECK_OK(tf_mr_dereg(lmr));
	tf_mem_free(p->ctx, lbuf, LEN);
	free(keys);
}

int main(void)
{
	struct tf_pair p;
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_USE_MW |
					     TF_NODE_PARAM_QP_CACHE,
			       .use_mw = 1,
			       .qp_cache = 4};
	tf_node_stats_t st;
	tf_node_t *node;
	int n;

	tf_test_begin("conf_session_revoke");
	tf_test_pair_open(&p);
	n = attempts(&p);
	/* Each attempt breaks a QP on purpose; the warnings that the
	 * provider may log for it are expected. */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_node_create(p.ctx, &np, &node));
	CHECK_OK(tf_node_query_stats(node, &st));
	if (!st.use_mw)
		tf_test_skip("no memory windows: see conf_session_basic for "
			     "the registration fallback");
	if (p.side == TF_SIDE_B)
		server(&p, node, n);
	else
		client(&p, node, n);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECK(st.windows_live == 0 && st.slices_rented == 0);
	if (p.side == TF_SIDE_B)
		CHECK(st.windows_revoked == 2 * (uint64_t)n);
	tf_test_sync(&p);
	tf_node_destroy(node);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
