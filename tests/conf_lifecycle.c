/* SPDX-License-Identifier: MIT */
/*
 * conf_lifecycle: object lifetimes and address blobs.
 *  - tf_pd_destroy is -EBUSY while an MR, an MW or a QP uses the PD, and
 *    tf_cq_destroy while a QP uses the CQ; nothing is freed then, and the
 *    objects work afterwards; destroying in the right order succeeds.
 *  - tf_post_send before tf_qp_connect is -ENOTCONN.
 *  - tf_qp_destroy drops outstanding work without completions and
 *    invalidates the windows bound to the QP.
 *  - tf_mr_dereg of a region with a bound window is -EBUSY and changes
 *    nothing (peer writes through the region and the window still land);
 *    after LOCAL_INV, or after freeing a bound window, it succeeds.
 *  - tf_qp_connect with blobs built by mutating the peer's real one:
 *    empty, too long and every truncation -> -TF_EWIRE; all-zero and
 *    all-ones -> an error; every single-byte mutation -> success or
 *    -TF_EWIRE/-TF_EVERSION/-TF_EPEER, and at least one byte is a version
 *    (-TF_EVERSION); a blob of another provider (when one can be opened
 *    here) -> -TF_EPEER.  A rejected blob leaves the QP in INIT, and the
 *    same QP then connects with the real blob and carries traffic.
 */
#include <string.h>
#include <time.h>

#include "tf_test.h"

#define SCAN_BUDGET_S 20

static void busy(struct tf_pair *p)
{
	tf_cq_t *scq, *rcq;
	tf_pd_t *pd;
	tf_mr_t *mr;
	tf_mw_t *mw = NULL;
	tf_qp_t *qp;
	tf_qp_params_t qpp = {0};
	uint8_t buf[256];
	struct tf_sge sge = {.addr = (uintptr_t)buf, .length = 8};
	struct tf_send_wr wr = {.wr_id = 1,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};
	struct tf_send_wr *bad = NULL;
	struct tf_wc wc;

	CHECK_OK(tf_pd_create(p->ctx, &pd));
	CHECK_OK(tf_mr_reg(pd, buf, sizeof(buf), TF_ACCESS_LOCAL_WRITE, &mr));
	CHECK_ERR(tf_pd_destroy(pd), -EBUSY);
	CHECK(tf_mr_lkey(mr) == tf_mr_lkey(mr)); /* still there */
	CHECK_OK(tf_mr_dereg(mr));
	if (p->caps.flags & TF_CAP_MW_TYPE2) {
		CHECK_OK(tf_mw_alloc(pd, &mw));
		CHECK_ERR(tf_pd_destroy(pd), -EBUSY);
		CHECK_OK(tf_mw_dealloc(mw));
	}

	CHECK_OK(tf_cq_create(p->ctx, NULL, &scq));
	CHECK_OK(tf_cq_create(p->ctx, NULL, &rcq));
	qpp.send_cq = scq;
	qpp.recv_cq = rcq;
	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	CHECK_ERR(tf_cq_destroy(scq), -EBUSY);
	CHECK_ERR(tf_cq_destroy(rcq), -EBUSY);
	CHECK_ERR(tf_pd_destroy(pd), -EBUSY);
	/* The refusals changed nothing: the QP and its CQs still work. */
	CHECK(tf_qp_state(qp) == TF_QPS_INIT);
	CHECK_ERR(tf_post_send(qp, &wr, &bad), -ENOTCONN);
	CHECK(bad == &wr);
	CHECK(tf_cq_poll(scq, 1, &wc) == 0);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_cq_destroy(scq));
	CHECK_OK(tf_cq_destroy(rcq));
	CHECK_OK(tf_pd_destroy(pd));
}

/* Side B holds a window bound over its region; A writes through both. */
static void bound_window(struct tf_pair *p)
{
	struct tf_wc wc;

	if (!(p->caps.flags & TF_CAP_MW_TYPE2)) {
		tf_test_partial_skip("no TF_CAP_MW_TYPE2: dereg with a bound "
				     "window");
		return;
	}
	if (p->side == TF_SIDE_B) {
		struct tf_test_buf b;
		tf_mw_t *mw;
		struct tf_send_wr wr = {.wr_id = 1,
					.opcode = TF_WR_BIND_MW,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_buf_alloc(p, p->pd, TF_MEM_LIB, 8192, TF_ACCESS_ALL,
				  &b);
		CHECK_OK(tf_mw_alloc(p->pd, &mw));
		wr.wr.bind_mw = (typeof(wr.wr.bind_mw)){
			.mw = mw,
			.mr = b.mr,
			.addr = (uintptr_t)b.addr + 4096,
			.length = 4096,
			.access = TF_ACCESS_REMOTE_WRITE};
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 1, TF_WC_SUCCESS, TF_WC_BIND_MW, &wc);
		CHECK_ERR(tf_mr_dereg(b.mr), -EBUSY);
		tf_test_send_rbuf(p, (uintptr_t)b.addr, 4096, tf_mr_rkey(b.mr));
		tf_test_send_rbuf(p, (uintptr_t)b.addr + 4096, 4096,
				  tf_mw_rkey(mw));
		tf_test_sync(p);
		CHECK_FILL(b.addr, 8192, 31);
		/* LOCAL_INV unbinds: the region deregisters. */
		wr = (struct tf_send_wr){.wr_id = 2,
					 .opcode = TF_WR_LOCAL_INV,
					 .send_flags = TF_SEND_SIGNALED,
					 .invalidate_rkey = tf_mw_rkey(mw)};
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 2, TF_WC_SUCCESS, TF_WC_LOCAL_INV, &wc);
		CHECK_OK(tf_mr_dereg(b.mr));
		b.mr = NULL;
		/* Bound again, then the window is freed: dereg works. */
		CHECK_OK(tf_mr_reg(p->pd, b.addr, 8192, TF_ACCESS_ALL, &b.mr));
		wr = (struct tf_send_wr){.wr_id = 3,
					 .opcode = TF_WR_BIND_MW,
					 .send_flags = TF_SEND_SIGNALED};
		wr.wr.bind_mw = (typeof(wr.wr.bind_mw)){
			.mw = mw,
			.mr = b.mr,
			.addr = (uintptr_t)b.addr,
			.length = 4096,
			.access = TF_ACCESS_REMOTE_READ};
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 3, TF_WC_SUCCESS, TF_WC_BIND_MW, &wc);
		CHECK_ERR(tf_mr_dereg(b.mr), -EBUSY);
		CHECK_OK(tf_mw_dealloc(mw));
		tf_test_buf_free(&b);
		return;
	}
	struct tf_test_buf l;
	struct tf_test_rbuf r1 = tf_test_recv_rbuf(p),
			    r2 = tf_test_recv_rbuf(p);
	struct tf_sge sge;
	struct tf_send_wr wr = {.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED};

	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 8192, TF_ACCESS_LOCAL_WRITE,
			  &l);
	tf_test_fill(l.addr, 8192, 31);
	sge = (struct tf_sge){.addr = (uintptr_t)l.addr,
			      .length = 4096,
			      .lkey = tf_test_buf_lkey(&l)};
	wr.wr_id = 10;
	wr.wr.rdma.remote_addr = r1.addr;
	wr.wr.rdma.rkey = r1.rkey;
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 10, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	sge.addr += 4096;
	wr.wr_id = 11;
	wr.wr.rdma.remote_addr = r2.addr;
	wr.wr.rdma.rkey = r2.rkey;
	POST_SEND(p->q.qp, &wr);
	EXPECT_WC(p, p->q.scq, 11, TF_WC_SUCCESS, TF_WC_RDMA_WRITE, &wc);
	tf_test_sync(p);
	tf_test_buf_free(&l);
}

/* Connect a scratch QP to @blob; returns the result.  The scratch QP is
 * destroyed whatever happened. */
static int try_connect(struct tf_pair *p, tf_cq_t *cq, const void *blob,
		       size_t len)
{
	tf_qp_params_t qpp = {.send_cq = cq, .recv_cq = cq};
	tf_qp_t *qp;
	int ret;

	CHECK_OK(tf_qp_create(p->pd, &qpp, &qp));
	ret = tf_qp_connect(qp, blob, len);
	if (ret)
		CHECKF(tf_qp_state(qp) == TF_QPS_INIT,
		       "rejected blob (%d) moved the QP to state %d", ret,
		       (int)tf_qp_state(qp));
	CHECK_OK(tf_qp_destroy(qp));
	return ret;
}

static bool is_blob_err(int r)
{
	return r == -TF_EWIRE || r == -TF_EVERSION || r == -TF_EPEER;
}

/* A blob from a QP of another provider, if one can be opened here. */
static void other_provider(struct tf_pair *p, tf_qp_t *qa)
{
	const char *other = strcmp(p->caps.provider, "soft") ? "soft" : "verbs";
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER,
				  .provider = other};
	tf_qp_params_t qpp = {0};
	uint8_t blob[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp;
	int ret;

	/* Not built in, or no device for it on this host (verbs where there
	 * is no RDMA device, as on the soft provider's CI): the case cannot
	 * be made here, and the provider under test is not at fault, so
	 * strict mode does not fail it.  Any other error is a failure. */
	ret = tf_context_open(&cp, &ctx);
	if (ret == -TF_ENOPROVIDER || ret == -ENODEV) {
		tf_test_partial_skip_host("foreign-blob case: provider %s: %s",
					  other, tf_strerror(ret));
		return;
	}
	CHECKF(ret == 0, "open provider %s: %d (%s)", other, ret,
	       tf_strerror(ret));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &cq));
	qpp.send_cq = qpp.recv_cq = cq;
	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	CHECK_OK(tf_qp_get_addr(qp, blob, &len));
	CHECK_ERR(tf_qp_connect(qa, blob, len), -TF_EPEER);
	CHECK(tf_qp_state(qa) == TF_QPS_INIT);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
}

/* Set in main: single-byte flips may redirect the soft tcp transport to
 * other addresses, so they are tried only where that traffic cannot
 * leave the machine. */
static bool scan_safe;

static void blobs(struct tf_pair *p)
{
	uint8_t real[TF_QP_ADDR_MAX + 16], bad[TF_QP_ADDR_MAX + 16];
	uint8_t mine[TF_QP_ADDR_MAX];
	size_t rlen, mlen = sizeof(mine);
	struct tf_test_qp q = {0};
	tf_qp_params_t qpp = {0};
	int hist[4] = {0}, version_at = -1;
	struct tf_wc wc;

	CHECK_OK(tf_cq_create(p->ctx, NULL, &q.scq));
	CHECK_OK(tf_cq_create(p->ctx, NULL, &q.rcq));
	q.own_cqs = true;
	qpp.send_cq = q.scq;
	qpp.recv_cq = q.rcq;
	CHECK_OK(tf_qp_create(p->pd, &qpp, &q.qp));
	CHECK_OK(tf_qp_get_addr(q.qp, mine, &mlen));
	tf_test_send_u64(p, mlen);
	tf_test_send_msg(p, mine, mlen);
	rlen = tf_test_recv_u64(p);
	CHECK(rlen > 0 && rlen <= TF_QP_ADDR_MAX);
	tf_test_recv_msg(p, real, rlen);

	if (p->side == TF_SIDE_A) {
		/* Empty and too long. */
		CHECK_ERR(tf_qp_connect(q.qp, real, 0), -TF_EWIRE);
		memcpy(bad, real, rlen);
		memset(bad + rlen, 0, sizeof(bad) - rlen);
		CHECK_ERR(tf_qp_connect(q.qp, bad, TF_QP_ADDR_MAX + 1),
			  -TF_EWIRE);
		/* Every truncation. */
		for (size_t n = 1; n < rlen; n++) {
			int r = tf_qp_connect(q.qp, real, n);

			CHECKF(r == -TF_EWIRE,
			       "blob truncated to %zu of %zu bytes: %d (%s)", n,
			       rlen, r, tf_strerror(r));
			CHECK(tf_qp_state(q.qp) == TF_QPS_INIT);
		}
		/* All zeros, all ones. */
		for (int v = 0; v < 2; v++) {
			int r;

			memset(bad, v ? 0xff : 0, rlen);
			r = tf_qp_connect(q.qp, bad, rlen);
			CHECKF(is_blob_err(r), "all-%s blob: %d (%s)",
			       v ? "ones" : "zero", r, tf_strerror(r));
			CHECK(tf_qp_state(q.qp) == TF_QPS_INIT);
		}
		/* Every single-byte mutation, on scratch QPs.  A verbs
		 * connect to a corrupted GID may wait for address
		 * resolution, so the scan has a time budget. */
		struct timespec t0, t1;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (size_t i = 0; i < rlen && scan_safe; i++) {
			int r;

			clock_gettime(CLOCK_MONOTONIC, &t1);
			if (t1.tv_sec - t0.tv_sec > SCAN_BUDGET_S) {
				tf_test_info("scan stopped after %zu of %zu "
					     "bytes (%d s budget)",
					     i, rlen, SCAN_BUDGET_S);
				break;
			}

			memcpy(bad, real, rlen);
			bad[i] ^= 0xff;
			r = try_connect(p, q.scq, bad, rlen);
			CHECKF(r == 0 || is_blob_err(r),
			       "blob with byte %zu flipped: %d (%s)", i, r,
			       tf_strerror(r));
			hist[r == 0		 ? 0
			     : r == -TF_EWIRE	 ? 1
			     : r == -TF_EVERSION ? 2
						 : 3]++;
			if (r == -TF_EVERSION && version_at < 0)
				version_at = (int)i;
		}
		if (scan_safe) {
			tf_test_info("%zu-byte blob, single-byte flips: %d "
				     "accepted, %d EWIRE, %d EVERSION, %d "
				     "EPEER",
				     rlen, hist[0], hist[1], hist[2], hist[3]);
			CHECKF(version_at >= 0, "no byte of the blob is "
						"checked as a version");
			memcpy(bad, real, rlen);
			bad[version_at] ^= 0xff;
			CHECK_ERR(tf_qp_connect(q.qp, bad, rlen), -TF_EVERSION);
			CHECK(tf_qp_state(q.qp) == TF_QPS_INIT);
		} else {
			tf_test_partial_skip("single-byte blob flips (tcp "
					     "transport without a private "
					     "network namespace)");
		}
		other_provider(p, q.qp);
		/* Scratch QPs may have reached out to bogus peers. */
		tf_test_progress_for(p, 100);
	}
	tf_test_sync(p);
	/* The QP that saw all of that connects with the real blob. */
	CHECK_OK(tf_qp_connect(q.qp, real, rlen));
	CHECK(tf_qp_state(q.qp) == TF_QPS_RTS);
	tf_test_sync(p);
	if (p->side == TF_SIDE_B) {
		uint8_t rbuf[64];
		tf_mr_t *mr;

		CHECK_OK(tf_mr_reg(p->pd, rbuf, sizeof(rbuf),
				   TF_ACCESS_LOCAL_WRITE, &mr));
		tf_test_post_recv1(q.qp, 5, rbuf, sizeof(rbuf), tf_mr_lkey(mr));
		tf_test_sync(p);
		EXPECT_WC(p, q.rcq, 5, TF_WC_SUCCESS, TF_WC_RECV, &wc);
		CHECK(wc.byte_len == 0);
		CHECK_OK(tf_mr_dereg(mr));
	} else {
		struct tf_send_wr wr = {.wr_id = 6,
					.opcode = TF_WR_SEND,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_sync(p);
		POST_SEND(q.qp, &wr);
		EXPECT_WC(p, q.scq, 6, TF_WC_SUCCESS, TF_WC_SEND, &wc);
	}
	tf_test_sync(p);
	tf_test_qp_close(&q);
}

/*
 * tf_qp_destroy drops outstanding work without completions and
 * invalidates the windows bound to the QP: B binds a window through a
 * second QP, A leaves SENDs stuck on it (B posts no receive), both
 * destroy it; no completion appears and B's region deregisters.
 */
static void destroy_qp_with_work(struct tf_pair *p)
{
	struct tf_test_qp q2;
	struct tf_wc wc;

	tf_test_qp_open(p, NULL, &q2);
	if (p->side == TF_SIDE_A) {
		struct tf_send_wr wr[3];

		for (int i = 0; i < 3; i++)
			wr[i] = (struct tf_send_wr){
				.wr_id = 40 + (uint64_t)i,
				.next = i < 2 ? &wr[i + 1] : NULL,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};
		POST_SEND(q2.qp, wr);
		tf_test_progress_for(p, 50);
		tf_test_sync(p);
		CHECK_OK(tf_qp_destroy(q2.qp));
		q2.qp = NULL;
		CHECKF(tf_cq_poll(q2.scq, 1, &wc) == 0,
		       "completion after tf_qp_destroy: %s",
		       tf_test_wc_str(&wc));
		tf_test_qp_close(&q2);
		tf_test_sync(p);
		return;
	}
	/* B destroys its QP only after A destroyed its own, so that A's
	 * provider cannot flush A's sends for a vanished peer first. */
	if (!(p->caps.flags & TF_CAP_MW_TYPE2)) {
		tf_test_sync(p);
		tf_test_sync(p);
		tf_test_qp_close(&q2);
		return;
	}
	struct tf_test_buf b;
	tf_mw_t *mw;
	struct tf_send_wr wr = {.wr_id = 1,
				.opcode = TF_WR_BIND_MW,
				.send_flags = TF_SEND_SIGNALED};

	tf_test_buf_alloc(p, p->pd, TF_MEM_MMAP, 4096, TF_ACCESS_ALL, &b);
	CHECK_OK(tf_mw_alloc(p->pd, &mw));
	wr.wr.bind_mw.mw = mw;
	wr.wr.bind_mw.mr = b.mr;
	wr.wr.bind_mw.addr = (uintptr_t)b.addr;
	wr.wr.bind_mw.length = 4096;
	wr.wr.bind_mw.access = TF_ACCESS_REMOTE_WRITE;
	POST_SEND(q2.qp, &wr);
	EXPECT_WC(p, q2.scq, 1, TF_WC_SUCCESS, TF_WC_BIND_MW, &wc);
	CHECK_ERR(tf_mr_dereg(b.mr), -EBUSY);
	tf_test_sync(p);
	tf_test_sync(p);
	tf_test_qp_close(&q2);
	/* The window went with its QP. */
	CHECK_OK(tf_mr_dereg(b.mr));
	b.mr = NULL;
	CHECK_OK(tf_mw_dealloc(mw));
	tf_test_buf_free(&b);
}

int main(void)
{
	struct tf_pair p;

	const char *tp = getenv("TOLLFREE_SOFT_TRANSPORT");

	tf_test_begin("conf_lifecycle");
	/* Only the soft tcp transport connects to addresses taken from the
	 * blob; the shm transport and verbs (inside the rxe guest) do not
	 * send anything off the machine. */
	scan_safe = !(tp && !strcmp(tp, "tcp")) || tf_test_private_netns();
	tf_test_pair_open(&p);
	/* -EBUSY refusals and rejected blobs may be logged. */
	tf_test_tolerate_log(true);
	busy(&p);
	tf_test_qp_open(&p, NULL, &p.q);
	bound_window(&p);
	tf_test_sync(&p);
	destroy_qp_with_work(&p);
	tf_test_sync(&p);
	blobs(&p);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
