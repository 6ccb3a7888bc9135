/* SPDX-License-Identifier: MIT */
/*
 * conf_session_evicted: a client that keeps more connections than the
 * server does.  The server's node keeps one idle connection
 * (TF_NODE_PARAM_QP_CACHE 1), the client's up to four.  The client opens
 * three sessions at once and closes them: it keeps the three connections,
 * the server keeps the last and closes the two older ones.  The client
 * then opens three sessions at once again: the first takes the connection
 * both sides kept; the next find the two the server closed, see that
 * (the socket's end), drop them and make new connections.  Every session
 * opens; none fails with the reset of a connection the server dropped.
 */
#include "session_util.h"

#define N 3

static tf_node_t *node_cache(struct tf_pair *p, unsigned qp_cache)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_QP_CACHE,
			       .qp_cache = qp_cache};
	tf_node_t *node;

	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	st_stock_settle(node);
	return node;
}

static void server(struct tf_pair *p)
{
	tf_node_t *node = node_cache(p, 1);
	tf_session_t *s[N];
	tf_listener_t *l;

	CHECK_OK(st_listen(node, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++)
			s[i] = st_accept(l, 0);
		/* Closed in the client's order: the last one is kept. */
		for (int i = 0; i < N; i++) {
			CHECK(st_serve(s[i]) == TF_SESSION_PEER_CLOSED);
			tf_session_close(s[i]);
		}
		tf_test_sync(p);
	}
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

static void client(struct tf_pair *p)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_t *node = node_cache(p, 4);
	tf_session_t *s[N];
	tf_node_stats_t st;

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			int ret = tf_session_connect(node, st_host(), port,
						     NULL, &s[i]);

			CHECKF(ret == 0, "round %d, session %d: %s", round, i,
			       tf_strerror(ret));
		}
		CHECK(tf_session_reused(s[0]) == (round > 0));
		for (int i = 1; i < N; i++)
			CHECK(!tf_session_reused(s[i]));
		for (int i = 0; i < N; i++)
			tf_session_close(s[i]);
		/* The server has closed all three and kept one. */
		tf_test_sync(p);
	}
	st_print_conn_stats(node);
	CHECK_OK(tf_node_query_stats(node, &st));
	/* The two connections the server closed were tried and dropped. */
	CHECK(st.qp_new == 2 * N - 1 && st.qp_reused == 1);
	CHECK(st.qp_destroyed == N - 1 && st.connect_failures == 0);
	tf_node_destroy(node);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_evicted");
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	return tf_test_pair_end(&p);
}
