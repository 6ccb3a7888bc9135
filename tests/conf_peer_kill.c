/* SPDX-License-Identifier: MIT */
/*
 * conf_peer_kill: side B is killed with SIGKILL while side A streams
 * RDMA writes, SENDs and RDMA reads.  A must get, within a timeout, an error
 * for its outstanding and later work: completions before the first error
 * are successes, the first error is TF_WC_RETRY_EXC_ERR (the peer is
 * gone), everything after it is TF_WC_WR_FLUSH_ERR, every signalled WR
 * completes exactly once, and A's posted receives flush.  Afterwards A
 * destroys its objects and tf_test_pair_end checks that its VmLck and
 * VmPin are back to their values before the context was opened.
 */
#include <string.h>

#include "tf_test.h"

#define WSIZE	   65536
#define SSIZE	   1024
#define DEPTH	   32	/* outstanding WRs at most */
#define KILL_AFTER 64	/* successful completions before the kill */
#define MAX_AFTER  2000 /* WRs posted after the kill, at most */
#define NRECV	   64

static long held(void)
{
	long l = tf_test_vmlck(), p = tf_test_vmpin();

	return (l < 0 ? 0 : l) + (p < 0 ? 0 : p);
}

static void side_b(struct tf_pair *p)
{
	struct tf_test_buf t, r;
	struct tf_wc wc;

	tf_test_buf_alloc(p, p->pd, TF_MEM_LIB, WSIZE,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				  TF_ACCESS_REMOTE_READ,
			  &t);
	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, NRECV * SSIZE,
			  TF_ACCESS_LOCAL_WRITE, &r);
	for (int i = 0; i < NRECV; i++)
		tf_test_post_recv1(p->q.qp, (uint64_t)i, r.addr + i * SSIZE,
				   SSIZE, tf_test_buf_lkey(&r));
	tf_test_send_buf(p, &t);
	/* Serve until killed: re-post every receive that completes. */
	for (;;) {
		int n = tf_cq_wait(p->q.rcq, 1, &wc, 100);

		CHECK(n >= 0);
		if (n == 0)
			continue;
		CHECKF(wc.status == TF_WC_SUCCESS, "B: %s",
		       tf_test_wc_str(&wc));
		tf_test_post_recv1(p->q.qp, wc.wr_id, r.addr + wc.wr_id * SSIZE,
				   SSIZE, tf_test_buf_lkey(&r));
	}
}

static void side_a(struct tf_pair *p)
{
	struct tf_test_buf l;
	struct tf_test_rbuf rb;
	struct tf_wc wc;
	uint64_t posted = 0, done = 0, ok = 0, posted_at_kill = 0;
	bool killed = false, failed = false;
	long held0;
	int timeout = 4 * tf_test_timeout_ms();

	tf_test_buf_alloc(p, p->pd, TF_MEM_MMAP, WSIZE, TF_TEST_NO_MR, &l);
	/* Measured with the buffer mapped, so that unmapping it cannot hide
	 * a lock or pin the provider forgot to drop. */
	held0 = held();
	CHECK_OK(tf_mr_reg(p->pd, l.addr, l.len, TF_ACCESS_LOCAL_WRITE, &l.mr));
	tf_test_fill(l.addr, l.len, 1);
	for (int i = 0; i < 4; i++)
		tf_test_post_recv1(p->q.qp, 1000 + (uint64_t)i, l.addr, 64,
				   tf_test_buf_lkey(&l));
	rb = tf_test_recv_rbuf(p);

	while (!failed || done < posted) {
		/* Keep DEPTH WRs in flight until the first error. */
		while (!failed && posted - done < DEPTH &&
		       (!killed || posted - posted_at_kill < MAX_AFTER)) {
			static const enum tf_wr_opcode ops[3] = {
				TF_WR_RDMA_WRITE, TF_WR_SEND, TF_WR_RDMA_READ};
			enum tf_wr_opcode op = ops[posted % 3];
			struct tf_sge sge = {.addr = (uintptr_t)l.addr,
					     .length = op == TF_WR_SEND ? SSIZE
									: WSIZE,
					     .lkey = tf_test_buf_lkey(&l)};
			struct tf_send_wr wr = {
				.wr_id = posted,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = TF_SEND_SIGNALED,
				.wr.rdma = {.remote_addr = rb.addr,
					    .rkey = rb.rkey},
			};

			POST_SEND(p->q.qp, &wr);
			posted++;
		}
		if (killed && !failed && posted - posted_at_kill >= MAX_AFTER &&
		    done == posted)
			tf_test_fail(__FILE__, __LINE__,
				     "%d WRs completed successfully after "
				     "the peer was killed",
				     MAX_AFTER);
		tf_test_wait_wc(__FILE__, __LINE__, p, p->q.scq, &wc, timeout);
		CHECKF(wc.wr_id == done,
		       "completion for wr %llu, expected "
		       "%llu (out of order or lost)",
		       (unsigned long long)wc.wr_id, (unsigned long long)done);
		done++;
		if (!failed && wc.status == TF_WC_SUCCESS) {
			ok++;
		} else if (!failed) {
			CHECKF(killed, "error before the kill: %s",
			       tf_test_wc_str(&wc));
			CHECKF(wc.status == TF_WC_RETRY_EXC_ERR,
			       "first error after the kill: %s, expected "
			       "retry exceeded",
			       tf_test_wc_str(&wc));
			failed = true;
		} else {
			CHECKF(wc.status == TF_WC_WR_FLUSH_ERR,
			       "after the first error: %s",
			       tf_test_wc_str(&wc));
		}
		if (!killed && ok == KILL_AFTER) {
			tf_test_pair_kill_peer(p);
			killed = true;
			posted_at_kill = posted;
		}
	}
	tf_test_info("%llu WRs, %llu succeeded, %llu posted at the kill",
		     (unsigned long long)posted, (unsigned long long)ok,
		     (unsigned long long)posted_at_kill);
	for (int i = 0; i < 4; i++)
		EXPECT_WC(p, p->q.rcq, 1000 + (uint64_t)i, TF_WC_WR_FLUSH_ERR,
			  TF_WC_RECV, NULL);
	EXPECT_CQ_EMPTY(p, p->q.scq, 50);
	CHECK(tf_qp_state(p->q.qp) == TF_QPS_ERR);
	tf_test_qp_close(&p->q);
	CHECK_OK(tf_mr_dereg(l.mr));
	l.mr = NULL;
	CHECKF(held() == held0,
	       "VmLck+VmPin %ld after the survivor destroyed its QP and "
	       "region, %ld before",
	       held(), held0);
	tf_test_buf_free(&l);
}

int main(void)
{
	/* A short transport timeout, so that the test does not wait for the
	 * default; it is no timing assertion. */
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_TIMEOUT,
			      .timeout_ms = 500};
	struct tf_pair p;

	tf_test_begin("conf_peer_kill");
	tf_test_pair_start(&p, &qpp);
	tf_test_require_caps(
		&p, TF_CAP_REMOTE_ACK,
		"retry-exceeded errors for a dead peer (TF_CAP_REMOTE_ACK)");
	/* Losing the peer may be logged. */
	tf_test_tolerate_log(true);
	if (p.side == TF_SIDE_B)
		side_b(&p);
	side_a(&p);
	tf_test_tolerate_log(false);
	return tf_test_pair_end(&p);
}
