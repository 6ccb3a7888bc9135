/* SPDX-License-Identifier: MIT */
/*
 * rcache_int.h - internals shared by the registration cache (rcache.c) and
 * the memory monitor (memmon.c): the monitor's interface, and the rcache's
 * registration ops (so that unit tests can plug in fake ones).
 */
#ifndef TOLLFREE_RCACHE_INT_H
#define TOLLFREE_RCACHE_INT_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

#include "itree.h"
#include "provider.h"

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
	/* Tests: tell private from shared memory by the pagemap, as on
	 * kernels without PROCMAP_QUERY. */
	bool no_vma_query;
};

int tf__rcache_create(const struct tf__rcache_ops *ops, void *arg,
		      const struct tf__rcache_config *cfg, tf_rcache_t **rc_p);
/* The memh given by the ops for @reg. */
void *tf__rcache_reg_memh(const tf_rcache_reg_t *reg);

#endif /* TOLLFREE_RCACHE_INT_H */
