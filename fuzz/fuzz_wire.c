/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire - the session bootstrap wire format (src/session/wire.c) and
 * the opening of sealed messages (src/session/seal.c).
 *
 * The input is a byte stream as a peer would send it on the bootstrap
 * socket.  It goes through a socketpair into tf__wire_rx_step, the real
 * non-blocking receive state machine (header, extra header bytes a later
 * version may add, body), in chunks whose size the input chooses so that
 * partial reads are exercised; every other message is read with
 * tf__wire_rx_step_ahead, which takes what follows it too and hands it
 * to the next read.  Every complete message is then given to
 * every body parser (tf__wire_parse_*, the functions listener.c, connect.c
 * and session.c call): all but the one of its op must refuse it, and what
 * that one accepts must lie inside the body, within the format's bounds,
 * and encode back to the bytes it was parsed from.  Exposure lists then go
 * through tf__sess_add_exposures on a session object, as the session code
 * does with those of ACCEPT and EXPOSE.
 *
 * Every message is also opened with tf__wire_unseal by the server of a
 * connection with fixed keys (fuzz_seal.h), on both channels, as one
 * stream per channel: it must open on one channel at most and fail with
 * -TF_EAUTH on the others, and what opens must seal again (the client's
 * twin keys, tf__wire_seal) to the bytes that arrived, then goes through
 * the parsers as above.  The fuzzer cannot forge a tag: the seeds made by
 * gen_corpus.c with tf__wire_seal are what opens, and their mutations
 * (a changed byte, a dropped, repeated or reordered message, a message on
 * the other channel) are what must not.
 *
 * Input layout:
 *   byte 0   chunk size of each write into the socket (0: all at once;
 *            raised so that there are at most 64 writes)
 *   byte 1   bit 0: sealed messages on the socket channel are handshake
 *            messages, bound to the (fixed) transcript hash;
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
#include "fuzz_seal.h"

static struct tf_session *sess;
/*
 * The fixed connection's keys: the server's (keys_rx) and its twin, the
 * client's (keys_tx), derived again for every input that has a sealed
 * message (their sequence numbers count the messages of one input), at
 * its first one: a derivation costs as much as the rest of a run.  A
 * message without the sealed flag must not open, so it cannot move the
 * sequence numbers of keys_plain, which are derived once.
 */
static struct tf_sess_keys *keys_plain, *keys_rx, *keys_tx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_quiet();
	/* Large (over 13 KiB): allocated once, reset per input. */
	sess = calloc(1, sizeof(*sess));
	if (!sess || fuzz_seal_keys(true, &keys_plain))
		return -1;
	return 0;
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

/* The fields an OPEN carries after its connection id (also in HELLO). */
static void put_open(const struct tf_wire_rx *rx, struct tf_wire_msg *m,
		     const struct tf_wire_open *o)
{
	FUZZ_CHECK(o->blob_len <= TF_QP_ADDR_MAX);
	FUZZ_CHECK(o->priv_len <= TF_WIRE_MAX_PRIV);
	FUZZ_CHECK(o->ctl_len <= TF_QP_ADDR_MAX);
	FUZZ_CHECK(in_body(rx, o->blob, o->blob_len));
	FUZZ_CHECK(in_body(rx, o->priv, o->priv_len));
	FUZZ_CHECK(o->ctl_len ? in_body(rx, o->ctl, o->ctl_len) : !o->ctl);
	/* A new connection's (with the client's QP) or a kept one's (its
	 * id, no blobs). */
	if (o->reuse_id)
		FUZZ_CHECK(!o->blob_len && !o->ctl_len);
	else
		FUZZ_CHECK(o->blob_len > 0 && !o->grant);
	tf__wire_put_u16(m, o->blob_len);
	tf__wire_put_bytes(m, o->blob, o->blob_len);
	tf__wire_put_u16(m, o->priv_len);
	tf__wire_put_bytes(m, o->priv, o->priv_len);
	tf__wire_put_u16(m, o->ctl_len);
	tf__wire_put_bytes(m, o->ctl, o->ctl_len);
	tf__wire_put_u32(m, o->grant);
	/* Known flags only: no remote invalidation with a grant, and only
	 * an OPEN that takes one is its session's CLOSE too. */
	FUZZ_CHECK(!(o->flags & ~(TF_WIRE_OPEN_RINV | TF_WIRE_OPEN_CLOSED)));
	FUZZ_CHECK(!o->grant || !(o->flags & TF_WIRE_OPEN_RINV));
	FUZZ_CHECK(o->grant || !(o->flags & TF_WIRE_OPEN_CLOSED));
	tf__wire_put_u8(m, o->flags);
}

/* Give the body of @rx to every parser; returns how many took it. */
static int parse_all(const struct tf_wire_rx *rx)
{
	struct tf_wire_challenge ch;
	struct tf_wire_exposures ex;
	struct tf_wire_accept acc;
	struct tf_wire_hello hello;
	struct tf_wire_open req;
	struct tf_wire_msg m;
	struct tf_wire_reject rej;
	struct tf_wire_grant gr;
	int ret, ok = 0;

	ret = tf__wire_parse_hello(rx, &hello);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_HELLO);
		FUZZ_CHECK(in_body(rx, hello.nonce, TF_WIRE_NONCE));
		FUZZ_CHECK(hello.nonce == rx->body);
		tf__wire_init(&m, TF_WIRE_HELLO);
		tf__wire_put_bytes(&m, hello.nonce, TF_WIRE_NONCE);
		tf__wire_put_u8(
			&m, (hello.auth ? TF_WIRE_HELLO_AUTH : 0) |
				    (hello.early ? TF_WIRE_HELLO_EARLY : 0));
		/* An early OPEN's HELLO: only with a key, and its time. */
		FUZZ_CHECK(!hello.early || hello.auth);
		if (hello.early)
			tf__wire_put_u64(&m, hello.sent_ns);
		else
			FUZZ_CHECK(!hello.sent_ns);
		/* With a key, the QPs wait for the sealed OPEN. */
		if (hello.auth) {
			FUZZ_CHECK(!hello.open.blob && !hello.open.priv &&
				   !hello.open.ctl);
			FUZZ_CHECK(!hello.open.blob_len &&
				   !hello.open.priv_len && !hello.open.ctl_len);
		} else {
			FUZZ_CHECK(!hello.open.reuse_id);
			put_open(rx, &m, &hello.open);
		}
		check_prefix(rx, &m);
	}

	ret = tf__wire_parse_challenge(rx, &ch);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_CHALLENGE);
		FUZZ_CHECK(in_body(rx, ch.nonce, TF_WIRE_NONCE));
		FUZZ_CHECK(in_body(rx, ch.mac, TF_WIRE_MAC));
		tf__wire_init(&m, TF_WIRE_CHALLENGE);
		tf__wire_put_bytes(&m, ch.nonce, TF_WIRE_NONCE);
		tf__wire_put_u8(&m, ch.early ? TF_WIRE_CHALLENGE_EARLY : 0);
		tf__wire_put_bytes(&m, ch.mac, TF_WIRE_MAC);
		check_prefix(rx, &m);
	}

	ret = tf__wire_parse_open(rx, &req);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_OPEN);
		tf__wire_init(&m, TF_WIRE_OPEN);
		tf__wire_put_u32(&m, req.reuse_id);
		put_open(rx, &m, &req);
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
		/* A remote invalidation is of exposure 0. */
		FUZZ_CHECK(!(acc.flags & ~TF_WIRE_ACCEPT_RINV));
		FUZZ_CHECK(!(acc.flags & TF_WIRE_ACCEPT_RINV) || acc.exps.n);
		tf__wire_init(&m, TF_WIRE_ACCEPT);
		tf__wire_put_qps(&m, acc.conn_id, acc.blob, acc.blob_len,
				 acc.ctl, acc.ctl_len);
		tf__wire_put_u8(&m, acc.flags);
		add_exposures(rx, &m, &acc.exps);
	}

	ret = tf__wire_parse_addr(rx, &acc);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_ADDR && acc.conn_id);
		FUZZ_CHECK(acc.blob_len && acc.blob_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(in_body(rx, acc.blob, acc.blob_len));
		FUZZ_CHECK(acc.ctl_len <= TF_QP_ADDR_MAX);
		FUZZ_CHECK(in_body(rx, acc.ctl, acc.ctl_len));
		FUZZ_CHECK(acc.exps.n == 0 && !acc.flags);
		tf__wire_init(&m, TF_WIRE_ADDR);
		tf__wire_put_qps(&m, acc.conn_id, acc.blob, acc.blob_len,
				 acc.ctl, acc.ctl_len);
		check_prefix(rx, &m);
	}

	rej.err = 0;
	ret = tf__wire_parse_reject(rx, &rej);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_REJECT);
		FUZZ_CHECK(rej.err < 0 && rej.err >= -4096);
		FUZZ_CHECK(tf_strerror(rej.err) != NULL);
		/* The names of a -TF_EPEER refusal are kept only when both
		 * are well formed; two empty ones re-encode as none (still a
		 * prefix of the body). */
		FUZZ_CHECK(rej.err == -TF_EPEER ||
			   (!rej.provider[0] && !rej.transport[0]));
		if (rej.provider[0] || rej.transport[0])
			tf__wire_put_reject(&m, rej.err, rej.provider,
					    rej.transport);
		else
			tf__wire_put_reject(&m, rej.err, NULL, NULL);
		check_prefix(rx, &m);
	} else {
		FUZZ_CHECK(rej.err == 0);
	}

	ret = tf__wire_parse_expose(rx, &ex);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_EXPOSE);
		tf__wire_init(&m, TF_WIRE_EXPOSE);
		add_exposures(rx, &m, &ex);
	}

	ret = tf__wire_parse_grant(rx, &gr);
	FUZZ_CHECK(ret == 0 || ret == -TF_EWIRE);
	if (!ret) {
		ok++;
		FUZZ_CHECK(rx->h.op == TF_WIRE_GRANT && gr.grant);
		FUZZ_CHECK(gr.e.length && gr.e.addr + gr.e.length > gr.e.addr);
		FUZZ_CHECK(gr.e.rights &&
			   !(gr.e.rights & ~(uint32_t)TF_WIRE_EXPOSURE_RIGHTS));
		/* A GRANT is exactly its fields. */
		tf__wire_put_grant(&m, gr.grant, &gr.e);
		FUZZ_CHECK(tf__wire_finish(&m) == 0);
		FUZZ_CHECK(m.len - TF_WIRE_HDR_SIZE == rx->h.size);
		check_prefix(rx, &m);
	}
	return ok;
}

/*
 * Open @rx as the server of the fixed connection would (fuzz_seal.h), on
 * each channel in turn (each has its own sequence number, advanced only
 * by a message that opens).  It opens on one channel at most; what opens
 * is sealed again by the client's twin keys to the same bytes (so the two
 * sides agree on the sequence numbers too) and goes to the parsers, as
 * tf__conn_open hands it on.
 */
static void check_unseal(const struct tf_wire_rx *rx, bool handshake)
{
	static struct tf_wire_rx o; /* 4 KiB: not on the fuzzer's stack */
	struct tf_sess_keys *k = keys_plain;
	uint8_t th[TF_WIRE_HASH];
	int opened = 0;

	if (rx->h.flags & TF_WIRE_F_SEALED) {
		if (!keys_rx) {
			FUZZ_CHECK(fuzz_seal_keys(true, &keys_rx) == 0);
			FUZZ_CHECK(fuzz_seal_keys(false, &keys_tx) == 0);
		}
		k = keys_rx;
	}
	memset(th, FUZZ_SEAL_TH_BYTE, sizeof(th));
	for (unsigned ch = 0; ch < TF_WIRE_CHANNELS; ch++) {
		const uint8_t *t =
			handshake && ch == TF_WIRE_CH_SOCK ? th : NULL;
		struct tf_wire_msg m;
		int ret;

		o = *rx;
		ret = tf__wire_unseal(k, ch, &o, t);
		FUZZ_CHECK(ret == 0 || ret == -TF_EAUTH);
		if (ret) {
			FUZZ_CHECK(o.h.size == rx->h.size);
			continue;
		}
		FUZZ_CHECK(++opened == 1);
		FUZZ_CHECK(rx->h.flags & TF_WIRE_F_SEALED);
		FUZZ_CHECK(rx->h.size >= TF_WIRE_TAG &&
			   o.h.size == rx->h.size - TF_WIRE_TAG);
		/* The header is authenticated as it travelled: its first
		 * TF_WIRE_HDR_SIZE bytes, with the sealed size and flag. */
		memcpy(m.buf, rx->hdr, TF_WIRE_HDR_SIZE);
		memcpy(m.buf + TF_WIRE_HDR_SIZE, o.body, o.h.size);
		m.len = TF_WIRE_HDR_SIZE + o.h.size;
		m.overflow = false;
		ret = tf__wire_seal(keys_tx, ch, &m, t);
		FUZZ_CHECK(ret == 0);
		FUZZ_CHECK(m.len == TF_WIRE_HDR_SIZE + rx->h.size);
		FUZZ_CHECK(!memcmp(m.buf, rx->hdr, TF_WIRE_HDR_SIZE));
		FUZZ_CHECK(!memcmp(m.buf + TF_WIRE_HDR_SIZE, rx->body,
				   rx->h.size));
		FUZZ_CHECK(parse_all(&o) <= 1);
	}
}

static void decode(const struct tf_wire_rx *rx, bool handshake)
{
	struct tf_wire_hdr h;
	uint8_t enc[TF_WIRE_HDR_SIZE];

	/* The state machine hands over only what it validated. */
	FUZZ_CHECK(rx->have_hdr);
	FUZZ_CHECK(rx->h.hdr_size >= TF_WIRE_HDR_SIZE &&
		   rx->h.hdr_size <= TF_WIRE_MAX_HDR);
	FUZZ_CHECK(rx->h.size <= TF_WIRE_MAX_BODY);
	FUZZ_CHECK(rx->got == (size_t)rx->h.hdr_size + rx->h.size);
	FUZZ_CHECK(tf__wire_hdr_decode(rx->hdr, &h) == 0);
	tf__wire_hdr_encode(&h, enc);
	FUZZ_CHECK(!memcmp(enc, rx->hdr, TF_WIRE_HDR_SIZE));
	/* A message is of one op: at most one parser takes it. */
	FUZZ_CHECK(parse_all(rx) <= 1);
	check_unseal(rx, handshake);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_wire_rx rx;
	size_t chunk, off = 0;
	unsigned nmsg = 0;
	bool handshake, shut = false;
	int sv[2], guard = 0;

	if (size < 2)
		return 0;
	chunk = data[0] ? data[0] : SIZE_MAX;
	/* At most 64 writes: each costs two system calls, and split points
	 * matter inside headers more than in long bodies. */
	if (size / 64 >= chunk)
		chunk = size / 64 + 1;
	handshake = data[1] & 1;
	memset(sess, 0, sizeof(*sess));
	sess->n_peer = (data[1] >> 1) % (TF_SESSION_MAX_EXPOSURES + 1);
	data += 2;
	size -= 2;
	/* The stream is at most -max_len bytes, far below the socket
	 * buffer, so the writes below never block. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return 0;
	memset(&rx, 0, sizeof(rx));
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
		/* Every other message is read with what follows it read
		 * ahead (the listener's HELLO, the client's CHALLENGE). */
		ret = nmsg & 1 ? tf__wire_rx_step_ahead(sv[1], &rx, SIZE_MAX)
			       : tf__wire_rx_step(sv[1], &rx);
		if (ret < 0)
			break;
		if (ret == 1) {
			decode(&rx, handshake);
			tf__wire_rx_reset(&rx);
			nmsg++;
			continue;
		}
		/* 0: more bytes needed; after EOF the socket says so. */
		FUZZ_CHECK(!shut || ++guard < 4);
	}
	tf__keys_free(keys_rx);
	tf__keys_free(keys_tx);
	keys_rx = keys_tx = NULL;
	close(sv[0]);
	close(sv[1]);
	return 0;
}
