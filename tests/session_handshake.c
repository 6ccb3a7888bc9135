/* SPDX-License-Identifier: MIT */
/*
 * session_handshake: the bootstrap rejects what it must and keeps serving.
 * Side B runs a listener with a pre-shared key and a 300 ms handshake
 * timeout; side A, with raw sockets, sends: garbage, a wrong version, an
 * oversized body, a short HELLO, bytes behind a HELLO and behind an early
 * OPEN in the same write, a truncated header, a truncated body, an
 * unsealed OPEN and a forged sealed OPEN after the key challenge, a
 * keyless HELLO carrying a QP; and connects with a wrong key, with no
 * key, and with a silent socket held open.  Every bad peer gets a REJECT
 * with the precise error (or is dropped at its deadline), never a QP
 * address or a key; a good session opens in between each time, also while
 * the silent peer holds its connection.  The server's counters show the
 * rejects and the authentication failures.  The server runs event-loop
 * style: poll() on tf_listener_fd(), then tf_listener_accept() with a zero
 * timeout.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_util.h"
#include "util.h"
#include "wire_int.h"

static const char key[] = "correct horse battery staple";
static uint16_t port;

static int raw_connect(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

static void send_all(int fd, const void *b, size_t n)
{
	CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
}

/* The server's answer: a REJECT with @err (0: expect EOF, no message). */
static void expect_reject(int fd, int err)
{
	struct tf_wire_rx rx = {0};
	int ret = tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms());

	if (!err) {
		CHECKF(ret == -ECONNRESET, "expected EOF, got %d", ret);
	} else {
		CHECKF(ret == 1, "no answer: %s", tf_strerror(ret));
		CHECKF(rx.h.op == TF_WIRE_REJECT && rx.h.size == 4,
		       "answer op %u size %u", rx.h.op, rx.h.size);
		CHECKF(((uint32_t)rx.body[0] << 24 | rx.body[1] << 16 |
			rx.body[2] << 8 | rx.body[3]) == (uint32_t)err,
		       "REJECT code %u, expected %d", rx.body[3], err);
		tf__wire_rx_reset(&rx);
		ret = tf__wire_recv(fd, &rx, tf_test_timeout_ms());
		CHECKF(ret == -ECONNRESET, "after REJECT: %d", ret);
	}
	close(fd);
}

static void hdr(uint8_t *b, uint32_t magic, uint8_t ver, uint8_t op,
		uint16_t hsz, uint32_t size)
{
	struct tf_wire_hdr h = {.magic = magic,
				.version = ver,
				.op = op,
				.hdr_size = hsz,
				.size = size};

	tf__wire_hdr_encode(&h, b);
}

/* A good session: must open and close normally. */
static void good(tf_node_t *node, const char *what)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_PRIV,
				  .priv = what,
				  .priv_len = strlen(what) + 1};
	tf_session_t *s;
	int ret = tf_session_connect(node, "127.0.0.1", port, &sp, &s);

	CHECKF(ret == 0, "good session after %s: %s", what, tf_strerror(ret));
	tf_session_close(s);
}

static void client(struct tf_pair *p)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_PSK |
					     TF_NODE_PARAM_TIMEOUT |
					     TF_NODE_PARAM_QP_CACHE,
			       .psk = key,
			       .psk_len = sizeof(key) - 1,
			       .timeout_ms = 2000};
	tf_node_t *node, *bad;
	tf_session_t *s;
	struct tf_wire_msg m;
	struct tf_wire_rx rx = {0};
	uint8_t b[64], nonce[TF_WIRE_NONCE] = {0};
	int fd, silent;

	port = (uint16_t)tf_test_recv_u64(p);
	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	good(node, "start");

	/* Garbage: bad magic. */
	fd = raw_connect();
	memset(b, 0x41, 16);
	send_all(fd, b, 16);
	expect_reject(fd, TF_EWIRE);
	good(node, "garbage");

	/* Wrong version. */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, 9, TF_WIRE_HELLO, 16, 32);
	send_all(fd, b, 16);
	expect_reject(fd, TF_EVERSION);
	good(node, "wrong version");

	/* Oversized body. */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, TF_WIRE_VERSION, TF_WIRE_HELLO, 16, 1u << 20);
	send_all(fd, b, 16);
	expect_reject(fd, TF_EWIRE);
	good(node, "oversized");

	/* Oversized header. */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, TF_WIRE_VERSION, TF_WIRE_HELLO, 4000, 0);
	send_all(fd, b, 16);
	expect_reject(fd, TF_EWIRE);

	/* Unknown op. */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, TF_WIRE_VERSION, 200, 16, 0);
	send_all(fd, b, 16);
	expect_reject(fd, TF_EWIRE);

	/* Short HELLO (8 of 32 nonce bytes). */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, TF_WIRE_VERSION, TF_WIRE_HELLO, 16, 8);
	send_all(fd, b, 24);
	expect_reject(fd, TF_EWIRE);
	good(node, "short hello");

	/* Bytes behind a HELLO in its write (the server reads them with
	 * it): only an early OPEN may follow it before the answer.  Behind
	 * a classic HELLO, and behind an early OPEN, anything is refused
	 * before the OPEN is looked at. */
	for (int early = 0; early < 2; early++) {
		static uint8_t w[2 * sizeof(m.buf)];
		size_t wl;

		fd = raw_connect();
		tf__wire_init(&m, TF_WIRE_HELLO);
		tf__wire_put_bytes(&m, nonce, sizeof(nonce));
		tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH |
					    (early ? TF_WIRE_HELLO_EARLY : 0));
		if (early)
			tf__wire_put_u64(&m, tf__realtime_ns());
		CHECK_OK(tf__wire_finish(&m));
		memcpy(w, m.buf, m.len);
		wl = m.len;
		if (early) {
			/* Its seal is not looked at: any bytes do. */
			tf__wire_init(&m, TF_WIRE_OPEN);
			memset(b, 0x5a, sizeof(b));
			tf__wire_put_bytes(&m, b, 40);
			CHECK_OK(tf__wire_finish(&m));
			tf__wire_set_sealed(&m, m.len - TF_WIRE_HDR_SIZE);
			memcpy(w + wl, m.buf, m.len);
			wl += m.len;
		}
		memset(w + wl, 0x41, 20);
		send_all(fd, w, wl + 20);
		expect_reject(fd, TF_EWIRE);
		good(node, early ? "bytes behind an early OPEN"
				 : "bytes behind a HELLO");
	}

	/* Truncated header, then silence: dropped at the deadline. */
	fd = raw_connect();
	send_all(fd, b, 7);
	silent = raw_connect(); /* sends nothing at all, held open */
	good(node, "truncated header (peer still connected)");
	expect_reject(fd, 0);

	/* Truncated body: header says 32, 10 arrive. */
	fd = raw_connect();
	hdr(b, TF_WIRE_MAGIC, TF_WIRE_VERSION, TF_WIRE_HELLO, 16, 32);
	send_all(fd, b, 26);
	good(node, "truncated body (peer still connected)");
	expect_reject(fd, 0);
	expect_reject(silent, 0);

	/* A raw client that skips the key: after the CHALLENGE it sends an
	 * unsealed OPEN with a QP blob, then (another connection) an OPEN
	 * flagged sealed whose bytes are not a seal under the connection's
	 * keys.  Both get a refusal for authentication, and nothing else
	 * (no ACCEPT: no QP address, no key). */
	for (int sealed = 0; sealed < 2; sealed++) {
		fd = raw_connect();
		tf__wire_init(&m, TF_WIRE_HELLO);
		tf__wire_put_bytes(&m, nonce, sizeof(nonce));
		tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH);
		CHECK_OK(tf__wire_finish(&m));
		CHECK_OK(tf__wire_send(fd, &m, 1000));
		CHECK(tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms()) == 1);
		CHECK(rx.h.op == TF_WIRE_CHALLENGE &&
		      rx.h.size == TF_WIRE_NONCE + 1 + TF_WIRE_MAC);
		tf__wire_rx_reset(&rx);
		tf__wire_init(&m, TF_WIRE_OPEN);
		memset(b, 0, sizeof(b));
		tf__wire_put_u32(&m, 0);
		tf__wire_put_u16(&m, 16);
		tf__wire_put_bytes(&m, b, 16);
		tf__wire_put_u16(&m, 0);
		tf__wire_put_u16(&m, 0);
		tf__wire_put_u32(&m, 0); /* no grant */
		tf__wire_put_u8(&m, 0);	 /* no flags */
		if (sealed)
			tf__wire_put_bytes(&m, b, TF_WIRE_TAG);
		CHECK_OK(tf__wire_finish(&m));
		if (sealed)
			tf__wire_set_sealed(&m, m.len - TF_WIRE_HDR_SIZE);
		CHECK_OK(tf__wire_send(fd, &m, 1000));
		/* The refusal is sealed: its op and code are not readable
		 * without the keys; that it comes and then EOF is. */
		CHECK(tf__wire_recv(fd, &rx, 4 * tf_test_timeout_ms()) == 1);
		CHECK(rx.h.op == TF_WIRE_REJECT &&
		      (rx.h.flags & TF_WIRE_F_SEALED));
		tf__wire_rx_reset(&rx);
		CHECK(tf__wire_recv(fd, &rx, tf_test_timeout_ms()) ==
		      -ECONNRESET);
		close(fd);
		good(node, sealed ? "forged seal" : "unsealed open");
	}
	/* A HELLO without the key flag carrying a QP blob, to a server
	 * with a key: refused before anything else happens. */
	fd = raw_connect();
	tf__wire_init(&m, TF_WIRE_HELLO);
	tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	tf__wire_put_u8(&m, 0);
	tf__wire_put_u16(&m, 16);
	tf__wire_put_bytes(&m, b, 16);
	tf__wire_put_u16(&m, 0);
	tf__wire_put_u16(&m, 0);
	tf__wire_put_u32(&m, 0);
	tf__wire_put_u8(&m, 0);
	CHECK_OK(tf__wire_finish(&m));
	CHECK_OK(tf__wire_send(fd, &m, 1000));
	expect_reject(fd, TF_EAUTH);
	good(node, "keyless hello");

	/* A client with the wrong key refuses the server (the server's
	 * proof does not verify) and the server learns nothing. */
	np.psk = "wrong key";
	np.psk_len = 9;
	CHECK_OK(tf_node_create(p->ctx, &np, &bad));
	CHECK_ERR(tf_session_connect(bad, "127.0.0.1", port, NULL, &s),
		  -TF_EAUTH);
	tf_node_destroy(bad);
	/* A client without a key is refused. */
	np.psk_len = 0;
	CHECK_OK(tf_node_create(p->ctx, &np, &bad));
	CHECK_ERR(tf_session_connect(bad, "127.0.0.1", port, NULL, &s),
		  -TF_EAUTH);
	tf_node_destroy(bad);
	good(node, "wrong keys");

	/* Bad arguments are refused locally. */
	CHECK_ERR(tf_session_connect(node, "", port, NULL, &s), -EINVAL);
	good(node, "quit");
	tf_node_destroy(node);
}

static void server(struct tf_pair *p)
{
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_PSK |
					     TF_NODE_PARAM_TIMEOUT,
			       .psk = key,
			       .psk_len = sizeof(key) - 1,
			       .timeout_ms = 300};
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR,
				   .addr = "127.0.0.1"};
	tf_node_stats_t st;
	tf_node_t *node;
	tf_listener_t *l;
	bool quit = false;
	int goods = 0;

	CHECK_OK(tf_node_create(p->ctx, &np, &node));
	CHECK_OK(tf_listener_create(node, &lp, &l));
	tf_test_send_u64(p, tf_listener_port(l));
	while (!quit) {
		tf_session_t *s;
		size_t plen;
		const char *priv;
		struct pollfd pfd = {.fd = tf_listener_fd(l), .events = POLLIN};
		int ret;

		/* Event-loop style: wait on the listener's fd, then serve
		 * without blocking (deadlines are enforced by the calls). */
		CHECK(poll(&pfd, 1, 100) >= 0);
		ret = tf_listener_accept(l, NULL, 0, &s);

		if (ret == -EAGAIN)
			continue;
		CHECK_OK(ret);
		priv = tf_session_peer_priv(s, &plen);
		CHECK(priv && plen && priv[plen - 1] == 0);
		quit = !strcmp(priv, "quit");
		goods++;
		st_serve(s);
		tf_session_close(s);
	}
	CHECK_OK(tf_node_query_stats(node, &st));
	tf_test_info("server: %d good sessions, %llu rejected handshakes, "
		     "%llu failed proofs",
		     goods, (unsigned long long)st.handshake_rejects,
		     (unsigned long long)st.auth_failures);
	CHECK(goods == 14);
	/* 6 malformed + 2 with bytes behind + truncated header + truncated
	 * body + silent. */
	CHECKF(st.handshake_rejects >= 11, "%llu rejects",
	       (unsigned long long)st.handshake_rejects);
	/* Unsealed OPEN, forged seal, keyless HELLO, the wrong-key client
	 * (leaves after the challenge) and the keyless client. */
	CHECKF(st.auth_failures >= 5, "%llu auth failures",
	       (unsigned long long)st.auth_failures);
	tf_listener_destroy(l);
	tf_node_destroy(node);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("session_handshake");
	tf_test_pair_open(&p);
	/* Every rejection is logged (warn) by design. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_B)
		server(&p);
	else
		client(&p);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
