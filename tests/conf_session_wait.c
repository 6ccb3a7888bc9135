/* SPDX-License-Identifier: MIT */
/*
 * conf_session_wait: what a return of 0 from tf_session_wait means, and
 * the peer exposure count under both names.  The server exposes two
 * buffers; the client counts them with tf_session_peer_count and
 * tf_session_peer_exposures (the same).  On the open session a 50 ms wait
 * returns 0 after its timeout and the state is still TF_SESSION_OPEN;
 * once the client closes, a wait with a long timeout returns 0 at once
 * and the state is TF_SESSION_PEER_CLOSED, as the man page's loop
 * expects.
 */
#include <time.h>

#include "session_util.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void server(struct tf_pair *p, tf_listener_t *l)
{
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	int long_ms = 4 * tf_test_timeout_ms();
	struct tf_wc wc;
	uint64_t t0, dt;
	int b, x, n;

	CHECK_OK(tf_session_rent(s, 128, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, 64, TF_ACCESS_REMOTE_READ, &x));
	CHECK_OK(tf_session_expose(s, b, 64, 64, TF_ACCESS_REMOTE_READ, &x));
	CHECK_OK(tf_session_establish(s));
	tf_test_sync(p); /* the client counted */

	/* Open, nothing to reap: 0 after the timeout, still open. */
	t0 = now_ms();
	n = tf_session_wait(s, 1, &wc, 50);
	dt = now_ms() - t0;
	CHECKF(n == 0 && dt >= 45, "wait on an open session: %d after %llu ms",
	       n, (unsigned long long)dt);
	CHECK(tf_session_state(s) == TF_SESSION_OPEN);
	tf_test_sync(p); /* the client closes */

	/* The peer's close: 0 long before the timeout, and the state says
	 * why. */
	t0 = now_ms();
	n = tf_session_wait(s, 1, &wc, long_ms);
	dt = now_ms() - t0;
	CHECKF(n == 0 && dt < (uint64_t)long_ms / 2,
	       "wait across the peer's close: %d after %llu ms", n,
	       (unsigned long long)dt);
	CHECK(tf_session_state(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_exposure_info_t e;
	tf_session_t *s;

	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
	CHECK(tf_session_peer_count(s) == 2);
	CHECK(tf_session_peer_exposures(s) == 2);
	CHECK_OK(tf_session_peer_exposure(s, 1, &e));
	CHECK(e.length == 64);
	CHECK_ERR(tf_session_peer_count(NULL), -EINVAL);
	tf_test_sync(p);
	tf_test_sync(p);
	tf_session_close(s);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_wait");
	tf_test_pair_open(&p);
	return st_run(&p, server, client);
}
