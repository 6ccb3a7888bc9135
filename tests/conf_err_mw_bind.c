/* SPDX-License-Identifier: MIT */
/*
 * conf_err_mw_bind: BIND_MW requests that the region does not allow
 * complete with TF_WC_MW_BIND_ERR (as rxe_check_bind_mw: at execution, not
 * at post time) and move the QP to the error state.  Cases: a window
 * reaching past the region's end; a window starting before the region; a
 * region registered without TF_ACCESS_MW_BIND; a window with remote write
 * over a region without local write; a zero-length type-2 bind
 * (o10-37.2.40); a window of another PD than the QP's (C10-72); a region
 * of another PD; binding a type-2 window that is already bound, i.e. not
 * in the free state (o10-37.2.30).  A failed bind leaves the window
 * unbound, so its region deregisters without -EBUSY.
 * Also LOCAL_INV of a key that is no bound window (an unknown key, a
 * user region's key) completes with TF_WC_LOC_QP_OP_ERR (rxe:
 * invalidate_key fails) and does not revoke the region.
 */
#include <string.h>

#include "tf_test.h"

enum bcase {
	PAST_END,
	BEFORE_START,
	NO_MW_BIND,
	WRITE_NO_LOCAL_WRITE,
	ZERO_LENGTH,
	MW_OTHER_PD,
	MR_OTHER_PD,
	ALREADY_BOUND,
	NCASES,
};
static const char *const names[] = {
	"window past the region's end",
	"window before the region's start",
	"region without TF_ACCESS_MW_BIND",
	"remote write over a region without local write",
	"zero-length bind",
	"window of another PD than the QP",
	"region of another PD than the QP and window",
	"bind of a window that is already bound",
};

static void run_case(struct tf_pair *p, enum bcase c)
{
	unsigned acc = TF_ACCESS_ALL, wacc = TF_ACCESS_REMOTE_READ;
	uint64_t off = 0, len = 1024;
	struct tf_test_buf b;
	tf_pd_t *pd2 = NULL;
	tf_mw_t *mw;
	struct tf_send_wr wr = {.wr_id = 1,
				.opcode = TF_WR_BIND_MW,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_send_wr nop = {
		.wr_id = 2, .opcode = TF_WR_SEND, .send_flags = 0};

	if (c == MR_OTHER_PD &&
	    tf_test_quirk(p, TF_QUIRK_RXE_BIND_MR_PD, "case not run"))
		return;
	tf_test_qp_reopen(p, NULL, &p->q);
	if (p->side == TF_SIDE_B) {
		tf_test_sync(p);
		return;
	}
	tf_test_info("case: %s", names[c]);
	switch (c) {
	case PAST_END:
		off = 4096 - 512;
		break;
	case BEFORE_START:
		off = (uint64_t)-8;
		break;
	case NO_MW_BIND:
		acc = TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_READ |
		      TF_ACCESS_REMOTE_WRITE;
		break;
	case WRITE_NO_LOCAL_WRITE:
		acc = TF_ACCESS_REMOTE_READ | TF_ACCESS_MW_BIND;
		wacc = TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_READ;
		break;
	case ZERO_LENGTH:
		len = 0;
		break;
	case MW_OTHER_PD:
	case MR_OTHER_PD:
		CHECK_OK(tf_pd_create(p->ctx, &pd2));
		break;
	default:
		break;
	}
	/* Malloc memory: 8 bytes before the region are still mapped. */
	tf_test_buf_alloc(p, c == MR_OTHER_PD ? pd2 : p->pd, TF_MEM_MALLOC,
			  4096, acc, &b);
	CHECK_SUP(tf_mw_alloc(c == MW_OTHER_PD ? pd2 : p->pd, &mw));
	wr.wr.bind_mw.mw = mw;
	wr.wr.bind_mw.mr = b.mr;
	wr.wr.bind_mw.addr = (uintptr_t)b.addr + off;
	wr.wr.bind_mw.length = len;
	wr.wr.bind_mw.access = wacc;
	if (c == ALREADY_BOUND) {
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 1, TF_WC_SUCCESS, TF_WC_BIND_MW, NULL);
		wr.wr_id = 3;
	}
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, wr.wr_id, TF_WC_MW_BIND_ERR, TF_WC_BIND_MW,
		  NULL);
	POST_SEND(p->q.qp, &nop);
	EXPECT_WC(p, p->q.scq, 2, TF_WC_WR_FLUSH_ERR, TF_WC_SEND, NULL);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	if (c == ALREADY_BOUND) {
		/* The first binding still holds the region. */
		CHECK_ERR(tf_mr_dereg(b.mr), -EBUSY);
		CHECK_OK(tf_mw_dealloc(mw));
		mw = NULL;
	}
	/* The failed bind left nothing bound over the region. */
	CHECK_OK(tf_mr_dereg(b.mr));
	b.mr = NULL;
	CHECK_OK(tf_mw_dealloc(mw));
	tf_test_buf_free(&b);
	CHECK_OK(tf_pd_destroy(pd2));
	tf_test_sync(p);
}

static void bad_local_inv(struct tf_pair *p, bool mr_key)
{
	struct tf_test_buf b;
	struct tf_send_wr wr = {.wr_id = 5,
				.opcode = TF_WR_LOCAL_INV,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_test_rbuf rb;
	struct tf_wc wc;

	tf_test_qp_reopen(p, NULL, &p->q);
	if (p->side == TF_SIDE_A) {
		tf_test_info("case: LOCAL_INV of %s",
			     mr_key ? "a region's key" : "an unknown key");
		tf_test_buf_alloc(
			p, p->pd, TF_MEM_LIB, 4096,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &b);
		wr.invalidate_rkey = mr_key ? tf_mr_rkey(b.mr)
					    : tf_mr_rkey(b.mr) ^ 0x5a5a5a5au;
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 5, TF_WC_LOC_QP_OP_ERR, TF_WC_LOCAL_INV,
			  &wc);
		CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
		/* The region still serves the peer on a fresh QP. */
		tf_test_qp_reopen(p, NULL, &p->q);
		memset(b.addr, 0, b.len);
		tf_test_send_buf(p, &b);
		tf_test_sync(p);
		CHECK_FILL(b.addr, 64, 55);
		tf_test_buf_free(&b);
		return;
	}
	tf_test_qp_reopen(p, NULL, &p->q);
	rb = tf_test_recv_rbuf(p);
	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 64, TF_ACCESS_LOCAL_WRITE,
			  &b);
	tf_test_fill(b.addr, 64, 55);
	{
		struct tf_sge sge = {.addr = (uintptr_t)b.addr,
				     .length = 64,
				     .lkey = tf_test_buf_lkey(&b)};
		struct tf_send_wr w = {
			.wr_id = 6,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = rb.addr, .rkey = rb.rkey}};

		POST_SEND(p->q.qp, &w);
		EXPECT_WC(p, p->q.scq, 6, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	}
	tf_test_sync(p);
	tf_test_buf_free(&b);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_err_mw_bind");
	tf_test_pair_open(&p);
	tf_test_require_caps(&p, TF_CAP_MW_TYPE2, "type-2 memory windows");
	tf_test_tolerate_log(true);
	for (int c = 0; c < NCASES; c++)
		run_case(&p, (enum bcase)c);
	bad_local_inv(&p, false);
	bad_local_inv(&p, true);
	tf_test_tolerate_log(false);
	tf_test_sync(&p);
	return tf_test_pair_end(&p);
}
