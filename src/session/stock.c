/* SPDX-License-Identifier: MIT */
/*
 * stock.c - a node's stock of ready connection resources: a data QP with
 * its CQ in INIT, and a control QP with its CQ and registered slots, made
 * ahead of need by a refill thread so that a new connection takes them
 * instead of creating them on its critical path (KRCORE hands out
 * pre-initialized connections for the same reason).
 *
 * Bounds: TOLLFREE_SESSION_STOCK entries (0: no stock, no thread).  An
 * entry holds what one connection holds (with the soft provider a QP's
 * segments and rings; with verbs a QP in INIT), and its control slots
 * are registered: the stock's pinned bytes are counted in the node's
 * stats (stock_bytes) next to its entries, hits and misses.
 *
 * Given back (TF_CAP_QP_RESET, the verbs provider without rdma_cm): a
 * connection that ends cleanly (tf__conn_destroy) puts its QP and CQ back
 * as a "dirty" entry, unless the stock is full or the application left
 * receives posted on the QP, instead of destroying them.  The QP stays as
 * the connection left it (its windows revoked, no receive posted) until a
 * refill resets it to INIT (ent_clean; about 0.9 ms with rxe under qemu,
 * where a destroy and a create cost 3 ms); a take that finds only dirty
 * entries resets one itself.  Entries are then made only below @low
 * (half the cap), so that no refill makes the entry a live connection
 * will give back.
 *
 * Connections of queue depths up to the default (256) take from the
 * stock; a connect or accept with TF_SESSION_PARAM_QP of deeper queues,
 * an empty stock, or a node without one creates its resources itself (the
 * cold path; a miss is counted when the stock was empty).  An entry whose set-up failed is discarded,
 * never handed out.
 *
 * Who makes the entries (TOLLFREE_SESSION_STOCK_REFILL):
 * - thread: a thread of the node sleeps on a condition variable until an
 *   entry is taken, then makes one; object creation is thread-safe in the
 *   core.  It stops, and the entries are destroyed, with the node.
 * - inline: the node's own calls make them, where they would otherwise
 *   wait: a client's connect after its HELLO left (the server is working
 *   on the answer), and a listener's accept that finds nothing to do or
 *   is about to sleep (tf__stock_refill, one entry a call).  The stock is
 *   filled when the node is created.
 * - auto: thread where the process may run on 4 CPUs or more, else
 *   inline.  Where every core is busy, a refill thread that preempts the
 *   application costs its sessions more than the cold path the stock
 *   saves (tollfree-bench crr --modes pool+mw/new, both sides spinning
 *   on 2 CPUs: 140-168 us at normal priority, 119-141 us at nice 19,
 *   97-113 us with no stock); inline, the same work fills time the
 *   caller spent waiting anyway.
 *
 * The thread runs at normal priority.  At nice 19 the test command's
 * TSan stage failed twice on conf_session_many's fd baseline (the
 * server's count one higher at the end), for a cause not found.  A
 * late refill may find that a take left a spare control QP meanwhile: a
 * full stock lets it go.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT(_n, _f) \
	atomic_fetch_add_explicit(&(_n)->_f, 1, memory_order_relaxed)

struct tf_stock_ent {
	tf_cq_t *cq;
	tf_qp_t *qp;
	struct tf_ctl ctl; /* created, not connected; qp NULL: none */
	bool dirty;	   /* given back, not yet reset (tf__stock_recycle) */
};

/* Who asks what the stock wants (stock_wants). */
enum stock_asker {
	ASK_INLINE, /* a call that would wait anyway (tf__stock_refill) */
	ASK_THREAD, /* the refill thread */
	ASK_FULL,   /* tf_node_progress, node creation: fill it up */
};

/*
 * Whether the stock wants an entry reset or made.  Without given-back
 * entries (no TF_CAP_QP_RESET): entries up to the cap.  With them, the
 * entry a live connection will give back is not made: entries are made
 * only below @low, and a given-back one is reset inline only once fewer
 * than @low clean ones are left, which puts the reset into a wait of the
 * session that took the entry (a connect's for its ACCEPT, a listener's
 * while its session runs), not into the wait for the next connection.
 */
static bool stock_wants(const struct tf_stock *k, enum stock_asker who)
{
	unsigned clean = k->n - k->n_dirty;

	if (who == ASK_FULL)
		return k->n_dirty || k->n + k->reserved < k->cap;
	if (!k->recycle)
		return k->n + k->reserved < k->cap;
	if (who == ASK_THREAD && k->n_dirty)
		return true;
	return clean + k->reserved < k->low;
}

static void stock_update(struct tf_stock *k)
{
	atomic_store_explicit(&k->lacking, stock_wants(k, ASK_INLINE),
			      memory_order_relaxed);
}

/* Destroy a control QP that belongs to no connection (tf__ctl_destroy
 * takes the connection that holds it). */
static void ctl_free(const struct tf_ctl *ctl)
{
	struct tf_conn tmp;

	memset(&tmp, 0, sizeof(tmp));
	tmp.ctl = *ctl;
	tf__ctl_destroy(&tmp);
}

static void ent_destroy(struct tf_stock_ent *e)
{
	ctl_free(&e->ctl);
	tf_qp_destroy(e->qp);
	tf_cq_destroy(e->cq);
}

/*
 * Make a given-back entry as good as a new one: its QP back in INIT, its
 * CQ empty.  The old connection's last completions are reaped first (the
 * QP must be quiet for tf_qp_reset), and what the reset left behind after
 * (the provider drops it) is polled out.  0.7-0.9 ms for rxe under qemu's
 * emulation, most of it the RESET transition: the reason this is
 * done where a refill would be, not in the connection's close.
 */
static int ent_clean(struct tf_stock_ent *e)
{
	struct tf_wc wc[16];
	int ret;

	while (tf_cq_poll(e->cq, 16, wc) > 0)
		;
	ret = tf_qp_reset(e->qp);
	if (!ret)
		while (tf_cq_poll(e->cq, 16, wc) > 0)
			;
	e->dirty = false;
	return ret;
}

/* Take a given-back entry out of the stock (k->lock held, one there). */
static struct tf_stock_ent pop_dirty(struct tf_stock *k)
{
	struct tf_stock_ent e;
	unsigned i = k->n;

	while (!k->ent[--i].dirty)
		;
	e = k->ent[i];
	k->ent[i] = k->ent[--k->n];
	k->n_dirty--;
	return e;
}

/* Reset a given-back entry outside the lock, holding its place, and put
 * it back clean (@out NULL) or hand it to the caller in *@out, or destroy
 * it if the reset failed (k->lock held; it is dropped and taken again).
 * Returns the reset's result. */
static int clean_one(struct tf_node *node, struct tf_stock_ent *out)
{
	struct tf_stock *k = &node->stock;
	struct tf_stock_ent e = pop_dirty(k);
	int ret;

	k->reserved++;
	pthread_mutex_unlock(&k->lock);
	ret = ent_clean(&e);
	if (ret) {
		tf_log_debug(S, "stock: QP %u not reset (%s), destroyed",
			     tf_qp_num(e.qp), tf_strerror(ret));
		ent_destroy(&e);
	}
	pthread_mutex_lock(&k->lock);
	k->reserved--;
	if (ret)
		STAT(node, stock_failed);
	else if (out)
		*out = e;
	else
		k->ent[k->n++] = e;
	stock_update(k);
	return ret;
}

/* Make one entry, as a connection of the default depths would. */
static int ent_make(struct tf_node *node, struct tf_stock_ent *e)
{
	struct tf_conn tmp;
	int ret;

	memset(e, 0, sizeof(*e));
	memset(&tmp, 0, sizeof(tmp));
	tmp.node = node;
	ret = tf__conn_make_qp(node, &tmp, TF_STOCK_DEPTH, TF_STOCK_DEPTH);
	if (ret)
		return ret;
	e->cq = tmp.cq;
	e->qp = tmp.qp;
	memset(&e->ctl, 0, sizeof(e->ctl));
	/* A stock made for kept connections has their control QP too: one
	 * a connection gave back unused, or a new one. */
	if (!node->qp_cache)
		return 0;
	pthread_mutex_lock(&node->stock.lock);
	if (node->stock.n_spare)
		tmp.ctl = node->stock.spare[--node->stock.n_spare];
	pthread_mutex_unlock(&node->stock.lock);
	if (tmp.ctl.qp || !tf__ctl_create(node, &tmp))
		e->ctl = tmp.ctl;
	return 0;
}

/* Add @e to the stock (k->lock held; it may be dropped and taken again). */
static void stock_put(struct tf_node *node, struct tf_stock_ent *e)
{
	struct tf_stock *k = &node->stock;

	k->ent[k->n++] = *e;
	STAT(node, stock_made);
	stock_update(k);
	/* A full stock keeps no spare control QP.  A take that left one
	 * while this entry was being made, with a control QP of its own,
	 * would leave it for the next take: its descriptors and pinned
	 * slots would come and go with the timing of takes and refills. */
	if (k->n >= k->cap && k->n_spare) {
		struct tf_ctl spare[TF_STOCK_SPARE];
		unsigned ns = k->n_spare;

		memcpy(spare, k->spare, ns * sizeof(spare[0]));
		k->n_spare = 0;
		pthread_mutex_unlock(&k->lock);
		for (unsigned i = 0; i < ns; i++)
			ctl_free(&spare[i]);
		pthread_mutex_lock(&k->lock);
	}
}

static void *stock_main(void *arg)
{
	struct tf_node *node = arg;
	struct tf_stock *k = &node->stock;

	pthread_mutex_lock(&k->lock);
	for (;;) {
		struct tf_stock_ent e;
		int ret;

		/* Filled up when started and when asked (tf__stock_fill);
		 * in between, what stock_wants says. */
		if (k->fill_up && !stock_wants(k, ASK_FULL))
			k->fill_up = false;
		while (!k->stop &&
		       !stock_wants(k, k->fill_up ? ASK_FULL : ASK_THREAD))
			pthread_cond_wait(&k->cv, &k->lock);
		if (k->stop)
			break;
		if (k->n_dirty) {
			clean_one(node, NULL);
			continue;
		}
		/* Made outside the lock: a take never waits for a
		 * refill. */
		k->reserved++;
		pthread_mutex_unlock(&k->lock);
		ret = ent_make(node, &e);
		pthread_mutex_lock(&k->lock);
		k->reserved--;
		if (ret) {
			STAT(node, stock_failed);
			/* Do not spin on a persistent failure (out of
			 * memory, QP limit): the next take retries. */
			k->blocked = true;
			while (!k->stop && k->blocked)
				pthread_cond_wait(&k->cv, &k->lock);
			continue;
		}
		if (k->stop) {
			ent_destroy(&e);
			break;
		}
		stock_put(node, &e);
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

/* One entry: reset a given-back one, or make one if the stock wants it
 * (@full: up to its cap). */
static int refill_one(struct tf_node *node, bool full)
{
	struct tf_stock *k = &node->stock;
	struct tf_stock_ent e;
	int ret;

	if (!k->inline_refill ||
	    (!full &&
	     !atomic_load_explicit(&k->lacking, memory_order_relaxed)) ||
	    TF__UNLIKELY(k->fork_gen != tf__fork_gen()))
		return 0;
	pthread_mutex_lock(&k->lock);
	/* One maker at a time (a take only lowers k->n, so the entry
	 * fits).  A reset first: it costs less than a make, and its entry
	 * would otherwise stay unusable. */
	if (!k->making && k->n_dirty &&
	    stock_wants(k, full ? ASK_FULL : ASK_INLINE)) {
		k->making = true;
		ret = clean_one(node, NULL);
		k->making = false;
		pthread_mutex_unlock(&k->lock);
		return ret ? ret : 1;
	}
	/* After a failure, not before the next take. */
	if (!stock_wants(k, full ? ASK_FULL : ASK_INLINE) || k->making ||
	    k->blocked) {
		pthread_mutex_unlock(&k->lock);
		return 0;
	}
	k->making = true;
	k->reserved++;
	pthread_mutex_unlock(&k->lock);
	ret = ent_make(node, &e);
	pthread_mutex_lock(&k->lock);
	k->making = false;
	k->reserved--;
	if (ret) {
		STAT(node, stock_failed);
		k->blocked = true;
	} else {
		stock_put(node, &e);
	}
	pthread_mutex_unlock(&k->lock);
	return ret ? ret : 1;
}

int tf__stock_refill(struct tf_node *node)
{
	return refill_one(node, false);
}

int tf__stock_fill(struct tf_node *node)
{
	struct tf_stock *k = &node->stock;
	int n = 0, ret;

	if (!k->inline_refill) {
		/* The thread fills it up. */
		pthread_mutex_lock(&k->lock);
		if (k->running && stock_wants(k, ASK_FULL)) {
			k->fill_up = true;
			k->blocked = false;
			pthread_cond_signal(&k->cv);
		}
		pthread_mutex_unlock(&k->lock);
		return 0;
	}
	/* Asked for: try again after a failure, and fill the stock up even
	 * where a connection may give an entry back. */
	pthread_mutex_lock(&k->lock);
	k->blocked = false;
	pthread_mutex_unlock(&k->lock);
	while ((ret = refill_one(node, true)) > 0)
		n++;
	return n ? n : ret;
}

/* TOLLFREE_SESSION_STOCK_REFILL: 1 thread, 0 inline, -EINVAL. */
static int refill_by_thread(const char *v)
{
	cpu_set_t set;

	if (!strcmp(v, "thread"))
		return 1;
	if (!strcmp(v, "inline"))
		return 0;
	if (strcmp(v, "auto"))
		return -EINVAL;
	if (sched_getaffinity(0, sizeof(set), &set))
		return 0;
	return CPU_COUNT(&set) >= TF_STOCK_THREAD_CPUS;
}

int tf__stock_init(struct tf_node *node, unsigned cap, const char *refill)
{
	struct tf_stock *k = &node->stock;
	int thread = refill_by_thread(refill), ret;
	tf_caps_t caps;

	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cv, NULL);
	if (thread < 0) {
		tf_log_error(S,
			     "TOLLFREE_SESSION_STOCK_REFILL=%s: not thread, "
			     "inline or auto",
			     refill);
		return thread;
	}
	if (!cap)
		return 0;
	k->ent = tf__calloc(cap, sizeof(*k->ent));
	if (!k->ent)
		return -ENOMEM;
	k->cap = cap;
	k->low = (cap + 1) / 2;
	if (!tf_context_query_caps(node->ctx, &caps))
		k->recycle = (caps.flags & TF_CAP_QP_RESET) != 0;
	tf__fork_init();
	k->fork_gen = tf__fork_gen();
	if (!thread) {
		k->inline_refill = true;
		atomic_store(&k->lacking, true);
		/* A failure is counted, and the next take retries. */
		tf__stock_fill(node);
		tf_log_debug(S,
			     "connection stock: %u of %u entries, made "
			     "inline",
			     k->n, cap);
		return 0;
	}
	k->fill_up = true;
	ret = -pthread_create(&k->thr, NULL, stock_main, node);
	if (ret) {
		tf_log_error(S, "cannot start the connection stock thread: %s",
			     tf_strerror(ret));
		tf__free(k->ent);
		k->ent = NULL;
		k->cap = 0;
		return ret;
	}
	k->running = true;
	tf_log_debug(S, "connection stock: %u entries, made by a thread", cap);
	return 0;
}

void tf__stock_fini(struct tf_node *node)
{
	struct tf_stock *k = &node->stock;

	/* A forked child has the node's memory but not its thread (and a
	 * lock the thread may have held at the fork): it leaves the stock
	 * alone, as it leaves the parent's other objects. */
	if (k->running && k->fork_gen != tf__fork_gen())
		return;
	if (k->running) {
		pthread_mutex_lock(&k->lock);
		k->stop = true;
		pthread_cond_signal(&k->cv);
		pthread_mutex_unlock(&k->lock);
		pthread_join(k->thr, NULL);
	}
	for (unsigned i = 0; i < k->n; i++)
		ent_destroy(&k->ent[i]);
	for (unsigned i = 0; i < k->n_spare; i++)
		ctl_free(&k->spare[i]);
	tf__free(k->ent);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->lock);
	memset(k, 0, sizeof(*k));
}

bool tf__stock_take(struct tf_node *node, struct tf_conn *c, uint32_t sd,
		    uint32_t rd, bool want_ctl)
{
	struct tf_stock *k = &node->stock;
	struct tf_stock_ent e;

	/* Deeper queues than asked for do no harm: the session never has
	 * more outstanding than the depths it asked for (send_depth and
	 * recv_depth below). */
	if (!k->cap || sd > TF_STOCK_DEPTH || rd > TF_STOCK_DEPTH ||
	    TF__UNLIKELY(k->fork_gen != tf__fork_gen()))
		return false;
	pthread_mutex_lock(&k->lock);
	if (!k->n) {
		k->blocked = false;
		pthread_cond_signal(&k->cv);
		pthread_mutex_unlock(&k->lock);
		STAT(node, stock_misses);
		return false;
	}
	/* A clean entry if there is one; else a given-back one, reset
	 * here: dearer than a clean take, cheaper than the cold path. */
	if (k->n_dirty == k->n) {
		if (clean_one(node, &e)) {
			pthread_mutex_unlock(&k->lock);
			STAT(node, stock_misses);
			return false;
		}
	} else {
		unsigned i = k->n;

		while (k->ent[--i].dirty)
			;
		e = k->ent[i];
		k->ent[i] = k->ent[--k->n];
	}
	stock_update(k);
	/* A control QP this connection will not use stays, unused, for the
	 * entry made next (which the signal below asks for): each take
	 * leaves at most one spare and one hole, and each entry made takes
	 * a spare if there is one, so a full stock has none. */
	if (!want_ctl && e.ctl.qp && k->n_spare < TF_STOCK_SPARE) {
		k->spare[k->n_spare++] = e.ctl;
		memset(&e.ctl, 0, sizeof(e.ctl));
	}
	k->blocked = false;
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->lock);
	c->cq = e.cq;
	c->qp = e.qp;
	c->ctl = e.ctl;
	c->send_depth = sd;
	c->recv_depth = rd;
	c->stock_shape = true;
	STAT(node, stock_hits);
	return true;
}

bool tf__stock_recycle(struct tf_node *node, struct tf_conn *c)
{
	struct tf_stock *k = &node->stock;
	struct tf_stock_ent e = {.cq = c->cq, .qp = c->qp, .dirty = true};
	tf_qp_stats_t qs;

	/* Only a connection that ended cleanly, whose QP has no receive
	 * left posted (every receive completes, so the QP's counters say
	 * it): one would take the next peer's SENDs into this one's
	 * buffers.  Its windows are revoked (its sessions closed) and its
	 * grants dropped. */
	if (!k->recycle || !c->stock_shape || c->broken || !c->qp || !c->cq ||
	    TF__UNLIKELY(k->fork_gen != tf__fork_gen()) ||
	    tf_qp_query_stats(c->qp, &qs) ||
	    qs.recv_posted != qs.recv_completed)
		return false;
	pthread_mutex_lock(&k->lock);
	if (k->n + k->reserved >= k->cap) {
		pthread_mutex_unlock(&k->lock);
		return false;
	}
	/* A control QP that a take left unused goes with it. */
	if (node->qp_cache && k->n_spare)
		e.ctl = k->spare[--k->n_spare];
	/* Reset later, where the node would wait anyway (ent_clean): until
	 * then the QP stays as the connection left it, connected to a peer
	 * that holds no key to this side's memory and finds no receive. */
	k->ent[k->n++] = e;
	k->n_dirty++;
	STAT(node, stock_recycled);
	stock_update(k);
	pthread_cond_signal(&k->cv);
	pthread_mutex_unlock(&k->lock);
	c->qp = NULL;
	c->cq = NULL;
	return true;
}

unsigned tf__stock_count(struct tf_node *node, uint64_t *bytes_p)
{
	struct tf_stock *k = &node->stock;
	unsigned n, ctl = 0;

	pthread_mutex_lock(&k->lock);
	n = k->n;
	for (unsigned i = 0; i < n; i++)
		ctl += k->ent[i].ctl.qp != NULL;
	ctl += k->n_spare;
	pthread_mutex_unlock(&k->lock);
	*bytes_p = (uint64_t)ctl * TF_CTL_BYTES;
	return n;
}
