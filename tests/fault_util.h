/* SPDX-License-Identifier: MIT */
/*
 * fault_util.h - helpers shared by the fault and soak tests (header only),
 * whose clock, fd count and shm sides serve other tests too (soft_shm_*):
 * resource counters of this process (fds, threads, RSS) and peers that run
 * as separate programs.  A peer is this same executable started again
 * through /proc/self/exe with "peer" arguments, so that it begins with a
 * fresh address space and opens its own context (a forked child would
 * inherit the parent's context, which the library refuses to use).
 */
#ifndef TF_FAULT_UTIL_H
#define TF_FAULT_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tf_test.h"

static inline uint64_t ft_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One soft-provider context over shm with a PD, a CQ and @buf (@len
 * bytes) registered for local writes: a side of the shm transport's unit
 * tests, which connect QPs between two such contexts of one process. */
static inline void ft_shm_side_open(tf_context_t **ctx, tf_pd_t **pd,
				    tf_cq_t **cq, void *buf, size_t len,
				    tf_mr_t **mr)
{
	tf_context_params_t cp = {
		.field_mask =
			TF_CONTEXT_PARAM_PROVIDER | TF_CONTEXT_PARAM_TRANSPORT,
		.provider = "soft",
		.transport = "shm",
	};

	CHECK_OK(tf_context_open(&cp, ctx));
	CHECK_OK(tf_pd_create(*ctx, pd));
	CHECK_OK(tf_cq_create(*ctx, NULL, cq));
	CHECK_OK(tf_mr_reg(*pd, buf, len, TF_ACCESS_LOCAL_WRITE, mr));
}

/* Undo ft_shm_side_open, its QPs already destroyed. */
static inline void ft_shm_side_close(tf_context_t *ctx, tf_pd_t *pd,
				     tf_cq_t *cq, tf_mr_t *mr)
{
	tf_mr_dereg(mr);
	tf_cq_destroy(cq);
	tf_pd_destroy(pd);
	tf_context_close(ctx);
}

/* One completion on @cq of context @self, making progress on @self and
 * @other (the two sides of one process) until it comes, for at most
 * @bound_ms. */
static inline void ft_shm_wait_wc(tf_cq_t *cq, tf_context_t *self,
				  tf_context_t *other, struct tf_wc *wc,
				  uint64_t bound_ms)
{
	uint64_t end = ft_now_ms() + bound_ms;

	for (;;) {
		int n = tf_cq_poll(cq, 1, wc);

		CHECK(n >= 0);
		if (n)
			return;
		tf_context_progress(self);
		tf_context_progress(other);
		CHECKF(ft_now_ms() < end, "no completion");
	}
}

/*
 * Milliseconds the calling thread has spent runnable but waiting for a
 * CPU (the second field of /proc/thread-self/schedstat), 0 where the
 * kernel does not tell.  A bound on how long a call takes may leave this
 * out: on a loaded machine a thread woken in time can wait seconds for a
 * CPU, which is the machine's delay, not the library's; a call that
 * sleeps too long, or spins, is still caught.
 */
static inline uint64_t ft_cpu_wait_ms(void)
{
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	unsigned long long wait = 0;
	char line[128], *p, *end;

	if (!f)
		return 0;
	/* "run_ns wait_ns slices": the second field. */
	if (fgets(line, sizeof(line), f)) {
		errno = 0;
		(void)strtoull(line, &p, 10);
		wait = strtoull(p, &end, 10);
		if (errno || end == p)
			wait = 0;
	}
	fclose(f);
	return wait / 1000000;
}

/* Open file descriptors of this process (the directory's own excluded). */
static inline int ft_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* Print what each open file descriptor is (for a failure message). */
static inline void ft_dump_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[300], target[256];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		target[n < 0 ? 0 : n] = 0;
		tf_test_info("fd %s -> %s", e->d_name, target);
	}
	closedir(d);
}

/* A numeric field of /proc/self/status ("Threads", "VmRSS"), -1 if absent. */
static inline long ft_status(const char *field)
{
	char line[256];
	size_t fl = strlen(field);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl) && line[fl] == ':') {
			v = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/*
 * Start this executable again as a peer: argv = {exe, "peer", a1, a2, a3,
 * notify-fd}.  The peer reports progress by writing to the pipe whose read
 * end lands in *@rfd_p.  Returns the pid.
 */
static inline pid_t ft_spawn(const char *a1, const char *a2, const char *a3,
			     int *rfd_p)
{
	int fds[2];
	pid_t pid;

	CHECK(!pipe(fds));
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char wfd[16];

		close(fds[0]);
		/* A peer never outlives the test. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(wfd, sizeof(wfd), "%d", fds[1]);
		execl("/proc/self/exe", "peer", "peer", a1, a2, a3, wfd,
		      (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	*rfd_p = fds[0];
	return pid;
}

/* Reap completions of @s until the peer closed it or it broke, for at most
 * @ms milliseconds; unlike st_serve (session_util.h) a peer that never
 * closes is not a failure here: fault peers must outlive a stuck case. */
static inline void ft_wait_peer_close(tf_session_t *s, uint64_t ms)
{
	for (uint64_t t0 = ft_now_ms(); ft_now_ms() - t0 < ms;) {
		struct tf_wc wc[4];
		int st;

		tf_session_wait(s, 4, wc, 10);
		st = tf_session_state(s);
		if (st == TF_SESSION_PEER_CLOSED || st == TF_SESSION_BROKEN)
			return;
	}
}

/* Read one u64 from a peer's pipe within @ms; false on timeout or EOF. */
/* A peer's server: accept sessions forever, expose @len rented bytes
 * with @rights to each and serve it until the client closes (or @wait_ms
 * passed).  The peer is killed when the test is done. */
static inline _Noreturn void ft_serve_forever(tf_listener_t *l, size_t len,
					      unsigned rights, uint64_t wait_ms)
{
	for (;;) {
		tf_session_t *s;
		int b, x;

		if (tf_listener_accept(l, NULL, 1000, &s))
			continue;
		if (!tf_session_rent(s, len, &b, NULL))
			tf_session_expose(s, b, 0, len, rights, &x);
		ft_wait_peer_close(s, wait_ms);
		tf_session_close(s);
	}
}

/* Run @fn(@port) in a forked child (which must exit) and return its exit
 * status; a child killed by a signal fails the test. */
static inline int ft_fork_wait(void (*fn)(uint16_t), uint16_t port)
{
	int status;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		fn(port);
		_exit(1); /* fn must exit with the test's status */
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECKF(WIFEXITED(status), "child killed by signal %d",
	       WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return WEXITSTATUS(status);
}

static inline bool ft_recv(int fd, uint64_t *v, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	if (poll(&pfd, 1, ms) != 1)
		return false;
	return read(fd, v, sizeof(*v)) == (ssize_t)sizeof(*v);
}

/* Peer side: report @v to the parent. */
static inline void ft_send(int fd, uint64_t v)
{
	CHECK(write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
}

/* Kill @pid (if @sig) and reap it; returns the wait status. */
static inline int ft_reap(pid_t pid, int sig)
{
	int status = 0;

	if (sig)
		kill(pid, sig);
	CHECK(waitpid(pid, &status, 0) == pid);
	return status;
}

#endif /* TF_FAULT_UTIL_H */
