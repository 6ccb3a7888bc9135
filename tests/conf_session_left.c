/* SPDX-License-Identifier: MIT */
/*
 * conf_session_left: a server whose client closed a session and its
 * connection (TF_SESSION_NO_REUSE: CLOSE, then the socket's end) ends the
 * connection in tf_session_close, without keeping it until a later accept
 * finds the end; a client that keeps its connection keeps it on both
 * sides, and its next session takes it.
 *  1. The client opens a session with TF_SESSION_NO_REUSE, writes into the
 *     server's exposure and closes.  Once the client said so (its socket
 *     is closed), the server serves the session to its end and closes it:
 *     the server's node has destroyed the connection, before any further
 *     call on the listener; the data is there.
 *  2. The client opens a session of the default kind and closes it; the
 *     server closes its side: the connection is kept (not destroyed).
 *  3. The client's next session takes the kept connection.
 */
#include <unistd.h>

#include "session_util.h"

#define LEN 4096u

/* The server's connections so far: @made, of which @destroyed ended. */
static void check_conns(tf_node_t *node, uint64_t made, uint64_t destroyed,
			const char *when)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.qp_new == made && st.qp_destroyed == destroyed,
	       "after a client that %s: %llu made, %llu destroyed", when,
	       (unsigned long long)st.qp_new,
	       (unsigned long long)st.qp_destroyed);
}

static void server(struct tf_pair *p)
{
	tf_node_t *node = st_node(p, -1, NULL, 0);
	tf_listener_t *l;
	tf_session_t *s;
	uint8_t *m;
	int b, x;

	CHECK_OK(st_listen(node, &l));
	tf_test_send_u64(p, tf_listener_port(l));

	/* 1: the client leaves with its session. */
	s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	memset(m, 0, LEN);
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK_OK(tf_session_establish(s));
	tf_test_sync(p); /* the client has closed */
	/* From another machine its FIN and the test channel's message take
	 * two connections over one link: give the FIN a moment. */
	if (tf_test_peer_mode())
		usleep(50000);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	for (unsigned i = 0; i < LEN; i++)
		CHECKF(m[i] == (uint8_t)(i * 7 + 1), "byte %u: %#x", i, m[i]);
	tf_session_close(s);
	check_conns(node, 1, 1, "left");

	/* 2: the client keeps its connection. */
	s = st_accept(l, 0);
	tf_test_sync(p); /* the client has closed its session */
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	check_conns(node, 2, 1, "kept it");
	tf_test_sync(p);

	/* 3: its next session on the kept connection. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
	st_print_conn_stats(node);
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

static void client(struct tf_pair *p)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_t *node = st_node(p, -1, NULL, 0);
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_NO_REUSE};
	tf_session_t *s;
	uint8_t *m;
	struct tf_wc wc;
	int b, ret;

	ret = tf_session_connect(node, st_host(), port, &sp, &s);
	CHECKF(ret == 0, "connect: %s", tf_strerror(ret));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	for (unsigned i = 0; i < LEN; i++)
		m[i] = (uint8_t)(i * 7 + 1);
	CHECK_OK(tf_session_write(s, b, 0, 0, 0, LEN, 1));
	CHECK(tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms()) == 1);
	CHECK(wc.status == TF_WC_SUCCESS);
	tf_session_close(s);
	tf_test_sync(p);

	ret = tf_session_connect(node, st_host(), port, NULL, &s);
	CHECKF(ret == 0, "connect: %s", tf_strerror(ret));
	tf_session_close(s);
	tf_test_sync(p);
	tf_test_sync(p); /* the server has kept it */

	ret = tf_session_connect(node, st_host(), port, NULL, &s);
	CHECKF(ret == 0, "connect: %s", tf_strerror(ret));
	CHECK(tf_session_reused(s));
	tf_session_close(s);
	tf_test_sync(p);
	st_print_conn_stats(node);
	tf_node_destroy(node);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_left");
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	return tf_test_pair_end(&p);
}
