/* SPDX-License-Identifier: MIT */
/*
 * conf_send: SEND and SEND_WITH_IMM of 0 B .. 1 MiB between every kind of
 * memory, multi-SGE gather and scatter across regions of different kinds,
 * and inline sends (TF_SEND_INLINE: the payload is copied at post time and
 * the lkey is not checked, as ibv_post_send(3) says).  Every byte is
 * verified, as are the guard bytes after the message, and every field of
 * both completions.
 */
#include <string.h>

#include "tf_test.h"

#define GUARD  4096
#define FILLER 0xee

static const size_t sizes[] = {0, 1, 8, 1024, 65536, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAXSZ  (1 << 20)

static uint32_t imm_of(uint32_t seed)
{
	return seed * 0x01000193u ^ 0xa5a5f00du;
}

/* One SEND of @size bytes: A sends from @src, B receives into @dst. */
static void one_send(struct tf_pair *p, struct tf_test_buf *src,
		     struct tf_test_buf *dst, size_t size, bool imm,
		     uint32_t seed)
{
	struct tf_wc wc;

	if (p->side == TF_SIDE_B) {
		memset(dst->addr, FILLER, dst->len);
		tf_test_post_recv1(p->q.qp, seed, dst->addr,
				   (uint32_t)(size + 64),
				   tf_test_buf_lkey(dst));
		tf_test_sync(p);
		EXPECT_WC(p, p->q.rcq, seed, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECKF(wc.byte_len == size, "byte_len %u, sent %zu",
		       wc.byte_len, size);
		CHECKF(wc.qp == p->q.qp, "wc.qp %p, expected %p", (void *)wc.qp,
		       (void *)p->q.qp);
		if (imm) {
			CHECKF(wc.flags == TF_WC_WITH_IMM, "flags 0x%x",
			       wc.flags);
			CHECKF(wc.imm_data == imm_of(seed),
			       "imm 0x%x, expected 0x%x", wc.imm_data,
			       imm_of(seed));
		} else {
			CHECKF(wc.flags == 0, "flags 0x%x on a plain SEND",
			       wc.flags);
		}
		CHECK_FILL(dst->addr, size, seed);
		CHECK_BYTES(dst->addr + size, GUARD, FILLER);
		tf_test_sync(p);
	} else {
		struct tf_sge sge = {.addr = (uintptr_t)src->addr,
				     .length = (uint32_t)size,
				     .lkey = tf_test_buf_lkey(src)};
		struct tf_send_wr wr = {
			.wr_id = seed,
			.sg_list = &sge,
			.num_sge = size ? 1 : 0,
			.opcode = imm ? TF_WR_SEND_WITH_IMM : TF_WR_SEND,
			.send_flags = TF_SEND_SIGNALED,
			.imm_data = imm_of(seed),
		};

		tf_test_fill(src->addr, size, seed);
		tf_test_sync(p);
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, seed, TF_WC_SUCCESS, TF_WC_SEND, &wc);
		CHECKF(wc.qp == p->q.qp, "wc.qp %p, expected %p", (void *)wc.qp,
		       (void *)p->q.qp);
		/* The source buffer is the user's again: unchanged. */
		CHECK_FILL(src->addr, size, seed);
		tf_test_sync(p);
	}
}

/*
 * Gather from three segments of three regions of different memory kinds,
 * scatter into three segments of three other regions.  The message is the
 * concatenation of the gather segments; the receiver knows their layout.
 */
struct seg {
	int kind;
	size_t off, len;
};
static const struct seg gather[] = {
	{TF_MEM_MALLOC, 3, 100},
	{TF_MEM_LIB, 1000, 5000},
	{TF_MEM_MMAP, 20000, 37},
};
static const struct seg scatter[] = {
	{TF_MEM_MMAP, 5, 17},
	{TF_MEM_MALLOC, 4096, 3000},
	{TF_MEM_LIB, 10000, 8192}, /* longer than the rest of the message */
};

static void multi_sge(struct tf_pair *p, struct tf_test_buf *bufs,
		      uint32_t seed)
{
	size_t total = 0;
	struct tf_wc wc;

	for (int i = 0; i < 3; i++)
		total += gather[i].len;
	if (p->side == TF_SIDE_A) {
		struct tf_sge sge[3];
		struct tf_send_wr wr = {.wr_id = 77,
					.sg_list = sge,
					.num_sge = 3,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		for (int i = 0; i < 3; i++) {
			struct tf_test_buf *b = &bufs[gather[i].kind];

			tf_test_fill(b->addr, b->len, seed + (uint32_t)i);
			sge[i].addr = (uintptr_t)b->addr + gather[i].off;
			sge[i].length = (uint32_t)gather[i].len;
			sge[i].lkey = tf_test_buf_lkey(b);
		}
		tf_test_sync(p);
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 77, TF_WC_SUCCESS, TF_WC_SEND, &wc);
		tf_test_sync(p);
	} else {
		struct tf_sge sge[3];
		struct tf_recv_wr wr = {
			.wr_id = 78, .sg_list = sge, .num_sge = 3};
		size_t gi = 0, goff = 0, got = 0;

		for (int i = 0; i < 3; i++) {
			struct tf_test_buf *b = &bufs[scatter[i].kind];

			memset(b->addr, FILLER, b->len);
			sge[i].addr = (uintptr_t)b->addr + scatter[i].off;
			sge[i].length = (uint32_t)scatter[i].len;
			sge[i].lkey = tf_test_buf_lkey(b);
		}
		POST_RECV(p->q.qp, &wr);
		tf_test_sync(p);
		EXPECT_WC(p, p->q.rcq, 78, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECKF(wc.byte_len == total, "byte_len %u, expected %zu",
		       wc.byte_len, total);
		/* Walk the scatter list and the gather list together. */
		for (int i = 0; i < 3; i++) {
			const uint8_t *d =
				bufs[scatter[i].kind].addr + scatter[i].off;

			for (size_t j = 0; j < scatter[i].len; j++) {
				uint8_t want;

				if (got == total) {
					CHECKF(d[j] == FILLER,
					       "scatter seg %d byte %zu "
					       "written "
					       "past the message",
					       i, j);
					continue;
				}
				want = tf_test_pattern(gather[gi].off + goff,
						       seed + (uint32_t)gi);
				CHECKF(d[j] == want,
				       "message byte %zu (scatter seg %d "
				       "byte %zu): 0x%02x, expected 0x%02x",
				       got, i, j, d[j], want);
				got++;
				if (++goff == gather[gi].len) {
					gi++;
					goff = 0;
				}
			}
		}
		CHECK(got == total);
		/* Nothing outside the scatter segments was touched. */
		for (int k = 0; k < TF_MEM_NKINDS; k++) {
			struct tf_test_buf *b = &bufs[k];

			for (int i = 0; i < 3; i++) {
				if (scatter[i].kind != k)
					continue;
				CHECK_BYTES(b->addr, scatter[i].off, FILLER);
				CHECK_BYTES(b->addr + scatter[i].off +
						    scatter[i].len,
					    b->len - scatter[i].off -
						    scatter[i].len,
					    FILLER);
			}
		}
		tf_test_sync(p);
	}
}

/* Inline sends from unregistered memory with lkey 0; the source is
 * overwritten right after the post returns. */
static void inline_sends(struct tf_pair *p, struct tf_test_buf *dst)
{
	size_t isz[3] = {1, 8, 200};
	uint8_t src[256];
	struct tf_wc wc;

	if (p->caps.max_inline_data < isz[2])
		isz[2] = p->caps.max_inline_data;
	for (int i = 0; i < 3; i++) {
		uint32_t seed = 9000 + (uint32_t)i;
		bool imm = i == 1 && (p->caps.flags & TF_CAP_IMM_DATA);

		if (p->side == TF_SIDE_B) {
			memset(dst->addr, FILLER, dst->len);
			tf_test_post_recv1(p->q.qp, seed, dst->addr, 512,
					   tf_test_buf_lkey(dst));
			tf_test_sync(p);
			EXPECT_WC(p, p->q.rcq, seed, TF_WC_SUCCESS, TF_WC_RECV,
				  &wc);
			CHECK(wc.byte_len == isz[i]);
			CHECK(wc.flags == (imm ? TF_WC_WITH_IMM : 0u));
			CHECK(!imm || wc.imm_data == imm_of(seed));
			CHECK_FILL(dst->addr, isz[i], seed);
			CHECK_BYTES(dst->addr + isz[i], 512, FILLER);
			tf_test_sync(p);
		} else {
			/* Two SGEs for the largest: inline gathers too. */
			size_t half = isz[i] > 8 ? isz[i] / 2 : isz[i];
			struct tf_sge sge[2] = {
				{.addr = (uintptr_t)src,
				 .length = (uint32_t)half},
				{.addr = (uintptr_t)src + half,
				 .length = (uint32_t)(isz[i] - half)},
			};
			struct tf_send_wr wr = {
				.wr_id = seed,
				.sg_list = sge,
				.num_sge = half < isz[i] ? 2 : 1,
				.opcode =
					imm ? TF_WR_SEND_WITH_IMM : TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED | TF_SEND_INLINE,
				.imm_data = imm_of(seed),
			};

			tf_test_fill(src, isz[i], seed);
			tf_test_sync(p);
			POST_SEND(p->q.qp, &wr);
			memset(src, 0x5a, sizeof(src));
			EXPECT_WC(p, p->q.scq, seed, TF_WC_SUCCESS, TF_WC_SEND,
				  &wc);
			tf_test_sync(p);
		}
	}
}

int main(void)
{
	struct tf_test_buf bufs[TF_MEM_NKINDS];
	struct tf_pair p;
	uint32_t seed = 1;
	bool imm_ok;
	int k;

	tf_test_begin("conf_send");
	tf_test_pair_start(&p, NULL);
	imm_ok = p.caps.flags & TF_CAP_IMM_DATA;
	if (!imm_ok)
		tf_test_partial_skip("no TF_CAP_IMM_DATA: SEND_WITH_IMM");
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_alloc(&p, p.pd, (enum tf_test_mem)k,
				  MAXSZ + GUARD + 64, TF_ACCESS_LOCAL_WRITE,
				  &bufs[k]);

	for (size_t s = 0; s < NSIZES; s++) {
		if (p.caps.max_msg_size && sizes[s] > p.caps.max_msg_size) {
			tf_test_info("size %zu > max_msg_size %u: not tried",
				     sizes[s], p.caps.max_msg_size);
			continue;
		}
		for (k = 0; k < TF_MEM_NKINDS; k++) {
			/* A sends from kind k, B receives into the next
			 * kind: every kind is both source and sink. */
			struct tf_test_buf *src = &bufs[k];
			struct tf_test_buf *dst =
				&bufs[(k + 1) % TF_MEM_NKINDS];

			one_send(&p, src, dst, sizes[s], false, seed++);
			if (imm_ok)
				one_send(&p, src, dst, sizes[s], true, seed);
			seed++;
		}
	}
	multi_sge(&p, bufs, seed++);
	if (p.caps.flags & TF_CAP_INLINE)
		inline_sends(&p, &bufs[TF_MEM_MALLOC]);
	else
		tf_test_partial_skip("no TF_CAP_INLINE: inline sends");

	tf_test_sync(&p);
	for (k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&bufs[k]);
	return tf_test_pair_end(&p);
}
