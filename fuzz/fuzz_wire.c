/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire - the session bootstrap wire format (src/session/wire.c).
 *
 * The input is a byte stream as a peer would send it on the bootstrap
 * socket.  It goes through a socketpair into tf__wire_rx_step, the real
 * non-blocking receive state machine (header, extra header bytes a later
 * version may add, body), in chunks whose size the input chooses so that
 * partial reads are exercised.  Every complete message is then given to
 * every body parser (tf__wire_parse_*, the functions session.c and
 * conn.c call): all but the one of its op must refuse it, and what
 * that one accepts must lie inside the body, within the format's bounds,
 * and encode back to the bytes it was parsed from.  Exposure lists then go
 * through tf__sess_add_exposures on a session object, as the session code
 * does with those of ACCEPT and EXPOSE.
 *
 * Input layout:
 *   byte 0   chunk size of each write into the socket (0: all at once;
 *            raised so that there are at most 64 writes)
 *   byte 1   bit 0: OPEN carries a MAC (server with a pre-shared key);
 *            bits 1..7: exposures the session already knows (modulo
 *            TF_SESSION_MAX_EXPOSURES + 1), to exercise the limit check
 *   byte 2.. the stream
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "session_int.h"
#include "wire_int.h"
#include "fuzz_common.h"

static struct tf_session *sess;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	/* Large (over 13 KiB): allocated once, reset per input. */
	sess = calloc(1, sizeof(*sess));
	return sess ? 0 : -1;
}

/* @p, @n bytes, lies inside the body of @rx. */
static bool in_body(const struct tf_wire_rx *rx, const uint8_t *p, size_t n)
{
	return p && p >= rx->body && n <= rx->h.size &&
	       (size_t)(p - rx->body) <= rx->h.size - n;
}

/* The body begins with the @n bytes of @m (past its header). */
static void check_prefix(const struct tf_wire_rx *rx, struct tf_wire_msg *m)
{
	size_t n = m->len - TF_WIRE_HDR_SIZE;

	FUZZ_CHECK(!m->overflow && n <= rx->h.size);
	FUZZ_CHECK(!memcmp(m->buf + TF_WIRE_HDR_SIZE, rx->body, n));
}

static void put_exposures(struct tf_wire_msg *m,
			  const struct tf_wire_exposures *x)
{
	FUZZ_CHECK(x->n <= TF_WIRE_MAX_EXPOSE);
	tf__wire_put_u16(m, (uint16_t)x->n);
	for (unsigned i = 0; i < x->n; i++) {
		const tf_exposure_info_t *e = &x->e[i];

		FUZZ_CHECK(e->length && e->addr + e->length >= e->addr);
		FUZZ_CHECK(e->rights &&
			   !(e->rights & ~(uint32_t)TF_WIRE_EXPOSURE_RIGHTS));
		tf__wire_put_u64(m, e->addr);
		tf__wire_put_u64(m, e->length);
		tf__wire_put_u32(m, e->rkey);
		tf__wire_put_u32(m, e->rights);
	}
}

/* An exposure list ends the body: it re-encodes to all of it. */
static void add_exposures(const struct tf_wire_rx *rx, struct tf_wire_msg *m,
			  const struct tf_wire_exposures *x)
{
	int before = sess->n_peer, ret;

	put_exposures(m, x);
	check_prefix(rx, m);
	FUZZ_CHECK(m->len - TF_WIRE_HDR_SIZE == rx->h.size);
	ret = tf__sess_add_exposures(sess, x);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	FUZZ_CHECK(sess->n_peer == before + (ret ? 0 : (int)x->n));
	FUZZ_CHECK(sess->n_peer <= TF_SESSION_MAX_EXPOSURES);
	if (!ret)
		FUZZ_CHECK(!memcmp(sess->peer + before, x->e,
				   x->n * sizeof(x->e[0])));
}

static void decode(const struct tf_wire_rx *rx, bool with_mac)
{
	struct tf_wire_challenge ch;
	struct tf_wire_exposures ex;
	struct tf_wire_accept acc;
	struct tf_wire_hello hello;
	struct tf_wire_open req;
	struct tf_wire_msg m;
	struct tf_wire_hdr h;
	uint8_t enc[TF_WIRE_HDR_SIZE];
	int ret, err, ok = 0;

	/* The state machine hands over only what it validated. */
	FUZZ_CHECK(rx->have_hdr);
	FUZZ_CHECK(rx->h.hdr_size >= TF_WIRE_HDR_SIZE &&
		   rx->h.hdr_size <= TF_WIRE_MAX_HDR);
	FUZZ_CHECK(rx->h.size <= TF_WIRE_MAX_BODY);
	FUZZ_CHECK(rx->got == (size_t)rx->h.hdr_size + rx->h.size);
	FUZZ_CHECK(tf__wire_hdr_decode(rx->hdr, &h) == 0);
	tf__wire_hdr_encode(&h, enc);
	FUZZ_CHECK(!memcmp(enc, rx->hdr, TF_WIRE_HDR_SIZE));

	ret = tf__wire_parse_hello(rx, &hello);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_HELLO);
		FUZZ_CHECK(in_body(rx, hello.nonce, TF_WIRE_NONCE));
		FUZZ_CHECK(hello.nonce == rx->body);
	}

	ret = tf__wire_parse_challenge(rx, &ch);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_CHALLENGE);
		FUZZ_CHECK(in_body(rx, ch.nonce, TF_WIRE_NONCE));
		FUZZ_CHECK(!ch.mac || in_body(rx, ch.mac, TF_WIRE_MAC));
		tf__wire_init(&m, TF_WIRE_CHALLENGE);
		tf__wire_put_bytes(&m, ch.nonce, TF_WIRE_NONCE);
		tf__wire_put_u8(&m, ch.mac ? 1 : 0);
		if (ch.mac)
			tf__wire_put_bytes(&m, ch.mac, TF_WIRE_MAC);
		check_prefix(rx, &m);
	}

	ret = tf__wire_parse_open(rx, with_mac, &req);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_OPEN);
		FUZZ_CHECK(with_mac == !!req.mac);
		FUZZ_CHECK(!req.mac || in_body(rx, req.mac, TF_WIRE_MAC));
		FUZZ_CHECK(req.blob_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(req.priv_len <= TF_WIRE_MAX_PRIV);
		FUZZ_CHECK(in_body(rx, req.blob, req.blob_len));
		FUZZ_CHECK(in_body(rx, req.priv, req.priv_len));
		FUZZ_CHECK(req.ctl_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(!req.ctl_len || in_body(rx, req.ctl, req.ctl_len));
		tf__wire_init(&m, TF_WIRE_OPEN);
		if (req.mac)
			tf__wire_put_bytes(&m, req.mac, TF_WIRE_MAC);
		tf__wire_put_u32(&m, req.reuse_id);
		tf__wire_put_u16(&m, req.blob_len);
		tf__wire_put_bytes(&m, req.blob, req.blob_len);
		tf__wire_put_u16(&m, req.priv_len);
		tf__wire_put_bytes(&m, req.priv, req.priv_len);
		if (req.ctl) {
			tf__wire_put_u16(&m, req.ctl_len);
			tf__wire_put_bytes(&m, req.ctl, req.ctl_len);
		}
		check_prefix(rx, &m);
	}

	ret = tf__wire_parse_accept(rx, &acc);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_ACCEPT);
		FUZZ_CHECK(acc.blob_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(in_body(rx, acc.blob, acc.blob_len));
		FUZZ_CHECK(acc.ctl_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(in_body(rx, acc.ctl, acc.ctl_len));
		tf__wire_init(&m, TF_WIRE_ACCEPT);
		tf__wire_put_u32(&m, acc.conn_id);
		tf__wire_put_u16(&m, acc.blob_len);
		tf__wire_put_bytes(&m, acc.blob, acc.blob_len);
		tf__wire_put_u16(&m, acc.ctl_len);
		tf__wire_put_bytes(&m, acc.ctl, acc.ctl_len);
		add_exposures(rx, &m, &acc.exps);
	}

	err = 0;
	ret = tf__wire_parse_reject(rx, &err);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_REJECT);
		FUZZ_CHECK(err < 0 && err >= -4096);
		FUZZ_CHECK(tf_strerror(err) != NULL);
		tf__wire_init(&m, TF_WIRE_REJECT);
		tf__wire_put_u32(&m, (uint32_t)-err);
		check_prefix(rx, &m);
	} else {
		FUZZ_CHECK(err == 0);
	}

	ret = tf__wire_parse_expose(rx, &ex);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_EXPOSE);
		tf__wire_init(&m, TF_WIRE_EXPOSE);
		add_exposures(rx, &m, &ex);
	}
	/* A message is of one op: at most one parser takes it. */
	FUZZ_CHECK(ok <= 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_wire_rx rx;
	size_t chunk, off = 0;
	bool with_mac, shut = false;
	int sv[2], guard = 0;

	if (size < 2)
		return 0;
	chunk = data[0] ? data[0] : SIZE_MAX;
	/* At most 64 writes: each costs two system calls, and split points
	 * matter inside headers more than in long bodies. */
	if (size / 64 >= chunk)
		chunk = size / 64 + 1;
	with_mac = data[1] & 1;
	memset(sess, 0, sizeof(*sess));
	sess->n_peer = (data[1] >> 1) % (TF_SESSION_MAX_EXPOSURES + 1);
	data += 2;
	size -= 2;
	/* The stream is at most -max_len bytes, far below the socket
	 * buffer, so the writes below never block. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 0;
	tf__wire_rx_reset(&rx);
	for (;;) {
		int ret;

		if (off < size) {
			size_t n = size - off < chunk ? size - off : chunk;
			ssize_t w = write(sv[0], data + off, n);

			FUZZ_CHECK(w == (ssize_t)n);
			off += n;
		} else if (!shut) {
			shutdown(sv[0], SHUT_WR);
			shut = true;
		}
		ret = tf__wire_rx_step(sv[1], &rx);
		if (ret < 0)
			break;
		if (ret == 1) {
			decode(&rx, with_mac);
			tf__wire_rx_reset(&rx);
			continue;
		}
		/* 0: more bytes needed; after EOF the socket says so. */
		FUZZ_CHECK(!shut || ++guard < 4);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
