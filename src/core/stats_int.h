/* SPDX-License-Identifier: MIT */
/*
 * stats_int.h - live publication of a context's statistics for
 * `tollfree-info -s` (TOLLFREE_STATS_PUBLISH) and the close-time dump
 * (TOLLFREE_STATS).  The record format is in stats_fmt.h.
 *
 * The published snapshot is refreshed on demand: a reader bumps the
 * segment's req word and the owner answers the next time one of its
 * threads polls a CQ (tf_cq_poll, tf_cq_wait, sessions) or calls
 * tf_context_progress(), at most once per millisecond however often req
 * moves.  Nothing is written while nobody asks, so the data path pays one
 * predictable branch when publication is off and one load of a rarely
 * written shared word when it is on; the clock is read only while a
 * request is pending.
 */
#ifndef TOLLFREE_STATS_INT_H
#define TOLLFREE_STATS_INT_H

#include "provider.h"

struct tf_node;

/* At open: number the context, note its start, and publish it when
 * ctx->cfg.stats_publish is set (a failure is logged and publication is
 * off; the context still opens). */
void tf__stats_ctx_init(struct tf_context *ctx);
/* At close: write the dump TOLLFREE_STATS asks for, then remove the
 * published segment. */
void tf__stats_ctx_fini(struct tf_context *ctx);

/* Answer a pending reader request, if any (slow path of the check). */
void tf__stats_pub_poll(struct tf_context *ctx);

/* Called where the library already is on a completion or progress path:
 * a NULL test when publication is off. */
static inline void tf__stats_check(struct tf_context *ctx)
{
	if (__builtin_expect(ctx->stats_pub != NULL, 0))
		tf__stats_pub_poll(ctx);
}

/* Nodes of a publishing context are listed so that their session, pool
 * and cache counters are published too.  Thread-safe. */
void tf__stats_node_add(struct tf_context *ctx, struct tf_node *node);
void tf__stats_node_del(struct tf_context *ctx, struct tf_node *node);

#endif /* TOLLFREE_STATS_INT_H */
