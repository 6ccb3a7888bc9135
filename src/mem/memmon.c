/* SPDX-License-Identifier: MIT */
/*
 * memmon.c - the process-wide memory monitor of the registration caches,
 * built on userfaultfd.
 *
 * Which events: UFFD_FEATURE_EVENT_UNMAP (munmap, mmap(MAP_FIXED) over a
 * range, brk shrinking, mremap shrinking), EVENT_REMOVE (madvise
 * DONTNEED/REMOVE) and EVENT_REMAP (mremap moving a range away).
 *
 * How ranges are registered: UFFDIO_REGISTER_MODE_WP, and no page is ever
 * write-protected.  The non-cooperative events above are delivered for any
 * range registered with the userfaultfd, whatever the mode, while the mode
 * only decides which page faults go to user space: MODE_MISSING would send
 * every fault on a missing page (after MADV_DONTNEED, or on a page not yet
 * touched) to our thread, which would then have to fill pages with
 * UFFDIO_ZEROPAGE/COPY (wrong for file mappings) and could deadlock a
 * thread that faults while the monitor waits.  MODE_WP faults only on
 * pages that are write-protected through UFFDIO_WRITEPROTECT, which we
 * never do, so normal page faults are untouched.  (libfabric's uffd
 * monitor registers MODE_MISSING and serves the faults.)  Anonymous WP
 * needs Linux 5.7, shmem and hugetlbfs 5.19; a range that cannot be
 * registered is simply not cached.
 *
 * Deadlock freedom: the kernel blocks a thread inside munmap/madvise/mremap
 * until the monitor has read the event, and that thread may hold any lock
 * (glibc's arena lock inside free(), one of ours).  So the monitor thread
 * takes no lock, allocates nothing and does not log: it reads events and
 * writes them into a static ring with atomics.  Caches consume the ring on
 * their next call and deregister there, lazily.
 *
 * Ordering: the unmapping thread is released by our read(), before the
 * events reach the ring.  The monitor therefore makes the generation odd
 * before read() and even after publishing; a cache call that sees an odd
 * generation waits for the even one.  The kernel's wakeup is a full
 * barrier, so a thread released by the read() sees the odd generation (or
 * a later one), and its next cache call cannot miss its own event.
 *
 * Known window: the kernel removes the mapping, drops mmap_lock, and only
 * then waits for the event to be read.  Another thread that maps the same
 * address in that window and looks it up before the monitor has read the
 * event can still hit the old registration.  Within one thread (unmap,
 * map, get) the order above rules it out; across threads, call
 * tf_rcache_invalidate() before releasing the memory, or use
 * TOLLFREE_RCACHE_CHECK to detect it.  Closing it would need a syscall
 * per hit.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rcache_int.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* ------------------------------------------------------------- fork */

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mon_lock = PTHREAD_MUTEX_INITIALIZER;

static void memmon_atfork_child(void);

static void fork_prepare(void)
{
	/* Keep the monitor's registry consistent across fork. */
	pthread_mutex_lock(&mon_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&mon_lock);
}

static void fork_child(void)
{
	memmon_atfork_child();
	pthread_mutex_unlock(&mon_lock);
}

static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---------------------------------------------------------- monitor */

#define RING_SIZE  4096u /* events; a power of two */
#define READ_BATCH 64

struct ring_ent {
	atomic_ullong seq; /* event number + 1 once written, 0 while written */
	atomic_ullong start, end;
	atomic_uint unmapped;
};

atomic_ullong tf__memmon_generation;

static struct {
	/* Under mon_lock. */
	int users;
	int fd;	     /* the userfaultfd, -1 when not running */
	int stop_fd; /* eventfd that stops the thread */
	pthread_t thread;
	struct tf__itree subs; /* subscribed page ranges */
	bool failed;	       /* open failed before: do not retry */
	int fail_err;
	/* Written by the monitor thread only. */
	atomic_ullong head;
	atomic_uint lost; /* read/poll errors: events may have been lost */
	atomic_uint dead; /* the thread stopped on an error */
	struct ring_ent ring[RING_SIZE];
} mon = {.fd = -1, .stop_fd = -1};

/* Any thread (rcache misses of several threads at once, the monitor):
 * the first callers may all store the same value, so relaxed suffices,
 * but a plain static would be a data race. */
static long page_size_cached(void)
{
	static atomic_long ps;
	long v = atomic_load_explicit(&ps, memory_order_relaxed);

	if (!v) {
		v = sysconf(_SC_PAGESIZE);
		atomic_store_explicit(&ps, v, memory_order_relaxed);
	}
	return v;
}

/* Publish one event.  A seqlock per entry: readers check seq before and
 * after reading the fields. */
static void ring_push(uint64_t start, uint64_t end, bool unmapped)
{
	uint64_t seq = atomic_load_explicit(&mon.head, memory_order_relaxed);
	struct ring_ent *e = &mon.ring[seq & (RING_SIZE - 1)];

	atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&e->start, start, memory_order_relaxed);
	atomic_store_explicit(&e->end, end, memory_order_relaxed);
	atomic_store_explicit(&e->unmapped, unmapped, memory_order_relaxed);
	atomic_store_explicit(&e->seq, seq + 1, memory_order_release);
	atomic_store_explicit(&mon.head, seq + 1, memory_order_release);
}

/* Clear a write-protect fault.  We never write-protect pages, so this only
 * runs if someone else did; resolving it keeps the faulting thread going. */
static void resolve_wp_fault(int fd, uint64_t addr)
{
	struct uffdio_writeprotect wp = {0};
	uint64_t ps = (uint64_t)page_size_cached();

	wp.range.start = addr & ~(ps - 1);
	wp.range.len = ps;
	wp.mode = 0;
	(void)ioctl(fd, UFFDIO_WRITEPROTECT, &wp);
}

/* The monitor thread: poll, read, publish.  No locks, no allocation, no
 * logging (see the top of the file). */
static void *monitor_thread(void *arg)
{
	int fd = mon.fd, stop_fd = mon.stop_fd;
	struct uffd_msg msgs[READ_BATCH];

	(void)arg;
	for (;;) {
		struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN},
					{.fd = stop_fd, .events = POLLIN}};
		ssize_t n;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			/* Cannot wait any more: events may be missed from
			 * now on.  Say so, wake the caches, stop caching. */
			atomic_store(&mon.dead, 1);
			atomic_fetch_add(&mon.lost, 1);
			atomic_fetch_add(&tf__memmon_generation, 2);
			break;
		}
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		/* Odd: events may be read but not yet published. */
		atomic_fetch_add(&tf__memmon_generation, 1);
		n = read(fd, msgs, sizeof(msgs));
		for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(msgs[0]);
		     i++) {
			struct uffd_msg *m = &msgs[i];

			switch (m->event) {
			case UFFD_EVENT_UNMAP:
				ring_push(m->arg.remove.start,
					  m->arg.remove.end, true);
				break;
			case UFFD_EVENT_REMOVE:
				ring_push(m->arg.remove.start,
					  m->arg.remove.end, false);
				break;
			case UFFD_EVENT_REMAP:
				ring_push(m->arg.remap.from,
					  m->arg.remap.from + m->arg.remap.len,
					  true);
				break;
			case UFFD_EVENT_PAGEFAULT:
				resolve_wp_fault(fd, m->arg.pagefault.address);
				break;
			default:
				break;
			}
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			atomic_fetch_add(&mon.lost, 1);
		/* Even: everything read is in the ring. */
		atomic_fetch_add_explicit(&tf__memmon_generation, 1,
					  memory_order_release);
	}
	return NULL;
}

/* Lock must be held. */
static int monitor_start(void)
{
	struct uffdio_api api = {.api = UFFD_API};
	const uint64_t need = UFFD_FEATURE_EVENT_UNMAP |
			      UFFD_FEATURE_EVENT_REMOVE |
			      UFFD_FEATURE_EVENT_REMAP;
	sigset_t all, old;
	int fd, ret;

	/* User-mode-only faults suffice (we handle none) and are allowed to
	 * unprivileged processes even with vm.unprivileged_userfaultfd=0. */
	fd = (int)syscall(SYS_userfaultfd,
			  O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0 && errno == EINVAL)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		tf_log_info("rcache", "userfaultfd unavailable: %m");
		return ret == -EPERM || ret == -ENOSYS || ret == -EINVAL
			       ? -ENOTSUP
			       : ret;
	}
	api.features = need;
	if (ioctl(fd, UFFDIO_API, &api) < 0 || (api.features & need) != need) {
		tf_log_info("rcache", "userfaultfd lacks unmap/remove/remap "
				      "events: %m");
		ret = -ENOTSUP;
		goto err_close;
	}
	if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
		tf_log_info("rcache", "userfaultfd lacks write-protect mode "
				      "(Linux < 5.7)");
		ret = -ENOTSUP;
		goto err_close;
	}
	mon.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (mon.stop_fd < 0) {
		ret = -errno;
		tf_log_error("rcache", "eventfd: %m");
		goto err_close;
	}
	mon.fd = fd;
	/* The thread must never run a user's signal handler. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = -pthread_create(&mon.thread, NULL, monitor_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		tf_log_error("rcache", "cannot start the memory monitor: %s",
			     strerror(-ret));
		goto err_stop;
	}
	tf_log_debug("rcache", "userfaultfd monitor started (fd %d)", fd);
	return 0;

err_stop:
	close(mon.stop_fd);
	mon.stop_fd = -1;
	mon.fd = -1;
err_close:
	close(fd);
	return ret;
}

/* Lock must be held. */
static void monitor_stop(void)
{
	uint64_t one = 1;
	struct tf__itree_node *n;

	if (write(mon.stop_fd, &one, sizeof(one)) != sizeof(one))
		tf_log_error("rcache", "cannot stop the memory monitor: %m");
	else
		pthread_join(mon.thread, NULL);
	/* Closing the userfaultfd unregisters every range. */
	close(mon.fd);
	close(mon.stop_fd);
	mon.fd = mon.stop_fd = -1;
	while ((n = mon.subs.root)) {
		tf__itree_remove(&mon.subs, n);
		tf__free(n);
	}
}

int tf__memmon_open(void)
{
	int ret = 0;

	tf__fork_init();
	pthread_once(&fork_once, fork_register);
	pthread_mutex_lock(&mon_lock);
	if (mon.users) {
		mon.users++;
		goto out;
	}
	if (mon.failed) {
		ret = mon.fail_err;
		goto out;
	}
	ret = monitor_start();
	if (ret) {
		/* Unavailability does not change while the process runs. */
		mon.failed = ret == -ENOTSUP;
		mon.fail_err = ret;
		goto out;
	}
	mon.users = 1;
out:
	pthread_mutex_unlock(&mon_lock);
	return ret;
}

void tf__memmon_close(void)
{
	pthread_mutex_lock(&mon_lock);
	if (mon.users > 0 && --mon.users == 0)
		monitor_stop();
	pthread_mutex_unlock(&mon_lock);
}

/* In the child: the thread is gone and the child's ranges are no longer
 * registered (no UFFD_FEATURE_EVENT_FORK).  Start from scratch; the
 * registry nodes belong to the parent's bookkeeping and are dropped. */
static void memmon_atfork_child(void)
{
	if (mon.fd >= 0) {
		close(mon.fd);
		close(mon.stop_fd);
	}
	mon.fd = mon.stop_fd = -1;
	mon.users = 0;
	atomic_store(&mon.dead, 0);
	mon.subs.root = NULL;
	mon.subs.count = 0;
}

int tf__memmon_subscribe(uint64_t start, uint64_t end)
{
	uint64_t ps = (uint64_t)page_size_cached();
	struct uffdio_register reg = {0};
	struct tf__itree_node *n;
	int ret = 0;

	start &= ~(ps - 1);
	end = (end + ps - 1) & ~(ps - 1);
	n = tf__calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->start = start;
	n->end = end;
	pthread_mutex_lock(&mon_lock);
	if (mon.fd < 0 || atomic_load(&mon.dead)) {
		ret = -ENOTSUP;
		goto err_unlock;
	}
	/* Registering pages that are already registered with this
	 * userfaultfd is a no-op for the kernel. */
	reg.range.start = start;
	reg.range.len = end - start;
	reg.mode = UFFDIO_REGISTER_MODE_WP;
	if (ioctl(mon.fd, UFFDIO_REGISTER, &reg) < 0) {
		ret = -errno;
		tf_log_debug("rcache", "UFFDIO_REGISTER %#llx+%llu: %m",
			     (unsigned long long)start,
			     (unsigned long long)(end - start));
		goto err_unlock;
	}
	tf__itree_insert(&mon.subs, n);
	pthread_mutex_unlock(&mon_lock);
	return 0;

err_unlock:
	pthread_mutex_unlock(&mon_lock);
	tf__free(n);
	return ret;
}

struct gap_ctx {
	uint64_t cur, end;
	int fd;
};

static void unregister_range(int fd, uint64_t start, uint64_t end)
{
	struct uffdio_range r = {.start = start, .len = end - start};

	if (end > start)
		(void)ioctl(fd, UFFDIO_UNREGISTER, &r);
}

/* Unregister the parts of [cur, end) that no remaining subscription
 * covers; nodes arrive in start order. */
static int unregister_gap(struct tf__itree_node *n, void *arg)
{
	struct gap_ctx *g = arg;

	if (n->start > g->cur)
		unregister_range(g->fd, g->cur,
				 n->start < g->end ? n->start : g->end);
	if (n->end > g->cur)
		g->cur = n->end;
	return g->cur >= g->end;
}

struct find_ctx {
	uint64_t start, end;
	struct tf__itree_node *found;
};

static int find_exact(struct tf__itree_node *n, void *arg)
{
	struct find_ctx *x = arg;

	if (n->start != x->start || n->end != x->end)
		return 0;
	x->found = n;
	return 1;
}

void tf__memmon_unsubscribe(uint64_t start, uint64_t end, bool unmapped)
{
	uint64_t ps = (uint64_t)page_size_cached();
	struct tf__itree_node *found;
	struct find_ctx x;
	struct gap_ctx g;

	start &= ~(ps - 1);
	end = (end + ps - 1) & ~(ps - 1);
	pthread_mutex_lock(&mon_lock);
	if (mon.fd < 0)
		goto out;
	/* Find one subscription with exactly this range. */
	x.start = start;
	x.end = end;
	x.found = NULL;
	tf__itree_foreach(&mon.subs, start, start + 1, find_exact, &x);
	found = x.found;
	if (!found)
		goto out;
	tf__itree_remove(&mon.subs, found);
	tf__free(found);
	/* Unmapped pages are no longer registered (and may belong to a new
	 * mapping that is not ours). */
	if (unmapped)
		goto out;
	g.cur = start;
	g.end = end;
	g.fd = mon.fd;
	tf__itree_foreach(&mon.subs, start, end, unregister_gap, &g);
	if (g.cur < end)
		unregister_range(g.fd, g.cur, end);
out:
	pthread_mutex_unlock(&mon_lock);
}

uint64_t tf__memmon_wait_published(void)
{
	uint64_t g;

	while ((g = tf__memmon_gen()) & 1)
		sched_yield();
	return g;
}

unsigned tf__memmon_errors(void)
{
	return atomic_load_explicit(&mon.lost, memory_order_acquire);
}

uint64_t tf__memmon_head(void)
{
	return atomic_load_explicit(&mon.head, memory_order_acquire);
}

int tf__memmon_event(uint64_t seq, uint64_t *start, uint64_t *end,
		     bool *unmapped)
{
	struct ring_ent *e = &mon.ring[seq & (RING_SIZE - 1)];
	uint64_t s, x, y;
	unsigned u;

	if (tf__memmon_head() - seq > RING_SIZE)
		return -ESTALE;
	s = atomic_load_explicit(&e->seq, memory_order_acquire);
	if (s != seq + 1)
		return -ESTALE;
	x = atomic_load_explicit(&e->start, memory_order_relaxed);
	y = atomic_load_explicit(&e->end, memory_order_relaxed);
	u = atomic_load_explicit(&e->unmapped, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s)
		return -ESTALE;
	*start = x;
	*end = y;
	*unmapped = u;
	return 0;
}
