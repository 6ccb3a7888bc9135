/* SPDX-License-Identifier: MIT */
/*
 * conf_flush: TF_WC_WR_FLUSH_ERR on both queues.
 *  1. After a failing WR (a write with a bad key): the WRs posted behind
 *     it, signalled or not, complete with FLUSH_ERR in posting order and
 *     with their own opcodes; the posted receives flush in order; the QP
 *     is in TF_QPS_ERR; work posted afterwards is accepted and flushes.
 *  2. After tf_qp_set_error with sends stuck behind a receiver-not-ready
 *     peer: every outstanding send and receive flushes in order, and the
 *     flushed sends are never delivered later.
 *  3. tf_qp_set_error on a QP with only receives posted.
 * Errors and flushes always produce completions, signalled or not (as in
 * verbs: rxe's flush_send_queue, IB spec).
 */
#include <string.h>

#include "tf_test.h"

#define FILLER 0xee

static void expect_flush(struct tf_pair *p, tf_cq_t *cq, uint64_t wr_id,
			 enum tf_wc_opcode op)
{
	struct tf_wc wc;

	EXPECT_WC(p, cq, wr_id, TF_WC_WR_FLUSH_ERR, op, &wc);
	CHECK(wc.qp == p->q.qp);
}

static void part1_a(struct tf_pair *p, struct tf_test_buf *l)
{
	struct tf_test_rbuf rb = tf_test_recv_rbuf(p);
	struct tf_sge sge = {.addr = (uintptr_t)l->addr,
			     .length = 32,
			     .lkey = tf_test_buf_lkey(l)};
	static const struct {
		enum tf_wr_opcode op;
		bool sig;
		bool bad;
	} w[] = {
		{TF_WR_RDMA_WRITE, true, false},
		{TF_WR_RDMA_WRITE, false, false},
		{TF_WR_RDMA_WRITE, true, true},
		{TF_WR_RDMA_WRITE, true, false},
		{TF_WR_SEND, false, false},
		{TF_WR_RDMA_READ, true, false},
		{TF_WR_SEND, true, false},
		{TF_WR_RDMA_WRITE, false, false},
	};
	static const enum tf_wc_opcode wop[] = {
		TF_WC_RDMA_WRITE, TF_WC_RDMA_WRITE, TF_WC_RDMA_WRITE,
		TF_WC_RDMA_WRITE, TF_WC_SEND,	    TF_WC_RDMA_READ,
		TF_WC_SEND,	  TF_WC_RDMA_WRITE,
	};
	enum { N = sizeof(w) / sizeof(w[0]) };
	struct tf_send_wr wr[N];
	struct tf_wc wc;

	for (int i = 0; i < 3; i++)
		tf_test_post_recv1(p->q.qp, 50 + (uint64_t)i, l->addr + 1024,
				   64, tf_test_buf_lkey(l));
	for (int i = 0; i < N; i++)
		wr[i] = (struct tf_send_wr){
			.wr_id = 10 + (uint64_t)i,
			.next = i + 1 < N ? &wr[i + 1] : NULL,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = w[i].op,
			.send_flags = w[i].sig ? TF_SEND_SIGNALED : 0,
			.wr.rdma = {.remote_addr = rb.addr + 64 * (uint64_t)i,
				    .rkey = w[i].bad ? rb.rkey ^ 0x5a5a5a5au
						     : rb.rkey},
		};
	tf_test_fill(l->addr, 32, 1);
	POST_SEND(p->q.qp, wr);
	EXPECT_WC(p, p->q.scq, 10, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	EXPECT_WC(p, p->q.scq, 12, TF_WC_REM_ACCESS_ERR, TF_WC_RDMA_WRITE, &wc);
	for (int i = 3; i < N; i++)
		expect_flush(p, p->q.scq, 10 + (uint64_t)i, wop[i]);
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);
	for (int i = 0; i < 3; i++)
		expect_flush(p, p->q.rcq, 50 + (uint64_t)i, TF_WC_RECV);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);

	/* Work posted in the error state is accepted and flushes. */
	wr[0].next = NULL;
	wr[0].wr_id = 99;
	wr[0].send_flags = 0;
	POST_SEND(p->q.qp, &wr[0]);
	expect_flush(p, p->q.scq, 99, TF_WC_RDMA_WRITE);
	tf_test_post_recv1(p->q.qp, 98, l->addr, 64, tf_test_buf_lkey(l));
	expect_flush(p, p->q.rcq, 98, TF_WC_RECV);
	EXPECT_CQ_EMPTY(p, p->q.scq, 20);
	EXPECT_CQ_EMPTY(p, p->q.rcq, 20);
	tf_test_sync(p);
}

static void part1_b(struct tf_pair *p, struct tf_test_buf *t)
{
	memset(t->addr, FILLER, t->len);
	tf_test_send_buf(p, t);
	tf_test_sync(p);
	/* Only the first write (wr 10) and the unsignalled one before the
	 * failure (wr 11) may have landed. */
	CHECK_FILL(t->addr, 32, 1);
	CHECK_FILL(t->addr + 64, 32, 1);
	CHECK_BYTES(t->addr + 96, t->len - 96, FILLER);
}

static void part2_a(struct tf_pair *p, struct tf_test_buf *l)
{
	struct tf_sge sge = {.addr = (uintptr_t)l->addr,
			     .length = 16,
			     .lkey = tf_test_buf_lkey(l)};
	struct tf_send_wr wr[5];

	for (int i = 0; i < 3; i++)
		tf_test_post_recv1(p->q.qp, 70 + (uint64_t)i, l->addr + 1024,
				   64, tf_test_buf_lkey(l));
	for (int i = 0; i < 5; i++)
		wr[i] = (struct tf_send_wr){
			.wr_id = 60 + (uint64_t)i,
			.next = i + 1 < 5 ? &wr[i + 1] : NULL,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = TF_WR_SEND,
			.send_flags = i % 2 ? 0 : TF_SEND_SIGNALED,
		};
	POST_SEND(p->q.qp, wr);
	/* B has no receive posted and rnr_retry is 7 (forever): the first
	 * send cannot complete, the others wait behind it. */
	EXPECT_CQ_EMPTY(p, p->q.scq, 300);
	CHECK_OK(tf_qp_set_error(p->q.qp));
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	for (int i = 0; i < 5; i++)
		expect_flush(p, p->q.scq, 60 + (uint64_t)i, TF_WC_SEND);
	for (int i = 0; i < 3; i++)
		expect_flush(p, p->q.rcq, 70 + (uint64_t)i, TF_WC_RECV);
	EXPECT_CQ_EMPTY(p, p->q.scq, 20);
	tf_test_sync(p); /* B posts receives now */
	tf_test_sync(p);
}

static void part2_b(struct tf_pair *p, struct tf_test_buf *t)
{
	uint64_t first = 80;
	struct tf_wc wc;

	tf_test_sync(p);
	/* A's flushed sends must not be delivered when receives appear.
	 * (A provider may also move this QP to the error state when its
	 * peer's QP fails, as the soft tcp transport does; verbs leaves it
	 * in RTS.  Then the receive flushes, which is no delivery.) */
	tf_test_post_recv1(p->q.qp, 80, t->addr, 64, tf_test_buf_lkey(t));
	if (tf_cq_wait(p->q.rcq, 1, &wc, 300) == 1) {
		CHECKF(wc.wr_id == 80 && wc.status == TF_WC_WR_FLUSH_ERR,
		       "flushed sends were delivered: %s", tf_test_wc_str(&wc));
		tf_test_info("peer's error moved this QP to error too");
		first = 81;
	}
	EXPECT_CQ_EMPTY(p, p->q.rcq, 100);
	tf_test_sync(p);

	/* 3. Only receives posted, then tf_qp_set_error. */
	for (int i = 0; i < 4; i++)
		tf_test_post_recv1(p->q.qp, 81 + (uint64_t)i, t->addr, 64,
				   tf_test_buf_lkey(t));
	CHECK_OK(tf_qp_set_error(p->q.qp));
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	for (uint64_t id = first; id < 85; id++)
		expect_flush(p, p->q.rcq, id, TF_WC_RECV);
	EXPECT_CQ_EMPTY(p, p->q.rcq, 20);
	EXPECT_CQ_EMPTY(p, p->q.scq, 20);
}

int main(void)
{
	struct tf_test_buf b;
	struct tf_pair p;

	tf_test_begin("conf_flush");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_REMOTE_ACK,
			     "remote errors in send completions and RNR waits "
			     "(TF_CAP_REMOTE_ACK)");
	/* The provider may log the failures provoked here. */
	tf_test_tolerate_log(true);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, 4096,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				  TF_ACCESS_REMOTE_READ,
			  &b);
	if (p.side == TF_SIDE_A)
		part1_a(&p, &b);
	else
		part1_b(&p, &b);
	tf_test_qp_reopen(&p, NULL, &p.q);
	if (p.side == TF_SIDE_A)
		part2_a(&p, &b);
	else
		part2_b(&p, &b);
	tf_test_sync(&p);
	tf_test_buf_free(&b);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
