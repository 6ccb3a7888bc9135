/* SPDX-License-Identifier: MIT */
/*
 * conf_session_fd: a session's fd (tf_session_fd) wakes a sleeper for
 * everything the session must act on, and the waits sleep on it.  Side A
 * serves, side B connects.  The sleeper always arms (tf_session_arm)
 * before it lets the peer act, then sleeps in poll() on the fd: the fd
 * must become readable because of what the peer did, not because of
 * anything already there.
 *
 *  1. The first session of a connection (control messages on the
 *     socket): the server's fd wakes on the client's WRITE with
 *     immediate, on its SEND, and on its CLOSE.
 *  2. A session on the kept connection (control messages on the control
 *     QP): the client's fd wakes on the server's EXPOSE; a
 *     tf_session_wait and a tf_session_wait_peer with a long timeout
 *     return with the peer's write and exposure, which come well after
 *     the spin; the server's fd wakes on the client's CLOSE.
 *  3. Another session on it: the server's fd wakes when the client
 *     process is killed, and the session is then broken.
 *
 * No bound here is on timing: a wait that did not wake ends at its
 * timeout (several test timeouts) and fails.
 */
#include <poll.h>

#include "session_util.h"

#define LEN 4096
#define IMM 0x5eedu

/* Block until @s's fd is readable, after arming it; the arm's own look
 * may find what came first (then no sleep).  Fails if nothing comes. */
static void sleep_once(tf_session_t *s, const char *what)
{
	struct pollfd pfd = {.fd = tf_session_fd(s), .events = POLLIN};
	int r = tf_session_arm(s), n;

	CHECKF(r >= 0, "%s: arm: %s", what, tf_strerror(r));
	CHECKF(pfd.fd >= 0, "%s: session fd: %s", what, tf_strerror(pfd.fd));
	if (r)
		return;
	n = poll(&pfd, 1, 4 * tf_test_timeout_ms());
	CHECKF(n == 1 && (pfd.revents & POLLIN),
	       "%s: the session fd did not become readable", what);
}

/* Sleep on the fd until a completion comes (the fd protocol: poll until
 * nothing is left, arm, sleep). */
static void fd_expect(tf_session_t *s, const char *what, struct tf_wc *wc)
{
	for (int i = 0; i < 64; i++) {
		int n = tf_session_poll(s, 1, wc);

		CHECK(n >= 0);
		if (n == 1) {
			CHECKF(wc->status == TF_WC_SUCCESS, "%s: %s", what,
			       tf_test_wc_str(wc));
			return;
		}
		sleep_once(s, what);
	}
	tf_test_fail(__FILE__, __LINE__, "no completion after 64 wake-ups");
}

/* Sleep on the fd until the session's state is @want. */
static void fd_state(tf_session_t *s, const char *what, int want)
{
	struct tf_wc wc;

	for (int i = 0; i < 64; i++) {
		CHECK(tf_session_poll(s, 1, &wc) >= 0);
		if (tf_session_state(s) == want)
			return;
		sleep_once(s, what);
	}
	CHECKF(tf_session_state(s) == want, "%s: state %d, expected %d", what,
	       tf_session_state(s), want);
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	int long_ms = 10 * tf_test_timeout_ms();
	tf_listener_t *l;
	tf_session_t *s;
	struct tf_wc wc;
	int b, x;

	CHECK_OK(tf_listener_create(node, NULL, &l));
	tf_test_send_u64(p, tf_listener_port(l));

	/* 1: control on the socket. */
	s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	CHECK(!tf_session_reused(s));
	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK_OK(tf_session_recv(s, b, 0, LEN, 10));
	CHECK_OK(tf_session_recv(s, b, 0, LEN, 11));
	CHECK_OK(tf_session_establish(s));
	CHECK(tf_test_recv_u64(p) == 0); /* the client has the exposure */

	CHECK(tf_session_arm(s) >= 0);
	tf_test_send_u64(p, 1); /* WRITE with immediate */
	fd_expect(s, "write_imm", &wc);
	CHECK(wc.wr_id == 10 && wc.opcode == TF_WC_RECV_RDMA_WITH_IMM &&
	      (wc.flags & TF_WC_WITH_IMM) && wc.imm_data == IMM);

	CHECK(tf_session_arm(s) >= 0);
	tf_test_send_u64(p, 2); /* SEND */
	fd_expect(s, "send", &wc);
	CHECK(wc.wr_id == 11 && wc.opcode == TF_WC_RECV && wc.byte_len == 64);

	CHECK(tf_session_arm(s) >= 0);
	tf_test_send_u64(p, 3); /* CLOSE on the socket */
	fd_state(s, "close (socket)", TF_SESSION_PEER_CLOSED);
	tf_session_close(s);

	/* 2: control on the kept connection's control QP. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s));
	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	CHECK_OK(tf_session_recv(s, b, 0, LEN, 20));
	CHECK(tf_test_recv_u64(p) == 4); /* the client armed */
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));

	CHECK(tf_test_recv_u64(p) == 5); /* the client has the exposure */
	tf_test_send_u64(p, 5);		 /* it writes after a pause */
	CHECK(tf_session_wait(s, 1, &wc, long_ms) == 1);
	CHECKF(wc.wr_id == 20 && wc.status == TF_WC_SUCCESS &&
		       wc.imm_data == IMM + 1,
	       "wait: %s", tf_test_wc_str(&wc));

	CHECK(tf_test_recv_u64(p) == 6); /* the client waits for a second */
	usleep(50000);
	CHECK_OK(tf_session_expose(s, b, 0, 64, TF_ACCESS_REMOTE_READ, &x));

	CHECK(tf_test_recv_u64(p) == 7); /* it has it */
	CHECK(tf_session_arm(s) >= 0);
	tf_test_send_u64(p, 7); /* CLOSE on the control QP */
	fd_state(s, "close (control QP)", TF_SESSION_PEER_CLOSED);
	tf_session_close(s);

	/* 3: the peer's death on a kept connection. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s));
	CHECK(tf_test_recv_u64(p) == 8);
	CHECK(tf_session_arm(s) >= 0);
	tf_test_pair_kill_peer(p);
	fd_state(s, "peer death", TF_SESSION_BROKEN);
	tf_session_close(s);
	tf_listener_destroy(l);
}

static void client(struct tf_pair *p, tf_node_t *node)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	int long_ms = 10 * tf_test_timeout_ms();
	tf_session_t *s;
	uint8_t *m;
	int b;

	/* 1 */
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, long_ms));
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	tf_test_fill(m, 64, 1);
	tf_test_send_u64(p, 0);
	CHECK(tf_test_recv_u64(p) == 1);
	CHECK_OK(tf_session_write_imm(s, b, 0, 0, 0, 64, IMM, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
	CHECK(tf_test_recv_u64(p) == 2);
	CHECK_OK(tf_session_send(s, b, 0, 64, 2));
	st_expect(s, 2, TF_WC_SUCCESS, NULL);
	CHECK(tf_test_recv_u64(p) == 3);
	tf_session_close(s);

	/* 2 */
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK(tf_session_reused(s));
	CHECK(tf_session_arm(s) >= 0);
	tf_test_send_u64(p, 4); /* the server exposes */
	for (int i = 0; i < 64 && tf_session_peer_count(s) < 1; i++)
		sleep_once(s, "expose (control QP)");
	CHECK(tf_session_peer_count(s) == 1);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	tf_test_send_u64(p, 5);
	CHECK(tf_test_recv_u64(p) == 5);
	/* Well past the spin: the server's wait sleeps. */
	usleep(50000);
	CHECK_OK(tf_session_write_imm(s, b, 0, 0, 0, 0, IMM + 1, 3));
	st_expect(s, 3, TF_WC_SUCCESS, NULL);
	tf_test_send_u64(p, 6);
	CHECK_OK(tf_session_wait_peer(s, 2, long_ms));
	tf_test_send_u64(p, 7);
	CHECK(tf_test_recv_u64(p) == 7);
	tf_session_close(s);

	/* 3: killed while the session is open. */
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	tf_test_send_u64(p, 8);
	for (;;)
		pause();
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("conf_session_fd");
	tf_test_pair_open(&p);
	/* The completion case is a WRITE_WITH_IMM. */
	tf_test_require_caps(&p, TF_CAP_IMM_DATA,
			     "immediate data (iWARP has none)");
	tf_test_tolerate_log(true);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_A)
		server(&p, node);
	else
		client(&p, node);
	tf_node_destroy(node);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
