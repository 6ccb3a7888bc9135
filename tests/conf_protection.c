/* SPDX-License-Identifier: MIT */
/*
 * conf_protection: every way a peer can be refused access.  In each case
 * the requester's WR completes with TF_WC_REM_ACCESS_ERR, the next WR on
 * its QP (a valid write to a "canary" region) flushes, and on the target
 * both the protected memory and the canary are byte-for-byte unchanged.
 * Each case runs on a fresh QP pair, because a remote access error moves
 * the requester's QP (and, in verbs, the responder's) to the error state.
 */
#include <string.h>

#include "tf_test.h"

#define PAGE   4096
#define TLEN   (3 * PAGE) /* the MR covers the middle page */
#define FILLER 0xee
#define SEED   4321

enum pcase {
	BAD_KEY,
	WRITE_BEFORE,
	WRITE_AFTER,
	READ_AFTER,
	READ_BEFORE,
	ATOMIC_AFTER,
	WRITE_WRAPPING,
	READ_WRAPPING,
	WRITE_READ_ONLY,
	READ_WRITE_ONLY,
	ATOMIC_NO_RIGHT,
	MR_DEREGISTERED,
	MW_OUT_OF_WINDOW,
	MW_WRITE_READ_ONLY,
	MW_AFTER_LOCAL_INV,
	MW_AFTER_SEND_INV,
	MW_OTHER_QP,
	OTHER_PD,
	QP_NO_REMOTE_WRITE,
	NCASES,
};

static const struct {
	const char *name;
	enum tf_wr_opcode op;
	uint64_t caps;
} cases[] = {
	[BAD_KEY] = {"bad key", TF_WR_RDMA_WRITE, 0},
	[WRITE_BEFORE] = {"write starting before the region", TF_WR_RDMA_WRITE,
			  0},
	[WRITE_AFTER] = {"write ending after the region", TF_WR_RDMA_WRITE, 0},
	[READ_AFTER] = {"read ending after the region", TF_WR_RDMA_READ, 0},
	[READ_BEFORE] = {"read starting before the region", TF_WR_RDMA_READ, 0},
	[ATOMIC_AFTER] = {"atomic just past the region's end",
			  TF_WR_ATOMIC_FETCH_ADD, TF_CAP_ATOMIC},
	[WRITE_WRAPPING] = {"write whose range wraps around 2^64",
			    TF_WR_RDMA_WRITE, 0},
	[READ_WRAPPING] = {"read whose range wraps around 2^64",
			   TF_WR_RDMA_READ, 0},
	[WRITE_READ_ONLY] = {"write to a read-only region", TF_WR_RDMA_WRITE,
			     0},
	[READ_WRITE_ONLY] = {"read from a write-only region", TF_WR_RDMA_READ,
			     0},
	[ATOMIC_NO_RIGHT] = {"atomic without the atomic right",
			     TF_WR_ATOMIC_FETCH_ADD, TF_CAP_ATOMIC},
	[MR_DEREGISTERED] = {"key of a deregistered region", TF_WR_RDMA_WRITE,
			     0},
	[MW_OUT_OF_WINDOW] = {"write past the window, inside the region",
			      TF_WR_RDMA_WRITE, TF_CAP_MW_TYPE2},
	[MW_WRITE_READ_ONLY] = {"write through a read-only window",
				TF_WR_RDMA_WRITE, TF_CAP_MW_TYPE2},
	[MW_AFTER_LOCAL_INV] = {"window revoked by LOCAL_INV", TF_WR_RDMA_WRITE,
				TF_CAP_MW_TYPE2},
	[MW_AFTER_SEND_INV] = {"window revoked by SEND_WITH_INV",
			       TF_WR_RDMA_WRITE,
			       TF_CAP_MW_TYPE2 | TF_CAP_SEND_WITH_INV},
	[MW_OTHER_QP] = {"window used through another QP", TF_WR_RDMA_WRITE,
			 TF_CAP_MW_TYPE2},
	[OTHER_PD] = {"key of a region in another PD", TF_WR_RDMA_WRITE, 0},
	[QP_NO_REMOTE_WRITE] = {"write to a QP without remote write access",
				TF_WR_RDMA_WRITE, 0},
};

/* Side B's objects for one case. */
struct target {
	struct tf_test_buf t; /* TLEN bytes, pattern SEED */
	tf_mr_t *mr;	      /* over the middle page */
	tf_pd_t *pd2;
	tf_mw_t *mw;
};

static void post_wait(struct tf_pair *p, struct tf_test_qp *q,
		      struct tf_send_wr *wr, enum tf_wc_opcode op)
{
	POST_SEND(q->qp, wr);
	EXPECT_WC(p, q->scq, wr->wr_id, TF_WC_SUCCESS, op, NULL);
}

static uint32_t bind(struct tf_pair *p, struct target *tg, uint64_t off,
		     uint64_t len, unsigned access)
{
	struct tf_send_wr wr = {
		.wr_id = 100,
		.opcode = TF_WR_BIND_MW,
		.send_flags = TF_SEND_SIGNALED,
		.wr.bind_mw = {.mw = tg->mw,
			       .mr = tg->mr,
			       .addr = (uintptr_t)tg->t.addr + PAGE + off,
			       .length = len,
			       .access = access},
	};

	CHECK_SUP(tf_mw_alloc(p->pd, &tg->mw));
	wr.wr.bind_mw.mw = tg->mw;
	post_wait(p, &p->q, &wr, TF_WC_BIND_MW);
	return tf_mw_rkey(tg->mw);
}

/* Side B: build the target of case @c; returns (addr, len, key) of the
 * access A will attempt. */
static struct tf_test_rbuf setup_b(struct tf_pair *p, enum pcase c,
				   struct target *tg)
{
	uint8_t *mid = tg->t.addr + PAGE;
	unsigned acc = TF_ACCESS_ALL;
	struct tf_test_rbuf rb = {.addr = (uintptr_t)mid, .len = 64};
	tf_pd_t *pd = p->pd;

	switch (c) {
	case WRITE_READ_ONLY:
		acc = TF_ACCESS_REMOTE_READ;
		break;
	case READ_WRITE_ONLY:
		acc = TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE;
		break;
	case ATOMIC_NO_RIGHT:
		acc = TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
		      TF_ACCESS_REMOTE_READ;
		break;
	case OTHER_PD:
		CHECK_OK(tf_pd_create(p->ctx, &tg->pd2));
		pd = tg->pd2;
		break;
	default:
		break;
	}
	CHECK_OK(tf_mr_reg(pd, mid, PAGE, acc, &tg->mr));
	rb.rkey = tf_mr_rkey(tg->mr);
	switch (c) {
	case BAD_KEY:
		rb.rkey ^= 0x5a5a5a5au;
		break;
	case WRITE_BEFORE:
	case READ_BEFORE:
		rb.addr -= 8;
		rb.len = 16;
		break;
	case ATOMIC_AFTER:
		rb.addr += PAGE;
		rb.len = 8;
		break;
	case WRITE_WRAPPING:
	case READ_WRAPPING:
		/* addr + len wraps to a small number: a range check that
		 * only compares the end passes. */
		rb.addr = (uint64_t)-32;
		rb.len = 64;
		break;
	case WRITE_AFTER:
	case READ_AFTER:
		rb.addr += PAGE - 8;
		rb.len = 16;
		break;
	case ATOMIC_NO_RIGHT:
		rb.len = 8;
		break;
	case MR_DEREGISTERED:
		CHECK_OK(tf_mr_dereg(tg->mr));
		tg->mr = NULL;
		break;
	case MW_OUT_OF_WINDOW:
		rb.rkey = bind(p, tg, 1024, 1024,
			       TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_READ);
		rb.addr += 2048 - 8;
		rb.len = 16;
		break;
	case MW_WRITE_READ_ONLY:
		rb.rkey = bind(p, tg, 0, PAGE, TF_ACCESS_REMOTE_READ);
		break;
	case MW_AFTER_LOCAL_INV: {
		struct tf_send_wr wr = {.wr_id = 101,
					.opcode = TF_WR_LOCAL_INV,
					.send_flags = TF_SEND_SIGNALED};

		rb.rkey = bind(p, tg, 0, PAGE, TF_ACCESS_REMOTE_WRITE);
		wr.invalidate_rkey = rb.rkey;
		post_wait(p, &p->q, &wr, TF_WC_LOCAL_INV);
		break;
	}
	case MW_AFTER_SEND_INV:
	case MW_OTHER_QP:
		rb.rkey = bind(p, tg, 0, PAGE, TF_ACCESS_REMOTE_WRITE);
		break;
	default:
		break;
	}
	return rb;
}

static void teardown_b(struct target *tg)
{
	CHECK_OK(tf_mw_dealloc(tg->mw));
	CHECK_OK(tf_mr_dereg(tg->mr));
	CHECK_OK(tf_pd_destroy(tg->pd2));
	memset(tg, 0, sizeof(*tg));
}

static void run_case(struct tf_pair *p, enum pcase c, struct tf_test_buf *l,
		     struct tf_test_buf *canary)
{
	tf_qp_params_t ro = {.field_mask = TF_QP_PARAM_ACCESS,
			     .access = TF_ACCESS_REMOTE_READ};
	struct tf_test_qp q2 = {0}, *q = &p->q;
	struct tf_test_rbuf rb, crb;
	struct target tg = {0};
	struct tf_wc wc;

	if ((p->caps.flags & cases[c].caps) != cases[c].caps) {
		tf_test_partial_skip("case '%s' (capability missing)",
				     cases[c].name);
		return;
	}
	if (c == MW_OUT_OF_WINDOW &&
	    tf_test_quirk(p, TF_QUIRK_RXE_MW_RANGE, "case not run"))
		return;
	tf_test_qp_reopen(
		p, c == QP_NO_REMOTE_WRITE && p->side == TF_SIDE_B ? &ro : NULL,
		&p->q);
	if (c == MW_OTHER_QP) {
		tf_test_qp_open(p, NULL, &q2);
		q = &q2;
	}
	if (p->side == TF_SIDE_B) {
		tg.t = *l;
		tf_test_fill(tg.t.addr, TLEN, SEED);
		memset(canary->addr, FILLER, canary->len);
		rb = setup_b(p, c, &tg);
		if (c == MW_AFTER_SEND_INV)
			tf_test_post_recv1(p->q.qp, 7, NULL, 0, 0);
		tf_test_send_msg(p, &rb, sizeof(rb));
		tf_test_send_buf(p, canary);
		if (c == MW_AFTER_SEND_INV) {
			EXPECT_WC(p, p->q.rcq, 7, TF_WC_SUCCESS, TF_WC_RECV,
				  &wc);
			CHECK(wc.flags == TF_WC_WITH_INV);
			CHECK(wc.invalidated_rkey == rb.rkey);
			tf_test_sync(p);
		}
		tf_test_sync(p); /* A is done */
		CHECK_FILL(tg.t.addr, TLEN, SEED);
		CHECK_BYTES(canary->addr, canary->len, FILLER);
		teardown_b(&tg);
	} else {
		struct tf_sge sge = {.addr = (uintptr_t)l->addr,
				     .lkey = tf_test_buf_lkey(l)};
		struct tf_send_wr wr = {.wr_id = 1,
					.sg_list = &sge,
					.num_sge = 1,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_info("case: %s", cases[c].name);
		rb = tf_test_recv_rbuf(p);
		crb = tf_test_recv_rbuf(p);
		if (c == MW_AFTER_SEND_INV) {
			struct tf_send_wr inv = {.wr_id = 2,
						 .opcode = TF_WR_SEND_WITH_INV,
						 .send_flags = TF_SEND_SIGNALED,
						 .invalidate_rkey = rb.rkey};

			post_wait(p, &p->q, &inv, TF_WC_SEND);
			tf_test_sync(p);
		}
		tf_test_fill(l->addr, l->len, 99);
		sge.length = (uint32_t)rb.len;
		wr.opcode = cases[c].op;
		if (wr.opcode == TF_WR_ATOMIC_FETCH_ADD) {
			wr.wr.atomic.remote_addr = rb.addr;
			wr.wr.atomic.rkey = rb.rkey;
			wr.wr.atomic.compare_add = 1;
		} else {
			wr.wr.rdma.remote_addr = rb.addr;
			wr.wr.rdma.rkey = rb.rkey;
		}
		POST_SEND(q->qp, &wr);
		WAIT_WC(p, q->scq, &wc);
		/* A QP access check may be reported as an invalid request,
		 * as rxe does (check_op_valid); anything else must be a
		 * remote access error. */
		CHECKF(wc.wr_id == 1 && (wc.status == TF_WC_REM_ACCESS_ERR ||
					 (c == QP_NO_REMOTE_WRITE &&
					  wc.status == TF_WC_REM_INV_REQ_ERR)),
		       "case '%s': got %s, expected remote access error",
		       cases[c].name, tf_test_wc_str(&wc));
		/* A valid write to the canary must flush. */
		sge.length = 64;
		wr = (struct tf_send_wr){
			.wr_id = 3,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = crb.addr, .rkey = crb.rkey}};
		POST_SEND(q->qp, &wr);
		EXPECT_WC(p, q->scq, 3, TF_WC_WR_FLUSH_ERR, TF_WC_RDMA_WRITE,
			  &wc);
		CHECK(tf_qp_state(q->qp) == TF_QPS_ERR);
		tf_test_sync(p);
	}
	if (c == MW_OTHER_QP) {
		tf_test_sync(p);
		tf_test_qp_close(&q2);
	}
}

int main(void)
{
	struct tf_test_buf l, canary;
	struct tf_pair p;

	tf_test_begin("conf_protection");
	tf_test_pair_open(&p);
	tf_test_require_caps(
		&p, TF_CAP_REMOTE_ACK,
		"remote access errors in send completions (TF_CAP_REMOTE_ACK)");
	/* Providers may log the refused accesses. */
	tf_test_tolerate_log(true);
	/* B: the target memory (its MRs are per case) and the canary; A: the
	 * local buffer. */
	tf_test_buf_alloc(&p, p.pd, TF_MEM_LIB, TLEN,
			  p.side == TF_SIDE_B ? TF_TEST_NO_MR
					      : TF_ACCESS_LOCAL_WRITE,
			  &l);
	if (p.side == TF_SIDE_B)
		tf_test_buf_alloc(&p, p.pd, TF_MEM_MALLOC, 4096,
				  TF_ACCESS_LOCAL_WRITE |
					  TF_ACCESS_REMOTE_WRITE,
				  &canary);
	for (int c = 0; c < NCASES; c++)
		run_case(&p, (enum pcase)c, &l, &canary);
	tf_test_sync(&p);
	tf_test_buf_free(&l);
	if (p.side == TF_SIDE_B)
		tf_test_buf_free(&canary);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
