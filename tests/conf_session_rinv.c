/* SPDX-License-Identifier: MIT */
/*
 * conf_session_rinv: remote invalidation (TF_SESSION_REMOTE_INV).  The
 * client asks for it at connect and sends nothing that takes a receive
 * at the server; a server whose exposure 0 is a window agrees in its
 * ACCEPT, and the client's close then revokes that window with a
 * SEND_WITH_INV ahead of its CLOSE, so that the server skips its own
 * invalidation.
 *
 *  1. The flag refuses what would take the server's receive: SEND,
 *     SEND_WITH_IMM, WRITE_WITH_IMM (-EPERM).
 *  2. N sessions on one kept connection, each writing a pattern into the
 *     server's exposure 0 and closing: the server sees the data, its
 *     windows are revoked (remote_inv, or remote_inv_missed where its
 *     revoke came before the SEND_WITH_INV: then it ended the
 *     connection), and the client counted N SEND_WITH_INVs.
 *  3. The last of those sessions' key is dead: the next session posts a
 *     WRITE with it straight on the QP and gets a remote access error;
 *     the server's memory is unchanged.
 *  4. A server that closes first revokes the window itself and ends the
 *     connection (remote_inv_missed); the client sends no SEND_WITH_INV
 *     and does not keep the connection; the next session works.
 *  5. A client that asked and then sends a plain empty SEND on the QP
 *     instead: the server's session breaks (the receive took the wrong
 *     form), its window is revoked all the same, nothing leaks.
 *  6. As 2, five sessions, with a pre-shared key (the flags are sealed).
 *
 * Skipped where the server cannot agree: no memory windows, or no
 * SEND_WITH_INV (siw).  It sets TOLLFREE_SESSION_REMOTE_INV=y unless the
 * environment has it (auto agrees only on the soft provider).
 */
#include <stdlib.h>

#include "session_util.h"

#define LEN 4096
#define N   50
#define PSK "conf_session_rinv key"

enum { ST_OPEN = 1, ST_DONE };

static uint64_t n_sessions(struct tf_pair *p)
{
	return strcmp(tf_context_provider(p->ctx), "soft") ? 10 : N;
}

static tf_session_t *rinv_connect(tf_node_t *node, uint16_t port)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_REMOTE_INV};
	tf_session_t *s;
	int ret = tf_session_connect(node, st_host(), port, &sp, &s);

	CHECKF(ret == 0, "connect: %s", tf_strerror(ret));
	return s;
}

/* Server: a session with one exposure of a LEN slice holding @fill. */
static tf_session_t *serve_exposed(tf_listener_t *l, uint32_t fill,
				   uint8_t **a_p)
{
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	int b, x;

	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)a_p));
	tf_test_fill(*a_p, LEN, fill);
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK(x == 0);
	CHECK_OK(tf_session_establish(s));
	return s;
}

static tf_node_stats_t stats(tf_node_t *node)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	return st;
}

/* 2, server: @n sessions that the client writes into and closes. */
static void server_round(tf_node_t *node, tf_listener_t *l, uint64_t n)
{
	tf_node_stats_t st0 = stats(node), st;
	tf_session_t *s;
	uint8_t *a;

	for (uint64_t i = 0; i < n; i++) {
		s = serve_exposed(l, 0, &a);
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		CHECK_FILL(a, LEN, 100 + (uint32_t)i);
		tf_session_close(s);
	}
	st = stats(node);
	tf_test_info("server%s: %llu windows revoked by the client's "
		     "SEND_WITH_INV, %llu by the server after missing it",
		     st.auth ? " (pre-shared key)" : "",
		     (unsigned long long)(st.remote_inv - st0.remote_inv),
		     (unsigned long long)(st.remote_inv_missed -
					  st0.remote_inv_missed));
	CHECK(st.remote_inv - st0.remote_inv +
		      (st.remote_inv_missed - st0.remote_inv_missed) ==
	      n);
	CHECK(st.remote_inv > st0.remote_inv);
	CHECK(st.windows_live == 0);
}

/* 2, client: @n sessions, each writing a pattern into the server's
 * exposure 0; the last one's key in @old. */
static void client_round(tf_node_t *node, uint16_t port, uint64_t n,
			 tf_exposure_info_t *old)
{
	tf_node_stats_t st0 = stats(node), st;
	tf_session_t *s;
	uint8_t *m;
	int b;

	for (uint64_t i = 0; i < n; i++) {
		s = rinv_connect(node, port);
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		if (i == 0) {
			CHECK(tf_session_send(s, b, 0, 8, 1) == -EPERM);
			CHECK(tf_session_send_imm(s, b, 0, 8, 5, 1) == -EPERM);
			CHECK(tf_session_write_imm(s, b, 0, 0, 0, 8, 5, 1) ==
			      -EPERM);
		}
		tf_test_fill(m, LEN, 100 + (uint32_t)i);
		CHECK_OK(tf_session_write(s, b, 0, 0, 0, LEN, 2));
		st_expect(s, 2, TF_WC_SUCCESS, NULL);
		CHECK_OK(tf_session_peer_exposure(s, 0, old));
		tf_session_close(s);
	}
	st = stats(node);
	CHECK(st.remote_inv - st0.remote_inv == n);
}

static void server(struct tf_pair *p, tf_node_t *node, tf_listener_t *l)
{
	tf_node_stats_t st0, st;
	tf_session_t *s;
	uint8_t *a;

	server_round(node, l, n_sessions(p));

	/* 3: the client writes with the last key, then closes. */
	s = serve_exposed(l, 7, &a);
	CHECK(st_serve(s) != 0);
	CHECK_FILL(a, LEN, 7);
	tf_session_close(s);

	/* 4. */
	st0 = stats(node);
	s = serve_exposed(l, 8, &a);
	/* Once the client has connected to this side's QPs, which this
	 * close destroys. */
	CHECK(tf_test_recv_u64(p) == ST_OPEN);
	tf_session_close(s);
	st = stats(node);
	CHECK(st.remote_inv_missed == st0.remote_inv_missed + 1);
	CHECK(st.remote_inv == st0.remote_inv);
	CHECK(tf_test_recv_u64(p) == ST_DONE);
	s = serve_exposed(l, 9, &a);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);

	/* 5. */
	st0 = stats(node);
	tf_test_tolerate_log(true);
	s = serve_exposed(l, 10, &a);
	CHECK(st_serve(s) == TF_SESSION_BROKEN);
	CHECK_FILL(a, LEN, 10);
	tf_session_close(s);
	tf_test_tolerate_log(false);
	st = stats(node);
	CHECK(st.remote_inv == st0.remote_inv && st.windows_live == 0 &&
	      st.slices_rented == 0);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_exposure_info_t old;
	tf_node_stats_t st0, st;
	tf_session_t *s;

	/* 1 and 2. */
	client_round(node, port, n_sessions(p), &old);

	/* 3: the old key, on the QP that it was bound to if the server
	 * kept the connection (else on a new one: refused all the same). */
	{
		struct tf_sge sge = {.length = 64};
		struct tf_send_wr wr = {.wr_id = 77,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE,
					.send_flags = TF_SEND_SIGNALED};
		tf_mr_t *lmr;
		uint8_t *lbuf;

		CHECK_OK(tf_mem_alloc(p->ctx, LEN, (void **)&lbuf));
		CHECK_OK(tf_mr_reg(tf_node_pd(node), lbuf, LEN,
				   TF_ACCESS_LOCAL_WRITE, &lmr));
		memset(lbuf, 0xee, 64);
		sge.addr = (uintptr_t)lbuf;
		sge.lkey = tf_mr_lkey(lmr);
		wr.wr.rdma.remote_addr = old.addr;
		wr.wr.rdma.rkey = old.rkey;
		s = rinv_connect(node, port);
		tf_test_tolerate_log(true);
		CHECK_OK(tf_post_send(tf_session_qp(s), &wr, NULL));
		st_expect(s, 77, TF_WC_REM_ACCESS_ERR, NULL);
		tf_session_close(s);
		tf_test_tolerate_log(false);
		CHECK_OK(tf_mr_dereg(lmr));
		tf_mem_free(p->ctx, lbuf, LEN);
	}

	/* 4: the server closes first. */
	s = rinv_connect(node, port);
	tf_test_send_u64(p, ST_OPEN);
	st0 = stats(node);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	st = stats(node);
	CHECK(st.remote_inv == st0.remote_inv);
	CHECK(st.qp_idle == 0);
	tf_test_send_u64(p, ST_DONE);
	s = rinv_connect(node, port);
	CHECK(!tf_session_reused(s));
	tf_session_close(s);

	/* 5: a plain SEND where the SEND_WITH_INV was due. */
	{
		struct tf_send_wr wr = {.wr_id = 78,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		s = rinv_connect(node, port);
		tf_test_tolerate_log(true);
		CHECK_OK(tf_post_send(tf_session_qp(s), &wr, NULL));
		st_expect(s, 78, TF_WC_SUCCESS, NULL);
		CHECK(st_serve(s) != 0);
		tf_session_close(s);
		tf_test_tolerate_log(false);
	}
}

int main(void)
{
	struct tf_pair p;
	tf_caps_t caps;
	tf_node_stats_t st;
	tf_node_t *node;

	/* The server's side of it, where auto would not agree (verbs: rxe
	 * does not check a SEND_WITH_INV's QP); a setting given wins.
	 * Before anything reads the configuration. */
	setenv("TOLLFREE_SESSION_REMOTE_INV", "y", 0);
	tf_test_begin("conf_session_rinv");
	tf_test_pair_open(&p);
	CHECK_OK(tf_context_query_caps(p.ctx, &caps));
	if (!(caps.flags & TF_CAP_SEND_WITH_INV) ||
	    !(caps.flags & TF_CAP_MW_TYPE2))
		tf_test_skip("remote invalidation needs TF_CAP_SEND_WITH_INV "
			     "and TF_CAP_MW_TYPE2");
	node = st_node(&p, 1, NULL, 0);
	st = stats(node);
	if (!st.use_mw)
		tf_test_skip("no memory windows");
	st_run_node(&p, node, server, client);
	st = stats(node);
	CHECK(st.windows_live == 0 && st.slices_rented == 0);
	tf_node_destroy(node);

	/* 6. With a pre-shared key (the flags travel sealed): the first
	 * session on the socket, the next ones on the control QP. */
	node = st_node(&p, 1, PSK, sizeof(PSK) - 1);
	if (p.side == TF_SIDE_B) {
		tf_listener_t *l;

		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(&p, tf_listener_port(l));
		server_round(node, l, 5);
		tf_listener_destroy(l);
	} else {
		tf_exposure_info_t old;

		client_round(node, (uint16_t)tf_test_recv_u64(&p), 5, &old);
	}
	tf_test_sync(&p);
	st = stats(node);
	CHECK(st.windows_live == 0 && st.slices_rented == 0);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
