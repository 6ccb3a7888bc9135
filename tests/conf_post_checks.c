/* SPDX-License-Identifier: MIT */
/*
 * conf_post_checks: what tf_post_send and tf_post_recv refuse at post
 * time, and what they then report.  Malformed requests (too many SGEs,
 * negative num_sge, inline data longer than the device allows, an unknown
 * opcode) give -EINVAL; in a chain, *bad_wr points at the bad request,
 * the requests before it were posted and complete, the ones after it were
 * not.  A send or receive queue that is full gives -ENOMEM at the first
 * request that does not fit (slots are held until their completions are
 * reaped, so that a CQ sized for the queues cannot overflow).  None of
 * this moves the QP to the error state.
 */
#include <string.h>

#include "tf_test.h"

#define DEPTH 8
#define CHAIN 2048

static void bad_one(struct tf_pair *p, struct tf_send_wr *wr, const char *what)
{
	struct tf_send_wr *bad = NULL;
	int r = tf_post_send(p->q.qp, wr, &bad);

	CHECKF(r == -EINVAL, "%s: tf_post_send = %d (%s), expected -EINVAL",
	       what, r, tf_strerror(r));
	CHECKF(bad == wr, "%s: bad_wr %p, expected %p", what, (void *)bad,
	       (void *)wr);
}

static void side_a(struct tf_pair *p)
{
	struct tf_test_rbuf rb = tf_test_recv_rbuf(p);
	struct tf_test_buf l;
	static struct tf_sge sge[CHAIN];
	static struct tf_send_wr wr[CHAIN];
	static struct tf_recv_wr rwr[CHAIN];
	struct tf_send_wr *bad = NULL;
	struct tf_recv_wr *rbad = NULL;
	uint32_t nsge = p->caps.max_sge ? p->caps.max_sge + 1 : 65;
	struct tf_wc wc;
	int r;
	long k;

	tf_test_buf_alloc(p, p->pd, TF_MEM_LIB, 65536 * 2,
			  TF_ACCESS_LOCAL_WRITE, &l);
	for (int i = 0; i < CHAIN; i++) {
		sge[i] = (struct tf_sge){.addr = (uintptr_t)l.addr + i % 64,
					 .length = 8,
					 .lkey = tf_test_buf_lkey(&l)};
		wr[i] = (struct tf_send_wr){
			.wr_id = (uint64_t)i,
			.next = i + 1 < CHAIN ? &wr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = rb.addr, .rkey = rb.rkey},
		};
	}

	/* Single malformed requests. */
	{
		struct tf_send_wr w = wr[0];
		struct tf_sge many[1024];

		w.next = NULL;
		CHECK(nsge <= 1024);
		for (uint32_t i = 0; i < nsge; i++)
			many[i] = sge[0];
		w.sg_list = many;
		w.num_sge = (int)nsge;
		bad_one(p, &w, "num_sge above the device's max_sge");
		w.sg_list = sge;
		w.num_sge = -1;
		bad_one(p, &w, "negative num_sge");
		w.num_sge = 1;
		w.opcode = (enum tf_wr_opcode)99;
		bad_one(p, &w, "unknown opcode");
		if (p->caps.flags & TF_CAP_INLINE) {
			struct tf_sge big = {.addr = (uintptr_t)l.addr,
					     .length = p->caps.max_inline_data +
						       1};

			CHECK(big.length <= l.len);
			w.opcode = TF_WR_SEND;
			w.sg_list = &big;
			w.send_flags = TF_SEND_SIGNALED | TF_SEND_INLINE;
			bad_one(p, &w, "inline data above max_inline_data");
		}
		EXPECT_CQ_EMPTY(p, p->q.scq, 20);
		CHECK(tf_qp_state(p->q.qp) == TF_QPS_RTS);
	}

	/* A bad request in the middle of a chain. */
	{
		struct tf_send_wr c[4];

		for (int i = 0; i < 4; i++) {
			c[i] = wr[i];
			c[i].next = i < 3 ? &c[i + 1] : NULL;
		}
		c[2].num_sge = -1;
		bad = NULL;
		r = tf_post_send(p->q.qp, c, &bad);
		CHECKF(r == -EINVAL, "chain: %d (%s)", r, tf_strerror(r));
		CHECKF(bad == &c[2], "chain: bad_wr is WR %ld, expected 2",
		       bad ? (long)(bad - c) : -1L);
		EXPECT_WC(p, p->q.scq, 0, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
		EXPECT_WC(p, p->q.scq, 1, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
		EXPECT_CQ_EMPTY(p, p->q.scq, 50);
	}

	/* Send queue full: nothing is reaped while posting. */
	bad = NULL;
	r = tf_post_send(p->q.qp, wr, &bad);
	CHECKF(r == -ENOMEM,
	       "%d WRs on a send queue of %d: %d (%s), expected -ENOMEM", CHAIN,
	       DEPTH, r, tf_strerror(r));
	CHECK(bad);
	k = bad - wr;
	CHECKF(k >= DEPTH && k < CHAIN, "send queue took %ld WRs", k);
	tf_test_info("send queue of %d took %ld WRs", DEPTH, k);
	for (long i = 0; i < k; i++)
		EXPECT_WC(p, p->q.scq, (uint64_t)i, TF_WC_SUCCESS,
			  TF_WC_RDMA_WRITE, &wc);
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);

	/* Receive queue full. */
	for (int i = 0; i < CHAIN; i++)
		rwr[i] = (struct tf_recv_wr){
			.wr_id = 10000 + (uint64_t)i,
			.next = i + 1 < CHAIN ? &rwr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = 1,
		};
	r = tf_post_recv(p->q.qp, rwr, &rbad);
	CHECKF(r == -ENOMEM, "%d receives on a queue of %d: %d (%s)", CHAIN,
	       DEPTH, r, tf_strerror(r));
	CHECK(rbad);
	k = rbad - rwr;
	CHECKF(k >= DEPTH && k < CHAIN, "receive queue took %ld WRs", k);
	tf_test_info("receive queue of %d took %ld WRs", DEPTH, k);
	{
		struct tf_recv_wr w = rwr[0];

		w.next = NULL;
		w.num_sge = -1;
		rbad = NULL;
		r = tf_post_recv(p->q.qp, &w, &rbad);
		CHECKF(r == -EINVAL || r == -ENOMEM,
		       "negative num_sge on a full receive queue: %d", r);
	}

	/* The QP still works. */
	wr[0].next = NULL;
	POST_SEND(p->q.qp, &wr[0]);
	EXPECT_WC(p, p->q.scq, 0, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_RTS);
	tf_test_sync(p);
	tf_test_buf_free(&l);
}

int main(void)
{
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_MAX_SEND_WR |
					    TF_QP_PARAM_MAX_RECV_WR,
			      .max_send_wr = DEPTH,
			      .max_recv_wr = DEPTH};
	struct tf_pair p;

	tf_test_begin("conf_post_checks");
	tf_test_pair_start(&p, &qpp);
	/* Refused requests may be logged. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_B) {
		struct tf_test_buf t;

		tf_test_buf_alloc(
			&p, p.pd, TF_MEM_MALLOC, 4096,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &t);
		tf_test_send_buf(&p, &t);
		tf_test_sync(&p);
		tf_test_buf_free(&t);
	} else {
		side_a(&p);
	}
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
