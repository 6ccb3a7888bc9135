/* SPDX-License-Identifier: MIT */
/*
 * gen_corpus - write the seed corpus of every fuzz target, made with the
 * library's own encoders so that the seeds are valid messages of the
 * current formats (plus a few hand-made edge cases).
 *
 * Usage: gen_corpus DIR   (writes DIR/<target>/seed-*; scripts/fuzz.sh
 * --seed regenerates fuzz/corpus with it).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config_int.h"
#include "stats_fmt.h"
#include "wire_int.h"
#include "fuzz_common.h"
#include "fuzz_seal.h"
#include "soft_int.h"
#include "verbs_blob.h"

static const char *top;
static int failures;

static void put(const char *target, const char *name, const void *a,
		size_t alen, const void *b, size_t blen)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", top, target);
	if (mkdir(path, 0755) && errno != EEXIST) {
		perror(path);
		failures++;
		return;
	}
	snprintf(path, sizeof(path), "%s/%s/seed-%s", top, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(a, 1, alen, f) != alen ||
	    (blen && fwrite(b, 1, blen, f) != blen) || fclose(f)) {
		perror(path);
		failures++;
	}
}

/* ---------------------------------------------------------------- wire */

struct stream {
	uint8_t buf[16384];
	size_t len;
};

static void add_msg(struct stream *s, const struct tf_wire_msg *m)
{
	memcpy(s->buf + s->len, m->buf, m->len);
	s->len += m->len;
}

static void wire_seed(const char *name, uint8_t chunk, uint8_t flags,
		      const struct stream *s)
{
	uint8_t pre[2] = {chunk, flags};

	put("fuzz_wire", name, pre, 2, s->buf, s->len);
}

static void put_exposures(struct tf_wire_msg *m, unsigned n)
{
	tf__wire_put_u16(m, (uint16_t)n);
	for (unsigned i = 0; i < n; i++) {
		tf__wire_put_u64(m, 0x7f0000001000ull + i * 4096);
		tf__wire_put_u64(m, 4096);
		tf__wire_put_u32(m, 0x1234 + i);
		tf__wire_put_u32(m, TF_ACCESS_REMOTE_READ |
					    TF_ACCESS_REMOTE_WRITE);
	}
}

/* The fields of OPEN after its connection id (HELLO carries them too). */
static void put_open(struct tf_wire_msg *m, const uint8_t *blob,
		     size_t blob_len, const char *priv, const uint8_t *ctl,
		     size_t ctl_len)
{
	size_t priv_len = priv ? strlen(priv) : 0;

	tf__wire_put_u16(m, (uint16_t)blob_len);
	tf__wire_put_bytes(m, blob, blob_len);
	tf__wire_put_u16(m, (uint16_t)priv_len);
	tf__wire_put_bytes(m, priv, priv_len);
	tf__wire_put_u16(m, (uint16_t)ctl_len);
	tf__wire_put_bytes(m, ctl, ctl_len);
	tf__wire_put_u32(m, 0); /* no grant */
	tf__wire_put_u8(m, 0);	/* no flags */
}

/* Seal the finished @m as the client of fuzz_seal.h's connection does,
 * on channel @ch, bound to the fixed transcript hash if @th, and append
 * it to @s (with @ext zero bytes of header extension, for a header whose
 * hdr_size says so). */
static void add_sealed(struct stream *s, struct tf_sess_keys *k, unsigned ch,
		       bool th, struct tf_wire_msg *m, size_t ext)
{
	uint8_t hash[TF_WIRE_HASH];
	int ret;

	memset(hash, FUZZ_SEAL_TH_BYTE, sizeof(hash));
	ret = tf__wire_seal(k, ch, m, th ? hash : NULL);
	if (ret) {
		fprintf(stderr, "seal of %s: %s\n", tf__wire_op_name(m->buf[5]),
			tf_strerror(ret));
		failures++;
		return;
	}
	memcpy(s->buf + s->len, m->buf, TF_WIRE_HDR_SIZE);
	memset(s->buf + s->len + TF_WIRE_HDR_SIZE, 0, ext);
	memcpy(s->buf + s->len + TF_WIRE_HDR_SIZE + ext,
	       m->buf + TF_WIRE_HDR_SIZE, m->len - TF_WIRE_HDR_SIZE);
	s->len += m->len + ext;
}

/* Finished messages for gen_sealed. */
static void open_new(struct tf_wire_msg *m, const uint8_t *blob,
		     size_t blob_len)
{
	tf__wire_init(m, TF_WIRE_OPEN);
	tf__wire_put_u32(m, 0);
	put_open(m, blob, blob_len, "hello", NULL, 0);
	tf__wire_finish(m);
}

static void expose(struct tf_wire_msg *m, unsigned n)
{
	tf__wire_init(m, TF_WIRE_EXPOSE);
	put_exposures(m, n);
	tf__wire_finish(m);
}

static void msg_close(struct tf_wire_msg *m)
{
	tf__wire_init(m, TF_WIRE_CLOSE);
	tf__wire_finish(m);
}

/* Sealed seeds: byte 1 bit 0 of fuzz_wire's input binds the socket
 * channel's messages to the transcript hash (a handshake). */
static void gen_sealed(const uint8_t *blob, size_t blob_len)
{
	struct tf_sess_keys *k = NULL;
	struct tf_wire_msg m;
	struct stream s;

#define SEALED(_name, _chunk, _hs, _body)                           \
	do {                                                        \
		s.len = 0;                                          \
		if (fuzz_seal_keys(false, &k)) {                    \
			fprintf(stderr, "key derivation failed\n"); \
			failures++;                                 \
			return;                                     \
		}                                                   \
		_body;                                              \
		wire_seed(_name, _chunk, _hs, &s);                  \
		tf__keys_free(k);                                   \
	} while (0)
	/* A new authenticated connection's OPEN, and the server's answers
	 * (the parsers do not care who sealed). */
	SEALED("sealed-open", 0, 1, open_new(&m, blob, blob_len);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
	SEALED("sealed-accept", 0, 1, tf__wire_init(&m, TF_WIRE_ACCEPT);
	       tf__wire_put_u32(&m, 1);
	       tf__wire_put_u16(&m, (uint16_t)blob_len);
	       tf__wire_put_bytes(&m, blob, blob_len); tf__wire_put_u16(&m, 0);
	       tf__wire_put_u8(&m, 0); put_exposures(&m, 1);
	       tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
	SEALED("sealed-addr", 0, 1, tf__wire_init(&m, TF_WIRE_ADDR);
	       tf__wire_put_qps(&m, 1, blob, blob_len, NULL, 0);
	       tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
	SEALED("sealed-reject", 0, 1, tf__wire_init(&m, TF_WIRE_REJECT);
	       tf__wire_put_u32(&m, TF_EAUTH); tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
	/* A kept connection's next OPEN on the control QP. */
	SEALED("sealed-open-kept", 0, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	       tf__wire_put_u32(&m, 9); put_open(&m, NULL, 0, "abc", NULL, 0);
	       tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_CTL, false, &m, 0));
	/* Both channels interleaved, each numbered on its own; once as a
	 * handshake followed by the session's messages, once in pieces. */
	SEALED("sealed-stream", 0, 1, open_new(&m, blob, blob_len);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0); expose(&m, 2);
	       add_sealed(&s, k, TF_WIRE_CH_CTL, false, &m, 0); expose(&m, 1);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0); msg_close(&m);
	       add_sealed(&s, k, TF_WIRE_CH_CTL, false, &m, 0); msg_close(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
	SEALED("sealed-stream-split", 7, 0, expose(&m, 3);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, false, &m, 0); msg_close(&m);
	       add_sealed(&s, k, TF_WIRE_CH_CTL, false, &m, 0); expose(&m, 1);
	       add_sealed(&s, k, TF_WIRE_CH_CTL, false, &m, 0); msg_close(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, false, &m, 0));
	/* The same message twice: the copy must not open. */
	SEALED("sealed-replay", 0, 0, msg_close(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, false, &m, 0);
	       memcpy(s.buf + s.len, s.buf, s.len); s.len *= 2);
	/* A header of a later version (hdr_size 24): its first 16 bytes are
	 * authenticated, the extension is skipped. */
	SEALED("sealed-hdr-extended", 0, 0, tf__wire_init(&m, TF_WIRE_CLOSE);
	       m.buf[9] = 24; tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, false, &m, 8));
	/* The largest sealed body (TF_WIRE_MAX_BODY): an OPEN whose last
	 * field is followed by bytes the parser ignores. */
	SEALED("sealed-max", 0, 1, tf__wire_init(&m, TF_WIRE_OPEN);
	       tf__wire_put_u32(&m, 0);
	       put_open(&m, blob, blob_len, "", blob, blob_len);
	       while (m.len < TF_WIRE_HDR_SIZE + TF_WIRE_MAX_BODY - TF_WIRE_TAG)
		       tf__wire_put_u8(&m, 0xee);
	       tf__wire_finish(&m);
	       add_sealed(&s, k, TF_WIRE_CH_SOCK, true, &m, 0));
#undef SEALED
}

static void gen_wire(const uint8_t *blob, size_t blob_len)
{
	uint8_t nonce[TF_WIRE_NONCE], mac[TF_WIRE_MAC];
	struct tf_wire_msg m;
	struct stream s = {0}, all = {0};

	memset(nonce, 0xa5, sizeof(nonce));
	memset(mac, 0x5a, sizeof(mac));

#define MSG(_name, _chunk, _flags, _build)            \
	do {                                          \
		_build;                               \
		tf__wire_finish(&m);                  \
		s.len = 0;                            \
		add_msg(&s, &m);                      \
		add_msg(&all, &m);                    \
		wire_seed(_name, _chunk, _flags, &s); \
	} while (0)

	/* With a key, HELLO is the nonce alone; without one it carries the
	 * OPEN's fields. */
	MSG("hello", 0, 0, tf__wire_init(&m, TF_WIRE_HELLO);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH));
	MSG("hello-open", 0, 0, tf__wire_init(&m, TF_WIRE_HELLO);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, 0);
	    put_open(&m, blob, blob_len, "hello", NULL, 0));
	MSG("hello-open-ctl", 5, 0, tf__wire_init(&m, TF_WIRE_HELLO);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, 0);
	    put_open(&m, blob, blob_len, NULL, blob, blob_len));
	MSG("challenge", 3, 0, tf__wire_init(&m, TF_WIRE_CHALLENGE);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, 0); tf__wire_put_bytes(&m, mac, sizeof(mac)));
	/* An early OPEN's HELLO (its time), and the CHALLENGE taking it. */
	MSG("hello-early", 0, 0, tf__wire_init(&m, TF_WIRE_HELLO);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH | TF_WIRE_HELLO_EARLY);
	    tf__wire_put_u64(&m, 1764806400000000000ull));
	MSG("challenge-early", 0, 0, tf__wire_init(&m, TF_WIRE_CHALLENGE);
	    tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	    tf__wire_put_u8(&m, TF_WIRE_CHALLENGE_EARLY);
	    tf__wire_put_bytes(&m, mac, sizeof(mac)));
	/* OPEN of a new connection (the plain text of the sealed one) and
	 * of a kept one (its id, no blobs). */
	MSG("open", 0, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	    tf__wire_put_u32(&m, 0);
	    put_open(&m, blob, blob_len, "hello", NULL, 0));
	MSG("open-ctl", 0, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	    tf__wire_put_u32(&m, 0);
	    put_open(&m, blob, blob_len, NULL, blob, blob_len));
	MSG("open-kept", 7, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	    tf__wire_put_u32(&m, 9); put_open(&m, NULL, 0, "abc", NULL, 0));
	/* A kept connection's OPEN that takes grant 3, and the GRANT. */
	MSG("open-kept-grant", 0, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	    tf__wire_put_u32(&m, 9); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u16(&m, 0); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u32(&m, 3); tf__wire_put_u8(&m, 0));
	MSG("grant", 0, 0,
	    tf__wire_put_grant(
		    &m, 3,
		    &(tf_exposure_info_t){.addr = 0x10000,
					  .length = 1024,
					  .rkey = 0x1234,
					  .rights = TF_ACCESS_REMOTE_WRITE}));
	MSG("accept", 0, 0, tf__wire_init(&m, TF_WIRE_ACCEPT);
	    tf__wire_put_u32(&m, 1); tf__wire_put_u16(&m, (uint16_t)blob_len);
	    tf__wire_put_bytes(&m, blob, blob_len);
	    tf__wire_put_u16(&m, (uint16_t)blob_len);
	    tf__wire_put_bytes(&m, blob, blob_len); tf__wire_put_u8(&m, 0);
	    put_exposures(&m, 2));
	MSG("accept-reused", 0, 0, tf__wire_init(&m, TF_WIRE_ACCEPT);
	    tf__wire_put_u32(&m, 1); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u16(&m, 0); tf__wire_put_u8(&m, 0);
	    put_exposures(&m, 0));
	/* Remote invalidation: asked in a kept connection's OPEN, agreed
	 * in its ACCEPT (of exposure 0). */
	MSG("open-rinv", 0, 0, tf__wire_init(&m, TF_WIRE_OPEN);
	    tf__wire_put_u32(&m, 9); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u16(&m, 0); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u32(&m, 0); tf__wire_put_u8(&m, TF_WIRE_OPEN_RINV));
	MSG("accept-rinv", 0, 0, tf__wire_init(&m, TF_WIRE_ACCEPT);
	    tf__wire_put_u32(&m, 9); tf__wire_put_u16(&m, 0);
	    tf__wire_put_u16(&m, 0); tf__wire_put_u8(&m, TF_WIRE_ACCEPT_RINV);
	    put_exposures(&m, 1));
	MSG("addr", 0, 0, tf__wire_init(&m, TF_WIRE_ADDR);
	    tf__wire_put_qps(&m, 1, blob, blob_len, blob, blob_len));
	MSG("reject", 0, 0, tf__wire_init(&m, TF_WIRE_REJECT);
	    tf__wire_put_u32(&m, TF_EAUTH));
	MSG("expose", 1, 0, tf__wire_init(&m, TF_WIRE_EXPOSE);
	    put_exposures(&m, 3));
	/* The session already knows 62 exposures: 3 more overflow. */
	MSG("expose-full", 0, 62 << 1, tf__wire_init(&m, TF_WIRE_EXPOSE);
	    put_exposures(&m, 3));
	MSG("close", 0, 0, tf__wire_init(&m, TF_WIRE_CLOSE));
#undef MSG
	wire_seed("stream", 0, 0, &all);
	wire_seed("stream-bytewise", 1, 0, &all);

	/* A header of a later version that grew by 8 bytes (hdr_size 24),
	 * then edge cases each rejected by one check. */
	{
		struct tf_wire_hdr h = {.magic = TF_WIRE_MAGIC,
					.version = TF_WIRE_VERSION,
					.op = TF_WIRE_CLOSE,
					.hdr_size = 24};
		uint8_t b[24] = {0};

		tf__wire_hdr_encode(&h, b);
		s.len = 0;
		memcpy(s.buf, b, sizeof(b));
		s.len = sizeof(b);
		wire_seed("hdr-extended", 0, 0, &s);
		h.hdr_size = 16;
		h.version = TF_WIRE_VERSION - 1;
		tf__wire_hdr_encode(&h, s.buf);
		s.len = 16;
		wire_seed("edge-version", 0, 0, &s);
		h.version = TF_WIRE_VERSION;
		h.size = TF_WIRE_MAX_BODY + 1;
		tf__wire_hdr_encode(&h, s.buf);
		wire_seed("edge-size", 0, 0, &s);
		h.size = 0;
		h.hdr_size = TF_WIRE_MAX_HDR + 1;
		tf__wire_hdr_encode(&h, s.buf);
		wire_seed("edge-hdr-size", 0, 0, &s);
		h.hdr_size = 16;
		h.op = TF_WIRE_OP_MAX + 1;
		tf__wire_hdr_encode(&h, s.buf);
		wire_seed("edge-op", 0, 0, &s);
		h.op = TF_WIRE_CLOSE;
		h.flags = 2;
		tf__wire_hdr_encode(&h, s.buf);
		wire_seed("edge-flags", 0, 0, &s);
	}
	gen_sealed(blob, blob_len);
}

/* A client's side of the handshake for fuzz_session_accept: byte 0
 * selects the listener (1: the one with a key), then the stream. */
static void accept_seed(const char *name, uint8_t keyed, const struct stream *s)
{
	put("fuzz_session_accept", name, &keyed, 1, s->buf, s->len);
}

/* HELLO with (@auth) or without a key; without one it carries the
 * client's QP @blob and private data, and @blob as its control QP too if
 * @ctl. */
static void accept_hello(struct stream *s, bool auth, const uint8_t *blob,
			 size_t blob_len, bool ctl)
{
	uint8_t nonce[TF_WIRE_NONCE];
	struct tf_wire_msg m;

	memset(nonce, 0x3c, sizeof(nonce));
	tf__wire_init(&m, TF_WIRE_HELLO);
	tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	tf__wire_put_u8(&m, auth ? TF_WIRE_HELLO_AUTH : 0);
	if (!auth)
		put_open(&m, blob, blob_len, "abc", ctl ? blob : NULL,
			 ctl ? blob_len : 0);
	tf__wire_finish(&m);
	add_msg(s, &m);
}

/* A HELLO that asks for an early OPEN (the harness seals what follows
 * under the early key and sets the time), nonce @fill. */
static void accept_hello_early(struct stream *s, uint8_t fill)
{
	uint8_t nonce[TF_WIRE_NONCE];
	struct tf_wire_msg m;

	memset(nonce, fill, sizeof(nonce));
	tf__wire_init(&m, TF_WIRE_HELLO);
	tf__wire_put_bytes(&m, nonce, sizeof(nonce));
	tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH | TF_WIRE_HELLO_EARLY);
	tf__wire_put_u64(&m, 0);
	tf__wire_finish(&m);
	add_msg(s, &m);
}

/* With a key, what follows the HELLO is the plain text of the message
 * the harness seals: its op byte, then its body. */
static void accept_sealed(struct stream *s, enum tf_wire_op op, uint32_t reuse,
			  const uint8_t *blob, size_t blob_len)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, op);
	tf__wire_put_u32(&m, reuse);
	put_open(&m, blob, blob_len, "abc", NULL, 0);
	tf__wire_finish(&m);
	s->buf[s->len++] = (uint8_t)op;
	memcpy(s->buf + s->len, m.buf + TF_WIRE_HDR_SIZE,
	       m.len - TF_WIRE_HDR_SIZE);
	s->len += m.len - TF_WIRE_HDR_SIZE;
}

static void gen_accept(const uint8_t *blob, size_t blob_len)
{
	struct tf_wire_msg m;
	struct stream s = {0};

	/* Without a key: one round trip (ACCEPT), the client's control QP
	 * offered (refused: no QP cache), and refusals. */
	accept_hello(&s, false, blob, blob_len, false);
	accept_seed("hello", 0, &s);
	s.len = 0;
	accept_hello(&s, false, blob, blob_len, true);
	accept_seed("hello-ctl", 0, &s);
	s.len = 0;
	accept_hello(&s, true, NULL, 0, false);
	accept_seed("hello-auth-unkeyed", 0, &s);
	s.len = 0;
	tf__wire_init(&m, TF_WIRE_OPEN);
	tf__wire_put_u32(&m, 0);
	put_open(&m, blob, blob_len, "abc", NULL, 0);
	tf__wire_finish(&m);
	add_msg(&s, &m);
	accept_seed("open-first", 0, &s);

	/* With a key: CHALLENGE, then the sealed OPEN of a new connection
	 * (ACCEPT), of a kept one (REJECT) and a sealed HELLO (REJECT); the
	 * client that leaves after the challenge; a HELLO without a key. */
	s.len = 0;
	accept_hello(&s, true, NULL, 0, false);
	accept_seed("keyed-hello", 1, &s);
	accept_sealed(&s, TF_WIRE_OPEN, 0, blob, blob_len);
	accept_seed("keyed-open", 1, &s);
	s.len = 0;
	accept_hello(&s, true, NULL, 0, false);
	accept_sealed(&s, TF_WIRE_OPEN, 5, NULL, 0);
	accept_seed("keyed-open-kept", 1, &s);
	s.len = 0;
	accept_hello(&s, true, NULL, 0, false);
	accept_sealed(&s, TF_WIRE_HELLO, 0, blob, blob_len);
	accept_seed("keyed-hello-sealed", 1, &s);
	s.len = 0;
	accept_hello(&s, false, blob, blob_len, false);
	accept_seed("keyed-hello-nokey", 1, &s);
	/* With a key, the early OPEN (ACCEPT in one round trip, then a
	 * replay's CHALLENGE), a kept connection's OPEN in it (REJECT), and
	 * a HELLO in its place. */
	s.len = 0;
	accept_hello_early(&s, 0x4d);
	accept_sealed(&s, TF_WIRE_OPEN, 0, blob, blob_len);
	accept_seed("keyed-early-open", 1, &s);
	s.len = 0;
	accept_hello_early(&s, 0x4e);
	accept_sealed(&s, TF_WIRE_OPEN, 5, NULL, 0);
	accept_seed("keyed-early-open-kept", 1, &s);
	s.len = 0;
	accept_hello_early(&s, 0x4f);
	accept_sealed(&s, TF_WIRE_HELLO, 0, blob, blob_len);
	accept_seed("keyed-early-hello", 1, &s);
}

/* ---------------------------------------------------------------- tcp */

static void gen_tcp(void)
{
	static const char *const names[] = {
		NULL,	 "hello",     "send",	    "send-imm",	 "send-inv",
		"write", "write-imm", "read-req",   "fetch-add", "cmp-swap",
		"ack",	 "read-resp", "atomic-resp"};
	uint8_t all[4096], one[SOFT_TCP_HDR_MAX + 64];
	size_t all_len = 1;

	all[0] = 0;
	for (unsigned op = 1; op <= SOFT_TCP_OP_ATOMIC_RESP; op++) {
		struct soft_tcp_hdr h = {.opcode = (uint8_t)op, .psn = 7};
		uint8_t payload[16];
		int n;

		memset(payload, 0x42, sizeof(payload));
		switch (op) {
		case SOFT_TCP_OP_HELLO:
			h.psn = 0;
			h.dst_qpn = 0x1001;
			h.src_qpn = 0x2002;
			h.dst_nonce = 0x1122334455667788ull;
			h.src_nonce = 0x8877665544332211ull;
			break;
		case SOFT_TCP_OP_SEND:
		case SOFT_TCP_OP_SEND_IMM:
		case SOFT_TCP_OP_SEND_INV:
			h.size = sizeof(payload);
			h.imm = op == SOFT_TCP_OP_SEND_IMM ? 0xdead : 0;
			h.inv_rkey = op == SOFT_TCP_OP_SEND_INV ? 0xbeef : 0;
			break;
		case SOFT_TCP_OP_WRITE:
		case SOFT_TCP_OP_WRITE_IMM:
			h.size = sizeof(payload);
			h.raddr = 0x7f0000001000ull;
			h.rkey = 0x3344;
			h.imm = op == SOFT_TCP_OP_WRITE_IMM ? 1 : 0;
			break;
		case SOFT_TCP_OP_READ_REQ:
			h.raddr = 0x7f0000001000ull;
			h.rkey = 0x3344;
			h.length = 4096;
			break;
		case SOFT_TCP_OP_FETCH_ADD:
		case SOFT_TCP_OP_CMP_SWAP:
			h.raddr = 0x7f0000001000ull;
			h.rkey = 0x3344;
			h.compare_add = 1;
			h.swap = op == SOFT_TCP_OP_CMP_SWAP ? 2 : 0;
			break;
		case SOFT_TCP_OP_ACK:
			h.status = SOFT_TCP_ST_RNR;
			break;
		case SOFT_TCP_OP_READ_RESP:
			h.size = sizeof(payload);
			break;
		case SOFT_TCP_OP_ATOMIC_RESP:
			h.orig = 99;
			break;
		}
		one[0] = 0;
		n = soft_tcp_encode_hdr(&h, one + 1);
		if (n <= 0) {
			fprintf(stderr, "encode of op %u failed\n", op);
			failures++;
			continue;
		}
		memcpy(one + 1 + n, payload, h.size);
		put("fuzz_soft_tcp_frame", names[op], one,
		    1 + (size_t)n + h.size, NULL, 0);
		memcpy(all + all_len, one + 1, (size_t)n + h.size);
		all_len += (size_t)n + h.size;
	}
	put("fuzz_soft_tcp_frame", "stream", all, all_len, NULL, 0);
	/* max_msg 2^4: the 16-byte payloads fit, a 17-byte one does not. */
	all[0] = 4;
	put("fuzz_soft_tcp_frame", "stream-small-max", all, all_len, NULL, 0);
	one[0] = 0;
	one[1] = SOFT_TCP_VERSION + 1;
	put("fuzz_soft_tcp_frame", "edge-version", one, 2 + 15, NULL, 0);
}

/* ---------------------------------------------------------------- blobs */

static int soft_blob(const char *transport, uint8_t *blob, size_t *len)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER |
						TF_CONTEXT_PARAM_TRANSPORT |
						TF_CONTEXT_PARAM_TCP_ADDR,
				  .provider = "soft",
				  .transport = transport,
				  .tcp_addr = "127.0.0.1"};
	tf_qp_params_t qpp = {0};
	tf_context_t *ctx = NULL;
	tf_pd_t *pd = NULL;
	tf_cq_t *cq = NULL;
	tf_qp_t *qp = NULL;
	int ret;

	ret = tf_context_open(&cp, &ctx);
	if (!ret)
		ret = tf_pd_create(ctx, &pd);
	if (!ret)
		ret = tf_cq_create(ctx, NULL, &cq);
	qpp.send_cq = cq;
	qpp.recv_cq = cq;
	if (!ret)
		ret = tf_qp_create(pd, &qpp, &qp);
	if (!ret)
		ret = tf_qp_get_addr(qp, blob, len);
	tf_qp_destroy(qp);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	tf_context_close(ctx);
	if (ret) {
		fprintf(stderr, "soft blob (%s): %s\n", transport,
			tf_strerror(ret));
		failures++;
	}
	return ret;
}

/* A verbs blob with a GID ending in 1 and LID 0 (IB: LID 0x11). */
static int verbs_blob(uint8_t ll, uint32_t qpn, uint32_t psn, uint8_t mtu,
		      uint8_t *blob, size_t *len)
{
	struct tf_verbs_addr a = {.qpn = qpn,
				  .psn = psn,
				  .lid = ll == VERBS_LL_IB ? 0x11 : 0,
				  .mtu = mtu,
				  .link_layer = ll,
				  .port = 1};
	int ret;

	a.gid[15] = 1;
	ret = tf_verbs_addr_encode(&a, blob, len);
	if (ret) {
		fprintf(stderr, "verbs blob: %s\n", tf_strerror(ret));
		failures++;
	}
	return ret;
}

static void gen_addr(uint8_t *shm_blob, size_t *shm_len, uint8_t *tcp_blob,
		     size_t *tcp_len)
{
	uint8_t blob[TF_QP_ADDR_MAX], vb[VERBS_ADDR_LEN];
	size_t len = sizeof(blob);

	if (!soft_blob("shm", shm_blob, shm_len))
		put("fuzz_soft_addr", "shm", shm_blob, *shm_len, NULL, 0);
	if (!soft_blob("tcp", blob, &len)) {
		memcpy(tcp_blob, blob, len);
		*tcp_len = len;
		put("fuzz_soft_addr", "tcp", blob, len, NULL, 0);
		put("fuzz_soft_addr", "edge-truncated", blob, 8, NULL, 0);
		blob[4] = 2;
		put("fuzz_soft_addr", "edge-version", blob, len, NULL, 0);
	}
	len = sizeof(blob);
	if (!soft_blob("auto", blob, &len))
		put("fuzz_soft_addr", "auto", blob, len, NULL, 0);
	/* A verbs blob (RoCE, QPN 0x11, 1024-byte MTU): the soft provider
	 * must say "not mine". */
	len = sizeof(vb);
	if (verbs_blob(VERBS_LL_ETH, 0x11, 0, 3, vb, &len))
		return;
	put("fuzz_soft_addr", "verbs", vb, len, NULL, 0);
}

/* Valid blobs of both link layers and every MTU, then blobs each refused
 * by one check, and a soft blob (not a verbs one). */
static void gen_verbs_addr(const uint8_t *soft, size_t soft_len)
{
	uint8_t b[VERBS_ADDR_LEN];
	size_t len = sizeof(b);
	char name[32];

	for (uint8_t m = VERBS_MTU_MIN; m <= VERBS_MTU_MAX; m++) {
		len = sizeof(b);
		if (verbs_blob(VERBS_LL_ETH, 0x100 + m, 0x123456, m, b, &len))
			return;
		snprintf(name, sizeof(name), "roce-mtu%u", 128u << m);
		put("fuzz_verbs_addr", name, b, len, NULL, 0);
	}
	len = sizeof(b);
	if (verbs_blob(VERBS_LL_IB, VERBS_24B_MASK, VERBS_24B_MASK, 5, b, &len))
		return;
	put("fuzz_verbs_addr", "ib-max", b, len, NULL, 0);
	put("fuzz_verbs_addr", "edge-truncated", b, len - 1, NULL, 0);
	put("fuzz_verbs_addr", "edge-short", b, 7, NULL, 0);
	b[4] = VERBS_ADDR_VERSION + 1;
	put("fuzz_verbs_addr", "edge-version", b, len, NULL, 0);
	b[4] = VERBS_ADDR_VERSION;
	b[8] = 1; /* QPN of 25 bits */
	put("fuzz_verbs_addr", "edge-qpn", b, len, NULL, 0);
	b[8] = 0;
	b[35] = 1; /* 4097-byte MTU */
	put("fuzz_verbs_addr", "edge-mtu", b, len, NULL, 0);
	b[35] = 0;
	b[39] = 1;
	put("fuzz_verbs_addr", "edge-reserved", b, len, NULL, 0);
	put("fuzz_verbs_addr", "soft", soft, soft_len, NULL, 0);
}

/* ---------------------------------------------------------------- config */

static void gen_config(void)
{
	static const char *const extra[] = {
		"inf",	 "16M", "18446744073709551615", "18446744073709551616",
		" 1G",	 "1TB", "17179869184G",		"yes",
		"trace", "",	"4294967296",		"-1"};
	static const char *const defaults[] = {
#define XX(_comp, _NAME, _field, _type, _def, _help) _def,
		TF_CONFIG_VARS(XX)
#undef XX
	};
	size_t n = sizeof(defaults) / sizeof(defaults[0]);
	char name[32];
	uint8_t sel;

	for (size_t i = 0; i < n; i++) {
		sel = (uint8_t)i;
		snprintf(name, sizeof(name), "var%02zu-default", i);
		put("fuzz_config", name, &sel, 1, defaults[i],
		    strlen(defaults[i]));
	}
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		sel = (uint8_t)(i * 3 % n);
		snprintf(name, sizeof(name), "value%02zu", i);
		put("fuzz_config", name, &sel, 1, extra[i], strlen(extra[i]));
	}
	sel = (uint8_t)n;
	put("fuzz_config", "by-name", &sel, 1,
	    "SOFT_MAX_MSG\0"
	    "64K",
	    16);
}

/* --------------------------------------------------------------- stats */

static void gen_stats(void)
{
	static uint8_t a[TF_STATS_HDR_SIZE + 8 * TF_STATS_ENTRY_SIZE];
	static uint8_t b[TF_STATS_HDR_SIZE + 8 * TF_STATS_ENTRY_SIZE];
	uint32_t la, lb;

	tf__stats_init(a, 8, TF_STATS_F_FINAL, 4242, 0, 1000, "soft", "soft",
		       "server");
	tf__stats_add(a, "ctx.send_posted", 37);
	tf__stats_add(a, "ctx.bytes_out", 37 * 1024);
	tf__stats_add(a, "node0.pool.rents", 2);
	la = tf__stats_seal(a, 5000);
	put("fuzz_stats", "one", a, la, NULL, 0);
	/* A dump of two contexts, the second one empty. */
	tf__stats_init(b, 0, TF_STATS_F_FINAL, 4243, 1, 2000, "verbs", "rxe0",
		       "client");
	lb = tf__stats_seal(b, 6000);
	put("fuzz_stats", "two", a, la, b, lb);
	/* A live record with a dropped counter. */
	tf__stats_init(b, 1, 0, 1, 2, 3, "soft", "soft", "x");
	tf__stats_add(b, "ctx.mr_reg", 1);
	tf__stats_add(b, "ctx.mr_dereg", 1);
	lb = tf__stats_seal(b, 4);
	put("fuzz_stats", "dropped", b, lb, NULL, 0);
	put("fuzz_stats", "truncated", a, la - 9, NULL, 0);
}

int main(int argc, char **argv)
{
	uint8_t blob[TF_QP_ADDR_MAX], tblob[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob), tlen = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	top = argv[1];
	if (mkdir(top, 0755) && errno != EEXIST) {
		perror(top);
		return 1;
	}
	gen_addr(blob, &len, tblob, &tlen);
	gen_verbs_addr(tblob, tlen);
	gen_wire(blob, len);
	gen_accept(tblob, tlen);
	gen_tcp();
	gen_config();
	gen_stats();
	return failures ? 1 : 0;
}
