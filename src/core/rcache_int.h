/* SPDX-License-Identifier: MIT */
/*
 * rcache_int.h - internals shared by the registration cache (rcache.c),
 * the memory monitor (memmon.c) and the pool (pool.c): an interval treap,
 * a reader-sharded lock, latency histograms, the fork generation, and the
 * rcache's registration ops (so that unit tests can plug in fake ones).
 */
#ifndef TOLLFREE_RCACHE_INT_H
#define TOLLFREE_RCACHE_INT_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

#include "provider.h"

#define TF__LIKELY(_x)	 __builtin_expect(!!(_x), 1)
#define TF__UNLIKELY(_x) __builtin_expect(!!(_x), 0)
#define TF__CACHELINE	 64
/* Hot-path thread-locals: initial-exec avoids a __tls_get_addr call per
 * access in the shared library (a few bytes of static TLS). */
#define TF__TLS __thread __attribute__((tls_model("initial-exec")))

/* ------------------------------------------------------------ itree
 * An interval treap keyed by (start, node address), augmented with the
 * largest end in each subtree so that overlap and containment queries
 * prune whole subtrees.  Not synchronized: callers hold their own lock. */

struct tf__itree_node {
	uint64_t start, end; /* [start, end) */
	uint64_t max_end;    /* largest end in this subtree */
	uint32_t prio;
	struct tf__itree_node *left, *right;
};

struct tf__itree {
	struct tf__itree_node *root;
	uint32_t seed;
	size_t count;
};

void tf__itree_insert(struct tf__itree *t, struct tf__itree_node *n);
void tf__itree_remove(struct tf__itree *t, struct tf__itree_node *n);
/* Call @fn for every node overlapping [start, end), in start order, until
 * it returns nonzero (which is returned).  @fn must not modify the tree. */
int tf__itree_foreach(struct tf__itree *t, uint64_t start, uint64_t end,
		      int (*fn)(struct tf__itree_node *n, void *arg),
		      void *arg);

/* ------------------------------------------------------------ brlock
 * A reader-sharded ("big reader") lock: readers increment the counter of
 * their own shard, so that concurrent lookups on different threads do not
 * bounce one cache line; a writer raises a flag and waits for every shard
 * to drain.  Writers are rare (misses, invalidation, eviction).  Readers
 * and writers must not nest.  seq_cst on the flag and the counters makes
 * the Dekker-style handshake work: either the reader sees the flag or the
 * writer sees the reader's count. */

#define TF__BR_SHARDS 16

struct tf__brlock {
	struct {
		atomic_uint n;
	} __attribute__((aligned(TF__CACHELINE))) shard[TF__BR_SHARDS];
	atomic_int writer __attribute__((aligned(TF__CACHELINE)));
	pthread_mutex_t wmutex;
};

/* A small per-thread number, stable for the thread's life. */
unsigned tf__thread_shard(void);

int tf__brlock_init(struct tf__brlock *l);
void tf__brlock_destroy(struct tf__brlock *l);
void tf__brlock_wrlock(struct tf__brlock *l);
void tf__brlock_wrunlock(struct tf__brlock *l);

static inline void tf__brlock_rdlock(struct tf__brlock *l, unsigned s)
{
	for (;;) {
		atomic_fetch_add(&l->shard[s].n, 1);
		if (TF__LIKELY(!atomic_load(&l->writer)))
			return;
		/* A writer is active or waiting: back off so it can drain. */
		atomic_fetch_sub_explicit(&l->shard[s].n, 1,
					  memory_order_release);
		while (atomic_load_explicit(&l->writer, memory_order_acquire))
			sched_yield();
	}
}

static inline void tf__brlock_rdunlock(struct tf__brlock *l, unsigned s)
{
	atomic_fetch_sub_explicit(&l->shard[s].n, 1, memory_order_release);
}

/* ------------------------------------------------------- histograms */

static inline unsigned tf__lat_bucket(uint64_t ns)
{
	unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

	return b < TF_LAT_BUCKETS ? b : TF_LAT_BUCKETS - 1;
}

static inline void tf__lat_add(atomic_ullong *hist, uint64_t ns)
{
	atomic_fetch_add_explicit(&hist[tf__lat_bucket(ns)], 1,
				  memory_order_relaxed);
}

/* ------------------------------------------------------------- fork
 * The fork generation is bumped in every child created by fork(); objects
 * remember the generation they were created in and refuse to work in a
 * child (-TF_EFORK).  Reading it is one relaxed load. */

extern atomic_uint tf__fork_generation;
void tf__fork_init(void);

static inline unsigned tf__fork_gen(void)
{
	return atomic_load_explicit(&tf__fork_generation, memory_order_relaxed);
}

/* ---------------------------------------------------------- memmon
 * The process-wide userfaultfd monitor (memmon.c).  One thread reads
 * unmap/remove/remap events into a ring; caches consume the ring lazily,
 * on their next call. */

/* Start (first user) or join the monitor.  0, or -ENOTSUP (userfaultfd
 * unavailable: EPERM, ENOSYS, missing features) or -errno. */
int tf__memmon_open(void);
void tf__memmon_close(void);
/* Watch the pages of [addr, addr+len) for unmap events.  -errno if the
 * range cannot be watched (then it must not be cached). */
int tf__memmon_subscribe(uint64_t start, uint64_t end);
/* Stop watching; @unmapped: the range is known to be unmapped already. */
void tf__memmon_unsubscribe(uint64_t start, uint64_t end, bool unmapped);

/* Generation: odd while the monitor thread is between reading events and
 * publishing them.  A cache whose last seen generation differs must drain
 * the ring before trusting a lookup. */
extern atomic_ullong tf__memmon_generation;

static inline uint64_t tf__memmon_gen(void)
{
	return atomic_load_explicit(&tf__memmon_generation,
				    memory_order_acquire);
}

/* Wait until the monitor published what it read; returns the (even)
 * generation. */
uint64_t tf__memmon_wait_published(void);
/* Count of monitor errors after which events may have been lost: a cache
 * that sees it change must drop every region. */
unsigned tf__memmon_errors(void);
/* Sequence number of the next event to be written. */
uint64_t tf__memmon_head(void);
/* Read event @seq: 0, or -ESTALE if it was overwritten (ring overflow). */
int tf__memmon_event(uint64_t seq, uint64_t *start, uint64_t *end,
		     bool *unmapped);

/* ----------------------------------------------------------- rcache */

/* Registration ops: the public cache uses tf_mr_reg/tf_mr_dereg; unit
 * tests use fakes.  mem_reg fills *memh_p, *lkey_p and *rkey_p. */
struct tf__rcache_ops {
	int (*mem_reg)(void *arg, void *addr, size_t len, unsigned access,
		       void **memh_p, uint32_t *lkey_p, uint32_t *rkey_p);
	void (*mem_dereg)(void *arg, void *memh);
};

struct tf__rcache_config {
	uint64_t max_bytes;
	uint64_t max_regions;
	int monitor; /* enum tf_rcache_monitor */
	bool check;
};

int tf__rcache_create(const struct tf__rcache_ops *ops, void *arg,
		      const struct tf__rcache_config *cfg, tf_rcache_t **rc_p);
/* The memh given by the ops for @reg. */
void *tf__rcache_reg_memh(const tf_rcache_reg_t *reg);

#endif /* TOLLFREE_RCACHE_INT_H */
