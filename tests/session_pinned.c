/* SPDX-License-Identifier: MIT */
/*
 * session_pinned: one bound on everything a context pins
 * (TOLLFREE_MAX_PINNED), and connections past it refused clearly.
 *
 * The server (a peer process, so that its VmLck is its own) runs with
 * TOLLFREE_MAX_PINNED=4M.  What it pins is its pool's chunk, the control
 * QP slots of its connection stock and of every connection (about
 * 128 KiB each).  Each session it accepts gets 64 rented bytes exposed
 * for WRITE.  Client 1 opens sessions and holds them until it is refused:
 *   - the refusal is -ENOBUFS from tf_session_connect (the server's
 *     REJECT), after a number of sessions that fits the bound;
 *   - the server's VmLck (+ VmPin) never passes the bound (checked at
 *     every turn of its loop), its stats report the bound and the
 *     refusals;
 *   - the sessions already open still work (a WRITE on one of them);
 *   - once client 1 closed some (its node keeps one idle connection, the
 *     others end), a session from client 2 (another context) opens and
 *     WRITEs.
 * Before the bound existed, the server pinned 128 KiB more for every
 * connection without limit (44.5 MB on shm in the report of issue 14):
 * client 1 was never refused and the server's VmLck passed 4 MiB.
 */
#include <signal.h>
#include <string.h>

#include "fault_util.h"
#include "session_util.h"

#define BOUND	  (4ull << 20)
#define BOUND_STR "4M"
#define MAX_SESS  200 /* well past what fits under BOUND */
#define CLOSE_N	  8

static volatile sig_atomic_t stop;

static void on_usr1(int sig)
{
	(void)sig;
	stop = 1;
}

/* Nodes with small pool chunks: the clients' pinning stays far below
 * RLIMIT_MEMLOCK (8 MiB by default) where the test is not privileged. */
static tf_node_t *small_node(tf_context_t *ctx, unsigned qp_cache)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE,
			       .chunk_size = 64 * 1024};
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_POOL, .pool = &pp};
	tf_node_t *node;

	if (qp_cache) {
		np.field_mask |= TF_NODE_PARAM_QP_CACHE;
		np.qp_cache = qp_cache;
	}
	CHECK_OK(tf_node_create(ctx, &np, &node));
	st_stock_settle(node);
	return node;
}

/* ------------------------------------------------------------- server */

static int server_main(char **argv)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	struct sigaction sa = {.sa_handler = on_usr1};
	static tf_session_t *ss[MAX_SESS];
	int wfd = (int)strtol(argv[5], NULL, 10), n = 0, served = 0, broken = 0;
	long vmlck, vmlck_max = 0;
	tf_context_stats_t cs;
	tf_node_stats_t st;
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;

	/* Before the first library call: the configuration is read once. */
	setenv("TOLLFREE_MAX_PINNED", BOUND_STR, 1);
	tf_test_begin("session_pinned.server");
	CHECK(!sigaction(SIGUSR1, &sa, NULL));
	CHECK_OK(tf_context_open(NULL, &ctx));
	node = small_node(ctx, 0);
	CHECK_OK(tf_listener_create(node, NULL, &l));
	ft_send(wfd, tf_listener_port(l));
	/* Refusals are logged, as many as the client provokes. */
	tf_test_tolerate_log(true);
	while (!stop) {
		tf_session_t *s;
		int ret = tf_listener_accept(l, &sp, 10, &s), b, x;

		if (!ret) {
			CHECK(n < MAX_SESS);
			CHECK_OK(tf_session_rent(s, 64, &b, NULL));
			CHECK_OK(tf_session_expose(s, b, 0, 64,
						   TF_ACCESS_REMOTE_WRITE, &x));
			CHECK_OK(tf_session_establish(s));
			ss[n++] = s;
			served++;
		} else {
			/* -EINTR: the signal to stop. */
			CHECKF(ret == -EAGAIN || ret == -EINTR, "accept: %s",
			       tf_strerror(ret));
		}
		/* Serve the sessions (tcp: the clients' WRITEs need us) and
		 * close those the clients closed. */
		for (int i = 0; i < n; i++) {
			struct tf_wc wc[4];
			int state;

			tf_session_wait(ss[i], 4, wc, 0);
			state = tf_session_state(ss[i]);
			if (state != TF_SESSION_PEER_CLOSED &&
			    state != TF_SESSION_BROKEN)
				continue;
			broken += state == TF_SESSION_BROKEN;
			tf_session_close(ss[i]);
			ss[i--] = ss[--n];
		}
		/* Locked (the soft provider mlocks) plus long-term pinned
		 * (ibv_reg_mr on a verbs device). */
		vmlck = tf_test_vmlck() +
			(tf_test_vmpin() > 0 ? tf_test_vmpin() : 0);
		if (vmlck > vmlck_max)
			vmlck_max = vmlck;
		CHECKF(vmlck <= (long)BOUND,
		       "VmLck + VmPin %ld bytes with %d sessions, past the "
		       "bound %llu",
		       vmlck, n, (unsigned long long)BOUND);
	}
	tf_test_tolerate_log(false);
	CHECK_OK(tf_context_query_stats(ctx, &cs));
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("server: %d sessions served, VmLck at most %ld bytes, "
		     "%llu pinned now, %llu registrations refused, %llu "
		     "handshakes rejected",
		     served, vmlck_max, (unsigned long long)cs.pinned_bytes,
		     (unsigned long long)cs.pinned_refused,
		     (unsigned long long)st.handshake_rejects);
	CHECKF(cs.max_pinned == BOUND, "max_pinned %llu",
	       (unsigned long long)cs.max_pinned);
	CHECK(cs.pinned_bytes <= BOUND);
	CHECK(cs.pinned_refused >= 1);
	CHECK(st.handshake_rejects >= 1);
	CHECKF(broken == 0, "%d sessions broke", broken);
	for (int i = 0; i < n; i++)
		tf_session_close(ss[i]);
	tf_listener_destroy(l);
	tf_node_destroy(node);
	tf_context_close(ctx);
	ft_send(wfd, (uint64_t)served);
	return tf_test_end();
}

/* ------------------------------------------------------------- clients */

/* WRITE 8 bytes into the server's exposure of @s: the session works. */
static void write_once(tf_session_t *s, uint64_t wr_id)
{
	struct tf_wc wc;
	void *a;
	int b;

	CHECK_OK(tf_session_rent(s, 64, &b, &a));
	memcpy(a, "pinned!", 8);
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_write(s, b, 0, 0, 0, 8, wr_id));
	st_expect(s, wr_id, TF_WC_SUCCESS, &wc);
}

int main(int argc, char **argv)
{
	static tf_session_t *ss[MAX_SESS];
	tf_context_t *ctx1, *ctx2;
	tf_node_t *node1, *node2;
	tf_session_t *s2 = NULL;
	uint64_t port, served;
	int n = 0, ret, status, rfd;
	pid_t peer;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return server_main(argv);
	tf_test_begin("session_pinned");
	peer = ft_spawn("server", "0", "0", &rfd);
	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));

	/* Client 1 keeps one idle connection at most: the ones it closes
	 * beyond that end, and the server unpins their control QPs. */
	CHECK_OK(tf_context_open(NULL, &ctx1));
	node1 = small_node(ctx1, 1);
	tf_test_tolerate_log(true); /* the refusal is logged */
	for (;;) {
		CHECKF(n < MAX_SESS, "%d sessions and no refusal", n);
		ret = tf_session_connect(node1, "127.0.0.1", (uint16_t)port,
					 NULL, &ss[n]);
		if (ret)
			break;
		n++;
	}
	tf_test_tolerate_log(false);
	tf_test_info("client 1: refused after %d sessions: %s", n,
		     tf_strerror(ret));
	CHECKF(ret == -ENOBUFS, "refusal %d (%s), expected -ENOBUFS", ret,
	       tf_strerror(ret));
	/* 4 MiB hold the pool chunk, the stock and some 20 connections of
	 * 128 KiB, not 200. */
	CHECKF(n > CLOSE_N && n < 64, "%d sessions before the refusal", n);

	/* The server keeps serving the sessions it has. */
	write_once(ss[n - 1], 1);
	for (int i = 0; i < CLOSE_N; i++)
		tf_session_close(ss[--n]);

	/* Client 2: served once the server has seen client 1's connections
	 * end (it learns of each from its socket, in its own time). */
	CHECK_OK(tf_context_open(NULL, &ctx2));
	node2 = small_node(ctx2, 0);
	tf_test_tolerate_log(true);
	for (uint64_t t0 = ft_now_ms();
	     ft_now_ms() - t0 < 4 * (uint64_t)tf_test_timeout_ms();) {
		ret = tf_session_connect(node2, "127.0.0.1", (uint16_t)port,
					 NULL, &s2);
		if (ret != -ENOBUFS)
			break;
		usleep(10000);
	}
	tf_test_tolerate_log(false);
	CHECKF(ret == 0, "client 2: %s", tf_strerror(ret));
	write_once(s2, 2);
	tf_session_close(s2);

	/* And client 1's remaining sessions still work. */
	write_once(ss[0], 3);
	while (n)
		tf_session_close(ss[--n]);
	tf_node_destroy(node2);
	tf_context_close(ctx2);
	tf_node_destroy(node1);
	tf_context_close(ctx1);

	CHECK(!kill(peer, SIGUSR1));
	CHECKF(ft_recv(rfd, &served, 4 * tf_test_timeout_ms()),
	       "the server did not finish");
	status = ft_reap(peer, 0);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "server failed (status 0x%x)", status);
	tf_test_info("server served %llu sessions", (unsigned long long)served);
	return tf_test_end();
}
