/* SPDX-License-Identifier: MIT */
/*
 * soft_xlate.c - a MODEL of a NIC's translation cache (the on-chip cache of
 * MTT/page-table entries that real NICs keep; misses cost a PCIe round trip
 * to fetch the translation from host memory).  Nothing is translated here:
 * the soft provider works on virtual addresses.  The model only decides
 * which page translations would be resident, so that benchmarks can see
 * the effect of registration churn and working-set size:
 *
 *  - TOLLFREE_SOFT_XLATE_ENTRIES page translations fit (LRU replacement);
 *  - every page a data transfer touches (local SGEs, and the target range)
 *    is a lookup: a hit, or a miss that inserts it (possibly evicting the
 *    least recently used one); a miss optionally busy-waits
 *    TOLLFREE_SOFT_XLATE_MISS_NS to model the fetch;
 *  - registration writes its translations, as a driver's MTT write does,
 *    so registering evicts other entries; deregistration drops them.
 *
 * The model is off unless TOLLFREE_SOFT_XLATE_ENTRIES or _MISS_NS is
 * nonzero (both default to 0): a transfer then pays one predictable branch
 * (soft_xlate_touch in soft_int.h), not a context-wide spinlock and two
 * counter stores, and the counters stay 0.  On with ENTRIES 0 and MISS_NS
 * nonzero models a NIC without a cache: every page misses and waits.
 * tollfree-bench churn sets both.
 *
 * Counters go to ctx->base.xlate_{hits,misses,evictions}.  Structure: an
 * open-addressing hash (page number -> entry) with backward-shift deletion
 * and an intrusive doubly linked LRU list of entries, both indexed by
 * uint32_t, so a lookup touches a few cache lines and never allocates.
 */
#include <errno.h>
#include <string.h>

#include "soft_int.h"

#define NIL UINT32_MAX

struct xent {
	uint64_t page; /* page number + 1; 0 unused */
	uint32_t prev, next;
};

struct ximpl {
	struct xent *ent; /* capacity entries */
	uint32_t *hash;	  /* hsize slots: entry index or NIL */
	uint32_t hmask;
	uint32_t used;	    /* entries in use */
	uint32_t lru_head;  /* most recent */
	uint32_t lru_tail;  /* least recent */
	uint32_t free_head; /* free entries, linked by next */
	/* Counters, published with plain stores under the lock. */
	uint64_t hits, misses, evictions;
};

static inline uint32_t hash_page(uint64_t page, uint32_t mask)
{
	return (uint32_t)((page * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

int soft_xlate_init(struct soft_ctx *ctx)
{
	struct soft_xlate *x = &ctx->xlate;
	struct ximpl *m;
	uint32_t cap = (uint32_t)ctx->base.cfg.soft_xlate_entries, hsize = 2;

	x->capacity = cap;
	x->miss_ns = (uint32_t)ctx->base.cfg.soft_xlate_miss_ns;
	x->on = cap || x->miss_ns;
	pthread_spin_init(&x->lock, PTHREAD_PROCESS_PRIVATE);
	if (!cap)
		return 0; /* no cache: every lookup is a miss (or model off) */
	while (hsize < 2ull * cap)
		hsize <<= 1;
	m = tf__calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->ent = tf__calloc(cap, sizeof(*m->ent));
	m->hash = tf__malloc(hsize * sizeof(*m->hash));
	if (!m->ent || !m->hash) {
		tf__free(m->ent);
		tf__free(m->hash);
		tf__free(m);
		return -ENOMEM;
	}
	memset(m->hash, 0xff, hsize * sizeof(*m->hash));
	m->hmask = hsize - 1;
	m->lru_head = m->lru_tail = NIL;
	for (uint32_t i = 0; i < cap; i++)
		m->ent[i].next = i + 1 < cap ? i + 1 : NIL;
	m->free_head = 0;
	x->impl = m;
	return 0;
}

void soft_xlate_fini(struct soft_ctx *ctx)
{
	struct ximpl *m = ctx->xlate.impl;

	if (m) {
		tf__free(m->ent);
		tf__free(m->hash);
		tf__free(m);
	}
	pthread_spin_destroy(&ctx->xlate.lock);
}

static uint32_t find(struct ximpl *m, uint64_t key, uint32_t *hslot)
{
	uint32_t h = hash_page(key, m->hmask);

	for (;;) {
		uint32_t e = m->hash[h];

		if (e == NIL) {
			*hslot = h;
			return NIL;
		}
		if (m->ent[e].page == key) {
			*hslot = h;
			return e;
		}
		h = (h + 1) & m->hmask;
	}
}

/* Remove hash slot @h with backward-shift deletion (linear probing). */
static void hash_del(struct ximpl *m, uint32_t h)
{
	uint32_t j = h;

	for (;;) {
		uint32_t e, home;

		j = (j + 1) & m->hmask;
		e = m->hash[j];
		if (e == NIL)
			break;
		home = hash_page(m->ent[e].page, m->hmask);
		/* Move e back to h unless its home lies cyclically in
		 * (h, j]. */
		if ((j > h && (home <= h || home > j)) ||
		    (j < h && (home <= h && home > j))) {
			m->hash[h] = e;
			h = j;
		}
	}
	m->hash[h] = NIL;
}

static void lru_unlink(struct ximpl *m, uint32_t e)
{
	struct xent *x = &m->ent[e];

	if (x->prev != NIL)
		m->ent[x->prev].next = x->next;
	else
		m->lru_head = x->next;
	if (x->next != NIL)
		m->ent[x->next].prev = x->prev;
	else
		m->lru_tail = x->prev;
}

static void lru_push_front(struct ximpl *m, uint32_t e)
{
	m->ent[e].prev = NIL;
	m->ent[e].next = m->lru_head;
	if (m->lru_head != NIL)
		m->ent[m->lru_head].prev = e;
	m->lru_head = e;
	if (m->lru_tail == NIL)
		m->lru_tail = e;
}

/* Make @key resident; returns true on hit.  Lock held. */
static bool touch_one(struct soft_ctx *ctx, struct ximpl *m, uint64_t key)
{
	uint32_t h, e = find(m, key, &h);

	if (e != NIL) {
		if (m->lru_head != e) {
			lru_unlink(m, e);
			lru_push_front(m, e);
		}
		return true;
	}
	if (m->free_head != NIL) {
		e = m->free_head;
		m->free_head = m->ent[e].next;
		m->used++;
	} else {
		uint32_t vh;

		e = m->lru_tail;
		lru_unlink(m, e);
		find(m, m->ent[e].page, &vh);
		hash_del(m, vh);
		atomic_store_explicit(&ctx->base.xlate_evictions,
				      ++m->evictions, memory_order_relaxed);
		/* The deletion may have moved entries: find the free slot
		 * for the new key again. */
		find(m, key, &h);
	}
	m->ent[e].page = key;
	m->hash[h] = e;
	lru_push_front(m, e);
	return false;
}

static void busy_wait_ns(uint64_t ns)
{
	uint64_t end = tf__now_ns() + ns;

	while (tf__now_ns() < end)
		tf__cpu_relax();
}

/* The model is on (soft_xlate_touch checked). */
void soft_xlate_touch_model(struct soft_ctx *ctx, uint64_t addr, uint64_t len)
{
	struct soft_xlate *x = &ctx->xlate;
	struct ximpl *m = x->impl;
	uint64_t first, last, hits = 0, misses = 0;

	if (!len)
		return;
	first = addr / SOFT_PAGE_SIZE;
	last = (addr + len - 1) / SOFT_PAGE_SIZE;
	if (!m) {
		misses = last - first + 1;
		TF_STAT_ADD(&ctx->base, xlate_misses, misses);
	} else {
		pthread_spin_lock(&x->lock);
		/* The most recent entry is the common case (a buffer used
		 * again and again): a hit without a hash lookup. */
		if (first == last && m->lru_head != NIL &&
		    m->ent[m->lru_head].page == first + 1) {
			hits = 1;
		} else {
			for (uint64_t p = first; p <= last; p++) {
				if (touch_one(ctx, m, p + 1))
					hits++;
				else
					misses++;
			}
		}
		if (hits) {
			m->hits += hits;
			atomic_store_explicit(&ctx->base.xlate_hits, m->hits,
					      memory_order_relaxed);
		}
		if (misses) {
			m->misses += misses;
			atomic_store_explicit(&ctx->base.xlate_misses,
					      m->misses, memory_order_relaxed);
		}
		pthread_spin_unlock(&x->lock);
	}
	if (misses && x->miss_ns)
		busy_wait_ns(misses * x->miss_ns);
}

void soft_xlate_insert(struct soft_ctx *ctx, uint64_t addr, uint64_t len)
{
	struct soft_xlate *x = &ctx->xlate;
	struct ximpl *m = x->impl;
	uint64_t first, last;

	if (!m || !len)
		return;
	first = addr / SOFT_PAGE_SIZE;
	last = (addr + len - 1) / SOFT_PAGE_SIZE;
	pthread_spin_lock(&x->lock);
	for (uint64_t p = first; p <= last; p++)
		touch_one(ctx, m, p + 1);
	pthread_spin_unlock(&x->lock);
}

void soft_xlate_remove(struct soft_ctx *ctx, uint64_t addr, uint64_t len)
{
	struct soft_xlate *x = &ctx->xlate;
	struct ximpl *m = x->impl;
	uint64_t first, last;

	if (!m || !len)
		return;
	first = addr / SOFT_PAGE_SIZE;
	last = (addr + len - 1) / SOFT_PAGE_SIZE;
	pthread_spin_lock(&x->lock);
	/* A region larger than the cache: only resident pages matter, so
	 * walking the LRU would be cheaper, but registration cost is meant
	 * to grow with the page count, as the driver's does. */
	for (uint64_t p = first; p <= last; p++) {
		uint32_t h, e = find(m, p + 1, &h);

		if (e == NIL)
			continue;
		hash_del(m, h);
		lru_unlink(m, e);
		m->ent[e].page = 0;
		m->ent[e].next = m->free_head;
		m->free_head = e;
		m->used--;
	}
	pthread_spin_unlock(&x->lock);
}
