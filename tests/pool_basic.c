/* SPDX-License-Identifier: MIT */
/*
 * pool_basic.c - pre-registered pools over a real provider (soft by
 * default): slices carry a usable address, length, keys and region; size
 * classes; no slice is handed out twice; exhaustion gives -ENOMEM and the
 * pool recovers when slices come back; foreign slices are refused; threads
 * rent and return concurrently (also across threads); a forked child is
 * refused; destroy deregisters everything.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"

static tf_context_t *ctx;
static tf_pd_t *pd;

static tf_pool_stats_t stats(tf_pool_t *p)
{
	tf_pool_stats_t s;

	CHECK_OK(tf_pool_query_stats(p, &s));
	return s;
}

static uint64_t ctx_pinned(void)
{
	tf_context_stats_t s;

	CHECK_OK(tf_context_query_stats(ctx, &s));
	return s.pinned_bytes;
}

/* The slice lies inside its chunk's region, is aligned to its class and
 * is writable. */
static void check_slice(const tf_slice_t *s, size_t size)
{
	size_t cls = 64;
	char *mr_a;

	while (cls < size)
		cls *= 2;
	CHECK(s->addr && s->length == size && s->mr);
	mr_a = tf_mr_addr(s->mr);
	CHECK((char *)s->addr >= mr_a &&
	      (char *)s->addr + cls <= mr_a + tf_mr_length(s->mr));
	CHECK(((uintptr_t)s->addr - (uintptr_t)mr_a) % cls == 0);
	CHECK(s->lkey == tf_mr_lkey(s->mr) && s->rkey == tf_mr_rkey(s->mr));
	CHECK((tf_mr_access(s->mr) & TF_ACCESS_ALL) == TF_ACCESS_ALL);
	memset(s->addr, 0x5a, size);
}

static void test_basic(void)
{
	static const size_t sizes[] = {1,    63,   64,	  65,	  1000,
				       4096, 5000, 65536, 1 << 20};
	tf_slice_t s[9], t;
	tf_pool_stats_t st;
	tf_pool_t *p;

	CHECK_OK(tf_pool_create(pd, NULL, &p));
	for (int i = 0; i < 9; i++) {
		CHECK_OK(tf_pool_rent(p, sizes[i], &s[i]));
		check_slice(&s[i], sizes[i]);
	}
	st = stats(p);
	tf_test_info("memory of the last chunk: %d (0 provider, 1 hugetlb, 2 "
		     "thp, 3 regular), huge pages: %s, %llu chunks",
		     st.memory, st.huge_pages ? "yes" : "no",
		     (unsigned long long)st.chunks);
	CHECK(st.chunks >= 7 && st.rents == 9);
	CHECK(st.chunk_bytes == ctx_pinned());
	CHECK_ERR(tf_pool_rent(p, 0, &t), -EINVAL);
	CHECK_ERR(tf_pool_rent(p, (1 << 20) + 1, &t), -EINVAL);
	/* A slice must come back unchanged. */
	t = s[3];
	t.addr = (char *)t.addr + 64;
	CHECK_ERR(tf_pool_return(p, &t), -EINVAL);
	t = s[3];
	t.handle |= 1ull << 40;
	CHECK_ERR(tf_pool_return(p, &t), -EINVAL);
	for (int i = 0; i < 9; i++)
		CHECK_OK(tf_pool_return(p, &s[i]));
	st = stats(p);
	CHECK(st.returns == 9 && st.free_slices == st.slices);
	/* Returned slices are rented again before the pool grows. */
	CHECK_OK(tf_pool_rent(p, 4096, &t));
	CHECK(stats(p).chunks == st.chunks);
	CHECK_OK(tf_pool_return(p, &t));
	tf_pool_destroy(p);
	CHECK(ctx_pinned() == 0);
}

static void test_exhaustion(int thread_cache)
{
	tf_pool_params_t prm = {.field_mask = TF_POOL_PARAM_MAX_BYTES |
					      TF_POOL_PARAM_CHUNK_SIZE |
					      TF_POOL_PARAM_THREAD_CACHE,
				.max_bytes = 4 << 20,
				.chunk_size = 2 << 20,
				.thread_cache = (unsigned)thread_cache};
	tf_slice_t big[4], t;
	tf_pool_t *p;

	CHECK_OK(tf_pool_create(pd, &prm, &p));
	for (int i = 0; i < 4; i++)
		CHECK_OK(tf_pool_rent(p, 1 << 20, &big[i]));
	CHECK_ERR(tf_pool_rent(p, 1 << 20, &t), -ENOMEM);
	CHECK_ERR(tf_pool_rent(p, 64, &t), -ENOMEM); /* no room to grow */
	CHECK(stats(p).enomem == 2 && stats(p).chunk_bytes == 4 << 20);
	CHECK_OK(tf_pool_return(p, &big[2]));
	CHECK_OK(tf_pool_rent(p, 1 << 20, &t));
	CHECK(t.addr == big[2].addr);
	CHECK_OK(tf_pool_return(p, &t));
	for (int i = 0; i < 4; i++)
		if (i != 2)
			CHECK_OK(tf_pool_return(p, &big[i]));
	tf_pool_destroy(p);
	CHECK(ctx_pinned() == 0);
}

/* Every slice of 256 B rented at once: all distinct, none overlapping. */
static void test_distinct(void)
{
	tf_pool_params_t prm = {.field_mask = TF_POOL_PARAM_MAX_BYTES,
				.max_bytes = 2 << 20};
	size_t n = (2 << 20) / 256;
	tf_slice_t *s = calloc(n, sizeof(*s)), t;
	tf_pool_t *p;

	CHECK(s);
	CHECK_OK(tf_pool_create(pd, &prm, &p));
	for (size_t i = 0; i < n; i++) {
		CHECK_OK(tf_pool_rent(p, 200, &s[i]));
		*(size_t *)s[i].addr = i;
	}
	CHECK_ERR(tf_pool_rent(p, 200, &t), -ENOMEM);
	for (size_t i = 0; i < n; i++)
		CHECKF(*(size_t *)s[i].addr == i, "slice %zu overwritten", i);
	for (size_t i = 0; i < n; i++)
		CHECK_OK(tf_pool_return(p, &s[i]));
	CHECK(stats(p).free_slices == n);
	tf_pool_destroy(p);
	free(s);
}

/*
 * A class that grows while none of its slices is free: its stack of free
 * handles must still hold every slice of the class once all come back
 * (the 1,024 sessions of tollfree-bench load took a second chunk of 4 KiB
 * slices with the first all rented, and their returns wrote past the
 * stack).  Every slice is then rented again: all distinct, all usable.
 */
static void test_grow_empty(int thread_cache)
{
	tf_pool_params_t prm = {.field_mask = TF_POOL_PARAM_MAX_BYTES |
					      TF_POOL_PARAM_CHUNK_SIZE |
					      TF_POOL_PARAM_THREAD_CACHE,
				.max_bytes = 4 << 20,
				.chunk_size = 2 << 20,
				.thread_cache = (unsigned)thread_cache};
	size_t per = (2 << 20) / 4096, n = 2 * per;
	tf_slice_t *s = calloc(n, sizeof(*s)), t;
	tf_pool_t *p;

	CHECK(s);
	CHECK_OK(tf_pool_create(pd, &prm, &p));
	/* The first chunk, all rented; then one slice of the second. */
	for (size_t i = 0; i <= per; i++)
		CHECK_OK(tf_pool_rent(p, 4096, &s[i]));
	CHECK(stats(p).chunks == 2);
	for (size_t i = 0; i <= per; i++)
		CHECK_OK(tf_pool_return(p, &s[i]));
	CHECK(stats(p).free_slices == n);
	/* Both chunks' slices, each once. */
	for (size_t i = 0; i < n; i++) {
		CHECK_OK(tf_pool_rent(p, 4096, &s[i]));
		check_slice(&s[i], 4096);
		*(size_t *)s[i].addr = i;
	}
	CHECK_ERR(tf_pool_rent(p, 4096, &t), -ENOMEM);
	CHECK(stats(p).chunks == 2);
	for (size_t i = 0; i < n; i++)
		CHECKF(*(size_t *)s[i].addr == i, "slice %zu handed out twice",
		       i);
	for (size_t i = 0; i < n; i++)
		CHECK_OK(tf_pool_return(p, &s[i]));
	CHECK(stats(p).free_slices == n);
	tf_pool_destroy(p);
	CHECK(ctx_pinned() == 0);
	free(s);
}

#define NTHR  4
#define NHOLD 32

struct worker {
	tf_pool_t *p;
	int id;
	int fail;
};

/* Slices in transit between threads: returned by another thread than the
 * one that rented them. */
static pthread_mutex_t xfer_lock = PTHREAD_MUTEX_INITIALIZER;
static tf_slice_t xfer[NTHR * NHOLD];
static int nxfer;

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	tf_slice_t held[NHOLD], back[NHOLD / 2];
	unsigned seed = 99u * (unsigned)(w->id + 1);

	for (int round = 0; round < 200 && !w->fail; round++) {
		int nback = 0;

		for (int i = 0; i < NHOLD; i++) {
			size_t size;

			seed = seed * 1103515245u + 12345u;
			size = 1 + (seed >> 8) % 8192;
			if (tf_pool_rent(w->p, size, &held[i])) {
				w->fail = 1;
				return NULL;
			}
			/* Tag the slice: a double rent shows up as a
			 * foreign tag below. */
			memset(held[i].addr, w->id + 1, size);
		}
		for (int i = 0; i < NHOLD; i++) {
			const unsigned char *b = held[i].addr;

			if (b[0] != w->id + 1 ||
			    b[held[i].length - 1] != w->id + 1)
				w->fail = 2;
		}
		/* Half back to the pool here, half to whichever thread
		 * comes next. */
		for (int i = 0; i < NHOLD / 2; i++)
			if (tf_pool_return(w->p, &held[i]))
				w->fail = 3;
		pthread_mutex_lock(&xfer_lock);
		while (nxfer && nback < NHOLD / 2)
			back[nback++] = xfer[--nxfer];
		for (int i = NHOLD / 2; i < NHOLD; i++)
			xfer[nxfer++] = held[i];
		pthread_mutex_unlock(&xfer_lock);
		for (int i = 0; i < nback; i++)
			if (tf_pool_return(w->p, &back[i]))
				w->fail = 4;
	}
	return NULL;
}

static void test_threads(void)
{
	struct worker workers[NTHR];
	pthread_t t[NTHR];
	tf_pool_stats_t st;
	tf_pool_t *p;

	CHECK_OK(tf_pool_create(pd, NULL, &p));
	for (int i = 0; i < NTHR; i++) {
		workers[i] = (struct worker){.p = p, .id = i};
		CHECK(!pthread_create(&t[i], NULL, worker_main, &workers[i]));
	}
	for (int i = 0; i < NTHR; i++)
		CHECK(!pthread_join(t[i], NULL));
	for (int i = 0; i < NTHR; i++)
		CHECKF(!workers[i].fail, "worker %d failed (%d)", i,
		       workers[i].fail);
	while (nxfer)
		CHECK_OK(tf_pool_return(p, &xfer[--nxfer]));
	st = stats(p);
	CHECK(st.rents == st.returns);
	CHECK(st.free_slices == st.slices);
	tf_test_info("threads: %llu rents, %llu from thread caches, %llu "
		     "chunks",
		     (unsigned long long)st.rents,
		     (unsigned long long)st.cache_hits,
		     (unsigned long long)st.chunks);
	tf_pool_destroy(p);
	CHECK(ctx_pinned() == 0);
}

/* Each kind of chunk memory can be asked for explicitly; stats say which
 * one backs the chunks. */
static void test_memory_kinds(void)
{
	static const char *const names[] = {"provider", "hugetlb", "thp",
					    "regular"};

	for (int k = 0; k < TF_POOL_MEM_KINDS; k++) {
		tf_pool_params_t prm = {.field_mask = TF_POOL_PARAM_MEMORY,
					.memory = names[k]};
		tf_pool_stats_t st;
		tf_slice_t s;
		tf_pool_t *p;
		int ret;

		CHECK_OK(tf_pool_create(pd, &prm, &p));
		tf_test_tolerate_log(true);
		ret = tf_pool_rent(p, 4096, &s);
		tf_test_tolerate_log(false);
		/* Only huge pages may be missing on a machine; regular
		 * pages and the provider's memory must always work. */
		if ((k == TF_POOL_MEM_HUGETLB || k == TF_POOL_MEM_THP) &&
		    (ret == -ENOMEM || ret == -EOPNOTSUPP)) {
			/* No reserved huge pages, THP off, or no provider
			 * memory: refused cleanly, nothing kept. */
			tf_test_info("memory %s: not available here (%s)",
				     names[k], tf_strerror(ret));
			CHECK(stats(p).chunks == 0);
			tf_pool_destroy(p);
			continue;
		}
		CHECK_OK(ret);
		check_slice(&s, 4096);
		st = stats(p);
		CHECK(st.chunks == 1 && st.chunks_by_memory[k] == 1 &&
		      st.memory == k);
		CHECK(st.huge_pages ==
		      (k == TF_POOL_MEM_HUGETLB || k == TF_POOL_MEM_THP));
		if (k == TF_POOL_MEM_HUGETLB || k == TF_POOL_MEM_THP)
			CHECK((uintptr_t)tf_mr_addr(s.mr) % (2 << 20) == 0);
		CHECK_OK(tf_pool_return(p, &s));
		tf_pool_destroy(p);
	}
	CHECK(ctx_pinned() == 0);
}

static void test_fork(void)
{
	tf_slice_t s, c;
	tf_pool_t *p;
	int status;
	pid_t pid;

	CHECK_OK(tf_pool_create(pd, NULL, &p));
	CHECK_OK(tf_pool_rent(p, 100, &s));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		_exit(tf_pool_rent(p, 100, &c) == -TF_EFORK &&
				      tf_pool_return(p, &s) == -TF_EFORK
			      ? 0
			      : 1);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "a forked child could use the pool");
	CHECK_OK(tf_pool_return(p, &s));
	tf_pool_destroy(p);
}

int main(void)
{
	tf_test_begin("pool_basic");
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	test_basic();
	test_exhaustion(64);
	test_exhaustion(0);
	test_distinct();
	test_grow_empty(0);
	test_grow_empty(64);
	test_threads();
	test_memory_kinds();
	test_fork();
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}
