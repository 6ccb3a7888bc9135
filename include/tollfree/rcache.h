/* SPDX-License-Identifier: MIT */
/*
 * tollfree/rcache.h - a bounded registration cache for user buffers.
 *
 * tf_rcache_get() returns a registration covering a user buffer, from the
 * cache when one is there (a "hit") or registered now (a "miss"); the
 * caller releases it with tf_rcache_put().  Idle registrations stay pinned
 * for reuse, within two bounds: pinned bytes and number of regions
 * (TOLLFREE_RCACHE_MAX_BYTES, TOLLFREE_RCACHE_MAX_REGIONS).  Past them the
 * least recently used idle regions are evicted (CLOCK approximation);
 * regions in use are never evicted, and a registration that does not fit
 * while everything is in use is returned uncached and released by its put.
 *
 * The cache is never stale: a userfaultfd monitor (TOLLFREE_RCACHE_MONITOR)
 * sees munmap, madvise(DONTNEED/REMOVE), mremap and mmap(MAP_FIXED) over
 * cached ranges and drops those regions; with no monitor the user calls
 * tf_rcache_invalidate() before memory is unmapped or reused.  One window
 * remains with the monitor: a thread that maps an address another thread
 * is unmapping, before the monitor has read the unmap event, can hit the
 * old registration; call tf_rcache_invalidate() first where memory moves
 * between threads like that.  See tollfree(7), "REGISTRATION CACHE".
 *
 * Only private anonymous memory is cached: the pages of shared and
 * file-backed mappings (memfd, tmpfs, files, MAP_SHARED) can be replaced by
 * a hole punch or a truncation that no monitor sees, so such a range is
 * registered uncached and deregistered by its put.  On the soft provider,
 * idle cached pages stay locked: madvise(MADV_DONTNEED) on them fails with
 * EINVAL until tf_rcache_invalidate() has dropped them.
 *
 * A cached region is registered with the access the caller asked for; a
 * hit needs the same remote access bits (so a peer never gets more rights
 * than asked for) and at least the local bits asked for.
 *
 * The rcache is thread-safe: every function may be called concurrently on
 * the same cache, except tf_rcache_destroy().  In a child process created
 * by fork() the parent's caches are unusable (-TF_EFORK).
 */
#ifndef TOLLFREE_RCACHE_H
#define TOLLFREE_RCACHE_H

#include <tollfree/mr.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_rcache tf_rcache_t;
typedef struct tf_rcache_reg tf_rcache_reg_t;

/* Latency histograms: bucket i counts samples in [2^i, 2^(i+1)) ns. */
#define TF_LAT_BUCKETS 32

/* Memory monitors (TOLLFREE_RCACHE_MONITOR=auto|uffd|none). */
enum tf_rcache_monitor {
	TF_RCACHE_MONITOR_AUTO = 0, /* userfaultfd if available, else none */
	TF_RCACHE_MONITOR_UFFD = 1, /* userfaultfd or -ENOTSUP */
	TF_RCACHE_MONITOR_NONE = 2, /* explicit tf_rcache_invalidate() only */
};

enum tf_rcache_params_field {
	TF_RCACHE_PARAM_MAX_BYTES = 1u << 0,
	TF_RCACHE_PARAM_MAX_REGIONS = 1u << 1,
	TF_RCACHE_PARAM_MONITOR = 1u << 2,
	TF_RCACHE_PARAM_CHECK = 1u << 3,
};

/* Parameters of tf_rcache_create(); unset fields take the TOLLFREE_RCACHE_*
 * configuration of the PD's context. */
typedef struct tf_rcache_params {
	uint64_t field_mask;
	uint64_t max_bytes;   /* pinned bytes of cached regions (pages) */
	uint64_t max_regions; /* cached regions */
	int monitor;	      /* enum tf_rcache_monitor */
	int check;	      /* 1: verify hits against /proc/self/pagemap */
} tf_rcache_params_t;

typedef struct tf_rcache_stats {
	uint64_t hits;
	uint64_t misses;	 /* registrations made by get */
	uint64_t evictions;	 /* idle regions dropped to respect bounds */
	uint64_t invalidations;	 /* regions dropped by monitor or invalidate */
	uint64_t uncached;	 /* registrations returned uncached */
	uint64_t stale;		 /* stale hits caught by the pagemap check */
	uint64_t reg_failures;	 /* failed registrations */
	uint64_t monitor_events; /* unmap/remove/remap events consumed */
	uint64_t regions;	 /* cached regions now (bounded) */
	uint64_t cached_bytes;	 /* pinned bytes of cached regions (bounded) */
	uint64_t pinned_regions; /* all registered regions, incl. uncached */
	uint64_t pinned_bytes;	 /* all registered bytes (whole pages) */
	uint64_t max_bytes;	 /* bounds in effect */
	uint64_t max_regions;
	int monitor; /* enum tf_rcache_monitor in effect */
	int check;
	/* Lookup latency (sampled: one get in 64) and registration latency. */
	uint64_t lookup_ns[TF_LAT_BUCKETS];
	uint64_t reg_ns[TF_LAT_BUCKETS];
	uint64_t reserved[16];
} tf_rcache_stats_t;

/*
 * tf_rcache_create - create a registration cache over @pd.
 * @params: may be NULL.
 * Returns 0, -EINVAL, -ENOMEM, or -ENOTSUP when the monitor is "uffd" and
 * userfaultfd is not available.  When the monitor is "auto" and userfaultfd
 * is not available, the cache logs so (info) and relies on explicit
 * tf_rcache_invalidate() calls.  Thread-safe.
 */
int tf_rcache_create(tf_pd_t *pd, const tf_rcache_params_t *params,
		     tf_rcache_t **rc_p);
/*
 * tf_rcache_destroy - deregister every cached region and free the cache.
 * Regions still held (not put) are reported and deregistered.  NULL-safe;
 * not thread-safe with respect to other uses of @rc.
 */
void tf_rcache_destroy(tf_rcache_t *rc);

/*
 * tf_rcache_get - a registration covering [@addr, @addr + @len) with at
 * least @access (enum tf_access); the caller owns a reference until
 * tf_rcache_put().  Returns 0, -EINVAL, -TF_EFORK, or a registration error
 * (-ENOMEM/-EAGAIN: pinning refused, check RLIMIT_MEMLOCK; -ENOBUFS: past
 * the context's TOLLFREE_MAX_PINNED, both after evicting idle regions;
 * -EFAULT: not mapped).  Thread-safe.
 */
int tf_rcache_get(tf_rcache_t *rc, void *addr, size_t len, unsigned access,
		  tf_rcache_reg_t **reg_p);
/*
 * tf_rcache_put - release a reference from tf_rcache_get().  An uncached
 * or invalidated region is deregistered when its last reference goes.
 * Returns 0, -EINVAL, or -TF_EFORK in a forked child (nothing is done).
 * Thread-safe.
 */
int tf_rcache_put(tf_rcache_t *rc, tf_rcache_reg_t *reg);
/*
 * tf_rcache_invalidate - drop every cached region that overlaps
 * [@addr, @addr + @len): call it before unmapping or reusing memory when no
 * monitor runs.  Regions in use stay valid for their holders and are
 * deregistered by their last put.  Returns the number of regions dropped,
 * -EINVAL or -TF_EFORK.  Thread-safe.
 */
int tf_rcache_invalidate(tf_rcache_t *rc, void *addr, size_t len);
/* tf_rcache_query_stats - copy the counters (read without a lock). */
int tf_rcache_query_stats(tf_rcache_t *rc, tf_rcache_stats_t *stats);

/* The memory region of a registration, and its keys and bounds.  Valid
 * while the caller holds the reference. */
tf_mr_t *tf_rcache_reg_mr(const tf_rcache_reg_t *reg);
uint32_t tf_rcache_reg_lkey(const tf_rcache_reg_t *reg);
uint32_t tf_rcache_reg_rkey(const tf_rcache_reg_t *reg);
void *tf_rcache_reg_addr(const tf_rcache_reg_t *reg);
size_t tf_rcache_reg_length(const tf_rcache_reg_t *reg);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_RCACHE_H */
