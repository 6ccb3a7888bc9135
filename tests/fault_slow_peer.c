/* SPDX-License-Identifier: MIT */
/*
 * fault_slow_peer: a peer that stops reading never blocks the sender
 * forever.  Each call returns within a bound and the failure is a clear
 * error:
 *   - connect to a raw TCP server that accepts and never reads or
 *     answers: -ETIMEDOUT (or another error) within the node timeout;
 *   - a raw TCP client that connects to the listener and stays silent:
 *     accept returns -EAGAIN in time, and a real session is still served
 *     meanwhile;
 *   - a session whose peer process is stopped (SIGSTOP): one-sided WRITEs
 *     are posted until the transport pushes back; no post blocks, and
 *     within the QP timeout the work completes in error or the session
 *     breaks; close returns within the node timeout.  Nothing is left
 *     behind (windows, slices, fds, VmLck).
 * The transport is the environment's; unset, the soft tcp transport.
 */
#include <netinet/in.h>
#include <sys/socket.h>

#include "fault_util.h"

#define TMO_MS	   1000 /* node timeout */
#define QP_TMO_MS  "1500"
#define PLEN	   (1 << 20)
#define WLEN	   65536
#define CALL_MAX   1000 /* ms: no single call may take longer */
#define NOTICE_MAX 15000

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

static int listen_raw(uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(0x7f000001)};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	CHECK(!bind(fd, (struct sockaddr *)&a, sizeof(a)));
	CHECK(!listen(fd, 8));
	CHECK(!getsockname(fd, (struct sockaddr *)&a, &al));
	*port = ntohs(a.sin_port);
	return fd;
}

/* A server that accepts the TCP connection and never reads or writes. */
static void raw_server(tf_node_t *node)
{
	uint16_t port;
	int lfd = listen_raw(&port), ret;
	tf_session_t *s;
	uint64_t t0 = ft_now_ms();

	ret = TOLERATED(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	CHECKF(ret < 0, "connect to a silent server succeeded");
	CHECKF(ft_now_ms() - t0 < 3 * TMO_MS + 2000,
	       "connect to a silent server took %llu ms",
	       (unsigned long long)(ft_now_ms() - t0));
	tf_test_info("silent server: connect %s after %llu ms",
		     tf_strerror(ret), (unsigned long long)(ft_now_ms() - t0));
	close(lfd);
}

/* A raw client that connects to our listener and never sends. */
static void raw_client(tf_listener_t *l)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(tf_listener_port(l)),
				.sin_addr.s_addr = htonl(0x7f000001)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), ret;
	tf_session_t *s;
	uint64_t t0, w0, el, waited;

	CHECK(fd >= 0);
	CHECK(!connect(fd, (struct sockaddr *)&a, sizeof(a)));
	t0 = ft_now_ms();
	w0 = ft_cpu_wait_ms();
	ret = TOLERATED(tf_listener_accept(l, NULL, 2 * TMO_MS, &s));
	el = ft_now_ms() - t0;
	waited = ft_cpu_wait_ms() - w0;
	CHECKF(ret == -EAGAIN, "accept with a silent client: %d (%s)", ret,
	       tf_strerror(ret));
	/* Time spent waiting for a CPU (a loaded machine) is not the
	 * accept's: see ft_cpu_wait_ms. */
	CHECKF(el - (waited < el ? waited : el) < 2 * TMO_MS + CALL_MAX,
	       "accept took %llu ms, %llu of them waiting for a CPU",
	       (unsigned long long)el, (unsigned long long)waited);
	tf_test_info("silent client: accept %s after %llu ms (%llu waiting "
		     "for a CPU)",
		     tf_strerror(ret), (unsigned long long)el,
		     (unsigned long long)waited);
	close(fd);
}

static void check_clean(tf_context_t *ctx, tf_node_t *node, int fds0,
			long vmlck0, const char *what)
{
	tf_node_stats_t st;
	int fds = ft_count_fds();

	/* A failed tcp connection lingers up to 2 s, closed in progress. */
	for (uint64_t t0 = ft_now_ms(); fds != fds0 && ft_now_ms() - t0 < 3000;
	     fds = ft_count_fds()) {
		tf_context_progress(ctx);
		usleep(1000);
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
		       st.sessions_live == 0 && st.qp_idle == 0,
	       "%s: %llu windows, %llu slices, %llu sessions, %llu kept", what,
	       (unsigned long long)st.windows_live,
	       (unsigned long long)st.slices_rented,
	       (unsigned long long)st.sessions_live,
	       (unsigned long long)st.qp_idle);
	if (fds != fds0)
		ft_dump_fds();
	CHECKF(fds == fds0, "%s: %d fds, %d before", what, fds, fds0);
	CHECKF(tf_test_vmlck() == vmlck0, "%s: VmLck %ld, %ld before", what,
	       tf_test_vmlck(), vmlck0);
}

/* A session whose peer stops: WRITE into it until something gives. */
static void stopped_peer(tf_context_t *ctx, tf_node_t *node, int fds0,
			 long vmlck0)
{
	int rfd, b, ret = 0, posted = 0, done = 0, errs = 0, st;
	uint64_t port, t0, tstop, longest = 0;
	pid_t pid = ft_spawn("server", "0", "0", &rfd);
	tf_session_t *s;

	CHECK(ft_recv(rfd, &port, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_connect(node, "127.0.0.1", (uint16_t)port, NULL,
				    &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_rent(s, WLEN, &b, NULL));
	/* One write while the peer runs. */
	CHECK_OK(tf_session_write(s, b, 0, 0, 0, WLEN, 0));
	{
		struct tf_wc wc;

		CHECK(tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms()) ==
			      1 &&
		      wc.status == TF_WC_SUCCESS);
	}
	/* From here the QP times out and fails, and the connection is torn
	 * down: errors are expected until the survivor is clean again. */
	tf_test_tolerate_log(true);
	CHECK(!kill(pid, SIGSTOP));
	tstop = ft_now_ms();
	for (;;) {
		struct tf_wc wc[16];
		int n;

		if (!ret) {
			t0 = ft_now_ms();
			ret = tf_session_write(s, b, 0, 0,
					       (uint64_t)(posted % 16) * WLEN,
					       WLEN, (uint64_t)posted + 1);
			if (ft_now_ms() - t0 > longest)
				longest = ft_now_ms() - t0;
			if (!ret)
				posted++;
			else
				tf_test_info("stopped peer: post %d refused: "
					     "%s",
					     posted + 1, tf_strerror(ret));
		}
		t0 = ft_now_ms();
		n = tf_session_poll(s, 16, wc);
		if (ft_now_ms() - t0 > longest)
			longest = ft_now_ms() - t0;
		CHECK(n >= 0);
		for (int k = 0; k < n; k++, done++)
			if (wc[k].status != TF_WC_SUCCESS && !errs++)
				tf_test_info("stopped peer: first error "
					     "completion after %llu ms: %s",
					     (unsigned long long)(ft_now_ms() -
								  tstop),
					     tf_test_wc_str(&wc[k]));
		st = tf_session_state(s);
		if (errs || st == TF_SESSION_BROKEN)
			break;
		if (ft_now_ms() - tstop >= NOTICE_MAX ||
		    (done > 4096 && ft_now_ms() - tstop > 3000)) {
			/* Writes that keep completing are placed without
			 * the peer's CPU (the shm transport copies into the
			 * peer's memory itself, as an RDMA NIC would): the
			 * sender is not held, which is what is tested. */
			CHECKF(done > 16,
			       "stopped peer: %d writes posted, %d done, no "
			       "error after %d ms (post: %s)",
			       posted, done, NOTICE_MAX, tf_strerror(ret));
			tf_test_info("stopped peer: writes complete without "
				     "the peer");
			break;
		}
		if (ret)
			usleep(1000);
	}
	tf_test_info("stopped peer: %d writes posted (%d MiB), %d done, "
		     "%d errors, stopped after %llu ms, longest call %llu ms",
		     posted, (int)((uint64_t)posted * WLEN >> 20), done, errs,
		     (unsigned long long)(ft_now_ms() - tstop),
		     (unsigned long long)longest);
	CHECKF(longest < CALL_MAX, "a call blocked for %llu ms",
	       (unsigned long long)longest);
	t0 = ft_now_ms();
	tf_session_close(s);
	CHECKF(ft_now_ms() - t0 < 2 * TMO_MS + CALL_MAX,
	       "close with a stopped peer took %llu ms",
	       (unsigned long long)(ft_now_ms() - t0));
	ft_reap(pid, SIGKILL);
	close(rfd);
	check_clean(ctx, node, fds0, vmlck0, "stopped peer");
	tf_test_tolerate_log(false);
}

static int peer_main(char **argv)
{
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;
	tf_session_t *s;
	int b, x;

	tf_test_begin("fault_slow_peer.peer");
	/* The peer is stopped and killed: its log is printed for the
	 * reader, never judged (it does not reach tf_test_end). */
	tf_test_tolerate_log(true);
	CHECK_OK(tf_context_open(NULL, &ctx));
	node = make_node(ctx);
	CHECK_OK(tf_listener_create(node, NULL, &l));
	ft_send(atoi(argv[5]), tf_listener_port(l));
	CHECK_OK(tf_listener_accept(l, NULL, 4 * tf_test_timeout_ms(), &s));
	CHECK_OK(tf_session_rent(s, PLEN, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, PLEN, TF_ACCESS_REMOTE_WRITE, &x));
	for (;;) {
		struct tf_wc wc[4];

		tf_session_wait(s, 4, wc, 100);
	}
}

int main(int argc, char **argv)
{
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;
	long vmlck0;
	int fds0;

	if (argc == 6 && !strcmp(argv[1], "peer"))
		return peer_main(argv);
	/* Read when the first context opens (here and in the peer). */
	setenv("TOLLFREE_SOFT_TRANSPORT", "tcp", 0);
	setenv("TOLLFREE_QP_TIMEOUT_MS", QP_TMO_MS, 0);
	tf_test_begin("fault_slow_peer");
	signal(SIGPIPE, SIG_IGN);
	CHECK_OK(tf_context_open(NULL, &ctx));
	node = make_node(ctx);
	CHECK_OK(tf_listener_create(node, NULL, &l));

	raw_server(node);
	raw_client(l);
	/* A connected QP pair makes the transport create what it keeps
	 * for the context's life (a listening socket, an epoll), a rent
	 * the pool's chunk; then the baseline, with the listener open. */
	{
		uint8_t addr[2][TF_QP_ADDR_MAX];
		size_t alen[2] = {sizeof(addr[0]), sizeof(addr[1])};
		tf_qp_params_t qpp = {0};
		tf_qp_t *qp[2];
		tf_slice_t sl;
		tf_cq_t *cq;

		CHECK_OK(tf_cq_create(ctx, NULL, &cq));
		qpp.send_cq = qpp.recv_cq = cq;
		for (int i = 0; i < 2; i++) {
			CHECK_OK(tf_qp_create(tf_node_pd(node), &qpp, &qp[i]));
			CHECK_OK(tf_qp_get_addr(qp[i], addr[i], &alen[i]));
		}
		CHECK_OK(tf_qp_connect(qp[0], addr[1], alen[1]));
		CHECK_OK(tf_qp_connect(qp[1], addr[0], alen[0]));
		for (int i = 0; i < 2; i++)
			CHECK_OK(tf_qp_destroy(qp[i]));
		CHECK_OK(tf_cq_destroy(cq));
		CHECK_OK(tf_pool_rent(tf_node_pool(node), WLEN, &sl));
		CHECK_OK(tf_pool_return(tf_node_pool(node), &sl));
	}
	fds0 = ft_count_fds();
	vmlck0 = tf_test_vmlck();
	stopped_peer(ctx, node, fds0, vmlck0);

	tf_listener_destroy(l);
	tf_node_destroy(node);
	tf_context_close(ctx);
	return tf_test_end();
}
