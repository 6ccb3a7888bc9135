/* SPDX-License-Identifier: MIT */
/*
 * pool_mw.c - a pool slice exposed to a peer through a type-2 memory
 * window bound over exactly that slice: the peer's RDMA write through the
 * window lands in the slice and nowhere else (the neighbouring slice of
 * the same chunk is untouched), and once the window is invalidated the
 * same write is refused with a remote access error while the slice stays
 * unchanged.  This is what pools register chunks with MW_BIND for.
 */
#include <string.h>

#include "tf_test.h"

#define FILLER 0xee
#define SLICE  3000 /* a 4 KiB class: the window is smaller than the slice */

int main(void)
{
	struct tf_test_rbuf rb;
	struct tf_test_buf lb;
	struct tf_pair p;
	tf_slice_t s1, s2;
	tf_pool_t *pool = NULL;
	tf_mw_t *mw = NULL;
	struct tf_wc wc;
	uint32_t key = 0;

	tf_test_begin("pool_mw");
	tf_test_pair_start(&p, NULL);
	tf_test_require_caps(&p, TF_CAP_MW_TYPE2, "type-2 memory windows");
	if (p.side == TF_SIDE_B) {
		struct tf_send_wr wr = {
			.wr_id = 1,
			.opcode = TF_WR_BIND_MW,
			.send_flags = TF_SEND_SIGNALED,
		};

		CHECK_OK(tf_pool_create(p.pd, NULL, &pool));
		CHECK_OK(tf_pool_rent(pool, SLICE, &s1));
		CHECK_OK(tf_pool_rent(pool, SLICE, &s2));
		memset(s1.addr, FILLER, SLICE);
		memset(s2.addr, FILLER, SLICE);
		CHECK_SUP(tf_mw_alloc(p.pd, &mw));
		wr.wr.bind_mw.mw = mw;
		wr.wr.bind_mw.mr = s1.mr;
		wr.wr.bind_mw.addr = (uintptr_t)s1.addr;
		wr.wr.bind_mw.length = s1.length;
		wr.wr.bind_mw.access =
			TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_READ;
		POST_SEND(p.q.qp, &wr);
		key = tf_mw_rkey(mw);
		EXPECT_WC(&p, p.q.scq, 1, TF_WC_SUCCESS, TF_WC_BIND_MW, NULL);
		CHECK(key != s1.rkey);
		tf_test_send_rbuf(&p, (uintptr_t)s1.addr, s1.length, key);
		tf_test_sync(&p); /* A writes through the window */
		CHECK_FILL(s1.addr, SLICE, 7);
		CHECK_BYTES(s2.addr, SLICE, FILLER);
		memset(s1.addr, FILLER, SLICE);
		wr = (struct tf_send_wr){.wr_id = 2,
					 .opcode = TF_WR_LOCAL_INV,
					 .send_flags = TF_SEND_SIGNALED,
					 .invalidate_rkey = key};
		POST_SEND(p.q.qp, &wr);
		EXPECT_WC(&p, p.q.scq, 2, TF_WC_SUCCESS, TF_WC_LOCAL_INV, NULL);
		tf_test_sync(&p); /* window revoked */
		tf_test_sync(&p); /* A tried again */
		CHECK_BYTES(s1.addr, SLICE, FILLER);
		CHECK_BYTES(s2.addr, SLICE, FILLER);
		CHECK_OK(tf_mw_dealloc(mw));
		CHECK_OK(tf_pool_return(pool, &s1));
		CHECK_OK(tf_pool_return(pool, &s2));
		tf_pool_destroy(pool);
		return tf_test_pair_end(&p);
	}

	tf_test_buf_alloc(&p, p.pd, TF_MEM_MMAP, 2 * SLICE,
			  TF_ACCESS_LOCAL_WRITE, &lb);
	rb = tf_test_recv_rbuf(&p);
	CHECK(rb.len == SLICE);
	{
		struct tf_sge sge = {.addr = (uintptr_t)lb.addr,
				     .length = SLICE,
				     .lkey = tf_test_buf_lkey(&lb)};
		struct tf_send_wr wr = {.wr_id = 10,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE,
					.send_flags = TF_SEND_SIGNALED};

		wr.wr.rdma.remote_addr = rb.addr;
		wr.wr.rdma.rkey = rb.rkey;
		tf_test_fill(lb.addr, SLICE, 7);
		POST_SEND(p.q.qp, &wr);
		EXPECT_WC(&p, p.q.scq, 10, TF_WC_SUCCESS, TF_WC_RDMA_WRITE,
			  NULL);
		/* B checks the slice and revokes the window; the same
		 * write must then be refused. */
		tf_test_sync(&p);
		tf_test_sync(&p);
		wr.wr_id = 11;
		tf_test_fill(lb.addr, SLICE, 8);
		POST_SEND(p.q.qp, &wr);
		WAIT_WC(&p, p.q.scq, &wc);
		CHECKF(wc.wr_id == 11 && wc.status == TF_WC_REM_ACCESS_ERR,
		       "write through a revoked window: %s",
		       tf_test_wc_str(&wc));
		tf_test_sync(&p);
	}
	tf_test_buf_free(&lb);
	return tf_test_pair_end(&p);
}
