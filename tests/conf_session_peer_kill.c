/* SPDX-License-Identifier: MIT */
/*
 * conf_session_peer_kill: a client killed with SIGKILL in the middle of a
 * session leaves the server with no window bound, no slice rented and no
 * extra locked or pinned memory.  Side A serves (it survives); side B
 * connects and READs and WRITEs the server's exposures in a loop until it
 * is killed.  The server notices (the bootstrap socket closes), closes
 * the session (posts on it meanwhile return -ENOTCONN), and its counters
 * and VmLck/VmPin are back to where they were before the session.
 */
#include <poll.h>

#include "session_util.h"

#define LEN 65536

static long held(void)
{
	long l = tf_test_vmlck(), p = tf_test_vmpin();

	return (l < 0 ? 0 : l) + (p < 0 ? 0 : p);
}

static void victim(struct tf_pair *p, tf_node_t *node)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_session_t *s;
	uint8_t *m;
	int b;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 3, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	for (uint64_t i = 0;; i++) {
		int x = (int)(i % 3);

		CHECK_OK(tf_session_read(s, b, 0, x, 0, 4096, i));
		st_expect(s, i, TF_WC_SUCCESS, NULL);
		CHECK_OK(tf_session_write(s, b, 0, x, 0, 4096, i));
		st_expect(s, i, TF_WC_SUCCESS, NULL);
		if (i == 16)
			tf_test_send_u64(p, 1); /* running: kill me */
	}
}

static void survivor(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_t *l;
	tf_session_t *s;
	tf_node_stats_t st;
	tf_pool_stats_t ps;
	tf_context_stats_t cs0, cs1;
	uint8_t *user;
	long held0;
	int b0, b1, b2, x;

	user = aligned_alloc(4096, LEN);
	CHECK(user);
	memset(user, 0, LEN);
	CHECK_OK(tf_listener_create(node, NULL, &l));
	/* Warm the pool's size classes, so that a chunk registered during
	 * the session cannot be mistaken for a leak, then take the
	 * baseline. */
	{
		tf_slice_t sl;

		CHECK_OK(tf_pool_rent(tf_node_pool(node), LEN, &sl));
		CHECK_OK(tf_pool_return(tf_node_pool(node), &sl));
	}
	/* The stock's control slots are pinned: both samples with it
	 * full. */
	st_stock_settle(node);
	held0 = held();
	CHECK_OK(tf_context_query_stats(p->ctx, &cs0));
	tf_test_send_u64(p, tf_listener_port(l));

	s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	CHECK_OK(tf_session_rent(s, LEN, &b0, NULL));
	CHECK_OK(tf_session_rent(s, LEN, &b1, NULL));
	/* A user buffer, by the configured strategy. */
	CHECK_OK(tf_session_attach(s, user, LEN, TF_ATTACH_IN, &b2));
	CHECK_OK(tf_session_expose(
		s, b0, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	CHECK_OK(tf_session_expose(
		s, b1, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	CHECK_OK(tf_session_expose(
		s, b2, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	CHECK_OK(tf_session_establish(s));
	/* Serve until the victim says it runs, then kill it. */
	for (int t = 0; t < 100 * tf_test_timeout_ms(); t++) {
		struct tf_wc wc[4];
		struct pollfd pfd = {.fd = p->sock, .events = POLLIN};

		CHECK(tf_session_wait(s, 4, wc, 1) >= 0);
		if (poll(&pfd, 1, 0) == 1)
			break;
	}
	CHECK(tf_test_recv_u64(p) == 1);
	tf_test_pair_kill_peer(p);
	CHECK(st_serve(s) == TF_SESSION_BROKEN);
	/* Posts on a broken session are refused, not silently flushed. */
	CHECK_ERR(tf_session_send(s, b2, 0, 8, 2), -ENOTCONN);
	CHECK_ERR(tf_session_recv(s, b2, 0, 8, 3), -ENOTCONN);
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.windows_live == 3 &&
		       st.slices_rented ==
			       2u + (tf_session_buf_mode(s, b2) == TF_REG_POOL),
	       "%llu windows, %llu slices", (unsigned long long)st.windows_live,
	       (unsigned long long)st.slices_rented);
	tf_session_close(s);

	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.windows_live == 0, "%llu windows still bound",
	       (unsigned long long)st.windows_live);
	CHECKF(st.slices_rented == 0, "%llu slices still rented",
	       (unsigned long long)st.slices_rented);
	CHECK(st.sessions_live == 0 && st.qp_broken == 1);
	CHECK_OK(tf_pool_query_stats(tf_node_pool(node), &ps));
	CHECK(ps.rents == ps.returns);
	/* The attach took the registration cache or a registration of its
	 * own; drop the cached one so that only leaks remain. */
	tf_rcache_invalidate(tf_node_rcache(node), user, LEN);
	/* The stock makes a new entry for the one the session took. */
	st_stock_settle(node);
	CHECK_OK(tf_context_query_stats(p->ctx, &cs1));
	CHECKF(cs1.pinned_bytes == cs0.pinned_bytes,
	       "pinned bytes %llu, %llu before the session",
	       (unsigned long long)cs1.pinned_bytes,
	       (unsigned long long)cs0.pinned_bytes);
	CHECKF(held() == held0, "VmLck+VmPin %ld, %ld before the session",
	       held(), held0);
	tf_listener_destroy(l);
	free(user);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("conf_session_peer_kill");
	tf_test_pair_open(&p);
	tf_test_tolerate_log(true);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_A)
		survivor(&p, node);
	else
		victim(&p, node);
	tf_node_destroy(node);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
