/* SPDX-License-Identifier: MIT */
/*
 * soft_reg: what registration on the soft provider does underneath.
 *  - It pins: VmLck grows by the pinned pages and returns after dereg;
 *    overlapping registrations keep shared pages locked until the last
 *    one goes.
 *  - It reads physical frames (nonzero with CAP_SYS_ADMIN) into the
 *    region's translation array.
 *  - Keys are random and distinct; TOLLFREE_SOFT_MAX_MR bounds them
 *    (-ENOSPC).
 *  - The translation-cache model: off by default (its counters stay 0);
 *    on, registration inserts translations and evicts older ones once
 *    TOLLFREE_SOFT_XLATE_ENTRIES are resident.
 *  - When mlock is refused (no CAP_IPC_LOCK, small RLIMIT_MEMLOCK), the
 *    registration fails with -ENOMEM or -EAGAIN and leaks nothing.
 * Each case runs in a child so that it can set its own environment.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "soft_int.h"
#include "tf_test_unit.h"

#define PG 4096

/* The sanitizers turn mlock into a no-op: VmLck cannot be checked. */
#define NO_MLOCK TF_TEST_SANITIZER

static tf_context_t *ctx;
static tf_pd_t *pd;

static void open_soft(void)
{
	tf_context_params_t cp = {.field_mask = TF_CONTEXT_PARAM_PROVIDER,
				  .provider = "soft"};

	CHECK_OK(tf_context_open(&cp, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
}

static void close_soft(void)
{
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
}

static void *map_pages(size_t n)
{
	void *p = mmap(NULL, n * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	return p;
}

static void case_pin(void)
{
	uint8_t *p = map_pages(8);
	long l0, l1, l2, l3;
	tf_mr_t *a, *b;
	struct soft_mr *sm;
	size_t nz = 0;

	open_soft();
	l0 = tf_test_vmlck();
	/* a: pages 0..3, b: pages 2..7 (partial first and last pages). */
	CHECK_OK(tf_mr_reg(pd, p + 10, 4 * PG - 20, TF_ACCESS_LOCAL_WRITE, &a));
	l1 = tf_test_vmlck();
	CHECKF(l1 - l0 == 4 * PG, "VmLck grew by %ld, expected %d", l1 - l0,
	       4 * PG);
	CHECK_OK(tf_mr_reg(pd, p + 2 * PG + 1, 6 * PG - 2,
			   TF_ACCESS_LOCAL_WRITE, &b));
	l2 = tf_test_vmlck();
	CHECKF(l2 - l0 == 8 * PG, "VmLck grew by %ld, expected %d", l2 - l0,
	       8 * PG);
	sm = (struct soft_mr *)b;
	CHECK(sm->npages == 6);
	for (size_t i = 0; i < sm->npages; i++)
		nz += sm->pfns[i] != 0;
	if (geteuid() == 0)
		CHECKF(nz == sm->npages, "%zu of %zu frames read", nz,
		       sm->npages);
	CHECK(tf_mr_lkey(a) != tf_mr_lkey(b));
	CHECK_OK(tf_mr_dereg(a));
	l3 = tf_test_vmlck();
	/* Pages 2 and 3 are still b's. */
	CHECKF(l3 - l0 == 6 * PG,
	       "after the first dereg VmLck is +%ld, "
	       "expected +%d",
	       l3 - l0, 6 * PG);
	CHECK_OK(tf_mr_dereg(b));
	CHECKF(tf_test_vmlck() == l0, "VmLck %ld after dereg, %ld before",
	       tf_test_vmlck(), l0);
	close_soft();
	munmap(p, 8 * PG);
}

static void case_keys(void)
{
	uint8_t *p = map_pages(1);
	tf_mr_t *mr[8];
	tf_mw_t *mw;

	setenv("TOLLFREE_SOFT_MAX_MR", "8", 1);
	open_soft();
	for (int i = 0; i < 8; i++) {
		CHECK_OK(tf_mr_reg(pd, p, PG, TF_ACCESS_LOCAL_WRITE, &mr[i]));
		for (int j = 0; j < i; j++)
			CHECK(tf_mr_lkey(mr[i]) != tf_mr_lkey(mr[j]));
	}
	tf_test_expect_log(1);
	CHECK_ERR(tf_mr_reg(pd, p, PG, TF_ACCESS_LOCAL_WRITE, &mr[0]), -ENOSPC);
	CHECK_OK(tf_mr_dereg(mr[7]));
	CHECK_OK(tf_mr_reg(pd, p, PG, TF_ACCESS_LOCAL_WRITE, &mr[7]));
	/* Keys are not a counter: consecutive ones are not adjacent. */
	{
		int close = 0;

		for (int i = 1; i < 8; i++)
			close += (tf_mr_lkey(mr[i]) - tf_mr_lkey(mr[i - 1]) +
				  16u) < 32u;
		CHECKF(close < 3, "%d of 7 consecutive keys within 16", close);
	}
	CHECK_OK(tf_mw_alloc(pd, &mw));
	for (int i = 0; i < 8; i++)
		CHECK_OK(tf_mr_dereg(mr[i]));
	CHECK_OK(tf_mw_dealloc(mw));
	close_soft();
	munmap(p, PG);
}

/* Off unless configured: registration and transfers leave the counters
 * at 0 (the model costs nothing then). */
static void case_xlate_off(void)
{
	uint8_t *p = map_pages(64);
	tf_context_stats_t st;
	tf_mr_t *a;

	unsetenv("TOLLFREE_SOFT_XLATE_ENTRIES");
	unsetenv("TOLLFREE_SOFT_XLATE_MISS_NS");
	open_soft();
	CHECK_OK(tf_mr_reg(pd, p, 64 * PG, TF_ACCESS_LOCAL_WRITE, &a));
	CHECK_OK(tf_mr_dereg(a));
	CHECK_OK(tf_context_query_stats(ctx, &st));
	CHECKF(!st.xlate_hits && !st.xlate_misses && !st.xlate_evictions,
	       "model off, yet %llu hits, %llu misses, %llu evictions",
	       (unsigned long long)st.xlate_hits,
	       (unsigned long long)st.xlate_misses,
	       (unsigned long long)st.xlate_evictions);
	CHECK(!((struct soft_ctx *)ctx)->xlate.on);
	close_soft();
	munmap(p, 64 * PG);
}

static void case_xlate(void)
{
	uint8_t *p = map_pages(64);
	tf_context_stats_t s0, s1;
	tf_mr_t *a, *b;

	setenv("TOLLFREE_SOFT_XLATE_ENTRIES", "16", 1);
	open_soft();
	CHECK_OK(tf_mr_reg(pd, p, 16 * PG, TF_ACCESS_LOCAL_WRITE, &a));
	CHECK_OK(tf_context_query_stats(ctx, &s0));
	CHECK(s0.xlate_evictions == 0);
	CHECK_OK(
		tf_mr_reg(pd, p + 16 * PG, 48 * PG, TF_ACCESS_LOCAL_WRITE, &b));
	CHECK_OK(tf_context_query_stats(ctx, &s1));
	CHECKF(s1.xlate_evictions == 48, "%llu evictions, expected 48",
	       (unsigned long long)s1.xlate_evictions);
	CHECK_OK(tf_mr_dereg(a));
	CHECK_OK(tf_mr_dereg(b));
	close_soft();
	munmap(p, 64 * PG);
}

/* Drop CAP_IPC_LOCK and cap RLIMIT_MEMLOCK, so that mlock of more than
 * the limit fails. */
static bool limit_locking(rlim_t bytes)
{
	struct rlimit rl = {bytes, bytes};

	return !tf_test_drop_ipc_lock() && setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
}

static void case_mlock_fail(void)
{
	uint8_t *p = map_pages(256);
	tf_context_stats_t s;
	long l0;
	tf_mr_t *mr;
	int r;

	open_soft();
	if (!limit_locking(64 * 1024)) {
		tf_test_info("cannot limit locking: mlock failure not tried");
		close_soft();
		return;
	}
	l0 = tf_test_vmlck();
	tf_test_tolerate_log(true);
	r = tf_mr_reg(pd, p, 256 * PG, TF_ACCESS_LOCAL_WRITE, &mr);
	tf_test_tolerate_log(false);
	CHECKF(r == -ENOMEM || r == -EAGAIN,
	       "mr_reg beyond the limit = %d (%s)", r, tf_strerror(r));
	CHECKF(tf_test_vmlck() == l0,
	       "VmLck %ld after the failure, %ld "
	       "before",
	       tf_test_vmlck(), l0);
	CHECK_OK(tf_context_query_stats(ctx, &s));
	CHECK(s.mr_reg_fail == 1);
	/* Within the limit it still works, and everything comes back. */
	CHECK_OK(tf_mr_reg(pd, p, 4 * PG, TF_ACCESS_LOCAL_WRITE, &mr));
	CHECK_OK(tf_mr_dereg(mr));
	CHECK(tf_test_vmlck() == l0);
	close_soft();
	munmap(p, 256 * PG);
}

static void run(const char *name, void (*fn)(void))
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (!pid) {
		fn();
		_exit(tf_test_end());
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "case %s failed",
	       name);
}

int main(void)
{
	tf_test_begin("soft_reg");
#if NO_MLOCK
	tf_test_partial_skip("sanitizer build: mlock is a no-op, pinning "
			     "cases not tried");
#endif
	if (!NO_MLOCK) {
		run("pin", case_pin);
		run("mlock_fail", case_mlock_fail);
	}
	run("keys", case_keys);
	run("xlate_off", case_xlate_off);
	run("xlate", case_xlate);
	return tf_test_end();
}
