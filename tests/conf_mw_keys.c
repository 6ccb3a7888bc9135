/* SPDX-License-Identifier: MIT */
/*
 * conf_mw_keys: the keys a window gets from consecutive binds must not be
 * guessable from each other.  64 bind / LOCAL_INV cycles on one window:
 * consecutive keys differ, the steps between them are not all equal (a
 * constant step, as with keys that count up, fails), no key equals the
 * region's, two windows bound over the same range get different keys.
 * Only the newest key works at the peer: a write with the previous one
 * completes with TF_WC_REM_ACCESS_ERR and the target stays unchanged.
 */
#include <string.h>

#include "tf_test.h"

#define NBINDS 64
#define FILLER 0xee

static uint32_t bind(struct tf_pair *p, tf_mw_t *mw, struct tf_test_buf *b,
		     uint64_t wr_id)
{
	struct tf_send_wr wr = {
		.wr_id = wr_id,
		.opcode = TF_WR_BIND_MW,
		.send_flags = TF_SEND_SIGNALED,
		.wr.bind_mw = {.mw = mw,
			       .mr = b->mr,
			       .addr = (uintptr_t)b->addr,
			       .length = b->len,
			       .access = TF_ACCESS_REMOTE_WRITE},
	};

	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, wr_id, TF_WC_SUCCESS, TF_WC_BIND_MW, NULL);
	return tf_mw_rkey(mw);
}

static void inval(struct tf_pair *p, uint32_t key, uint64_t wr_id)
{
	struct tf_send_wr wr = {.wr_id = wr_id,
				.opcode = TF_WR_LOCAL_INV,
				.send_flags = TF_SEND_SIGNALED,
				.invalidate_rkey = key};

	POST_WAIT(p, &p->q, &wr, TF_WC_SUCCESS, TF_WC_LOCAL_INV, NULL);
}

static void side_b(struct tf_pair *p)
{
	struct tf_test_buf b;
	uint32_t keys[NBINDS], other;
	tf_mw_t *mw, *mw2;
	bool step_varies = false;

	tf_test_buf_alloc(p, p->pd, TF_MEM_LIB, 4096, TF_ACCESS_ALL, &b);
	CHECK_SUP(tf_mw_alloc(p->pd, &mw));
	CHECK_OK(tf_mw_alloc(p->pd, &mw2));
	for (int i = 0; i < NBINDS; i++) {
		keys[i] = bind(p, mw, &b, 2 * (uint64_t)i);
		CHECKF(keys[i] != tf_mr_rkey(b.mr),
		       "bind %d: key 0x%x is the region's key", i, keys[i]);
		if (i > 0)
			CHECKF(keys[i] != keys[i - 1],
			       "binds %d and %d gave the same key 0x%x", i - 1,
			       i, keys[i]);
		if (i > 1 && keys[i] - keys[i - 1] != keys[1] - keys[0])
			step_varies = true;
		if (i + 1 < NBINDS)
			inval(p, keys[i], 2 * (uint64_t)i + 1);
	}
	CHECKF(step_varies,
	       "%d consecutive binds all stepped the key by 0x%x: "
	       "predictable keys",
	       NBINDS, keys[1] - keys[0]);
	other = bind(p, mw2, &b, 1000);
	CHECKF(other != keys[NBINDS - 1],
	       "two windows over one range share key 0x%x", other);
	inval(p, other, 1001);

	/* The peer writes with the newest key (works), then with the
	 * previous one (must fail). */
	memset(b.addr, FILLER, b.len);
	tf_test_send_rbuf(p, (uintptr_t)b.addr, b.len, keys[NBINDS - 1]);
	tf_test_send_u64(p, keys[NBINDS - 2]);
	/* The denied access may be logged here, and (as on rxe) may move
	 * this QP to the error state too: no more work is posted on it. */
	tf_test_tolerate_log(true);
	tf_test_sync(p);
	CHECK_FILL(b.addr, 64, 77);
	CHECK_BYTES(b.addr + 64, b.len - 64, FILLER);
	tf_test_info("keys: 0x%08x 0x%08x 0x%08x 0x%08x ...", keys[0], keys[1],
		     keys[2], keys[3]);
	tf_test_sync(p);
	/* A bound window may be freed; then the region deregisters. */
	CHECK_OK(tf_mw_dealloc(mw));
	CHECK_OK(tf_mw_dealloc(mw2));
	tf_test_buf_free(&b);
	tf_test_tolerate_log(false);
}

static void side_a(struct tf_pair *p)
{
	struct tf_test_buf l;
	struct tf_test_rbuf rb;
	uint32_t stale;
	struct tf_sge sge;
	struct tf_send_wr wr = {.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_wc wc;

	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 4096, TF_ACCESS_LOCAL_WRITE,
			  &l);
	rb = tf_test_recv_rbuf(p);
	stale = (uint32_t)tf_test_recv_u64(p);
	tf_test_fill(l.addr, 64, 77);
	sge = (struct tf_sge){.addr = (uintptr_t)l.addr,
			      .length = 64,
			      .lkey = tf_test_buf_lkey(&l)};
	wr.wr_id = 1;
	wr.wr.rdma.remote_addr = rb.addr;
	wr.wr.rdma.rkey = rb.rkey;
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 1, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, NULL);

	/* Overwrite with another pattern through the stale key. */
	tf_test_fill(l.addr, 64, 78);
	wr.wr_id = 2;
	wr.wr.rdma.remote_addr = rb.addr;
	wr.wr.rdma.rkey = stale;
	tf_test_tolerate_log(true);
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 2, TF_WC_REM_ACCESS_ERR, -1, &wc);
	tf_test_sync(p);
	tf_test_sync(p);
	tf_test_tolerate_log(false);
	tf_test_buf_free(&l);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_mw_keys");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_MW_TYPE2, "type-2 memory windows");
	if (p.side == TF_SIDE_A)
		side_a(&p);
	else
		side_b(&p);
	return tf_test_pair_end(&p);
}
