/* SPDX-License-Identifier: MIT */
/*
 * fuzz_session_accept - the server side of the session bootstrap, through
 * its public entry point tf_listener_accept: the HELLO and OPEN parsers
 * (server_hello, server_open in src/session/listener.c), the opening of a
 * sealed OPEN, and the QP address blob inside HELLO or OPEN, which reaches
 * the soft provider's decoder.
 *
 * Each input is what a client sends on a fresh TCP connection to one of
 * two listeners (then it half-closes): the listener is served until it
 * drops the connection or opens a session (closed at once).
 *
 *  - Without a key, the input is sent as it is: HELLO carries the
 *    client's QP and the server answers with ACCEPT (or REJECT).
 *  - With a key, the harness plays the client's part that the fuzzer
 *    cannot: it sends the input's first message (as its header delimits
 *    it) alone, and if the server answers with a CHALLENGE, it checks the
 *    server's proof of the key, derives the connection's keys and seals
 *    the rest of the input as one message (byte 0: its op, modulo the
 *    valid ones; then its plain body) bound to the transcript, as
 *    connect.c does with OPEN.  The fuzzer so reaches the parser of the
 *    sealed OPEN and what follows it.  Otherwise the rest goes as it is.
 *    A first message that is a HELLO asking for an early OPEN (wire
 *    version 7) has its time set to now, and the rest is sealed under
 *    the early key as the OPEN behind it, in the same write: the server's
 *    CHALLENGE must prove the key over both, and if it took the OPEN,
 *    what follows opens with the connection's keys.
 *
 * What the server sends back is checked too: whole messages of the
 * protocol; after a sealed OPEN, each opens with the client's keys (the
 * first bound to the transcript) and it is never REJECT -TF_EAUTH; an
 * ACCEPT or REJECT parses as the client would parse it, and an opened
 * session's first answer is its ACCEPT.
 *
 * Isolation: a decodable blob makes the server connect its QP to the
 * address in it.  The fuzzer therefore runs in a network namespace of its
 * own (unshare(CLONE_NEWNET), root needed), where only its own loopback
 * exists, and the context uses the tcp transport only (shm would open
 * /proc/<pid>/fd of the process the blob names).  Nothing leaves the
 * process's namespace.
 *
 * Input layout: byte 0 bit 0 selects the listener (0: no key, 1: the
 * pre-shared key FUZZ_KEY); the rest is the stream.
 */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "util.h"
#include "wire_int.h"

#define FUZZ_KEY "fuzz key"

static tf_context_t *ctx;
static tf_node_t *node[2];
static tf_listener_t *lis[2];
static uint16_t port[2];
/* The early key of FUZZ_KEY (seal.c), made once. */
static struct tf_early_key *early_key;

static void die(const char *what, int err)
{
	fprintf(stderr, "fuzz_session_accept: %s: %s\n", what,
		err < 0 ? tf_strerror(err) : strerror(errno));
	abort();
}

/* Bring up the new namespace's loopback (it starts down). */
static void lo_up(void)
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket", 0);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		die("SIOCGIFFLAGS lo", 0);
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		die("SIOCSIFFLAGS lo", 0);
	close(fd);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT |
						TF_CONTEXT_PARAM_TCP_ADDR,
				  .provider = "soft",
				  .transport = "tcp",
				  .tcp_addr = "127.0.0.1"};
	int ret;

	(void)argc;
	(void)argv;
	if (unshare(CLONE_NEWNET))
		die("unshare(CLONE_NEWNET) (run as root)", 0);
	lo_up();
	fuzz_quiet();
	ret = tf_context_open(&cp, &ctx);
	if (ret)
		die("tf_context_open", ret);
	ret = tf__early_key_new((const uint8_t *)FUZZ_KEY, sizeof(FUZZ_KEY) - 1,
				&early_key);
	if (ret)
		die("tf__early_key_new", ret);
	for (int i = 0; i < 2; i++) {
		tf_node_params_t np = {
			.field_mask =
				TF_NODE_PARAM_PSK | TF_NODE_PARAM_CROSSOVER |
				TF_NODE_PARAM_TIMEOUT | TF_NODE_PARAM_QP_CACHE,
			.psk = FUZZ_KEY,
			.psk_len = i ? sizeof(FUZZ_KEY) - 1 : 0,
			.crossover = 4096,
			/* Short: a stuck handshake costs this per input. */
			.timeout_ms = 50,
			.qp_cache = 0};

		ret = tf_node_create(ctx, &np, &node[i]);
		if (ret)
			die("tf_node_create", ret);
		ret = tf_listener_create(node[i], NULL, &lis[i]);
		if (ret)
			die("tf_listener_create", ret);
		port[i] = tf_listener_port(lis[i]);
	}
	return 0;
}

/* The bytes the server sent, taken message by message. */
struct reply {
	uint8_t buf[16384];
	size_t len, off;
};

/* The size of the whole message at the start of what is left of @r, or
 * 0 if it is not all there.  The server speaks only the protocol. */
static size_t msg_len(const struct reply *r, struct tf_wire_hdr *h)
{
	size_t left = r->len - r->off, n;

	if (left < TF_WIRE_HDR_SIZE)
		return 0;
	FUZZ_CHECK(tf__wire_hdr_decode(r->buf + r->off, h) == 0);
	n = (size_t)h->hdr_size + h->size;
	return n <= left ? n : 0;
}

/* The next whole message of @r into @rx: true, or false when none is
 * complete. */
static bool next_msg(struct reply *r, struct tf_wire_rx *rx)
{
	size_t n = msg_len(r, &rx->h);

	if (!n)
		return false;
	memcpy(rx->hdr, r->buf + r->off, rx->h.hdr_size);
	memcpy(rx->body, r->buf + r->off + rx->h.hdr_size, rx->h.size);
	rx->got = n;
	rx->have_hdr = true;
	r->off += n;
	return true;
}

static void send_all(int fd, const void *b, size_t n)
{
	const uint8_t *p = b;

	/* -max_len keeps this far below the socket buffers; the server may
	 * have hung up already (EPIPE, ECONNRESET): it read enough. */
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
			return;
		if (w <= 0)
			die("send", 0);
		p += w;
		n -= (size_t)w;
	}
}

/*
 * Serve listener @i and collect what it sends on @fd into @r, until it
 * hangs up, or a whole message came (@one), or a session opened: then
 * *@opened is set, the session is closed and what the server sent until
 * it hung up is collected.  Bounded, since a session the server is happy
 * with never ends by itself.
 */
static void serve(int i, int fd, struct reply *r, bool one, bool *opened)
{
	for (int rounds = 0; rounds < 50; rounds++) {
		struct pollfd pfd[2] = {
			{.fd = fd, .events = POLLIN},
			{.fd = tf_listener_fd(lis[i]), .events = POLLIN}};
		tf_session_t *s = NULL;
		ssize_t n;
		int ret;

		if (!*opened) {
			ret = tf_listener_accept(lis[i], NULL, 0, &s);
			FUZZ_CHECK(ret == 0 || ret == -EAGAIN);
			if (!ret) {
				FUZZ_CHECK(s != NULL);
				*opened = true;
				/* Its connection is not kept (no QP cache):
				 * the server hangs up after its CLOSE. */
				tf_session_close(s);
				one = false;
				rounds = 0;
			}
		}
		n = recv(fd, r->buf + r->len, sizeof(r->buf) - r->len,
			 MSG_DONTWAIT);
		if (n > 0) {
			struct tf_wire_hdr h;

			r->len += (size_t)n;
			if (one && msg_len(r, &h))
				return;
			continue;
		}
		/* EOF: the server is done (a full buffer: it said more than
		 * any handshake does, which the checks then refuse). */
		if (n == 0 || errno != EAGAIN)
			return;
		poll(pfd, *opened ? 1 : 2, 10);
	}
}

/* The client's side of a keyed handshake after its HELLO. */
struct client {
	struct tf_sess_keys *keys;
	struct tf_transcript *ts;
	uint8_t th[TF_WIRE_HASH]; /* what the server's answer is bound to */
	uint8_t nonce_c[TF_WIRE_NONCE]; /* an early OPEN's HELLO's */
};

/*
 * The server answered @hello (@hello_len bytes as sent) with the
 * CHALLENGE in @rx: check the server's proof, derive the keys into @cl and
 * seal @rest (op byte, plain body) into @m as the client's next message.
 * False if there is no @rest to seal.
 */
static bool client_seal(const uint8_t *hello, size_t hello_len,
			const struct tf_wire_rx *rx, const uint8_t *rest,
			size_t rest_len, struct client *cl,
			struct tf_wire_msg *m)
{
	uint8_t fin[TF_WIRE_MAC], th[TF_WIRE_HASH], want[TF_WIRE_MAC];
	struct tf_wire_challenge ch;
	struct tf_wire_hdr h;
	unsigned op;
	size_t body;

	/* The server sends only what the client parses. */
	FUZZ_CHECK(tf__wire_parse_challenge(rx, &ch) == 0);
	/* It challenged: the first message was a HELLO with a key. */
	FUZZ_CHECK(tf__wire_hdr_decode(hello, &h) == 0);
	FUZZ_CHECK(h.op == TF_WIRE_HELLO &&
		   hello_len == (size_t)h.hdr_size + h.size);
	FUZZ_CHECK(tf__keys_derive((const uint8_t *)FUZZ_KEY,
				   sizeof(FUZZ_KEY) - 1, hello + h.hdr_size,
				   ch.nonce, false, fin, NULL, &cl->keys) == 0);
	FUZZ_CHECK(tf__transcript_new(&cl->ts) == 0);
	FUZZ_CHECK(tf__transcript_add(cl->ts, hello, hello_len) == 0);
	FUZZ_CHECK(tf__transcript_add(cl->ts, rx->hdr, rx->h.hdr_size) == 0);
	/* Nonce and flags: the CHALLENGE up to its proof.  No early OPEN
	 * went (the harness sends none), so none was taken. */
	FUZZ_CHECK(!ch.early);
	FUZZ_CHECK(tf__transcript_add(cl->ts, rx->body,
				      (size_t)(ch.mac - rx->body)) == 0);
	FUZZ_CHECK(tf__transcript_hash(cl->ts, th) == 0);
	FUZZ_CHECK(tf__proof_make(fin, th, want) == 0);
	/* The server proves the key this client has. */
	FUZZ_CHECK(tf__proof_equal(ch.mac, want));
	FUZZ_CHECK(tf__transcript_add(cl->ts, ch.mac, TF_WIRE_MAC) == 0);
	if (!rest_len)
		goto out;

	/* The op byte as it is if it is valid (1..TF_WIRE_OP_MAX): the
	 * server refuses a header of another op before it opens the message,
	 * and its answer would then not be bound to this transcript. */
	op = (uint8_t)(rest[0] - 1) % TF_WIRE_OP_MAX + 1;
	tf__wire_init(m, (enum tf_wire_op)op);
	body = rest_len - 1;
	if (body > TF_WIRE_MAX_BODY - TF_WIRE_TAG)
		body = TF_WIRE_MAX_BODY - TF_WIRE_TAG;
	tf__wire_put_bytes(m, rest + 1, body);
	FUZZ_CHECK(tf__wire_finish(m) == 0);
	FUZZ_CHECK(tf__transcript_hash(cl->ts, th) == 0);
	FUZZ_CHECK(tf__wire_seal(cl->keys, TF_WIRE_CH_SOCK, m, th) == 0);
	FUZZ_CHECK(tf__transcript_add_msg(cl->ts, m) == 0);
	FUZZ_CHECK(tf__transcript_hash(cl->ts, cl->th) == 0);
	return true;
out:
	tf__keys_free(cl->keys);
	cl->keys = NULL;
	return false;
}

/*
 * With a key, a first message that is a HELLO asking for an early OPEN:
 * play the client.  Its time (@hello, @hello_len: a copy the harness may
 * change) is set to now, so that the server's window does not refuse
 * every input; the rest of the input is sealed under the early key as
 * the OPEN behind it (byte 0: its op, as in client_seal) and both go in
 * one write.  The server answers with a CHALLENGE (whose proof then
 * covers both, and which says whether it took the OPEN) or, if the OPEN
 * does not open, with a plain REJECT.  Returns the bytes to send in @m
 * (HELLO then OPEN), and keeps the transcript in @cl.
 */
static void early_seal(uint8_t *hello, size_t hello_len, const uint8_t *rest,
		       size_t rest_len, struct client *cl,
		       struct tf_wire_msg *m)
{
	static struct tf_wire_msg open;
	static struct tf_wire_rx rx;
	struct tf_wire_hello hl;
	struct tf_sess_keys *ek;
	uint8_t th[TF_WIRE_HASH];
	uint64_t now = tf__realtime_ns();
	unsigned op;
	size_t body;

	/* The time: the last 8 bytes of the HELLO's first fields. */
	FUZZ_CHECK(tf__wire_hdr_decode(hello, &rx.h) == 0);
	memcpy(rx.hdr, hello, rx.h.hdr_size);
	memcpy(rx.body, hello + rx.h.hdr_size, rx.h.size);
	FUZZ_CHECK(tf__wire_parse_hello(&rx, &hl) == 0 && hl.early);
	for (int i = 0; i < 8; i++)
		hello[rx.h.hdr_size + TF_WIRE_NONCE + 1 + i] =
			(uint8_t)(now >> (56 - 8 * i));
	memcpy(cl->nonce_c, hl.nonce, TF_WIRE_NONCE);
	FUZZ_CHECK(tf__transcript_new(&cl->ts) == 0);
	FUZZ_CHECK(tf__transcript_add(cl->ts, hello, hello_len) == 0);
	op = rest_len ? (uint8_t)(rest[0] - 1) % TF_WIRE_OP_MAX + 1
		      : TF_WIRE_OPEN;
	tf__wire_init(&open, (enum tf_wire_op)op);
	body = rest_len ? rest_len - 1 : 0;
	if (body > TF_WIRE_MAX_BODY - TF_WIRE_TAG)
		body = TF_WIRE_MAX_BODY - TF_WIRE_TAG;
	if (body)
		tf__wire_put_bytes(&open, rest + 1, body);
	FUZZ_CHECK(tf__wire_finish(&open) == 0);
	FUZZ_CHECK(tf__keys_early(early_key, hello + rx.h.hdr_size, false,
				  &ek) == 0);
	FUZZ_CHECK(tf__transcript_hash(cl->ts, th) == 0);
	FUZZ_CHECK(tf__wire_seal(ek, TF_WIRE_CH_SOCK, &open, th) == 0);
	tf__keys_free(ek);
	FUZZ_CHECK(tf__transcript_add_msg(cl->ts, &open) == 0);
	FUZZ_CHECK(hello_len + open.len <= sizeof(m->buf));
	memcpy(m->buf, hello, hello_len);
	memcpy(m->buf + hello_len, open.buf, open.len);
	m->len = hello_len + open.len;
}

/* The server's first answer to an early OPEN (@r): a plain REJECT, or a
 * CHALLENGE proving the key over HELLO and OPEN; if it took the OPEN,
 * the keys for what follows go into @cl.  False: nothing more to check. */
static bool early_answer(struct reply *r, struct client *cl, bool opened)
{
	static struct tf_wire_rx rx;
	uint8_t fin[TF_WIRE_MAC], th[TF_WIRE_HASH], want[TF_WIRE_MAC];
	struct tf_wire_challenge ch;
	struct tf_wire_reject rej;
	struct tf_sess_keys *k;

	if (!next_msg(r, &rx)) {
		FUZZ_CHECK(!opened);
		return false;
	}
	if (rx.h.op == TF_WIRE_REJECT) {
		/* Before any key: the OPEN did not open, or was not one. */
		FUZZ_CHECK(!opened && !(rx.h.flags & TF_WIRE_F_SEALED));
		FUZZ_CHECK(tf__wire_parse_reject(&rx, &rej) == 0);
		FUZZ_CHECK(r->off == r->len);
		return false;
	}
	FUZZ_CHECK(tf__wire_parse_challenge(&rx, &ch) == 0);
	FUZZ_CHECK(tf__keys_derive((const uint8_t *)FUZZ_KEY,
				   sizeof(FUZZ_KEY) - 1, cl->nonce_c, ch.nonce,
				   false, fin, NULL, &k) == 0);
	FUZZ_CHECK(tf__transcript_add(cl->ts, rx.hdr, rx.h.hdr_size) == 0);
	FUZZ_CHECK(tf__transcript_add(cl->ts, rx.body,
				      (size_t)(ch.mac - rx.body)) == 0);
	FUZZ_CHECK(tf__transcript_hash(cl->ts, th) == 0);
	FUZZ_CHECK(tf__proof_make(fin, th, want) == 0);
	FUZZ_CHECK(tf__proof_equal(ch.mac, want));
	FUZZ_CHECK(tf__transcript_add(cl->ts, ch.mac, TF_WIRE_MAC) == 0);
	if (!ch.early) {
		/* Not taken: the server waits for the OPEN again, which
		 * this client does not send. */
		tf__keys_free(k);
		FUZZ_CHECK(!opened && r->off == r->len);
		return false;
	}
	cl->keys = k;
	FUZZ_CHECK(tf__transcript_hash(cl->ts, cl->th) == 0);
	return true;
}

/* Check what the server sent after the client's last message: opened
 * with @cl's keys if it has some. */
static void check_reply(struct reply *r, struct client *cl, bool opened)
{
	static struct tf_wire_rx rx; /* 4 KiB: not on the fuzzer's stack */
	bool first = true;

	while (next_msg(r, &rx)) {
		struct tf_wire_accept acc;
		struct tf_wire_reject rej;

		if (cl->keys) {
			/* Only the handshake's last answer is bound to the
			 * transcript: the session's CLOSE is numbered. */
			FUZZ_CHECK(tf__wire_unseal(cl->keys, TF_WIRE_CH_SOCK,
						   &rx,
						   first ? cl->th : NULL) == 0);
		}
		FUZZ_CHECK(!opened || !first || rx.h.op == TF_WIRE_ACCEPT);
		switch (rx.h.op) {
		case TF_WIRE_ACCEPT:
			FUZZ_CHECK(first && opened);
			FUZZ_CHECK(tf__wire_parse_accept(&rx, &acc) == 0);
			/* A new connection's: the server's QP, no control
			 * QP (no QP cache), nothing exposed yet. */
			FUZZ_CHECK(acc.conn_id && acc.blob_len && !acc.ctl_len);
			FUZZ_CHECK(acc.exps.n == 0);
			break;
		case TF_WIRE_REJECT:
			FUZZ_CHECK(first && !opened);
			FUZZ_CHECK(tf__wire_parse_reject(&rx, &rej) == 0);
			/* The server opens what the client sealed. */
			FUZZ_CHECK(!cl->keys || rej.err != -TF_EAUTH);
			break;
		case TF_WIRE_CLOSE:
			FUZZ_CHECK(!first && opened);
			break;
		default:
			FUZZ_CHECK(!"the server sent an unexpected message");
		}
		first = false;
	}
	/* Nothing but whole messages. */
	FUZZ_CHECK(r->off == r->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct reply r;
	static struct tf_wire_msg m;
	static struct tf_wire_rx rx;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct client cl = {0};
	bool opened = false, sealed = false;
	size_t first = 0;
	int i, fd;

	if (size < 1)
		return 0;
	i = data[0] & 1;
	data++;
	size--;
	sa.sin_port = htons(port[i]);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket", 0);
	/* libFuzzer's -timeout timer (SIGALRM) can interrupt connect: the
	 * connection then completes in the background. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		socklen_t elen = sizeof(int);
		int err = errno;

		if (err == EINTR || err == EALREADY) {
			while (poll(&pfd, 1, 5000) < 0 && errno == EINTR)
				;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
				err = errno;
		}
		if (err && err != EISCONN) {
			errno = err;
			die("connect to the listener", 0);
		}
	}
	r.len = r.off = 0;
	/* With a key: the first message alone, if it is all there, and the
	 * server's answer to it. */
	if (i && size >= TF_WIRE_HDR_SIZE) {
		static struct tf_wire_rx hrx;
		static uint8_t hello[TF_WIRE_MAX_HDR + TF_WIRE_MAX_BODY];
		struct tf_wire_hello hl;
		struct tf_wire_hdr h;

		if (!tf__wire_hdr_decode(data, &hrx.h) &&
		    (size_t)hrx.h.hdr_size + hrx.h.size <= size) {
			memcpy(hrx.hdr, data, hrx.h.hdr_size);
			memcpy(hrx.body, data + hrx.h.hdr_size, hrx.h.size);
		}
		/* An early OPEN's HELLO: the harness seals the rest behind
		 * it, and checks the server's answers to both. */
		if (hrx.h.op == TF_WIRE_HELLO &&
		    (size_t)hrx.h.hdr_size + hrx.h.size <= size &&
		    !tf__wire_hdr_decode(data, &h) &&
		    !tf__wire_parse_hello(&hrx, &hl) && hl.early) {
			first = (size_t)hrx.h.hdr_size + hrx.h.size;
			memcpy(hello, data, first);
			early_seal(hello, first, data + first, size - first,
				   &cl, &m);
			send_all(fd, m.buf, m.len);
			shutdown(fd, SHUT_WR);
			serve(i, fd, &r, false, &opened);
			if (early_answer(&r, &cl, opened))
				check_reply(&r, &cl, opened);
			goto done;
		}
		if (!tf__wire_hdr_decode(data, &h) &&
		    (size_t)h.hdr_size + h.size <= size) {
			first = (size_t)h.hdr_size + h.size;
			send_all(fd, data, first);
			serve(i, fd, &r, true, &opened);
			/* A CHALLENGE is answered here; anything else is
			 * looked at with what follows. */
			if (next_msg(&r, &rx) && rx.h.op == TF_WIRE_CHALLENGE)
				sealed = client_seal(data, first, &rx,
						     data + first, size - first,
						     &cl, &m);
			else
				r.off = 0;
		}
	}
	if (sealed)
		send_all(fd, m.buf, m.len);
	else
		send_all(fd, data + first, size - first);
	shutdown(fd, SHUT_WR);
	serve(i, fd, &r, false, &opened);
	check_reply(&r, &cl, opened);
done:
	close(fd);
	tf__keys_free(cl.keys);
	tf__transcript_free(cl.ts);
	/* Let the listener notice the close, so connections do not pile
	 * up across inputs. */
	(void)tf_listener_accept(lis[i], NULL, 0, &(tf_session_t *){NULL});
	return 0;
}
