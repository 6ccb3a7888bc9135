/* SPDX-License-Identifier: MIT */
/*
 * conf_session_basic: the session API end to end, with memory windows and
 * with the dedicated-registration fallback.  Side B serves, side A
 * connects.  Per round: the client's private data reaches the server; a
 * server exposure made before establish travels in the ACCEPT, one made
 * after in an EXPOSE message; the client READs, WRITEs, fetch-adds and
 * compare-swaps through them and the server sees exactly those bytes
 * change; bounds and rights are checked before posting (-ERANGE,
 * -EACCES, -EINVAL); SEND/RECV carry a message; the client exposes a
 * buffer the server writes.  A second session to the same server reuses
 * the kept connection (both sides see tf_session_reused), with new keys.
 * At the end no window is live and no slice is rented.
 */
#include "session_util.h"

#define LEN 4096

static const char hello[] = "hello, session";

static void server_round(struct tf_pair *p, tf_listener_t *l, int round)
{
	tf_exposure_info_t pe, e0, e1;
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	size_t plen;
	const void *priv = tf_session_peer_priv(s, &plen);
	uint8_t *a, *b, *c;
	int ba, bb, bc, x0, x1;
	uint64_t w0;
	struct tf_wc wc;

	CHECK(plen == sizeof(hello) && !memcmp(priv, hello, plen));
	CHECK(tf_session_state(s) == TF_SESSION_ACCEPTING);
	CHECK(tf_session_reused(s) == (round > 0));
	CHECK_OK(tf_session_rent(s, LEN, &ba, (void **)&a));
	tf_test_fill(a, LEN, 10 + (uint32_t)round);
	CHECK_OK(tf_session_expose(s, ba, 0, LEN,
				   TF_ACCESS_REMOTE_READ |
					   TF_ACCESS_REMOTE_WRITE |
					   TF_ACCESS_REMOTE_ATOMIC,
				   &x0));
	CHECK(x0 == 0);
	CHECK_OK(tf_session_establish(s));
	CHECK(tf_session_state(s) == TF_SESSION_OPEN);
	/* A read-only exposure, sent after establish. */
	CHECK_OK(tf_session_rent(s, LEN, &bb, (void **)&b));
	tf_test_fill(b, LEN, 20 + (uint32_t)round);
	CHECK_OK(tf_session_expose(s, bb, 1024, 2048, TF_ACCESS_REMOTE_READ,
				   &x1));
	CHECK(x1 == 1);
	CHECK_OK(tf_session_local_exposure(s, 0, &e0));
	CHECK_OK(tf_session_local_exposure(s, 1, &e1));
	CHECK(e0.rkey != e1.rkey);
	/* A receive for the client's SEND, posted before the client may
	 * send: iWARP has no receiver-not-ready retry, and a SEND that finds
	 * no receive ends the connection. */
	CHECK_OK(tf_session_rent(s, 256, &bc, (void **)&c));
	CHECK_OK(tf_session_recv(s, bc, 0, 256, 77));
	tf_test_send_u64(p, e0.rkey);
	/* The client exposes one buffer; write into it. */
	CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_peer_exposure(s, 0, &pe));
	CHECK(pe.length == 64 && pe.rights == TF_ACCESS_REMOTE_WRITE);
	memset(c + 128, 0x5a, 64);
	CHECK_OK(tf_session_write(s, bc, 128, 0, 0, 64, 5));
	/* The WRITE and the RECV complete in either order. */
	for (int got = 0; got != 3;) {
		CHECK(tf_session_wait(s, 1, &wc, 4 * tf_test_timeout_ms()) ==
		      1);
		CHECKF(wc.status == TF_WC_SUCCESS, "%s", tf_test_wc_str(&wc));
		if (wc.wr_id == 77) {
			CHECK(wc.opcode == TF_WC_RECV && wc.byte_len == 6 &&
			      !memcmp(c, "ping!", 6));
			got |= 1;
		} else {
			CHECK(wc.wr_id == 5 && wc.opcode == TF_WC_RDMA_WRITE);
			got |= 2;
		}
	}
	tf_test_sync(p); /* client done */
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	/* The client wrote pattern 30 over [2048, 3072) and, with atomics,
	 * added 5 to word 0 (then swapped word 1). */
	if (p->caps.flags & TF_CAP_ATOMIC) {
		memcpy(&w0, a, 8);
		w0 -= 5;
		memcpy(a, &w0, 8);
		memcpy(&w0, a + 8, 8);
		CHECK(w0 == 0x1122334455667788ull);
		for (size_t i = 8; i < 16; i++)
			a[i] = tf_test_pattern(i, 10 + (uint32_t)round);
	}
	CHECK_FILL(a, 2048, 10 + (uint32_t)round);
	CHECK_FILL(a + 2048, 1024, 30);
	CHECK_FILL(b, LEN, 20 + (uint32_t)round);
	tf_session_close(s);
}

static void client_round(struct tf_pair *p, tf_node_t *node, uint16_t port,
			 int round, uint32_t *key_p)
{
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_PRIV,
				  .priv = hello,
				  .priv_len = sizeof(hello)};
	tf_exposure_info_t e0;
	tf_session_t *s;
	uint8_t *m, *w;
	int bm, bw, xw;
	uint64_t v;

	CHECK_OK(tf_session_connect(node, st_host(), port, &sp, &s));
	CHECK(tf_session_reused(s) == (round > 0));
	CHECK(tf_session_peer_exposures(s) >= 1);
	CHECK_OK(tf_session_peer_exposure(s, 0, &e0));
	CHECK(e0.length == LEN);
	CHECK(tf_test_recv_u64(p) == e0.rkey);
	*key_p = e0.rkey;
	CHECK_OK(tf_session_rent(s, LEN, &bm, (void **)&m));
	/* READ all of exposure 0. */
	CHECK_OK(tf_session_read(s, bm, 0, 0, 0, LEN, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
	CHECK_FILL(m, LEN, 10 + (uint32_t)round);
	/* Exposure 1 arrives by EXPOSE; read its 2048 bytes. */
	CHECK_OK(tf_session_wait_peer(s, 2, 4 * tf_test_timeout_ms()));
	CHECK_OK(tf_session_read(s, bm, 0, 1, 0, 2048, 2));
	st_expect(s, 2, TF_WC_SUCCESS, NULL);
	for (size_t i = 0; i < 2048; i++)
		CHECK(m[i] == tf_test_pattern(1024 + i, 20 + (uint32_t)round));
	/* Local checks before anything is posted. */
	CHECK_ERR(tf_session_write(s, bm, 0, 1, 0, 8, 9), -EACCES);
	CHECK_ERR(tf_session_read(s, bm, 0, 1, 1, 2048, 9), -ERANGE);
	CHECK_ERR(tf_session_read(s, bm, LEN - 8, 0, 0, 16, 9), -ERANGE);
	CHECK_ERR(tf_session_read(s, bm, 0, 2, 0, 8, 9), -EINVAL);
	CHECK_ERR(tf_session_read(s, 7, 0, 0, 0, 8, 9), -EINVAL);
	CHECK_ERR(tf_session_fetch_add(s, bm, 0, 0, 4, 1, 9), -EINVAL);
	CHECK_ERR(tf_session_fetch_add(s, bm, 0, 1, 0, 1, 9), -EACCES);
	/* WRITE, then atomics on words 0 and 1. */
	tf_test_fill(m, 1024, 30);
	CHECK_OK(tf_session_write(s, bm, 0, 0, 2048, 1024, 3));
	st_expect(s, 3, TF_WC_SUCCESS, NULL);
	if (!(p->caps.flags & TF_CAP_ATOMIC)) {
		/* The session refuses what the device cannot do. */
		CHECK_ERR(tf_session_fetch_add(s, bm, 0, 0, 0, 5, 4),
			  -EOPNOTSUPP);
		if (round == 0)
			tf_test_partial_skip("no TF_CAP_ATOMIC: session "
					     "atomics");
	} else {
		CHECK_OK(tf_session_fetch_add(s, bm, 0, 0, 0, 5, 4));
		st_expect(s, 4, TF_WC_SUCCESS, NULL);
		for (int i = 0; i < 8; i++)
			CHECK(m[i] ==
			      tf_test_pattern((size_t)i, 10 + (uint32_t)round));
		{
			uint64_t cur;
			uint8_t pat[8];

			/* Word 1 still holds bytes 8..15 of the pattern. */
			for (int i = 0; i < 8; i++)
				pat[i] = tf_test_pattern(8 + (size_t)i,
							 10 + (uint32_t)round);
			memcpy(&cur, pat, 8);
			CHECK_OK(tf_session_cmp_swap(s, bm, 8, 0, 8, cur,
						     0x1122334455667788ull, 6));
			st_expect(s, 6, TF_WC_SUCCESS, NULL);
			memcpy(&v, m + 8, 8);
			CHECK(v == cur);
		}
	}
	/* SEND to the server's posted receive. */
	memcpy(m, "ping!", 6);
	CHECK_OK(tf_session_send(s, bm, 0, 6, 7));
	st_expect(s, 7, TF_WC_SUCCESS, NULL);
	/* Expose 64 bytes write-only; the server writes 0x5a there. */
	CHECK_OK(tf_session_rent(s, 64, &bw, (void **)&w));
	memset(w, 0, 64);
	CHECK_OK(tf_session_expose(s, bw, 0, 64, TF_ACCESS_REMOTE_WRITE, &xw));
	CHECK(xw == 0);
	for (int t = 0; t < 4 * tf_test_timeout_ms() && w[63] != 0x5a; t++) {
		struct tf_wc wc;

		CHECK(tf_session_wait(s, 1, &wc, 1) == 0);
	}
	CHECK_BYTES(w, 64, 0x5a);
	tf_test_sync(p);
	tf_session_close(s);
}

int main(void)
{
	struct tf_pair p;
	tf_node_stats_t st;

	tf_test_begin("conf_session_basic");
	tf_test_pair_open(&p);
	for (int use_mw = 1; use_mw >= 0; use_mw--) {
		tf_node_t *node = st_node(&p, use_mw, NULL, 0);

		if (use_mw) {
			CHECK_OK(tf_node_query_stats(node, &st));
			if (!st.use_mw)
				tf_test_partial_skip("no memory windows");
		}
		if (p.side == TF_SIDE_B) {
			tf_listener_t *l;

			CHECK_OK(st_listen(node, &l));
			tf_test_send_u64(&p, tf_listener_port(l));
			for (int r = 0; r < 2; r++)
				server_round(&p, l, r);
			tf_listener_destroy(l);
		} else {
			uint16_t port = (uint16_t)tf_test_recv_u64(&p);
			uint32_t k[2];

			for (int r = 0; r < 2; r++)
				client_round(&p, node, port, r, &k[r]);
			CHECKF(k[0] != k[1], "both sessions got key 0x%x",
			       k[0]);
		}
		CHECK_OK(tf_node_query_stats(node, &st));
		CHECKF(st.windows_live == 0 && st.slices_rented == 0 &&
			       st.sessions_live == 0,
		       "after close: %llu windows, %llu slices, %llu "
		       "sessions",
		       (unsigned long long)st.windows_live,
		       (unsigned long long)st.slices_rented,
		       (unsigned long long)st.sessions_live);
		CHECK(st.qp_reused == 1 && st.qp_new == 1);
		if (st.use_mw)
			CHECK(st.windows_bound ==
			      (p.side == TF_SIDE_B ? 4 : 2));
		else
			CHECK(st.expose_mr_fallback ==
			      (p.side == TF_SIDE_B ? 4 : 2));
		tf_test_sync(&p);
		tf_node_destroy(node);
	}
	return tf_test_pair_end(&p);
}
