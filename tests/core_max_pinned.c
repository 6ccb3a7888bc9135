/* SPDX-License-Identifier: MIT */
/*
 * core_max_pinned: TOLLFREE_MAX_PINNED bounds what one context pins,
 * registrations of every kind together, in whole pages.
 *   - The context's stats report the bound; pinned_bytes counts whole
 *     pages (a 100-byte registration across a page boundary pins two).
 *   - A dedicated registration past the bound fails with -ENOBUFS,
 *     counted in pinned_refused and mr_reg_fail; nothing is pinned by it
 *     (VmLck on the soft provider, which locks registered pages).
 *   - A pool grows by a chunk while the chunk fits and then refuses the
 *     rent with -ENOBUFS.
 *   - The registration cache, refused, gives back its idle regions and
 *     registers again, as it does when the system refuses to pin.
 *   - Registrations racing on several threads never pass the bound
 *     together.
 * Before the bound, each of these registrations succeeded however much
 * was pinned, and pinned_bytes counted the bytes asked for, not the pages.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tf_test.h"

#define KIB   1024ul
#define BOUND (1024 * KIB)
#define RW    (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)

static tf_context_t *ctx;
static tf_pd_t *pd;
static long page;

static tf_context_stats_t cstats(void)
{
	tf_context_stats_t s;

	CHECK_OK(tf_context_query_stats(ctx, &s));
	return s;
}

static void *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	memset(p, 1, len);
	return p;
}

/* Pinned by this process now: VmLck where the provider locks pages (the
 * soft provider), else what the context counts. */
static long locked(void)
{
	long v = tf_test_vmlck();

	return strcmp(tf_context_provider(ctx), "soft") || v < 0
		       ? (long)cstats().pinned_bytes
		       : v;
}

static void dedicated(void)
{
	uint8_t *a = map(1024 * KIB);
	tf_context_stats_t s0 = cstats(), s;
	tf_mr_t *mr, *big, *more;

	/* 100 bytes across a page boundary pin two pages. */
	CHECK_OK(tf_mr_reg(pd, a + page - 50, 100, RW, &mr));
	CHECKF(cstats().pinned_bytes == 2 * (uint64_t)page,
	       "pinned %llu for 100 bytes over two pages",
	       (unsigned long long)cstats().pinned_bytes);
	CHECK_OK(tf_mr_dereg(mr));
	CHECK(cstats().pinned_bytes == 0);

	CHECK_OK(tf_mr_reg(pd, a, 768 * KIB, RW, &big));
	tf_test_expect_log(1); /* the refusal names the bound */
	CHECK_ERR(tf_mr_reg(pd, a + 768 * KIB, 512 * KIB, RW, &more), -ENOBUFS);
	s = cstats();
	CHECK(s.pinned_bytes == 768 * KIB);
	CHECK(s.pinned_refused == s0.pinned_refused + 1);
	CHECK(s.mr_reg_fail == s0.mr_reg_fail + 1);
	CHECKF(locked() <= (long)BOUND, "%ld bytes locked", locked());
	/* Exactly up to the bound is allowed. */
	CHECK_OK(tf_mr_reg(pd, a + 768 * KIB, 256 * KIB, RW, &more));
	CHECK(cstats().pinned_bytes == BOUND);
	CHECK_OK(tf_mr_dereg(more));
	CHECK_OK(tf_mr_dereg(big));
	CHECK(cstats().pinned_bytes == 0);
	munmap(a, 1024 * KIB);
}

static void pool(void)
{
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE |
					     TF_POOL_PARAM_MAX_BYTES,
			       .chunk_size = 256 * KIB,
			       .max_bytes = 16 * BOUND};
	uint8_t *a = map(640 * KIB);
	tf_slice_t sl[16];
	tf_pool_stats_t ps;
	tf_pool_t *p;
	tf_mr_t *mr;
	int n = 0, ret;

	/* 640 KiB pinned leave room for one chunk of 256 KiB, not two. */
	CHECK_OK(tf_mr_reg(pd, a, 640 * KIB, RW, &mr));
	CHECK_OK(tf_pool_create(pd, &pp, &p));
	tf_test_expect_log(1);
	while ((ret = tf_pool_rent(p, 64 * KIB, &sl[n])) == 0)
		CHECK(++n < 16);
	CHECK_ERR(ret, -ENOBUFS);
	CHECKF(n == 4, "%d slices of 64 KiB from 256 KiB", n);
	CHECK_OK(tf_pool_query_stats(p, &ps));
	CHECK(ps.chunks == 1 && ps.enomem == 1);
	CHECK(cstats().pinned_bytes == 896 * KIB);
	CHECKF(locked() <= (long)BOUND, "%ld bytes locked", locked());
	while (n)
		CHECK_OK(tf_pool_return(p, &sl[--n]));
	tf_pool_destroy(p);
	CHECK_OK(tf_mr_dereg(mr));
	munmap(a, 640 * KIB);
}

static void rcache(void)
{
	uint8_t *a = map(512 * KIB), *b = map(512 * KIB), *c = map(256 * KIB);
	tf_rcache_reg_t *ra, *rb;
	tf_rcache_stats_t st;
	tf_rcache_t *rc;
	tf_mr_t *mr;

	/* 256 KiB pinned besides the cache: a and b do not fit together. */
	CHECK_OK(tf_mr_reg(pd, c, 256 * KIB, RW, &mr));
	CHECK_OK(tf_rcache_create(pd, NULL, &rc));
	CHECK_OK(tf_rcache_get(rc, a, 512 * KIB, RW, &ra));
	CHECK_OK(tf_rcache_put(rc, ra)); /* idle, cached, still pinned */
	CHECK(cstats().pinned_bytes == 768 * KIB);
	/* Refused once (logged), then the idle region is evicted. */
	tf_test_expect_log(1);
	CHECK_OK(tf_rcache_get(rc, b, 512 * KIB, RW, &rb));
	CHECK_OK(tf_rcache_query_stats(rc, &st));
	CHECKF(st.evictions == 1 && st.pinned_bytes == 512 * KIB,
	       "evictions %llu, pinned %llu", (unsigned long long)st.evictions,
	       (unsigned long long)st.pinned_bytes);
	CHECK(cstats().pinned_bytes == 768 * KIB);
	CHECKF(locked() <= (long)BOUND, "%ld bytes locked", locked());
	CHECK_OK(tf_rcache_put(rc, rb));
	tf_rcache_destroy(rc);
	CHECK_OK(tf_mr_dereg(mr));
	munmap(a, 512 * KIB);
	munmap(b, 512 * KIB);
	munmap(c, 256 * KIB);
}

/* Threads register 64 KiB at a time until refused, all at once. */
#define THREADS 4
#define PER	16

static pthread_barrier_t go;
static uint8_t *race_mem;

static void *racer(void *arg)
{
	uint8_t *base = race_mem + (uintptr_t)arg * PER * 64 * KIB;
	tf_mr_t **mr = calloc(PER, sizeof(*mr));
	int n = 0;

	pthread_barrier_wait(&go);
	while (n < PER &&
	       !tf_mr_reg(pd, base + n * 64 * KIB, 64 * KIB, RW, &mr[n]))
		n++;
	pthread_barrier_wait(&go); /* all at their peak together */
	pthread_barrier_wait(&go); /* checked */
	while (n)
		tf_mr_dereg(mr[--n]);
	free(mr);
	return NULL;
}

static void race(void)
{
	pthread_t t[THREADS];
	tf_context_stats_t s;

	race_mem = map(THREADS * PER * 64 * KIB);
	CHECK(!pthread_barrier_init(&go, NULL, THREADS + 1));
	tf_test_tolerate_log(true); /* one refusal per thread */
	for (uintptr_t i = 0; i < THREADS; i++)
		CHECK(!pthread_create(&t[i], NULL, racer, (void *)i));
	pthread_barrier_wait(&go);
	pthread_barrier_wait(&go);
	s = cstats();
	CHECKF(s.pinned_bytes == BOUND, "%llu pinned by %d racing threads",
	       (unsigned long long)s.pinned_bytes, THREADS);
	CHECKF(locked() <= (long)BOUND, "%ld bytes locked", locked());
	pthread_barrier_wait(&go);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	tf_test_tolerate_log(false);
	pthread_barrier_destroy(&go);
	CHECK(cstats().pinned_bytes == 0);
	munmap(race_mem, THREADS * PER * 64 * KIB);
}

int main(void)
{
	tf_context_stats_t s;
	int ret;

	/* Before the first library call: the configuration is read once. */
	setenv("TOLLFREE_MAX_PINNED", "1M", 1);
	tf_test_begin("core_max_pinned");
	page = sysconf(_SC_PAGESIZE);
	ret = tf_context_open(NULL, &ctx);
	if (ret == -TF_ENOPROVIDER)
		tf_test_skip("no provider: %s", tf_strerror(ret));
	CHECK_OK(ret);
	CHECK_OK(tf_pd_create(ctx, &pd));
	s = cstats();
	CHECKF(s.max_pinned == BOUND && s.pinned_bytes == 0,
	       "max_pinned %llu, pinned %llu", (unsigned long long)s.max_pinned,
	       (unsigned long long)s.pinned_bytes);
	dedicated();
	pool();
	rcache();
	race();
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}
