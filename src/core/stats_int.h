/* SPDX-License-Identifier: MIT */
/*
 * stats_int.h - live publication of a context's statistics for
 * `tollfree-info -s` (TOLLFREE_STATS_PUBLISH) and the close-time dump
 * (TOLLFREE_STATS).  The record format is in stats_fmt.h.
 *
 * The published snapshot is refreshed on demand: a reader bumps the
 * segment's req word and the owner answers the next time one of its
 * threads makes progress (tf_context_progress, tf_cq_wait before it
 * sleeps, a listener's accept), at most once per millisecond however
 * often req moves.  A user's post or poll never builds a snapshot.
 *
 * Sources: the context's own counters are always collected; a higher
 * layer that wants its counters in the record (a node: sessions, pool,
 * cache) registers a struct tf__stats_source whose collect function adds
 * them.  Core never calls up into the layer that owns a source.
 */
#ifndef TOLLFREE_STATS_INT_H
#define TOLLFREE_STATS_INT_H

#include "provider.h"

/* A source of counters published with a context's record. */
struct tf__stats_source {
	struct tf__stats_source *next;
	/* Add entries to @rec (tf__stats_add_named/_fields); runs with the
	 * publication lock held, from a progress call: must not block. */
	void (*collect)(struct tf__stats_source *src, void *rec);
	unsigned id; /* its number in the record (set when added) */
};

/* Counters of a stats struct, named after their fields, read by offset and
 * size (uint64_t counters, int settings). */
struct tf__stats_field {
	const char *name;
	size_t off, size;
};
#define TF__STATS_FIELD(_type, _f)                                 \
	{                                                          \
#_f, offsetof(_type, _f), sizeof(((_type *)0)->_f) \
	}

void tf__stats_add_named(void *rec, const char *prefix, const char *name,
			 uint64_t v);
void tf__stats_add_fields(void *rec, const char *prefix, const void *st,
			  const struct tf__stats_field *f, size_t n);

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

/* Fill the counters of @s that live in the context's QPs and CQs
 * (send_posted, recv_posted, bytes_out, cqe_ok, cqe_err): the sums over
 * the live objects plus what destroyed ones had counted.  objects.c;
 * takes ctx->obj_lock. */
void tf__stats_objects(struct tf_context *ctx, tf_context_stats_t *s);

/* Register or remove a source of a publishing context (nothing happens
 * when publication is off).  Thread-safe. */
void tf__stats_source_add(struct tf_context *ctx, struct tf__stats_source *src);
void tf__stats_source_del(struct tf_context *ctx, struct tf__stats_source *src);

#endif /* TOLLFREE_STATS_INT_H */
