/* SPDX-License-Identifier: MIT */
/*
 * pool.c - pools of pre-registered memory (see tollfree/pool.h).
 *
 * Layout: a chunk belongs to one size class and is cut into equal slices.
 * A slice is named by a 64-bit handle, (chunk index << 32) | slice index,
 * so that nothing is stored inside registered memory (a peer that may
 * write a chunk must not be able to corrupt our free lists) and a slice's
 * address, keys and region follow from two loads.  The chunk table has a
 * fixed size (max_bytes / chunk size entries), so readers never see it
 * move; an entry is written before any handle of its chunk is published
 * through a class lock.
 *
 * Free slices live in per-class stacks of handles (one mutex per class)
 * and, on the common path, in per-thread caches: a rent pops from the
 * thread's bin, a return pushes onto it, neither takes a lock.  An empty
 * bin refills half of its capacity from the class stack, a full one gives
 * half back.  Per-thread caches are found through a small direct-mapped
 * thread-local table keyed by pool id (ids are never reused, so a stale
 * entry cannot match a new pool).  They are freed when their thread exits
 * (a pthread key destructor returns their slices) or, for pools destroyed
 * earlier, the next time that thread needs a new cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "provider.h"

#define POOL_MAX_CLASSES 40
#define TLS_SLOTS	 8
#define HUGE_2M		 (2ull << 20)

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif

struct pool_chunk {
	uint8_t *base;
	size_t len;    /* mapped and registered bytes */
	size_t mapped; /* bytes to unmap (>= len for hugetlb rounding) */
	tf_mr_t *mr;
	uint32_t lkey, rkey;
	unsigned cls;
	unsigned shift; /* log2 of the slice size */
	uint32_t nslices;
	enum tf_pool_memory kind;
};

struct pool_class {
	pthread_mutex_t lock;
	uint64_t *free; /* stack of handles, room for every slice */
	size_t nfree, cap;
	size_t nslices;	 /* slices of the class's chunks */
	unsigned tc_cap; /* per-thread bin capacity */
};

struct pool_bin {
	atomic_uint n; /* owner writes; stats read (relaxed) */
	uint64_t *h;
};

struct pool_tcache {
	struct tf_pool *pool; /* NULL once the pool is destroyed; tc_lock */
	uint64_t pool_id;
	struct pool_tcache *pool_next, *pool_prev;  /* tc_lock */
	struct pool_tcache *thr_next;		    /* owner thread only */
	atomic_ullong rents, returns, hits, misses; /* owner writes */
	struct pool_bin bins[];
};

struct tf_pool {
	uint64_t id;
	struct tf_pd *pd;
	struct tf_context *ctx;
	unsigned fork_gen;
	pid_t pid; /* checked on slow paths too (clone/vfork children) */
	size_t min_size, max_size, max_bytes, chunk_size;
	unsigned min_shift, ncls, access, thread_cache;
	enum tf_pool_memory memory; /* requested; "auto" resolved per chunk */
	bool memory_auto;
	struct pool_chunk **chunks; /* fixed table of max_chunks */
	size_t max_chunks;
	atomic_size_t nchunks;
	atomic_ullong chunk_bytes;
	pthread_mutex_t grow_lock;
	struct pool_class cls[POOL_MAX_CLASSES];
	struct pool_tcache *tcaches; /* tc_lock */
	/* Counters of rents that bypass thread caches, and of the dead. */
	atomic_ullong rents, returns, misses, enomem;
	atomic_ullong by_kind[TF_POOL_MEM_KINDS];
	atomic_int last_kind;
	atomic_ullong reg_ns[TF_LAT_BUCKETS];
};

/* Thread-local cache table, and the list of this thread's caches. */
struct tls_slot {
	uint64_t id;
	struct pool_tcache *tc;
};
static TF__TLS struct tls_slot tls_tc[TLS_SLOTS];
static TF__TLS struct pool_tcache *tls_list;

static pthread_mutex_t tc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t tc_key;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;
static atomic_ullong next_pool_id = 1;

#define RELAXED memory_order_relaxed

/* Owner-only counter increment: a relaxed load and store, no locked
 * instruction; readers use relaxed loads. */
#define OWN_INC(_p, _f)                                                     \
	atomic_store_explicit(&(_p)->_f,                                    \
			      atomic_load_explicit(&(_p)->_f, RELAXED) + 1, \
			      RELAXED)

static inline uint64_t mkhandle(size_t chunk, uint32_t slice)
{
	return ((uint64_t)chunk << 32) | slice;
}

/* ------------------------------------------------------ chunk memory */

static const char *const memory_names[] = {"provider", "hugetlb", "thp",
					   "regular"};

/* THP can back madvise(MADV_HUGEPAGE) regions unless it is "never". */
static bool thp_usable(void)
{
	static atomic_int known; /* 0 unknown, 1 yes, 2 no */
	int k = atomic_load_explicit(&known, RELAXED);

	if (!k) {
		char buf[128] = "";
		int fd = open("/sys/kernel/mm/transparent_hugepage/enabled",
			      O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf) - 1);

			buf[n > 0 ? n : 0] = 0;
			close(fd);
		}
		k = fd >= 0 && !strstr(buf, "[never]") ? 1 : 2;
		atomic_store_explicit(&known, k, RELAXED);
	}
	return k == 1;
}

/* Map @len bytes of @kind; 0 or -errno.  *mapped_p gets the length to
 * unmap. */
static int chunk_map(struct tf_pool *p, enum tf_pool_memory kind, size_t len,
		     void **addr_p, size_t *mapped_p)
{
	void *a;

	switch (kind) {
	case TF_POOL_MEM_PROVIDER:
		*mapped_p = len;
		return tf_mem_alloc(p->ctx, len, addr_p);
	case TF_POOL_MEM_HUGETLB:
		len = (len + HUGE_2M - 1) & ~(HUGE_2M - 1);
		a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
				 MAP_HUGE_2MB,
			 -1, 0);
		if (a == MAP_FAILED)
			return -errno;
		*addr_p = a;
		*mapped_p = len;
		return 0;
	case TF_POOL_MEM_THP: {
		if (!thp_usable())
			return -EOPNOTSUPP;
		/* Over-map to align on 2 MiB, then trim, so that whole
		 * huge pages can back the chunk. */
		size_t big = len + HUGE_2M;
		uintptr_t s, e;

		a = mmap(NULL, big, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (a == MAP_FAILED)
			return -errno;
		s = ((uintptr_t)a + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1);
		e = s + len;
		if (s > (uintptr_t)a)
			munmap(a, s - (uintptr_t)a);
		if ((uintptr_t)a + big > e)
			munmap((void *)e, (uintptr_t)a + big - e);
		if (madvise((void *)s, len, MADV_HUGEPAGE)) {
			int err = -errno;

			munmap((void *)s, len);
			return err;
		}
		*addr_p = (void *)s;
		*mapped_p = len;
		return 0;
	}
	case TF_POOL_MEM_REGULAR:
	default:
		a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (a == MAP_FAILED)
			return -errno;
		*addr_p = a;
		*mapped_p = len;
		return 0;
	}
}

static void chunk_unmap(struct tf_pool *p, struct pool_chunk *c)
{
	if (c->kind == TF_POOL_MEM_PROVIDER)
		tf_mem_free(p->ctx, c->base, c->mapped);
	else
		munmap(c->base, c->mapped);
}

/* Allocate, register and publish one chunk for class @cls.  grow_lock
 * must be held. */
static int chunk_add(struct tf_pool *p, unsigned cls)
{
	unsigned shift = p->min_shift + cls;
	size_t slice = (size_t)1 << shift;
	size_t len = p->chunk_size > slice ? p->chunk_size : slice;
	size_t idx = atomic_load_explicit(&p->nchunks, RELAXED);
	struct pool_class *pc = &p->cls[cls];
	enum tf_pool_memory kind;
	struct pool_chunk *c;
	uint64_t t0;
	int ret;

	len -= len % slice;
	if (idx >= p->max_chunks ||
	    atomic_load_explicit(&p->chunk_bytes, RELAXED) + len > p->max_bytes)
		return -ENOMEM;
	c = tf__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	/* "auto" tries the kinds in order: shareable provider memory, then
	 * hugetlb (needs reserved huge pages), THP, base pages. */
	kind = p->memory;
	for (;;) {
		void *a;

		ret = chunk_map(p, kind, len, &a, &c->mapped);
		if (!ret) {
			c->base = a;
			break;
		}
		if (!p->memory_auto || kind == TF_POOL_MEM_REGULAR) {
			tf_log_warn("pool",
				    "cannot allocate a %zu-byte chunk "
				    "of %s memory: %s",
				    len, memory_names[kind], tf_strerror(ret));
			goto err_free;
		}
		kind++;
	}
	/* A forked child must not write into memory peers may be reading
	 * (and its pinned pages must not turn copy-on-write). */
	(void)madvise(c->base, c->mapped, MADV_DONTFORK);
	c->len = len;
	c->kind = kind;
	c->cls = cls;
	c->shift = shift;
	c->nslices = (uint32_t)(len >> shift);
	t0 = tf__now_ns();
	ret = tf_mr_reg(p->pd, c->base, len, p->access, &c->mr);
	tf__lat_add(p->reg_ns, tf__now_ns() - t0);
	if (ret) {
		/* The provider logged the cause; this says who asked. */
		tf_log_debug("pool", "cannot register a %zu-byte chunk: %s%s",
			     len, tf_strerror(ret),
			     ret == -ENOMEM || ret == -EAGAIN
				     ? " (pinning refused: check "
				       "RLIMIT_MEMLOCK)"
				     : "");
		if (ret == -EAGAIN || ret == -EFAULT)
			ret = -ENOMEM;
		goto err_unmap;
	}
	c->lkey = tf_mr_lkey(c->mr);
	c->rkey = tf_mr_rkey(c->mr);

	pthread_mutex_lock(&pc->lock);
	/* Room for every slice of the class, not only for those free now:
	 * the rented ones come back onto this stack (class_give does not
	 * grow it). */
	if (pc->nslices + c->nslices > pc->cap) {
		size_t cap = pc->cap ? pc->cap : 64;
		uint64_t *f;

		while (cap < pc->nslices + c->nslices)
			cap *= 2;
		f = tf__realloc(pc->free, cap * sizeof(*f));
		if (!f) {
			pthread_mutex_unlock(&pc->lock);
			ret = -ENOMEM;
			goto err_dereg;
		}
		pc->free = f;
		pc->cap = cap;
	}
	/* The table entry is visible to any thread that later pops one of
	 * these handles: the class lock orders the two. */
	p->chunks[idx] = c;
	atomic_store_explicit(&p->nchunks, idx + 1, memory_order_release);
	/* Push in reverse so that slices are handed out in address order. */
	for (uint32_t i = c->nslices; i-- > 0;)
		pc->free[pc->nfree++] = mkhandle(idx, i);
	pc->nslices += c->nslices;
	pthread_mutex_unlock(&pc->lock);
	atomic_fetch_add_explicit(&p->chunk_bytes, len, RELAXED);
	atomic_fetch_add_explicit(&p->by_kind[kind], 1, RELAXED);
	atomic_store_explicit(&p->last_kind, (int)kind, RELAXED);
	tf_log_debug("pool", "chunk %zu: %zu bytes of %s memory, class %zu B",
		     idx, len, memory_names[kind], slice);
	return 0;

err_dereg:
	tf_mr_dereg(c->mr);
err_unmap:
	chunk_unmap(p, c);
err_free:
	tf__free(c);
	return ret;
}

/* Move up to @want handles of class @cls into @out (taking the class lock,
 * growing the pool if the stack is empty).  Returns the number moved or
 * -ENOMEM. */
static int class_take(struct tf_pool *p, unsigned cls, uint64_t *out,
		      unsigned want)
{
	struct pool_class *pc = &p->cls[cls];
	unsigned n;
	int ret;

	for (;;) {
		pthread_mutex_lock(&pc->lock);
		n = pc->nfree < want ? (unsigned)pc->nfree : want;
		pc->nfree -= n;
		if (n)
			memcpy(out, pc->free + pc->nfree, n * sizeof(*out));
		pthread_mutex_unlock(&pc->lock);
		if (n)
			return (int)n;
		pthread_mutex_lock(&p->grow_lock);
		/* Another thread may have grown the class meanwhile; a
		 * racy peek is enough to avoid a needless chunk. */
		pthread_mutex_lock(&pc->lock);
		n = (unsigned)pc->nfree;
		pthread_mutex_unlock(&pc->lock);
		ret = n ? 0 : chunk_add(p, cls);
		pthread_mutex_unlock(&p->grow_lock);
		if (ret)
			return ret;
	}
}

static void class_give(struct tf_pool *p, unsigned cls, const uint64_t *h,
		       unsigned n)
{
	struct pool_class *pc = &p->cls[cls];

	/* The stack was sized for every slice of the class: no growth. */
	pthread_mutex_lock(&pc->lock);
	memcpy(pc->free + pc->nfree, h, n * sizeof(*h));
	pc->nfree += n;
	pthread_mutex_unlock(&pc->lock);
}

/* ------------------------------------------------ per-thread caches */

/* Return a cache's slices to its pool (if alive) and free it.  tc_lock
 * must be held. */
static void tcache_free_locked(struct pool_tcache *tc)
{
	struct tf_pool *p = tc->pool;

	if (p) {
		for (unsigned c = 0; c < p->ncls; c++) {
			unsigned n =
				atomic_load_explicit(&tc->bins[c].n, RELAXED);

			if (n)
				class_give(p, c, tc->bins[c].h, n);
		}
		/* Keep the counters of exited threads. */
		atomic_fetch_add_explicit(
			&p->rents, atomic_load_explicit(&tc->rents, RELAXED),
			RELAXED);
		atomic_fetch_add_explicit(
			&p->returns,
			atomic_load_explicit(&tc->returns, RELAXED), RELAXED);
		atomic_fetch_add_explicit(
			&p->misses, atomic_load_explicit(&tc->misses, RELAXED),
			RELAXED);
		if (tc->pool_prev)
			tc->pool_prev->pool_next = tc->pool_next;
		else
			p->tcaches = tc->pool_next;
		if (tc->pool_next)
			tc->pool_next->pool_prev = tc->pool_prev;
	}
	tf__free(tc);
}

static void tcache_thread_exit(void *arg)
{
	struct pool_tcache *tc = tls_list;

	(void)arg;
	pthread_mutex_lock(&tc_lock);
	while (tc) {
		struct pool_tcache *next = tc->thr_next;

		tcache_free_locked(tc);
		tc = next;
	}
	pthread_mutex_unlock(&tc_lock);
	tls_list = NULL;
	memset(tls_tc, 0, sizeof(tls_tc));
}

static void tc_key_create(void)
{
	(void)pthread_key_create(&tc_key, tcache_thread_exit);
}

/* The calling thread's cache for @p, created if needed; NULL when caches
 * are disabled or memory is short (the caller then uses the class lists). */
static struct pool_tcache *__attribute__((noinline))
tcache_slow(struct tf_pool *p)
{
	struct tls_slot *slot = &tls_tc[p->id % TLS_SLOTS];
	struct pool_tcache *tc, **pp;
	size_t per = 0;

	if (!p->thread_cache)
		return NULL;
	pthread_mutex_lock(&tc_lock);
	/* Known already (evicted from the direct-mapped table)?  Free the
	 * caches of destroyed pools on the way. */
	for (pp = &tls_list; (tc = *pp);) {
		if (!tc->pool) {
			*pp = tc->thr_next;
			tcache_free_locked(tc);
			continue;
		}
		if (tc->pool == p && tc->pool_id == p->id)
			goto found;
		pp = &tc->thr_next;
	}
	for (unsigned c = 0; c < p->ncls; c++)
		per += p->cls[c].tc_cap;
	tc = tf__calloc(1, sizeof(*tc) + p->ncls * sizeof(tc->bins[0]) +
				   per * sizeof(uint64_t));
	if (!tc) {
		pthread_mutex_unlock(&tc_lock);
		return NULL;
	}
	{
		uint64_t *h = (uint64_t *)&tc->bins[p->ncls];

		for (unsigned c = 0; c < p->ncls; c++) {
			tc->bins[c].h = h;
			h += p->cls[c].tc_cap;
		}
	}
	tc->pool = p;
	tc->pool_id = p->id;
	tc->pool_next = p->tcaches;
	if (p->tcaches)
		p->tcaches->pool_prev = tc;
	p->tcaches = tc;
	tc->thr_next = tls_list;
	tls_list = tc;
	pthread_once(&tc_once, tc_key_create);
	/* Any non-NULL value arms the destructor. */
	(void)pthread_setspecific(tc_key, &tls_list);
found:
	pthread_mutex_unlock(&tc_lock);
	slot->id = p->id;
	slot->tc = tc;
	return tc;
}

static inline struct pool_tcache *tcache_get(struct tf_pool *p)
{
	struct tls_slot *slot = &tls_tc[p->id % TLS_SLOTS];

	if (TF__LIKELY(slot->id == p->id))
		return slot->tc;
	return tcache_slow(p);
}

/* ------------------------------------------------------------ API */

static inline unsigned size_class(const struct tf_pool *p, size_t size)
{
	unsigned bits;

	if (size <= p->min_size)
		return 0;
	bits = 64u - (unsigned)__builtin_clzll((unsigned long long)size - 1);
	return bits - p->min_shift;
}

static inline void fill_slice(const struct tf_pool *p, uint64_t h, size_t size,
			      tf_slice_t *s)
{
	const struct pool_chunk *c = p->chunks[h >> 32];

	s->addr = c->base + ((size_t)(uint32_t)h << c->shift);
	s->length = size;
	s->lkey = c->lkey;
	s->rkey = c->rkey;
	s->mr = c->mr;
	s->handle = h;
}

static int __attribute__((noinline))
rent_slow(struct tf_pool *p, struct pool_tcache *tc, unsigned cls, size_t size,
	  tf_slice_t *s)
{
	uint64_t h;
	int n;

	if (getpid() != p->pid)
		return -TF_EFORK;
	if (!tc) {
		n = class_take(p, cls, &h, 1);
		if (n < 0)
			goto enomem;
		atomic_fetch_add_explicit(&p->rents, 1, RELAXED);
		atomic_fetch_add_explicit(&p->misses, 1, RELAXED);
		fill_slice(p, h, size, s);
		return 0;
	}
	/* Refill half the bin, so that alternating rents and returns at
	 * the boundary do not hit the lock every time. */
	n = class_take(p, cls, tc->bins[cls].h, (p->cls[cls].tc_cap + 1) / 2);
	if (n < 0)
		goto enomem;
	OWN_INC(tc, misses);
	OWN_INC(tc, rents);
	n--;
	atomic_store_explicit(&tc->bins[cls].n, (unsigned)n, RELAXED);
	fill_slice(p, tc->bins[cls].h[n], size, s);
	return 0;

enomem:
	atomic_fetch_add_explicit(&p->enomem, 1, RELAXED);
	return n;
}

int tf_pool_rent(tf_pool_t *p, size_t size, tf_slice_t *slice_p)
{
	struct pool_tcache *tc;
	struct pool_bin *bin;
	unsigned cls, n;

	if (TF__UNLIKELY(!p || !slice_p || !size || size > p->max_size))
		return -EINVAL;
	if (TF__UNLIKELY(p->fork_gen != tf__fork_gen()))
		return -TF_EFORK;
	cls = size_class(p, size);
	tc = tcache_get(p);
	if (TF__UNLIKELY(!tc))
		return rent_slow(p, NULL, cls, size, slice_p);
	bin = &tc->bins[cls];
	n = atomic_load_explicit(&bin->n, RELAXED);
	if (TF__UNLIKELY(!n))
		return rent_slow(p, tc, cls, size, slice_p);
	atomic_store_explicit(&bin->n, --n, RELAXED);
	OWN_INC(tc, rents);
	OWN_INC(tc, hits);
	fill_slice(p, bin->h[n], size, slice_p);
	return 0;
}

int tf_pool_return(tf_pool_t *p, const tf_slice_t *s)
{
	const struct pool_chunk *c;
	struct pool_tcache *tc;
	struct pool_bin *bin;
	uint64_t h;
	size_t ci;
	unsigned n, cap;

	if (TF__UNLIKELY(!p || !s))
		return -EINVAL;
	if (TF__UNLIKELY(p->fork_gen != tf__fork_gen()))
		return -TF_EFORK;
	h = s->handle;
	ci = h >> 32;
	/* Check the slice against the handle: a foreign or corrupted slice
	 * must not enter the free lists. */
	if (TF__UNLIKELY(ci >= atomic_load_explicit(&p->nchunks,
						    memory_order_acquire)))
		return -EINVAL;
	c = p->chunks[ci];
	if (TF__UNLIKELY((uint32_t)h >= c->nslices ||
			 s->addr !=
				 c->base + ((size_t)(uint32_t)h << c->shift) ||
			 s->length > ((size_t)1 << c->shift)))
		return -EINVAL;
	tc = tcache_get(p);
	if (TF__UNLIKELY(!tc)) {
		class_give(p, c->cls, &h, 1);
		atomic_fetch_add_explicit(&p->returns, 1, RELAXED);
		return 0;
	}
	bin = &tc->bins[c->cls];
	n = atomic_load_explicit(&bin->n, RELAXED);
	cap = p->cls[c->cls].tc_cap;
	if (TF__UNLIKELY(n == cap)) {
		/* Give back the older half; keep the hot tail. */
		unsigned give = cap / 2 ? cap / 2 : 1;

		class_give(p, c->cls, bin->h, give);
		memmove(bin->h, bin->h + give, (n - give) * sizeof(*bin->h));
		n -= give;
	}
	bin->h[n] = h;
	atomic_store_explicit(&bin->n, n + 1, RELAXED);
	OWN_INC(tc, returns);
	return 0;
}

int tf_pool_query_stats(tf_pool_t *p, tf_pool_stats_t *s)
{
	uint64_t free_slices = 0, slices = 0;
	size_t nchunks;

	if (!p || !s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->rents = atomic_load_explicit(&p->rents, RELAXED);
	s->returns = atomic_load_explicit(&p->returns, RELAXED);
	s->cache_misses = atomic_load_explicit(&p->misses, RELAXED);
	pthread_mutex_lock(&tc_lock);
	for (struct pool_tcache *tc = p->tcaches; tc; tc = tc->pool_next) {
		s->rents += atomic_load_explicit(&tc->rents, RELAXED);
		s->returns += atomic_load_explicit(&tc->returns, RELAXED);
		s->cache_hits += atomic_load_explicit(&tc->hits, RELAXED);
		s->cache_misses += atomic_load_explicit(&tc->misses, RELAXED);
		for (unsigned c = 0; c < p->ncls; c++)
			free_slices +=
				atomic_load_explicit(&tc->bins[c].n, RELAXED);
	}
	pthread_mutex_unlock(&tc_lock);
	/* Exited threads' hits are not kept; rents minus misses is. */
	if (s->rents >= s->cache_misses)
		s->cache_hits = s->rents - s->cache_misses;
	for (unsigned c = 0; c < p->ncls; c++) {
		pthread_mutex_lock(&p->cls[c].lock);
		free_slices += p->cls[c].nfree;
		pthread_mutex_unlock(&p->cls[c].lock);
	}
	pthread_mutex_lock(&p->grow_lock);
	nchunks = atomic_load_explicit(&p->nchunks, RELAXED);
	for (size_t i = 0; i < nchunks; i++)
		slices += p->chunks[i]->nslices;
	pthread_mutex_unlock(&p->grow_lock);
	s->enomem = atomic_load_explicit(&p->enomem, RELAXED);
	s->chunks = nchunks;
	s->chunk_bytes = atomic_load_explicit(&p->chunk_bytes, RELAXED);
	s->max_bytes = p->max_bytes;
	s->slices = slices;
	s->free_slices = free_slices;
	for (unsigned k = 0; k < TF_POOL_MEM_KINDS; k++)
		s->chunks_by_memory[k] =
			atomic_load_explicit(&p->by_kind[k], RELAXED);
	s->huge_pages = s->chunks_by_memory[TF_POOL_MEM_HUGETLB] ||
			s->chunks_by_memory[TF_POOL_MEM_THP];
	s->memory = atomic_load_explicit(&p->last_kind, RELAXED);
	for (unsigned i = 0; i < TF_LAT_BUCKETS; i++)
		s->reg_ns[i] = atomic_load_explicit(&p->reg_ns[i], RELAXED);
	return 0;
}

static bool is_pow2(size_t x)
{
	return x && !(x & (x - 1));
}

static int parse_memory(const char *s, enum tf_pool_memory *kind, bool *is_auto)
{
	*is_auto = false;
	if (!strcasecmp(s, "auto")) {
		*is_auto = true;
		*kind = TF_POOL_MEM_PROVIDER;
		return 0;
	}
	for (unsigned k = 0; k < TF_POOL_MEM_KINDS; k++) {
		if (!strcasecmp(s, memory_names[k])) {
			*kind = (enum tf_pool_memory)k;
			return 0;
		}
	}
	return -EINVAL;
}

int tf_pool_create(tf_pd_t *pd, const tf_pool_params_t *params,
		   tf_pool_t **pool_p)
{
	const struct tf_config *cfg;
	const char *memory;
	struct tf_pool *p;
	uint64_t mask;
	long ps = sysconf(_SC_PAGESIZE);
	tf_caps_t caps;
	int ret;

	if (!pd || !pool_p)
		return -EINVAL;
	cfg = &pd->ctx->cfg;
	mask = params ? params->field_mask : 0;
	p = tf__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pd = pd;
	p->ctx = pd->ctx;
	tf__fork_init();
	p->fork_gen = tf__fork_gen();
	p->pid = getpid();
	p->min_size = mask & TF_POOL_PARAM_MIN_SIZE ? params->min_size
						    : cfg->pool_min_slice;
	p->max_size = mask & TF_POOL_PARAM_MAX_SIZE ? params->max_size
						    : cfg->pool_max_slice;
	p->max_bytes = mask & TF_POOL_PARAM_MAX_BYTES ? params->max_bytes
						      : cfg->pool_max;
	p->chunk_size = mask & TF_POOL_PARAM_CHUNK_SIZE ? params->chunk_size
							: cfg->pool_chunk;
	p->access =
		mask & TF_POOL_PARAM_ACCESS ? params->access : TF_ACCESS_ALL;
	p->thread_cache = mask & TF_POOL_PARAM_THREAD_CACHE
				  ? params->thread_cache
				  : (unsigned)cfg->pool_thread_cache;
	memory = mask & TF_POOL_PARAM_MEMORY && params->memory
			 ? params->memory
			 : cfg->pool_memory;
	ret = -EINVAL;
	if (!is_pow2(p->min_size) || p->min_size < 8 || !is_pow2(p->max_size) ||
	    p->max_size < p->min_size || !p->chunk_size ||
	    p->chunk_size % (size_t)ps || p->chunk_size > (1ull << 40) ||
	    p->max_bytes < p->chunk_size ||
	    (p->access & ~(unsigned)TF_ACCESS_ALL) ||
	    p->max_size > (1ull << 40) ||
	    __builtin_ctzll(p->max_size) - __builtin_ctzll(p->min_size) >=
		    POOL_MAX_CLASSES ||
	    /* At most 2^32 slices per chunk (the handle's low half). */
	    (p->chunk_size >> __builtin_ctzll(p->min_size)) > UINT32_MAX ||
	    p->thread_cache > 65536 ||
	    parse_memory(memory, &p->memory, &p->memory_auto)) {
		tf_log_error("pool",
			     "invalid pool parameters (min %zu, max "
			     "%zu, chunk %zu, bound %zu, memory %s)",
			     p->min_size, p->max_size, p->chunk_size,
			     p->max_bytes, memory);
		goto err_free;
	}
	/* Provider memory only when it is worth it (shareable with peers);
	 * otherwise "auto" starts at huge pages. */
	if (p->memory_auto && (tf_context_query_caps(p->ctx, &caps) ||
			       !(caps.flags & TF_CAP_MEM_ALLOC)))
		p->memory = TF_POOL_MEM_HUGETLB;
	p->min_shift = (unsigned)__builtin_ctzll(p->min_size);
	p->ncls = (unsigned)__builtin_ctzll(p->max_size) - p->min_shift + 1;
	for (unsigned c = 0; c < p->ncls; c++) {
		size_t slice = p->min_size << c;
		size_t cap = p->thread_cache;

		/* Bound what one thread hoards in a class to ~256 KiB, but
		 * keep two slots so that a bin can refill and flush. */
		if (cap && slice * cap > (256u << 10))
			cap = (256u << 10) / slice;
		if (p->thread_cache && cap < 2)
			cap = 2;
		p->cls[c].tc_cap = (unsigned)cap;
		ret = -pthread_mutex_init(&p->cls[c].lock, NULL);
		if (ret) {
			for (unsigned d = 0; d < c; d++)
				pthread_mutex_destroy(&p->cls[d].lock);
			goto err_free;
		}
	}
	/* The chunk table never moves, so it is sized now; "inf" still gets
	 * a finite table (2^20 chunks: 2 TiB of 2 MiB chunks). */
	p->max_chunks = p->max_bytes / p->chunk_size;
	if (p->max_chunks > (1u << 20))
		p->max_chunks = 1u << 20;
	p->chunks = tf__calloc(p->max_chunks, sizeof(*p->chunks));
	ret = -ENOMEM;
	if (!p->chunks)
		goto err_classes;
	ret = -pthread_mutex_init(&p->grow_lock, NULL);
	if (ret)
		goto err_chunks;
	p->id = atomic_fetch_add(&next_pool_id, 1);
	*pool_p = p;
	return 0;

err_chunks:
	tf__free(p->chunks);
err_classes:
	for (unsigned c = 0; c < p->ncls; c++)
		pthread_mutex_destroy(&p->cls[c].lock);
err_free:
	tf__free(p);
	return ret;
}

void tf_pool_destroy(tf_pool_t *p)
{
	uint64_t slices = 0, free_slices = 0;
	size_t nchunks;

	if (!p)
		return;
	if (p->fork_gen != tf__fork_gen() || getpid() != p->pid) {
		/* A forked child has no chunk mappings (MADV_DONTFORK) and
		 * must not deregister the parent's regions: free only the
		 * bookkeeping. */
		nchunks = atomic_load_explicit(&p->nchunks, RELAXED);
		for (size_t i = 0; i < nchunks; i++)
			tf__free(p->chunks[i]);
		for (unsigned c = 0; c < p->ncls; c++)
			tf__free(p->cls[c].free);
		tf__free(p->chunks);
		tf__free(p);
		return;
	}
	pthread_mutex_lock(&tc_lock);
	for (struct pool_tcache *tc = p->tcaches, *next; tc; tc = next) {
		next = tc->pool_next;
		for (unsigned c = 0; c < p->ncls; c++)
			free_slices +=
				atomic_load_explicit(&tc->bins[c].n, RELAXED);
		/* Other threads free their cache later (next slow path or
		 * thread exit); ours goes now, below. */
		tc->pool = NULL;
	}
	p->tcaches = NULL;
	for (struct pool_tcache **pp = &tls_list, *tc; (tc = *pp);) {
		if (tc->pool) {
			pp = &tc->thr_next;
			continue;
		}
		*pp = tc->thr_next;
		tcache_free_locked(tc);
	}
	pthread_mutex_unlock(&tc_lock);
	for (unsigned c = 0; c < p->ncls; c++)
		free_slices += p->cls[c].nfree;
	nchunks = atomic_load_explicit(&p->nchunks, RELAXED);
	for (size_t i = 0; i < nchunks; i++)
		slices += p->chunks[i]->nslices;
	if (free_slices != slices)
		tf_log_warn("pool", "destroyed with %llu slices still rented",
			    (unsigned long long)(slices - free_slices));
	for (size_t i = 0; i < nchunks; i++) {
		struct pool_chunk *c = p->chunks[i];
		int ret = tf_mr_dereg(c->mr);

		if (ret)
			tf_log_error("pool", "chunk deregistration failed: %s",
				     tf_strerror(ret));
		else
			chunk_unmap(p, c);
		tf__free(c);
	}
	tls_tc[p->id % TLS_SLOTS].id = 0;
	for (unsigned c = 0; c < p->ncls; c++) {
		pthread_mutex_destroy(&p->cls[c].lock);
		tf__free(p->cls[c].free);
	}
	pthread_mutex_destroy(&p->grow_lock);
	tf__free(p->chunks);
	tf__free(p);
}
