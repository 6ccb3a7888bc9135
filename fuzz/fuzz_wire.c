/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire - the session bootstrap wire format (src/core/wire.c).
 *
 * The input is a byte stream as a peer would send it on the bootstrap
 * socket.  It goes through a socketpair into tf__wire_rx_step, the real
 * non-blocking receive state machine (header, extra header bytes a later
 * version may add, body), in chunks whose size the input chooses so that
 * partial reads are exercised.  Every complete message is then decoded with
 * the tf__wire_get_* cursor exactly as session.c and session_conn.c decode
 * it (the body parsers of server_open, client_accept and connect_new are
 * inline there, so their field sequence is replayed here), and EXPOSE and
 * ACCEPT bodies go through tf__sess_read_exposures on a session object.
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

#include "core/session_int.h"
#include "core/wire_int.h"
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

/* The OPEN body, as server_open reads it. */
static void decode_open(struct tf_wire_cur *cur, bool with_mac)
{
	const uint8_t *mac = NULL, *blob, *priv;
	uint16_t blob_len, priv_len;

	if (with_mac)
		mac = tf__wire_get_bytes(cur, TF_WIRE_MAC);
	(void)tf__wire_get_u32(cur);
	blob_len = tf__wire_get_u16(cur);
	blob = tf__wire_get_bytes(cur, blob_len);
	priv_len = tf__wire_get_u16(cur);
	priv = tf__wire_get_bytes(cur, priv_len);
	if (cur->bad)
		return;
	/* What the server then uses must lie inside what was received. */
	FUZZ_CHECK(!with_mac || mac);
	FUZZ_CHECK(blob && priv);
	if (blob_len <= TF_QP_ADDR_MAX && priv_len <= TF_WIRE_MAX_PRIV) {
		uint8_t copy[TF_WIRE_MAX_PRIV];

		memcpy(copy, priv, priv_len);
		memcpy(copy, blob, blob_len);
	}
}

/* The CHALLENGE body, as connect_new reads it. */
static void decode_challenge(struct tf_wire_cur *cur)
{
	const uint8_t *ns, *smac = NULL;
	uint8_t auth, nonce[TF_WIRE_NONCE], mac[TF_WIRE_MAC];

	ns = tf__wire_get_bytes(cur, TF_WIRE_NONCE);
	auth = tf__wire_get_u8(cur);
	if (auth)
		smac = tf__wire_get_bytes(cur, TF_WIRE_MAC);
	if (cur->bad || auth > 1)
		return;
	memcpy(nonce, ns, TF_WIRE_NONCE);
	if (smac)
		memcpy(mac, smac, TF_WIRE_MAC);
}

/* The REJECT body, as client_accept and connect_new read it. */
static void decode_reject(struct tf_wire_cur *cur)
{
	int ret = (int)tf__wire_get_u32(cur);

	ret = -((cur->bad || ret <= 0 || ret > 4096) ? TF_EWIRE : ret);
	FUZZ_CHECK(tf_strerror(ret) != NULL);
}

/* The ACCEPT body, as client_accept reads it. */
static void decode_accept(struct tf_wire_cur *cur)
{
	const uint8_t *blob;
	uint16_t blob_len;
	uint8_t copy[TF_QP_ADDR_MAX];

	(void)tf__wire_get_u32(cur);
	blob_len = tf__wire_get_u16(cur);
	blob = tf__wire_get_bytes(cur, blob_len);
	if (cur->bad || blob_len > TF_QP_ADDR_MAX)
		return;
	memcpy(copy, blob, blob_len);
	(void)tf__sess_read_exposures(sess, cur);
}

static void decode(const struct tf_wire_rx *rx, bool with_mac)
{
	struct tf_wire_cur cur;
	struct tf_wire_hdr h;
	uint8_t enc[TF_WIRE_HDR_SIZE];
	int before = sess->n_peer;

	/* The state machine hands over only what it validated. */
	FUZZ_CHECK(rx->have_hdr);
	FUZZ_CHECK(rx->h.hdr_size >= TF_WIRE_HDR_SIZE &&
		   rx->h.hdr_size <= TF_WIRE_MAX_HDR);
	FUZZ_CHECK(rx->h.size <= TF_WIRE_MAX_BODY);
	FUZZ_CHECK(rx->got == (size_t)rx->h.hdr_size + rx->h.size);
	FUZZ_CHECK(tf__wire_hdr_decode(rx->hdr, &h) == 0);
	tf__wire_hdr_encode(&h, enc);
	FUZZ_CHECK(!memcmp(enc, rx->hdr, TF_WIRE_HDR_SIZE));

	tf__wire_cur_init(&cur, rx);
	switch (rx->h.op) {
	case TF_WIRE_HELLO:
		(void)tf__wire_get_bytes(&cur, TF_WIRE_NONCE);
		break;
	case TF_WIRE_CHALLENGE:
		decode_challenge(&cur);
		break;
	case TF_WIRE_OPEN:
		decode_open(&cur, with_mac);
		break;
	case TF_WIRE_ACCEPT:
		decode_accept(&cur);
		break;
	case TF_WIRE_REJECT:
		decode_reject(&cur);
		break;
	case TF_WIRE_EXPOSE:
		(void)tf__sess_read_exposures(sess, &cur);
		break;
	default:
		break;
	}
	/* Exposures only accumulate, within the per-session bound. */
	FUZZ_CHECK(sess->n_peer >= before);
	FUZZ_CHECK(sess->n_peer <= TF_SESSION_MAX_EXPOSURES);
	FUZZ_CHECK(cur.bad || cur.left <= rx->h.size);
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
