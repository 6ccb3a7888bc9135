/* SPDX-License-Identifier: MIT */
/*
 * session_ctl_unit: sessions on a kept connection carry their control
 * messages on the connection's control QP, and the control QP's messages
 * are checked like the socket's.  A unit test: it reads the session's and
 * the listener's private state (session_int.h) and forges control
 * messages with the wire codec; conf_session_ctl is its public-API part.
 * Like the conformance tests it runs once per soft transport, and the
 * qemu harness runs it on rxe (tests/vm/run.sh).
 *
 * Round 0 opens a new connection (control messages on the socket); round
 * 1 reuses it and must run on the control QP on both sides, with a fresh
 * window key, and the data still moves.  In round 2, again on the control
 * QP, the client sends the server a forged EXPOSE whose header claims more
 * bytes than the SEND carried; in round 4 (on round 3's new connection)
 * one whose count disagrees with its length.  Each time the server's
 * session must break, the client must see its session break too (the
 * server closes without CLOSE), and the connection must not be kept: the
 * next round makes a new connection, which works.
 *
 * The rounds run twice: with a listener that arms the control QPs of its
 * kept connections (an event loop could sleep on tf_listener_fd), then
 * with a TF_LISTENER_BUSY_POLL listener, which polls them and does not
 * watch their sockets.  After each pass the client destroys its node,
 * closing the kept connection, and the listener must drop it.
 */
#include "session_unit_util.h"

#define LEN    4096
#define ROUNDS 6
/* Rounds whose client forges a control message, and that reuse. */
#define FORGED(_r) ((_r) == 2 || (_r) == 4)
#define REUSED(_r) ((_r) == 1 || (_r) == 2 || (_r) == 4)

static void server_round(struct tf_pair *p, tf_listener_t *l, int r)
{
	tf_session_t *s = st_accept(l, 0);
	uint8_t *m;
	int b, x;

	tf_test_send_u64(p, (uint64_t)tf_session_reused(s) | (uint64_t)s->qctl
								     << 1);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	memset(m, 0, LEN);
	CHECK_OK(tf_session_expose(
		s, b, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	if (FORGED(r)) {
		/* The forged message breaks the session (and is logged). */
		CHECK(TOLERATED(st_serve(s)) == TF_SESSION_BROKEN);
	} else {
		CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
		CHECK_FILL(m, 64, (uint32_t)r);
	}
	tf_session_close(s);
	tf_test_sync(p);
}

static void client_round(struct tf_pair *p, tf_node_t *node, uint16_t port,
			 int r, uint32_t *key)
{
	tf_exposure_info_t info;
	tf_session_t *s;
	uint64_t srv;
	uint8_t *m;
	int b, want;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	srv = tf_test_recv_u64(p);
	want = REUSED(r);
	CHECKF(tf_session_reused(s) == want && srv == (uint64_t)want * 3 &&
		       s->qctl == want,
	       "round %d: reused %d, control QP %d, server %llu", r,
	       tf_session_reused(s), s->qctl, (unsigned long long)srv);
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_peer_exposure(s, 0, &info));
	*key = info.rkey;
	if (FORGED(r)) {
		su_forge_expose(s, r == 2 ? SU_FORGE_SHORT : SU_FORGE_COUNT);
		CHECK(st_serve(s) == TF_SESSION_BROKEN);
	} else {
		CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
		tf_test_fill(m, 64, (uint32_t)r);
		CHECK_OK(tf_session_write(s, b, 0, 0, 0, 64, 1));
		st_expect(s, 1, TF_WC_SUCCESS, NULL);
	}
	tf_session_close(s);
	tf_test_sync(p);
}

/* The stats after a pass (@passes of them on this node). */
static void check_stats(tf_node_t *node, int passes)
{
	tf_node_stats_t st;

	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
		       st.sessions_live == 0,
	       "after close: %llu windows, %llu slices, %llu sessions",
	       (unsigned long long)st.windows_live,
	       (unsigned long long)st.slices_rented,
	       (unsigned long long)st.sessions_live);
	/* In each pass, rounds 0, 3 and 5 made connections (the forged
	 * rounds broke theirs); rounds 1, 2 and 4 reused one. */
	CHECKF(st.qp_new == 3ull * passes && st.qp_reused == 3ull * passes &&
		       st.qp_broken == 2ull * passes,
	       "%llu connections made, %llu reused, %llu broken",
	       (unsigned long long)st.qp_new, (unsigned long long)st.qp_reused,
	       (unsigned long long)st.qp_broken);
}

/* Server: the client closed its kept connection (its node is gone); the
 * listener must notice and drop it, also when it busy-polls and does
 * not watch the socket. */
static void wait_idle_dropped(tf_listener_t *l)
{
	struct tf_listener *li = l;
	uint64_t end = tf__now_ns() + 4ull * tf_test_timeout_ms() * 1000000;
	tf_session_t *s = NULL;

	while (li->n_idle && tf__now_ns() < end)
		CHECK(tf_listener_accept(l, NULL, 1, &s) == -EAGAIN);
	CHECKF(li->n_idle == 0, "%u kept connections not dropped", li->n_idle);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node = NULL;
	uint32_t keys[ROUNDS];

	tf_test_begin("session_ctl_unit");
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		node = st_node(&p, -1, NULL, 0);
	for (int pass = 0; pass < 2; pass++) {
		tf_listener_params_t lp = {
			.field_mask = TF_LISTENER_PARAM_FLAGS,
			.flags = pass ? TF_LISTENER_BUSY_POLL : 0};

		if (p.side == TF_SIDE_B) {
			tf_listener_t *l;

			lp.flags |= 1u << 31;
			CHECK(tf_listener_create(node, &lp, &l) == -EINVAL);
			lp.flags &= ~(1u << 31);
			CHECK_OK(tf_listener_create(node, &lp, &l));
			tf_test_send_u64(&p, tf_listener_port(l));
			for (int r = 0; r < ROUNDS; r++)
				server_round(&p, l, r);
			tf_test_sync(&p);
			wait_idle_dropped(l);
			tf_listener_destroy(l);
			check_stats(node, pass + 1);
		} else {
			uint16_t port = (uint16_t)tf_test_recv_u64(&p);

			/* A node per pass: destroying it closes the kept
			 * connection the server must then drop. */
			node = st_node(&p, -1, NULL, 0);
			for (int r = 0; r < ROUNDS; r++)
				client_round(&p, node, port, r, &keys[r]);
			for (int r = 1; r < ROUNDS; r++)
				CHECKF(keys[r] != keys[r - 1],
				       "pass %d: rounds %d and %d got key "
				       "0x%x",
				       pass, r - 1, r, keys[r]);
			check_stats(node, 1);
			tf_node_destroy(node);
			tf_test_sync(&p);
		}
		tf_test_sync(&p);
	}
	if (p.side == TF_SIDE_B)
		tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
