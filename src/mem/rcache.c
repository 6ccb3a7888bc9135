/* SPDX-License-Identifier: MIT */
/*
 * rcache.c - the registration cache (see tollfree/rcache.h), with the
 * interval treap (util/itree.c) and the reader-sharded lock (util/lock.c)
 * it is built on.
 *
 * Structure: cached regions sit in an interval treap under a reader-sharded
 * lock.  A hit takes the read side of the caller's shard, walks the treap
 * and takes a reference with one atomic increment; a put is one atomic
 * decrement.  Misses, eviction and invalidation take the write side.
 *
 * References: a cached region holds one reference for the tree, plus one
 * per get.  Only the write side removes a region from the tree, so under
 * the write lock a reference count of 1 means "idle": no reader can add one
 * concurrently.  Whoever drops the last reference deregisters (a put of an
 * uncached or invalidated region, or the remover of an idle one), always
 * outside the lock: registration work never runs under the write lock, so
 * lookups keep going while a region is (de)registered.
 *
 * States: PENDING (in the tree, being registered, never returned by a
 * lookup), CACHED, INVALID (out of the tree: uncached, evicted or
 * invalidated).  A region invalidated while PENDING becomes uncached when
 * its registration completes, so an unmap racing with a miss is not lost.
 *
 * Bounds count cached regions (PENDING included) and their whole pages.
 * Eviction is CLOCK (second chance), an approximation of LRU: gets set a
 * referenced bit with a relaxed store, eviction clears it once and takes
 * the next idle unreferenced region.
 *
 * Only private anonymous memory is cached (see range_private()): the
 * pages of shared and file-backed mappings can change without an event.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "rcache_int.h"

/* ------------------------------------------------------------ rcache */

enum reg_state {
	REG_PENDING = 1,
	REG_CACHED = 2,
	REG_INVALID = 3,
};

#define REMOTE_BITS                                       \
	(TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE | \
	 TF_ACCESS_REMOTE_ATOMIC)

struct tf_rcache_reg {
	struct tf__itree_node node; /* [addr, addr + len) */
	atomic_uint refs;
	atomic_uchar referenced; /* CLOCK bit, set by hits */
	unsigned state;		 /* enum reg_state; write lock to change */
	unsigned access;
	uint32_t lkey, rkey;
	void *memh;
	uint64_t pinned; /* whole pages */
	uint64_t check_hash;
	bool subscribed; /* to the monitor */
	bool unmapped;	 /* invalidated by an unmap event */
	bool listed;	 /* on rc->all */
	/* CLOCK ring of cached regions, under the write lock. */
	struct tf_rcache_reg *clk_next, *clk_prev;
	/* Every registered region, under all_lock (for destroy). */
	struct tf_rcache_reg *all_next, *all_prev;
	/* Deferred release list, private to one thread. */
	struct tf_rcache_reg *free_next;
};

struct tf_rcache {
	struct tf__brlock lock;
	struct tf__itree tree;	    /* write lock */
	struct tf_rcache_reg *hand; /* CLOCK hand; write lock */
	uint64_t cursor;	    /* next monitor event; write lock */
	unsigned seen_errors;	    /* monitor errors seen; write lock */
	atomic_ullong seen_gen;	    /* monitor generation drained */
	struct tf__rcache_ops ops;
	void *arg;
	struct tf__rcache_config cfg;
	bool have_monitor;
	unsigned fork_gen;
	pid_t pid; /* slow paths also compare the pid: a child made without
		    * fork() (clone, vfork) skips the atfork handlers */
	int pagemap_fd;
	int maps_fd;	    /* /proc/self/maps, for PROCMAP_QUERY */
	unsigned vma_probe; /* enum vma_probe */
	long page_size;
	pthread_mutex_t all_lock;
	struct tf_rcache_reg *all;
	struct {
		atomic_ullong hits;
	} __attribute__((aligned(TF__CACHELINE))) shard[TF__BR_SHARDS];
	atomic_ullong misses, evictions, invalidations, uncached, stale;
	atomic_ullong reg_failures, monitor_events;
	atomic_ullong regions, cached_bytes; /* changed under the write lock */
	atomic_ullong pinned_regions, pinned_bytes;
	atomic_ullong lookup_ns[TF_LAT_BUCKETS], reg_ns[TF_LAT_BUCKETS];
};

#define RELAXED		  memory_order_relaxed
#define STAT_INC(_rc, _f) atomic_fetch_add_explicit(&(_rc)->_f, 1, RELAXED)

static inline struct tf_rcache_reg *node_reg(struct tf__itree_node *n)
{
	return (struct tf_rcache_reg *)n;
}

static inline bool access_ok(unsigned have, unsigned want)
{
	/* Same remote rights (a peer never gets more than asked for), and
	 * at least the local ones. */
	return (have & REMOTE_BITS) == (want & REMOTE_BITS) &&
	       (have & want) == want;
}

/* A cached region containing [a, b) with suitable access.  Lock must be
 * held (either side). */
static struct tf_rcache_reg *lookup(const struct tf__itree_node *n, uint64_t a,
				    uint64_t b, unsigned access)
{
	while (n && n->max_end >= b) {
		struct tf_rcache_reg *r;

		if (n->left && n->left->max_end >= b) {
			r = lookup(n->left, a, b, access);
			if (r)
				return r;
		}
		if (n->start > a)
			return NULL;
		r = node_reg((struct tf__itree_node *)n);
		if (n->end >= b && r->state == REG_CACHED &&
		    access_ok(r->access, access))
			return r;
		n = n->right;
	}
	return NULL;
}

static uint64_t page_span(const struct tf_rcache *rc, uint64_t a, uint64_t b)
{
	uint64_t ps = (uint64_t)rc->page_size;

	return ((b + ps - 1) & ~(ps - 1)) - (a & ~(ps - 1));
}

/* Deregister and free a region whose last reference is gone. */
static void reg_release(struct tf_rcache *rc, struct tf_rcache_reg *r)
{
	if (r->memh) {
		rc->ops.mem_dereg(rc->arg, r->memh);
		atomic_fetch_sub_explicit(&rc->pinned_regions, 1, RELAXED);
		atomic_fetch_sub_explicit(&rc->pinned_bytes, r->pinned,
					  RELAXED);
	}
	if (r->listed) {
		pthread_mutex_lock(&rc->all_lock);
		if (r->all_prev)
			r->all_prev->all_next = r->all_next;
		else
			rc->all = r->all_next;
		if (r->all_next)
			r->all_next->all_prev = r->all_prev;
		pthread_mutex_unlock(&rc->all_lock);
	}
	if (r->subscribed)
		tf__memmon_unsubscribe(r->node.start, r->node.end, r->unmapped);
	tf__free(r);
}

static void release_list(struct tf_rcache *rc, struct tf_rcache_reg *list)
{
	while (list) {
		struct tf_rcache_reg *next = list->free_next;

		reg_release(rc, list);
		list = next;
	}
}

static inline void reg_unref(struct tf_rcache_reg *r,
			     struct tf_rcache_reg **free_p)
{
	if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1) {
		r->free_next = *free_p;
		*free_p = r;
	}
}

/* Write lock must be held. */
static void clock_insert(struct tf_rcache *rc, struct tf_rcache_reg *r)
{
	struct tf_rcache_reg *h = rc->hand;

	if (!h) {
		r->clk_next = r->clk_prev = r;
		rc->hand = r;
		return;
	}
	/* Just behind the hand: the last place it reaches. */
	r->clk_next = h;
	r->clk_prev = h->clk_prev;
	h->clk_prev->clk_next = r;
	h->clk_prev = r;
}

/* Write lock must be held. */
static void clock_remove(struct tf_rcache *rc, struct tf_rcache_reg *r)
{
	if (r->clk_next == r) {
		rc->hand = NULL;
	} else {
		r->clk_prev->clk_next = r->clk_next;
		r->clk_next->clk_prev = r->clk_prev;
		if (rc->hand == r)
			rc->hand = r->clk_next;
	}
	r->clk_next = r->clk_prev = NULL;
}

/* Take a PENDING or CACHED region out of the cache and drop the tree's
 * reference; an idle region goes to *free_p.  Write lock must be held. */
static void remove_locked(struct tf_rcache *rc, struct tf_rcache_reg *r,
			  bool unmapped, struct tf_rcache_reg **free_p)
{
	tf__itree_remove(&rc->tree, &r->node);
	clock_remove(rc, r);
	r->state = REG_INVALID;
	r->unmapped |= unmapped;
	atomic_fetch_sub_explicit(&rc->regions, 1, RELAXED);
	atomic_fetch_sub_explicit(&rc->cached_bytes, r->pinned, RELAXED);
	reg_unref(r, free_p);
}

static int first_overlap(struct tf__itree_node *n, void *arg)
{
	*(struct tf__itree_node **)arg = n;
	return 1;
}

/* Drop every region overlapping [a, b).  Write lock must be held. */
static int invalidate_locked(struct tf_rcache *rc, uint64_t a, uint64_t b,
			     bool unmapped, struct tf_rcache_reg **free_p)
{
	struct tf__itree_node *n;
	int count = 0;

	/* One search per region: no allocation while the lock is held. */
	for (;;) {
		n = NULL;
		tf__itree_foreach(&rc->tree, a, b, first_overlap, &n);
		if (!n)
			break;
		remove_locked(rc, node_reg(n), unmapped, free_p);
		STAT_INC(rc, invalidations);
		count++;
	}
	return count;
}

/* Consume the monitor's events.  Write lock must be held.  Waiting for the
 * monitor to publish is safe here: the monitor never takes our locks. */
static void drain_locked(struct tf_rcache *rc, struct tf_rcache_reg **free_p)
{
	uint64_t gen = tf__memmon_wait_published();
	uint64_t head = tf__memmon_head();
	uint64_t start, end;
	unsigned errors;
	bool unmapped;

	for (; rc->cursor != head; rc->cursor++) {
		if (tf__memmon_event(rc->cursor, &start, &end, &unmapped)) {
			/* Overwritten before we read it: trust nothing. */
			tf_log_info("rcache", "monitor ring overflow: "
					      "dropping every cached region");
			invalidate_locked(rc, 0, UINT64_MAX, false, free_p);
			break;
		}
		STAT_INC(rc, monitor_events);
		invalidate_locked(rc, start, end, unmapped, free_p);
	}
	rc->cursor = head;
	errors = tf__memmon_errors();
	if (TF__UNLIKELY(errors != rc->seen_errors)) {
		tf_log_warn("rcache", "the memory monitor may have lost "
				      "events: dropping every cached region");
		invalidate_locked(rc, 0, UINT64_MAX, false, free_p);
		rc->seen_errors = errors;
	}
	atomic_store_explicit(&rc->seen_gen, gen, RELAXED);
}

static void __attribute__((noinline)) drain(struct tf_rcache *rc)
{
	struct tf_rcache_reg *free_list = NULL;

	tf__brlock_wrlock(&rc->lock);
	drain_locked(rc, &free_list);
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);
}

static inline void maybe_drain(struct tf_rcache *rc)
{
	if (rc->have_monitor &&
	    TF__UNLIKELY(tf__memmon_gen() !=
			 atomic_load_explicit(&rc->seen_gen, RELAXED)))
		drain(rc);
}

/* The next idle region CLOCK picks, or NULL.  Write lock must be held. */
static struct tf_rcache_reg *clock_pick(struct tf_rcache *rc)
{
	size_t steps = 2 * rc->tree.count + 1;

	while (rc->hand && steps--) {
		struct tf_rcache_reg *r = rc->hand;

		rc->hand = r->clk_next;
		if (r->state != REG_CACHED ||
		    atomic_load_explicit(&r->refs, RELAXED) > 1)
			continue;
		if (atomic_load_explicit(&r->referenced, RELAXED)) {
			atomic_store_explicit(&r->referenced, 0, RELAXED);
			continue;
		}
		return r;
	}
	return NULL;
}

/* Evict idle regions until one more region of @bytes fits.  Write lock
 * must be held. */
static bool make_room(struct tf_rcache *rc, uint64_t bytes,
		      struct tf_rcache_reg **free_p)
{
	while (atomic_load_explicit(&rc->regions, RELAXED) + 1 >
		       rc->cfg.max_regions ||
	       atomic_load_explicit(&rc->cached_bytes, RELAXED) + bytes >
		       rc->cfg.max_bytes) {
		struct tf_rcache_reg *r = clock_pick(rc);

		if (!r)
			return false;
		remove_locked(rc, r, false, free_p);
		STAT_INC(rc, evictions);
	}
	return true;
}

/* Evict every idle region (registration failed for lack of resources).
 * Write lock must be held. */
static int evict_idle(struct tf_rcache *rc, struct tf_rcache_reg **free_p)
{
	size_t n = rc->tree.count;
	int count = 0;

	while (n--) {
		struct tf_rcache_reg *r = rc->hand;

		if (!r)
			break;
		rc->hand = r->clk_next;
		if (r->state != REG_CACHED ||
		    atomic_load_explicit(&r->refs, RELAXED) > 1)
			continue;
		remove_locked(rc, r, false, free_p);
		STAT_INC(rc, evictions);
		count++;
	}
	return count;
}

/* Hash of the page frames behind [a, b), from /proc/self/pagemap: frame
 * number (bits 0-54) and present bit (63); soft-dirty and exclusivity bits
 * change without a remap and are left out. */
static uint64_t frames_hash(struct tf_rcache *rc, uint64_t a, uint64_t b)
{
	uint64_t ps = (uint64_t)rc->page_size, h = 1469598103934665603ull;
	uint64_t first = a / ps, last = (b - 1) / ps, buf[256];

	for (uint64_t p = first; p <= last;) {
		uint64_t n = last - p + 1;
		ssize_t got;

		if (n > 256)
			n = 256;
		got = pread(rc->pagemap_fd, buf, n * 8, (off_t)(p * 8));
		if (got <= 0)
			return h ^ 0xdeadull;
		for (ssize_t i = 0; i < got / 8; i++) {
			h ^= buf[i] & ((1ull << 55) - 1 + (1ull << 63));
			h *= 1099511628211ull;
		}
		p += (uint64_t)got / 8;
	}
	return h;
}

/* ------------------------------------------------ private memory only */

/*
 * Which memory may be cached.  The pages of a shared or file-backed
 * mapping can be replaced with no event the monitor sees: fallocate(
 * FALLOC_FL_PUNCH_HOLE) or ftruncate of the file (a memfd, a tmpfs or
 * hugetlbfs file), madvise(MADV_REMOVE) by another process that maps a
 * shared anonymous region, and a truncation even drops the copied-on-write
 * pages of a private file mapping.  A hit would then give the NIC the old
 * pages.  So only private anonymous memory is cached; other memory is
 * registered uncached, valid for as long as its holder keeps it.
 *
 * How it is told apart: PROCMAP_QUERY (Linux 6.11), an ioctl on
 * /proc/self/maps that returns the VMA covering an address with its flags
 * and its file (about 0.5 us): every VMA across the range must be private
 * and have no file, except anonymous hugetlb memory (MAP_PRIVATE |
 * MAP_ANONYMOUS | MAP_HUGETLB), whose internal file nobody else can open.
 * A miss asks twice: before it makes room, so that memory that will not be
 * cached evicts nothing, and again once the pages are registered and the
 * monitor watches them, so that a mapping replaced in between is seen.
 * Older kernels: bit 61 of the pagemap ("file page or shared anonymous"),
 * read once the pages are registered, so present.  It sees every shared
 * mapping and the pages of a private file mapping not yet copied on
 * write, but not a private file mapping copied in full and then truncated
 * (tollfree(7) says so).  Without /proc nothing can be told apart and
 * nothing is cached.
 */
enum vma_probe {
	PROBE_NONE = 0,
	PROBE_MAPS = 1,	   /* PROCMAP_QUERY */
	PROBE_PAGEMAP = 2, /* pagemap bit 61 */
};

/* <linux/fs.h> of Linux 6.11, spelled out for older headers. */
struct rc_procmap_query {
	uint64_t size;
	uint64_t query_flags;
	uint64_t query_addr;
	uint64_t vma_start;
	uint64_t vma_end;
	uint64_t vma_flags;
	uint64_t vma_page_size;
	uint64_t vma_offset;
	uint64_t inode;
	uint32_t dev_major;
	uint32_t dev_minor;
	uint32_t vma_name_size;
	uint32_t build_id_size;
	uint64_t vma_name_addr;
	uint64_t build_id_addr;
};

#define RC_PROCMAP_QUERY _IOWR('f', 17, struct rc_procmap_query)
#define RC_VMA_SHARED	 0x08ull /* PROCMAP_QUERY_VMA_SHARED */
#define PM_FILE		 (1ull << 61)
#define PM_PRESENT	 (1ull << 63)

/* Whether the file-backed VMA @q at @addr is anonymous hugetlb memory: its
 * page size is huge and the kernel names it so. */
static bool anon_hugetlb(const struct tf_rcache *rc, uint64_t addr,
			 const struct rc_procmap_query *q)
{
	static const char anon[] = "/anon_hugepage (deleted)";
	char name[sizeof(anon)];
	struct rc_procmap_query n = {
		.size = sizeof(n),
		.query_addr = addr,
		.vma_name_size = sizeof(name),
		.vma_name_addr = (uintptr_t)name,
	};

	if (q->vma_page_size <= (uint64_t)rc->page_size)
		return false;
	/* A longer name fails with ENAMETOOLONG: not this one. */
	if (ioctl(rc->maps_fd, RC_PROCMAP_QUERY, &n) < 0 ||
	    n.vma_start != q->vma_start || n.vma_name_size != sizeof(anon))
		return false;
	return !memcmp(name, anon, sizeof(anon));
}

static bool maps_private(const struct tf_rcache *rc, uint64_t a, uint64_t b)
{
	for (uint64_t addr = a; addr < b;) {
		struct rc_procmap_query q = {.size = sizeof(q),
					     .query_addr = addr};

		/* ENOENT: a hole, where registration fails anyway. */
		if (ioctl(rc->maps_fd, RC_PROCMAP_QUERY, &q) < 0 ||
		    q.vma_end <= addr || (q.vma_flags & RC_VMA_SHARED))
			return false;
		if ((q.inode || q.dev_major || q.dev_minor) &&
		    !anon_hugetlb(rc, addr, &q))
			return false;
		addr = q.vma_end;
	}
	return true;
}

/* No present page of [a, b) is a file page or shared anonymous memory. */
static bool pagemap_private(const struct tf_rcache *rc, uint64_t a, uint64_t b)
{
	uint64_t ps = (uint64_t)rc->page_size;
	uint64_t first = a / ps, last = (b - 1) / ps, buf[256];

	for (uint64_t p = first; p <= last;) {
		uint64_t n = last - p + 1;
		ssize_t got;

		if (n > 256)
			n = 256;
		got = pread(rc->pagemap_fd, buf, n * 8, (off_t)(p * 8));
		if (got < 8)
			return false;
		for (ssize_t i = 0; i < got / 8; i++)
			if ((buf[i] & (PM_FILE | PM_PRESENT)) ==
			    (PM_FILE | PM_PRESENT))
				return false;
		p += (uint64_t)got / 8;
	}
	return true;
}

/* Whether [a, b) may be cached: private anonymous memory only.
 * @registered: the pages are registered (so present for the pagemap). */
static bool range_private(const struct tf_rcache *rc, uint64_t a, uint64_t b,
			  bool registered)
{
	switch (rc->vma_probe) {
	case PROBE_MAPS:
		return maps_private(rc, a, b);
	case PROBE_PAGEMAP:
		return !registered || pagemap_private(rc, a, b);
	default:
		return false;
	}
}

/* Choose how range_private() works here; the pagemap may already be open
 * (check mode). */
static void probe_open(struct tf_rcache *rc)
{
	rc->maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (rc->maps_fd >= 0 && !rc->cfg.no_vma_query) {
		struct rc_procmap_query q = {.size = sizeof(q),
					     .query_addr = (uintptr_t)&q};

		if (!ioctl(rc->maps_fd, RC_PROCMAP_QUERY, &q)) {
			rc->vma_probe = PROBE_MAPS;
			return;
		}
		tf_log_debug("rcache", "PROCMAP_QUERY: %m (Linux before "
				       "6.11): the pagemap tells shared "
				       "memory");
	}
	if (rc->maps_fd >= 0)
		close(rc->maps_fd);
	rc->maps_fd = -1;
	if (rc->pagemap_fd < 0)
		rc->pagemap_fd =
			open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (rc->pagemap_fd >= 0) {
		rc->vma_probe = PROBE_PAGEMAP;
		return;
	}
	rc->vma_probe = PROBE_NONE;
	tf_log_warn("rcache", "cannot read /proc/self/maps or "
			      "/proc/self/pagemap (%m): shared memory cannot "
			      "be told from private memory, so nothing is "
			      "cached");
}

static int do_reg(struct tf_rcache *rc, struct tf_rcache_reg *r)
{
	uint64_t t0 = tf__now_ns();
	int ret;

	ret = rc->ops.mem_reg(rc->arg, (void *)(uintptr_t)r->node.start,
			      r->node.end - r->node.start, r->access, &r->memh,
			      &r->lkey, &r->rkey);
	tf__lat_add(rc->reg_ns, tf__now_ns() - t0);
	if (ret)
		r->memh = NULL;
	return ret;
}

static int rcache_miss(struct tf_rcache *rc, uint64_t a, uint64_t b,
		       unsigned access, tf_rcache_reg_t **reg_p)
{
	struct tf_rcache_reg *r, *hit, *free_list = NULL;
	bool cached = false, private;
	int ret;

	if (TF__UNLIKELY(getpid() != rc->pid))
		return -TF_EFORK;
	/* Before the lock: memory that will not be cached makes no room. */
	private = range_private(rc, a, b, false);
	r = tf__calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->node.start = a;
	r->node.end = b;
	r->access = access;
	r->pinned = page_span(rc, a, b);

	tf__brlock_wrlock(&rc->lock);
	if (rc->have_monitor)
		drain_locked(rc, &free_list);
	/* Another thread may have registered it meanwhile. */
	hit = lookup(rc->tree.root, a, b, access);
	if (hit) {
		atomic_fetch_add_explicit(&hit->refs, 1, RELAXED);
		tf__brlock_wrunlock(&rc->lock);
		release_list(rc, free_list);
		tf__free(r);
		STAT_INC(rc, shard[0].hits);
		*reg_p = hit;
		return 0;
	}
	if (private && r->pinned <= rc->cfg.max_bytes && rc->cfg.max_regions &&
	    make_room(rc, r->pinned, &free_list)) {
		cached = true;
		r->state = REG_PENDING;
		atomic_init(&r->refs, 2); /* the tree's and the caller's */
		atomic_init(&r->referenced, 1);
		tf__itree_insert(&rc->tree, &r->node);
		clock_insert(rc, r);
		atomic_fetch_add_explicit(&rc->regions, 1, RELAXED);
		atomic_fetch_add_explicit(&rc->cached_bytes, r->pinned,
					  RELAXED);
	} else {
		r->state = REG_INVALID;
		atomic_init(&r->refs, 1);
	}
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);
	free_list = NULL;

	/* Watch before registering: an unmap from here on reaches the
	 * region while it is PENDING and makes it uncached. */
	if (cached && rc->have_monitor &&
	    !tf__memmon_subscribe(r->node.start, r->node.end))
		r->subscribed = true;

	ret = do_reg(rc, r);
	if (ret == -ENOMEM || ret == -EAGAIN || ret == -ENOSPC ||
	    ret == -ENOBUFS) {
		int n;

		/* Pinning or key limits (the system's or the context's
		 * TOLLFREE_MAX_PINNED): give back idle regions, retry. */
		tf__brlock_wrlock(&rc->lock);
		n = evict_idle(rc, &free_list);
		tf__brlock_wrunlock(&rc->lock);
		release_list(rc, free_list);
		free_list = NULL;
		if (n)
			ret = do_reg(rc, r);
	}

	/* Again now that the monitor watches the range: a mapping replaced
	 * since the first look is seen here, one replaced later by its
	 * unmap event. */
	if (!ret && cached)
	private = range_private(rc, a, b, true);

	tf__brlock_wrlock(&rc->lock);
	if (ret) {
		if (r->state == REG_PENDING)
			remove_locked(rc, r, false, &free_list);
		reg_unref(r, &free_list);
		tf__brlock_wrunlock(&rc->lock);
		release_list(rc, free_list);
		STAT_INC(rc, reg_failures);
		/* The provider logged the cause; this says who asked. */
		tf_log_debug(
			"rcache",
			"registering %llu bytes at %#llx failed: "
			"%s%s",
			(unsigned long long)(b - a), (unsigned long long)a,
			tf_strerror(ret),
			ret == -ENOMEM || ret == -EAGAIN
				? " (pinning refused: check RLIMIT_MEMLOCK)"
				: "");
		return ret;
	}
	if (r->state == REG_PENDING &&
	    (!private || (rc->have_monitor && !r->subscribed))) {
		/* Shared or unwatched memory could go stale: hand it out
		 * uncached. */
		remove_locked(rc, r, false, &free_list);
		STAT_INC(rc, uncached);
	} else if (r->state == REG_PENDING) {
		if (rc->cfg.check)
			r->check_hash = frames_hash(rc, a, b);
		r->state = REG_CACHED;
	} else {
		STAT_INC(rc, uncached);
	}
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);

	atomic_fetch_add_explicit(&rc->pinned_regions, 1, RELAXED);
	atomic_fetch_add_explicit(&rc->pinned_bytes, r->pinned, RELAXED);
	pthread_mutex_lock(&rc->all_lock);
	r->all_next = rc->all;
	if (rc->all)
		rc->all->all_prev = r;
	rc->all = r;
	r->listed = true;
	pthread_mutex_unlock(&rc->all_lock);
	STAT_INC(rc, misses);
	*reg_p = r;
	return 0;
}

/* Debug mode: a hit whose frames changed is stale.  Returns true if @r
 * was dropped (the caller's reference included). */
static bool __attribute__((noinline))
check_stale(struct tf_rcache *rc, struct tf_rcache_reg *r)
{
	struct tf_rcache_reg *free_list = NULL;

	if (frames_hash(rc, r->node.start, r->node.end) == r->check_hash)
		return false;
	tf_log_error("rcache",
		     "stale registration of %#llx+%llu: its page "
		     "frames changed since it was registered",
		     (unsigned long long)r->node.start,
		     (unsigned long long)(r->node.end - r->node.start));
	STAT_INC(rc, stale);
	tf__brlock_wrlock(&rc->lock);
	if (r->state == REG_CACHED)
		remove_locked(rc, r, false, &free_list);
	reg_unref(r, &free_list);
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);
	return true;
}

int tf_rcache_get(tf_rcache_t *rc, void *addr, size_t len, unsigned access,
		  tf_rcache_reg_t **reg_p)
{
	static TF__TLS unsigned tick;
	uint64_t a = (uintptr_t)addr, b = a + len, t0 = 0;
	struct tf_rcache_reg *r;
	unsigned s;

	if (TF__UNLIKELY(!rc || !reg_p || !addr || !len || b < a ||
			 (access & ~(unsigned)TF_ACCESS_ALL)))
		return -EINVAL;
	if (TF__UNLIKELY(rc->fork_gen != tf__fork_gen()))
		return -TF_EFORK;
	maybe_drain(rc);
	/* Time one lookup in 64: the clock costs as much as a hit. */
	if (TF__UNLIKELY(!(++tick & 63)))
		t0 = tf__now_ns();
	s = tf__thread_shard();
	tf__brlock_rdlock(&rc->lock, s);
	r = lookup(rc->tree.root, a, b, access);
	if (TF__LIKELY(r != NULL))
		atomic_fetch_add_explicit(&r->refs, 1, RELAXED);
	tf__brlock_rdunlock(&rc->lock, s);
	if (TF__LIKELY(r != NULL)) {
		if (!atomic_load_explicit(&r->referenced, RELAXED))
			atomic_store_explicit(&r->referenced, 1, RELAXED);
		if (TF__UNLIKELY(rc->cfg.check) && check_stale(rc, r))
			return rcache_miss(rc, a, b, access, reg_p);
		atomic_fetch_add_explicit(&rc->shard[s].hits, 1, RELAXED);
		if (TF__UNLIKELY(t0 != 0))
			tf__lat_add(rc->lookup_ns, tf__now_ns() - t0);
		*reg_p = r;
		return 0;
	}
	return rcache_miss(rc, a, b, access, reg_p);
}

int tf_rcache_put(tf_rcache_t *rc, tf_rcache_reg_t *r)
{
	if (TF__UNLIKELY(!rc || !r))
		return -EINVAL;
	if (TF__UNLIKELY(rc->fork_gen != tf__fork_gen()))
		return -TF_EFORK;
	if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
		reg_release(rc, r);
	return 0;
}

int tf_rcache_invalidate(tf_rcache_t *rc, void *addr, size_t len)
{
	uint64_t a = (uintptr_t)addr, b = a + len;
	struct tf_rcache_reg *free_list = NULL;
	int n;

	if (!rc || !len || b < a)
		return -EINVAL;
	if (rc->fork_gen != tf__fork_gen() || getpid() != rc->pid)
		return -TF_EFORK;
	tf__brlock_wrlock(&rc->lock);
	if (rc->have_monitor)
		drain_locked(rc, &free_list);
	n = invalidate_locked(rc, a, b, false, &free_list);
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);
	return n;
}

int tf_rcache_query_stats(tf_rcache_t *rc, tf_rcache_stats_t *s)
{
	if (!rc || !s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	for (unsigned i = 0; i < TF__BR_SHARDS; i++)
		s->hits += atomic_load_explicit(&rc->shard[i].hits, RELAXED);
#define LD(_f) atomic_load_explicit(&rc->_f, RELAXED)
	s->misses = LD(misses);
	s->evictions = LD(evictions);
	s->invalidations = LD(invalidations);
	s->uncached = LD(uncached);
	s->stale = LD(stale);
	s->reg_failures = LD(reg_failures);
	s->monitor_events = LD(monitor_events);
	s->regions = LD(regions);
	s->cached_bytes = LD(cached_bytes);
	s->pinned_regions = LD(pinned_regions);
	s->pinned_bytes = LD(pinned_bytes);
	for (unsigned i = 0; i < TF_LAT_BUCKETS; i++) {
		s->lookup_ns[i] = LD(lookup_ns[i]);
		s->reg_ns[i] = LD(reg_ns[i]);
	}
#undef LD
	s->max_bytes = rc->cfg.max_bytes;
	s->max_regions = rc->cfg.max_regions;
	s->monitor = rc->have_monitor ? TF_RCACHE_MONITOR_UFFD
				      : TF_RCACHE_MONITOR_NONE;
	s->check = rc->cfg.check;
	return 0;
}

int tf__rcache_create(const struct tf__rcache_ops *ops, void *arg,
		      const struct tf__rcache_config *cfg, tf_rcache_t **rc_p)
{
	struct tf_rcache *rc;
	int ret;

	if (!ops || !ops->mem_reg || !ops->mem_dereg || !cfg || !rc_p ||
	    cfg->monitor < TF_RCACHE_MONITOR_AUTO ||
	    cfg->monitor > TF_RCACHE_MONITOR_NONE)
		return -EINVAL;
	tf__fork_init();
	rc = tf__calloc(1, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	rc->ops = *ops;
	rc->arg = arg;
	rc->cfg = *cfg;
	rc->fork_gen = tf__fork_gen();
	rc->pid = getpid();
	rc->page_size = sysconf(_SC_PAGESIZE);
	rc->pagemap_fd = -1;
	rc->maps_fd = -1;
	ret = tf__brlock_init(&rc->lock);
	if (ret)
		goto err_free;
	ret = -pthread_mutex_init(&rc->all_lock, NULL);
	if (ret)
		goto err_lock;
	if (cfg->check) {
		rc->pagemap_fd =
			open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
		if (rc->pagemap_fd < 0) {
			ret = -errno;
			tf_log_error("rcache", "TOLLFREE_RCACHE_CHECK: cannot "
					       "open /proc/self/pagemap: %m");
			goto err_mutex;
		}
	}
	probe_open(rc);
	if (cfg->monitor != TF_RCACHE_MONITOR_NONE) {
		ret = tf__memmon_open();
		if (ret && cfg->monitor == TF_RCACHE_MONITOR_UFFD) {
			tf_log_info("rcache",
				    "monitor \"uffd\" required but "
				    "userfaultfd is not usable: %s",
				    tf_strerror(ret));
			goto err_pagemap;
		}
		rc->have_monitor = !ret;
	}
	if (rc->have_monitor) {
		/* Earlier events concern no region of ours. */
		rc->cursor = tf__memmon_head();
		rc->seen_errors = tf__memmon_errors();
		atomic_init(&rc->seen_gen, 1); /* never a published value */
	} else {
		tf_log_info("rcache", "no memory monitor: call "
				      "tf_rcache_invalidate() before memory "
				      "under cached registrations is unmapped "
				      "or reused");
	}
	*rc_p = rc;
	return 0;

err_pagemap:
	if (rc->maps_fd >= 0)
		close(rc->maps_fd);
	if (rc->pagemap_fd >= 0)
		close(rc->pagemap_fd);
err_mutex:
	pthread_mutex_destroy(&rc->all_lock);
err_lock:
	tf__brlock_destroy(&rc->lock);
err_free:
	tf__free(rc);
	return ret;
}

void tf_rcache_destroy(tf_rcache_t *rc)
{
	struct tf_rcache_reg *free_list = NULL, *r;
	unsigned held = 0;
	struct tf__itree_node *n;

	if (!rc)
		return;
	if (rc->fork_gen != tf__fork_gen() || getpid() != rc->pid) {
		/* In a forked child the registrations are the parent's:
		 * forget them, free only what this process owns. */
		if (rc->maps_fd >= 0)
			close(rc->maps_fd);
		if (rc->pagemap_fd >= 0)
			close(rc->pagemap_fd);
		tf__free(rc);
		return;
	}
	tf__brlock_wrlock(&rc->lock);
	if (rc->have_monitor)
		drain_locked(rc, &free_list);
	while ((n = rc->tree.root))
		remove_locked(rc, node_reg(n), false, &free_list);
	tf__brlock_wrunlock(&rc->lock);
	release_list(rc, free_list);
	/* What is left is held by users: deregister it anyway. */
	while ((r = rc->all)) {
		rc->all = r->all_next;
		r->listed = false;
		held++;
		reg_release(rc, r);
	}
	if (held)
		tf_log_warn("rcache",
			    "destroyed with %u registrations still "
			    "held; they were deregistered",
			    held);
	if (rc->have_monitor)
		tf__memmon_close();
	if (rc->maps_fd >= 0)
		close(rc->maps_fd);
	if (rc->pagemap_fd >= 0)
		close(rc->pagemap_fd);
	pthread_mutex_destroy(&rc->all_lock);
	tf__brlock_destroy(&rc->lock);
	tf__free(rc);
}

/* ------------------------------------------------- public entry points */

static int mr_reg_op(void *arg, void *addr, size_t len, unsigned access,
		     void **memh_p, uint32_t *lkey_p, uint32_t *rkey_p)
{
	tf_mr_t *mr;
	int ret;

	ret = tf_mr_reg(arg, addr, len, access, &mr);
	if (ret)
		return ret;
	*memh_p = mr;
	*lkey_p = tf_mr_lkey(mr);
	*rkey_p = tf_mr_rkey(mr);
	return 0;
}

static void mr_dereg_op(void *arg, void *memh)
{
	int ret = tf_mr_dereg(memh);

	(void)arg;
	if (ret)
		tf_log_error("rcache", "deregistration failed: %s",
			     tf_strerror(ret));
}

static const struct tf__rcache_ops mr_ops = {
	.mem_reg = mr_reg_op,
	.mem_dereg = mr_dereg_op,
};

static int parse_monitor(const char *s)
{
	if (!strcasecmp(s, "auto"))
		return TF_RCACHE_MONITOR_AUTO;
	if (!strcasecmp(s, "uffd") || !strcasecmp(s, "userfaultfd"))
		return TF_RCACHE_MONITOR_UFFD;
	if (!strcasecmp(s, "none"))
		return TF_RCACHE_MONITOR_NONE;
	return -EINVAL;
}

int tf_rcache_create(tf_pd_t *pd, const tf_rcache_params_t *params,
		     tf_rcache_t **rc_p)
{
	const struct tf_config *c;
	struct tf__rcache_config cfg = {0};
	uint64_t mask;

	if (!pd || !rc_p)
		return -EINVAL;
	c = &pd->ctx->cfg;
	mask = params ? params->field_mask : 0;
	cfg.max_bytes = mask & TF_RCACHE_PARAM_MAX_BYTES ? params->max_bytes
							 : c->rcache_max_bytes;
	cfg.max_regions = mask & TF_RCACHE_PARAM_MAX_REGIONS
				  ? params->max_regions
				  : c->rcache_max_regions;
	cfg.monitor = mask & TF_RCACHE_PARAM_MONITOR
			      ? params->monitor
			      : parse_monitor(c->rcache_monitor);
	cfg.check = mask & TF_RCACHE_PARAM_CHECK ? params->check != 0
						 : c->rcache_check;
	if (cfg.monitor < 0) {
		tf_log_error("rcache",
			     "TOLLFREE_RCACHE_MONITOR=%s: expected "
			     "auto, uffd or none",
			     c->rcache_monitor);
		return -EINVAL;
	}
	return tf__rcache_create(&mr_ops, pd, &cfg, rc_p);
}

tf_mr_t *tf_rcache_reg_mr(const tf_rcache_reg_t *reg)
{
	return reg->memh;
}

void *tf__rcache_reg_memh(const tf_rcache_reg_t *reg)
{
	return reg->memh;
}

uint32_t tf_rcache_reg_lkey(const tf_rcache_reg_t *reg)
{
	return reg->lkey;
}

uint32_t tf_rcache_reg_rkey(const tf_rcache_reg_t *reg)
{
	return reg->rkey;
}

void *tf_rcache_reg_addr(const tf_rcache_reg_t *reg)
{
	return (void *)(uintptr_t)reg->node.start;
}

size_t tf_rcache_reg_length(const tf_rcache_reg_t *reg)
{
	return reg->node.end - reg->node.start;
}
