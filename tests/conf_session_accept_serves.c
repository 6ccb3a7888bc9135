/* SPDX-License-Identifier: MIT */
/*
 * conf_session_accept_serves: a server asleep in a blocking
 * tf_listener_accept still serves the one-sided operations of the
 * sessions it accepted, without a timer (tf_listener_create(3),
 * tollfree(7) "Sleeping").  Where the device serves them itself
 * (TF_CAP_AUTO_PROGRESS: a NIC, shm's initiator-side copies) this holds
 * by construction; over the soft provider's tcp transport it holds
 * because the context's progress descriptor is in the listener's set.
 *
 * The server exposes a buffer on an established session and then blocks
 * in tf_listener_accept for twice as long as the client waits for its
 * READ: the READ must complete while the server sleeps there.  The
 * client then opens a second session, which ends the accept; both close.
 */
#include "session_util.h"

#define LEN 4096

static void server(struct tf_pair *p, tf_listener_t *l)
{
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH), *s2 = NULL;
	uint8_t *m;
	int b, x, ret;

	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	tf_test_fill(m, LEN, 0x5e55);
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_READ, &x));
	CHECK_OK(tf_session_establish(s));
	/* Nothing but this call runs on this side until the client's READ
	 * is done and its second session arrives. */
	ret = tf_listener_accept(l, NULL, 8 * tf_test_timeout_ms(), &s2);
	CHECKF(ret == 0, "accept of the second session: %s", tf_strerror(ret));
	CHECK(st_serve(s2) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s2);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_session_t *s, *s2;
	uint8_t *m;
	int b;

	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	memset(m, 0, LEN);
	CHECK_OK(tf_session_read(s, b, 0, 0, 0, LEN, 7));
	/* Half the server's accept timeout: a READ served only when that
	 * call returns fails here. */
	st_expect(s, 7, TF_WC_SUCCESS, NULL);
	CHECK_FILL(m, LEN, 0x5e55);
	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s2));
	tf_session_close(s2);
	tf_session_close(s);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_accept_serves");
	tf_test_pair_open(&p);
	return st_run(&p, server, client);
}
