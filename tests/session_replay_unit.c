/* SPDX-License-Identifier: MIT */
/*
 * session_replay_unit: the record of early OPENs a server took
 * (src/session/replay.c), which refuses a replayed HELLO, and what a
 * client and server do when it refuses.
 *
 * 1. The record alone, with a made-up clock (window 10 s, 4 entries):
 *    off when it has no room or no window; a new nonce taken once, then
 *    seen; times before the window, or further ahead than it, stale; the
 *    fifth nonce refused for room, until time moves on and the oldest
 *    leave; a clock that goes back does not bring a forgotten nonce back
 *    (the floor stays); many nonces through a small record, each taken
 *    once.
 * 2. Sessions with a pre-shared key, server record of two entries, three
 *    connections from two client nodes: node A's first early OPEN is
 *    taken, node B's first too (every connect draws its own nonce: two
 *    nodes' first connects must not share one), and A's second finds the
 *    record full and falls back to the challenge.  All three sessions
 *    work; the stats of all three nodes say so.
 */
#include <stdlib.h>
#include <string.h>

#include "session_int.h"
#include "session_util.h"

#define SEC 1000000000ull

static void nonce_of(unsigned i, uint8_t n[TF_WIRE_NONCE])
{
	memset(n, 0, TF_WIRE_NONCE);
	memcpy(n, &i, sizeof(i));
	n[TF_WIRE_NONCE - 1] = 0xa5;
}

static void record_alone(void)
{
	uint64_t t0 = 1700000000ull * SEC;
	uint8_t n[TF_WIRE_NONCE];
	struct tf_replay r;

	/* Off: no room, or no window. */
	tf__replay_init(&r, 0, 10 * SEC);
	nonce_of(1, n);
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_OFF);
	tf__replay_fini(&r);
	tf__replay_init(&r, 4, 0);
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_OFF);
	tf__replay_fini(&r);

	tf__replay_init(&r, 4, 10 * SEC);
	/* Taken once, then seen, whatever the time says. */
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_FRESH);
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_SEEN);
	CHECK(tf__replay_admit(&r, n, t0 + SEC, t0 + 2 * SEC) ==
	      TF_REPLAY_SEEN);
	/* Outside the window, either way: stale, and not recorded. */
	nonce_of(2, n);
	CHECK(tf__replay_admit(&r, n, t0 - 11 * SEC, t0) == TF_REPLAY_STALE);
	CHECK(tf__replay_admit(&r, n, t0 + 11 * SEC, t0) == TF_REPLAY_STALE);
	/* Within it: taken (2, 3, 4), then no room for 5.  (The clock was
	 * at t0 + 2 s: the floor is at t0 - 8 s.) */
	CHECK(tf__replay_admit(&r, n, t0 - 9 * SEC, t0) == TF_REPLAY_STALE);
	CHECK(tf__replay_admit(&r, n, t0 - 7 * SEC, t0) == TF_REPLAY_FRESH);
	nonce_of(3, n);
	CHECK(tf__replay_admit(&r, n, t0 + 9 * SEC, t0) == TF_REPLAY_FRESH);
	nonce_of(4, n);
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_FRESH);
	nonce_of(5, n);
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_FULL);
	/* 12 s on, the floor passes nonce 1 (time t0, the ring's head) and
	 * nonce 2 (t0 - 7 s): room for 5. */
	CHECK(tf__replay_admit(&r, n, t0 + 12 * SEC, t0 + 12 * SEC) ==
	      TF_REPLAY_FRESH);
	/* Nonce 1, forgotten: its time is below the floor, so stale. */
	nonce_of(1, n);
	CHECK(tf__replay_admit(&r, n, t0, t0 + 12 * SEC) == TF_REPLAY_STALE);
	/* The clock goes back 12 s: the floor stays, so nonce 1 with its
	 * old time is still refused. */
	CHECK(tf__replay_admit(&r, n, t0, t0) == TF_REPLAY_STALE);
	/* Nonce 3 (t0 + 9 s) is still recorded. */
	nonce_of(3, n);
	CHECK(tf__replay_admit(&r, n, t0 + 9 * SEC, t0 + 12 * SEC) ==
	      TF_REPLAY_SEEN);
	tf__replay_fini(&r);

	/* Many nonces through a record of 8, the clock a second a nonce:
	 * each taken once, and seen while its time is in the window. */
	tf__replay_init(&r, 8, 5 * SEC);
	for (unsigned i = 0; i < 10000; i++) {
		uint64_t now = t0 + (uint64_t)i * SEC;

		nonce_of(100 + i, n);
		CHECK(tf__replay_admit(&r, n, now, now) == TF_REPLAY_FRESH);
		CHECK(tf__replay_admit(&r, n, now, now) == TF_REPLAY_SEEN);
		if (i >= 3) {
			nonce_of(100 + i - 3, n);
			CHECK(tf__replay_admit(&r, n, now - 3 * SEC, now) ==
			      TF_REPLAY_SEEN);
		}
		CHECK(r.n <= 8);
	}
	tf__replay_fini(&r);
}

static const char key[] = "the replay test's key";

/* @taken early OPENs taken and @refused not, as @node counted them. */
static void check_early(tf_node_t *node, unsigned taken, unsigned refused,
			const char *who)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.psk_early == taken && st.psk_early_refused == refused &&
		       !st.auth_failures,
	       "%s: early OPENs %llu taken, %llu not; %llu auth failures", who,
	       (unsigned long long)st.psk_early,
	       (unsigned long long)st.psk_early_refused,
	       (unsigned long long)st.auth_failures);
}

/* A session of @node that reads the server's buffer. */
static void one_read(tf_node_t *node, uint16_t port)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_NO_REUSE};
	tf_session_t *s;
	struct tf_wc wc;
	char *m;
	int b;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, &sp, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, 64, &b, (void **)&m));
	CHECK_OK(tf_session_read(s, b, 0, 0, 0, 64, 1));
	CHECK(tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms()) == 1);
	CHECK(wc.status == TF_WC_SUCCESS && m[0] == 0x5c && m[63] == 0x5c);
	tf_session_close(s);
}

static void client(struct tf_pair *p, tf_node_t *node)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_t *b = st_node(p, -1, key, sizeof(key) - 1);

	one_read(node, port);
	one_read(b, port);
	one_read(node, port);
	check_early(node, 1, 1, "client A");
	check_early(b, 1, 0, "client B");
	tf_node_destroy(b);
	tf_test_send_u64(p, 1);
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = "127.0.0.1"};
	tf_listener_t *l;

	CHECK(node->replay.cap == 2);
	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (int i = 0; i < 3; i++) {
		tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
		int b, x;

		CHECK_OK(tf_session_rent(s, 4096, &b, NULL));
		memset(tf_session_buf_addr(s, b), 0x5c, 4096);
		CHECK_OK(tf_session_expose(s, b, 0, 4096, TF_ACCESS_REMOTE_READ,
					   &x));
		CHECK_OK(tf_session_establish(s));
		st_serve(s);
		tf_session_close(s);
	}
	CHECK(tf_test_recv_u64(p) == 1);
	check_early(node, 2, 1, "server");
	tf_listener_destroy(l);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	/* Before the harness reads the environment: a record of two. */
	setenv("TOLLFREE_SESSION_PSK_EARLY_MAX", "2", 1);
	setenv("TOLLFREE_SESSION_PSK_EARLY_WINDOW_MS", "60000", 1);
	tf_test_begin("session_replay_unit");
	record_alone();
	tf_test_pair_open(&p);
	node = st_node(&p, -1, key, sizeof(key) - 1);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		client(&p, node);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
