/* SPDX-License-Identifier: MIT */
/*
 * conf_err_len: a SEND larger than the posted receive.  The receive
 * completes with TF_WC_LOC_LEN_ERR, the sender with TF_WC_REM_INV_REQ_ERR
 * (as rxe and the IB spec: an invalid-request NAK), and both QPs go to the
 * error state: the receiver's other receives and the sender's later sends
 * flush.  A message that exactly fits its receive succeeds first.
 */
#include <string.h>

#include "tf_test.h"

int main(void)
{
	struct tf_test_buf b;
	struct tf_pair p;
	struct tf_wc wc;

	tf_test_begin("conf_err_len");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(
		&p, TF_CAP_REMOTE_ACK,
		"remote errors in send completions (TF_CAP_REMOTE_ACK)");
	tf_test_tolerate_log(true);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, 4096, TF_ACCESS_LOCAL_WRITE,
			  &b);
	if (p.side == TF_SIDE_B) {
		memset(b.addr, 0, b.len);
		tf_test_post_recv1(p.q.qp, 1, b.addr, 16, tf_test_buf_lkey(&b));
		tf_test_post_recv1(p.q.qp, 2, b.addr + 64, 16,
				   tf_test_buf_lkey(&b));
		tf_test_post_recv1(p.q.qp, 3, b.addr + 128, 1024,
				   tf_test_buf_lkey(&b));
		tf_test_post_recv1(p.q.qp, 4, b.addr + 2048, 1024,
				   tf_test_buf_lkey(&b));
		tf_test_sync(&p);
		EXPECT_WC(&p, p.q.rcq, 1, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 16);
		CHECK_FILL(b.addr, 16, 5);
		WAIT_WC(&p, p.q.rcq, &wc);
		CHECKF(wc.wr_id == 2 && wc.opcode == TF_WC_RECV &&
			       (wc.status == TF_WC_LOC_LEN_ERR ||
				(wc.status == TF_WC_LOC_QP_OP_ERR &&
				 tf_test_quirk(&p, TF_QUIRK_RXE_LEN_ERR,
					       "receiver"))),
		       "got %s, expected wr 2 with local length error",
		       tf_test_wc_str(&wc));
		CHECK(wc.qp == p.q.qp);
		EXPECT_WC(&p, p.q.rcq, 3, TF_WC_WR_FLUSH_ERR, TF_WC_RECV, &wc);
		EXPECT_WC(&p, p.q.rcq, 4, TF_WC_WR_FLUSH_ERR, TF_WC_RECV, &wc);
		CHECK(tf_qp_state(p.q.qp) == TF_QPS_ERR);
		tf_test_sync(&p);
	} else {
		struct tf_sge sge = {.addr = (uintptr_t)b.addr,
				     .length = 16,
				     .lkey = tf_test_buf_lkey(&b)};
		struct tf_send_wr wr = {.wr_id = 11,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_fill(b.addr, b.len, 5);
		tf_test_sync(&p);
		POST_SEND(p.q.qp, &wr);
		EXPECT_WC(&p, p.q.scq, 11, TF_WC_SUCCESS, TF_WC_SEND, &wc);
		/* 17 bytes into a 16-byte receive. */
		sge.length = 17;
		wr.wr_id = 12;
		POST_SEND(p.q.qp, &wr);
		WAIT_WC(&p, p.q.scq, &wc);
		CHECKF(wc.wr_id == 12 && wc.opcode == TF_WC_SEND &&
			       (wc.status == TF_WC_REM_INV_REQ_ERR ||
				(wc.status == TF_WC_REM_OP_ERR &&
				 tf_test_quirk(&p, TF_QUIRK_RXE_LEN_ERR,
					       "sender"))),
		       "got %s, expected wr 12 with remote invalid request",
		       tf_test_wc_str(&wc));
		wr.wr_id = 13;
		wr.send_flags = 0;
		POST_SEND(p.q.qp, &wr);
		EXPECT_WC(&p, p.q.scq, 13, TF_WC_WR_FLUSH_ERR, TF_WC_SEND, &wc);
		CHECK(tf_qp_state(p.q.qp) == TF_QPS_ERR);
		tf_test_sync(&p);
	}
	tf_test_buf_free(&b);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
