/* SPDX-License-Identifier: MIT */
/*
 * conf_session_many: many short sessions in a row leave pinned bytes,
 * file descriptors and RSS flat, on both sides.  Each session: the server
 * rents a slice and exposes it (EXPOSE message); the client WRITEs 64
 * bytes and READs them back; both close (revocation included).  Sessions
 * reuse the kept connection, except every 64th, which asks for a new one
 * (and so also exercises connection setup and teardown).  The first
 * tenth of the sessions (at least 1000) warms up; the resources are
 * sampled after it and at the end.
 *
 * TF_TEST_SESSIONS overrides the number of sessions (default 100,000:
 * 30-45 s per transport on a 2-core machine at load 12, 0.3-0.45 ms a
 * session; 300 on other providers: rxe in an emulated guest).
 *
 * The sessions after the warm-up stop early once they took
 * TF_TEST_SECONDS (default 50; never before 20,000 of them), so that a
 * loaded machine does not run into the watchdog (110 s): with two other
 * processes busy on both cores a soft tcp session took 0.67 ms, and with
 * a benchmark running beside them as well the 100,000 took longer than
 * the watchdog.  Side A decides, every 1,000 sessions, and tells B; the
 * figures say how many ran.
 */
#include <dirent.h>
#include <malloc.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "session_util.h"

#define MAX_FDS 256

struct sample {
	uint64_t pinned;
	long fds, rss, anon, shmem;
	long wake_fds; /* tf_context_stats_t.wake_fds, not in fds */
	long qcache; /* tf_context_stats_t.queue_cache_bytes, not in heap_used */
	/* malloc, all arenas: bytes handed out and not freed; bytes it
	 * holds from the system (used or kept free for reuse). */
	long heap_used, heap_held;
	char what[MAX_FDS][64]; /* readlink of each fd, for a report */
};

/* A field of /proc/self/status in bytes ("VmRSS:", "RssAnon:"). */
static long status_bytes(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	size_t fl = strlen(field);
	char line[256];
	long kb = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl))
			kb = strtol(line + fl, NULL, 10);
	fclose(f);
	return kb * 1024;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	long n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/*
 * A connection whose QP was destroyed may stay open in the transport for
 * a while (the soft tcp transport drains and closes it in later progress
 * calls, within 2 s), and the soft shm transport lets a peer context it
 * kept go at a liveness sweep (one progress call in 64) once it is gone.
 * Make progress until the fd count has been the same for 100 ms and 256
 * calls, so that a sample never counts a descriptor on its way out: a
 * leaked fd does not go away by making progress.
 */
static long settled_fds(struct tf_pair *p)
{
	long last = fds();
	double t0 = now_s(), same = t0;
	int calls = 0;

	while (now_s() - t0 < 3.0 && (now_s() - same < 0.1 || calls < 256)) {
		long n;

		CHECK_OK(tf_context_progress(p->ctx));
		calls++;
		usleep(500);
		n = fds();
		if (n != last) {
			last = n;
			same = now_s();
			calls = 0;
		}
	}
	return last;
}

/* What each open fd is (socket:[inode], anon_inode:[eventfd], ...). */
static void fd_list(struct sample *s)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int i = 0;

	memset(s->what, 0, sizeof(s->what));
	if (!d)
		return;
	while ((e = readdir(d)) && i < MAX_FDS) {
		char path[300];
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, s->what[i], sizeof(s->what[i]) - 1);
		if (n > 0)
			i++;
	}
	closedir(d);
}

/* The kinds of fd that @a holds more of than @b (fds of one kind share a
 * name: every eventfd is anon_inode:[eventfd]), each said once. */
static int fd_count(const struct sample *s, const char *what)
{
	int n = 0;

	for (int i = 0; i < MAX_FDS && s->what[i][0]; i++)
		n += !strcmp(s->what[i], what);
	return n;
}

static void fd_diff(const char *label, const struct sample *a,
		    const struct sample *b)
{
	for (int i = 0; i < MAX_FDS && a->what[i][0]; i++) {
		int na = fd_count(a, a->what[i]), nb = fd_count(b, a->what[i]);
		bool first = true;

		for (int j = 0; j < i && first; j++)
			first = strcmp(a->what[j], a->what[i]) != 0;
		if (first && na > nb)
			tf_test_info("%s: %s (%d against %d)", label,
				     a->what[i], na, nb);
	}
}

/* What malloc holds: see struct sample (0, 0 without glibc). */
static void heap(long *used, long *held)
{
#if defined(__GLIBC__)
	struct mallinfo2 mi = mallinfo2();

	*used = (long)(mi.uordblks + mi.hblkhd);
	*held = (long)(mi.arena + mi.hblkhd);
#else
	*used = *held = 0;
#endif
}

static void sample(struct tf_pair *p, struct sample *s)
{
	tf_context_stats_t cs;

	s->fds = settled_fds(p);
	fd_list(s);
	CHECK_OK(tf_context_query_stats(p->ctx, &cs));
	/* A peer's eventfd (soft shm: its context's, or a CQ's) is taken
	 * the first time this side wakes it, which may come after the
	 * warm-up, and is closed with the peer or the connection: held per
	 * peer and per connection, not per session, so not counted here. */
	s->fds -= (long)cs.wake_fds;
	s->wake_fds = (long)cs.wake_fds;
	s->pinned = cs.pinned_bytes;
	heap(&s->heap_used, &s->heap_held);
	/* The soft provider keeps the queue memory of a few destroyed QPs
	 * and CQs for new ones (bounded, TOLLFREE_SOFT_QUEUE_CACHE): how
	 * many it holds at a sample depends on the order of connections'
	 * ends and the stock's refills, not on the number of sessions. */
	s->qcache = (long)cs.queue_cache_bytes;
	s->heap_used -= s->qcache;
	/* malloc keeps freed pages for reuse: how many depends on the
	 * order of frees, which the load changes.  Give them back first,
	 * so that RSS counts the pages in use (see main: one arena). */
#if defined(__GLIBC__)
	malloc_trim(0);
#endif
	s->rss = status_bytes("VmRSS:");
	s->anon = status_bytes("RssAnon:");
	s->shmem = status_bytes("RssShmem:");
}

/*
 * Before the first sample, each side sleeps once in tf_session_wait while
 * the other sends to it: a peer that finds this side asleep keeps a
 * descriptor to wake it with (the soft shm transport duplicates this
 * side's wake eventfd, once per peer process), which must not show up
 * between the samples as a leak.
 */
static void wake_each_other(struct tf_pair *p, tf_session_t *s)
{
	int b;

	CHECK_OK(tf_session_rent(s, 64, &b, NULL));
	for (int r = 0; r < 2; r++) {
		bool sleeper = (r == 0) == (p->side == TF_SIDE_B);
		struct tf_wc wc;

		if (sleeper) {
			CHECK_OK(tf_session_recv(s, b, 0, 64, 100));
			tf_test_sync(p);
			CHECK(tf_session_wait(s, 1, &wc,
					      10 * tf_test_timeout_ms()) == 1);
			CHECK(wc.wr_id == 100 && wc.status == TF_WC_SUCCESS);
		} else {
			tf_test_sync(p);
			/* Well past the sleeper's spin. */
			usleep(100000);
			CHECK_OK(tf_session_send(s, b, 0, 8, 101));
			st_expect(s, 101, TF_WC_SUCCESS, NULL);
		}
	}
}

int main(void)
{
	const char *e = getenv("TF_TEST_SESSIONS");
	const char *es = getenv("TF_TEST_SECONDS");
	double budget_s = 50.0;
	int n, warm;
	static struct sample s0, s1;
	struct tf_pair p;
	tf_node_t *node;
	tf_listener_t *l = NULL;
	uint16_t port = 0;
	double t0 = 0;

#if defined(__GLIBC__)
	/* One malloc arena for all threads, so that RSS shows what is in
	 * use: with one per thread, the top of the node's stock thread's
	 * arena (where it makes connections that the main thread frees)
	 * keeps up to ~600 KiB of freed pages that malloc_trim does not
	 * give back, more or less depending on the load. */
	mallopt(M_ARENA_MAX, 1);
#endif
	tf_test_begin("conf_session_many");
	if (es) {
		char *end;

		budget_s = strtod(es, &end);
		CHECKF(end != es && !*end && budget_s > 0,
		       "TF_TEST_SECONDS='%s': expected a positive number", es);
	}
	tf_test_pair_open(&p);
	/* On rxe in an emulated guest a session takes ~50-100 ms. */
	if (e)
		n = atoi(e);
	else
		n = strcmp(tf_context_provider(p.ctx), "soft") ? 300 : 100000;
	/* Pages of pool slices and provider rings are touched for the
	 * first time during the first few hundred sessions. */
	warm = n / 10;
	if (warm < 1000)
		warm = n > 2000 ? 1000 : n / 2;
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B) {
		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(&p, tf_listener_port(l));
	} else {
		port = (uint16_t)tf_test_recv_u64(&p);
	}
	for (int i = 0; i < n; i++) {
		tf_session_t *s;
		uint8_t *m;
		int b, x;

		if (i > warm && (i - warm) % 1000 == 0 && i - warm >= 20000) {
			bool stop;

			if (p.side == TF_SIDE_A) {
				stop = now_s() - t0 > budget_s;
				tf_test_send_u64(&p, stop);
			} else {
				stop = tf_test_recv_u64(&p) != 0;
			}
			if (stop) {
				n = i;
				break;
			}
		}
		if (i == warm) {
			/* The connection stock refills in the background:
			 * sample with it full, as at the end. */
			st_stock_settle(node);
			sample(&p, &s0);
			/* Neither side starts the next session (or, at the
			 * end, destroys its listener, which ends the client's
			 * kept connection) while the other samples. */
			tf_test_sync(&p);
			t0 = now_s();
		}
		if (p.side == TF_SIDE_B) {
			s = st_accept(l, 0);
			/* A connection keeps its session fd (an epoll set)
			 * once made, for its next sessions; made by every
			 * session here, so that each kept connection has it
			 * at both samples, whether its waits slept or not. */
			CHECK(tf_session_fd(s) >= 0);
			CHECK_OK(tf_session_rent(s, 256, &b, (void **)&m));
			CHECK_OK(tf_session_expose(
				s, b, 0, 256,
				TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE,
				&x));
			if (i == warm - 1)
				wake_each_other(&p, s);
			CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
			CHECK_FILL(m, 64, (uint32_t)i);
		} else {
			tf_session_params_t sp = {
				.field_mask = TF_SESSION_PARAM_FLAGS,
				.flags =
					i % 64 == 63 ? TF_SESSION_NO_REUSE : 0};

			CHECK_OK(tf_session_connect(node, st_host(), port, &sp,
						    &s));
			CHECK(tf_session_fd(s) >= 0);
			CHECK_OK(tf_session_wait_peer(
				s, 1, 4 * tf_test_timeout_ms()));
			CHECK_OK(tf_session_rent(s, 128, &b, (void **)&m));
			tf_test_fill(m, 64, (uint32_t)i);
			CHECK_OK(tf_session_write(s, b, 0, 0, 0, 64, 1));
			st_expect(s, 1, TF_WC_SUCCESS, NULL);
			CHECK_OK(tf_session_read(s, b, 64, 0, 0, 64, 2));
			st_expect(s, 2, TF_WC_SUCCESS, NULL);
			CHECK_FILL(m + 64, 64, (uint32_t)i);
			if (i == warm - 1)
				wake_each_other(&p, s);
		}
		tf_session_close(s);
	}
	st_stock_settle(node);
	sample(&p, &s1);
	tf_test_sync(&p);
	{
		tf_node_stats_t st;

		CHECK_OK(tf_node_query_stats(node, &st));
		tf_test_info(
			"%d sessions, %.1f us each after warm-up; "
			"%llu connections made, %llu reused; pinned "
			"%llu -> %llu B, fds %ld -> %ld, RSS %ld -> %ld KiB "
			"(anon %+ld, shmem %+ld KiB); malloc: in use %+ld B, "
			"held %+ld KiB; queue cache %ld -> %ld KiB",
			n, (now_s() - t0) * 1e6 / (n - warm),
			(unsigned long long)st.qp_new,
			(unsigned long long)st.qp_reused,
			(unsigned long long)s0.pinned,
			(unsigned long long)s1.pinned, s0.fds, s1.fds,
			s0.rss / 1024, s1.rss / 1024,
			(s1.anon - s0.anon) / 1024,
			(s1.shmem - s0.shmem) / 1024,
			s1.heap_used - s0.heap_used,
			(s1.heap_held - s0.heap_held) / 1024, s0.qcache / 1024,
			s1.qcache / 1024);
		CHECK(st.windows_live == 0 && st.slices_rented == 0);
		CHECK(st.qp_reused > 0);
	}
	CHECK(s1.pinned == s0.pinned);
	if (s1.fds != s0.fds) {
		tf_test_info("peers' wake-up eventfds held (not counted): %ld, "
			     "then %ld",
			     s0.wake_fds, s1.wake_fds);
		fd_diff("fd only at the start", &s0, &s1);
		fd_diff("fd only at the end", &s1, &s0);
	}
	CHECK(s1.fds == s0.fds);
	/* The peers' wake-up eventfds left out above are taken per peer and
	 * per connection (at most three a connection): a few more after the
	 * run than after the warm-up, never one a session. */
	CHECKF(s1.wake_fds - s0.wake_fds <= 16,
	       "%ld peer wake-up eventfds more after %d sessions",
	       s1.wake_fds - s0.wake_fds, n);
	/*
	 * No per-session leak.  What malloc has handed out and not got back
	 * (less the soft provider's queue cache, see sample()) is within 64
	 * KiB at both samples: a leak of one 32-byte block every 40
	 * sessions would exceed it.  Anonymous and shared memory
	 * resident (freed pages given back to the system first, see
	 * sample()) grew by at most 512 KiB, which 6 bytes a session would
	 * exceed: it catches memory mapped outside malloc (the soft
	 * provider's rings and tables, stacks) too.  Not the whole RSS: on
	 * verbs it counts the device's queues mapped from the uverbs file,
	 * which come and go with connections and the stock; under siw and
	 * rxe in the guest it moved by -900 to +600 KiB between samples
	 * while anonymous memory moved by less than 250.
	 */
#if TF_TEST_SANITIZER
	/* Shadow memory and quarantine grow RSS by design; LeakSanitizer
	 * checks for leaks in the ASan build instead. */
	tf_test_info("sanitizer build: RSS not checked");
#else
	CHECKF(s1.heap_used - s0.heap_used <= 64 * 1024,
	       "memory in use from malloc grew by %ld B",
	       s1.heap_used - s0.heap_used);
	CHECKF(s1.anon + s1.shmem - s0.anon - s0.shmem <= 512 * 1024,
	       "anonymous and shared RSS grew by %ld KiB (malloc holds %+ld "
	       "KiB)",
	       (s1.anon + s1.shmem - s0.anon - s0.shmem) / 1024,
	       (s1.heap_held - s0.heap_held) / 1024);
#endif
	if (l)
		tf_listener_destroy(l);
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
