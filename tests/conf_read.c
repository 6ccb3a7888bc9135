/* SPDX-License-Identifier: MIT */
/*
 * conf_read: RDMA_READ of 0 B .. 1 MiB from every kind of memory (the
 * target region has REMOTE_READ only) into every kind of memory, at
 * unaligned offsets, and a read scattered over three SGEs of three kinds.
 * The initiator checks every byte and its guards; the target checks that
 * its memory was not modified by being read.
 */
#include <string.h>

#include "tf_test.h"

#define GUARD  4096
#define FILLER 0xee

static const size_t sizes[] = {1, 8, 1024, 65536, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAXSZ  (1 << 20)
#define BUFSZ  (MAXSZ + 2 * GUARD)

static void reads(struct tf_pair *p, struct tf_test_buf *bufs,
		  struct tf_test_rbuf *rb, uint32_t *seedp)
{
	struct tf_wc wc;

	for (size_t s = 0; s < NSIZES; s++) {
		size_t size = sizes[s];

		if (p->caps.max_msg_size && size > p->caps.max_msg_size) {
			tf_test_info("size %zu > max_msg_size: not tried",
				     size);
			continue;
		}
		for (int k = 0; k < TF_MEM_NKINDS; k++) {
			int tk = (k + 2) % TF_MEM_NKINDS;
			uint32_t seed = (*seedp)++;
			size_t roff = GUARD + seed % 11;
			size_t loff = GUARD - seed % 7;

			if (p->side == TF_SIDE_B) {
				/* The pattern starts at the remote offset. */
				memset(bufs[tk].addr, FILLER, bufs[tk].len);
				tf_test_fill(bufs[tk].addr + roff, size, seed);
				tf_test_sync(p);
				tf_test_sync(p);
				CHECK_FILL(bufs[tk].addr + roff, size, seed);
				CHECK_BYTES(bufs[tk].addr, roff, FILLER);
				continue;
			}
			struct tf_test_buf *l = &bufs[k];
			struct tf_sge sge = {.addr = (uintptr_t)l->addr + loff,
					     .length = (uint32_t)size,
					     .lkey = tf_test_buf_lkey(l)};
			struct tf_send_wr wr = {
				.wr_id = seed,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_READ,
				.send_flags = TF_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = rb[tk].addr + roff,
					    .rkey = rb[tk].rkey},
			};

			memset(l->addr, FILLER, l->len);
			tf_test_sync(p);
			POST_SEND(p->q.qp, &wr);
			EXPECT_WC(p, p->q.scq, seed, TF_WC_SUCCESS,
				  TF_WC_RDMA_READ, &wc);
			CHECK(wc.qp == p->q.qp);
			CHECK_BYTES(l->addr, loff, FILLER);
			CHECK_FILL(l->addr + loff, size, seed);
			CHECK_BYTES(l->addr + loff + size,
				    l->len - loff - size < GUARD
					    ? l->len - loff - size
					    : GUARD,
				    FILLER);
			tf_test_sync(p);
		}
	}
}

/* One read of a contiguous remote range scattered into three SGEs. */
static void scatter_read(struct tf_pair *p, struct tf_test_buf *bufs,
			 struct tf_test_rbuf *rb, uint32_t seed)
{
	static const size_t off[3] = {4096, 9, 33};
	static const size_t len[3] = {8192, 1, 50001};
	size_t total = len[0] + len[1] + len[2];
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		struct tf_test_buf *t = &bufs[TF_MEM_MALLOC];

		tf_test_fill(t->addr, t->len, seed);
		tf_test_sync(p);
		tf_test_sync(p);
		CHECK_FILL(t->addr, t->len, seed);
		return;
	}
	struct tf_sge sge[3];
	struct tf_send_wr wr = {
		.wr_id = 3,
		.sg_list = sge,
		.num_sge = 3,
		.opcode = TF_WR_RDMA_READ,
		.send_flags = TF_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = rb[TF_MEM_MALLOC].addr + 1,
			    .rkey = rb[TF_MEM_MALLOC].rkey},
	};
	for (int i = 0; i < 3; i++) {
		int kind = (i + 1) % TF_MEM_NKINDS;

		memset(bufs[kind].addr, FILLER, bufs[kind].len);
		sge[i].addr = (uintptr_t)bufs[kind].addr + off[i];
		sge[i].length = (uint32_t)len[i];
		sge[i].lkey = tf_test_buf_lkey(&bufs[kind]);
	}
	tf_test_sync(p);
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 3, TF_WC_SUCCESS, TF_WC_RDMA_READ, &wc);
	for (size_t i = 0, pos = 1; i < 3; i++) {
		struct tf_test_buf *b = &bufs[(i + 1) % TF_MEM_NKINDS];

		for (size_t j = 0; j < len[i]; j++, pos++) {
			uint8_t want = tf_test_pattern(pos, seed);

			CHECKF(b->addr[off[i] + j] == want,
			       "segment %zu byte %zu: 0x%02x, expected 0x%02x",
			       i, j, b->addr[off[i] + j], want);
		}
		CHECK_BYTES(b->addr, off[i], FILLER);
		CHECK_BYTES(b->addr + off[i] + len[i], GUARD, FILLER);
	}
	CHECK(total == 58194);
	tf_test_sync(p);
}

int main(void)
{
	struct tf_test_buf bufs[TF_MEM_NKINDS];
	struct tf_test_rbuf rb[TF_MEM_NKINDS];
	struct tf_pair p;
	uint32_t seed = 300;
	int k;

	tf_test_begin("conf_read");
	tf_test_pair_start(&p, NULL);
	for (k = 0; k < TF_MEM_NKINDS; k++) {
		/* The target's regions allow remote reads and nothing else. */
		tf_test_buf_alloc(&p, p.pd, (enum tf_test_mem)k, BUFSZ,
				  p.side == TF_SIDE_B ? TF_ACCESS_REMOTE_READ
						      : TF_ACCESS_LOCAL_WRITE,
				  &bufs[k]);
		if (p.side == TF_SIDE_B)
			tf_test_send_buf(&p, &bufs[k]);
		else
			rb[k] = tf_test_recv_rbuf(&p);
	}
	reads(&p, bufs, rb, &seed);
	/* siw reads into one SGE only. */
	if (p.caps.max_sge_rd >= 3)
		scatter_read(&p, bufs, rb, seed);
	else
		tf_test_partial_skip("max_sge_rd %u: scatter READ into 3 "
				     "SGEs",
				     p.caps.max_sge_rd);
	if (p.side == TF_SIDE_A) {
		/* A zero-length read is legal (no SGE) and completes. */
		struct tf_send_wr wr = {
			.wr_id = 4,
			.opcode = TF_WR_RDMA_READ,
			.send_flags = TF_SEND_SIGNALED,
			.wr.rdma = {.remote_addr = rb[TF_MEM_LIB].addr,
				    .rkey = rb[TF_MEM_LIB].rkey},
		};

		POST_SEND(p.q.qp, &wr);
		EXPECT_WC(&p, p.q.scq, 4, TF_WC_SUCCESS, TF_WC_RDMA_READ, NULL);
	}

	tf_test_sync(&p);
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&bufs[k]);
	return tf_test_pair_end(&p);
}
