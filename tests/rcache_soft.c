/* SPDX-License-Identifier: MIT */
/*
 * rcache_soft.c - the registration cache over a real provider (soft by
 * default): munmap, mmap(MAP_FIXED), free and madvise(DONTNEED) over a
 * cached range followed by reuse of the same virtual address must miss,
 * with the userfaultfd monitor and with explicit invalidation; a random
 * workload never pins more than the bound (VmLck, as the kernel counts
 * it); destroy leaves nothing registered.
 */
#include <errno.h>
#include <malloc.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tf_test.h"

static long page;
static tf_context_t *ctx;
static tf_pd_t *pd;

static tf_rcache_stats_t stats(tf_rcache_t *rc)
{
	tf_rcache_stats_t s;

	CHECK_OK(tf_rcache_query_stats(rc, &s));
	return s;
}

static uint64_t ctx_pinned(void)
{
	tf_context_stats_t s;

	CHECK_OK(tf_context_query_stats(ctx, &s));
	return s.pinned_bytes;
}

enum op { OP_MUNMAP, OP_MAP_FIXED, OP_FREE, OP_DONTNEED };
static const char *const op_names[] = {"munmap", "mmap(MAP_FIXED)", "free",
				       "madvise(DONTNEED)"};

#define RW (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)

/* free() behind a call, so that the compiler lets the test look at the
 * address afterwards (it only compares and registers it). */
static void __attribute__((noinline)) free_block(void *p)
{
	free(p);
}

/* Cache a range, replace the memory behind it by @op, get it again. */
static void reuse_case(tf_rcache_t *rc, enum op op, bool explicit_inval)
{
	size_t len = op == OP_FREE ? 1 << 20 : 16 * (size_t)page;
	tf_rcache_stats_t s0, s1;
	tf_rcache_reg_t *r;
	char *buf, *q;
	int ret;

	buf = op == OP_FREE ? malloc(len)
			    : mmap(NULL, len, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf && buf != MAP_FAILED);
	memset(buf, 1, len);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(tf_mr_addr(tf_rcache_reg_mr(r)) == buf);
	CHECK(tf_rcache_reg_lkey(r) == tf_mr_lkey(tf_rcache_reg_mr(r)));
	CHECK_OK(tf_rcache_put(rc, r));
	s0 = stats(rc);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(stats(rc).hits == s0.hits + 1);
	if (explicit_inval)
		CHECK(tf_rcache_invalidate(rc, buf, len) >= 1);
	switch (op) {
	case OP_MUNMAP:
		CHECK(!munmap(buf, len));
		q = mmap(buf, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
			 0);
		if (q != buf) {
			/* Taken by another mapping meanwhile (a sanitizer's
			 * runtime can): the unmap must still be seen. */
			tf_test_info("munmap: address reused elsewhere");
			if (q != MAP_FAILED)
				munmap(q, len);
			CHECK(tf_rcache_invalidate(rc, &s0, 1) == 0);
			CHECK(stats(rc).invalidations > s0.invalidations ||
			      explicit_inval);
			return;
		}
		break;
	case OP_MAP_FIXED:
		q = mmap(buf, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		CHECK(q == buf);
		break;
	case OP_FREE:
		free_block(buf);
		if (!msync((void *)((uintptr_t)buf & ~(uintptr_t)(page - 1)),
			   (size_t)page, MS_ASYNC)) {
			/* Not glibc's malloc (a sanitizer's keeps freed
			 * blocks mapped): nothing to invalidate. */
			tf_test_info("free: the block stays mapped here");
			CHECK(tf_rcache_invalidate(rc, buf, len) >= 0);
			return;
		}
		q = malloc(len);
		CHECK(q);
		if (q != buf)
			tf_test_info("free: the block came back elsewhere");
		break;
	case OP_DONTNEED:
	default:
		ret = madvise(buf, len, MADV_DONTNEED);
		if (ret && errno == EINVAL) {
			/* The provider mlocks registered pages, and the
			 * kernel refuses DONTNEED on locked memory: the
			 * pages cannot change, so a hit stays correct.
			 * rcache_unit covers DONTNEED without mlock. */
			tf_test_info("madvise(DONTNEED): refused on locked "
				     "pages (EINVAL), nothing can go stale");
			if (!explicit_inval) {
				CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
				CHECK_OK(tf_rcache_put(rc, r));
			}
			CHECK(!munmap(buf, len));
			return;
		}
		CHECK(!ret);
		q = buf;
		break;
	}
	memset(q, 2, len);
	s0 = stats(rc);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	s1 = stats(rc);
	CHECKF(s1.misses == s0.misses + 1,
	       "%s%s: the old registration was returned", op_names[op],
	       explicit_inval ? " (explicit)" : "");
	CHECK(s1.invalidations >= 1);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(tf_rcache_invalidate(rc, q, len) >= 0);
	if (op == OP_FREE)
		free(q);
	else
		CHECK(!munmap(q, len));
}

static void test_reuse(int monitor)
{
	tf_rcache_params_t p = {.field_mask = TF_RCACHE_PARAM_MONITOR,
				.monitor = monitor};
	tf_rcache_t *rc;
	int ret;

	ret = tf_rcache_create(pd, &p, &rc);
	if (ret == -ENOTSUP) {
		tf_test_partial_skip("userfaultfd monitor: not usable here");
		return;
	}
	CHECK_OK(ret);
	for (int op = OP_MUNMAP; op <= OP_DONTNEED; op++)
		reuse_case(rc, (enum op)op, monitor == TF_RCACHE_MONITOR_NONE);
	tf_rcache_destroy(rc);
	CHECK(ctx_pinned() == 0);
}

static uint64_t rnd_state = 0x2545F4914F6CDD1Dull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void test_vmlck_bound(void)
{
	const uint64_t max_bytes = 64 * (uint64_t)page;
	tf_rcache_params_t p = {.field_mask = TF_RCACHE_PARAM_MAX_BYTES |
					      TF_RCACHE_PARAM_MAX_REGIONS,
				.max_bytes = max_bytes,
				.max_regions = 16};
	size_t len = 512 * (size_t)page;
	tf_rcache_reg_t *held[4] = {0};
	long base, peak = 0;
	tf_rcache_t *rc;
	char *buf;

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 3, len);
	CHECK_OK(tf_rcache_create(pd, &p, &rc));
	base = tf_test_vmlck();
	CHECK(base >= 0);
	{
		tf_rcache_reg_t *r;

		CHECK_OK(tf_rcache_get(rc, buf, 4 * page, RW, &r));
		if (tf_test_vmlck() <= base) {
			CHECK_OK(tf_rcache_put(rc, r));
			tf_rcache_destroy(rc);
			munmap(buf, len);
			tf_test_partial_skip("VmLck bound: the provider does "
					     "not mlock registered memory");
			return;
		}
		CHECK_OK(tf_rcache_put(rc, r));
	}
	for (int i = 0; i < 3000; i++) {
		unsigned slot = rnd() % 4;
		uint64_t held_bytes = 0;
		long locked;

		if (held[slot]) {
			CHECK_OK(tf_rcache_put(rc, held[slot]));
			held[slot] = NULL;
		} else {
			size_t off = rnd() % (len - 1);
			size_t n = 1 + rnd() % (24 * (size_t)page);

			if (off + n > len)
				n = len - off;
			CHECK_OK(tf_rcache_get(rc, buf + off, n, RW,
					       &held[slot]));
		}
		for (int k = 0; k < 4; k++) {
			if (!held[k])
				continue;
			/* Whole pages of the held region. */
			uintptr_t a = (uintptr_t)tf_rcache_reg_addr(held[k]);
			uintptr_t e = a + tf_rcache_reg_length(held[k]);

			a &= ~(uintptr_t)(page - 1);
			e = (e + page - 1) & ~(uintptr_t)(page - 1);
			held_bytes += e - a;
		}
		locked = tf_test_vmlck() - base;
		if (locked > peak)
			peak = locked;
		CHECKF((uint64_t)(locked > 0 ? locked : 0) <=
			       max_bytes + held_bytes,
		       "VmLck grew by %ld bytes: bound %llu + held %llu",
		       locked, (unsigned long long)max_bytes,
		       (unsigned long long)held_bytes);
		CHECK(stats(rc).cached_bytes <= max_bytes);
		CHECK(stats(rc).regions <= 16);
	}
	for (int k = 0; k < 4; k++)
		if (held[k])
			CHECK_OK(tf_rcache_put(rc, held[k]));
	tf_test_info("VmLck bound: peak %ld bytes over baseline, bound %llu, "
		     "%llu evictions",
		     peak, (unsigned long long)max_bytes,
		     (unsigned long long)stats(rc).evictions);
	tf_rcache_destroy(rc);
	CHECK(tf_test_vmlck() <= base);
	CHECK(ctx_pinned() == 0);
	munmap(buf, len);
}

int main(void)
{
	tf_mr_t *mr;
	char *probe;
	int ret;

	tf_test_begin("rcache_soft");
	page = sysconf(_SC_PAGESIZE);
	mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	probe = mmap(NULL, page, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(probe != MAP_FAILED);
	ret = tf_mr_reg(pd, probe, page, RW, &mr);
	if (ret == -EOPNOTSUPP)
		tf_test_skip("provider %s cannot register memory",
			     tf_context_provider(ctx));
	CHECK_OK(ret);
	CHECK_OK(tf_mr_dereg(mr));
	munmap(probe, page);

	test_reuse(TF_RCACHE_MONITOR_UFFD);
	test_reuse(TF_RCACHE_MONITOR_NONE);
	test_vmlck_bound();

	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}
