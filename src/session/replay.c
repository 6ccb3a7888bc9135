/* SPDX-License-Identifier: MIT */
/*
 * replay.c - a node's record of the early OPENs it took (with a
 * pre-shared key, tollfree(7) "Early OPEN").
 *
 * A client with a key may send its OPEN, sealed, right behind its HELLO,
 * with the time it was sent.  The server takes it, and answers with its
 * CHALLENGE and ACCEPT together, only if its client nonce is new: the
 * record holds the nonce of every early OPEN taken whose time is within
 * the window.  Anything else (a nonce seen before, a time outside the
 * window, a full record) gets the classic CHALLENGE: a replayed HELLO
 * then goes no further, since only a holder of the key can answer it.
 *
 * Why a replay cannot pass: a nonce taken is forgotten only once its
 * time is below the floor, and the floor (the server's realtime clock
 * less the window, the highest ever seen) never goes down, so a time
 * below it is refused whatever the clock does later.
 *
 * The record is a ring in arrival order (evicted from its head, once the
 * head's time is below the floor) with a chained hash of the nonces.  It
 * holds only nonces of OPENs that opened under the key: a peer without
 * the key cannot fill it.  A full one costs the clients a round trip,
 * never a refusal.
 */
#include <errno.h>
#include <string.h>

#include "session_int.h"

void tf__replay_init(struct tf_replay *r, unsigned cap, uint64_t window_ns)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	r->window_ns = window_ns;
	r->cap = window_ns ? cap : 0; /* 0: off, every HELLO is challenged */
}

/* The record's memory, at the first early OPEN (a node that only
 * connects never needs it).  Under the lock. */
static int replay_alloc(struct tf_replay *r)
{
	unsigned nb = 1;

	while (nb < 2 * r->cap)
		nb <<= 1;
	r->ring = tf__calloc(r->cap, sizeof(*r->ring));
	r->bucket = tf__calloc(nb, sizeof(*r->bucket));
	if (!r->ring || !r->bucket) {
		tf__free(r->ring);
		tf__free(r->bucket);
		r->ring = NULL;
		r->bucket = NULL;
		return -ENOMEM;
	}
	for (unsigned i = 0; i < nb; i++)
		r->bucket[i] = -1;
	r->mask = nb - 1;
	r->salt = ((uint64_t)tf__random_u32() << 32) | tf__random_u32();
	return 0;
}

void tf__replay_fini(struct tf_replay *r)
{
	tf__free(r->ring);
	tf__free(r->bucket);
	r->ring = NULL;
	r->bucket = NULL;
	pthread_mutex_destroy(&r->lock);
}

static unsigned bucket_of(const struct tf_replay *r, const uint8_t *nonce)
{
	uint64_t v;

	memcpy(&v, nonce, sizeof(v));
	v = (v ^ r->salt) * 0x9e3779b97f4a7c15ull;
	return (unsigned)(v >> 32) & r->mask;
}

/* Take the ring's head out of its hash chain and off the ring. */
static void evict_head(struct tf_replay *r)
{
	int32_t h = (int32_t)r->head, *p;

	for (p = &r->bucket[bucket_of(r, r->ring[h].nonce)]; *p != h;
	     p = &r->ring[*p].next)
		;
	*p = r->ring[h].next;
	r->head = (r->head + 1) % r->cap;
	r->n--;
}

enum tf_replay_verdict tf__replay_admit(struct tf_replay *r,
					const uint8_t nonce[TF_WIRE_NONCE],
					uint64_t sent_ns, uint64_t now_ns)
{
	enum tf_replay_verdict v = TF_REPLAY_FRESH;
	unsigned b, i;
	int32_t e;

	if (!r->cap)
		return TF_REPLAY_OFF;
	pthread_mutex_lock(&r->lock);
	/* Without memory for it, the clients pay the round trip. */
	if (!r->ring && replay_alloc(r)) {
		v = TF_REPLAY_FULL;
		goto out;
	}
	if (now_ns > r->window_ns && now_ns - r->window_ns > r->floor)
		r->floor = now_ns - r->window_ns;
	while (r->n && r->ring[r->head].sent_ns < r->floor)
		evict_head(r);
	if (sent_ns < r->floor || sent_ns > now_ns + r->window_ns) {
		v = TF_REPLAY_STALE;
		goto out;
	}
	b = bucket_of(r, nonce);
	for (e = r->bucket[b]; e >= 0; e = r->ring[e].next)
		if (!memcmp(r->ring[e].nonce, nonce, TF_WIRE_NONCE)) {
			v = TF_REPLAY_SEEN;
			goto out;
		}
	if (r->n == r->cap) {
		v = TF_REPLAY_FULL;
		goto out;
	}
	i = (r->head + r->n) % r->cap;
	memcpy(r->ring[i].nonce, nonce, TF_WIRE_NONCE);
	r->ring[i].sent_ns = sent_ns;
	r->ring[i].next = r->bucket[b];
	r->bucket[b] = (int32_t)i;
	r->n++;
out:
	pthread_mutex_unlock(&r->lock);
	return v;
}
