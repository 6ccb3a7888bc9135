/* SPDX-License-Identifier: MIT */
/*
 * conf_err_rnr: receiver not ready.  With rnr_retry 0 (and again with 3) a
 * SEND to a QP without a posted receive completes with
 * TF_WC_RNR_RETRY_EXC_ERR and the sender's QP flushes what follows.  With
 * rnr_retry 7 (retry forever) the SEND waits and completes once the
 * receiver posts a receive, which gets the data.  No timing is asserted:
 * "waits" means no completion while the receiver has none posted.
 */
#include <string.h>

#include "tf_test.h"

static void rnr_fails(struct tf_pair *p, struct tf_test_buf *b,
		      uint8_t rnr_retry)
{
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_RNR_RETRY,
			      .rnr_retry = rnr_retry};
	struct tf_sge sge = {.addr = (uintptr_t)b->addr,
			     .length = 8,
			     .lkey = tf_test_buf_lkey(b)};
	struct tf_send_wr wr = {.wr_id = 1,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};

	/* Only the sender's rnr_retry matters; B keeps the default. */
	tf_test_qp_reopen(p, p->side == TF_SIDE_A ? &qpp : NULL, &p->q);
	if (p->side == TF_SIDE_B) {
		tf_test_sync(p); /* A got its completions */
		EXPECT_CQ_EMPTY(p, p->q.rcq, 20);
		return;
	}
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 1, TF_WC_RNR_RETRY_EXC_ERR, TF_WC_SEND, NULL);
	wr.wr_id = 2;
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 2, TF_WC_WR_FLUSH_ERR, TF_WC_SEND, NULL);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	tf_test_sync(p);
}

static void rnr_waits(struct tf_pair *p, struct tf_test_buf *b)
{
	struct tf_wc wc;

	tf_test_qp_reopen(p, NULL, &p->q);
	if (p->side == TF_SIDE_B) {
		tf_test_sync(p); /* A posted its send */
		tf_test_sync(p); /* and saw no completion */
		memset(b->addr, 0, b->len);
		tf_test_post_recv1(p->q.qp, 7, b->addr, 64,
				   tf_test_buf_lkey(b));
		EXPECT_WC(p, p->q.rcq, 7, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 40);
		CHECK_FILL(b->addr, 40, 9);
		tf_test_sync(p);
		return;
	}
	struct tf_sge sge = {.addr = (uintptr_t)b->addr,
			     .length = 40,
			     .lkey = tf_test_buf_lkey(b)};
	struct tf_send_wr wr = {.wr_id = 3,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};

	tf_test_fill(b->addr, 40, 9);
	POST_SEND(p->q.qp, &wr);
	tf_test_sync(p);
	EXPECT_CQ_EMPTY(p, p->q.scq, 300);
	tf_test_sync(p);
	EXPECT_WC(p, p->q.scq, 3, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_test_buf b;
	struct tf_pair p;

	tf_test_begin("conf_err_rnr");
	tf_test_pair_open(&p);
	tf_test_require_caps(&p, TF_CAP_REMOTE_ACK,
			     "receiver-not-ready retries (TF_CAP_REMOTE_ACK; "
			     "iWARP has no RNR)");
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, 4096, TF_ACCESS_LOCAL_WRITE,
			  &b);
	tf_test_tolerate_log(true);
	rnr_fails(&p, &b, 0);
	rnr_fails(&p, &b, 3);
	tf_test_tolerate_log(false);
	rnr_waits(&p, &b);
	tf_test_sync(&p);
	tf_test_buf_free(&b);
	return tf_test_pair_end(&p);
}
