/* SPDX-License-Identifier: MIT */
/*
 * conf_qp_reset: tf_qp_reset (TF_CAP_QP_RESET) takes a connected QP back
 * to INIT, and the same QP then connects again and carries data as a new
 * one would.
 *
 * - Without the capability the call fails with -EOPNOTSUPP and the QP
 *   still works.  That is the whole test on the soft provider, which has
 *   no reset by design (its peer may still map the QP's rings); through
 *   rdma_cm the rest is not tried.
 * - A QP with a receive posted is not reset (-EBUSY), and stays connected:
 *   the receive then takes a SEND.
 * - Both sides reset their QPs, exchange new address blobs and connect
 *   again; a SEND and an RDMA WRITE then arrive whole, each completion
 *   carries the wr_id posted after the reset, and nothing of the first
 *   connection comes out of the CQs.
 * - A QP reset twice in a row, and one reset from the error state, connect
 *   again too.
 */
#include <string.h>

#include "tf_test.h"

/* Exchange address blobs on the test channel and connect @qp. */
static void reconnect(struct tf_pair *p, tf_qp_t *qp)
{
	uint8_t blob[TF_QP_ADDR_MAX], peer[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);
	uint64_t plen;

	CHECK(tf_qp_state(qp) == TF_QPS_INIT);
	CHECK_OK(tf_qp_get_addr(qp, blob, &len));
	tf_test_send_u64(p, len);
	tf_test_send_msg(p, blob, len);
	plen = tf_test_recv_u64(p);
	CHECK(plen > 0 && plen <= TF_QP_ADDR_MAX);
	tf_test_recv_msg(p, peer, plen);
	CHECK_OK(tf_qp_connect(qp, peer, plen));
	CHECK(tf_qp_state(qp) == TF_QPS_RTS);
	tf_test_sync(p);
}

/* Side A sends 64 bytes of @seed as wr @id; side B receives them as wr
 * @id into @b and checks them. */
static void send_one(struct tf_pair *p, struct tf_test_buf *b, uint64_t id,
		     uint32_t seed)
{
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		memset(b->addr, 0, 64);
		tf_test_post_recv1(p->q.qp, id, b->addr, 64,
				   tf_test_buf_lkey(b));
		tf_test_sync(p);
		EXPECT_WC(p, p->q.rcq, id, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 64 && wc.qp == p->q.qp);
		CHECK_FILL(b->addr, 64, seed);
	} else {
		struct tf_sge sge = {.addr = (uintptr_t)b->addr,
				     .length = 64,
				     .lkey = tf_test_buf_lkey(b)};
		struct tf_send_wr wr = {.wr_id = id,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_fill(b->addr, 64, seed);
		tf_test_sync(p);
		POST_WAIT(p, &p->q, &wr, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	}
	tf_test_sync(p);
}

/* Side A writes 4 KiB of @seed into side B's buffer; B checks it. */
static void write_one(struct tf_pair *p, struct tf_test_buf *b, uint64_t id,
		      uint32_t seed)
{
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		memset(b->addr, 0, 4096);
		tf_test_send_u64(p, (uintptr_t)b->addr);
		tf_test_send_u64(p, tf_test_buf_rkey(b));
		tf_test_sync(p);
		CHECK_FILL(b->addr, 4096, seed);
	} else {
		uint64_t raddr = tf_test_recv_u64(p);
		uint32_t rkey = (uint32_t)tf_test_recv_u64(p);
		struct tf_sge sge = {.addr = (uintptr_t)b->addr,
				     .length = 4096,
				     .lkey = tf_test_buf_lkey(b)};
		struct tf_send_wr wr = {
			.wr_id = id,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = raddr, .rkey = rkey}};

		tf_test_fill(b->addr, 4096, seed);
		POST_WAIT(p, &p->q, &wr, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
		tf_test_sync(p);
	}
	tf_test_sync(p);
}

int main(void)
{
	struct tf_test_buf b;
	struct tf_pair p;
	struct tf_wc wc;

	tf_test_begin("conf_qp_reset");
	tf_test_pair_start(&p, NULL);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, 8192,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &b);
	if (!(p.caps.flags & TF_CAP_QP_RESET)) {
		CHECK(tf_qp_reset(p.q.qp) == -EOPNOTSUPP);
		CHECK(tf_qp_state(p.q.qp) == TF_QPS_RTS);
		send_one(&p, &b, 1, 1);
		/* By design on the soft provider (tf_qp_reset(3)): this is
		 * all there is to check there. */
		if (strcmp(tf_context_provider(p.ctx), "soft"))
			tf_test_partial_skip(
				"no TF_CAP_QP_RESET: reset and reconnect");
		tf_test_buf_free(&b);
		return tf_test_pair_end(&p);
	}
	CHECK(tf_qp_reset(NULL) == -EINVAL);

	/* First connection: a SEND, then a receive left posted. */
	send_one(&p, &b, 1, 1);
	if (p.side == TF_SIDE_B) {
		tf_test_post_recv1(p.q.qp, 2, b.addr, 64, tf_test_buf_lkey(&b));
		CHECK(tf_qp_reset(p.q.qp) == -EBUSY);
		CHECK(tf_qp_state(p.q.qp) == TF_QPS_RTS);
		tf_test_sync(&p);
		EXPECT_WC(&p, p.q.rcq, 2, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK_FILL(b.addr, 64, 2);
	} else {
		struct tf_sge sge = {.addr = (uintptr_t)b.addr,
				     .length = 64,
				     .lkey = tf_test_buf_lkey(&b)};
		struct tf_send_wr wr = {.wr_id = 2,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_fill(b.addr, 64, 2);
		tf_test_sync(&p);
		POST_WAIT(&p, &p.q, &wr, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	}
	tf_test_sync(&p);
	write_one(&p, &b, 3, 3);

	/* Reset on both sides and connect again: the wr_ids, the data and
	 * the CQs are the new connection's alone. */
	CHECK_OK(tf_qp_reset(p.q.qp));
	CHECK(tf_qp_state(p.q.qp) == TF_QPS_INIT);
	reconnect(&p, p.q.qp);
	send_one(&p, &b, 10, 10);
	write_one(&p, &b, 11, 11);
	send_one(&p, &b, 12, 12);
	EXPECT_CQ_EMPTY(&p, p.q.scq, 20);
	EXPECT_CQ_EMPTY(&p, p.q.rcq, 20);
	tf_test_sync(&p);

	/* Twice in a row, then from the error state. */
	CHECK_OK(tf_qp_reset(p.q.qp));
	CHECK_OK(tf_qp_reset(p.q.qp));
	reconnect(&p, p.q.qp);
	send_one(&p, &b, 20, 20);
	CHECK_OK(tf_qp_set_error(p.q.qp));
	CHECK(tf_qp_state(p.q.qp) == TF_QPS_ERR);
	tf_test_sync(&p);
	CHECK_OK(tf_qp_reset(p.q.qp));
	reconnect(&p, p.q.qp);
	send_one(&p, &b, 30, 30);
	write_one(&p, &b, 31, 31);
	EXPECT_CQ_EMPTY(&p, p.q.scq, 20);
	EXPECT_CQ_EMPTY(&p, p.q.rcq, 20);

	tf_test_buf_free(&b);
	return tf_test_pair_end(&p);
}
