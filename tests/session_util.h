/* SPDX-License-Identifier: MIT */
/*
 * session_util.h - helpers shared by the session tests (header only).
 */
#ifndef TF_SESSION_UTIL_H
#define TF_SESSION_UTIL_H

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tf_test.h"

/* Fill the node's stock of connection resources (tf_node_progress, where
 * the node makes them inline) or wait until its thread has, so that what
 * a test measures as its baseline (fds, locked memory, objects) does not
 * move under it. */
static inline int64_t st_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void st_stock_settle(tf_node_t *node)
{
	tf_node_stats_t st;

	for (int t = 0; t < 4 * tf_test_timeout_ms(); t++) {
		CHECK(tf_node_progress(node) >= 0);
		CHECK_OK(tf_node_query_stats(node, &st));
		if (st.stock_entries == st.stock_max)
			return;
		usleep(1000);
	}
	tf_test_fail(__FILE__, __LINE__, "the connection stock never filled");
}

/* Create a node on the pair's context with @use_mw (-1: configuration). */
static inline tf_node_t *st_node(struct tf_pair *p, int use_mw, const void *psk,
				 size_t psk_len)
{
	tf_node_params_t np = {0};
	tf_node_t *node;

	if (use_mw >= 0) {
		np.field_mask |= TF_NODE_PARAM_USE_MW;
		np.use_mw = use_mw;
	}
	if (psk) {
		np.field_mask |= TF_NODE_PARAM_PSK;
		np.psk = psk;
		np.psk_len = psk_len;
	}
	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	st_stock_settle(node);
	return node;
}

/* A listener of @node that side A can reach: 127.0.0.1, or in peer mode
 * (tf_test.h) any address, the other side being another machine. */
static inline int st_listen(tf_node_t *node, tf_listener_t **l)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = "0.0.0.0"};

	return tf_listener_create(node, tf_test_peer_mode() ? &lp : NULL, l);
}

/* The host side A connects its sessions to (see st_listen). */
static inline const char *st_host(void)
{
	return tf_test_peer_host();
}

/*
 * The shape of most session tests, after tf_test_begin, tf_test_pair_open
 * and any capability checks: side B listens (st_listen), tells A its port
 * and runs @server; side A runs @client against that port; both sync,
 * close their node and end the pair (the exit status for main).
 */
static inline int
st_run(struct tf_pair *p, void (*server)(struct tf_pair *, tf_listener_t *),
       void (*client)(struct tf_pair *, tf_node_t *, uint16_t))
{
	tf_node_t *node = st_node(p, -1, NULL, 0);

	if (p->side == TF_SIDE_B) {
		tf_listener_t *l;

		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(p, tf_listener_port(l));
		server(p, l);
		tf_listener_destroy(l);
	} else {
		client(p, node, (uint16_t)tf_test_recv_u64(p));
	}
	tf_test_sync(p);
	tf_node_destroy(node);
	return tf_test_pair_end(p);
}

/* As st_run, on the caller's @node (open still after): side B listens
 * and runs @server, side A runs @client against its port; both sync. */
static inline void
st_run_node(struct tf_pair *p, tf_node_t *node,
	    void (*server)(struct tf_pair *, tf_node_t *, tf_listener_t *),
	    void (*client)(struct tf_pair *, tf_node_t *, uint16_t))
{
	if (p->side == TF_SIDE_B) {
		tf_listener_t *l;

		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(p, tf_listener_port(l));
		server(p, node, l);
		tf_listener_destroy(l);
	} else {
		client(p, node, (uint16_t)tf_test_recv_u64(p));
	}
	tf_test_sync(p);
}

/* Print the node's connection counters: what a test that failed on a
 * connection that was or was not reused leaves for its reader. */
static inline void st_print_conn_stats(tf_node_t *node)
{
	tf_node_stats_t st;

	if (tf_node_query_stats(node, &st))
		return;
	tf_test_info("node: %llu connections made, %llu reused, %llu "
		     "destroyed (%llu broken), %llu kept now, %llu kept "
		     "refused, %llu connect failures, %llu handshake rejects, "
		     "%llu pending dropped, %llu refused",
		     (unsigned long long)st.qp_new,
		     (unsigned long long)st.qp_reused,
		     (unsigned long long)st.qp_destroyed,
		     (unsigned long long)st.qp_broken,
		     (unsigned long long)st.qp_idle,
		     (unsigned long long)st.kept_refused,
		     (unsigned long long)st.connect_failures,
		     (unsigned long long)st.handshake_rejects,
		     (unsigned long long)st.pending_dropped,
		     (unsigned long long)st.pending_refused);
}

/* Server: serve @l (accepts that find no session) until every
 * connection @node made has ended, or the test timeout; the node's
 * stats then.  For a listener whose connections end without a session
 * (a refusal, the client's end). */
static inline tf_node_stats_t st_wait_conns_ended(tf_listener_t *l,
						  tf_node_t *node)
{
	int64_t end = st_now_ms() + 4 * (int64_t)tf_test_timeout_ms();
	tf_node_stats_t st;
	tf_session_t *s;

	do {
		s = NULL;
		CHECK(TOLERATED(tf_listener_accept(l, NULL, 1, &s)) == -EAGAIN);
		CHECK(!s);
		CHECK_OK(tf_node_query_stats(node, &st));
	} while (st.qp_destroyed < st.qp_new && st_now_ms() < end);
	return st;
}

/* Server: accept one session within the test timeout. */
static inline tf_session_t *st_accept(tf_listener_t *l, unsigned flags)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = flags};
	tf_session_t *s = NULL;
	int ret = tf_listener_accept(l, &sp, 4 * tf_test_timeout_ms(), &s);

	CHECKF(ret == 0, "accept: %s", tf_strerror(ret));
	return s;
}

/* Serve @s (progress, reap completions) until the peer closed or the
 * session broke; returns the final state. */
static inline int st_serve(tf_session_t *s)
{
	int limit = 4 * tf_test_timeout_ms() / 10, st;
	struct tf_wc wc[8];

	/* tf_session_wait returns early when the peer closes. */
	for (int t = 0; t < limit; t++) {
		int n = tf_session_wait(s, 8, wc, 10);

		CHECK(n >= 0);
		st = tf_session_state(s);
		if (st == TF_SESSION_PEER_CLOSED || st == TF_SESSION_BROKEN)
			return st;
	}
	tf_test_fail(__FILE__, __LINE__, "peer never closed the session");
}

/* Server: serve @s, not opened on a grant, as a client that writes: @len
 * bytes exposed writable, served until the client closed, closed. */
static inline void st_serve_write(tf_session_t *s, size_t len)
{
	int b, x;

	CHECK(!tf_session_granted(s));
	CHECK_OK(tf_session_rent(s, len, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, len, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
}

/* Wait for exactly one completion of @s and check its status. */
static inline void st_expect(tf_session_t *s, uint64_t wr_id,
			     enum tf_wc_status status, struct tf_wc *out)
{
	int64_t end_ms = st_now_ms() + 4 * (int64_t)tf_test_timeout_ms();
	struct tf_wc wc;
	int n;

	/* tf_session_wait returns 0 early when the peer closes or the
	 * session breaks, which may be seen before the completion of work
	 * posted earlier (the peer's CLOSE and the transport's ack or NAK
	 * travel apart): every signaled work request still completes, so
	 * wait again, within the same deadline. */
	do {
		int64_t left = end_ms - st_now_ms();

		n = tf_session_wait(s, 1, &wc, left > 0 ? (int)left : 0);
	} while (n == 0 && st_now_ms() < end_ms);
	CHECKF(n == 1, "no completion for wr_id %llu (%d)",
	       (unsigned long long)wr_id, n);
	CHECKF(wc.wr_id == wr_id && wc.status == status,
	       "completion %s, expected wr_id %llu status %s",
	       tf_test_wc_str(&wc), (unsigned long long)wr_id,
	       tf_wc_status_str(status));
	if (out)
		*out = wc;
}

#endif /* TF_SESSION_UTIL_H */
