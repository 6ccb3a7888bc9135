/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_basic: the soft provider's shm transport and engine details
 * that the provider-neutral conformance suite cannot see.
 *  - The address blob: every field of a valid blob, corrupted, is refused
 *    with the documented error and leaves the QP in INIT.
 *  - One process, two QPs over shm: WRITE/READ/atomics into tf_mem_alloc
 *    memory (the initiator's shared mapping) and into malloc memory
 *    (process_vm_*); SENDs below and above TOLLFREE_SOFT_SHM_EAGER (the
 *    receiver pulls those); enough SENDs to wrap the ring many times;
 *    the translation-cache counters move (the model is off by default:
 *    this test turns it on).
 *  - Two processes: a window is revoked (LOCAL_INV) while the peer keeps
 *    writing through it; once LOCAL_INV completed no write lands any more,
 *    and the writer gets TF_WC_REM_ACCESS_ERR.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"

static tf_context_t *ctx;
static tf_pd_t *pd;
static tf_cq_t *cq;

static void open_ctx(void)
{
	tf_context_params_t cp = {
		.field_mask =
			TF_CONTEXT_PARAM_PROVIDER | TF_CONTEXT_PARAM_TRANSPORT,
		.provider = "soft",
		.transport = "shm",
	};

	CHECK_OK(tf_context_open(&cp, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_cq_create(ctx, NULL, &cq));
}

static void close_ctx(void)
{
	CHECK_OK(tf_cq_destroy(cq));
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
}

static tf_qp_t *new_qp(void)
{
	tf_qp_params_t qpp = {.send_cq = cq, .recv_cq = cq};
	tf_qp_t *qp;

	CHECK_OK(tf_qp_create(pd, &qpp, &qp));
	return qp;
}

static struct tf_wc wait_wc(uint64_t wr_id)
{
	struct tf_wc wc;
	int n;

	n = tf_cq_wait(cq, 1, &wc, 5000);
	CHECKF(n == 1, "no completion for wr_id %llu (%d)",
	       (unsigned long long)wr_id, n);
	CHECKF(wc.wr_id == wr_id, "completion of wr_id %llu, expected %llu",
	       (unsigned long long)wc.wr_id, (unsigned long long)wr_id);
	return wc;
}

/* ------------------------------------------------------------ blob */

static void blob_checks(void)
{
	tf_qp_t *a = new_qp(), *b = new_qp();
	uint8_t blob[TF_QP_ADDR_MAX], bad[TF_QP_ADDR_MAX];
	size_t len = sizeof(blob), small = 8;

	CHECK_ERR(tf_qp_get_addr(a, blob, &small), -ENOSPC);
	CHECK_OK(tf_qp_get_addr(a, blob, &len));
	CHECK(len == 80);
	tf_test_tolerate_log(true); /* every refusal is logged */
	/* Magic: not a soft blob. */
	memcpy(bad, blob, len);
	bad[0] ^= 1;
	CHECK_ERR(tf_qp_connect(b, bad, len), -TF_EPEER);
	/* Version. */
	memcpy(bad, blob, len);
	bad[4] = 2;
	CHECK_ERR(tf_qp_connect(b, bad, len), -TF_EVERSION);
	/* Length field and real length. */
	CHECK_ERR(tf_qp_connect(b, blob, len - 1), -TF_EWIRE);
	memcpy(bad, blob, len);
	bad[6] = 81;
	CHECK_ERR(tf_qp_connect(b, bad, len), -TF_EWIRE);
	/* Unknown flag, no part at all, zero QPN/PD/nonce, bad access. */
	{
		static const struct {
			int off;
			uint8_t val;
		} cases[] = {
			{8, 0x04}, {8, 0},     {12, 0}, {13, 0}, {14, 0},
			{15, 0},   {20, 0x80}, {61, 1}, {60, 4}, {63, 1},
		};

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			memcpy(bad, blob, len);
			if (cases[i].off >= 12 && cases[i].off <= 15)
				memset(bad + 12, 0, 4);
			else
				bad[cases[i].off] = cases[i].val;
			CHECKF(tf_qp_connect(b, bad, len) == -TF_EWIRE,
			       "corrupt byte %d accepted", cases[i].off);
		}
	}
	/* shm part present but pid 0. */
	memcpy(bad, blob, len);
	memset(bad + 48, 0, 4);
	CHECK_ERR(tf_qp_connect(b, bad, len), -TF_EWIRE);
	CHECK(tf_qp_state(b) == TF_QPS_INIT);
	tf_test_tolerate_log(false);
	/* The valid one still works after all that. */
	CHECK_OK(tf_qp_connect(b, blob, len));
	CHECK(tf_qp_state(b) == TF_QPS_RTS);
	CHECK_ERR(tf_qp_connect(b, blob, len), -EINVAL);
	CHECK_OK(tf_qp_destroy(a));
	CHECK_OK(tf_qp_destroy(b));
}

/* ------------------------------------------------------------ loopback */

static void one_sided(tf_qp_t *a, uint8_t *dst, tf_mr_t *dmr, uint8_t *src,
		      tf_mr_t *smr, size_t n)
{
	struct tf_sge sge = {(uintptr_t)src, (uint32_t)n, tf_mr_lkey(smr)};
	struct tf_send_wr wr = {.wr_id = 1,
				.sg_list = &sge,
				.num_sge = 1,
				.opcode = TF_WR_RDMA_WRITE,
				.send_flags = TF_SEND_SIGNALED,
				.wr.rdma = {(uintptr_t)dst, tf_mr_rkey(dmr)}};
	struct tf_wc wc;
	uint64_t v;

	tf_test_fill(src, n, 7);
	memset(dst, 0, n);
	CHECK_OK(tf_post_send(a, &wr, NULL));
	wc = wait_wc(1);
	CHECK(wc.status == TF_WC_SUCCESS && wc.opcode == TF_WC_RDMA_WRITE);
	CHECK_FILL(dst, n, 7);

	memset(src, 0, n);
	wr.wr_id = 2;
	wr.opcode = TF_WR_RDMA_READ;
	CHECK_OK(tf_post_send(a, &wr, NULL));
	wc = wait_wc(2);
	CHECK(wc.status == TF_WC_SUCCESS && wc.opcode == TF_WC_RDMA_READ);
	CHECK_FILL(src, n, 7);

	dst += (8 - ((uintptr_t)dst & 7)) & 7; /* atomics are aligned */
	memset(dst, 0, 8);
	sge.length = 8;
	wr.wr_id = 3;
	wr.opcode = TF_WR_ATOMIC_FETCH_ADD;
	wr.wr.atomic.remote_addr = (uintptr_t)dst;
	wr.wr.atomic.rkey = tf_mr_rkey(dmr);
	wr.wr.atomic.compare_add = 5;
	CHECK_OK(tf_post_send(a, &wr, NULL));
	CHECK(wait_wc(3).status == TF_WC_SUCCESS);
	wr.wr_id = 4;
	wr.opcode = TF_WR_ATOMIC_CMP_SWP;
	wr.wr.atomic.compare_add = 5;
	wr.wr.atomic.swap = 99;
	CHECK_OK(tf_post_send(a, &wr, NULL));
	CHECK(wait_wc(4).status == TF_WC_SUCCESS);
	memcpy(&v, src, 8);
	CHECKF(v == 5, "compare-swap returned %llu", (unsigned long long)v);
	memcpy(&v, dst, 8);
	CHECKF(v == 99, "target holds %llu after cmp-swap",
	       (unsigned long long)v);
}

static void sends(tf_qp_t *a, tf_qp_t *b, uint8_t *sbuf, tf_mr_t *smr,
		  uint8_t *rbuf, tf_mr_t *rmr, size_t n, int count)
{
	for (int i = 0; i < count; i++) {
		struct tf_sge rs = {(uintptr_t)rbuf, (uint32_t)n,
				    tf_mr_lkey(rmr)};
		struct tf_recv_wr rwr = {
			.wr_id = 100, .sg_list = &rs, .num_sge = 1};
		struct tf_sge ss = {(uintptr_t)sbuf, (uint32_t)n,
				    tf_mr_lkey(smr)};
		struct tf_send_wr swr = {.wr_id = 200,
					 .sg_list = &ss,
					 .num_sge = 1,
					 .opcode = TF_WR_SEND_WITH_IMM,
					 .imm_data = (uint32_t)i,
					 .send_flags = TF_SEND_SIGNALED};
		struct tf_wc w[2];
		int got = 0;

		tf_test_fill(sbuf, n, (uint32_t)i);
		CHECK_OK(tf_post_recv(b, &rwr, NULL));
		CHECK_OK(tf_post_send(a, &swr, NULL));
		while (got < 2) {
			int r = tf_cq_wait(cq, 2 - got, w + got, 5000);

			CHECKF(r > 0, "send %d of %zu bytes: no completion", i,
			       n);
			got += r;
		}
		for (int k = 0; k < 2; k++) {
			CHECKF(w[k].status == TF_WC_SUCCESS,
			       "send %d: status %s", i,
			       tf_wc_status_str(w[k].status));
			if (w[k].opcode == TF_WC_RECV) {
				CHECK(w[k].byte_len == n);
				CHECK(w[k].imm_data == (uint32_t)i);
				CHECK(w[k].flags & TF_WC_WITH_IMM);
			}
		}
		CHECK_FILL(rbuf, n, (uint32_t)i);
	}
}

static void loopback(void)
{
	size_t big = 256 * 1024;
	tf_qp_t *a = new_qp(), *b = new_qp();
	uint8_t *m1, *m2, *p1, *p2;
	tf_mr_t *r1, *r2, *r3, *r4;
	unsigned acc = TF_ACCESS_ALL & ~(unsigned)TF_ACCESS_MW_BIND;
	tf_context_stats_t s0, s1;

	tf_test_qp_connect_local(a, b);
	CHECK_OK(tf_mem_alloc(ctx, big, (void **)&m1));
	CHECK_OK(tf_mem_alloc(ctx, big, (void **)&m2));
	p1 = malloc(big + 100);
	p2 = malloc(big + 100);
	CHECK(p1 && p2);
	CHECK_OK(tf_mr_reg(pd, m1, big, acc, &r1));
	CHECK_OK(tf_mr_reg(pd, m2, big, acc, &r2));
	CHECK_OK(tf_mr_reg(pd, p1 + 3, big, acc, &r3));
	CHECK_OK(tf_mr_reg(pd, p2 + 5, big, acc, &r4));
	CHECK_OK(tf_context_query_stats(ctx, &s0));

	/* Shared mapping, then process_vm_* (malloc memory), both ways. */
	one_sided(a, m2, r2, m1, r1, 4096 + 17);
	one_sided(a, p2 + 5, r4, p1 + 3, r3, 4096 + 17);
	one_sided(a, m2 + 8, r2, p1 + 3, r3, 1000);
	one_sided(a, p2 + 5, r4, m1, r1, 1000);

	/* Eager and pulled SENDs; 300 x 4 KiB wraps the 256 KiB ring. */
	sends(a, b, m1, r1, m2, r2, 100, 10);
	sends(a, b, m1, r1, m2, r2, 4096, 300);
	sends(a, b, p1 + 3, r3, p2 + 5, r4, big, 3);
	sends(b, a, m2, r2, p1 + 3, r3, 64 * 1024, 3);

	CHECK_OK(tf_context_query_stats(ctx, &s1));
	CHECK(s1.xlate_hits > s0.xlate_hits);
	CHECK(s1.bytes_out > s0.bytes_out);

	CHECK_OK(tf_qp_destroy(a));
	CHECK_OK(tf_qp_destroy(b));
	CHECK_OK(tf_mr_dereg(r1));
	CHECK_OK(tf_mr_dereg(r2));
	CHECK_OK(tf_mr_dereg(r3));
	CHECK_OK(tf_mr_dereg(r4));
	tf_mem_free(ctx, m1, big);
	tf_mem_free(ctx, m2, big);
	free(p1);
	free(p2);
}

/* Responder-side errors, as rxe reports them: a SEND_WITH_INV naming a
 * key that is no window bound to the receiving QP (class J: the receive
 * fails with REM_INV_REQ_ERR, the sender is ACKed), and receive buffers
 * whose lkey is bad (class A: LOC_QP_OP_ERR at the receiver, REM_OP_ERR at
 * the sender).  Both move the receiving QP to error. */
static void responder_errors(void)
{
	uint8_t *m;
	tf_mr_t *mr;

	CHECK_OK(tf_mem_alloc(ctx, 4096, (void **)&m));
	CHECK_OK(tf_mr_reg(pd, m, 4096, TF_ACCESS_LOCAL_WRITE, &mr));
	tf_test_tolerate_log(true);
	for (int c = 0; c < 2; c++) {
		tf_qp_t *a = new_qp(), *b = new_qp();
		struct tf_sge rs = {(uintptr_t)m, 64,
				    c ? tf_mr_lkey(mr) ^ 1 : tf_mr_lkey(mr)};
		struct tf_recv_wr rwr = {
			.wr_id = 10, .sg_list = &rs, .num_sge = 1};
		struct tf_send_wr swr = {.wr_id = 20,
					 .opcode = c ? TF_WR_SEND
						     : TF_WR_SEND_WITH_INV,
					 .invalidate_rkey = tf_mr_rkey(mr),
					 .send_flags = TF_SEND_SIGNALED};
		struct tf_wc w[2];
		int got = 0;

		tf_test_qp_connect_local(a, b);
		CHECK_OK(tf_post_recv(b, &rwr, NULL));
		CHECK_OK(tf_post_send(a, &swr, NULL));
		while (got < 2) {
			int r = tf_cq_wait(cq, 2 - got, w + got, 5000);

			CHECK(r > 0);
			got += r;
		}
		for (int k = 0; k < 2; k++) {
			if (w[k].wr_id == 10)
				CHECKF(w[k].status ==
					       (c ? TF_WC_LOC_QP_OP_ERR
						  : TF_WC_REM_INV_REQ_ERR),
				       "case %d: receive %s", c,
				       tf_wc_status_str(w[k].status));
			else
				CHECKF(w[k].status == (c ? TF_WC_REM_OP_ERR
							 : TF_WC_SUCCESS),
				       "case %d: send %s", c,
				       tf_wc_status_str(w[k].status));
		}
		CHECK(tf_qp_state(b) == TF_QPS_ERR);
		CHECK_OK(tf_qp_destroy(a));
		CHECK_OK(tf_qp_destroy(b));
	}
	tf_test_tolerate_log(false);
	CHECK_OK(tf_mr_dereg(mr));
	tf_mem_free(ctx, m, 4096);
}

/* ------------------------------------------------------------ revocation */

#define WIN 4096

struct xaddr {
	uint8_t blob[TF_QP_ADDR_MAX];
	uint64_t len, addr;
	uint32_t rkey;
};

static void xchg(int s, struct xaddr *me, struct xaddr *peer)
{
	size_t got = 0;

	CHECK(write(s, me, sizeof(*me)) == (ssize_t)sizeof(*me));
	while (got < sizeof(*peer)) {
		ssize_t r = read(s, (char *)peer + got, sizeof(*peer) - got);

		CHECKF(r > 0, "peer closed the socket");
		got += (size_t)r;
	}
}

/* Child: write through the window until it fails. */
static int writer(int s)
{
	struct xaddr me = {0}, peer;
	size_t len = sizeof(me.blob);
	tf_qp_t *qp;
	uint8_t *src;
	tf_mr_t *mr;
	char go;
	int n = 0;

	open_ctx();
	qp = new_qp();
	CHECK_OK(tf_qp_get_addr(qp, me.blob, &len));
	me.len = len;
	CHECK_OK(tf_mem_alloc(ctx, WIN, (void **)&src));
	memset(src, 0xab, WIN);
	CHECK_OK(tf_mr_reg(pd, src, WIN, TF_ACCESS_LOCAL_WRITE, &mr));
	xchg(s, &me, &peer);
	CHECK_OK(tf_qp_connect(qp, peer.blob, peer.len));
	xchg(s, &me, &peer); /* the window's address and key */
	CHECK(read(s, &go, 1) == 1);
	for (;;) {
		struct tf_sge sge = {(uintptr_t)src, WIN, tf_mr_lkey(mr)};
		struct tf_send_wr wr = {.wr_id = (uint64_t)n,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE,
					.send_flags = TF_SEND_SIGNALED,
					.wr.rdma = {peer.addr, peer.rkey}};
		struct tf_wc wc;

		CHECK_OK(tf_post_send(qp, &wr, NULL));
		wc = wait_wc((uint64_t)n);
		n++;
		if (wc.status == TF_WC_REM_ACCESS_ERR)
			break;
		CHECKF(wc.status == TF_WC_SUCCESS, "write: %s",
		       tf_wc_status_str(wc.status));
	}
	CHECK(write(s, &n, sizeof(n)) == sizeof(n));
	CHECK(read(s, &go, 1) == 1);
	CHECK_OK(tf_qp_destroy(qp));
	CHECK_OK(tf_mr_dereg(mr));
	tf_mem_free(ctx, src, WIN);
	close_ctx();
	return 0;
}

/* @shared: the window is over tf_mem_alloc memory (the writer stores
 * through its mapping), else over malloc memory (process_vm_writev). */
static void revocation(bool shared)
{
	int sv[2], n, status;
	pid_t pid;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		close(sv[0]);
		/* _exit: the parent's objects copied by fork are not leaks. */
		_exit(writer(sv[1]));
	}
	close(sv[1]);
	{
		struct xaddr me = {0}, peer;
		size_t len = sizeof(me.blob);
		tf_qp_t *qp = new_qp();
		tf_mw_t *mw;
		uint8_t *dst, snap[WIN];
		tf_mr_t *mr;
		struct tf_send_wr bw = {
			.wr_id = 1,
			.opcode = TF_WR_BIND_MW,
			.send_flags = TF_SEND_SIGNALED,
		};
		struct tf_send_wr iw = {.wr_id = 2,
					.opcode = TF_WR_LOCAL_INV,
					.send_flags = TF_SEND_SIGNALED};

		if (shared)
			CHECK_OK(tf_mem_alloc(ctx, 2 * WIN, (void **)&dst));
		else
			CHECK(posix_memalign((void **)&dst, WIN, 2 * WIN) == 0);
		memset(dst, 0, 2 * WIN);
		CHECK_OK(tf_mr_reg(pd, dst, 2 * WIN,
				   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_MW_BIND,
				   &mr));
		CHECK_OK(tf_mw_alloc(pd, &mw));
		CHECK_OK(tf_qp_get_addr(qp, me.blob, &len));
		me.len = len;
		bw.wr.bind_mw.mw = mw;
		bw.wr.bind_mw.mr = mr;
		bw.wr.bind_mw.addr = (uintptr_t)dst;
		bw.wr.bind_mw.length = WIN;
		bw.wr.bind_mw.access = TF_ACCESS_REMOTE_WRITE;
		xchg(sv[0], &me, &peer);
		CHECK_OK(tf_qp_connect(qp, peer.blob, peer.len));
		CHECK_OK(tf_post_send(qp, &bw, NULL));
		CHECK(wait_wc(1).status == TF_WC_SUCCESS);
		me.addr = (uintptr_t)dst;
		me.rkey = tf_mw_rkey(mw);
		xchg(sv[0], &me, &peer);
		CHECK(write(sv[0], "g", 1) == 1);
		/* Let some writes land, then revoke under fire. */
		while (dst[WIN - 1] != 0xab)
			tf_context_progress(ctx);
		memset(dst, 0, WIN);
		iw.invalidate_rkey = me.rkey;
		CHECK_OK(tf_post_send(qp, &iw, NULL));
		CHECK(wait_wc(2).status == TF_WC_SUCCESS);
		memcpy(snap, dst, WIN);
		CHECK(read(sv[0], &n, sizeof(n)) == sizeof(n));
		usleep(20000);
		CHECKF(!memcmp(snap, dst, WIN),
		       "a write landed after LOCAL_INV completed");
		CHECK(n >= 2);
		CHECK(write(sv[0], "e", 1) == 1);
		CHECK(waitpid(pid, &status, 0) == pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		CHECK_OK(tf_qp_destroy(qp));
		CHECK_OK(tf_mw_dealloc(mw));
		CHECK_OK(tf_mr_dereg(mr));
		if (shared)
			tf_mem_free(ctx, dst, 2 * WIN);
		else
			free(dst);
	}
	close(sv[0]);
}

int main(void)
{
	tf_test_begin("soft_shm_basic");
	/* The translation-cache model, off by default, so that loopback()
	 * sees its counters move through the shm paths. */
	setenv("TOLLFREE_SOFT_XLATE_ENTRIES", "1024", 1);
	open_ctx();
	blob_checks();
	loopback();
	responder_errors();
	revocation(true);
	revocation(false);
	close_ctx();
	return tf_test_end();
}
