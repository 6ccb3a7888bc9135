/* SPDX-License-Identifier: MIT */
/*
 * session_addr: a client takes a server's early addresses (an ADDR before
 * the ACCEPT, wire_int.h) and refuses what a hostile server makes of them.
 *
 * Side B is a scripted server on a raw socket, with QPs of its own for
 * the addresses it sends; side A's node (no key, no kept connections)
 * connects once per script:
 *   1. an ADDR with connection id 0: -TF_EWIRE;
 *   2. an ADDR this side cannot connect to (garbage), then a REJECT
 *      (EBUSY): the server's answer (-EBUSY), not this side's failure;
 *   3. the same ADDR, then the server hangs up: this side's own error;
 *   4. a good ADDR, then another ADDR: -TF_EWIRE;
 *   5. a good ADDR, then an ACCEPT that carries a QP again: -TF_EWIRE;
 *   6. a good ADDR, then an ACCEPT for another connection: -TF_EWIRE;
 *   7. a good ADDR, the server connects its QP to the client's, then an
 *      ACCEPT without blobs: the session opens, and its CLOSE reaches
 *      the server;
 *   8. six times, no ADDR, an ACCEPT with the QP, as a server with early
 *      addresses off answers: the session opens.
 * The client runs with TOLLFREE_SESSION_EARLY_ADDR=y, so it refills its
 * stock after an ADDR; it must also after an answer without one: its
 * stock never runs dry (no misses in 13 connects, the stock holding 4).
 * Every failed connect leaves nothing behind (the pair's pinned-memory
 * check at the end, and the node's open-session count).  First, a
 * TOLLFREE_SESSION_EARLY_ADDR that means nothing makes node creation
 * fail.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_util.h"
#include "wire_int.h"

enum script {
	ADDR_ID0 = 1,
	ADDR_BAD_REJECT,
	ADDR_BAD_HANGUP,
	ADDR_TWICE,
	ACCEPT_BLOB,
	ACCEPT_OTHER_ID,
	ADDR_GOOD,
	/* Then, PLAIN_RUNS times, no ADDR: an ACCEPT with the QP. */
	ACCEPT_PLAIN,
	N_SCRIPTS = ACCEPT_PLAIN + 5,
};

static void srv_send(int fd, struct tf_wire_msg *m)
{
	CHECK_OK(tf__wire_finish(m));
	CHECK_OK(tf__wire_send(fd, m, tf_test_timeout_ms()));
}

static void srv_addr(int fd, uint32_t id, const uint8_t *blob, size_t len)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_ADDR);
	tf__wire_put_qps(&m, id, blob, len, NULL, 0);
	srv_send(fd, &m);
}

static void srv_accept(int fd, uint32_t id, const uint8_t *blob, size_t len)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_ACCEPT);
	tf__wire_put_qps(&m, id, blob, len, NULL, 0);
	tf__wire_put_u8(&m, 0);	 /* no flags */
	tf__wire_put_u16(&m, 0); /* no exposures */
	srv_send(fd, &m);
}

/* Wait for the client's CLOSE, making progress meanwhile. */
static void srv_expect_close(struct tf_pair *p, int fd)
{
	struct tf_wire_rx rx = {0};
	int64_t end = st_now_ms() + 4 * tf_test_timeout_ms();
	int ret = 0;

	while (st_now_ms() < end) {
		CHECK(tf_context_progress(p->ctx) >= 0);
		ret = tf__wire_rx_step(fd, &rx);
		if (ret)
			break;
		usleep(100);
	}
	CHECKF(ret == 1 && rx.h.op == TF_WIRE_CLOSE,
	       "expected the client's CLOSE: %d, op %u", ret, rx.h.op);
}

static void server(struct tf_pair *p)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 64};
	uint8_t junk[24];
	tf_cq_t *cq;
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memset(junk, 0x5a, sizeof(junk));
	CHECK(lfd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(lfd, 8) == 0);
	CHECK(getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0);
	CHECK_OK(tf_cq_create(p->ctx, &cqp, &cq));
	tf_test_send_u64(p, ntohs(sa.sin_port));

	for (int sc = 1; sc <= N_SCRIPTS; sc++) {
		tf_qp_params_t qpp = {.send_cq = cq, .recv_cq = cq};
		struct tf_wire_hello hello;
		struct tf_wire_rx rx = {0};
		uint8_t blob[TF_QP_ADDR_MAX];
		size_t len = sizeof(blob);
		tf_qp_t *qp;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		CHECK(fd >= 0);
		CHECK(tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms()) == 1);
		CHECK_OK(tf__wire_parse_hello(&rx, &hello));
		CHECK(!hello.auth && hello.open.blob_len);
		CHECK_OK(tf_qp_create(p->pd, &qpp, &qp));
		CHECK_OK(tf_qp_get_addr(qp, blob, &len));
		switch (sc < ACCEPT_PLAIN ? sc : ACCEPT_PLAIN) {
		case ADDR_ID0:
			srv_addr(fd, 0, blob, len);
			break;
		case ADDR_BAD_REJECT: {
			struct tf_wire_msg m;

			srv_addr(fd, 7, junk, sizeof(junk));
			tf__wire_put_reject(&m, EBUSY, NULL, NULL);
			srv_send(fd, &m);
			break;
		}
		case ADDR_BAD_HANGUP:
			srv_addr(fd, 7, junk, sizeof(junk));
			break;
		case ADDR_TWICE:
			srv_addr(fd, 7, blob, len);
			srv_addr(fd, 7, blob, len);
			break;
		case ACCEPT_BLOB:
			srv_addr(fd, 7, blob, len);
			srv_accept(fd, 7, blob, len);
			break;
		case ACCEPT_OTHER_ID:
			srv_addr(fd, 7, blob, len);
			srv_accept(fd, 8, NULL, 0);
			break;
		case ADDR_GOOD:
			srv_addr(fd, 7, blob, len);
			CHECK_OK(tf_qp_connect(qp, hello.open.blob,
					       hello.open.blob_len));
			srv_accept(fd, 7, NULL, 0);
			srv_expect_close(p, fd);
			break;
		case ACCEPT_PLAIN:
			CHECK_OK(tf_qp_connect(qp, hello.open.blob,
					       hello.open.blob_len));
			srv_accept(fd, 7, blob, len);
			srv_expect_close(p, fd);
			break;
		}
		/* The client has its answer: it hangs up, or we do. */
		tf_test_sync(p);
		close(fd);
		CHECK_OK(tf_qp_destroy(qp));
	}
	CHECK_OK(tf_cq_destroy(cq));
	close(lfd);
}

static void client(struct tf_pair *p)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_TIMEOUT |
					     TF_NODE_PARAM_QP_CACHE,
			       .timeout_ms = 1000,
			       .qp_cache = 0};
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_stats_t st;
	tf_node_t *node;
	tf_session_t *s;

	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	for (int sc = 1; sc <= N_SCRIPTS; sc++) {
		int ret;

		/* The failures log what the server did wrong. */
		tf_test_tolerate_log(sc < ADDR_GOOD);
		ret = tf_session_connect(node, "127.0.0.1", port, NULL, &s);
		tf_test_tolerate_log(false);
		switch (sc < ACCEPT_PLAIN ? sc : ACCEPT_PLAIN) {
		case ADDR_BAD_REJECT:
			CHECKF(ret == -EBUSY, "script %d: %s", sc,
			       tf_strerror(ret));
			break;
		case ADDR_BAD_HANGUP:
			/* This side's connect error, not the hang-up's. */
			CHECKF(ret < 0 && ret != -ECONNRESET &&
				       ret != -ETIMEDOUT && ret != -TF_EWIRE,
			       "script %d: %s", sc, tf_strerror(ret));
			break;
		case ADDR_GOOD:
		case ACCEPT_PLAIN:
			CHECKF(ret == 0, "script %d: %s", sc, tf_strerror(ret));
			CHECK(tf_session_peer_exposures(s) == 0);
			tf_session_close(s);
			break;
		default:
			CHECKF(ret == -TF_EWIRE, "script %d: %s", sc,
			       tf_strerror(ret));
		}
		tf_test_sync(p);
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.sessions_opened == 7 && st.sessions_closed == 7,
	       "sessions opened %llu, closed %llu",
	       (unsigned long long)st.sessions_opened,
	       (unsigned long long)st.sessions_closed);
	/* Expecting ADDRs, this side refills its stock after one, and
	 * after an answer that came without one: a new connection never
	 * found the stock empty. */
	CHECKF(st.stock_misses == 0 && st.stock_hits == N_SCRIPTS,
	       "stock: %llu hits, %llu misses",
	       (unsigned long long)st.stock_hits,
	       (unsigned long long)st.stock_misses);
	tf_node_destroy(node);
}

/* A TOLLFREE_SESSION_EARLY_ADDR that is not auto, y or n fails closed:
 * no node.  In a child: the environment is read once a process. */
static void bad_setting(void)
{
	pid_t pid = fork();
	int status;

	CHECK(pid >= 0);
	if (pid == 0) {
		tf_context_t *ctx;
		tf_node_t *node = NULL;
		int ret;

		setenv("TOLLFREE_SESSION_EARLY_ADDR", "yes please", 1);
		if (tf_context_open(NULL, &ctx))
			_exit(2);
		tf_test_tolerate_log(true);
		ret = tf_node_create(ctx, NULL, &node);
		if (!ret)
			tf_node_destroy(node);
		tf_context_close(ctx);
		_exit(ret == -EINVAL ? 0 : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "a bad TOLLFREE_SESSION_EARLY_ADDR: child status %d", status);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("session_addr");
	bad_setting();
	/* The client expects ADDRs (side B's scripted server has no node). */
	setenv("TOLLFREE_SESSION_EARLY_ADDR", "y", 1);
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	return tf_test_pair_end(&p);
}
