/* SPDX-License-Identifier: MIT */
/*
 * session_mitm: with a pre-shared key, a relay between client and server
 * that does not know the key gets no QP address and no key, and cannot
 * make either side accept what it changed or replayed.
 *
 * Side B serves sessions with a key; for each it exposes a buffer
 * (read/write) before it establishes, so the key travels in the ACCEPT.
 * Side A runs a TCP relay in a thread and connects its own keyed node
 * through it, one new connection per try:
 *   1. pass: the relay forwards and records both directions.  The session
 *      works; the recorded bytes hold neither the exposure's key nor its
 *      address, and every message after the CHALLENGE is sealed.
 *   2. replay: the recorded client bytes are sent again to the server on
 *      a new connection: the server answers the HELLO (and its early
 *      OPEN, which it does not take: its nonce was seen) with a fresh
 *      challenge and refuses what follows, with no ACCEPT.
 *   3. tamper OPEN: the relay flips one byte of the client's OPEN (once
 *      in its header, once in its body): no ACCEPT, the client's connect
 *      fails, the server counts an authentication failure.
 *   4. tamper CHALLENGE: the relay flips a byte of the server's nonce:
 *      the client refuses the server's proof and sends nothing more (no
 *      OPEN at all in the classic exchange, only its sealed early OPEN
 *      with one).
 * The server accepts exactly the sessions of the untampered tries, and
 * with early OPENs (TOLLFREE_SESSION_PSK_EARLY_WINDOW_MS, on by default;
 * the test also runs with it 0) that of try 4, whose client left.  Stats
 * say which exchange ran.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_util.h"
#include "wire_int.h"

static const char key[] = "a key the relay does not know";

#define REC_MAX 16384

/* One direction of a relayed connection. */
struct dir {
	uint8_t rec[REC_MAX]; /* what went through, as forwarded */
	size_t len;
	/* Tamper: flip byte @flip_off of message @flip_msg (0-based) of
	 * this direction; -1: none. */
	int flip_msg;
	size_t flip_off;
	/* Message framing, to find message @flip_msg. */
	unsigned msg;
	size_t msg_off, msg_len;
};

struct relay {
	int lfd;
	uint16_t port, server_port;
	struct dir c2s, s2c;
	pthread_t thr;
};

static int listen_any(uint16_t *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	CHECK(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHECK(listen(fd, 4) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

static int dial(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

/* Frame, tamper with and record @n bytes going through @d. */
static void pass(struct dir *d, uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		/* A message starts: its length is known once its 16-byte
		 * header went through. */
		if (d->msg_off == TF_WIRE_HDR_SIZE) {
			const uint8_t *h = d->rec + d->len - TF_WIRE_HDR_SIZE;

			d->msg_len =
				TF_WIRE_HDR_SIZE + ((size_t)h[12] << 24 |
						    (size_t)h[13] << 16 |
						    (size_t)h[14] << 8 | h[15]);
		}
		if ((int)d->msg == d->flip_msg && d->msg_off == d->flip_off)
			b[i] ^= 0x01;
		if (d->len < REC_MAX)
			d->rec[d->len++] = b[i];
		d->msg_off++;
		if (d->msg_off >= TF_WIRE_HDR_SIZE &&
		    d->msg_off == d->msg_len) {
			d->msg++;
			d->msg_off = 0;
			d->msg_len = 0;
		}
	}
}

/* Relay one connection until either side closes. */
static void *relay_main(void *arg)
{
	struct relay *r = arg;
	int c = accept(r->lfd, NULL, NULL), s;

	if (c < 0)
		return NULL;
	s = dial(r->server_port);
	for (;;) {
		struct pollfd pfd[2] = {{.fd = c, .events = POLLIN},
					{.fd = s, .events = POLLIN}};
		uint8_t b[4096];
		ssize_t n;

		if (poll(pfd, 2, 10000) <= 0)
			break;
		if (pfd[0].revents) {
			n = recv(c, b, sizeof(b), 0);
			if (n <= 0)
				break;
			pass(&r->c2s, b, (size_t)n);
			if (send(s, b, (size_t)n, MSG_NOSIGNAL) != n)
				break;
		}
		if (pfd[1].revents) {
			n = recv(s, b, sizeof(b), 0);
			if (n <= 0)
				break;
			pass(&r->s2c, b, (size_t)n);
			if (send(c, b, (size_t)n, MSG_NOSIGNAL) != n)
				break;
		}
	}
	close(c);
	close(s);
	return NULL;
}

static void relay_start(struct relay *r, uint16_t server_port, int c2s_msg,
			size_t c2s_off, int s2c_msg, size_t s2c_off)
{
	memset(r, 0, sizeof(*r));
	r->server_port = server_port;
	r->c2s.flip_msg = c2s_msg;
	r->c2s.flip_off = c2s_off;
	r->s2c.flip_msg = s2c_msg;
	r->s2c.flip_off = s2c_off;
	r->lfd = listen_any(&r->port);
	CHECK(pthread_create(&r->thr, NULL, relay_main, r) == 0);
}

static void relay_join(struct relay *r)
{
	pthread_join(r->thr, NULL);
	close(r->lfd);
}

/* The length of the recorded message at @p, header included. */
static size_t msg_len(const uint8_t *p)
{
	return TF_WIRE_HDR_SIZE + ((size_t)p[12] << 24 | (size_t)p[13] << 16 |
				   (size_t)p[14] << 8 | p[15]);
}

/* The ops of the messages recorded in @d, in order, into @ops. */
static unsigned rec_ops(const struct dir *d, uint8_t *ops, uint16_t *flags,
			unsigned max)
{
	size_t off = 0;
	unsigned n = 0;

	while (off + TF_WIRE_HDR_SIZE <= d->len && n < max) {
		const uint8_t *h = d->rec + off;
		size_t size = (size_t)h[12] << 24 | (size_t)h[13] << 16 |
			      (size_t)h[14] << 8 | h[15];

		ops[n] = h[5];
		flags[n] = (uint16_t)(h[6] << 8 | h[7]);
		n++;
		off += TF_WIRE_HDR_SIZE + size;
	}
	return n;
}

static bool contains(const uint8_t *hay, size_t n, const uint8_t *needle,
		     size_t m)
{
	for (size_t i = 0; i + m <= n; i++)
		if (!memcmp(hay + i, needle, m))
			return true;
	return false;
}

static void be(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

static tf_node_t *keyed_node(struct tf_pair *p)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_PSK |
					     TF_NODE_PARAM_QP_CACHE,
			       .psk = key,
			       .psk_len = sizeof(key) - 1,
			       .qp_cache = 0};
	tf_node_t *node;

	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	return node;
}

static void client(struct tf_pair *p)
{
	uint16_t port = (uint16_t)tf_test_recv_u64(p);
	tf_node_t *node = keyed_node(p);
	tf_exposure_info_t info;
	tf_node_stats_t st;
	struct relay r;
	tf_session_t *s;
	uint8_t ops[16] = {0}, pat[8];
	uint16_t flags[16] = {0};
	bool early;
	unsigned n;
	int ret;

	/* 1. An untampered session through the relay. */
	relay_start(&r, port, -1, 0, -1, 0);
	CHECK_OK(tf_session_connect(node, "127.0.0.1", r.port, NULL, &s));
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_peer_exposure(s, 0, &info));
	tf_session_close(s);
	relay_join(&r);
	n = rec_ops(&r.s2c, ops, flags, 16);
	/* With early addresses (TOLLFREE_SESSION_EARLY_ADDR=y) an ADDR
	 * comes before the ACCEPT. */
	CHECKF(n >= 2 && ops[0] == TF_WIRE_CHALLENGE && !flags[0] &&
		       (ops[1] == TF_WIRE_ACCEPT ||
			(ops[1] == TF_WIRE_ADDR && n >= 3 &&
			 ops[2] == TF_WIRE_ACCEPT)) &&
		       (flags[1] & TF_WIRE_F_SEALED),
	       "server sent %u messages: op %u flags %u, op %u flags %u", n,
	       ops[0], flags[0], ops[1], flags[1]);
	for (unsigned i = 1; i < n; i++)
		CHECKF(flags[i] & TF_WIRE_F_SEALED,
		       "server message %u (op %u) "
		       "not sealed",
		       i, ops[i]);
	n = rec_ops(&r.c2s, ops, flags, 16);
	CHECK(n >= 2 && ops[0] == TF_WIRE_HELLO && ops[1] == TF_WIRE_OPEN &&
	      (flags[1] & TF_WIRE_F_SEALED));
	/* An early OPEN (the HELLO says so) was taken: the CHALLENGE says
	 * so, and the client counted it. */
	CHECK_OK(tf_node_query_stats(node, &st));
	early = st.psk_early == 1;
	CHECKF(st.psk_early_refused == 0 &&
		       !!(r.c2s.rec[TF_WIRE_HDR_SIZE + TF_WIRE_NONCE] &
			  TF_WIRE_HELLO_EARLY) == early &&
		       r.s2c.rec[TF_WIRE_HDR_SIZE + TF_WIRE_NONCE] ==
			       (early ? TF_WIRE_CHALLENGE_EARLY : 0),
	       "early OPEN: %llu taken, %llu not",
	       (unsigned long long)st.psk_early,
	       (unsigned long long)st.psk_early_refused);
	tf_test_info("%s exchange", early ? "early OPEN" : "classic");
	/* Neither the key nor the address of the exposure is readable. */
	be(pat, info.rkey, 4);
	CHECK(!contains(r.s2c.rec, r.s2c.len, pat, 4));
	be(pat, info.addr, 8);
	CHECK(!contains(r.s2c.rec, r.s2c.len, pat, 8));

	/* 2. Replay the client's bytes of try 1 on a new connection: its
	 * HELLO (with its early OPEN if it sent one), then the rest. */
	{
		int fd = dial(port);
		struct tf_wire_rx rx = {0};
		size_t hello = msg_len(r.c2s.rec);

		if (early)
			hello += msg_len(r.c2s.rec + hello);
		CHECK(send(fd, r.c2s.rec, hello, MSG_NOSIGNAL) ==
		      (ssize_t)hello);
		CHECK(tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms()) == 1);
		/* A fresh nonce: not the one of try 1; and the replayed
		 * early OPEN not taken. */
		CHECK(rx.h.op == TF_WIRE_CHALLENGE &&
		      rx.h.size == TF_WIRE_NONCE + 1 + TF_WIRE_MAC &&
		      rx.body[TF_WIRE_NONCE] == 0);
		CHECK(memcmp(rx.body, r.s2c.rec + TF_WIRE_HDR_SIZE,
			     TF_WIRE_NONCE));
		tf__wire_rx_reset(&rx);
		CHECK(send(fd, r.c2s.rec + hello, r.c2s.len - hello,
			   MSG_NOSIGNAL) == (ssize_t)(r.c2s.len - hello));
		/* A (sealed) refusal, never an ACCEPT, then the end. */
		ret = tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms());
		CHECKF(ret == 1 && rx.h.op == TF_WIRE_REJECT,
		       "replay got %d op %u", ret, rx.h.op);
		tf__wire_rx_reset(&rx);
		CHECK(tf__wire_recv(fd, &rx, tf_test_timeout_ms()) ==
		      -ECONNRESET);
		close(fd);
	}

	/* 3. Flip a byte of the OPEN: in its header (its size field's low
	 * byte would break the framing; the reserved field), then in the
	 * middle of its sealed body (the client's QP address).  The early
	 * OPEN fails to open as the classic one does. */
	for (int t = 0; t < 2; t++) {
		tf_test_tolerate_log(true);
		relay_start(&r, port, 1, t ? TF_WIRE_HDR_SIZE + 9 : 10, -1, 0);
		ret = tf_session_connect(node, "127.0.0.1", r.port, NULL, &s);
		relay_join(&r);
		tf_test_tolerate_log(false);
		CHECKF(ret == -TF_EAUTH || ret == -TF_EWIRE ||
			       ret == -ECONNRESET,
		       "tampered OPEN: connect returned %s", tf_strerror(ret));
		n = rec_ops(&r.s2c, ops, flags, 16);
		for (unsigned i = 0; i < n; i++)
			CHECKF(ops[i] != TF_WIRE_ACCEPT,
			       "server accepted a tampered OPEN");
	}

	/* 4. Flip a byte of the server's nonce in the CHALLENGE. */
	tf_test_tolerate_log(true);
	relay_start(&r, port, -1, 0, 0, TF_WIRE_HDR_SIZE + 3);
	ret = tf_session_connect(node, "127.0.0.1", r.port, NULL, &s);
	relay_join(&r);
	tf_test_tolerate_log(false);
	CHECKF(ret == -TF_EAUTH, "tampered CHALLENGE: %s", tf_strerror(ret));
	n = rec_ops(&r.c2s, ops, flags, 16);
	CHECKF(early ? n == 2 && ops[0] == TF_WIRE_HELLO &&
			       ops[1] == TF_WIRE_OPEN &&
			       (flags[1] & TF_WIRE_F_SEALED)
		     : n == 1 && ops[0] == TF_WIRE_HELLO,
	       "client sent %u messages around a bad proof", n);
	/* The bad proof; with early OPENs also the server's refusals of
	 * the two tampered ones, which came before any proof. */
	CHECK_OK(tf_node_query_stats(node, &st));
	CHECKF(st.auth_failures == (early ? 3 : 1), "%llu auth failures",
	       (unsigned long long)st.auth_failures);

	/* 5. A direct session still works; then the server stops. */
	CHECK_OK(tf_session_connect(node, "127.0.0.1", port, NULL, &s));
	tf_session_close(s);
	tf_test_send_u64(p, 1);
	tf_node_destroy(node);
}

static void server(struct tf_pair *p)
{
	tf_node_t *node = keyed_node(p);
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = "127.0.0.1"};
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_DEFER_ESTABLISH};
	tf_node_stats_t st;
	tf_listener_t *l;
	int accepted = 0;

	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	/* Refusals are logged by design. */
	tf_test_tolerate_log(true);
	for (;;) {
		tf_session_t *s;
		int b, x, ret = tf_listener_accept(l, &sp, 50, &s);

		if (ret == -EAGAIN) {
			struct pollfd pfd = {.fd = p->sock, .events = POLLIN};

			if (poll(&pfd, 1, 0) == 1)
				break; /* the client is done */
			continue;
		}
		CHECK_OK(ret);
		accepted++;
		CHECK_OK(tf_session_rent(s, 4096, &b, NULL));
		memset(tf_session_buf_addr(s, b), 0x5c, 4096);
		CHECK_OK(tf_session_expose(
			s, b, 0, 4096,
			TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE, &x));
		CHECK_OK(tf_session_establish(s));
		st_serve(s);
		tf_session_close(s);
	}
	tf_test_tolerate_log(false);
	CHECK(tf_test_recv_u64(p) == 1);
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("server: %d sessions, %llu auth failures, %llu rejects, "
		     "early OPENs %llu taken and %llu not",
		     accepted, (unsigned long long)st.auth_failures,
		     (unsigned long long)st.handshake_rejects,
		     (unsigned long long)st.psk_early,
		     (unsigned long long)st.psk_early_refused);
	if (st.psk_early) {
		/* Tries 1 and 5, and 4 if the server's application got it
		 * before its client's end was seen (its client left at the
		 * bad proof; with early addresses the server is still
		 * connecting then). */
		CHECKF(accepted == 2 || accepted == 3, "%d sessions accepted",
		       accepted);
		/* The replay's early OPEN was seen before. */
		CHECK(st.psk_early == 3 && st.psk_early_refused == 1);
		/* Replay and two tampered OPENs. */
		CHECKF(st.auth_failures == 3, "%llu auth failures",
		       (unsigned long long)st.auth_failures);
	} else {
		/* Try 1 and try 5 only. */
		CHECKF(accepted == 2, "%d sessions accepted", accepted);
		CHECK(!st.psk_early_refused);
		/* Replay, two tampered OPENs, and the client that left. */
		CHECKF(st.auth_failures == 4, "%llu auth failures",
		       (unsigned long long)st.auth_failures);
	}
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("session_mitm");
	tf_test_pair_open(&p);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	return tf_test_pair_end(&p);
}
