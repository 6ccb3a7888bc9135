/* SPDX-License-Identifier: MIT */
/*
 * conf_teardown: registration pins memory and teardown gives all of it
 * back (VmLck + VmPin, which is where mlock-based and kernel-pinning
 * providers account it).
 *  - Registering 1 MiB of each kind raises locked+pinned memory by at
 *    least the registered bytes; deregistering returns it.
 *  - Overlapping registrations of the same pages: deregistering one keeps
 *    the others working (a peer write through the survivor lands), and
 *    after the last one everything is released.
 *  - Memory the application mlock()ed itself stays locked after it was
 *    registered and deregistered.
 *  - Five open/register/close cycles of a second context leak nothing.
 * tf_test_pair_end checks the final values against those at fork, on
 * both sides.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tf_test.h"

#define MB (1 << 20)

static long held(void)
{
	long l = tf_test_vmlck(), p = tf_test_vmpin();

	return (l < 0 ? 0 : l) + (p < 0 ? 0 : p);
}

/* Whether mlock() shows in VmLck here: not under the sanitizers, whose
 * common interceptors make mlock a no-op.  Where it does not, the checks
 * that read VmLck cannot be made; that is the build's doing, not the
 * provider's, so they are reported as not tried for the host's reason
 * (tf_test_partial_skip_host), which strict mode does not fail. */
static bool mlock_visible;

static bool probe_mlock(void)
{
	long pg = sysconf(_SC_PAGESIZE), l0 = tf_test_vmlck();
	void *m = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	bool seen = false;

	if (m == MAP_FAILED)
		return false;
	if (!mlock(m, (size_t)pg)) {
		seen = tf_test_vmlck() - l0 == pg;
		munlock(m, (size_t)pg);
	}
	munmap(m, (size_t)pg);
	return seen;
}

static void pinning(struct tf_pair *p)
{
	struct tf_test_buf b[TF_MEM_NKINDS];
	long before, during, after;

	/* Allocate first: tf_mem_alloc memory may be locked at allocation. */
	for (int k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_alloc(p, p->pd, (enum tf_test_mem)k, MB,
				  TF_TEST_NO_MR, &b[k]);
	before = held();
	for (int k = 0; k < TF_MEM_NKINDS; k++)
		CHECK_OK(tf_mr_reg(p->pd, b[k].addr, MB,
				   TF_ACCESS_LOCAL_WRITE |
					   TF_ACCESS_REMOTE_WRITE,
				   &b[k].mr));
	during = held();
	if (during == before && !mlock_visible) {
		/* The sanitizers make mlock a no-op: nothing to observe. */
		tf_test_partial_skip_host("pinning checks: locked memory not "
					  "observable here (VmLck does not "
					  "follow mlock)");
		goto out;
	}
	CHECKF(during - before >= TF_MEM_NKINDS * MB,
	       "registering %d MiB raised VmLck+VmPin by %ld bytes only",
	       TF_MEM_NKINDS, during - before);
	for (int k = 0; k < TF_MEM_NKINDS; k++) {
		CHECK_OK(tf_mr_dereg(b[k].mr));
		b[k].mr = NULL;
	}
	after = held();
	CHECKF(after == before,
	       "VmLck+VmPin %ld before registration, %ld after dereg", before,
	       after);
out:
	for (int k = 0; k < TF_MEM_NKINDS; k++) {
		if (b[k].mr)
			CHECK_OK(tf_mr_dereg(b[k].mr));
		b[k].mr = NULL;
	}
	for (int k = 0; k < TF_MEM_NKINDS; k++)
		tf_test_buf_free(&b[k]);
}

/* Three MRs over the same pages; B deregisters two, A writes through the
 * third, B checks the data, then deregisters the last. */
static void overlap(struct tf_pair *p)
{
	struct tf_test_buf b;
	tf_mr_t *mr2, *mr3;

	if (p->side == TF_SIDE_A) {
		struct tf_test_rbuf rb;
		struct tf_test_buf l;
		struct tf_sge sge;
		struct tf_send_wr wr = {.wr_id = 1,
					.sg_list = &sge,
					.num_sge = 1,
					.opcode = TF_WR_RDMA_WRITE,
					.send_flags = TF_SEND_SIGNALED};

		tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 8192,
				  TF_ACCESS_LOCAL_WRITE, &l);
		tf_test_fill(l.addr, l.len, 12);
		rb = tf_test_recv_rbuf(p);
		sge = (struct tf_sge){.addr = (uintptr_t)l.addr,
				      .length = 8192,
				      .lkey = tf_test_buf_lkey(&l)};
		wr.wr.rdma.remote_addr = rb.addr;
		wr.wr.rdma.rkey = rb.rkey;
		POST_SEND(p->q.qp, &wr);
		EXPECT_WC(p, p->q.scq, 1, TF_WC_SUCCESS, TF_WC_RDMA_WRITE,
			  NULL);
		tf_test_sync(p);
		tf_test_buf_free(&l);
		return;
	}
	tf_test_buf_alloc(p, p->pd, TF_MEM_MALLOC, 3 * 4096,
			  TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &b);
	/* Same pages, different starts and ends. */
	CHECK_OK(tf_mr_reg(p->pd, b.addr + 100, 2 * 4096,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &mr2));
	CHECK_OK(tf_mr_reg(p->pd, b.addr + 4096, 8192 + 8,
			   TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
			   &mr3));
	CHECK_OK(tf_mr_dereg(b.mr));
	b.mr = NULL;
	CHECK_OK(tf_mr_dereg(mr2));
	tf_test_send_rbuf(p, (uintptr_t)b.addr + 4096, 8192, tf_mr_rkey(mr3));
	tf_test_sync(p);
	CHECK_FILL(b.addr + 4096, 8192, 12);
	CHECK_OK(tf_mr_dereg(mr3));
	tf_test_buf_free(&b);
}

static void user_mlock(struct tf_pair *p)
{
	struct tf_test_buf b;
	tf_mr_t *mr;
	long l0, l1, l2;

	tf_test_buf_alloc(p, p->pd, TF_MEM_MMAP, 64 * 1024, TF_TEST_NO_MR, &b);
	l0 = tf_test_vmlck();
	if (mlock(b.addr, b.len)) {
		tf_test_partial_skip_host("user-lock case: mlock failed (%m)");
		tf_test_buf_free(&b);
		return;
	}
	l1 = tf_test_vmlck();
	if (l1 - l0 != (long)b.len) {
		tf_test_partial_skip_host("user-lock case: mlock of %zu bytes "
					  "changed VmLck by %ld (a sanitizer "
					  "makes mlock a no-op)",
					  b.len, l1 - l0);
		munlock(b.addr, b.len);
		tf_test_buf_free(&b);
		return;
	}
	CHECK_OK(tf_mr_reg(p->pd, b.addr, b.len, TF_ACCESS_LOCAL_WRITE, &mr));
	CHECK_OK(tf_mr_dereg(mr));
	l2 = tf_test_vmlck();
	CHECKF(l2 == l1,
	       "deregistration unlocked memory the application had locked: "
	       "VmLck %ld before registration, %ld after",
	       l1, l2);
	munlock(b.addr, b.len);
	tf_test_buf_free(&b);
}

static void cycles(void)
{
	long h0 = held();

	for (int i = 0; i < 5; i++) {
		tf_context_t *ctx;
		tf_pd_t *pd;
		tf_mr_t *mr;
		void *mem;

		CHECK_OK(tf_context_open(NULL, &ctx));
		CHECK_OK(tf_pd_create(ctx, &pd));
		CHECK_SUP(tf_mem_alloc(ctx, 256 * 1024, &mem));
		CHECK_OK(tf_mr_reg(
			pd, mem, 256 * 1024,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &mr));
		CHECK_OK(tf_mr_dereg(mr));
		tf_mem_free(ctx, mem, 256 * 1024);
		CHECK_OK(tf_pd_destroy(pd));
		tf_context_close(ctx);
		CHECKF(held() == h0, "cycle %d: VmLck+VmPin %ld, was %ld", i,
		       held(), h0);
	}
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_teardown");
	mlock_visible = probe_mlock();
	tf_test_pair_start(&p, NULL);
	pinning(&p);
	tf_test_sync(&p);
	overlap(&p);
	tf_test_sync(&p);
	user_mlock(&p);
	cycles();
	return tf_test_pair_end(&p);
}
