/* SPDX-License-Identifier: MIT */
/*
 * soft_mw_dealloc: a window freed while a BIND_MW of it is still queued.
 * The soft provider reserves the bind's key at post time and counts the
 * reservations each window holds (n_reserved), so that a dealloc walks
 * the translation table only when there are any.  Two contexts of this
 * process over shm; on A, a SEND that B has no receive for yet (it waits
 * in RNR retries) holds the BIND_MW queued behind it.
 *  1. Bound as usual: the count goes to 1 at the post and back to 0 when
 *     the bind executes; the key works (a READ from B).
 *  2. Freed with its bind queued: the dealloc disowns the reserved slot;
 *     once B posts its receive the SEND completes and the bind fails
 *     (TF_WC_MW_BIND_ERR) without touching the freed window, and the
 *     key it reserved is free again (A's live keys back where they were).
 *  3. Freed with its bind queued, then the QP destroyed (the bind is
 *     flushed): the same.
 *  4. Its bind flushed while the window lives: the count goes back to 0.
 */
#include "fault_util.h"
#include "soft_int.h"

#define BOUND_MS 20000
#define LEN	 4096

struct side {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_mr_t *mr;
	uint8_t buf[LEN];
};

static struct side a, b;

static void side_open(struct side *s)
{
	ft_shm_side_open(&s->ctx, &s->pd, &s->cq, s->buf, LEN, &s->mr);
}

static unsigned live_keys(const struct side *s)
{
	return atomic_load(&soft_ctx_of(s->ctx)->n_keys);
}

/* Whether the TPT slot of @key (reserved for a bind) still names the
 * window at address @mw: a freed window's must not, or the bind would use
 * it.  An address, taken while the window lived, is only compared. */
static bool owns(uintptr_t mw, uint32_t key)
{
	struct soft_ctx *c = soft_ctx_of(a.ctx);

	return (uintptr_t)c->slot_owner[key & c->tpt_mask] == mw;
}

static void pair(tf_qp_t **qa, tf_qp_t **qb)
{
	tf_qp_params_t pa = {.send_cq = a.cq, .recv_cq = a.cq};
	tf_qp_params_t pb = {.send_cq = b.cq, .recv_cq = b.cq};

	CHECK_OK(tf_qp_create(a.pd, &pa, qa));
	CHECK_OK(tf_qp_create(b.pd, &pb, qb));
	tf_test_qp_connect_local(*qa, *qb);
}

static void wait_wc(struct side *s, struct side *o, struct tf_wc *wc)
{
	ft_shm_wait_wc(s->cq, s->ctx, o->ctx, wc, BOUND_MS);
}

/* On @qa: a SEND of 8 bytes (wr_id 1) that waits for B's receive, then
 * a BIND_MW (wr_id 2) of @mw over @mr's first half, behind it. */
static void send_then_bind(tf_qp_t *qa, tf_mr_t *mr, tf_mw_t *mw)
{
	struct tf_sge sge = {.addr = (uintptr_t)a.buf,
			     .length = 8,
			     .lkey = tf_mr_lkey(a.mr)};
	struct tf_send_wr send = {.wr_id = 1,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = TF_WR_SEND,
				  .send_flags = TF_SEND_SIGNALED};
	struct tf_send_wr bind = {.wr_id = 2,
				  .opcode = TF_WR_BIND_MW,
				  .send_flags = TF_SEND_SIGNALED};

	bind.wr.bind_mw.mw = mw;
	bind.wr.bind_mw.mr = mr;
	bind.wr.bind_mw.addr = (uintptr_t)tf_mr_addr(mr);
	bind.wr.bind_mw.length = LEN / 2;
	bind.wr.bind_mw.access = TF_ACCESS_REMOTE_READ;
	CHECK_OK(tf_post_send(qa, &send, NULL));
	CHECK_OK(tf_post_send(qa, &bind, NULL));
	/* The SEND is out and refused for want of a receive; the bind waits
	 * behind it. */
	for (uint64_t end = ft_now_ms() + 20; ft_now_ms() < end;) {
		tf_context_progress(a.ctx);
		tf_context_progress(b.ctx);
	}
}

static void post_recv_b(tf_qp_t *qb)
{
	tf_test_post_recv1(qb, 9, b.buf, 64, tf_mr_lkey(b.mr));
}

static void expect(struct side *s, struct side *o, uint64_t wr_id,
		   enum tf_wc_status st)
{
	struct tf_wc wc;

	wait_wc(s, o, &wc);
	CHECKF(wc.wr_id == wr_id && wc.status == st,
	       "wr_id %llu status %s, expected wr_id %llu status %s",
	       (unsigned long long)wc.wr_id, tf_wc_status_str(wc.status),
	       (unsigned long long)wr_id, tf_wc_status_str(st));
}

/* A new QP pair and window, and the window's BIND_MW queued on @qa;
 * *@k0: A's live keys before. */
static tf_mw_t *start(tf_qp_t **qa, tf_qp_t **qb, tf_mr_t *mr, unsigned *k0)
{
	tf_mw_t *mw;

	pair(qa, qb);
	*k0 = live_keys(&a);
	CHECK_OK(tf_mw_alloc(a.pd, &mw));
	send_then_bind(*qa, mr, mw);
	CHECK(((struct soft_mw *)mw)->n_reserved == 1);
	CHECK(live_keys(&a) == *k0 + 1);
	return mw;
}

/* Free @mw, whose bind is queued: its reserved slot no longer names it
 * (it stays reserved until the bind ends). */
static void free_queued(tf_mw_t *mw)
{
	uint32_t key = tf_mw_rkey(mw);
	uintptr_t id = (uintptr_t)mw;
	unsigned k = live_keys(&a);

	CHECK(owns(id, key));
	CHECK_OK(tf_mw_dealloc(mw));
	CHECK(!owns(id, key));
	CHECK(live_keys(&a) == k);
}

static void end(tf_qp_t *qa, tf_qp_t *qb)
{
	CHECK_OK(tf_qp_destroy(qa));
	CHECK_OK(tf_qp_destroy(qb));
}

int main(void)
{
	tf_qp_t *qa, *qb;
	tf_mr_t *mr;
	tf_mw_t *mw;
	uint8_t *mem;
	unsigned k0;

	tf_test_begin("soft_mw_dealloc");
	side_open(&a);
	side_open(&b);
	CHECK_OK(tf_mem_alloc(a.ctx, LEN, (void **)&mem));
	CHECK_OK(tf_mr_reg(a.pd, mem, LEN,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_MW_BIND, &mr));
	tf_test_fill(mem, LEN, 3);

	/* 1. */
	mw = start(&qa, &qb, mr, &k0);
	post_recv_b(qb);
	expect(&a, &b, 1, TF_WC_SUCCESS);
	expect(&a, &b, 2, TF_WC_SUCCESS);
	expect(&b, &a, 9, TF_WC_SUCCESS);
	CHECK(((struct soft_mw *)mw)->n_reserved == 0);
	{
		struct tf_sge sge = {.addr = (uintptr_t)b.buf,
				     .length = 64,
				     .lkey = tf_mr_lkey(b.mr)};
		struct tf_send_wr rd = {.wr_id = 5,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_READ,
					.send_flags = TF_SEND_SIGNALED};

		rd.wr.rdma.remote_addr = (uintptr_t)mem;
		rd.wr.rdma.rkey = tf_mw_rkey(mw);
		CHECK_OK(tf_post_send(qb, &rd, NULL));
		expect(&b, &a, 5, TF_WC_SUCCESS);
		CHECK_FILL(b.buf, 64, 3);
	}
	CHECK_OK(tf_mw_dealloc(mw));
	end(qa, qb);

	/* 2. */
	free_queued(start(&qa, &qb, mr, &k0));
	post_recv_b(qb);
	expect(&a, &b, 1, TF_WC_SUCCESS);
	expect(&a, &b, 2, TF_WC_MW_BIND_ERR);
	CHECK(live_keys(&a) == k0);
	end(qa, qb);

	/* 3. */
	free_queued(start(&qa, &qb, mr, &k0));
	CHECK_OK(tf_qp_destroy(qa));
	CHECK(live_keys(&a) == k0);
	CHECK_OK(tf_qp_destroy(qb));

	/* 4. */
	mw = start(&qa, &qb, mr, &k0);
	CHECK_OK(tf_qp_destroy(qa));
	CHECK(((struct soft_mw *)mw)->n_reserved == 0);
	CHECK(live_keys(&a) == k0);
	CHECK_OK(tf_mw_dealloc(mw));
	CHECK_OK(tf_qp_destroy(qb));

	CHECK_OK(tf_mr_dereg(mr));
	tf_mem_free(a.ctx, mem, LEN);
	ft_shm_side_close(a.ctx, a.pd, a.cq, a.mr);
	ft_shm_side_close(b.ctx, b.pd, b.cq, b.mr);
	return tf_test_end();
}
