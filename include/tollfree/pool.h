/* SPDX-License-Identifier: MIT */
/*
 * tollfree/pool.h - pools of pre-registered memory.
 *
 * A pool owns its memory: chunks (2 MiB by default, huge pages when the
 * system has them) registered once with TF_ACCESS_ALL, MW_BIND included, so
 * that a slice can be exposed to a peer through a memory window bound over
 * exactly that slice.  tf_pool_rent() hands out a slice of a power-of-two
 * size class (64 B to 1 MiB by default) and tf_pool_return() takes it back,
 * both in O(1) and, on the common path, from a per-thread cache without a
 * lock.  The pool grows on demand up to TOLLFREE_POOL_MAX bytes of chunks;
 * past that tf_pool_rent() returns -ENOMEM.
 *
 * Thread safety: rent, return and query_stats are thread-safe; create and
 * destroy are not thread-safe with respect to other uses of the pool.
 * Slices may be returned by another thread than the one that rented them.
 */
#ifndef TOLLFREE_POOL_H
#define TOLLFREE_POOL_H

#include <tollfree/mr.h>
#include <tollfree/rcache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_pool tf_pool_t;

enum tf_pool_params_field {
	TF_POOL_PARAM_MIN_SIZE = 1u << 0,
	TF_POOL_PARAM_MAX_SIZE = 1u << 1,
	TF_POOL_PARAM_MAX_BYTES = 1u << 2,
	TF_POOL_PARAM_CHUNK_SIZE = 1u << 3,
	TF_POOL_PARAM_ACCESS = 1u << 4,
	TF_POOL_PARAM_THREAD_CACHE = 1u << 5,
	TF_POOL_PARAM_MEMORY = 1u << 6,
};

/* Parameters of tf_pool_create(); unset fields take the TOLLFREE_POOL_*
 * configuration of the PD's context. */
typedef struct tf_pool_params {
	uint64_t field_mask;
	size_t min_size;       /* smallest class: power of two, 8..max_size */
	size_t max_size;       /* largest class: power of two */
	size_t max_bytes;      /* bound on chunk memory */
	size_t chunk_size;     /* multiple of the page size */
	unsigned access;       /* enum tf_access, default TF_ACCESS_ALL */
	unsigned thread_cache; /* slices per class per thread; 0: none */
	/* "auto", "provider" (tf_mem_alloc), "hugetlb", "thp", "regular". */
	const char *memory;
} tf_pool_params_t;

/*
 * A rented slice: everything a work request or a window bind needs.  The
 * caller may read every field and must hand the slice back unchanged.
 */
typedef struct tf_slice {
	void *addr;
	size_t length; /* as asked for (the class may be larger) */
	uint32_t lkey;
	uint32_t rkey; /* of the whole chunk: expose slices through windows */
	tf_mr_t *mr;   /* the chunk's region, to bind a window over the slice */
	uint64_t handle;
} tf_slice_t;

/* Where chunk memory came from. */
enum tf_pool_memory {
	TF_POOL_MEM_PROVIDER = 0, /* tf_mem_alloc: shareable with peers */
	TF_POOL_MEM_HUGETLB = 1,  /* mmap(MAP_HUGETLB): 2 MiB pages */
	TF_POOL_MEM_THP = 2,	  /* madvise(MADV_HUGEPAGE) requested */
	TF_POOL_MEM_REGULAR = 3,  /* base pages */
	TF_POOL_MEM_KINDS = 4,
};

typedef struct tf_pool_stats {
	uint64_t rents;
	uint64_t returns;
	uint64_t cache_hits;   /* rents served by the thread's cache */
	uint64_t cache_misses; /* rents that went to the shared free lists */
	uint64_t enomem;       /* rents refused: pool at max_bytes */
	uint64_t chunks;
	uint64_t chunk_bytes; /* registered bytes */
	uint64_t max_bytes;
	uint64_t slices;      /* slices carved from the chunks */
	uint64_t free_slices; /* of which free (shared lists + caches) */
	uint64_t chunks_by_memory[TF_POOL_MEM_KINDS]; /* enum tf_pool_memory */
	int huge_pages; /* 1 if any chunk is hugetlb or THP */
	int memory;	/* enum tf_pool_memory of the last chunk */
	uint64_t reg_ns[TF_LAT_BUCKETS]; /* chunk registration latency */
	uint64_t reserved[16];
} tf_pool_stats_t;

/*
 * tf_pool_create - create an empty pool on @pd (chunks come on demand).
 * @params: may be NULL.  Returns 0, -EINVAL or -ENOMEM.  Thread-safe.
 */
int tf_pool_create(tf_pd_t *pd, const tf_pool_params_t *params,
		   tf_pool_t **pool_p);
/*
 * tf_pool_destroy - deregister and free every chunk.  Slices still rented
 * are reported in the log and become invalid.  NULL-safe.
 */
void tf_pool_destroy(tf_pool_t *pool);
/*
 * tf_pool_rent - rent a slice of at least @size bytes into *@slice_p.
 * Returns 0, -EINVAL (@size is 0 or above the largest class), -ENOMEM (the
 * pool reached its bound, or a chunk could not be allocated or registered),
 * -ENOBUFS (a chunk would pass the context's TOLLFREE_MAX_PINNED),
 * -TF_EFORK in a forked child.  Thread-safe.
 */
int tf_pool_rent(tf_pool_t *pool, size_t size, tf_slice_t *slice_p);
/*
 * tf_pool_return - give a rented slice back.  Returns 0, or -EINVAL for a
 * slice that does not belong to @pool.  Thread-safe.
 */
int tf_pool_return(tf_pool_t *pool, const tf_slice_t *slice);
/* tf_pool_query_stats - copy the counters.  Thread-safe. */
int tf_pool_query_stats(tf_pool_t *pool, tf_pool_stats_t *stats);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_POOL_H */
