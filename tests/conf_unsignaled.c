/* SPDX-License-Identifier: MIT */
/*
 * conf_unsignaled: work requests without TF_SEND_SIGNALED produce no
 * completion on success, and a later signalled one completes after them
 * (RC send queues complete in order).  Checks: ten unsignalled writes to
 * one word and a signalled one give exactly one CQE, and the word holds
 * the last value; unsignalled SENDs arrive in order; many rounds of
 * unsignalled work beyond the send-queue depth do not fill the queue once
 * each round ends with a signalled WR; a chain of mixed operations, all
 * signalled, completes in posting order; a read after an unsignalled
 * write of the same bytes returns the written data.  Each QP uses one CQ
 * for both of its queues, and completions are also reaped in batches.
 */
#include <string.h>

#include "tf_test.h"

#define SQ_DEPTH 16
#define ROUNDS	 40
#define NSEND	 12

static uint64_t rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void side_a(struct tf_pair *p)
{
	struct tf_test_buf l;
	struct tf_test_rbuf rb;
	struct tf_send_wr wr[SQ_DEPTH];
	struct tf_sge sge[SQ_DEPTH];
	struct tf_wc wc;

	tf_test_buf_alloc(p, p->pd, TF_MEM_LIB, 4096, TF_ACCESS_LOCAL_WRITE,
			  &l);
	rb = tf_test_recv_rbuf(p);

	/* 1. Ten unsignalled writes of 1..10 to one word, then a signalled
	 * write of 11, posted one by one. */
	for (uint64_t i = 1; i <= 11; i++) {
		uint64_t *slot = (uint64_t *)(l.addr + 8 * i);

		*slot = i;
		sge[0] = (struct tf_sge){.addr = (uintptr_t)slot,
					 .length = 8,
					 .lkey = tf_test_buf_lkey(&l)};
		wr[0] = (struct tf_send_wr){
			.wr_id = i,
			.sg_list = &sge[0],
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = i == 11 ? TF_SEND_SIGNALED : 0,
			.wr.rdma = {.remote_addr = rb.addr, .rkey = rb.rkey},
		};
		POST_SEND(p->q.qp, &wr[0]);
	}
	EXPECT_WC(p, p->q.scq, 11, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	EXPECT_CQ_EMPTY(p, p->q.scq, 100);
	tf_test_sync(p); /* B checks the word */

	/* 2. NSEND sends in one chain, only the last signalled. */
	for (int i = 0; i < NSEND; i++) {
		l.addr[512 + i] = (uint8_t)(0x40 + i);
		sge[i] = (struct tf_sge){.addr = (uintptr_t)l.addr + 512 + i,
					 .length = 1,
					 .lkey = tf_test_buf_lkey(&l)};
		wr[i] = (struct tf_send_wr){
			.wr_id = 200 + (uint64_t)i,
			.next = i + 1 < NSEND ? &wr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = 1,
			.opcode = TF_WR_SEND,
			.send_flags = i + 1 == NSEND ? TF_SEND_SIGNALED : 0,
		};
	}
	tf_test_sync(p); /* B posted its receives */
	POST_SEND(p->q.qp, wr);
	EXPECT_WC(p, p->q.scq, 200 + NSEND - 1, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);
	tf_test_sync(p);

	/* 3. ROUNDS rounds of SQ_DEPTH - 1 unsignalled writes and one
	 * signalled: ROUNDS * SQ_DEPTH WRs through a queue of SQ_DEPTH. */
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < SQ_DEPTH; i++) {
			sge[i] = (struct tf_sge){.addr = (uintptr_t)l.addr,
						 .length = 64,
						 .lkey = tf_test_buf_lkey(&l)};
			wr[i] = (struct tf_send_wr){
				.wr_id = 1000 + (uint64_t)(r * SQ_DEPTH + i),
				.next = i + 1 < SQ_DEPTH ? &wr[i + 1] : NULL,
				.sg_list = &sge[i],
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = i + 1 == SQ_DEPTH
						      ? TF_SEND_SIGNALED
						      : 0,
				.wr.rdma = {.remote_addr = rb.addr + 1024,
					    .rkey = rb.rkey},
			};
		}
		POST_SEND(p->q.qp, wr);
		EXPECT_WC(p, p->q.scq,
			  1000 + (uint64_t)(r * SQ_DEPTH + SQ_DEPTH - 1),
			  TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	}
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);

	/* 4. A chain of mixed operations, all signalled: completions come
	 * in posting order with their own opcodes. */
	{
		static const enum tf_wr_opcode ops[] = {
			TF_WR_RDMA_WRITE, TF_WR_RDMA_READ, TF_WR_RDMA_WRITE,
			TF_WR_SEND,	  TF_WR_RDMA_READ, TF_WR_SEND,
			TF_WR_RDMA_WRITE, TF_WR_RDMA_READ,
		};
		static const enum tf_wc_opcode wcop[] = {
			TF_WC_RDMA_WRITE, TF_WC_RDMA_READ, TF_WC_RDMA_WRITE,
			TF_WC_SEND,	  TF_WC_RDMA_READ, TF_WC_SEND,
			TF_WC_RDMA_WRITE, TF_WC_RDMA_READ,
		};
		int n = (int)(sizeof(ops) / sizeof(ops[0]));

		for (int i = 0; i < n; i++) {
			sge[i] = (struct tf_sge){.addr = (uintptr_t)l.addr +
							 2048 + 64 * i,
						 .length = 64,
						 .lkey = tf_test_buf_lkey(&l)};
			wr[i] = (struct tf_send_wr){
				.wr_id = 5000 + (uint64_t)i,
				.next = i + 1 < n ? &wr[i + 1] : NULL,
				.sg_list = &sge[i],
				.num_sge = 1,
				.opcode = ops[i],
				.send_flags = TF_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = rb.addr + 2048 +
							   64 * (uint64_t)i,
					    .rkey = rb.rkey},
			};
		}
		struct tf_wc wcs[16];
		int got = 0;

		tf_test_sync(p); /* B posted two receives */
		POST_SEND(p->q.qp, wr);
		/* Reaped in batches: tf_cq_poll fills several at once. */
		for (int tries = 0; got < n; tries++) {
			int r = tf_cq_poll(p->q.scq, 16, wcs + got);

			CHECKF(r >= 0 && r <= n - got, "tf_cq_poll(16) = %d",
			       r);
			got += r;
			CHECKF(tries < tf_test_timeout_ms(),
			       "only %d of %d completions", got, n);
			if (!r)
				tf_test_progress_for(p, 1);
		}
		/* siw: reads complete after the WRs behind them; each kind
		 * still in order.  Put the completions in posting order
		 * (a stable merge of reads and the others). */
		if (tf_test_quirk(p, TF_QUIRK_SIW_READ_ORDER, "mixed chain")) {
			struct tf_wc in_order[16] = {{0}};
			int nr = 0, no = 0;

			for (int i = 0; i < n; i++) {
				bool rd = ops[i] == TF_WR_RDMA_READ;
				int seen = 0;

				/* The (rd ? nr : no)-th completion of
				 * this kind. */
				for (int k = 0; k < n; k++) {
					bool krd = wcs[k].opcode ==
						   TF_WC_RDMA_READ;

					if (krd == rd &&
					    seen++ == (rd ? nr : no)) {
						in_order[i] = wcs[k];
						break;
					}
				}
				CHECKF(seen > (rd ? nr : no),
				       "no completion %d of the chain", i);
				rd ? nr++ : no++;
			}
			memcpy(wcs, in_order, sizeof(wcs[0]) * (size_t)n);
		}
		for (int i = 0; i < n; i++)
			CHECKF(wcs[i].wr_id == 5000 + (uint64_t)i &&
				       wcs[i].status == TF_WC_SUCCESS &&
				       wcs[i].opcode == wcop[i] &&
				       wcs[i].qp == p->q.qp,
			       "completion %d of the chain: %s", i,
			       tf_test_wc_str(&wcs[i]));
		EXPECT_CQ_EMPTY(p, p->q.scq, 20);
		/* The reads fetched what B had put there. */
		for (int i = 0; i < n; i++)
			if (ops[i] == TF_WR_RDMA_READ)
				CHECK_FILL(l.addr + 2048 + 64 * i, 64,
					   600 + (uint32_t)i);
		tf_test_sync(p);
	}

	/* 5. An unsignalled write followed by a signalled read of the same
	 * bytes: the responder executes them in order, so the read returns
	 * what the write put there. */
	tf_test_fill(l.addr + 3072, 128, 700);
	memset(l.addr + 3200, 0, 128);
	sge[0] = (struct tf_sge){.addr = (uintptr_t)l.addr + 3072,
				 .length = 128,
				 .lkey = tf_test_buf_lkey(&l)};
	sge[1] = (struct tf_sge){.addr = (uintptr_t)l.addr + 3200,
				 .length = 128,
				 .lkey = tf_test_buf_lkey(&l)};
	wr[0] = (struct tf_send_wr){
		.wr_id = 6000,
		.next = &wr[1],
		.sg_list = &sge[0],
		.num_sge = 1,
		.opcode = TF_WR_RDMA_WRITE,
		.wr.rdma = {.remote_addr = rb.addr + 3072, .rkey = rb.rkey}};
	wr[1] = (struct tf_send_wr){
		.wr_id = 6001,
		.sg_list = &sge[1],
		.num_sge = 1,
		.opcode = TF_WR_RDMA_READ,
		.send_flags = TF_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = rb.addr + 3072, .rkey = rb.rkey}};
	POST_SEND(p->q.qp, wr);
	EXPECT_WC(p, p->q.scq, 6001, TF_WC_SUCCESS, TF_WC_RDMA_READ, &wc);
	CHECK_FILL(l.addr + 3200, 128, 700);
	EXPECT_CQ_EMPTY(p, p->q.scq, 20);
	tf_test_sync(p);
	tf_test_buf_free(&l);
}

static void side_b(struct tf_pair *p)
{
	struct tf_test_buf t, r;
	struct tf_wc wc;

	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 4096,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				  TF_ACCESS_REMOTE_READ,
			  &t);
	tf_test_buf_alloc(p, p->pd, TF_MEM_MMAP, 4096, TF_ACCESS_LOCAL_WRITE,
			  &r);
	for (int i = 0; i < 8; i++)
		tf_test_fill(t.addr + 2048 + 64 * i, 64, 600 + (uint32_t)i);
	tf_test_send_buf(p, &t);

	tf_test_sync(p);
	CHECKF(rd64(t.addr) == 11, "word is %llu after writes 1..11",
	       (unsigned long long)rd64(t.addr));

	memset(r.addr, 0, r.len);
	for (int i = 0; i < NSEND; i++)
		tf_test_post_recv1(p->q.qp, 300 + (uint64_t)i, r.addr + 16 * i,
				   16, tf_test_buf_lkey(&r));
	tf_test_sync(p);
	for (int i = 0; i < NSEND; i++) {
		EXPECT_WC(p, p->q.rcq, 300 + (uint64_t)i, TF_WC_SUCCESS,
			  TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 1);
		CHECKF(r.addr[16 * i] == 0x40 + i,
		       "receive %d holds 0x%02x: out of order", i,
		       r.addr[16 * i]);
	}
	tf_test_sync(p);

	tf_test_post_recv1(p->q.qp, 400, r.addr, 64, tf_test_buf_lkey(&r));
	tf_test_post_recv1(p->q.qp, 401, r.addr + 64, 64, tf_test_buf_lkey(&r));
	tf_test_sync(p);
	EXPECT_WC(p, p->q.rcq, 400, TF_WC_SUCCESS, TF_WC_RECV, &wc);
	EXPECT_WC(p, p->q.rcq, 401, TF_WC_SUCCESS, TF_WC_RECV, &wc);
	tf_test_sync(p);
	tf_test_sync(p); /* part 5 */
	CHECK_FILL(t.addr + 3072, 128, 700);
	tf_test_buf_free(&t);
	tf_test_buf_free(&r);
}

int main(void)
{
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_MAX_SEND_WR,
			      .max_send_wr = SQ_DEPTH};
	struct tf_pair p;
	tf_cq_t *cq;

	tf_test_begin("conf_unsignaled");
	tf_test_pair_open(&p);
	/* One CQ for both queues of the QP: the completions of each queue
	 * still come in order and name the QP. */
	CHECK_OK(tf_cq_create(p.ctx, NULL, &cq));
	qpp.send_cq = qpp.recv_cq = cq;
	tf_test_qp_open(&p, &qpp, &p.q);
	if (p.side == TF_SIDE_A)
		side_a(&p);
	else
		side_b(&p);
	tf_test_sync(&p);
	tf_test_qp_close(&p.q);
	CHECK_OK(tf_cq_destroy(cq));
	return tf_test_pair_end(&p);
}
