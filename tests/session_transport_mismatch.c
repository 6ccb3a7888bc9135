/* SPDX-License-Identifier: MIT */
/*
 * session_transport_mismatch: two soft-provider processes whose
 * transports have nothing in common (the server shm only, the client tcp
 * only) cannot open a session, and the client is told why.  The server's
 * provider refuses the client's QP address (it logs "no common
 * transport") and REJECTs the session; the client's connect fails with
 * -TF_EPEER and its one warning says that the server could not connect
 * to this side's queue pair, naming both sides' providers and transports
 * (server soft/shm, this side soft/tcp), instead of only "peer address
 * blob does not match this provider".  The server counts one rejected
 * handshake and keeps listening: a client with a transport in common
 * (shm) then opens a session.
 */
#include "session_util.h"

static char warned[1024];
static int n_warned;

static void watch_log(tf_log_level_t level, const char *subsys, const char *msg,
		      void *arg)
{
	(void)subsys;
	(void)arg;
	if (level <= TF_LOG_WARN) {
		fprintf(stderr, "[session_transport_mismatch] %s\n", msg);
		snprintf(warned, sizeof(warned), "%s", msg);
		n_warned++;
	}
}

static tf_context_t *soft_ctx(const char *transport)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT,
				  .provider = "soft",
				  .transport = transport};
	tf_context_t *ctx;

	CHECK_OK(tf_context_open(&cp, &ctx));
	return ctx;
}

static void server(struct tf_pair *p)
{
	tf_context_t *ctx = soft_ctx("shm");
	tf_node_t *node;
	tf_listener_t *l;
	tf_session_t *s;
	tf_node_stats_t st;
	int ret;

	CHECK_OK(tf_node_create(ctx, NULL, &node));
	CHECK_OK(tf_listener_create(node, NULL, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	/* The refused client: its handshake fails and is dropped. */
	tf_test_tolerate_log(true);
	for (int t = 0; t < 40; t++) {
		ret = tf_listener_accept(l, NULL, 100, &s);
		CHECKF(ret == -EAGAIN, "accept: %s", tf_strerror(ret));
		CHECK_OK(tf_node_query_stats(node, &st));
		if (st.handshake_rejects)
			break;
	}
	tf_test_tolerate_log(false);
	CHECK(st.handshake_rejects == 1 && st.sessions_opened == 0);
	tf_test_sync(p);
	/* A client with shm. */
	s = st_accept(l, 0);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_listener_destroy(l);
	tf_node_destroy(node);
	tf_context_close(ctx);
}

static void client(struct tf_pair *p)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_context_t *ctx = soft_ctx("tcp");
	tf_node_t *node;
	tf_session_t *s;
	int ret;

	CHECK_OK(tf_node_create(ctx, NULL, &node));
	tf_log_set_handler(watch_log, NULL);
	ret = tf_session_connect(node, "127.0.0.1", port, NULL, &s);
	tf_test_begin("session_transport_mismatch"); /* its handler again */
	CHECKF(ret == -TF_EPEER, "connect: %s", tf_strerror(ret));
	CHECKF(n_warned == 1, "%d warnings", n_warned);
	CHECKF(strstr(warned, "could not connect") &&
		       strstr(warned, "transport shm") &&
		       strstr(warned, "transport tcp"),
	       "the client's warning does not say what happened: '%s'", warned);
	tf_node_destroy(node);
	tf_context_close(ctx);
	tf_test_sync(p);

	ctx = soft_ctx("shm");
	CHECK_OK(tf_node_create(ctx, NULL, &node));
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	tf_session_close(s);
	tf_node_destroy(node);
	tf_context_close(ctx);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("session_transport_mismatch");
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	return tf_test_pair_end(&p);
}
