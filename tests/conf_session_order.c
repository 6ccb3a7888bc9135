/* SPDX-License-Identifier: MIT */
/*
 * conf_session_order: data the client WRITEs is in the server's memory by
 * the time a control message sent after it arrives, with nothing else
 * between them.  Each round the server exposes LEN bytes, write-only and
 * zeroed; the client WRITEs the first half in CHUNK pieces, awaits their
 * completions and exposes a buffer of its own: when the server sees that
 * exposure (tf_session_wait_peer), the first half must be there.  The
 * client then WRITEs the second half and closes: when the server sees
 * TF_SESSION_PEER_CLOSED, all of it must be there.  On iWARP (no
 * TF_CAP_REMOTE_ACK) a WRITE completes once sent, and the EXPOSE and
 * CLOSE travel on another QP or TCP: the session orders them
 * (tf_session_close(3)).  The test channel carries nothing between the
 * writes and the checks, since it would order them itself.
 */
#include "session_util.h"

#define LEN    (1u << 20)
#define CHUNK  (64u << 10)
#define ROUNDS 8

/* One session: expose, then check after the EXPOSE and after the CLOSE. */
static void server_round(tf_listener_t *l, uint32_t seed)
{
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	uint8_t *m;
	int b, x;

	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&m));
	memset(m, 0, LEN);
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK_OK(tf_session_establish(s));
	/* The client's EXPOSE follows the first half. */
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_FILL(m, LEN / 2, seed);
	/* Its CLOSE follows the second half. */
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	CHECK_FILL(m, LEN, seed);
	tf_session_close(s);
}

/* WRITE [off, off + len) of @src to the same place of exposure 0, in
 * CHUNK pieces, and await the completions. */
static void write_range(tf_session_t *s, int b, uint32_t off, uint32_t len)
{
	uint32_t n = 0;

	for (uint32_t o = off; o < off + len; o += CHUNK, n++)
		CHECK_OK(tf_session_write(s, b, o, 0, o, CHUNK, n));
	for (uint32_t i = 0; i < n; i++)
		st_expect(s, i, TF_WC_SUCCESS, NULL);
}

static void client_round(tf_node_t *node, uint16_t port, uint32_t seed)
{
	tf_exposure_info_t e;
	tf_session_t *s;
	uint8_t *src;
	int b, bx, x;

	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
	CHECK_OK(tf_session_peer_exposure(s, 0, &e));
	CHECK(e.length == LEN && e.rights == TF_ACCESS_REMOTE_WRITE);
	CHECK_OK(tf_session_rent(s, LEN, &b, (void **)&src));
	tf_test_fill(src, LEN, seed);
	write_range(s, b, 0, LEN / 2);
	CHECK_OK(tf_session_rent(s, 64, &bx, NULL));
	CHECK_OK(tf_session_expose(s, bx, 0, 64, TF_ACCESS_REMOTE_READ, &x));
	write_range(s, b, LEN / 2, LEN / 2);
	tf_session_close(s);
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("conf_session_order");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B) {
		tf_listener_t *l;

		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(&p, tf_listener_port(l));
		for (uint32_t r = 0; r < ROUNDS; r++) {
			server_round(l, 100 + r);
			tf_test_sync(&p);
		}
		tf_listener_destroy(l);
	} else {
		uint16_t port = (uint16_t)tf_test_recv_u64(&p);

		for (uint32_t r = 0; r < ROUNDS; r++) {
			client_round(node, port, 100 + r);
			tf_test_sync(&p);
		}
	}
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
