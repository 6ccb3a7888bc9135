/* SPDX-License-Identifier: MIT */
/*
 * util.h - the bottom layer (src/util/): what every other layer and every
 * provider may use.  Allocation through the overridable allocator, the log
 * hook, randomness, time, the configuration table (config_int.h), common
 * macros, a reader-sharded lock, latency histograms, the fork generation
 * and the bounded spin-then-yield wait.  Nothing here calls up into core,
 * mem or session (src/README.md).
 */
#ifndef TOLLFREE_UTIL_H
#define TOLLFREE_UTIL_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <tollfree/tollfree.h>

#include "config_int.h"

#define TF__LIKELY(_x)	 __builtin_expect(!!(_x), 1)
#define TF__UNLIKELY(_x) __builtin_expect(!!(_x), 0)
/* Rare work called from a hot path: kept out of line, so that its locals
 * do not grow the caller's frame. */
#define TF__COLD	   __attribute__((cold, noinline))
#define TF__ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))
#define TF__CACHELINE	   64
/* Hot-path thread-locals: initial-exec avoids a __tls_get_addr call per
 * access in the shared library (a few bytes of static TLS). */
#define TF__TLS __thread __attribute__((tls_model("initial-exec")))

/* Increment a relaxed counter (statistics only, no ordering): a locked
 * add, for counters that several threads may bump at once. */
#define TF_STAT_ADD(_obj, _field, _n) \
	atomic_fetch_add_explicit(&(_obj)->_field, (_n), memory_order_relaxed)

/* Add to a counter that has one writer at a time (the owner of the object,
 * or the holder of its lock): a relaxed load and store, no locked
 * instruction.  Readers on other threads still see whole values. */
#define TF_STAT_ADD_OWNED(_obj, _field, _n)                                   \
	atomic_store_explicit(                                                \
		&(_obj)->_field,                                              \
		atomic_load_explicit(&(_obj)->_field, memory_order_relaxed) + \
			(_n),                                                 \
		memory_order_relaxed)

/* ------------------------------------------------------------ helpers
 * Allocator, logging, randomness, time. */

void *tf__malloc(size_t size);
void *tf__calloc(size_t nmemb, size_t size);
void *tf__realloc(void *ptr, size_t size);
void tf__free(void *ptr);

void tf__log(tf_log_level_t level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool tf__log_enabled(tf_log_level_t level);
/* Set by the configuration loader (config.c): TOLLFREE_LOG_LEVEL and
 * TOLLFREE_LOG_RATE (lines per second per message, 0: no limit). */
void tf__log_set_config_level(int level);
void tf__log_set_config_rate(unsigned per_second);

#define tf_log_error(_sub, ...) tf__log(TF_LOG_ERROR, _sub, __VA_ARGS__)
#define tf_log_warn(_sub, ...)	tf__log(TF_LOG_WARN, _sub, __VA_ARGS__)
#define tf_log_info(_sub, ...)	tf__log(TF_LOG_INFO, _sub, __VA_ARGS__)
#define tf_log_debug(_sub, ...)                                   \
	do {                                                      \
		if (tf__log_enabled(TF_LOG_DEBUG))                \
			tf__log(TF_LOG_DEBUG, _sub, __VA_ARGS__); \
	} while (0)

/* Fill @buf with CSPRNG bytes (getrandom, else /dev/urandom); 0 or
 * -errno (logged). */
int tf__random(void *buf, size_t len);
/* A random 32-bit value that is neither 0 nor ~0, or 0 when no randomness
 * can be had (logged): callers that make keys must refuse then, since a
 * predictable key would grant access to a guesser. */
uint32_t tf__random_u32(void);
/* Fill @buf with @len bytes (at most 64) of the same CSPRNG output, taken
 * from the per-thread buffer tf__random_u32 draws from (used once, wiped,
 * discarded in a child after fork): one system call per few calls.  0 or
 * -errno (logged). */
int tf__random_buffered(void *buf, size_t len);

/* Monotonic time. */
uint64_t tf__now_ns(void);
/* CLOCK_REALTIME in ns: for times compared across hosts only. */
uint64_t tf__realtime_ns(void);

/* Spin-wait hint, for busy-wait loops. */
static inline void tf__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

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

/* ---------------------------------------------------------- backoff
 * A wait for a peer or a provider: spin (pause) for @spin_us, then yield
 * between polls.  The messages and completions waited for take a
 * microsecond or less to arrive; a system call on every turn (sched_yield
 * costs about as much) would double that, and a wake-up across cores
 * would cost tens of microseconds.  After the spin, yielding lets a peer
 * that shares the core answer.
 *
 * The spin itself yields every @yield_us (tf__spin_pause): where threads
 * outnumber cores, a waiter that spins holds a core that the thread it
 * waits for (its peer process, the server) needs, and the answer comes
 * only when the scheduler takes the core away, milliseconds later.
 * sched_yield lets a runnable thread of that core's queue in, and returns
 * at once when there is none.  With 12 client threads and a server on 2
 * CPUs, sessions on kept connections ran 2x (grants: 3x) as many a
 * second with a yield every 5 us as with none (tollfree-bench load). */
struct tf_backoff {
	uint64_t start, spin_ns, yield_ns, yielded, deadline;
};

/* One pause of a spin at @now: a yield if the last was @yield_ns ago
 * (0: never), else a pause instruction. */
static inline void tf__spin_pause(uint64_t now, uint64_t yield_ns,
				  uint64_t *yielded)
{
	if (yield_ns && now - *yielded >= yield_ns) {
		*yielded = now;
		sched_yield();
	} else {
		tf__cpu_relax();
	}
}

/* A wait of at most @timeout_ms (< 0: none), spinning @spin_us first and
 * yielding every @yield_us of it. */
static inline void tf__backoff_init(struct tf_backoff *b, unsigned spin_us,
				    unsigned yield_us, int timeout_ms)
{
	b->start = tf__now_ns();
	b->yielded = b->start;
	b->spin_ns = (uint64_t)spin_us * 1000;
	b->yield_ns = (uint64_t)yield_us * 1000;
	b->deadline = timeout_ms < 0
			      ? UINT64_MAX
			      : b->start + (uint64_t)timeout_ms * 1000000;
}

/* One turn of the wait, after a poll that found nothing: -ETIMEDOUT once
 * the deadline passed, else 0 after a pause or a yield. */
static inline int tf__backoff(struct tf_backoff *b)
{
	uint64_t now = tf__now_ns();

	if (now >= b->deadline)
		return -ETIMEDOUT;
	if (now - b->start < b->spin_ns)
		tf__spin_pause(now, b->yield_ns, &b->yielded);
	else
		sched_yield();
	return 0;
}

/* One turn of a wait that sleeps after its spin, after a poll that found
 * nothing: -ETIMEDOUT once the deadline passed, 0 after a pause while
 * still spinning, 1 when the spin is over and the caller should arm its
 * fds and sleep (tf__backoff_ms_left bounds the sleep). */
static inline int tf__backoff_spin(struct tf_backoff *b)
{
	uint64_t now = tf__now_ns();

	if (now >= b->deadline)
		return -ETIMEDOUT;
	if (now - b->start >= b->spin_ns)
		return 1;
	tf__spin_pause(now, b->yield_ns, &b->yielded);
	return 0;
}

/* The rest of the wait in milliseconds, rounded up, for poll/epoll_wait:
 * -1 without a deadline, 0 once it passed. */
static inline int tf__backoff_ms_left(const struct tf_backoff *b)
{
	uint64_t now = tf__now_ns(), ms;

	if (b->deadline == UINT64_MAX)
		return -1;
	if (now >= b->deadline)
		return 0;
	ms = (b->deadline - now + 999999) / 1000000;
	return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

#endif /* TOLLFREE_UTIL_H */
