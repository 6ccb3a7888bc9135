/* SPDX-License-Identifier: MIT */
/*
 * conf_session_refuse: a server that refuses a session (it accepts with
 * TF_SESSION_DEFER_ESTABLISH and closes without establishing) is heard:
 * the client's tf_session_connect returns -ECONNREFUSED, also on a kept
 * connection, where the REJECT travels on the control QP, and the client
 * does not ask again on another connection (the server's application
 * would see the refused request a second time).
 *
 * Round 0 opens a connection and completes a session; round 1 is refused
 * on the kept connection; round 2 makes a new connection, which works.
 */
#include "session_util.h"

#define LEN 256

static void server_session(struct tf_pair *p, tf_listener_t *l)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_session_t *s = NULL;
	uint8_t *m;
	int b, x;

	CHECK_OK(tf_listener_accept(l, &sp, 4 * tf_test_timeout_ms(), &s));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK_OK(tf_session_establish(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
}

static void client_session(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_session_t *s;
	uint8_t *m;
	int b;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	CHECK_OK(tf_session_write(s, b, 0, 0, 0, LEN, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
	tf_session_close(s);
	tf_test_sync(p);
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_listener_t *l;
	tf_session_t *s = NULL;

	CHECK_OK(tf_listener_create(node, NULL, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	server_session(p, l);
	/* Round 1: refused, and asked only once. */
	CHECK_OK(tf_listener_accept(l, &sp, 4 * tf_test_timeout_ms(), &s));
	CHECK(tf_session_reused(s) == 1);
	tf_session_close(s);
	tf_test_sync(p);
	/* A second ask would have come before the client's sync; the
	 * client starts round 2 only after this look. */
	s = NULL;
	CHECK(tf_listener_accept(l, &sp, 0, &s) == -EAGAIN);
	tf_test_sync(p);
	/* Round 2: a new connection. */
	server_session(p, l);
	tf_listener_destroy(l);
}

static void client(struct tf_pair *p, tf_node_t *node)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_stats_t st;
	tf_session_t *s = NULL;
	int ret;

	client_session(p, node, port);
	/* The refusal is logged (a warning): expected here only. */
	ret = TOLERATED(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECKF(ret == -ECONNREFUSED, "refused session: %d (%s)", ret,
	       tf_strerror(ret));
	tf_test_sync(p);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.qp_new == 1, "%llu connections after the refusal",
	       (unsigned long long)st.qp_new);
	tf_test_sync(p);
	client_session(p, node, port);
	CHECK_OK(tf_node_query_stats(node, &st));
	/* The refused session's connection was not counted as reused. */
	CHECKF(st.qp_new == 2 && st.qp_reused == 0 && st.connect_failures == 1,
	       "%llu connections made, %llu reused, %llu failures",
	       (unsigned long long)st.qp_new, (unsigned long long)st.qp_reused,
	       (unsigned long long)st.connect_failures);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("conf_session_refuse");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		client(&p, node);
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
