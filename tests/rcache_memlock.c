/* SPDX-License-Identifier: MIT */
/*
 * rcache_memlock.c - pinning refused by RLIMIT_MEMLOCK: the cache returns
 * a clear error and leaks nothing (no region, no locked page), gives back
 * idle regions and retries when that makes room, and a pool that cannot
 * register a chunk returns -ENOMEM.
 *
 * Root bypasses RLIMIT_MEMLOCK through CAP_IPC_LOCK, so the test runs in a
 * forked child that drops CAP_IPC_LOCK from its capability sets before
 * lowering the limit.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test_unit.h"

#define LIMIT (256 * 1024)
#define RW    (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)

static void child(void)
{
	struct rlimit rl = {LIMIT, LIMIT};
	tf_rcache_params_t rp = {.field_mask = TF_RCACHE_PARAM_MAX_BYTES,
				 .max_bytes = 64 << 20};
	tf_pool_params_t pp = {.field_mask = TF_POOL_PARAM_CHUNK_SIZE |
					     TF_POOL_PARAM_MAX_BYTES,
			       .chunk_size = 2 << 20,
			       .max_bytes = 8 << 20};
	size_t len = 1 << 20;
	tf_rcache_reg_t *r, *small[3];
	tf_context_stats_t cs;
	tf_rcache_stats_t s;
	tf_context_t *ctx;
	tf_rcache_t *rc;
	tf_pool_t *pool;
	tf_slice_t slice;
	long base;
	tf_pd_t *pd;
	char *buf;
	int ret;

	ret = tf_test_drop_ipc_lock();
	if (ret)
		tf_test_skip("cannot drop CAP_IPC_LOCK: %s", strerror(-ret));
	CHECK(!setrlimit(RLIMIT_MEMLOCK, &rl));
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 1, len);
	if (!mlock(buf, len))
		tf_test_skip("mlock of %zu bytes past RLIMIT_MEMLOCK=%d "
			     "succeeded: the limit is not enforced here",
			     len, LIMIT);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_OK(tf_rcache_create(pd, &rp, &rc));
	base = tf_test_vmlck();

	/* Too big for the limit: a clear error, nothing left behind. */
	tf_test_tolerate_log(true);
	ret = tf_rcache_get(rc, buf, len, RW, &r);
	tf_test_tolerate_log(false);
	CHECKF(ret == -ENOMEM || ret == -EAGAIN || ret == -EPERM,
	       "tf_rcache_get past RLIMIT_MEMLOCK = %d (%s)", ret,
	       tf_strerror(ret));
	tf_test_info("past RLIMIT_MEMLOCK: %s", tf_strerror(ret));
	CHECK_OK(tf_rcache_query_stats(rc, &s));
	CHECK(s.regions == 0 && s.pinned_regions == 0 && s.pinned_bytes == 0 &&
	      s.reg_failures == 1);
	CHECK(tf_test_vmlck() == base);
	CHECK_OK(tf_context_query_stats(ctx, &cs));
	CHECK(cs.pinned_bytes == 0);

	/* Three idle 64 KiB regions fill most of the limit; a 128 KiB one
	 * only fits once they are given back, which the cache does. */
	for (int i = 0; i < 3; i++) {
		CHECK_OK(tf_rcache_get(rc, buf + i * 65536, 65536, RW,
				       &small[i]));
		CHECK_OK(tf_rcache_put(rc, small[i]));
	}
	tf_test_tolerate_log(true);
	ret = tf_rcache_get(rc, buf + 512 * 1024, 128 * 1024, RW, &r);
	tf_test_tolerate_log(false);
	CHECK_OK(ret);
	CHECK_OK(tf_rcache_query_stats(rc, &s));
	CHECK(s.evictions >= 1);
	CHECK_OK(tf_rcache_put(rc, r));
	tf_rcache_destroy(rc);
	CHECK(tf_test_vmlck() == base);

	/* A pool whose chunk cannot be pinned: -ENOMEM, nothing kept. */
	CHECK_OK(tf_pool_create(pd, &pp, &pool));
	tf_test_tolerate_log(true);
	ret = tf_pool_rent(pool, 100, &slice);
	tf_test_tolerate_log(false);
	CHECK_ERR(ret, -ENOMEM);
	{
		tf_pool_stats_t ps;

		CHECK_OK(tf_pool_query_stats(pool, &ps));
		CHECK(ps.chunks == 0 && ps.chunk_bytes == 0 && ps.enomem == 1);
	}
	tf_pool_destroy(pool);
	CHECK(tf_test_vmlck() == base);
	CHECK_OK(tf_context_query_stats(ctx, &cs));
	CHECK(cs.pinned_bytes == 0);
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	munmap(buf, len);
	exit(tf_test_end());
}

int main(void)
{
	int status;
	pid_t pid;

	tf_test_begin("rcache_memlock");
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		child();
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status));
	return WEXITSTATUS(status);
}
