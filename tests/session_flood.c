/* SPDX-License-Identifier: MIT */
/*
 * session_flood: a flood of idle connections does not shut legitimate
 * clients out, and handshakes are bounded per source and overall.
 *
 * Side B serves sessions with a key, default bounds
 * (TOLLFREE_SESSION_MAX_PENDING 256, _MAX_PENDING_PEER 32, a 500 ms
 * HELLO deadline).  Side A:
 *   1. opens 500 TCP connections from 127.0.0.2 that never send a byte,
 *      then connects a real client (from 127.0.0.1): it is served within
 *      1 s;
 *   2. the same with the 500 silent connections from the client's own
 *      address (127.0.0.1);
 *   3. opens 32 connections from 127.0.0.3 that say HELLO and then stall
 *      in the key exchange: a 33rd from that address is refused at once
 *      (REJECT -EBUSY), while the real client is still served.
 * The server's counters show the dropped silent connections and the
 * refusal.  Before the bounds, a flood past 256 pending connections made
 * the server reset every newcomer, the real client included.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "session_util.h"
#include "wire_int.h"

#define FLOOD 500

static const char key[] = "flood test key";

/* A blocking TCP connection from @src to 127.0.0.1:@port. */
static int dial_from(const char *src, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port)};
	struct sockaddr_in me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	CHECK(inet_pton(AF_INET, src, &me.sin_addr) == 1);
	CHECK(bind(fd, (struct sockaddr *)&me, sizeof(me)) == 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECKF(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	       "connect from %s: %m", src);
	return fd;
}

static tf_node_t *keyed_node(struct tf_pair *p)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_PSK,
			       .psk = key,
			       .psk_len = sizeof(key) - 1};
	tf_node_t *node;

	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	return node;
}

static void raise_nofile(void)
{
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_cur < 4096 && rl.rlim_max > rl.rlim_cur) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
	}
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_cur < 2 * FLOOD)
		tf_test_skip("RLIMIT_NOFILE %llu is below %d",
			     (unsigned long long)rl.rlim_cur, 2 * FLOOD);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* A real session, timed: must open within 1 s. */
static void legit(tf_node_t *node, uint16_t port, const char *what)
{
	uint64_t t0 = now_us(), us;
	tf_session_t *s;
	int ret = tf_session_connect(node, "127.0.0.1", port, NULL, &s);

	us = now_us() - t0;
	CHECKF(ret == 0, "%s: connect failed: %s", what, tf_strerror(ret));
	tf_test_info("%s: a real session opened in %llu us", what,
		     (unsigned long long)us);
	CHECKF(us < 1000000, "%s: took %llu us", what, (unsigned long long)us);
	tf_session_close(s);
}

/*
 * Wait until the server has ended at least @want of the @n silent
 * connections in @fds (their end of file, or a reset): what it drops
 * over its bounds.  A legitimate session on a kept connection opens
 * without going through the accept queue, so it can finish before the
 * server has even accepted the flood; closing the flood then would end
 * connections the server never held, and its count of drops would
 * depend on how fast it ran.
 */
static void wait_dropped(const int *fds, int n, int want)
{
	static struct pollfd pfd[FLOOD];
	uint64_t end = now_us() + 4000ull * (uint64_t)tf_test_timeout_ms();
	int ended = 0;

	for (int i = 0; i < n; i++)
		pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	while (ended < want) {
		int r;

		CHECKF(now_us() < end,
		       "the server ended %d of %d silent connections", ended,
		       n);
		r = poll(pfd, (nfds_t)n, 100);
		CHECK(r >= 0);
		for (int i = 0; i < n && r > 0; i++) {
			ssize_t got;
			char c;

			if (!pfd[i].revents)
				continue;
			r--;
			/* Silent: nothing comes from the server but its end
			 * (a REJECT would be bytes: read past them). */
			got = recv(pfd[i].fd, &c, 1, MSG_DONTWAIT);
			if (got > 0 || (got < 0 && errno == EAGAIN))
				continue;
			pfd[i].fd = -pfd[i].fd - 1; /* poll skips it now */
			ended++;
		}
	}
}

static void client(struct tf_pair *p)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_t *node = keyed_node(p);
	static int fds[FLOOD], talk[32];
	struct tf_wire_rx rx = {0};
	struct tf_wire_msg m;
	uint8_t nonce[TF_WIRE_NONCE] = {0};
	struct tf_wire_reject rej;
	int fd;

	raise_nofile();
	/* 1. Silent connections from another address. */
	for (int i = 0; i < FLOOD; i++)
		fds[i] = dial_from("127.0.0.2", port);
	legit(node, port, "500 silent from 127.0.0.2");
	wait_dropped(fds, FLOOD, FLOOD - 256);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);

	/* 2. Silent connections from the client's own address. */
	for (int i = 0; i < FLOOD; i++)
		fds[i] = dial_from("127.0.0.1", port);
	legit(node, port, "500 silent from 127.0.0.1");
	wait_dropped(fds, FLOOD, FLOOD - 256);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);

	/* 3. Connections that talk and then stall, up to the per-address
	 * bound: the next one from that address is refused at once. */
	tf__wire_init(&m, TF_WIRE_HELLO);
	tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH);
	CHECK_OK(tf__wire_finish(&m));
	for (int i = 0; i < 32; i++) {
		talk[i] = dial_from("127.0.0.3", port);
		CHECK_OK(tf__wire_send(talk[i], &m, 1000));
		tf__wire_rx_reset(&rx);
		CHECK(tf__wire_recv(talk[i], &rx, 4 * tf_test_timeout_ms()) ==
		      1);
		CHECK(rx.h.op == TF_WIRE_CHALLENGE);
	}
	fd = dial_from("127.0.0.3", port);
	tf__wire_rx_reset(&rx);
	CHECK(tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms()) == 1);
	CHECK_OK(tf__wire_parse_reject(&rx, &rej));
	CHECKF(rej.err == -EBUSY, "refusal %s", tf_strerror(rej.err));
	close(fd);
	legit(node, port, "32 stalled from 127.0.0.3");
	for (int i = 0; i < 32; i++)
		close(talk[i]);

	tf_test_send_u64(p, 1);
	tf_node_destroy(node);
}

static void server(struct tf_pair *p)
{
	tf_node_t *node = keyed_node(p);
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR |
						 TF_LISTENER_PARAM_BACKLOG,
				   .addr = "0.0.0.0",
				   .backlog = 1024};
	tf_node_stats_t st;
	tf_listener_t *l;
	int accepted = 0;

	raise_nofile();
	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	for (;;) {
		tf_session_t *s;
		int ret = tf_listener_accept(l, NULL, 20, &s);

		if (ret == -EAGAIN) {
			struct pollfd pfd = {.fd = p->sock, .events = POLLIN};

			if (poll(&pfd, 1, 0) == 1)
				break;
			continue;
		}
		CHECK_OK(ret);
		accepted++;
		st_serve(s);
		tf_session_close(s);
	}
	CHECK(tf_test_recv_u64(p) == 1);
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("server: %d sessions, %llu silent connections dropped, "
		     "%llu refused, %llu rejects",
		     accepted, (unsigned long long)st.pending_dropped,
		     (unsigned long long)st.pending_refused,
		     (unsigned long long)st.handshake_rejects);
	CHECK(accepted == 3);
	/* Flood 1 is held to 32 by the per-address bound, flood 2 to 256
	 * overall (and 32 per address): most of both were dropped. */
	CHECKF(st.pending_dropped >= 2 * (FLOOD - 256), "%llu dropped",
	       (unsigned long long)st.pending_dropped);
	CHECK(st.pending_refused == 1);
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("session_flood");
	tf_test_pair_open(&p);
	/* Stalled handshakes time out with a warning by design. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
