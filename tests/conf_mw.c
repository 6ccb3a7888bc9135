/* SPDX-License-Identifier: MIT */
/*
 * conf_mw: type-2 memory windows on every kind of memory.  BIND_MW and
 * LOCAL_INV complete with their opcodes; a bound window gives a new key
 * that differs from the region's; RDMA_WRITE, RDMA_READ and a fetch-add
 * through the window reach exactly the window's bytes; a window re-bound
 * read-only serves reads; SEND_WITH_INV revokes it and reports
 * TF_WC_WITH_INV and the invalidated key at the receiver; 128 windows
 * bound at once over adjacent slices each reach exactly their slice.
 * (That revoked keys really stop working is checked by conf_protection.)
 */
#include <string.h>

#include "tf_test.h"

#define FILLER 0xee
#define BUFSZ  65536
#define WOFF   4096 /* window offset inside the region */
#define WLEN   8192

static uint64_t rd64(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* Side B: bind @mw over [addr, addr + len) of @mr; returns the new key. */
static uint32_t bind(struct tf_pair *p, tf_mw_t *mw, tf_mr_t *mr, uint8_t *addr,
		     uint64_t len, unsigned access, uint64_t wr_id)
{
	struct tf_send_wr wr = {
		.wr_id = wr_id,
		.opcode = TF_WR_BIND_MW,
		.send_flags = TF_SEND_SIGNALED,
		.wr.bind_mw = {.mw = mw,
			       .mr = mr,
			       .addr = (uintptr_t)addr,
			       .length = len,
			       .access = access},
	};
	struct tf_wc wc;
	uint32_t key;

	POST_SEND(p->q.qp, &wr);
	key = tf_mw_rkey(mw);
	EXPECT_WC(p, p->q.scq, wr_id, TF_WC_SUCCESS, TF_WC_BIND_MW, &wc);
	CHECK(wc.qp == p->q.qp);
	CHECKF(tf_mw_rkey(mw) == key,
	       "key changed from 0x%x to 0x%x after "
	       "the bind completed",
	       key, tf_mw_rkey(mw));
	CHECKF(key != tf_mr_rkey(mr), "window key 0x%x equals the region's",
	       key);
	return key;
}

static void local_inv(struct tf_pair *p, uint32_t key, uint64_t wr_id)
{
	struct tf_send_wr wr = {.wr_id = wr_id,
				.opcode = TF_WR_LOCAL_INV,
				.send_flags = TF_SEND_SIGNALED,
				.invalidate_rkey = key};

	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, wr_id, TF_WC_SUCCESS, TF_WC_LOCAL_INV, NULL);
}

/* Side A: one RDMA op of @len bytes at @raddr with @rkey, from/to @l. */
static void rdma(struct tf_pair *p, enum tf_wr_opcode op, struct tf_test_buf *l,
		 uint64_t raddr, uint32_t rkey, uint32_t len, uint64_t wr_id)
{
	struct tf_sge sge = {.addr = (uintptr_t)l->addr,
			     .length = len,
			     .lkey = tf_test_buf_lkey(l)};
	struct tf_send_wr wr = {.wr_id = wr_id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = TF_SEND_SIGNALED};

	if (op == TF_WR_ATOMIC_FETCH_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, wr_id, TF_WC_SUCCESS,
		  op == TF_WR_RDMA_WRITE  ? TF_WC_RDMA_WRITE
		  : op == TF_WR_RDMA_READ ? TF_WC_RDMA_READ
					  : TF_WC_FETCH_ADD,
		  NULL);
}

static void one_kind(struct tf_pair *p, struct tf_test_buf *b, tf_mw_t *mw,
		     uint32_t seed)
{
	bool atomic = p->caps.flags & TF_CAP_ATOMIC;
	bool inv = p->caps.flags & TF_CAP_SEND_WITH_INV;
	struct tf_test_rbuf rb;
	struct tf_wc wc;
	uint32_t k1, k2;

	if (p->side == TF_SIDE_B) {
		unsigned acc = TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_READ |
			       (atomic ? TF_ACCESS_REMOTE_ATOMIC : 0);

		memset(b->addr, FILLER, b->len);
		k1 = bind(p, mw, b->mr, b->addr + WOFF, WLEN, acc, 1);
		tf_test_send_rbuf(p, (uintptr_t)b->addr + WOFF, WLEN, k1);
		tf_test_sync(p);
		/* A wrote the pattern, read it back, added 1 to word 0. */
		if (atomic) {
			uint64_t w0;

			memcpy(&w0, b->addr + WOFF, 8);
			w0 -= 1;
			memcpy(b->addr + WOFF, &w0, 8);
		}
		CHECK_FILL(b->addr + WOFF, WLEN, seed);
		CHECK_BYTES(b->addr, WOFF, FILLER);
		CHECK_BYTES(b->addr + WOFF + WLEN, b->len - WOFF - WLEN,
			    FILLER);
		local_inv(p, k1, 2);

		/* Re-bind read-only over the first page: a new key. */
		k2 = bind(p, mw, b->mr, b->addr, WOFF, TF_ACCESS_REMOTE_READ,
			  3);
		CHECKF(k2 != k1, "re-bind gave the same key 0x%x", k1);
		if (inv)
			tf_test_post_recv1(p->q.qp, 4, NULL, 0, 0);
		tf_test_send_rbuf(p, (uintptr_t)b->addr, WOFF, k2);
		tf_test_sync(p);
		if (inv) {
			EXPECT_WC(p, p->q.rcq, 4, TF_WC_SUCCESS, TF_WC_RECV,
				  &wc);
			CHECKF(wc.flags == TF_WC_WITH_INV,
			       "SEND_WITH_INV received with flags 0x%x",
			       wc.flags);
			CHECKF(wc.invalidated_rkey == k2,
			       "invalidated_rkey 0x%x, expected 0x%x",
			       wc.invalidated_rkey, k2);
			CHECK(wc.byte_len == 0);
			CHECK(wc.qp == p->q.qp);
		} else {
			local_inv(p, k2, 5);
		}
		return;
	}

	rb = tf_test_recv_rbuf(p);
	tf_test_fill(b->addr, WLEN, seed);
	rdma(p, TF_WR_RDMA_WRITE, b, rb.addr, rb.rkey, WLEN, 10);
	memset(b->addr, 0, b->len);
	rdma(p, TF_WR_RDMA_READ, b, rb.addr, rb.rkey, WLEN, 11);
	CHECK_FILL(b->addr, WLEN, seed);
	if (atomic) {
		uint64_t orig = rd64(b->addr);

		rdma(p, TF_WR_ATOMIC_FETCH_ADD, b, rb.addr, rb.rkey, 8, 12);
		CHECK(rd64(b->addr) == orig);
	}
	tf_test_sync(p);

	rb = tf_test_recv_rbuf(p);
	memset(b->addr, 0, b->len);
	rdma(p, TF_WR_RDMA_READ, b, rb.addr, rb.rkey, WOFF, 13);
	CHECK_BYTES(b->addr, WOFF, FILLER);
	if (inv) {
		struct tf_send_wr wr = {.wr_id = 14,
					.opcode = TF_WR_SEND_WITH_INV,
					.send_flags = TF_SEND_SIGNALED,
					.invalidate_rkey = rb.rkey};

		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 14, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	}
	tf_test_sync(p);
}

/*
 * Many windows at once: B binds NWIN windows over consecutive slices of
 * one region; A writes a different pattern through each key in one
 * chain; every slice holds its own pattern (no key reaches another
 * window's bytes) and all keys differ.
 */
#define NWIN  128
#define SLICE 64

static void many_windows(struct tf_pair *p, struct tf_test_buf *b)
{
	static uint32_t keys[NWIN];
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		static tf_mw_t *mws[NWIN];

		memset(b->addr, FILLER, b->len);
		for (int i = 0; i < NWIN; i++) {
			CHECK_OK(tf_mw_alloc(p->pd, &mws[i]));
			keys[i] = bind(p, mws[i], b->mr, b->addr + i * SLICE,
				       SLICE, TF_ACCESS_REMOTE_WRITE,
				       1000 + (uint64_t)i);
			for (int j = 0; j < i; j++)
				CHECKF(keys[j] != keys[i],
				       "windows %d and %d share key 0x%x", j, i,
				       keys[i]);
		}
		tf_test_send_u64(p, (uintptr_t)b->addr);
		tf_test_send_msg(p, keys, sizeof(keys));
		tf_test_sync(p);
		for (int i = 0; i < NWIN; i++)
			CHECK_FILL(b->addr + i * SLICE, SLICE,
				   7000 + (uint32_t)i);
		CHECK_BYTES(b->addr + NWIN * SLICE, b->len - NWIN * SLICE,
			    FILLER);
		/* Freeing bound windows unbinds them. */
		for (int i = 0; i < NWIN; i++)
			CHECK_OK(tf_mw_dealloc(mws[i]));
		return;
	}
	static struct tf_sge sge[NWIN];
	static struct tf_send_wr wr[NWIN];
	uint64_t base = tf_test_recv_u64(p);

	tf_test_recv_msg(p, keys, sizeof(keys));
	for (int i = 0; i < NWIN; i++) {
		tf_test_fill(b->addr + i * SLICE, SLICE, 7000 + (uint32_t)i);
		sge[i] = (struct tf_sge){.addr = (uintptr_t)b->addr + i * SLICE,
					 .length = SLICE,
					 .lkey = tf_test_buf_lkey(b)};
		wr[i] = (struct tf_send_wr){
			.wr_id = 2000 + (uint64_t)i,
			.next = i + 1 < NWIN ? &wr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = 1,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = i + 1 < NWIN ? 0 : TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = base + (uint64_t)i * SLICE,
				    .rkey = keys[i]}};
	}
	POST_SEND(p->q.qp, wr);
	EXPECT_WC(p, p->q.scq, 2000 + NWIN - 1, TF_WC_SUCCESS, TF_WC_RDMA_WRITE,
		  &wc);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_test_buf bufs[TF_MEM_NKINDS];
	tf_mw_t *mw = NULL;
	struct tf_pair p;
	int k;

	tf_test_begin("conf_mw");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_MW_TYPE2, "type-2 memory windows");
	if (!(p.caps.flags & TF_CAP_SEND_WITH_INV))
		tf_test_partial_skip("no TF_CAP_SEND_WITH_INV");
	if (!(p.caps.flags & TF_CAP_ATOMIC))
		tf_test_partial_skip("no TF_CAP_ATOMIC: no atomic via window");
	if (p.side == TF_SIDE_B)
		CHECK_SUP(tf_mw_alloc(p.pd, &mw));
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_alloc(&p, p.pd, (enum tf_test_mem)k, BUFSZ,
				  p.side == TF_SIDE_B ? TF_ACCESS_ALL
						      : TF_ACCESS_LOCAL_WRITE,
				  &bufs[k]);
	for (k = 0; k < TF_MEM_NKINDS; k++)
		one_kind(&p, &bufs[k], mw, 500 + (uint32_t)k);
	tf_test_sync(&p);
	many_windows(&p, &bufs[TF_MEM_MALLOC]);

	tf_test_sync(&p);
	/* Every window was revoked: the regions deregister (checked). */
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&bufs[k]);
	CHECK_OK(tf_mw_dealloc(mw));
	return tf_test_pair_end(&p);
}
