/* SPDX-License-Identifier: MIT */
/*
 * verbs_smoke: the verbs provider end to end in one process: two contexts
 * (TOLLFREE_DEVICE and TOLLFREE_TEST_PEER_DEVICE, the same device by
 * default), one RC QP on each, connected to each other.  Exercises WRITE,
 * WRITE_WITH_IMM, READ, SEND (plain, immediate, inline, multi-SGE),
 * atomics, type-2 memory windows (bind, access through the window,
 * LOCAL_INV, SEND_WITH_INV, rebind), the completion fd, and the error
 * paths whose exact behaviour is device-defined; for those it prints
 * "observe:" lines (the reference behaviour of real verbs that the soft
 * provider is compared with) and checks only what the IB specification
 * fixes.  Skips (77) where the verbs provider or a device is missing.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tf_test.h"

#if !defined(__has_include) || !__has_include(<infiniband/verbs.h>)
/* Run a part and say how long it took (guest timings vary a lot). */
#define SECTION(_fn)                                                       \
	do {                                                               \
		struct timespec _t0, _t1;                                  \
                                                                           \
		clock_gettime(CLOCK_MONOTONIC, &_t0);                      \
		_fn();                                                     \
		clock_gettime(CLOCK_MONOTONIC, &_t1);                      \
		tf_test_info("%s: %.1f ms", #_fn,                          \
			     (double)(_t1.tv_sec - _t0.tv_sec) * 1e3 +     \
				     (double)(_t1.tv_nsec - _t0.tv_nsec) / \
					     1e6);                         \
	} while (0)

int main(void)
{
	tf_test_begin("verbs_smoke");
	tf_test_skip("built without libibverbs");
}
#else
#include "verbs_int.h"

#define BUFSZ	   (64 * 1024)
#define WAIT_MS	   20000

static struct tf_test_dev A, B;
static tf_caps_t caps;

/* (Re)create both QPs and connect them; @rnr_retry for A's QP. */
static void connect_pair(uint8_t rnr_retry)
{
	tf_qp_params_t qa = {.field_mask = TF_QP_PARAM_RNR_RETRY,
			     .send_cq = A.cq,
			     .recv_cq = A.cq,
			     .rnr_retry = rnr_retry};
	tf_qp_params_t qb = {.send_cq = B.cq, .recv_cq = B.cq};
	uint8_t ba[TF_QP_ADDR_MAX], bb[TF_QP_ADDR_MAX];
	size_t la = sizeof(ba), lb = sizeof(bb);
	struct tf_wc wc[16];

	if (A.qp) {
		CHECK_OK(tf_qp_destroy(A.qp));
		CHECK_OK(tf_qp_destroy(B.qp));
		/* Completions of destroyed QPs are dropped. */
		while (tf_cq_poll(A.cq, 16, wc) > 0)
			;
		while (tf_cq_poll(B.cq, 16, wc) > 0)
			;
	}
	CHECK_OK(tf_qp_create(A.pd, &qa, &A.qp));
	CHECK_OK(tf_qp_create(B.pd, &qb, &B.qp));
	CHECK(tf_qp_state(A.qp) == TF_QPS_INIT);
	CHECK_OK(tf_qp_get_addr(A.qp, ba, &la));
	CHECK_OK(tf_qp_get_addr(B.qp, bb, &lb));
	CHECK_OK(tf_qp_connect(A.qp, bb, lb));
	CHECK_OK(tf_qp_connect(B.qp, ba, la));
	CHECK(tf_qp_state(A.qp) == TF_QPS_RTS);
	CHECK(tf_qp_state(B.qp) == TF_QPS_RTS);
}

/* Wait for exactly one completion on @cq. */
#define wait1(_cq) wait1_at(__LINE__, (_cq))
static struct tf_wc wait1_at(int line, tf_cq_t *cq)
{
	struct tf_wc wc;
	int n = tf_cq_wait(cq, 1, &wc, WAIT_MS);

	if (n != 1)
		tf_test_fail(__FILE__, line, "no completion (%d)", n);
	return wc;
}

#define wait_ok(_cq, _id, _op) wait_ok_at(__LINE__, (_cq), (_id), (_op))
static struct tf_wc wait_ok_at(int line, tf_cq_t *cq, uint64_t wr_id,
			       enum tf_wc_opcode op)
{
	struct tf_wc wc = wait1_at(line, cq);

	if (wc.status != TF_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != op)
		tf_test_fail(__FILE__, line,
			     "wc wr_id %llu status %s opcode %d, expected "
			     "wr_id %llu success opcode %d",
			     (unsigned long long)wc.wr_id,
			     tf_wc_status_str(wc.status), wc.opcode,
			     (unsigned long long)wr_id, op);
	return wc;
}

static void post(tf_qp_t *qp, struct tf_send_wr *wr)
{
	struct tf_send_wr *bad;

	CHECK_OK(tf_post_send(qp, wr, &bad));
}

static void post_recv(struct tf_test_dev *s, uint64_t wr_id, size_t off,
		      uint32_t len)
{
	struct tf_sge sge = {(uintptr_t)s->buf + off, len, tf_mr_lkey(s->mr)};
	struct tf_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
	struct tf_recv_wr *bad;

	CHECK_OK(tf_post_recv(s->qp, &wr, &bad));
}

/* A one-sided op from A on B's memory at @roff with @rkey. */
static void rdma(enum tf_wr_opcode op, uint64_t wr_id, size_t loff, size_t roff,
		 uint32_t len, uint32_t rkey)
{
	struct tf_sge sge = {(uintptr_t)A.buf + loff, len, tf_mr_lkey(A.mr)};
	struct tf_send_wr wr = {.wr_id = wr_id,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = op,
				.send_flags = TF_SEND_SIGNALED,
				.imm_data = 0x11223344};

	wr.wr.rdma.remote_addr = (uintptr_t)B.buf + roff;
	wr.wr.rdma.rkey = rkey;
	post(A.qp, &wr);
}

static void bind_mw_mr(tf_mw_t *mw, tf_mr_t *mr, uint64_t wr_id, size_t off,
		       size_t len, unsigned access)
{
	struct tf_send_wr wr = {.wr_id = wr_id,
				.opcode = TF_WR_BIND_MW,
				.send_flags = TF_SEND_SIGNALED};

	wr.wr.bind_mw.mw = mw;
	wr.wr.bind_mw.mr = mr;
	wr.wr.bind_mw.addr = (uint64_t)(uintptr_t)B.buf + off;
	wr.wr.bind_mw.length = len;
	wr.wr.bind_mw.access = access;
	post(B.qp, &wr);
}

static void bind_mw(tf_mw_t *mw, uint64_t wr_id, size_t off, size_t len,
		    unsigned access)
{
	bind_mw_mr(mw, B.mr, wr_id, off, len, access);
}

/* The responder's QP state as the device sees it, without a completion
 * (a remote error leaves the responder no CQE to learn it from). */
static const char *responder_state(void)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(VERBS_QP(B.qp)->ibqp, &a, IBV_QP_STATE, &ia))
		return "unknown (ibv_query_qp failed)";
	return a.qp_state == IBV_QPS_RTS   ? "stays in RTS"
	       : a.qp_state == IBV_QPS_ERR ? "goes to error"
					   : "in another state";
}

static void test_write_read(void)
{
	struct tf_wc wc;

	tf_test_fill(A.buf, 4096, 1);
	rdma(TF_WR_RDMA_WRITE, 1, 0, 8192, 4096, tf_mr_rkey(B.mr));
	wait_ok(A.cq, 1, TF_WC_RDMA_WRITE);
	CHECK_FILL(B.buf + 8192, 4096, 1);

	tf_test_fill(B.buf + 16384, 3000, 2);
	rdma(TF_WR_RDMA_READ, 2, 4096, 16384, 3000, tf_mr_rkey(B.mr));
	wait_ok(A.cq, 2, TF_WC_RDMA_READ);
	CHECK_FILL(A.buf + 4096, 3000, 2);

	if (!(caps.flags & TF_CAP_IMM_DATA)) {
		tf_test_partial_skip("no TF_CAP_IMM_DATA: RDMA_WRITE_WITH_IMM");
		return;
	}
	/* WRITE_WITH_IMM consumes a receive at B. */
	post_recv(&B, 77, 0, 0);
	tf_test_fill(A.buf, 100, 3);
	rdma(TF_WR_RDMA_WRITE_WITH_IMM, 3, 0, 20000, 100, tf_mr_rkey(B.mr));
	wait_ok(A.cq, 3, TF_WC_RDMA_WRITE);
	wc = wait_ok(B.cq, 77, TF_WC_RECV_RDMA_WITH_IMM);
	CHECK(wc.flags & TF_WC_WITH_IMM);
	CHECK(wc.imm_data == 0x11223344);
	CHECK(wc.byte_len == 100);
	CHECK(wc.qp == B.qp);
	CHECK_FILL(B.buf + 20000, 100, 3);
}

static void test_send(void)
{
	struct tf_sge sg[3];
	struct tf_send_wr wr = {.wr_id = 10,
				.sg_list = sg,
				.num_sge = 3,
				.opcode = TF_WR_SEND_WITH_IMM,
				.send_flags = TF_SEND_SIGNALED,
				.imm_data = 0xdeadbeef};
	struct tf_wc wc;

	/* Gather from three pieces of A into one receive at B. */
	if (!(caps.flags & TF_CAP_IMM_DATA)) {
		tf_test_partial_skip("no TF_CAP_IMM_DATA: SEND_WITH_IMM");
		wr.opcode = TF_WR_SEND;
		wr.imm_data = 0;
	}
	tf_test_fill(A.buf, 3000, 4);
	for (int i = 0; i < 3; i++)
		sg[i] = (struct tf_sge){(uintptr_t)A.buf + 1000 * (unsigned)i,
					1000, tf_mr_lkey(A.mr)};
	post_recv(&B, 11, 32768, 4096);
	post(A.qp, &wr);
	wait_ok(A.cq, 10, TF_WC_SEND);
	wc = wait_ok(B.cq, 11, TF_WC_RECV);
	CHECK(wc.byte_len == 3000 && wc.imm_data == wr.imm_data);
	CHECK(wc.flags == (wr.imm_data ? TF_WC_WITH_IMM : 0u));
	CHECK_FILL(B.buf + 32768, 3000, 4);

	/* Inline: the payload is copied at post time. */
	if (caps.flags & TF_CAP_INLINE) {
		char msg[64] = "inline payload";

		sg[0] = (struct tf_sge){(uintptr_t)msg, sizeof(msg), 0};
		wr = (struct tf_send_wr){.wr_id = 12,
					 .sg_list = sg,
					 .num_sge = 1,
					 .opcode = TF_WR_SEND,
					 .send_flags = TF_SEND_SIGNALED |
						       TF_SEND_INLINE};
		post_recv(&B, 13, 40000, 128);
		post(A.qp, &wr);
		memset(msg, 0, sizeof(msg));
		wait_ok(A.cq, 12, TF_WC_SEND);
		wc = wait_ok(B.cq, 13, TF_WC_RECV);
		CHECK(wc.byte_len == 64 && wc.flags == 0);
		CHECK(!strcmp(B.buf + 40000, "inline payload"));
	}

	/* Unsignaled WRs followed by a signaled one: one completion. */
	sg[0] = (struct tf_sge){(uintptr_t)A.buf, 16, tf_mr_lkey(A.mr)};
	for (int i = 0; i < 4; i++) {
		wr = (struct tf_send_wr){.wr_id = 20 + (unsigned)i,
					 .sg_list = sg,
					 .num_sge = 1,
					 .opcode = TF_WR_RDMA_WRITE,
					 .send_flags =
						 i == 3 ? TF_SEND_SIGNALED : 0};
		wr.wr.rdma.remote_addr = (uintptr_t)B.buf;
		wr.wr.rdma.rkey = tf_mr_rkey(B.mr);
		post(A.qp, &wr);
	}
	wait_ok(A.cq, 23, TF_WC_RDMA_WRITE);
	CHECK(tf_cq_poll(A.cq, 1, &wc) == 0);
}

static void test_atomics(void)
{
	struct tf_sge sge = {(uintptr_t)A.buf, 8, tf_mr_lkey(A.mr)};
	struct tf_send_wr wr = {.wr_id = 30,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_ATOMIC_FETCH_ADD,
				.send_flags = TF_SEND_SIGNALED};
	uint64_t *target = (uint64_t *)(void *)(B.buf + 48 * 1024);

	if (!(caps.flags & TF_CAP_ATOMIC)) {
		tf_test_partial_skip("no atomics on this device");
		return;
	}
	*target = 40;
	wr.wr.atomic.remote_addr = (uintptr_t)target;
	wr.wr.atomic.rkey = tf_mr_rkey(B.mr);
	wr.wr.atomic.compare_add = 2;
	post(A.qp, &wr);
	wait_ok(A.cq, 30, TF_WC_FETCH_ADD);
	CHECK(*(uint64_t *)(void *)A.buf == 40 && *target == 42);
	wr.wr_id = 31;
	wr.opcode = TF_WR_ATOMIC_CMP_SWP;
	wr.wr.atomic.compare_add = 42;
	wr.wr.atomic.swap = 7;
	post(A.qp, &wr);
	wait_ok(A.cq, 31, TF_WC_COMP_SWAP);
	CHECK(*(uint64_t *)(void *)A.buf == 42 && *target == 7);
	/* Unaligned: refused at post time. */
	wr.wr.atomic.remote_addr = (uintptr_t)target + 4;
	CHECK_ERR(tf_post_send(A.qp, &wr, NULL), -EINVAL);
}

static void test_mw(void)
{
	tf_mw_t *mw;
	uint32_t k1, k2, k3;
	struct tf_wc wc;
	struct tf_sge sge = {(uintptr_t)A.buf, 8, tf_mr_lkey(A.mr)};
	struct tf_send_wr wr = {.wr_id = 50,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND_WITH_INV,
				.send_flags = TF_SEND_SIGNALED};

	if (!(caps.flags & TF_CAP_MW_TYPE2)) {
		CHECK_ERR(tf_mw_alloc(B.pd, &mw), -EOPNOTSUPP);
		tf_test_partial_skip("no type-2 memory windows on this device");
		return;
	}
	CHECK_OK(tf_mw_alloc(B.pd, &mw));
	k1 = tf_mw_rkey(mw);
	bind_mw(mw, 40, 4096, 8192,
		TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE);
	k2 = tf_mw_rkey(mw);
	CHECK(k2 != k1 && (k2 & ~0xffu) == (k1 & ~0xffu));
	wait_ok(B.cq, 40, TF_WC_BIND_MW);

	/* Through the window. */
	tf_test_fill(A.buf, 512, 5);
	rdma(TF_WR_RDMA_WRITE, 41, 0, 4096 + 100, 512, k2);
	wait_ok(A.cq, 41, TF_WC_RDMA_WRITE);
	CHECK_FILL(B.buf + 4096 + 100, 512, 5);
	rdma(TF_WR_RDMA_READ, 42, 1024, 4096 + 100, 512, k2);
	wait_ok(A.cq, 42, TF_WC_RDMA_READ);
	CHECK_FILL(A.buf + 1024, 512, 5);

	/* LOCAL_INV at B, then rebind: a new key. */
	{
		struct tf_send_wr iw = {.wr_id = 43,
					.opcode = TF_WR_LOCAL_INV,
					.send_flags = TF_SEND_SIGNALED,
					.invalidate_rkey = k2};

		post(B.qp, &iw);
		wait_ok(B.cq, 43, TF_WC_LOCAL_INV);
	}
	bind_mw(mw, 44, 0, 4096, TF_ACCESS_REMOTE_WRITE);
	k3 = tf_mw_rkey(mw);
	CHECK(k3 != k2);
	wait_ok(B.cq, 44, TF_WC_BIND_MW);
	rdma(TF_WR_RDMA_WRITE, 45, 0, 0, 64, k3);
	wait_ok(A.cq, 45, TF_WC_RDMA_WRITE);

	/* SEND_WITH_INV revokes k3 at B. */
	wr.invalidate_rkey = k3;
	post_recv(&B, 51, 40000, 64);
	post(A.qp, &wr);
	wait_ok(A.cq, 50, TF_WC_SEND);
	wc = wait_ok(B.cq, 51, TF_WC_RECV);
	CHECKF(wc.flags == TF_WC_WITH_INV && wc.invalidated_rkey == k3,
	       "flags 0x%x invalidated_rkey 0x%x, expected WITH_INV 0x%x",
	       wc.flags, wc.invalidated_rkey, k3);

	/* The revoked key no longer works. */
	rdma(TF_WR_RDMA_WRITE, 52, 0, 0, 64, k3);
	wc = wait1(A.cq);
	CHECK(wc.wr_id == 52 && wc.status != TF_WC_SUCCESS);
	CHECK(tf_qp_state(A.qp) == TF_QPS_ERR);
	tf_test_info("observe: WRITE through a window revoked by "
		     "SEND_WITH_INV: %s; requester QP -> error; responder %s",
		     tf_wc_status_str(wc.status), responder_state());
	connect_pair(7);

	/* Window beyond the MR: the bind fails at execution. */
	bind_mw(mw, 53, BUFSZ - 4096, 8192, TF_ACCESS_REMOTE_READ);
	wc = wait1(B.cq);
	CHECK(wc.wr_id == 53 && wc.status != TF_WC_SUCCESS);
	CHECK(wc.opcode == TF_WC_BIND_MW);
	tf_test_info("observe: BIND_MW past the end of the MR: %s, QP %s",
		     tf_wc_status_str(wc.status),
		     tf_qp_state(B.qp) == TF_QPS_ERR ? "error" : "not error");
	connect_pair(7);

	/* SEND_WITH_INV with a key that is no window of B. */
	wr.wr_id = 54;
	wr.invalidate_rkey = tf_mr_rkey(B.mr) ^ 0x5a5a00;
	post_recv(&B, 55, 40000, 64);
	post(A.qp, &wr);
	wc = wait1(A.cq);
	{
		struct tf_wc wb = wait1(B.cq);

		tf_test_info("observe: SEND_WITH_INV with a bad key: "
			     "requester %s, responder recv %s (wr %llu)",
			     tf_wc_status_str(wc.status),
			     tf_wc_status_str(wb.status),
			     (unsigned long long)wb.wr_id);
	}
	connect_pair(7);
	CHECK_OK(tf_mw_dealloc(mw));
}

/* Window semantics whose outcome the IB specification fixes but devices
 * may get wrong: print what this device does ("observe:"), and check only
 * the provider's own contract (EBUSY, keys). */
static void test_mw_observe(void)
{
	tf_mw_t *mw;
	tf_mr_t *mr2;
	struct tf_wc wc;
	uint32_t k;

	if (!(caps.flags & TF_CAP_MW_TYPE2))
		return;
	CHECK_OK(tf_mw_alloc(B.pd, &mw));

	/* Access inside the region but past the window. */
	bind_mw(mw, 80, 8192, 4096, TF_ACCESS_REMOTE_WRITE);
	k = tf_mw_rkey(mw);
	wait_ok(B.cq, 80, TF_WC_BIND_MW);
	/* A bound window keeps its region registered. */
	CHECK_ERR(tf_mr_dereg(B.mr), -EBUSY);
	rdma(TF_WR_RDMA_WRITE, 81, 0, 8192 + 4096, 64, k);
	wc = wait1(A.cq);
	tf_test_info("observe: WRITE inside the region, past the window: %s",
		     tf_wc_status_str(wc.status));
	if (wc.status != TF_WC_SUCCESS)
		connect_pair(7);

	/* Binding a type-2 window that is still bound. */
	bind_mw(mw, 82, 0, 4096, TF_ACCESS_REMOTE_WRITE);
	wc = wait1(B.cq);
	tf_test_info("observe: BIND_MW of a window that is still bound: %s",
		     tf_wc_status_str(wc.status));
	if (wc.status != TF_WC_SUCCESS)
		connect_pair(7);

	/* LOCAL_INV of a key that is no window. */
	{
		struct tf_send_wr iw = {.wr_id = 83,
					.opcode = TF_WR_LOCAL_INV,
					.send_flags = TF_SEND_SIGNALED,
					.invalidate_rkey =
						tf_mw_rkey(mw) ^ 0x100};

		post(B.qp, &iw);
		wc = wait1(B.cq);
		tf_test_info("observe: LOCAL_INV of an unknown key: %s, QP %s",
			     tf_wc_status_str(wc.status),
			     tf_qp_state(B.qp) == TF_QPS_ERR ? "error"
							     : "not error");
		if (wc.status != TF_WC_SUCCESS)
			connect_pair(7);
	}

	/* The window is still bound through B's QP, which connect_pair
	 * destroys: that invalidates it (tf_qp_destroy), so it binds again
	 * below; deallocating a bound window releases its region. */
	connect_pair(7);
	CHECK_OK(tf_mr_reg(B.pd, B.buf, 4096, TF_ACCESS_ALL, &mr2));
	bind_mw_mr(mw, mr2, 85, 0, 4096, TF_ACCESS_REMOTE_READ);
	wait_ok(B.cq, 85, TF_WC_BIND_MW);
	CHECK_ERR(tf_mr_dereg(mr2), -EBUSY);
	CHECK_OK(tf_mw_dealloc(mw));
	CHECK_OK(tf_mr_dereg(mr2));
}

static void test_errors(void)
{
	struct tf_sge sge = {(uintptr_t)A.buf, 64, tf_mr_lkey(A.mr)};
	struct tf_send_wr wr = {.wr_id = 60,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED};
	tf_context_stats_t st;
	struct tf_wc wc;

	/* Bad rkey on WRITE; on iWARP, where a WRITE completes once sent
	 * (no TF_CAP_REMOTE_ACK), on READ, which waits for the peer. */
	if (caps.flags & TF_CAP_REMOTE_ACK)
		rdma(TF_WR_RDMA_WRITE, 61, 0, 0, 64, tf_mr_rkey(B.mr) ^ 0x100);
	else
		rdma(TF_WR_RDMA_READ, 61, 0, 0, 64, tf_mr_rkey(B.mr) ^ 0x100);
	wc = wait1(A.cq);
	CHECK(wc.wr_id == 61 && wc.status != TF_WC_SUCCESS);
	CHECK(wc.qp == A.qp && tf_qp_state(A.qp) == TF_QPS_ERR);
	tf_test_info("observe: %s with a bad rkey: %s; responder %s",
		     caps.flags & TF_CAP_REMOTE_ACK ? "WRITE" : "READ",
		     tf_wc_status_str(wc.status), responder_state());
	/* Work posted in the error state is flushed. */
	post(A.qp, &wr);
	wc = wait1(A.cq);
	CHECK(wc.wr_id == 60 && wc.status == TF_WC_WR_FLUSH_ERR);
	CHECK(wc.opcode == TF_WC_SEND);
	connect_pair(7);

	/* READ out of the MR's range. */
	rdma(TF_WR_RDMA_READ, 62, 0, BUFSZ - 8, 64, tf_mr_rkey(B.mr));
	wc = wait1(A.cq);
	CHECK(wc.status != TF_WC_SUCCESS);
	tf_test_info("observe: READ past the end of the MR: %s",
		     tf_wc_status_str(wc.status));
	connect_pair(7);

	/* Receive too small. */
	post_recv(&B, 63, 0, 16);
	post(A.qp, &wr);
	wc = wait1(A.cq);
	{
		struct tf_wc wb = wait1(B.cq);

		tf_test_info("observe: SEND of 64 B into a 16 B receive: "
			     "requester %s, responder %s",
			     tf_wc_status_str(wc.status),
			     tf_wc_status_str(wb.status));
		CHECK(wb.status != TF_WC_SUCCESS);
	}
	connect_pair(0);

	/* RNR with rnr_retry 0: no receive posted.  iWARP has no RNR. */
	if (caps.flags & TF_CAP_REMOTE_ACK) {
		wr.wr_id = 64;
		post(A.qp, &wr);
		wc = wait1(A.cq);
		tf_test_info("observe: SEND without a receive, rnr_retry 0: "
			     "%s",
			     tf_wc_status_str(wc.status));
		CHECK(wc.status == TF_WC_RNR_RETRY_EXC_ERR);
		connect_pair(7);
	} else {
		tf_test_partial_skip("no TF_CAP_REMOTE_ACK: receiver not "
				     "ready");
	}

	/* set_error flushes posted receives. */
	post_recv(&B, 65, 0, 64);
	CHECK_OK(tf_qp_set_error(B.qp));
	CHECK(tf_qp_state(B.qp) == TF_QPS_ERR);
	wc = wait1(B.cq);
	CHECK(wc.wr_id == 65 && wc.status == TF_WC_WR_FLUSH_ERR);
	CHECK(wc.opcode == TF_WC_RECV && wc.qp == B.qp);
	connect_pair(7);

	CHECK_OK(tf_context_query_stats(A.ctx, &st));
	CHECK(st.bytes_out > 0 && st.qp_errors > 0);
}

static void test_misc(void)
{
	tf_qp_params_t qp = {.send_cq = A.cq, .recv_cq = A.cq};
	uint8_t blob[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob);
	struct tf_send_wr wr = {.opcode = TF_WR_SEND};
	tf_qp_t *q;
	int fd;

	/* Posting before connect. */
	CHECK_OK(tf_qp_create(A.pd, &qp, &q));
	CHECK_ERR(tf_post_send(q, &wr, NULL), -ENOTCONN);
	/* Blob checks. */
	CHECK_OK(tf_qp_get_addr(B.qp, blob, &len));
	blob[0] ^= 1;
	CHECK_ERR(tf_qp_connect(q, blob, len), -TF_EPEER);
	blob[0] ^= 1;
	blob[4] = 9;
	CHECK_ERR(tf_qp_connect(q, blob, len), -TF_EVERSION);
	blob[4] = 1;
	CHECK_ERR(tf_qp_connect(q, blob, len - 1), -TF_EWIRE);
	blob[8] = 0xff; /* QPN above 24 bits */
	CHECK_ERR(tf_qp_connect(q, blob, len), -TF_EWIRE);
	len = 8;
	CHECK_ERR(tf_qp_get_addr(B.qp, blob, &len), -ENOSPC);
	CHECK_OK(tf_qp_destroy(q));

	/* Completion fd: armed, a completion makes it readable. */
	fd = tf_cq_fd(A.cq);
	CHECK(fd >= 0);
	CHECK_OK(tf_cq_arm(A.cq));
	rdma(TF_WR_RDMA_WRITE, 70, 0, 0, 8, tf_mr_rkey(B.mr));
	{
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		CHECK(poll(&pfd, 1, WAIT_MS) == 1);
	}
	wait_ok(A.cq, 70, TF_WC_RDMA_WRITE);
	CHECK_OK(tf_cq_arm(A.cq));
}

/* Run a part and say how long it took (guest timings vary a lot). */
#define SECTION(_fn)                                                       \
	do {                                                               \
		struct timespec _t0, _t1;                                  \
                                                                           \
		clock_gettime(CLOCK_MONOTONIC, &_t0);                      \
		_fn();                                                     \
		clock_gettime(CLOCK_MONOTONIC, &_t1);                      \
		tf_test_info("%s: %.1f ms", #_fn,                          \
			     (double)(_t1.tv_sec - _t0.tv_sec) * 1e3 +     \
				     (double)(_t1.tv_nsec - _t0.tv_nsec) / \
					     1e6);                         \
	} while (0)

int main(void)
{
	const char *peer = getenv("TOLLFREE_TEST_PEER_DEVICE");
	const char *prov = getenv("TOLLFREE_PROVIDER");

	tf_test_begin("verbs_smoke");
	if (prov && strcmp(prov, "verbs") && strcmp(prov, "auto"))
		tf_test_skip("TOLLFREE_PROVIDER=%s, not verbs", prov);
	tf_test_dev_open(&A, "verbs", NULL, BUFSZ);
	tf_test_dev_open(&B, "verbs",
			 peer && peer[0] ? peer : tf_context_device(A.ctx),
			 BUFSZ);
	CHECK_OK(tf_context_query_caps(A.ctx, &caps));
	tf_test_info("devices %s -> %s, caps 0x%llx max_inline %u "
		     "max_sge %u transport %s",
		     tf_context_device(A.ctx), tf_context_device(B.ctx),
		     (unsigned long long)caps.flags, caps.max_inline_data,
		     caps.max_sge, caps.transport);
	connect_pair(7);
	SECTION(test_write_read);
	SECTION(test_send);
	SECTION(test_atomics);
	SECTION(test_mw);
	SECTION(test_mw_observe);
	SECTION(test_errors);
	SECTION(test_misc);
	tf_test_dev_close(&A);
	tf_test_dev_close(&B);
	return tf_test_end();
}
#endif
