/* SPDX-License-Identifier: MIT */
/*
 * node_stats.c - a node's source of published statistics: its session
 * counters and those of its pool and registration cache, collected when a
 * reader of the context's segment asks (core/stats_pub.c calls the
 * source; nothing below this layer knows what a node is).
 */
#include <stdio.h>

#include "session_int.h"
#include "stats_int.h"

static const struct tf__stats_field node_fields[] = {
	TF__STATS_FIELD(tf_node_stats_t, sessions_opened),
	TF__STATS_FIELD(tf_node_stats_t, sessions_closed),
	TF__STATS_FIELD(tf_node_stats_t, sessions_live),
	TF__STATS_FIELD(tf_node_stats_t, connect_failures),
	TF__STATS_FIELD(tf_node_stats_t, auth_failures),
	TF__STATS_FIELD(tf_node_stats_t, handshake_rejects),
	TF__STATS_FIELD(tf_node_stats_t, qp_new),
	TF__STATS_FIELD(tf_node_stats_t, qp_reused),
	TF__STATS_FIELD(tf_node_stats_t, qp_destroyed),
	TF__STATS_FIELD(tf_node_stats_t, qp_broken),
	TF__STATS_FIELD(tf_node_stats_t, qp_idle),
	TF__STATS_FIELD(tf_node_stats_t, windows_bound),
	TF__STATS_FIELD(tf_node_stats_t, windows_revoked),
	TF__STATS_FIELD(tf_node_stats_t, windows_live),
	TF__STATS_FIELD(tf_node_stats_t, expose_mr_fallback),
	TF__STATS_FIELD(tf_node_stats_t, revoke_ns),
	TF__STATS_FIELD(tf_node_stats_t, attach_pool),
	TF__STATS_FIELD(tf_node_stats_t, attach_cache),
	TF__STATS_FIELD(tf_node_stats_t, attach_direct),
	TF__STATS_FIELD(tf_node_stats_t, copy_bytes),
	TF__STATS_FIELD(tf_node_stats_t, slices_rented),
	TF__STATS_FIELD(tf_node_stats_t, crossover),
	TF__STATS_FIELD(tf_node_stats_t, reg_mode),
	TF__STATS_FIELD(tf_node_stats_t, use_mw),
	TF__STATS_FIELD(tf_node_stats_t, auth),
	TF__STATS_FIELD(tf_node_stats_t, pending_dropped),
	TF__STATS_FIELD(tf_node_stats_t, pending_refused),
	TF__STATS_FIELD(tf_node_stats_t, stock_entries),
	TF__STATS_FIELD(tf_node_stats_t, stock_max),
	TF__STATS_FIELD(tf_node_stats_t, stock_bytes),
	TF__STATS_FIELD(tf_node_stats_t, stock_hits),
	TF__STATS_FIELD(tf_node_stats_t, stock_misses),
	TF__STATS_FIELD(tf_node_stats_t, stock_recycled),
	TF__STATS_FIELD(tf_node_stats_t, sessions_refused),
	TF__STATS_FIELD(tf_node_stats_t, sessions_refused_peer),
	TF__STATS_FIELD(tf_node_stats_t, expose_refused),
	TF__STATS_FIELD(tf_node_stats_t, kept_refused),
	TF__STATS_FIELD(tf_node_stats_t, exposed_bytes),
	TF__STATS_FIELD(tf_node_stats_t, sessions_served),
	TF__STATS_FIELD(tf_node_stats_t, grants_made),
	TF__STATS_FIELD(tf_node_stats_t, grants_taken),
	TF__STATS_FIELD(tf_node_stats_t, grants_dropped),
	TF__STATS_FIELD(tf_node_stats_t, remote_inv),
	TF__STATS_FIELD(tf_node_stats_t, remote_inv_missed),
	TF__STATS_FIELD(tf_node_stats_t, psk_early),
	TF__STATS_FIELD(tf_node_stats_t, psk_early_refused),
	TF__STATS_FIELD(tf_node_stats_t, stock_sockets),
	TF__STATS_FIELD(tf_node_stats_t, opens_deferred),
};

static const struct tf__stats_field pool_fields[] = {
	TF__STATS_FIELD(tf_pool_stats_t, rents),
	TF__STATS_FIELD(tf_pool_stats_t, returns),
	TF__STATS_FIELD(tf_pool_stats_t, cache_hits),
	TF__STATS_FIELD(tf_pool_stats_t, cache_misses),
	TF__STATS_FIELD(tf_pool_stats_t, enomem),
	TF__STATS_FIELD(tf_pool_stats_t, chunks),
	TF__STATS_FIELD(tf_pool_stats_t, chunk_bytes),
	TF__STATS_FIELD(tf_pool_stats_t, max_bytes),
	TF__STATS_FIELD(tf_pool_stats_t, slices),
	TF__STATS_FIELD(tf_pool_stats_t, free_slices),
	TF__STATS_FIELD(tf_pool_stats_t, huge_pages),
	TF__STATS_FIELD(tf_pool_stats_t, memory),
};

static const struct tf__stats_field rcache_fields[] = {
	TF__STATS_FIELD(tf_rcache_stats_t, hits),
	TF__STATS_FIELD(tf_rcache_stats_t, misses),
	TF__STATS_FIELD(tf_rcache_stats_t, evictions),
	TF__STATS_FIELD(tf_rcache_stats_t, invalidations),
	TF__STATS_FIELD(tf_rcache_stats_t, uncached),
	TF__STATS_FIELD(tf_rcache_stats_t, stale),
	TF__STATS_FIELD(tf_rcache_stats_t, reg_failures),
	TF__STATS_FIELD(tf_rcache_stats_t, monitor_events),
	TF__STATS_FIELD(tf_rcache_stats_t, regions),
	TF__STATS_FIELD(tf_rcache_stats_t, cached_bytes),
	TF__STATS_FIELD(tf_rcache_stats_t, pinned_regions),
	TF__STATS_FIELD(tf_rcache_stats_t, pinned_bytes),
	TF__STATS_FIELD(tf_rcache_stats_t, max_bytes),
	TF__STATS_FIELD(tf_rcache_stats_t, max_regions),
	TF__STATS_FIELD(tf_rcache_stats_t, monitor),
	TF__STATS_FIELD(tf_rcache_stats_t, check),
};

static void node_collect(struct tf__stats_source *src, void *rec)
{
	static const char *const kinds[TF_POOL_MEM_KINDS] = {
		[TF_POOL_MEM_PROVIDER] = "provider",
		[TF_POOL_MEM_HUGETLB] = "hugetlb",
		[TF_POOL_MEM_THP] = "thp",
		[TF_POOL_MEM_REGULAR] = "regular",
	};
	tf_node_stats_t ns;
	tf_pool_stats_t ps;
	tf_rcache_stats_t rs;
	struct tf_node *node =
		(struct tf_node *)((char *)src -
				   offsetof(struct tf_node, stats_src));
	char pfx[32], name[32];

	snprintf(pfx, sizeof(pfx), "node%u.", src->id);
	if (!tf_node_query_stats(node, &ns))
		tf__stats_add_fields(rec, pfx, &ns, node_fields,
				     TF__ARRAY_SIZE(node_fields));
	snprintf(pfx, sizeof(pfx), "node%u.pool.", src->id);
	if (!tf_pool_query_stats(node->pool, &ps)) {
		tf__stats_add_fields(rec, pfx, &ps, pool_fields,
				     TF__ARRAY_SIZE(pool_fields));
		for (unsigned k = 0; k < TF_POOL_MEM_KINDS; k++) {
			snprintf(name, sizeof(name), "chunks_%s", kinds[k]);
			tf__stats_add_named(rec, pfx, name,
					    ps.chunks_by_memory[k]);
		}
	}
	snprintf(pfx, sizeof(pfx), "node%u.rcache.", src->id);
	if (!tf_rcache_query_stats(node->rc, &rs))
		tf__stats_add_fields(rec, pfx, &rs, rcache_fields,
				     TF__ARRAY_SIZE(rcache_fields));
}

void tf__sess_stats_register(struct tf_node *node)
{
	node->stats_src.collect = node_collect;
	tf__stats_source_add(node->ctx, &node->stats_src);
}

void tf__sess_stats_unregister(struct tf_node *node)
{
	tf__stats_source_del(node->ctx, &node->stats_src);
}
