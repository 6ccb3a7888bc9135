/* SPDX-License-Identifier: MIT */
/*
 * rcache_shared.c - the registration cache never serves a registration
 * whose pages were replaced without a monitor event (issue 14, item 6).
 *
 * Shared and file-backed memory can change under a registration with no
 * userfaultfd event: fallocate(PUNCH_HOLE) of a memfd, ftruncate shrink
 * and grow, madvise(MADV_REMOVE) by another process mapping the same
 * MAP_SHARED anonymous region, a truncation under a private (copy-on-write)
 * memfd mapping, truncation of a file on disk.  After each, a get of the
 * same range must not return the old registration, whether the first one
 * was put back (idle) or is still held.  Private anonymous memory is still
 * cached.  Every case runs with the monitor and without it (where
 * explicit invalidation would not help: the application sees no unmap),
 * and with the pagemap check as a second judge: it must never find a
 * stale hit.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"

#define RW  (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)
#define LEN (16 * 4096)

static tf_context_t *ctx;
static tf_pd_t *pd;

enum kind {
	K_PRIVATE_ANON, /* the control: cached */
	K_MEMFD_PUNCH,
	K_MEMFD_TRUNCATE,
	K_SHARED_ANON_REMOVE,
	K_PRIVATE_MEMFD_TRUNCATE,
	K_FILE_TRUNCATE,
	K_COUNT
};

static const char *const kind_names[] = {
	"private anonymous (control)",
	"memfd MAP_SHARED, fallocate(PUNCH_HOLE)",
	"memfd MAP_SHARED, ftruncate shrink + grow",
	"MAP_SHARED|MAP_ANONYMOUS, madvise(MADV_REMOVE) by another process",
	"memfd MAP_PRIVATE written, ftruncate shrink + grow",
	"file on disk MAP_SHARED, ftruncate shrink + grow",
};

struct mem {
	char *buf;
	int fd;
	pid_t helper; /* K_SHARED_ANON_REMOVE: the other process */
	int go[2];    /* pipe that tells it to remove the pages */
};

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

/* PROCMAP_QUERY (Linux 6.11) tells a private file mapping whose pages
 * were all copied on write; the pagemap used before it cannot. */
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

/* Map LEN bytes of @k, pages written; false if the host cannot. */
static bool mem_open(enum kind k, struct mem *m)
{
	int prot = PROT_READ | PROT_WRITE;

	memset(m, 0, sizeof(*m));
	m->fd = -1;
	m->helper = -1;
	switch (k) {
	case K_PRIVATE_ANON:
		m->buf = mmap(NULL, LEN, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			      0);
		break;
	case K_SHARED_ANON_REMOVE:
		m->buf = mmap(NULL, LEN, prot, MAP_SHARED | MAP_ANONYMOUS, -1,
			      0);
		CHECK(m->buf != MAP_FAILED);
		/* Forked before anything is registered, so that it maps the
		 * region (not locked in the child: it may MADV_REMOVE). */
		CHECK(!pipe(m->go));
		m->helper = fork();
		CHECK(m->helper >= 0);
		if (m->helper == 0) {
			char c;

			close(m->go[1]);
			if (read(m->go[0], &c, 1) != 1)
				_exit(2);
			_exit(madvise(m->buf, LEN, MADV_REMOVE) ? 1 : 0);
		}
		close(m->go[0]);
		break;
	case K_FILE_TRUNCATE:
		/* The test's working directory (the build tree): a real
		 * file system, where tmpfs would be a memfd again. */
		m->fd = open(".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (m->fd < 0) {
			tf_test_partial_skip_host("%s: O_TMPFILE here: %m",
						  kind_names[k]);
			return false;
		}
		CHECK(!ftruncate(m->fd, LEN));
		m->buf = mmap(NULL, LEN, prot, MAP_SHARED, m->fd, 0);
		break;
	default:
		m->fd = memfd_create("rcache_shared", MFD_CLOEXEC);
		CHECK(m->fd >= 0);
		CHECK(!ftruncate(m->fd, LEN));
		m->buf = mmap(NULL, LEN, prot,
			      k == K_PRIVATE_MEMFD_TRUNCATE ? MAP_PRIVATE
							    : MAP_SHARED,
			      m->fd, 0);
		break;
	}
	CHECK(m->buf != MAP_FAILED);
	memset(m->buf, 1, LEN);
	return true;
}

/* Replace the pages behind m->buf the way @k does, then write them. */
static void mem_replace(enum kind k, struct mem *m)
{
	int status;

	switch (k) {
	case K_PRIVATE_ANON:
		break;
	case K_MEMFD_PUNCH:
		CHECK(!fallocate(m->fd,
				 FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
				 LEN));
		break;
	case K_SHARED_ANON_REMOVE:
		CHECK(write(m->go[1], "x", 1) == 1);
		CHECK(waitpid(m->helper, &status, 0) == m->helper);
		CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		       "the other process could not MADV_REMOVE");
		m->helper = -1;
		break;
	default:
		CHECK(!ftruncate(m->fd, 0));
		CHECK(!ftruncate(m->fd, LEN));
		break;
	}
	memset(m->buf, 2, LEN);
}

static void mem_close(tf_rcache_t *rc, struct mem *m)
{
	/* The contract without a monitor (and harmless with one). */
	CHECK(tf_rcache_invalidate(rc, m->buf, LEN) >= 0);
	if (m->helper > 0) {
		close(m->go[1]);
		waitpid(m->helper, NULL, 0);
	} else if (m->go[1] > 0) {
		close(m->go[1]);
	}
	munmap(m->buf, LEN);
	if (m->fd >= 0)
		close(m->fd);
}

/* One kind, one cache: cache a registration (idle or @held), replace the
 * pages, get the same range again. */
static void run_case(tf_rcache_t *rc, enum kind k, bool held, const char *mode)
{
	tf_rcache_reg_t *r1, *r2;
	tf_rcache_stats_t s0, s1;
	struct mem m;

	if (!mem_open(k, &m))
		return;
	CHECK_OK(tf_rcache_get(rc, m.buf, LEN, RW, &r1));
	if (!held)
		CHECK_OK(tf_rcache_put(rc, r1));
	s0 = stats(rc);
	if (k == K_PRIVATE_ANON) {
		/* Still cached: the second get hits. */
		CHECK_OK(tf_rcache_get(rc, m.buf, LEN, RW, &r2));
		CHECKF(stats(rc).hits == s0.hits + 1,
		       "%s (%s): private memory is no longer cached",
		       kind_names[k], mode);
		CHECK(!held || r2 == r1);
		CHECK_OK(tf_rcache_put(rc, r2));
		goto out;
	}
	mem_replace(k, &m);
	s0 = stats(rc);
	CHECK_OK(tf_rcache_get(rc, m.buf, LEN, RW, &r2));
	s1 = stats(rc);
	CHECKF(s1.hits == s0.hits && s1.misses == s0.misses + 1 &&
		       (!held || r2 != r1),
	       "%s (%s, %s): the registration made before the pages were "
	       "replaced was served again (hits %llu -> %llu)",
	       kind_names[k], mode, held ? "held" : "idle",
	       (unsigned long long)s0.hits, (unsigned long long)s1.hits);
	CHECK(tf_rcache_reg_addr(r2) == m.buf &&
	      tf_rcache_reg_length(r2) == LEN);
	/* Shared memory is handed out uncached: nothing of it stays. */
	CHECK(s1.uncached > s0.uncached);
	CHECK_OK(tf_rcache_put(rc, r2));
	CHECK(stats(rc).regions == s1.regions);
out:
	if (held)
		CHECK_OK(tf_rcache_put(rc, r1));
	CHECK(stats(rc).stale == 0);
	mem_close(rc, &m);
}

static void run_all(int monitor, bool check, bool procmap)
{
	tf_rcache_params_t p = {
		.field_mask = TF_RCACHE_PARAM_MONITOR | TF_RCACHE_PARAM_CHECK,
		.monitor = monitor,
		.check = check,
	};
	char mode[64];
	tf_rcache_t *rc;
	int ret;

	snprintf(mode, sizeof(mode), "monitor %s%s",
		 monitor == TF_RCACHE_MONITOR_NONE ? "none" : "uffd",
		 check ? ", check" : "");
	ret = tf_rcache_create(pd, &p, &rc);
	if (ret == -ENOTSUP) {
		tf_test_partial_skip_host("%s: userfaultfd not usable here",
					  mode);
		return;
	}
	CHECK_OK(ret);
	for (int k = 0; k < K_COUNT; k++) {
		if (k == K_PRIVATE_MEMFD_TRUNCATE && !procmap)
			continue;
		for (int held = 0; held < 2; held++)
			run_case(rc, (enum kind)k, held, mode);
	}
	tf_rcache_destroy(rc);
	CHECK(ctx_pinned() == 0);
}

int main(void)
{
	bool procmap;
	tf_mr_t *mr;
	char *probe;
	int ret;

	tf_test_begin("rcache_shared");
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(probe != MAP_FAILED);
	ret = tf_mr_reg(pd, probe, 4096, RW, &mr);
	if (ret == -EOPNOTSUPP)
		tf_test_skip("provider %s cannot register memory",
			     tf_context_provider(ctx));
	CHECK_OK(ret);
	CHECK_OK(tf_mr_dereg(mr));
	munmap(probe, 4096);

	procmap = have_procmap_query();
	if (!procmap)
		tf_test_partial_skip_host("%s: needs PROCMAP_QUERY (Linux "
					  "6.11); before it, truncating a "
					  "file under a private mapping is "
					  "a documented limit",
					  kind_names[K_PRIVATE_MEMFD_TRUNCATE]);
	run_all(TF_RCACHE_MONITOR_UFFD, false, procmap);
	run_all(TF_RCACHE_MONITOR_NONE, false, procmap);
	run_all(TF_RCACHE_MONITOR_UFFD, true, procmap);

	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	return tf_test_end();
}
