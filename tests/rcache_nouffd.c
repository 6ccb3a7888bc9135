/* SPDX-License-Identifier: MIT */
/*
 * rcache_nouffd.c - the cache where userfaultfd is refused (as in
 * containers whose seccomp profile blocks it): TOLLFREE_RCACHE_MONITOR=uffd
 * makes tf_rcache_create() fail with -ENOTSUP, "auto" falls back to
 * explicit invalidation (and says so in its stats), and explicit
 * invalidation keeps the cache correct.  Runs in a forked child that
 * installs a seccomp filter returning EPERM for userfaultfd(2).
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tf_test.h"

#define RW (TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE)

static int block_userfaultfd(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -errno;
	return 0;
}

static void child(void)
{
	tf_rcache_params_t auto_p = {.field_mask = TF_RCACHE_PARAM_MONITOR,
				     .monitor = TF_RCACHE_MONITOR_AUTO};
	size_t len = 8 * (size_t)sysconf(_SC_PAGESIZE);
	tf_rcache_stats_t s, s0;
	tf_rcache_reg_t *r;
	tf_context_t *ctx;
	tf_rcache_t *rc;
	tf_pd_t *pd;
	char *buf;
	int ret;

	ret = block_userfaultfd();
	if (ret)
		tf_test_skip("cannot install a seccomp filter: %s",
			     strerror(-ret));
	CHECK(syscall(SYS_userfaultfd, 0) < 0 && errno == EPERM);
	/* The environment is read when the first context opens. */
	setenv("TOLLFREE_RCACHE_MONITOR", "uffd", 1);
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_pd_create(ctx, &pd));
	CHECK_ERR(tf_rcache_create(pd, NULL, &rc), -ENOTSUP);
	CHECK_OK(tf_rcache_create(pd, &auto_p, &rc));
	CHECK_OK(tf_rcache_query_stats(rc, &s));
	CHECK(s.monitor == TF_RCACHE_MONITOR_NONE);

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED);
	memset(buf, 1, len);
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK_OK(tf_rcache_put(rc, r));
	CHECK(tf_rcache_invalidate(rc, buf, len) == 1);
	CHECK(!munmap(buf, len));
	CHECK(mmap(buf, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == buf);
	memset(buf, 2, len);
	CHECK_OK(tf_rcache_query_stats(rc, &s0));
	CHECK_OK(tf_rcache_get(rc, buf, len, RW, &r));
	CHECK_OK(tf_rcache_query_stats(rc, &s));
	CHECK(s.misses == s0.misses + 1 && s.hits == s0.hits);
	CHECK_OK(tf_rcache_put(rc, r));
	tf_rcache_destroy(rc);
	CHECK_OK(tf_pd_destroy(pd));
	tf_context_close(ctx);
	munmap(buf, len);
	exit(tf_test_end());
}

int main(void)
{
	int status;
	pid_t pid;

	tf_test_begin("rcache_nouffd");
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0)
		child();
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status));
	return WEXITSTATUS(status);
}
