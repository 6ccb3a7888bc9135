/* SPDX-License-Identifier: MIT */
/*
 * conf_session_imm: WRITE and SEND with an immediate through the session
 * API.  Side B serves: it exposes a write-only and a read-only buffer,
 * posts four receives and lets the client go.  Side A sends, in order:
 * a 1 KiB tf_session_write_imm, an empty one (the immediate alone), a
 * tf_session_send_imm and a plain SEND.  The server's receives complete
 * in that order: the writes as TF_WC_RECV_RDMA_WITH_IMM with the
 * immediate, TF_WC_WITH_IMM and the written length, the data in place and
 * the receive buffer untouched; the SEND with an immediate as TF_WC_RECV
 * with its immediate and bytes; the plain SEND without TF_WC_WITH_IMM.
 * The sender's completions are ordinary (RDMA_WRITE, SEND).  Bounds and
 * rights are checked before posting as for the plain calls.
 */
#include "session_util.h"

#define LEN  4096
#define WLEN 1024

static const uint32_t imm_w = 0xdeadbeef, imm_0 = 7, imm_s = 0x12345678;

static void server(struct tf_pair *p, tf_listener_t *l)
{
	tf_session_t *s = st_accept(l, TF_SESSION_DEFER_ESTABLISH);
	uint8_t *w, *r, *rc;
	int bw, br, bc, x;
	struct tf_wc wc;

	CHECK_OK(tf_session_rent(s, LEN, &bw, (void **)&w));
	memset(w, 0, LEN);
	CHECK_OK(tf_session_expose(s, bw, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
	CHECK(x == 0);
	CHECK_OK(tf_session_rent(s, 64, &br, (void **)&r));
	CHECK_OK(tf_session_expose(s, br, 0, 64, TF_ACCESS_REMOTE_READ, &x));
	CHECK(x == 1);
	CHECK_OK(tf_session_establish(s));
	/* Four receives of 64 bytes each, marked to see what is written. */
	CHECK_OK(tf_session_rent(s, 4 * 64, &bc, (void **)&rc));
	memset(rc, 0xee, 4 * 64);
	for (int i = 0; i < 4; i++)
		CHECK_OK(tf_session_recv(s, bc, (size_t)i * 64, 64,
					 10 + (uint64_t)i));
	tf_test_sync(p); /* the client may go */

	/* 1: the 1 KiB WRITE with its immediate, data in place. */
	st_expect(s, 10, TF_WC_SUCCESS, &wc);
	CHECKF(wc.opcode == TF_WC_RECV_RDMA_WITH_IMM &&
		       (wc.flags & TF_WC_WITH_IMM) && wc.imm_data == imm_w &&
		       wc.byte_len == WLEN,
	       "write_imm: %s flags 0x%x imm 0x%x", tf_test_wc_str(&wc),
	       wc.flags, wc.imm_data);
	CHECK_FILL(w + 512, WLEN, 42);
	CHECK_BYTES(w, 512, 0);
	CHECK_BYTES(rc, 64, 0xee);
	/* 2: the immediate alone. */
	st_expect(s, 11, TF_WC_SUCCESS, &wc);
	CHECKF(wc.opcode == TF_WC_RECV_RDMA_WITH_IMM &&
		       (wc.flags & TF_WC_WITH_IMM) && wc.imm_data == imm_0 &&
		       wc.byte_len == 0,
	       "empty write_imm: %s flags 0x%x imm 0x%x", tf_test_wc_str(&wc),
	       wc.flags, wc.imm_data);
	CHECK_BYTES(rc + 64, 64, 0xee);
	/* 3: SEND with an immediate. */
	st_expect(s, 12, TF_WC_SUCCESS, &wc);
	CHECKF(wc.opcode == TF_WC_RECV && (wc.flags & TF_WC_WITH_IMM) &&
		       wc.imm_data == imm_s && wc.byte_len == 6 &&
		       !memcmp(rc + 128, "hello", 6),
	       "send_imm: %s flags 0x%x imm 0x%x", tf_test_wc_str(&wc),
	       wc.flags, wc.imm_data);
	/* 4: a plain SEND has none. */
	st_expect(s, 13, TF_WC_SUCCESS, &wc);
	CHECKF(wc.opcode == TF_WC_RECV && !(wc.flags & TF_WC_WITH_IMM) &&
		       wc.byte_len == 6 && !memcmp(rc + 192, "plain", 6),
	       "send: %s flags 0x%x", tf_test_wc_str(&wc), wc.flags);
	tf_test_sync(p);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	tf_session_t *s;
	uint8_t *m;
	int bm;

	CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
	CHECK(tf_session_peer_exposures(s) == 2);
	CHECK_OK(tf_session_rent(s, LEN, &bm, (void **)&m));
	tf_test_fill(m, WLEN, 42);
	memcpy(m + 2048, "hello", 6);
	memcpy(m + 3072, "plain", 6);
	/* Checked before anything is posted, as the plain calls. */
	CHECK_ERR(tf_session_write_imm(s, bm, 0, 1, 0, 8, 1, 9), -EACCES);
	CHECK_ERR(tf_session_write_imm(s, bm, 0, 0, LEN - 4, 8, 1, 9), -ERANGE);
	CHECK_ERR(tf_session_write_imm(s, bm, 0, 2, 0, 8, 1, 9), -EINVAL);
	CHECK_ERR(tf_session_write_imm(s, 5, 0, 0, 0, 8, 1, 9), -EINVAL);
	CHECK_ERR(tf_session_send_imm(s, bm, LEN - 4, 8, 1, 9), -ERANGE);
	CHECK_ERR(tf_session_send_imm(s, 5, 0, 8, 1, 9), -EINVAL);
	CHECK_ERR(tf_session_write_imm(NULL, bm, 0, 0, 0, 8, 1, 9), -EINVAL);
	tf_test_sync(p); /* the server's receives are posted */

	CHECK_OK(tf_session_write_imm(s, bm, 0, 0, 512, WLEN, imm_w, 1));
	st_expect(s, 1, TF_WC_SUCCESS, NULL);
	CHECK_OK(tf_session_write_imm(s, bm, 0, 0, 0, 0, imm_0, 2));
	st_expect(s, 2, TF_WC_SUCCESS, NULL);
	CHECK_OK(tf_session_send_imm(s, bm, 2048, 6, imm_s, 3));
	st_expect(s, 3, TF_WC_SUCCESS, NULL);
	CHECK_OK(tf_session_send(s, bm, 3072, 6, 4));
	st_expect(s, 4, TF_WC_SUCCESS, NULL);
	tf_test_sync(p);
	tf_session_close(s);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_imm");
	tf_test_pair_open(&p);
	tf_test_require_caps(&p, TF_CAP_IMM_DATA,
			     "immediate data (iWARP has none)");
	return st_run(&p, server, client);
}
