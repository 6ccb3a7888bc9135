/* SPDX-License-Identifier: MIT */
/*
 * conf_atomic: ATOMIC_FETCH_ADD (with wrap-around) and ATOMIC_CMP_SWP with
 * a successful and a failed compare, on every kind of target memory; the
 * returned original values, the target value, and the bytes around both
 * the target word and the local result word are checked.  A chain of
 * fetch-adds must return consecutive values in posting order.  An
 * unaligned atomic is refused at post time with -EINVAL and leaves the QP
 * usable.  Values are 64-bit in host byte order.
 */
#include <string.h>

#include "tf_test.h"

#define FILLER 0xee
#define TOFF   64 /* target word offset inside the target buffer */
#define LOFF   40 /* result word offset inside the local buffer */
#define CHAIN  64

static uint64_t rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void wr64(void *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* Side A: one atomic, waits for success, returns the original value. */
static uint64_t atomic_op(struct tf_pair *p, struct tf_test_buf *l,
			  const struct tf_test_rbuf *rb, enum tf_wr_opcode op,
			  uint64_t cmp_add, uint64_t swap, uint64_t wr_id)
{
	struct tf_sge sge = {.addr = (uintptr_t)l->addr + LOFF,
			     .length = 8,
			     .lkey = tf_test_buf_lkey(l)};
	struct tf_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = TF_SEND_SIGNALED,
		.wr.atomic = {.remote_addr = rb->addr + TOFF,
			      .rkey = rb->rkey,
			      .compare_add = cmp_add,
			      .swap = swap},
	};
	struct tf_wc wc;

	memset(l->addr, FILLER, l->len);
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, wr_id, TF_WC_SUCCESS,
		  op == TF_WR_ATOMIC_FETCH_ADD ? TF_WC_FETCH_ADD
					       : TF_WC_COMP_SWAP,
		  &wc);
	CHECK(wc.qp == p->q.qp);
	CHECK_BYTES(l->addr, LOFF, FILLER);
	CHECK_BYTES(l->addr + LOFF + 8, l->len - LOFF - 8, FILLER);
	return rd64(l->addr + LOFF);
}

static void one_kind(struct tf_pair *p, struct tf_test_buf *l,
		     struct tf_test_buf *t, const struct tf_test_rbuf *rb)
{
	const uint64_t init = 0x1122334455667788ull;
	const uint64_t swapped = 0xdeadbeefcafef00dull;
	uint64_t v;

	if (p->side == TF_SIDE_B) {
		memset(t->addr, FILLER, t->len);
		wr64(t->addr + TOFF, init);
		tf_test_sync(p);
		tf_test_sync(p);
		v = rd64(t->addr + TOFF);
		CHECKF(v == swapped, "target 0x%llx, expected 0x%llx",
		       (unsigned long long)v, (unsigned long long)swapped);
		CHECK_BYTES(t->addr, TOFF, FILLER);
		CHECK_BYTES(t->addr + TOFF + 8, t->len - TOFF - 8, FILLER);
		return;
	}
	tf_test_sync(p);
	v = atomic_op(p, l, rb, TF_WR_ATOMIC_FETCH_ADD, 0x10, 0, 1);
	CHECKF(v == init, "fetch_add returned 0x%llx, expected 0x%llx",
	       (unsigned long long)v, (unsigned long long)init);
	/* Adding ~0 is subtracting one: the sum wraps. */
	v = atomic_op(p, l, rb, TF_WR_ATOMIC_FETCH_ADD, ~0ull, 0, 2);
	CHECK(v == init + 0x10);
	v = atomic_op(p, l, rb, TF_WR_ATOMIC_CMP_SWP, init + 0xf, swapped, 3);
	CHECKF(v == init + 0xf, "cmp_swp returned 0x%llx",
	       (unsigned long long)v);
	/* Failed compare: the value stays, the original is returned. */
	v = atomic_op(p, l, rb, TF_WR_ATOMIC_CMP_SWP, init + 0xf, 5, 4);
	CHECKF(v == swapped, "failed cmp_swp returned 0x%llx",
	       (unsigned long long)v);
	v = atomic_op(p, l, rb, TF_WR_ATOMIC_FETCH_ADD, 0, 0, 5);
	CHECKF(v == swapped, "value after failed cmp_swp 0x%llx",
	       (unsigned long long)v);
	tf_test_sync(p);
}

/* A chain of fetch-adds, each returning into its own slot: the originals
 * are consecutive in posting order. */
static void chain(struct tf_pair *p, struct tf_test_buf *l,
		  struct tf_test_buf *t, const struct tf_test_rbuf *rb)
{
	struct tf_send_wr wr[CHAIN];
	struct tf_sge sge[CHAIN];
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		wr64(t->addr + TOFF, 1000);
		tf_test_sync(p);
		tf_test_sync(p);
		CHECK(rd64(t->addr + TOFF) == 1000 + 3 * CHAIN);
		return;
	}
	memset(l->addr, 0, l->len);
	for (int i = 0; i < CHAIN; i++) {
		sge[i] = (struct tf_sge){.addr = (uintptr_t)l->addr + 8 * i,
					 .length = 8,
					 .lkey = tf_test_buf_lkey(l)};
		wr[i] = (struct tf_send_wr){
			.wr_id = 100 + (uint64_t)i,
			.next = i + 1 < CHAIN ? &wr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = 1,
			.opcode = TF_WR_ATOMIC_FETCH_ADD,
			.send_flags = TF_SEND_SIGNALED,
			.wr.atomic = {.remote_addr = rb->addr + TOFF,
				      .rkey = rb->rkey,
				      .compare_add = 3},
		};
	}
	tf_test_sync(p);
	POST_SEND(p->q.qp, wr);
	for (int i = 0; i < CHAIN; i++) {
		EXPECT_WC(p, p->q.scq, 100 + (uint64_t)i, TF_WC_SUCCESS,
			  TF_WC_FETCH_ADD, &wc);
		CHECKF(rd64(l->addr + 8 * i) == 1000 + 3 * (uint64_t)i,
		       "chain %d returned %llu", i,
		       (unsigned long long)rd64(l->addr + 8 * i));
	}
	tf_test_sync(p);
}

static void unaligned(struct tf_pair *p, struct tf_test_buf *l,
		      const struct tf_test_rbuf *rb)
{
	struct tf_sge sge = {.addr = (uintptr_t)l->addr,
			     .length = 8,
			     .lkey = tf_test_buf_lkey(l)};
	struct tf_send_wr wr = {
		.wr_id = 9,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = TF_WR_ATOMIC_FETCH_ADD,
		.send_flags = TF_SEND_SIGNALED,
		.wr.atomic = {.remote_addr = rb->addr + TOFF + 4,
			      .rkey = rb->rkey,
			      .compare_add = 1},
	};
	struct tf_send_wr *bad = NULL;

	/* The provider may log the refused request. */
	tf_test_tolerate_log(true);
	CHECK_ERR(tf_post_send(p->q.qp, &wr, &bad), -EINVAL);
	tf_test_tolerate_log(false);
	CHECK(bad == &wr);
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_RTS);
}

int main(void)
{
	struct tf_test_buf bufs[TF_MEM_NKINDS];
	struct tf_test_rbuf rb[TF_MEM_NKINDS];
	struct tf_pair p;
	int k;

	tf_test_begin("conf_atomic");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_ATOMIC, "atomics");
	for (k = 0; k < TF_MEM_NKINDS; k++) {
		tf_test_buf_alloc(&p, p.pd, (enum tf_test_mem)k, 4096,
				  p.side == TF_SIDE_B
					  ? TF_ACCESS_LOCAL_WRITE |
						    TF_ACCESS_REMOTE_ATOMIC
					  : TF_ACCESS_LOCAL_WRITE,
				  &bufs[k]);
		if (p.side == TF_SIDE_B)
			tf_test_send_buf(&p, &bufs[k]);
		else
			rb[k] = tf_test_recv_rbuf(&p);
	}
	for (k = 0; k < TF_MEM_NKINDS; k++) {
		int tk = (k + 1) % TF_MEM_NKINDS;

		one_kind(&p, &bufs[k], &bufs[tk], &rb[tk]);
	}
	chain(&p, &bufs[TF_MEM_MMAP], &bufs[TF_MEM_MALLOC], &rb[TF_MEM_MALLOC]);
	if (p.side == TF_SIDE_A) {
		unaligned(&p, &bufs[TF_MEM_LIB], &rb[TF_MEM_LIB]);
		/* The QP still works after the refused post. */
		CHECK(atomic_op(&p, &bufs[TF_MEM_LIB], &rb[TF_MEM_MALLOC],
				TF_WR_ATOMIC_FETCH_ADD, 1, 0,
				10) == 1000 + 3 * CHAIN);
	}
	tf_test_sync(&p);
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&bufs[k]);
	return tf_test_pair_end(&p);
}
