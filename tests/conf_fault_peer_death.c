/* SPDX-License-Identifier: MIT */
/*
 * conf_fault_peer_death: a peer dies (SIGKILL, or an abortive close with
 * SO_LINGER 0) at each phase of a session, and the survivor gets errors,
 * not hangs, within a bounded time and is left with nothing: no window
 * bound, no slice rented, no session or connection live, VmLck and the
 * context's pinned bytes and its open file descriptors back to where they
 * were before the phase.
 *
 * The survivor is this process (it serves on a listener, or connects to a
 * peer that serves); each victim is this executable started again (see
 * fault_util.h).  Phases:
 *   hello     client killed after its TCP connect, before accept returned
 *   deferred  client killed while it waits for the deferred ACCEPT
 *   exposed   client killed idle, after the server exposed three buffers
 *   srvhello  server killed while the survivor's connect waits for its
 *             answer
 *   transfer  server killed while the survivor (client) has READs and
 *             WRITEs in flight against its exposures
 *   closing   client killed while the survivor closes (on a node that
 *             keeps connections, so close waits for the peer's CLOSE)
 *   peerclose client killed while it closes (revokes, sends CLOSE)
 *   reset     client resets the bootstrap connection (SO_LINGER 0)
 */
#include <netinet/in.h>
#include <sys/socket.h>

#include "fault_util.h"
#include "session_util.h"

#define LEN	  65536
#define TMO_MS	  1000 /* node timeout of both sides */
#define INFLIGHT  8
#define LINGER_MS 3000 /* soft tcp: TCP_LINGER_NS plus slack */

/* Bound on noticing a dead peer: the node timeout for the bootstrap, the
 * QP timeout (TOLLFREE_QP_TIMEOUT_MS, 4 s) for work in flight, plus slack
 * for a loaded machine. */
#define BOUND_MS 15000

static tf_node_t *make_node(tf_context_t *ctx)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE,
		.timeout_ms = TMO_MS,
		.qp_cache = 0,
	};
	tf_node_t *node;

	CHECK_OK(tf_node_create(ctx, &np, &node));
	return node;
}

/* ------------------------------------------------------------ victim */

static void peer_client(tf_node_t *node, const char *phase, uint16_t port,
			int nfd)
{
	tf_session_t *s;

	if (!strcmp(phase, "hello")) {
		/* A raw connection that sends part of a header and stays. */
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons(port),
					.sin_addr.s_addr = htonl(0x7f000001)};
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		CHECK(fd >= 0);
		CHECK(!connect(fd, (struct sockaddr *)&a, sizeof(a)));
		CHECK(write(fd, "\0\1", 2) == 2);
		ft_send(nfd, 1);
		for (;;)
			pause();
	}
	if (!strcmp(phase, "deferred")) {
		ft_send(nfd, 1);
		/* Blocks until the survivor establishes or we are killed. */
		tf_session_connect(node, "127.0.0.1", port, NULL, &s);
		for (;;)
			pause();
	}
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 3, 4 * tf_test_timeout_ms()));
	if (!strcmp(phase, "reset")) {
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		int n_sock = 0;

		/* Every socket of this process (the session's bootstrap
		 * socket is among them; tf_session_fd() is its wait set, not
		 * the socket) closes with a RST at exit. */
		for (int fd = 3; fd < 1024; fd++)
			n_sock += !setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg,
					      sizeof(lg));
		CHECK(n_sock > 0);
		ft_send(nfd, 1);
		/* Exit closes the socket with a RST. */
		_exit(0);
	}
	ft_send(nfd, 1);
	if (!strcmp(phase, "peerclose")) {
		tf_session_close(s);
		_exit(0);
	}
	if (!strcmp(phase, "clean")) {
		tf_session_close(s);
		tf_node_destroy(node);
		_exit(0);
	}
	for (;;) {
		struct tf_wc wc[4];

		tf_session_wait(s, 4, wc, 100);
	}
}

/* The server victim of the transfer phase: exposes two slices, serves. */
static void peer_server(tf_node_t *node, int nfd)
{
	tf_listener_t *l;
	tf_session_t *s;
	int b, x;

	CHECK_OK(tf_listener_create(node, NULL, &l));
	ft_send(nfd, tf_listener_port(l));
	s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	for (int i = 0; i < 2; i++) {
		CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
		CHECK_OK(tf_session_expose(
			s, b, 0, LEN,
			TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, &x));
	}
	CHECK_OK(tf_session_establish(s));
	for (;;) {
		struct tf_wc wc[4];

		tf_session_wait(s, 4, wc, 100);
	}
}

/* A server that accepts the TCP connection, reads, never answers. */
static void peer_raw_server(int nfd)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(0x7f000001)};
	socklen_t al = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fd;
	char buf[256];

	CHECK(lfd >= 0);
	CHECK(!bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	CHECK(!listen(lfd, 4));
	CHECK(!getsockname(lfd, (struct sockaddr *)&a, &al));
	ft_send(nfd, ntohs(a.sin_port));
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0);
	for (;;)
		if (read(fd, buf, sizeof(buf)) <= 0)
			pause();
}

static int peer_main(char **argv)
{
	tf_context_t *ctx;
	tf_node_t *node;
	int nfd = atoi(argv[5]);

	tf_test_begin("conf_fault_peer_death.victim");
	/* A victim is killed or aborts: its log is printed for the reader,
	 * never judged (it does not reach tf_test_end). */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_context_open(NULL, &ctx));
	node = make_node(ctx);
	if (!strcmp(argv[2], "transfer"))
		peer_server(node, nfd);
	if (!strcmp(argv[2], "srvhello"))
		peer_raw_server(nfd);
	else
		peer_client(node, argv[2], (uint16_t)atoi(argv[3]), nfd);
	return 1;
}

/* ---------------------------------------------------------- survivor */

struct base {
	int fds;
	long vmlck, vmpin;
	uint64_t pinned;
	tf_node_stats_t st;
};

struct surv {
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;
	uint8_t *user;
	struct base b0;
};

static void snap(struct surv *v, struct base *b)
{
	tf_context_stats_t cs;

	/* The user buffer may sit in the registration cache; drop it so
	 * that only leaks remain. */
	tf_rcache_invalidate(tf_node_rcache(v->node), v->user, LEN);
	/* Every sample with a full connection stock, where the node makes
	 * it inline (a listener's idle accept refills it too). */
	CHECK(tf_node_progress(v->node) >= 0);
	CHECK_OK(tf_context_query_stats(v->ctx, &cs));
	CHECK_OK(tf_node_query_stats(v->node, &b->st));
	/* A socket the node made ahead for its next connect is not a
	 * leak: it is there from the first connect on. */
	b->fds = ft_count_fds() - (int)b->st.stock_sockets;
	b->vmlck = tf_test_vmlck();
	b->vmpin = tf_test_vmpin();
	b->pinned = cs.pinned_bytes;
}

static void check_clean(struct surv *v, const char *phase)
{
	uint64_t t0 = ft_now_ms();
	struct base b;
	tf_pool_stats_t ps;
	int calls = 0;

	/* The soft tcp transport lets a failed connection linger (up to 2
	 * s, during progress calls) to drain a queued NAK before it closes
	 * the socket; give it that time and at least 1024 progress calls (a
	 * loaded machine makes fewer in the time): a leaked fd does not go
	 * away by making progress. */
	for (;;) {
		snap(v, &b);
		if (b.fds == v->b0.fds ||
		    (ft_now_ms() - t0 > LINGER_MS && calls >= 1024))
			break;
		tf_context_progress(v->ctx);
		calls++;
		usleep(1000);
	}
	if (b.fds != v->b0.fds)
		ft_dump_fds();
	if (ft_now_ms() - t0 > 1)
		tf_test_info("%s: fds back after %llu ms", phase,
			     (unsigned long long)(ft_now_ms() - t0));
	CHECKF(b.st.windows_live == 0, "%s: %llu windows still bound", phase,
	       (unsigned long long)b.st.windows_live);
	CHECKF(b.st.slices_rented == 0, "%s: %llu slices still rented", phase,
	       (unsigned long long)b.st.slices_rented);
	CHECKF(b.st.sessions_live == 0, "%s: %llu sessions live", phase,
	       (unsigned long long)b.st.sessions_live);
	CHECKF(b.st.qp_idle == 0, "%s: %llu connections kept", phase,
	       (unsigned long long)b.st.qp_idle);
	CHECK_OK(tf_pool_query_stats(tf_node_pool(v->node), &ps));
	CHECKF(ps.rents == ps.returns, "%s: %llu rents, %llu returns", phase,
	       (unsigned long long)ps.rents, (unsigned long long)ps.returns);
	CHECKF(b.fds == v->b0.fds, "%s: %d fds open, %d before", phase, b.fds,
	       v->b0.fds);
	CHECKF(b.vmlck == v->b0.vmlck, "%s: VmLck %ld, %ld before", phase,
	       b.vmlck, v->b0.vmlck);
	CHECKF(b.vmpin == v->b0.vmpin, "%s: VmPin %ld, %ld before", phase,
	       b.vmpin, v->b0.vmpin);
	CHECKF(b.pinned == v->b0.pinned, "%s: pinned %llu, %llu before", phase,
	       (unsigned long long)b.pinned, (unsigned long long)v->b0.pinned);
}

/*
 * The victim dies (or is about to, in a child that kills it): from here
 * the survivor's errors are expected, until end_phase() found it clean
 * again.  Before the fault, and in the clean phase, nothing may be logged.
 */
static void fault_begin(void)
{
	tf_test_tolerate_log(true);
}

static void end_phase(struct surv *v, const char *phase)
{
	CHECKF(tf_test_tolerating(), "%s: no fault was provoked", phase);
	check_clean(v, phase);
	tf_test_tolerate_log(false);
}

/* Serve @s until it is broken or closed by the peer, within the bound. */
static int serve_bounded(tf_session_t *s, const char *phase)
{
	uint64_t t0 = ft_now_ms();
	struct tf_wc wc[8];
	int st;

	for (;;) {
		int n = tf_session_wait(s, 8, wc, 10);

		st = tf_session_state(s);
		if (n < 0 || st == TF_SESSION_BROKEN ||
		    st == TF_SESSION_PEER_CLOSED)
			break;
		CHECKF(ft_now_ms() - t0 < BOUND_MS,
		       "%s: the peer's death went unnoticed for %d ms", phase,
		       BOUND_MS);
	}
	tf_test_info("%s: noticed in %llu ms (state %d)", phase,
		     (unsigned long long)(ft_now_ms() - t0), st);
	return st;
}

/* Accept a session from a client victim and expose three buffers. */
static tf_session_t *accept_exposed(struct surv *v)
{
	tf_session_t *s = st_accept(v->l, TF_SESSION_DEFER_ESTABLISH);
	int b, x;

	for (int i = 0; i < 2; i++) {
		CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
		CHECK_OK(tf_session_expose(
			s, b, 0, LEN,
			TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, &x));
	}
	CHECK_OK(tf_session_attach(s, v->user, LEN, TF_ATTACH_IN, &b));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_READ, &x));
	CHECK_OK(tf_session_establish(s));
	return s;
}

static pid_t spawn_client(struct surv *v, const char *phase, int *rfd)
{
	char port[16];

	snprintf(port, sizeof(port), "%u", tf_listener_port(v->l));
	return ft_spawn(phase, port, "0", rfd);
}

static void wait_ready(int rfd, const char *phase)
{
	uint64_t one;

	CHECKF(ft_recv(rfd, &one, 4 * tf_test_timeout_ms()),
	       "%s: the victim never got ready", phase);
}

/* A clean session first: it warms everything the provider creates once
 * (pool chunks, transport sockets), so that the baseline holds. */
static void phase_clean(struct surv *v)
{
	int rfd, st;
	pid_t pid = spawn_client(v, "clean", &rfd);
	tf_session_t *s = accept_exposed(v);

	wait_ready(rfd, "clean");
	CHECK(serve_bounded(s, "clean") == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	st = ft_reap(pid, 0);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "clean peer: status %d",
	       st);
	close(rfd);
}

static void phase_hello(struct surv *v)
{
	tf_session_t *s = NULL;
	int rfd, ret;
	uint64_t t0;
	pid_t pid = spawn_client(v, "hello", &rfd);

	wait_ready(rfd, "hello");
	/* Let the listener see the half-sent header, then kill. */
	CHECK(tf_listener_accept(v->l, NULL, 100, &s) == -EAGAIN);
	fault_begin();
	ft_reap(pid, SIGKILL);
	t0 = ft_now_ms();
	ret = tf_listener_accept(v->l, NULL, 3 * TMO_MS, &s);
	CHECKF(ret == -EAGAIN, "hello: accept after the death = %d (%s)", ret,
	       tf_strerror(ret));
	tf_test_info("hello: accept returned in %llu ms",
		     (unsigned long long)(ft_now_ms() - t0));
	close(rfd);
}

static void phase_deferred(struct surv *v)
{
	int rfd, ret;
	pid_t pid = spawn_client(v, "deferred", &rfd);
	tf_session_t *s = st_accept(v->l, TF_SESSION_DEFER_ESTABLISH);
	int b, x;

	wait_ready(rfd, "deferred");
	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_READ, &x));
	fault_begin();
	ft_reap(pid, SIGKILL);
	/* The ACCEPT may still fit in the socket buffer; either way the
	 * session must end up broken. */
	ret = tf_session_establish(s);
	tf_test_info("deferred: establish after the death = %d (%s)", ret,
		     tf_strerror(ret));
	if (ret == 0)
		CHECK(serve_bounded(s, "deferred") == TF_SESSION_BROKEN);
	tf_session_close(s);
	close(rfd);
}

static void phase_exposed(struct surv *v, const char *phase)
{
	int rfd, st;
	pid_t pid = spawn_client(v, phase, &rfd);
	tf_session_t *s = accept_exposed(v);
	tf_node_stats_t ns;

	wait_ready(rfd, phase);
	/* The "reset" victim aborts its connection on its own once ready. */
	fault_begin();
	CHECK_OK(tf_node_query_stats(v->node, &ns));
	CHECKF(ns.windows_live + ns.expose_mr_fallback -
			       v->b0.st.expose_mr_fallback >=
		       3,
	       "%s: exposures not counted", phase);
	if (!strcmp(phase, "exposed") || !strcmp(phase, "peerclose"))
		ft_reap(pid, SIGKILL);
	st = serve_bounded(s, phase);
	if (strcmp(phase, "peerclose"))
		CHECKF(st == TF_SESSION_BROKEN, "%s: state %d", phase, st);
	tf_session_close(s);
	if (!strcmp(phase, "reset"))
		ft_reap(pid, 0);
	close(rfd);
}

static void phase_closing(struct surv *v)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE,
		.timeout_ms = 4 * TMO_MS,
		.qp_cache = 4,
	};
	struct surv v2 = *v;
	tf_session_t *s;
	char port[16];
	pid_t pid, killer;
	uint64_t t0, took;
	int rfd;

	/* A node that keeps connections: its close waits (up to the node
	 * timeout) for the peer's CLOSE, and the peer dies meanwhile. */
	CHECK_OK(tf_node_create(v->ctx, &np, &v2.node));
	CHECK_OK(tf_listener_create(v2.node, NULL, &v2.l));
	snprintf(port, sizeof(port), "%u", tf_listener_port(v2.l));
	pid = ft_spawn("closing", port, "0", &rfd);
	s = accept_exposed(&v2);
	wait_ready(rfd, "closing");
	fault_begin();
	killer = fork();
	CHECK(killer >= 0);
	if (killer == 0) {
		usleep(100 * 1000);
		kill(pid, SIGKILL);
		_exit(0);
	}
	t0 = ft_now_ms();
	tf_session_close(s);
	took = ft_now_ms() - t0;
	tf_test_info("closing: close returned in %llu ms (peer killed after "
		     "100 ms, node timeout %d ms)",
		     (unsigned long long)took, 4 * TMO_MS);
	/* The death ends the wait: close must not sit out the timeout. */
	CHECKF(took < 4 * TMO_MS, "closing: close took %llu ms",
	       (unsigned long long)took);
	ft_reap(killer, 0);
	ft_reap(pid, 0);
	close(rfd);
	tf_listener_destroy(v2.l);
	tf_rcache_invalidate(tf_node_rcache(v2.node), v->user, LEN);
	{
		tf_node_stats_t st;

		CHECK_OK(tf_node_query_stats(v2.node, &st));
		CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
			       st.sessions_live == 0 && st.qp_idle == 0,
		       "closing: %llu windows, %llu slices, %llu sessions, "
		       "%llu kept",
		       (unsigned long long)st.windows_live,
		       (unsigned long long)st.slices_rented,
		       (unsigned long long)st.sessions_live,
		       (unsigned long long)st.qp_idle);
	}
	tf_node_destroy(v2.node);
}

/* The server dies while the survivor's connect waits for its answer. */
static void phase_srvhello(struct surv *v)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE,
		.timeout_ms = 4 * TMO_MS,
		.qp_cache = 0,
	};
	tf_node_t *node;
	tf_session_t *s;
	uint64_t port, t0, took;
	pid_t pid, killer;
	int rfd, ret;

	pid = ft_spawn("srvhello", "0", "0", &rfd);
	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_node_create(v->ctx, &np, &node));
	fault_begin();
	killer = fork();
	CHECK(killer >= 0);
	if (killer == 0) {
		usleep(100 * 1000);
		kill(pid, SIGKILL);
		_exit(0);
	}
	t0 = ft_now_ms();
	ret = tf_session_connect(node, "127.0.0.1", (uint16_t)port, NULL, &s);
	took = ft_now_ms() - t0;
	tf_test_info("srvhello: connect %s in %llu ms (server killed after "
		     "100 ms, node timeout %d ms)",
		     tf_strerror(ret), (unsigned long long)took, 4 * TMO_MS);
	CHECKF(ret < 0, "srvhello: connect to a dead server succeeded");
	CHECKF(took < 4 * TMO_MS, "srvhello: connect took %llu ms",
	       (unsigned long long)took);
	ft_reap(killer, 0);
	ft_reap(pid, 0);
	close(rfd);
	tf_node_destroy(node);
}

static void phase_transfer(struct surv *v)
{
	int rfd, b, st, posted = 0, done = 0, errs = 0, ret = 0;
	uint64_t port, t0 = 0;
	pid_t pid = ft_spawn("transfer", "0", "0", &rfd);
	tf_session_t *s;

	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_connect(v->node, "127.0.0.1", (uint16_t)port, NULL,
				    &s));
	CHECK_OK(tf_session_wait_peer(s, 2, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	for (uint64_t i = 0;; i++) {
		struct tf_wc wc[INFLIGHT];
		int n;

		/* Keep INFLIGHT operations outstanding; kill after 64. */
		while (ret == 0 && posted - done < INFLIGHT) {
			int x = posted % 2;

			ret = (posted & 1) ? tf_session_write(s, b, 0, x, 0,
							      4096, posted)
					   : tf_session_read(s, b, 0, x, 0,
							     4096, posted);
			if (ret == 0)
				posted++;
		}
		if (posted >= 64 && !t0) {
			fault_begin();
			ft_reap(pid, SIGKILL);
			t0 = ft_now_ms();
		}
		n = tf_session_wait(s, INFLIGHT, wc, 10);
		if (n < 0)
			break;
		for (int k = 0; k < n; k++, done++)
			errs += wc[k].status != TF_WC_SUCCESS;
		st = tf_session_state(s);
		if (t0 && (ret < 0 || errs || st == TF_SESSION_BROKEN))
			break;
		CHECKF(!t0 || ft_now_ms() - t0 < BOUND_MS,
		       "transfer: %d ops, no error %d ms after the death",
		       posted, BOUND_MS);
		CHECKF(!ret || t0, "transfer: post before the kill = %d", ret);
		CHECKF(t0 || !errs, "transfer: error before the kill");
	}
	tf_test_info("transfer: noticed in %llu ms (post %d, %d error "
		     "completions, state %d)",
		     (unsigned long long)(ft_now_ms() - t0), ret, errs,
		     tf_session_state(s));
	tf_session_close(s);
	close(rfd);
}

int main(int argc, char **argv)
{
	struct surv v = {0};
	tf_node_stats_t ns;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return peer_main(argv);
	tf_test_begin("conf_fault_peer_death");
	signal(SIGPIPE, SIG_IGN);
	v.user = aligned_alloc(4096, LEN);
	CHECK(v.user);
	memset(v.user, 7, LEN);
	/* The soft shm transport keeps a finished peer attached (its pidfd
	 * and mappings) until progress notices that it died, which would
	 * move the baseline of open fds taken after the clean phase; that
	 * cache's handling of dead peers has its own test
	 * (soft_shm_peer_cache). */
	setenv("TOLLFREE_SOFT_SHM_PEER_CACHE", "0", 1);
	CHECK_OK(tf_context_open(NULL, &v.ctx));
	v.node = make_node(v.ctx);
	CHECK_OK(tf_listener_create(v.node, NULL, &v.l));

	phase_clean(&v);
	/* A connection of the clean phase may still linger in the soft
	 * tcp transport (closed during progress calls within LINGER_MS):
	 * the baseline must not count it, or a later phase finds one fd
	 * fewer. */
	for (uint64_t t0 = ft_now_ms(); ft_now_ms() - t0 < LINGER_MS;) {
		tf_context_progress(v.ctx);
		usleep(1000);
	}
	snap(&v, &v.b0);
	check_clean(&v, "clean");

	phase_hello(&v);
	end_phase(&v, "hello");
	phase_deferred(&v);
	end_phase(&v, "deferred");
	phase_exposed(&v, "exposed");
	end_phase(&v, "exposed");
	phase_exposed(&v, "peerclose");
	end_phase(&v, "peerclose");
	phase_exposed(&v, "reset");
	end_phase(&v, "reset");
	phase_closing(&v);
	end_phase(&v, "closing");
	phase_srvhello(&v);
	end_phase(&v, "srvhello");
	phase_transfer(&v);
	end_phase(&v, "transfer");

	CHECK_OK(tf_node_query_stats(v.node, &ns));
	tf_test_info("sessions opened %llu closed %llu, qp broken %llu",
		     (unsigned long long)ns.sessions_opened,
		     (unsigned long long)ns.sessions_closed,
		     (unsigned long long)ns.qp_broken);
	CHECK(ns.sessions_opened == ns.sessions_closed);
	tf_listener_destroy(v.l);
	tf_node_destroy(v.node);
	tf_context_close(v.ctx);
	free(v.user);
	return tf_test_end();
}
