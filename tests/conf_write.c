/* SPDX-License-Identifier: MIT */
/*
 * conf_write: RDMA_WRITE and RDMA_WRITE_WITH_IMM of 0 B .. 1 MiB between
 * every kind of memory, at unaligned remote offsets, with a multi-SGE
 * gather and inline variants.  The target checks every byte and the
 * guards on both sides of the written range; a plain write must not
 * consume a posted receive, a write with immediate must consume exactly
 * one and report byte_len, imm and TF_WC_RECV_RDMA_WITH_IMM.
 */
#include <string.h>

#include "tf_test.h"

#define GUARD  4096
#define FILLER 0xee

static const size_t sizes[] = {0, 1, 8, 1024, 65536, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAXSZ  (1 << 20)
#define BUFSZ  (MAXSZ + 2 * GUARD)

static uint32_t imm_of(uint32_t seed)
{
	return ~seed * 0x2545f491u;
}

/* Side A: write @size bytes of pattern @seed from @src at @loff to the
 * peer's @dst at @roff, and wait for the completion. */
static void do_write(struct tf_pair *p, struct tf_test_buf *src, size_t loff,
		     const struct tf_test_rbuf *dst, size_t roff, size_t size,
		     bool imm, uint32_t seed)
{
	struct tf_sge sge = {.addr = (uintptr_t)src->addr + loff,
			     .length = (uint32_t)size,
			     .lkey = tf_test_buf_lkey(src)};
	struct tf_send_wr wr = {
		.wr_id = seed,
		.sg_list = &sge,
		.num_sge = size ? 1 : 0,
		.opcode = imm ? TF_WR_RDMA_WRITE_WITH_IMM : TF_WR_RDMA_WRITE,
		.send_flags = TF_SEND_SIGNALED,
		.imm_data = imm_of(seed),
		.wr.rdma = {.remote_addr = dst->addr + roff, .rkey = dst->rkey},
	};
	struct tf_wc wc;

	memset(src->addr, 0, src->len);
	tf_test_fill(src->addr + loff, size, seed);
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, seed, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	CHECKF(wc.qp == p->q.qp, "wc.qp %p", (void *)wc.qp);
}

/* Side B: check that @b holds the pattern at [off, off + size) and the
 * filler everywhere else. */
static void check_target(struct tf_test_buf *b, size_t off, size_t size,
			 uint32_t seed)
{
	CHECK_BYTES(b->addr, off, FILLER);
	CHECK_FILL(b->addr + off, size, seed);
	CHECK_BYTES(b->addr + off + size,
		    b->len - off - size < GUARD ? b->len - off - size : GUARD,
		    FILLER);
}

static void writes(struct tf_pair *p, struct tf_test_buf *bufs,
		   struct tf_test_rbuf *rb, bool imm, uint32_t *seedp)
{
	struct tf_wc wc;

	/* Plain writes run with one (zero-length) receive posted, which they
	 * must leave alone; a SEND consumes it at the end. */
	if (!imm && p->side == TF_SIDE_B)
		tf_test_post_recv1(p->q.qp, 4242, NULL, 0, 0);
	for (size_t s = 0; s < NSIZES; s++) {
		if (p->caps.max_msg_size && sizes[s] > p->caps.max_msg_size)
			continue;
		for (int k = 0; k < TF_MEM_NKINDS; k++) {
			int tk = (k + 1) % TF_MEM_NKINDS;
			uint32_t seed = (*seedp)++;
			/* Unaligned remote offsets, different each time. */
			size_t roff = GUARD + seed % 13;

			if (p->side == TF_SIDE_A) {
				tf_test_sync(p);
				do_write(p, &bufs[k], 5, &rb[tk], roff,
					 sizes[s], imm, seed);
				tf_test_sync(p);
				continue;
			}
			memset(bufs[tk].addr, FILLER, bufs[tk].len);
			if (imm)
				tf_test_post_recv1(p->q.qp, seed, NULL, 0, 0);
			tf_test_sync(p);
			tf_test_sync(p);
			if (imm) {
				EXPECT_WC(p, p->q.rcq, seed, TF_WC_SUCCESS,
					  TF_WC_RECV_RDMA_WITH_IMM, &wc);
				CHECKF(wc.byte_len == sizes[s],
				       "byte_len %u, wrote %zu", wc.byte_len,
				       sizes[s]);
				CHECKF(wc.flags == TF_WC_WITH_IMM, "flags 0x%x",
				       wc.flags);
				CHECKF(wc.imm_data == imm_of(seed),
				       "imm 0x%x, expected 0x%x", wc.imm_data,
				       imm_of(seed));
				CHECK(wc.qp == p->q.qp);
			}
			check_target(&bufs[tk], roff, sizes[s], seed);
		}
	}
	if (imm)
		return;
	/* The sentinel receive is still there for a SEND. */
	if (p->side == TF_SIDE_A) {
		struct tf_send_wr wr = {.wr_id = 4243,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 4243, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	} else {
		EXPECT_WC(p, p->q.rcq, 4242, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 0);
	}
	tf_test_sync(p);
}

/* One write gathering three segments of three kinds of memory into one
 * contiguous remote range. */
static void gather_write(struct tf_pair *p, struct tf_test_buf *bufs,
			 struct tf_test_rbuf *rb, uint32_t seed)
{
	static const size_t off[3] = {7, 4000, 100};
	static const size_t len[3] = {3000, 70000, 1};
	size_t total = len[0] + len[1] + len[2];
	struct tf_wc wc;

	if (p->side == TF_SIDE_A) {
		struct tf_sge sge[3];
		struct tf_send_wr wr = {
			.wr_id = 5,
			.sg_list = sge,
			.num_sge = 3,
			.opcode = TF_WR_RDMA_WRITE,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = rb[TF_MEM_LIB].addr + GUARD,
				    .rkey = rb[TF_MEM_LIB].rkey},
		};

		for (int i = 0; i < 3; i++) {
			tf_test_fill(bufs[i].addr, bufs[i].len,
				     seed + (uint32_t)i);
			sge[i].addr = (uintptr_t)bufs[i].addr + off[i];
			sge[i].length = (uint32_t)len[i];
			sge[i].lkey = tf_test_buf_lkey(&bufs[i]);
		}
		tf_test_sync(p);
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 5, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
		tf_test_sync(p);
	} else {
		struct tf_test_buf *t = &bufs[TF_MEM_LIB];
		const uint8_t *d = t->addr + GUARD;

		memset(t->addr, FILLER, t->len);
		tf_test_sync(p);
		tf_test_sync(p);
		for (size_t i = 0, pos = 0; i < 3; i++)
			for (size_t j = 0; j < len[i]; j++, pos++) {
				uint8_t want = tf_test_pattern(
					off[i] + j, seed + (uint32_t)i);

				CHECKF(d[pos] == want,
				       "byte %zu (segment %zu byte %zu): "
				       "0x%02x,"
				       " expected 0x%02x",
				       pos, i, j, d[pos], want);
			}
		CHECK_BYTES(t->addr, GUARD, FILLER);
		CHECK_BYTES(d + total, GUARD, FILLER);
	}
}

/* Inline writes from unregistered memory, lkey 0, source overwritten
 * right after the post. */
static void inline_writes(struct tf_pair *p, struct tf_test_buf *bufs,
			  struct tf_test_rbuf *rb, uint32_t seed)
{
	size_t sz =
		p->caps.max_inline_data < 200 ? p->caps.max_inline_data : 200;
	uint8_t src[256];
	struct tf_wc wc;

	int nimm = p->caps.flags & TF_CAP_IMM_DATA ? 2 : 1;

	for (int imm = 0; imm < nimm; imm++, seed++) {
		if (p->side == TF_SIDE_A) {
			struct tf_sge sge = {.addr = (uintptr_t)src,
					     .length = (uint32_t)sz};
			struct tf_send_wr wr = {
				.wr_id = seed,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = imm ? TF_WR_RDMA_WRITE_WITH_IMM
					      : TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED | TF_SEND_INLINE,
				.imm_data = imm_of(seed),
				.wr.rdma = {.remote_addr =
						    rb[TF_MEM_MMAP].addr + 3,
					    .rkey = rb[TF_MEM_MMAP].rkey},
			};

			tf_test_fill(src, sz, seed);
			tf_test_sync(p);
			POST_SEND(p->q.qp, &wr);
			memset(src, 0x5a, sizeof(src));
			EXPECT_WC(p, p->q.scq, seed, TF_WC_SUCCESS,
				  TF_WC_RDMA_WRITE, &wc);
			tf_test_sync(p);
		} else {
			memset(bufs[TF_MEM_MMAP].addr, FILLER,
			       bufs[TF_MEM_MMAP].len);
			if (imm)
				tf_test_post_recv1(p->q.qp, seed, NULL, 0, 0);
			tf_test_sync(p);
			tf_test_sync(p);
			if (imm) {
				EXPECT_WC(p, p->q.rcq, seed, TF_WC_SUCCESS,
					  TF_WC_RECV_RDMA_WITH_IMM, &wc);
				CHECK(wc.byte_len == sz);
				CHECK(wc.imm_data == imm_of(seed));
			}
			check_target(&bufs[TF_MEM_MMAP], 3, sz, seed);
		}
	}
}

int main(void)
{
	struct tf_test_buf bufs[TF_MEM_NKINDS];
	struct tf_test_rbuf rb[TF_MEM_NKINDS];
	struct tf_pair p;
	uint32_t seed = 100;
	int k;

	tf_test_begin("conf_write");
	tf_test_pair_start(&p, NULL);
	for (k = 0; k < TF_MEM_NKINDS; k++) {
		tf_test_buf_alloc(&p, p.pd, (enum tf_test_mem)k, BUFSZ,
				  p.side == TF_SIDE_B
					  ? TF_ACCESS_LOCAL_WRITE |
						    TF_ACCESS_REMOTE_WRITE
					  : TF_ACCESS_LOCAL_WRITE,
				  &bufs[k]);
		if (p.side == TF_SIDE_B)
			tf_test_send_buf(&p, &bufs[k]);
		else
			rb[k] = tf_test_recv_rbuf(&p);
	}

	writes(&p, bufs, rb, false, &seed);
	if (p.caps.flags & TF_CAP_IMM_DATA)
		writes(&p, bufs, rb, true, &seed);
	else
		tf_test_partial_skip("no TF_CAP_IMM_DATA: RDMA_WRITE_WITH_IMM");
	gather_write(&p, bufs, rb, seed);
	seed += 3;
	if (p.caps.flags & TF_CAP_INLINE)
		inline_writes(&p, bufs, rb, seed);
	else
		tf_test_partial_skip("no TF_CAP_INLINE: inline writes");

	tf_test_sync(&p);
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&bufs[k]);
	return tf_test_pair_end(&p);
}
