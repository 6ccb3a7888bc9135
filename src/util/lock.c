/* SPDX-License-Identifier: MIT */
/*
 * lock.c - the reader-sharded lock and the per-thread shard number.
 */
#include "util.h"

/* ------------------------------------------------------------ brlock */

unsigned tf__thread_shard(void)
{
	static atomic_uint next;
	static TF__TLS unsigned id;

	if (TF__UNLIKELY(!id))
		id = (atomic_fetch_add_explicit(&next, 1,
						memory_order_relaxed) %
		      TF__BR_SHARDS) +
		     1;
	return id - 1;
}

int tf__brlock_init(struct tf__brlock *l)
{
	for (unsigned i = 0; i < TF__BR_SHARDS; i++)
		atomic_init(&l->shard[i].n, 0);
	atomic_init(&l->writer, 0);
	return -pthread_mutex_init(&l->wmutex, NULL);
}

void tf__brlock_destroy(struct tf__brlock *l)
{
	pthread_mutex_destroy(&l->wmutex);
}

void tf__brlock_wrlock(struct tf__brlock *l)
{
	pthread_mutex_lock(&l->wmutex);
	atomic_store(&l->writer, 1);
	for (unsigned i = 0; i < TF__BR_SHARDS; i++) {
		unsigned spins = 0;

		while (atomic_load(&l->shard[i].n)) {
			if (++spins < 64)
				tf__cpu_relax();
			else
				sched_yield();
		}
	}
}

void tf__brlock_wrunlock(struct tf__brlock *l)
{
	atomic_store_explicit(&l->writer, 0, memory_order_release);
	pthread_mutex_unlock(&l->wmutex);
}
