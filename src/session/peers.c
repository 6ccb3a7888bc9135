/* SPDX-License-Identifier: MIT */
/*
 * peers.c - what each peer holds on this node as a server, and the bounds
 * on it (TOLLFREE_SESSION_MAX_SESSIONS{,_PEER}, _MAX_EXPOSED_PEER,
 * _MAX_KEPT{,_PEER}).  A peer is the remote IP address, port aside (an
 * IPv4-mapped IPv6 address is its IPv4 address), as for the listener's
 * pending-handshake bound.
 *
 * The table cannot itself be grown by a peer: an entry exists only while
 * its peer has a live server session or a kept connection here, and both
 * are bounded overall, so there are at most MAX_SESSIONS + MAX_KEPT
 * entries; the bucket array is sized once, at node creation.  The hash is
 * keyed with a random seed, so that a peer choosing its addresses (an
 * IPv6 prefix) cannot aim them at one chain.
 *
 * Listener threads and the threads that close sessions share the table:
 * its counts change under its mutex; an entry's exposed bytes are an
 * atomic (an expose does not take the lock), read and changed only by
 * sessions that hold the entry (its session count keeps it alive).
 */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT(_n, _f) \
	atomic_fetch_add_explicit(&(_n)->_f, 1, memory_order_relaxed)

#define PEER_KEY    17 /* family (4 or 6), then 16 address bytes */
#define BUCKETS_MIN 64u
#define BUCKETS_MAX 65536u

struct tf_peer {
	struct tf_peer *next; /* hash chain */
	uint8_t key[PEER_KEY];
	unsigned sessions, kept; /* under the table's lock */
	atomic_ullong exposed;
};

/* The key of @sa: 0, or -EAFNOSUPPORT for a socket that is not IP. */
static int peer_key(const struct sockaddr_storage *sa, uint8_t key[PEER_KEY])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
					   0, 0, 0, 0, 0xff, 0xff};

	memset(key, 0, PEER_KEY);
	if (sa->ss_family == AF_INET) {
		key[0] = 4;
		memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->ss_family == AF_INET6) {
		const uint8_t *a =
			((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;

		if (!memcmp(a, mapped, sizeof(mapped))) {
			key[0] = 4;
			memcpy(key + 1, a + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, a, 16);
		}
		return 0;
	}
	return -EAFNOSUPPORT;
}

static unsigned peer_hash(const struct tf_peers *t, const uint8_t *key)
{
	uint64_t h = t->seed, w;

	for (unsigned i = 0; i < PEER_KEY; i += 8) {
		w = 0;
		memcpy(&w, key + i, PEER_KEY - i < 8 ? PEER_KEY - i : 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ull;
		h ^= h >> 29;
	}
	return (unsigned)(h ^ (h >> 32)) & (t->n_buckets - 1);
}

/* The entry of @key, made if @make (NULL if out of memory).  Lock held. */
static struct tf_peer *peer_find(struct tf_peers *t, const uint8_t *key,
				 bool make)
{
	unsigned b = peer_hash(t, key);
	struct tf_peer *p;

	for (p = t->bucket[b]; p; p = p->next)
		if (!memcmp(p->key, key, PEER_KEY))
			return p;
	if (!make)
		return NULL;
	p = tf__calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	memcpy(p->key, key, PEER_KEY);
	atomic_init(&p->exposed, 0);
	p->next = t->bucket[b];
	t->bucket[b] = p;
	t->n_ent++;
	return p;
}

/* Free @p if it holds nothing any more.  Lock held. */
static void peer_maybe_free(struct tf_peers *t, struct tf_peer *p)
{
	struct tf_peer **pp;

	if (p->sessions || p->kept)
		return;
	for (pp = &t->bucket[peer_hash(t, p->key)]; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			t->n_ent--;
			tf__free(p);
			return;
		}
	}
}

int tf__peers_init(struct tf_node *node)
{
	const struct tf_config *cfg = &node->ctx->cfg;
	struct tf_peers *t = &node->peers;
	uint64_t want;

	if (!cfg->session_max_sessions || !cfg->session_max_sessions_peer) {
		tf_log_error(S, "TOLLFREE_SESSION_MAX_SESSIONS and "
				"_MAX_SESSIONS_PEER must be positive");
		return -EINVAL;
	}
	t->max_sessions = (unsigned)cfg->session_max_sessions;
	t->max_sessions_peer = (unsigned)cfg->session_max_sessions_peer;
	t->max_kept = (unsigned)cfg->session_max_kept;
	t->max_kept_peer = (unsigned)cfg->session_max_kept_peer;
	t->max_exposed_peer = cfg->session_max_exposed_peer;
	/* About two entries a bucket when every bound is reached. */
	want = ((uint64_t)t->max_sessions + t->max_kept) / 2;
	t->n_buckets = BUCKETS_MIN;
	while (t->n_buckets < BUCKETS_MAX && t->n_buckets < want)
		t->n_buckets *= 2;
	t->bucket = tf__calloc(t->n_buckets, sizeof(t->bucket[0]));
	if (!t->bucket)
		return -ENOMEM;
	if (tf__random(&t->seed, sizeof(t->seed)))
		t->seed = (uint64_t)tf__random_u32() << 32 | tf__random_u32();
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void tf__peers_fini(struct tf_node *node)
{
	struct tf_peers *t = &node->peers;

	if (!t->bucket)
		return;
	/* Sessions and listeners are closed first (tf_node_destroy), so
	 * nothing is left; a survivor's entry goes with the table. */
	for (unsigned b = 0; b < t->n_buckets; b++) {
		while (t->bucket[b]) {
			struct tf_peer *p = t->bucket[b];

			t->bucket[b] = p->next;
			tf__free(p);
		}
	}
	tf__free(t->bucket);
	t->bucket = NULL;
	pthread_mutex_destroy(&t->lock);
}

int tf__peers_session_get(struct tf_node *node,
			  const struct sockaddr_storage *peer,
			  struct tf_peer **pe_p)
{
	struct tf_peers *t = &node->peers;
	uint8_t key[PEER_KEY];
	struct tf_peer *p;
	int ret = 0;

	if (peer_key(peer, key))
		return -EAFNOSUPPORT;
	pthread_mutex_lock(&t->lock);
	if (t->sessions >= t->max_sessions) {
		ret = -EBUSY;
		goto out;
	}
	p = peer_find(t, key, true);
	if (!p) {
		ret = -ENOMEM;
		goto out;
	}
	if (p->sessions >= t->max_sessions_peer) {
		ret = -EUSERS;
		goto out;
	}
	p->sessions++;
	t->sessions++;
	*pe_p = p;
out:
	pthread_mutex_unlock(&t->lock);
	if (ret == -EBUSY) {
		STAT(node, sessions_refused);
		tf_log_warn(S, "handshake: refused: the node serves "
			       "TOLLFREE_SESSION_MAX_SESSIONS sessions");
	} else if (ret == -EUSERS) {
		STAT(node, sessions_refused_peer);
		tf_log_warn(S, "handshake: refused: the client's address has "
			       "TOLLFREE_SESSION_MAX_SESSIONS_PEER sessions "
			       "here");
	}
	return ret;
}

void tf__peers_session_put(struct tf_node *node, struct tf_peer *p)
{
	struct tf_peers *t = &node->peers;

	pthread_mutex_lock(&t->lock);
	p->sessions--;
	t->sessions--;
	peer_maybe_free(t, p);
	pthread_mutex_unlock(&t->lock);
}

int tf__peers_expose(struct tf_node *node, struct tf_peer *p, uint64_t len)
{
	uint64_t max = node->peers.max_exposed_peer;
	unsigned long long cur =
		atomic_load_explicit(&p->exposed, memory_order_relaxed);

	do {
		if (len > max || cur > max - len) {
			STAT(node, expose_refused);
			tf_log_warn(S,
				    "expose of %llu bytes refused: the peer "
				    "has %llu bytes exposed "
				    "(TOLLFREE_SESSION_MAX_EXPOSED_PEER "
				    "%llu)",
				    (unsigned long long)len, cur,
				    (unsigned long long)max);
			return -ENOBUFS;
		}
	} while (!atomic_compare_exchange_weak_explicit(
		&p->exposed, &cur, cur + len, memory_order_relaxed,
		memory_order_relaxed));
	atomic_fetch_add_explicit(&node->peers.exposed, len,
				  memory_order_relaxed);
	return 0;
}

void tf__peers_unexpose(struct tf_node *node, struct tf_peer *p, uint64_t len)
{
	atomic_fetch_sub_explicit(&p->exposed, len, memory_order_relaxed);
	atomic_fetch_sub_explicit(&node->peers.exposed, len,
				  memory_order_relaxed);
}

bool tf__peers_keep(struct tf_node *node, struct tf_conn *c)
{
	struct tf_peers *t = &node->peers;
	uint8_t key[PEER_KEY];
	struct tf_peer *p = NULL;
	bool over;

	if (c->kept_pe)
		return true;
	if (peer_key(&c->peer, key))
		return false;
	pthread_mutex_lock(&t->lock);
	over = t->kept >= t->max_kept;
	if (!over) {
		p = peer_find(t, key, true);
		over = !p || p->kept >= t->max_kept_peer;
	}
	if (!over) {
		p->kept++;
		t->kept++;
		c->kept_pe = p;
	} else if (p) {
		peer_maybe_free(t, p);
	}
	pthread_mutex_unlock(&t->lock);
	if (over) {
		STAT(node, kept_refused);
		tf_log_debug(S, "connection not kept: TOLLFREE_SESSION_"
				"MAX_KEPT or _MAX_KEPT_PEER reached");
	}
	return !over;
}

void tf__peers_unkeep(struct tf_node *node, struct tf_conn *c)
{
	struct tf_peers *t = &node->peers;
	struct tf_peer *p = c->kept_pe;

	if (!p)
		return;
	c->kept_pe = NULL;
	pthread_mutex_lock(&t->lock);
	p->kept--;
	t->kept--;
	peer_maybe_free(t, p);
	pthread_mutex_unlock(&t->lock);
}

uint64_t tf__peers_sessions(struct tf_node *node)
{
	struct tf_peers *t = &node->peers;
	uint64_t n;

	pthread_mutex_lock(&t->lock);
	n = t->sessions;
	pthread_mutex_unlock(&t->lock);
	return n;
}
