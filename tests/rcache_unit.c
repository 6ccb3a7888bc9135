/* SPDX-License-Identifier: MIT */
/*
 * rcache_unit.c - the registration cache with fake registration ops that
 * count live registrations (UCX test_rcache style): hits, containment,
 * access rules, bounds and eviction of idle regions only, uncached
 * overflow, explicit invalidation, the userfaultfd monitor (munmap,
 * madvise DONTNEED, mmap MAP_FIXED, mremap, free) with reuse of the same
 * virtual address, the pagemap check, registration failure, fork, a random
 * workload against the bounds, and threads hammering get/put.  Every case
 * ends by proving that destroy released every registration.
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"
#include "rcache_int.h"

struct fake_reg {
	uint64_t id;
	uint64_t addr, len;
	unsigned access;
};

static atomic_long live;
static atomic_ullong next_id = 1;
static atomic_int fail_with;	 /* next registration fails with this */
static atomic_long fail_if_live; /* ... only while this many are live */
static long page;

static int fake_reg(void *arg, void *addr, size_t len, unsigned access,
		    void **memh_p, uint32_t *lkey_p, uint32_t *rkey_p)
{
	struct fake_reg *f;
	int err = atomic_load(&fail_with);

	(void)arg;
	if (err && atomic_load(&live) >= atomic_load(&fail_if_live)) {
		atomic_store(&fail_with, 0);
		return err;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->id = atomic_fetch_add(&next_id, 1);
	f->addr = (uintptr_t)addr;
	f->len = len;
	f->access = access;
	atomic_fetch_add(&live, 1);
	*memh_p = f;
	*lkey_p = (uint32_t)f->id;
	*rkey_p = (uint32_t)f->id ^ 0x5a5a5a5au;
	return 0;
}

static void fake_dereg(void *arg, void *memh)
{
	(void)arg;
	atomic_fetch_sub(&live, 1);
	free(memh);
}

static const struct tf__rcache_ops fake_ops = {fake_reg, fake_dereg};

static uint64_t reg_id(tf_rcache_reg_t *r)
{
	return ((struct fake_reg *)tf__rcache_reg_memh(r))->id;
}

static tf_rcache_t *make(int monitor, uint64_t max_bytes, uint64_t max_regions,
			 bool check)
{
	struct tf__rcache_config cfg = {max_bytes, max_regions, monitor, check};
	tf_rcache_t *rc = NULL;

	CHECK_OK(tf__rcache_create(&fake_ops, NULL, &cfg, &rc));
	return rc;
}

static void finish(tf_rcache_t *rc)
{
	tf_rcache_destroy(rc);
	CHECKF(atomic_load(&live) == 0, "%ld registrations leaked",
	       atomic_load(&live));
}

static tf_rcache_stats_t stats(tf_rcache_t *rc)
{
	tf_rcache_stats_t s;

	CHECK_OK(tf_rcache_query_stats(rc, &s));
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

#define RW (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)
#define RR TF_ACCESS_REMOTE_READ

static void test_hits_and_access(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_NONE, 1 << 30, 100, false);
	char *buf = map(4 * page);
	tf_rcache_reg_t *a, *b, *c;
	uint64_t id;

	CHECK_OK(tf_rcache_get(rc, buf, 2 * page, RR, &a));
	id = reg_id(a);
	CHECK(tf_rcache_reg_addr(a) == buf);
	CHECK(tf_rcache_reg_length(a) == (size_t)(2 * page));
	CHECK_OK(tf_rcache_put(rc, a));
	/* Same range, and a range inside it: hits on the same region. */
	CHECK_OK(tf_rcache_get(rc, buf, 2 * page, RR, &b));
	CHECK(b == a && reg_id(b) == id);
	CHECK_OK(tf_rcache_get(rc, buf + 100, 50, RR, &c));
	CHECK(c == a);
	CHECK_OK(tf_rcache_put(rc, c));
	CHECK_OK(tf_rcache_put(rc, b));
	/* Beyond the region: a miss. */
	CHECK_OK(tf_rcache_get(rc, buf, 3 * page, RR, &b));
	CHECK(b != a);
	CHECK_OK(tf_rcache_put(rc, b));
	/* More access than cached: a miss registered with exactly what was
	 * asked; less remote access: a miss too (never widen a peer's
	 * rights). */
	CHECK_OK(tf_rcache_get(rc, buf, page, RR | TF_ACCESS_LOCAL_WRITE, &c));
	CHECK(reg_id(c) != id);
	CHECK(((struct fake_reg *)tf__rcache_reg_memh(c))->access ==
	      (RR | TF_ACCESS_LOCAL_WRITE));
	CHECK_OK(tf_rcache_put(rc, c));
	CHECK_OK(tf_rcache_get(rc, buf, page, TF_ACCESS_LOCAL_WRITE, &c));
	CHECK(((struct fake_reg *)tf__rcache_reg_memh(c))->access ==
	      TF_ACCESS_LOCAL_WRITE);
	CHECK_OK(tf_rcache_put(rc, c));
	/* Fewer local rights than cached, same remote rights: a hit. */
	CHECK_OK(tf_rcache_get(rc, buf, page, RR, &c));
	CHECK(tf_rcache_reg_length(c) >= (size_t)page);
	CHECK(((struct fake_reg *)tf__rcache_reg_memh(c))->access & RR);
	CHECK(!(((struct fake_reg *)tf__rcache_reg_memh(c))->access &
		TF_ACCESS_REMOTE_WRITE));
	CHECK_OK(tf_rcache_put(rc, c));
	CHECK(stats(rc).hits >= 3);
	CHECK_ERR(tf_rcache_get(rc, buf, 0, RR, &c), -EINVAL);
	CHECK_ERR(tf_rcache_get(rc, (void *)~0ul, 2, RR, &c), -EINVAL);
	CHECK_ERR(tf_rcache_get(rc, buf, 1, 1u << 20, &c), -EINVAL);
	finish(rc);
	munmap(buf, 4 * page);
}

static void test_bounds_and_in_use(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_NONE, 6 * page, 4, false);
	char *buf = map(16 * page);
	tf_rcache_reg_t *held[4], *r;
	tf_rcache_stats_t s;

	/* Ten idle regions through a cache of four: six evictions. */
	for (int i = 0; i < 10; i++) {
		CHECK_OK(tf_rcache_get(rc, buf + i * page, 100, RR, &r));
		CHECK_OK(tf_rcache_put(rc, r));
		s = stats(rc);
		CHECK(s.regions <= 4 && s.cached_bytes <= (uint64_t)6 * page);
		CHECK(atomic_load(&live) <= 4);
	}
	CHECK(stats(rc).evictions == 6);
	/* Byte bound: two 3-page regions fill it. */
	for (int i = 0; i < 4; i++) {
		CHECK_OK(tf_rcache_get(rc, buf + i * page, 3 * page, RR, &r));
		CHECK_OK(tf_rcache_put(rc, r));
		CHECK(stats(rc).cached_bytes <= (uint64_t)6 * page);
	}
	/* Hold four one-page regions: the cache is full of regions in
	 * use.  A fifth is uncached, the held ones stay registered. */
	CHECK_OK(tf_rcache_invalidate(rc, buf, 16 * page));
	for (int i = 0; i < 4; i++)
		CHECK_OK(tf_rcache_get(rc, buf + i * page, 64, RR, &held[i]));
	CHECK(atomic_load(&live) == 4);
	CHECK_OK(tf_rcache_get(rc, buf + 8 * page, 64, RR, &r));
	s = stats(rc);
	CHECK(s.uncached == 1 && s.regions == 4);
	CHECK(atomic_load(&live) == 5);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(atomic_load(&live) == 4); /* released on put */
	for (int i = 0; i < 4; i++) {
		tf_rcache_reg_t *again;

		CHECK_OK(tf_rcache_get(rc, buf + i * page, 64, RR, &again));
		CHECK(again == held[i]); /* never evicted while held */
		CHECK_OK(tf_rcache_put(rc, again));
		CHECK_OK(tf_rcache_put(rc, held[i]));
	}
	/* Too big for the bound at all: uncached. */
	CHECK_OK(tf_rcache_get(rc, buf, 8 * page, RR, &r));
	CHECK(stats(rc).uncached == 2);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(buf, 16 * page);
}

static void test_explicit_invalidation(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_NONE, 1 << 30, 100, false);
	size_t len = 8 * page;
	char *buf = map(len), *again;
	tf_rcache_reg_t *r, *held;
	uint64_t id;

	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	id = reg_id(r);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK_OK(tf_rcache_get(rc, buf + page, page, RW, &held));
	CHECK(reg_id(held) == id);
	/* The user unmaps and maps again at the same address. */
	CHECK(tf_rcache_invalidate(rc, buf + 2 * page, 1) == 1);
	munmap(buf, len);
	again = mmap(buf, len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(again == buf);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(reg_id(r) != id);
	CHECK(stats(rc).invalidations == 1);
	/* The held, invalidated region goes at its put. */
	CHECK(atomic_load(&live) == 2);
	CHECK_OK(tf_rcache_put(rc, held));
	CHECK(atomic_load(&live) == 1);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(buf, len);
}

/* One unmap-like operation on [buf, buf+len) and, where the address can be
 * reused, a new mapping at the same address. */
enum op { OP_MUNMAP, OP_DONTNEED, OP_MAP_FIXED, OP_MREMAP, OP_FREE };
static const char *const op_names[] = {"munmap", "madvise(DONTNEED)",
				       "mmap(MAP_FIXED)", "mremap", "free"};

/* Whether the page of @p is mapped. */
static bool still_mapped(void *p)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(page - 1);

	return !msync((void *)a, (size_t)page, MS_ASYNC);
}

/* Map fresh memory at @buf again; NULL if something else took it. */
static char *remap_same(char *buf, size_t len)
{
	char *q =
		mmap(buf, len, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (q == MAP_FAILED)
		return NULL;
	if (q != buf) {
		munmap(q, len); /* kernels before 4.17 ignore the flag */
		return NULL;
	}
	return q;
}

/* free() behind a call, so that the compiler lets the test look at the
 * address afterwards (it only compares and registers it). */
static void __attribute__((noinline)) free_block(void *p)
{
	free(p);
}

static void test_monitor_op(enum op op)
{
	tf_rcache_t *rc;
	size_t len = 16 * page;
	tf_rcache_reg_t *r;
	char *buf, *q;
	uint64_t id;
	int ret;

	{
		struct tf__rcache_config cfg = {1 << 30, 100,
						TF_RCACHE_MONITOR_UFFD, false};

		ret = tf__rcache_create(&fake_ops, NULL, &cfg, &rc);
		if (ret == -ENOTSUP) {
			tf_test_partial_skip("userfaultfd monitor (%s): "
					     "userfaultfd not usable here",
					     op_names[op]);
			return;
		}
		CHECK_OK(ret);
	}
	if (op == OP_FREE) {
		/* A malloc'd block above the (fixed) mmap threshold and
		 * larger than the heap's top chunk: glibc mmaps it. */
		len = 1 << 20;
		buf = malloc(len);
		CHECK(buf);
	} else {
		buf = map(len);
	}
	memset(buf, 2, len);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	id = reg_id(r);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(reg_id(r) == id); /* cached */
	CHECK_OK(tf_rcache_put(rc, r));
	switch (op) {
	case OP_MUNMAP:
		CHECK(!munmap(buf, len));
		q = remap_same(buf, len);
		break;
	case OP_DONTNEED:
		CHECK(!madvise(buf + page, page, MADV_DONTNEED));
		q = buf;
		break;
	case OP_MAP_FIXED:
		q = mmap(buf, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		CHECK(q == buf);
		break;
	case OP_MREMAP: {
		/* Move the pages away, then map something new there. */
		char *dst = mmap(NULL, len, PROT_NONE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		CHECK(dst != MAP_FAILED);
		CHECK(mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
			     dst) == dst);
		munmap(dst, len);
		q = remap_same(buf, len);
		break;
	}
	case OP_FREE:
	default:
		free_block(buf);
		if (still_mapped(buf)) {
			/* Not glibc's malloc (a sanitizer's keeps freed
			 * blocks mapped): nothing changed under the cached
			 * range, so there is nothing to invalidate. */
			tf_test_info("free: the block stays mapped here");
			CHECK_OK(tf_rcache_invalidate(rc, buf, len));
			finish(rc);
			return;
		}
		q = malloc(len);
		CHECK(q);
		if (q != buf)
			tf_test_info("free: malloc returned another address; "
				     "the invalidation is still checked");
		break;
	}
	if (!q) {
		/* Someone else mapped the address meanwhile (a sanitizer's
		 * runtime can): check that the unmap was seen at least. */
		tf_test_info("%s: address reused by another mapping",
			     op_names[op]);
		CHECK(tf_rcache_invalidate(rc, &id, 1) == 0); /* drains */
		CHECKF(stats(rc).invalidations >= 1, "%s: no invalidation",
		       op_names[op]);
		finish(rc);
		return;
	}
	memset(q, 3, len);
	/* The new memory at the same address must not hit the old
	 * registration. */
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECKF(reg_id(r) != id, "%s: stale hit after reuse", op_names[op]);
	CHECKF(stats(rc).invalidations >= 1, "%s: no invalidation",
	       op_names[op]);
	CHECK_OK(tf_rcache_put(rc, r));
	if (op == OP_FREE) {
		CHECK_OK(tf_rcache_invalidate(rc, q, len));
		free(q);
	} else {
		munmap(q, len);
	}
	finish(rc);
}

/* An unmap while the region is held: the holder keeps it, the next get
 * misses, and the put releases it. */
static void test_monitor_held(void)
{
	struct tf__rcache_config cfg = {1 << 30, 100, TF_RCACHE_MONITOR_UFFD,
					false};
	size_t len = 4 * page;
	tf_rcache_reg_t *held, *r;
	tf_rcache_t *rc;
	char *buf;

	if (tf__rcache_create(&fake_ops, NULL, &cfg, &rc))
		return; /* reported by test_monitor_op */
	buf = map(len);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &held));
	CHECK(mmap(buf, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == buf);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(r != held);
	CHECK(atomic_load(&live) == 2);
	CHECK_OK(tf_rcache_put(rc, held));
	CHECK(atomic_load(&live) == 1);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(buf, len);
}

/* Debug mode: no monitor and no invalidate call, the memory behind a
 * cached range is replaced; the pagemap check must catch it. */
static void test_check_mode(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_NONE, 1 << 30, 100, true);
	size_t len = 4 * page;
	tf_rcache_reg_t *r;
	char *buf, *aside, *q;
	uint64_t id;

	/* Private anonymous memory (shared memory is never cached).  The old
	 * pages move aside with mremap and live on, so the new ones cannot
	 * reuse their frames. */
	buf = map(len);
	aside = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(aside != MAP_FAILED);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	id = reg_id(r);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(reg_id(r) == id);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, aside) ==
	      aside);
	q = mmap(buf, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	CHECK(q == buf);
	memset(q, 5, len);
	tf_test_expect_log(1); /* the stale-entry error */
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK(reg_id(r) != id);
	CHECK(stats(rc).stale == 1);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(q, len);
	munmap(aside, len);
}

/* Whether the kernel has PROCMAP_QUERY (Linux 6.11). */
static bool have_procmap_query(void)
{
	struct {
		uint64_t size, flags, addr, rest[10];
	} q = {.size = 104, .addr = (uintptr_t)&q};
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	bool ok;

	if (fd < 0)
		return false;
	ok = !ioctl(fd, _IOWR('f', 17, char[104]), &q);
	close(fd);
	return ok;
}

/* Get @buf twice with a put between: whether the second get hit. */
static bool cached_twice(tf_rcache_t *rc, void *buf, size_t len, unsigned acc)
{
	tf_rcache_reg_t *r;
	uint64_t id;
	bool hit;

	CHECK_OK(tf_rcache_get(rc, buf, len, acc, &r));
	id = reg_id(r);
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK_OK(tf_rcache_get(rc, buf, len, acc, &r));
	hit = reg_id(r) == id;
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(tf_rcache_invalidate(rc, buf, len) >= 0);
	return hit;
}

/*
 * Only private anonymous memory is cached: shared and file-backed pages
 * can be replaced with no event (hole punch, truncation).  @pagemap: tell
 * them apart by the pagemap, as on kernels without PROCMAP_QUERY; that
 * cannot see a private file mapping whose pages were all copied on write.
 */
static void test_shared_memory(bool pagemap)
{
	struct tf__rcache_config cfg = {1 << 30, 100, TF_RCACHE_MONITOR_NONE,
					false, pagemap};
	const char *how = pagemap ? "pagemap" : "PROCMAP_QUERY";
	size_t len = 4 * page;
	tf_rcache_stats_t s;
	tf_rcache_t *rc;
	char *buf;
	int fd;

	if (!pagemap && !have_procmap_query()) {
		tf_test_partial_skip_host("PROCMAP_QUERY: Linux before 6.11");
		return;
	}
	CHECK_OK(tf__rcache_create(&fake_ops, NULL, &cfg, &rc));

	buf = map(len);
	CHECKF(cached_twice(rc, buf, len, RW),
	       "%s: private anonymous "
	       "memory is not cached",
	       how);
	munmap(buf, len);

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 1, len);
	CHECKF(!cached_twice(rc, buf, len, RW),
	       "%s: MAP_SHARED anonymous "
	       "memory is cached",
	       how);
	munmap(buf, len);

	fd = memfd_create("rcache_unit", MFD_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(!ftruncate(fd, (off_t)len));
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 1, len);
	CHECKF(!cached_twice(rc, buf, len, RW),
	       "%s: a MAP_SHARED memfd is "
	       "cached",
	       how);
	/* Part private anonymous, part shared: not cached. */
	{
		char *two = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		CHECK(two != MAP_FAILED);
		CHECK(mmap(two + len, len, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_FIXED, fd, 0) == two + len);
		memset(two, 1, 2 * len);
		CHECKF(!cached_twice(rc, two + len - 64, 128, RW),
		       "%s: a range ending in a shared mapping is cached", how);
		munmap(two, 2 * len);
	}
	munmap(buf, len);

	/* Private file mapping, pages only read: file pages, not cached. */
	buf = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	CHECK(buf != MAP_FAILED);
	for (size_t i = 0; i < len; i += (size_t)page)
		CHECK(((volatile char *)buf)[i] == 1);
	CHECKF(!cached_twice(rc, buf, len, TF_ACCESS_LOCAL_WRITE),
	       "%s: a private file mapping is cached", how);
	munmap(buf, len);

	/* Private file mapping, every page copied on write: anonymous pages,
	 * but a truncation of the file would drop them. */
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 2, len);
	if (pagemap)
		CHECKF(cached_twice(rc, buf, len, RW),
		       "pagemap: a copied private file mapping is not cached "
		       "(the documented limit changed: update tollfree(7))");
	else
		CHECKF(!cached_twice(rc, buf, len, RW),
		       "PROCMAP_QUERY: a copied private file mapping is "
		       "cached");
	munmap(buf, len);
	close(fd);

	/* Private anonymous hugetlb: no one else can reach its file. */
	buf = mmap(NULL, 2u << 20, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (buf == MAP_FAILED) {
		tf_test_info("%s: MAP_HUGETLB: %m (no huge pages reserved); "
			     "not tried",
			     how);
	} else {
		memset(buf, 1, 2u << 20);
		CHECKF(cached_twice(rc, buf, 2u << 20, RW),
		       "%s: private anonymous hugetlb memory is not cached",
		       how);
		munmap(buf, 2u << 20);
	}
	s = stats(rc);
	CHECK(s.regions == 0 && s.uncached >= 8);
	finish(rc);
}

static void test_reg_failure(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_NONE, 1 << 30, 100, false);
	char *buf = map(8 * page);
	tf_rcache_reg_t *r;

	atomic_store(&fail_if_live, 0);
	atomic_store(&fail_with, -EAGAIN);
	CHECK_ERR(tf_rcache_get(rc, buf, page, RW, &r), -EAGAIN);
	CHECK(atomic_load(&live) == 0);
	tf_rcache_stats_t s = stats(rc);
	CHECK(s.regions == 0 && s.cached_bytes == 0 && s.pinned_bytes == 0 &&
	      s.reg_failures == 1);
	/* With idle regions cached, a pinning failure evicts them and the
	 * retry succeeds. */
	for (int i = 0; i < 3; i++) {
		CHECK_OK(tf_rcache_get(rc, buf + i * page, 64, RW, &r));
		CHECK_OK(tf_rcache_put(rc, r));
	}
	atomic_store(&fail_if_live, 3);
	atomic_store(&fail_with, -ENOMEM);
	CHECK_OK(tf_rcache_get(rc, buf + 5 * page, 64, RW, &r));
	CHECK(stats(rc).evictions == 3);
	CHECK(atomic_load(&live) == 1);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(buf, 8 * page);
}

static void test_fork(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_AUTO, 1 << 30, 100, false);
	char *buf = map(page);
	tf_rcache_reg_t *r;
	int status;
	pid_t pid;

	CHECK_OK(tf_rcache_get(rc, buf, page, RW, &r));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		tf_rcache_reg_t *c;

		if (tf_rcache_get(rc, buf, page, RW, &c) != -TF_EFORK ||
		    tf_rcache_put(rc, r) != -TF_EFORK ||
		    tf_rcache_invalidate(rc, buf, page) != -TF_EFORK)
			_exit(1);
		tf_rcache_destroy(rc);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	       "the child could use the parent's cache");
	/* The parent is unaffected. */
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK_OK(tf_rcache_get(rc, buf, page, RW, &r));
	CHECK(stats(rc).hits == 1);
	CHECK_OK(tf_rcache_put(rc, r));
	finish(rc);
	munmap(buf, page);
}

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void test_random_bounds(void)
{
	const uint64_t max_bytes = 32 * page, max_regions = 12;
	tf_rcache_t *rc =
		make(TF_RCACHE_MONITOR_AUTO, max_bytes, max_regions, false);
	size_t len = 64 * page;
	char *buf = map(len);
	tf_rcache_reg_t *held[8] = {0};

	for (int i = 0; i < 20000; i++) {
		unsigned slot = rnd() % 8;
		tf_rcache_stats_t s;

		if (held[slot]) {
			CHECK_OK(tf_rcache_put(rc, held[slot]));
			held[slot] = NULL;
		} else {
			size_t off = rnd() % (len - 1);
			size_t n = 1 + rnd() % (8 * page);
			unsigned acc = (rnd() & 1) ? RR : RW;

			if (off + n > len)
				n = len - off;
			CHECK_OK(tf_rcache_get(rc, buf + off, n, acc,
					       &held[slot]));
			CHECK(tf_rcache_reg_addr(held[slot]) <=
			      (void *)(buf + off));
			CHECK((char *)tf_rcache_reg_addr(held[slot]) +
				      tf_rcache_reg_length(held[slot]) >=
			      buf + off + n);
		}
		if (!(rnd() % 500))
			tf_rcache_invalidate(rc, buf + rnd() % len, page);
		s = stats(rc);
		CHECKF(s.regions <= max_regions && s.cached_bytes <= max_bytes,
		       "bounds exceeded: %llu regions, %llu bytes",
		       (unsigned long long)s.regions,
		       (unsigned long long)s.cached_bytes);
		/* Live registrations: the cached ones plus at most the held
		 * ones. */
		CHECK(atomic_load(&live) <= (long)(max_regions + 8));
	}
	for (int i = 0; i < 8; i++)
		if (held[i])
			CHECK_OK(tf_rcache_put(rc, held[i]));
	finish(rc);
	munmap(buf, len);
}

struct hammer {
	tf_rcache_t *rc;
	char *buf;
	size_t len;
	unsigned seed;
	int iters;
	int fail;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	unsigned s = h->seed;

	for (int i = 0; i < h->iters && !h->fail; i++) {
		size_t off, n;
		tf_rcache_reg_t *r;

		s = s * 1103515245u + 12345u;
		off = (s >> 8) % 16 * (size_t)page;
		n = 1 + (s >> 4) % (size_t)(2 * page);
		if (tf_rcache_get(h->rc, h->buf + off, n, RW, &r)) {
			h->fail = 1;
			break;
		}
		if ((char *)tf_rcache_reg_addr(r) > h->buf + off ||
		    (char *)tf_rcache_reg_addr(r) + tf_rcache_reg_length(r) <
			    h->buf + off + n)
			h->fail = 2;
		if (!(s % 97))
			tf_rcache_invalidate(h->rc, h->buf + off, 1);
		if (tf_rcache_put(h->rc, r))
			h->fail = 3;
	}
	return NULL;
}

/* Replace pages under the hammering threads: monitor events arrive while
 * lookups, misses and evictions run (the fake ops never touch memory). */
static void *remap_thread(void *arg)
{
	struct hammer *h = arg;
	unsigned s = h->seed;

	for (int i = 0; i < h->iters; i++) {
		size_t off;

		s = s * 1103515245u + 12345u;
		off = (s >> 8) % 20 * (size_t)page;
		if (mmap(h->buf + off, page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
			 0) != h->buf + off)
			h->fail = 5;
	}
	return NULL;
}

static void test_threads(void)
{
	tf_rcache_t *rc = make(TF_RCACHE_MONITOR_AUTO, 12 * page, 8, false);
	size_t len = 20 * page;
	char *buf = map(len);
	struct hammer h[5];
	pthread_t t[5];
	tf_rcache_stats_t s;

	for (int i = 0; i < 5; i++) {
		h[i] = (struct hammer){
			rc, buf, len, 1234u * (i + 1), i < 4 ? 20000 : 2000, 0};
		CHECK(!pthread_create(&t[i], NULL,
				      i < 4 ? hammer_thread : remap_thread,
				      &h[i]));
	}
	for (int i = 0; i < 5; i++) {
		CHECK(!pthread_join(t[i], NULL));
		CHECKF(!h[i].fail, "thread %d failed (%d)", i, h[i].fail);
	}
	s = stats(rc);
	CHECK(s.hits + s.misses == 80000);
	CHECK(s.regions <= 8 && s.cached_bytes <= (uint64_t)12 * page);
	tf_test_info("threads: %llu hits, %llu misses, %llu evictions, %llu "
		     "invalidations, %llu monitor events",
		     (unsigned long long)s.hits, (unsigned long long)s.misses,
		     (unsigned long long)s.evictions,
		     (unsigned long long)s.invalidations,
		     (unsigned long long)s.monitor_events);
	finish(rc);
	munmap(buf, len);
}

/* Threads that malloc, register, and free large blocks (each free is an
 * munmap, so each blocks until the monitor reads its event) while others
 * hit and miss: nothing may hang (the monitor takes no lock that a thread
 * inside free() could hold) and every region covers what was asked. */
static void *storm_thread(void *arg)
{
	struct hammer *h = arg;
	unsigned s = h->seed;

	for (int i = 0; i < h->iters && !h->fail; i++) {
		/* Odd rounds unmap directly: some allocators (a sanitizer's)
		 * keep freed blocks mapped. */
		bool use_mmap = i & 1;
		size_t len;
		tf_rcache_reg_t *r;
		char *p;

		s = s * 1103515245u + 12345u;
		len = (128u << 10) + (s >> 8) % (384u << 10);
		p = use_mmap ? mmap(NULL, len, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
			     : malloc(len);
		if (!p || p == MAP_FAILED) {
			h->fail = 6;
			break;
		}
		p[0] = p[len - 1] = 1;
		if (tf_rcache_get(h->rc, p + 100, len - 200, RW, &r)) {
			h->fail = 7;
		} else {
			if ((char *)tf_rcache_reg_addr(r) > p + 100 ||
			    (char *)tf_rcache_reg_addr(r) +
					    tf_rcache_reg_length(r) <
				    p + len - 100)
				h->fail = 8;
			tf_rcache_put(h->rc, r);
		}
		if (use_mmap)
			munmap(p, len);
		else
			free(p);
	}
	return NULL;
}

static void test_free_storm(void)
{
	struct tf__rcache_config cfg = {64u << 20, 64, TF_RCACHE_MONITOR_UFFD,
					false};
	size_t len = 20 * page;
	struct hammer h[4];
	tf_rcache_stats_t s;
	pthread_t t[4];
	tf_rcache_t *rc;
	char *buf;

	if (tf__rcache_create(&fake_ops, NULL, &cfg, &rc))
		return; /* reported by test_monitor_op */
	buf = map(len);
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){
			rc, buf, len, 777u * (i + 1), i < 3 ? 1000 : 20000, 0};
		CHECK(!pthread_create(&t[i], NULL,
				      i < 3 ? storm_thread : hammer_thread,
				      &h[i]));
	}
	for (int i = 0; i < 4; i++) {
		CHECK(!pthread_join(t[i], NULL));
		CHECKF(!h[i].fail, "thread %d failed (%d)", i, h[i].fail);
	}
	s = stats(rc);
	CHECK(s.monitor_events > 0);
	tf_test_info("free storm: %llu monitor events, %llu invalidations",
		     (unsigned long long)s.monitor_events,
		     (unsigned long long)s.invalidations);
	finish(rc);
	munmap(buf, len);
}

int main(void)
{
	tf_test_begin("rcache_unit");
	page = sysconf(_SC_PAGESIZE);
	/* Large blocks come from mmap and the threshold stays put, so that
	 * free() unmaps them (see OP_FREE). */
	mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	test_hits_and_access();
	test_bounds_and_in_use();
	test_explicit_invalidation();
	for (int op = OP_MUNMAP; op <= OP_FREE; op++)
		test_monitor_op((enum op)op);
	test_monitor_held();
	test_check_mode();
	test_shared_memory(false);
	test_shared_memory(true);
	test_reg_failure();
	test_fork();
	test_random_bounds();
	test_threads();
	test_free_storm();
	return tf_test_end();
}
