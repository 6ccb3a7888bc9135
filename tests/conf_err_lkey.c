/* SPDX-License-Identifier: MIT */
/*
 * conf_err_lkey: local protection errors complete with TF_WC_LOC_PROT_ERR
 * (they are not refused at post time: ibv_post_send does not check lkeys)
 * and move the QP to the error state.  Cases: a SEND with an invalid
 * lkey; SGEs that start before or end after their region; an RDMA_WRITE
 * with an invalid lkey; an RDMA_READ into a region without LOCAL_WRITE; an
 * lkey of another PD.  Nothing reaches the peer: its receive stays posted
 * and its memory unchanged.
 */
#include <string.h>

#include "tf_test.h"

#define FILLER 0xee

enum lcase {
	BAD_LKEY_SEND,
	SGE_BEFORE,
	SGE_AFTER,
	BAD_LKEY_WRITE,
	READ_NO_LOCAL_WRITE,
	OTHER_PD,
	NCASES,
};
static const char *const names[] = {
	"send with a bad lkey",
	"sge starting before its region",
	"sge ending after its region",
	"write with a bad lkey",
	"read into a region without LOCAL_WRITE",
	"lkey of another PD",
};

static void run_case(struct tf_pair *p, enum lcase c, struct tf_test_buf *t,
		     const struct tf_test_rbuf *rb)
{
	struct tf_test_buf l, ro, other;
	tf_pd_t *pd2 = NULL;
	struct tf_sge sge;
	struct tf_send_wr wr = {
		.wr_id = 1,
		.sg_list = &sge,
		.num_sge = 1,
		.send_flags = TF_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = rb->addr, .rkey = rb->rkey}};
	struct tf_wc wc;

	tf_test_qp_reopen(p, NULL, &p->q);
	if (p->side == TF_SIDE_B) {
		memset(t->addr, FILLER, t->len);
		tf_test_post_recv1(p->q.qp, 9, t->addr, 1024,
				   tf_test_buf_lkey(t));
		tf_test_sync(p);
		tf_test_sync(p);
		/* Nothing was delivered.  (A provider that moves this QP to
		 * error when the peer's fails, as soft tcp may, flushes the
		 * receive instead; verbs leaves it posted.) */
		if (tf_cq_wait(p->q.rcq, 1, &wc, 50) == 1)
			CHECKF(wc.wr_id == 9 && wc.status == TF_WC_WR_FLUSH_ERR,
			       "peer's failed WR delivered: %s",
			       tf_test_wc_str(&wc));
		CHECK_BYTES(t->addr, t->len, FILLER);
		return;
	}
	tf_test_info("case: %s", names[c]);
	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 4096, TF_ACCESS_LOCAL_WRITE,
			  &l);
	tf_test_fill(l.addr, l.len, 3);
	sge = (struct tf_sge){.addr = (uintptr_t)l.addr,
			      .length = 64,
			      .lkey = tf_test_buf_lkey(&l)};
	wr.opcode = TF_WR_SEND;
	switch (c) {
	case BAD_LKEY_SEND:
		sge.lkey ^= 0x5a5a5a5au;
		break;
	case SGE_BEFORE:
		sge.addr -= 8; /* still inside the malloc block */
		break;
	case SGE_AFTER:
		sge.addr += l.len - 32;
		break;
	case BAD_LKEY_WRITE:
		wr.opcode = TF_WR_RDMA_WRITE;
		sge.lkey ^= 0x5a5a5a5au;
		break;
	case READ_NO_LOCAL_WRITE:
		tf_test_buf_alloc(p, p->pd, TF_MEM_MMAP, 4096,
				  TF_ACCESS_REMOTE_READ, &ro);
		memset(ro.addr, 0x11, ro.len);
		sge.addr = (uintptr_t)ro.addr;
		sge.lkey = tf_test_buf_lkey(&ro);
		wr.opcode = TF_WR_RDMA_READ;
		break;
	case OTHER_PD:
		CHECK_OK(tf_pd_create(p->ctx, &pd2));
		tf_test_buf_alloc(p, pd2, TF_MEM_LIB, 4096,
				  TF_ACCESS_LOCAL_WRITE, &other);
		sge.addr = (uintptr_t)other.addr;
		sge.lkey = tf_test_buf_lkey(&other);
		break;
	default:
		break;
	}
	tf_test_sync(p);
	POST_SEND(p->q.qp, &wr);
	WAIT_WC(p, p->q.scq, &wc);
	CHECKF(wc.wr_id == 1 &&
		       (wc.status == TF_WC_LOC_PROT_ERR ||
			(wc.status == TF_WC_LOC_QP_OP_ERR &&
			 (tf_test_quirk(p, TF_QUIRK_RXE_LKEY_ERR, names[c]) ||
			  tf_test_quirk(p, TF_QUIRK_SIW_LKEY_ERR, names[c])))),
	       "case '%s': got %s, expected local protection error", names[c],
	       tf_test_wc_str(&wc));
	wr.wr_id = 2;
	wr.opcode = TF_WR_RDMA_WRITE;
	sge = (struct tf_sge){.addr = (uintptr_t)l.addr,
			      .length = 64,
			      .lkey = tf_test_buf_lkey(&l)};
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 2, TF_WC_WR_FLUSH_ERR, TF_WC_RDMA_WRITE, &wc);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	tf_test_sync(p);
	if (c == READ_NO_LOCAL_WRITE) {
		CHECK_BYTES(ro.addr, ro.len, 0x11);
		tf_test_buf_free(&ro);
	}
	if (c == OTHER_PD) {
		tf_test_buf_free(&other);
		CHECK_OK(tf_pd_destroy(pd2));
	}
	tf_test_buf_free(&l);
}

int main(void)
{
	struct tf_test_buf t;
	struct tf_test_rbuf rb = {0};
	struct tf_pair p;

	tf_test_begin("conf_err_lkey");
	tf_test_pair_open(&p);
	tf_test_tolerate_log(true);
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, 8192,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				  TF_ACCESS_REMOTE_READ,
			  &t);
	if (p.side == TF_SIDE_B)
		tf_test_send_buf(&p, &t);
	else
		rb = tf_test_recv_rbuf(&p);
	for (int c = 0; c < NCASES; c++)
		run_case(&p, (enum lcase)c, &t, &rb);
	tf_test_sync(&p);
	tf_test_buf_free(&t);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
