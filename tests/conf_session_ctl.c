/* SPDX-License-Identifier: MIT */
/*
 * conf_session_ctl: sessions on a kept connection, seen through the public
 * API only.  Round 0 opens a new connection; rounds 1..3 reuse it, and
 * both sides must say so (tf_session_reused).  Every round gets a fresh
 * window key and the data still moves.
 *
 * tf_session_fd() reports the server's EXPOSE on either channel: the
 * first session of a connection gets it on the socket, which makes the
 * fd readable before the client reads or arms anything; a session on a
 * kept connection gets it on the control QP, whose arrival makes the fd
 * readable once tf_session_arm() armed it (or the arm's own look finds
 * it).  That the messages take the control QP is checked from inside by
 * session_ctl_unit.
 *
 * The rounds run twice: with a listener that arms the control QPs of its
 * kept connections, then with a TF_LISTENER_BUSY_POLL listener, which
 * polls them and does not watch their sockets.  After each pass the
 * client's node holds the one kept connection; destroying the node closes
 * it, and the server's listener must drop its end: every connection the
 * server's node made is then destroyed, none of them broken.
 *
 * session_ctl_unit checks the same machinery from inside (the session's
 * control-QP flag, the listener's count of kept connections) and that
 * forged control messages on the control QP break the session.
 */
#include <poll.h>
#include <time.h>

#include "session_util.h"

#define LEN    4096
#define ROUNDS 4 /* round 0 makes the connection, the others reuse it */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void server_round(struct tf_pair *p, tf_listener_t *l, int r)
{
	tf_session_t *s = st_accept(l, 0);
	uint8_t *m;
	int b, x;

	tf_test_send_u64(p, (uint64_t)tf_session_reused(s));
	/* Expose only once the client's connect returned, so that the
	 * EXPOSE cannot be read together with the ACCEPT. */
	CHECK(tf_test_recv_u64(p) == 1);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	memset(m, 0, LEN);
	CHECK_OK(tf_session_expose(
		s, b, 0, LEN, TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
		&x));
	tf_test_send_u64(p, 2);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	CHECK_FILL(m, 64, (uint32_t)r);
	tf_session_close(s);
	tf_test_sync(p);
}

/* 1 if @fd becomes readable within @ms, else 0. */
static int readable(int fd, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int n = poll(&pfd, 1, ms);

	CHECKF(n >= 0, "poll: %m");
	return n > 0 && (pfd.revents & POLLIN);
}

static void client_round(struct tf_pair *p, tf_node_t *node, uint16_t port,
			 int r, uint32_t *key)
{
	tf_exposure_info_t info;
	tf_session_t *s;
	uint64_t srv;
	uint8_t *m;
	int b, want, rd;

	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	srv = tf_test_recv_u64(p);
	want = r > 0;
	CHECKF(tf_session_reused(s) == want && srv == (uint64_t)want,
	       "round %d: reused %d, server %llu", r, tf_session_reused(s),
	       (unsigned long long)srv);
	tf_test_send_u64(p, 1);
	CHECK(tf_test_recv_u64(p) == 2);
	/* The server's EXPOSE is on its way: on the socket for the first
	 * session, on the control QP for the others, which is armed
	 * first (the arm may already find it). */
	rd = want ? tf_session_arm(s) : 0;
	CHECKF(rd >= 0, "round %d: arm: %s", r, tf_strerror(rd));
	if (!rd)
		rd = readable(tf_session_fd(s), 4 * tf_test_timeout_ms());
	CHECKF(rd,
	       "round %d: session fd not readable after the peer exposed "
	       "(on the %s)",
	       r, want ? "control QP" : "socket");
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_peer_exposure(s, 0, &info));
	*key = info.rkey;
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	tf_test_fill(m, 64, (uint32_t)r);
	CHECK_OK(tf_session_write(s, b, 0, 0, 0, 64, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
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
	CHECKF(st.qp_new == 1ull * passes &&
		       st.qp_reused == (ROUNDS - 1ull) * passes &&
		       st.qp_broken == 0,
	       "%llu connections made, %llu reused, %llu broken",
	       (unsigned long long)st.qp_new, (unsigned long long)st.qp_reused,
	       (unsigned long long)st.qp_broken);
}

/* Server: the client closed its kept connection (its node is gone); the
 * listener must notice and drop it, also when it busy-polls and does
 * not watch the socket.  Every connection the node made is then
 * destroyed. */
static void wait_kept_dropped(tf_node_t *node, tf_listener_t *l)
{
	uint64_t end = now_ms() + 4ull * tf_test_timeout_ms();
	tf_session_t *s = NULL;
	tf_node_stats_t st;

	for (;;) {
		CHECK_OK(tf_node_query_stats(node, &st));
		if (st.qp_destroyed == st.qp_new || now_ms() > end)
			break;
		CHECK(tf_listener_accept(l, NULL, 1, &s) == -EAGAIN);
	}
	CHECKF(st.qp_destroyed == st.qp_new,
	       "%llu of %llu connections not dropped",
	       (unsigned long long)(st.qp_new - st.qp_destroyed),
	       (unsigned long long)st.qp_new);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node = NULL;
	uint32_t keys[ROUNDS];

	tf_test_begin("conf_session_ctl");
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
			wait_kept_dropped(node, l);
			tf_listener_destroy(l);
			check_stats(node, pass + 1);
		} else {
			uint16_t port = (uint16_t)tf_test_recv_u64(&p);
			tf_node_stats_t st;

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
			CHECK_OK(tf_node_query_stats(node, &st));
			CHECKF(st.qp_idle == 1, "%llu kept connections",
			       (unsigned long long)st.qp_idle);
			tf_node_destroy(node);
			tf_test_sync(&p);
		}
		tf_test_sync(&p);
	}
	if (p.side == TF_SIDE_B)
		tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
