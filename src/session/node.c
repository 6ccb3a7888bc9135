/* SPDX-License-Identifier: MIT */
/*
 * node.c - a node: one process's session machinery on a context (PD,
 * pool, registration cache, pre-shared key, settings and counters).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT(_n, _f) \
	atomic_fetch_add_explicit(&(_n)->_f, 1, memory_order_relaxed)

/*
 * The pre-shared key from the configuration.  Security settings fail
 * closed: a value that did not parse (too long), an unreadable key file,
 * or one that others may read, makes node creation fail rather than run
 * without the authentication it asks for.  The key is never logged.
 */
static void psk_from_config(struct tf_node *node, const struct tf_config *cfg,
			    int *err)
{
	*err = 0;
	if (tf__config_env_invalid("SESSION_PSK") ||
	    tf__config_env_invalid("SESSION_PSK_FILE")) {
		tf_log_error(S,
			     "TOLLFREE_SESSION_PSK or _PSK_FILE is not "
			     "valid (a key is at most %d bytes): refusing "
			     "to run without it",
			     TF_SESS_PSK_MAX);
		*err = -EINVAL;
		return;
	}
	if (cfg->session_psk_file[0]) {
		int fd = open(cfg->session_psk_file,
			      O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		struct stat st;
		ssize_t n;
		uint8_t extra;

		if (fd < 0) {
			tf_log_error(S, "cannot open key file %s: %m",
				     cfg->session_psk_file);
			*err = -EINVAL;
			return;
		}
		if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid() || (st.st_mode & 077)) {
			tf_log_error(S,
				     "key file %s must be a regular file of "
				     "this user that no one else may read "
				     "(chmod 600)",
				     cfg->session_psk_file);
			close(fd);
			*err = -EACCES;
			return;
		}
		n = read(fd, node->psk, sizeof(node->psk));
		if (n > 0 && n == (ssize_t)sizeof(node->psk) &&
		    read(fd, &extra, 1) > 0)
			n = -1;
		close(fd);
		if (n <= 0) {
			tf_log_error(S,
				     "key file %s is empty, unreadable or "
				     "longer than %d bytes",
				     cfg->session_psk_file, TF_SESS_PSK_MAX);
			*err = -EINVAL;
			return;
		}
		node->psk_len = (size_t)n;
	} else if (cfg->session_psk[0]) {
		node->psk_len = strnlen(cfg->session_psk, TF_SESS_PSK_MAX + 1);
		if (node->psk_len > TF_SESS_PSK_MAX) {
			tf_log_error(S,
				     "TOLLFREE_SESSION_PSK is longer than "
				     "%d bytes",
				     TF_SESS_PSK_MAX);
			node->psk_len = 0;
			*err = -EINVAL;
			return;
		}
		memcpy(node->psk, cfg->session_psk, node->psk_len);
	}
}

static int parse_reg_mode(const char *s)
{
	if (!strcmp(s, "auto"))
		return TF_REG_AUTO;
	if (!strcmp(s, "pool"))
		return TF_REG_POOL;
	if (!strcmp(s, "cache"))
		return TF_REG_CACHE;
	if (!strcmp(s, "direct"))
		return TF_REG_DIRECT;
	return -EINVAL;
}

/*
 * Measure what a registration costs against copying, on this context and
 * machine: the bytes memcpy moves in the time of one registration of a
 * 64 KiB buffer.  Below that size a copy into a pre-registered slice is
 * cheaper than a cache miss.  The minimum of a few runs discards noise
 * from other processes, not all of it: only on request (see
 * crossover_from_config), since the same attach must not be a copy in one
 * run and in place in the next.
 */
static size_t measure_crossover(struct tf_node *node, size_t max_slice)
{
	const size_t len = 65536;
	uint64_t best_reg = UINT64_MAX, best_copy = UINT64_MAX;
	uint8_t *a = tf__malloc(len), *b = tf__malloc(len);
	size_t x = 4096;

	if (!a || !b)
		goto out;
	memset(a, 1, len);
	memset(b, 2, len);
	for (int i = 0; i < 5; i++) {
		uint64_t t0 = tf__now_ns(), t1, t2;
		tf_mr_t *mr;

		if (tf_mr_reg(node->pd, a, len, TF_ACCESS_LOCAL_WRITE, &mr))
			goto out;
		tf_mr_dereg(mr);
		t1 = tf__now_ns();
		memcpy(b, a, len);
		/* Keep the copy from being optimised away. */
		__asm__ volatile("" : : "r"(b) : "memory");
		t2 = tf__now_ns();
		if (t1 - t0 < best_reg)
			best_reg = t1 - t0;
		if (t2 - t1 < best_copy)
			best_copy = t2 - t1;
	}
	if (!best_copy)
		best_copy = 1;
	x = (size_t)((double)best_reg * (double)len / (double)best_copy);
out:
	tf__free(a);
	tf__free(b);
	if (x < 4096)
		x = 4096;
	if (x > max_slice)
		x = max_slice;
	return x;
}

/*
 * The crossover of TF_REG_AUTO from TOLLFREE_REG_CROSSOVER: a size, or
 * "measure" (also "0", its meaning before a fixed default existed) for
 * measure_crossover(); 0 in *@x_p then.
 *
 * Why 64 KiB by default: with the soft provider a registration costs
 * about 18.7, 25.9 and 113 us at 4 KiB, 64 KiB and 1 MiB (tollfree-bench
 * reg), and on a NIC 7-40 us per 4 KiB page; memcpy moves 45-100 GB/s
 * within the caches and about 10 GB/s from DRAM.  At 64 KiB, a copy in
 * and back out of cold memory (about 13 us) stays under half of the
 * registration miss it replaces, and costs a buffer that the cache would
 * have hit (well under 1 us) no more than that.  Above it a copy grows
 * with the size on every attach while a cached registration is paid once
 * per buffer: the measured "crossover" (676 KiB to 1 MiB here) assumes
 * every attach misses.
 */
static int crossover_from_config(const char *v, size_t *x_p)
{
	uint64_t u;

	if (!strcmp(v, "measure") || !strcmp(v, "0")) {
		*x_p = 0;
		return 0;
	}
	if (tf__config_parse_size(v, &u) || u > SIZE_MAX) {
		tf_log_error(S,
			     "TOLLFREE_REG_CROSSOVER=%s is neither a size nor "
			     "\"measure\"",
			     v);
		return -EINVAL;
	}
	*x_p = (size_t)u;
	return 0;
}

/* TOLLFREE_SESSION_SOURCE_ADDR: a numeric address (port 0) or empty. */
static int source_from_config(struct tf_node *node, const char *v)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)&node->src;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&node->src;

	if (!*v)
		return 0;
	if (inet_pton(AF_INET, v, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		node->src_len = sizeof(*s4);
	} else if (inet_pton(AF_INET6, v, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		node->src_len = sizeof(*s6);
	} else {
		tf_log_error(S,
			     "TOLLFREE_SESSION_SOURCE_ADDR=%s is not a numeric "
			     "IPv4 or IPv6 address",
			     v);
		return -EINVAL;
	}
	return 0;
}

/* A TOLLFREE_SESSION_@name setting of auto, y or n into *@out: @if_auto
 * or @if_y, or false.  0, or -EINVAL for another value. */
static int auto_yn(const char *name, const char *v, bool if_auto, bool if_y,
		   bool *out)
{
	if (!strcmp(v, "auto"))
		*out = if_auto;
	else if (!strcmp(v, "y"))
		*out = if_y;
	else if (!strcmp(v, "n"))
		*out = false;
	else {
		tf_log_error(S, "TOLLFREE_SESSION_%s=%s: not auto, y or n",
			     name, v);
		return -EINVAL;
	}
	return 0;
}

int tf_node_create(tf_context_t *ctx, const tf_node_params_t *params,
		   tf_node_t **node_p)
{
	const struct tf_config *cfg;
	struct tf_node *node;
	tf_caps_t caps;
	bool can;
	size_t max_slice;
	uint64_t fm = params ? params->field_mask : 0;
	int ret;

	if (!ctx || !node_p)
		return -EINVAL;
	cfg = &ctx->cfg;
	node = tf__calloc(1, sizeof(*node));
	if (!node)
		return -ENOMEM;
	node->ctx = ctx;
	tf__conn_list_init(&node->idle);
	pthread_mutex_init(&node->lock, NULL);
	node->sock_spare = -1;
	atomic_init(&node->next_conn_id, tf__random_u32() & 0xffffff);

	if (fm & TF_NODE_PARAM_PSK) {
		if (params->psk_len > TF_SESS_PSK_MAX ||
		    (params->psk_len && !params->psk)) {
			tf_log_error(S, "pre-shared key of %zu bytes (max %d)",
				     params->psk_len, TF_SESS_PSK_MAX);
			ret = -EINVAL;
			goto err_free;
		}
		node->psk_len = params->psk_len;
		if (params->psk_len)
			memcpy(node->psk, params->psk, params->psk_len);
	} else {
		psk_from_config(node, cfg, &ret);
		if (ret)
			goto err_free;
	}
	if (fm & TF_NODE_PARAM_REG_MODE)
		node->reg_mode = params->reg_mode;
	else
		node->reg_mode = parse_reg_mode(cfg->reg_mode);
	if (node->reg_mode < TF_REG_AUTO || node->reg_mode > TF_REG_DIRECT) {
		tf_log_error(S,
			     "bad registration mode %d (TOLLFREE_REG_MODE=%s)",
			     node->reg_mode, cfg->reg_mode);
		ret = -EINVAL;
		goto err_free;
	}
	/* 0 until measured below. */
	if ((fm & TF_NODE_PARAM_CROSSOVER) && params->crossover)
		node->crossover = params->crossover == TF_REG_CROSSOVER_MEASURE
					  ? 0
					  : params->crossover;
	else if ((ret = crossover_from_config(cfg->reg_crossover,
					      &node->crossover)))
		goto err_free;
	node->qp_cache = (fm & TF_NODE_PARAM_QP_CACHE)
				 ? params->qp_cache
				 : (unsigned)cfg->session_qp_cache;
	node->timeout_ms = (fm & TF_NODE_PARAM_TIMEOUT)
				   ? params->timeout_ms
				   : (int)cfg->session_timeout_ms;
	if (node->timeout_ms <= 0) {
		tf_log_error(S, "session timeout must be positive");
		ret = -EINVAL;
		goto err_free;
	}
	ret = source_from_config(node, cfg->session_source_addr);
	if (!ret)
		ret = tf__peers_init(node);
	if (!ret && node->psk_len) {
		tf__replay_init(
			&node->replay, (unsigned)cfg->session_psk_early_max,
			(uint64_t)cfg->session_psk_early_window_ms * 1000000);
		ret = tf__early_key_new(node->psk, node->psk_len,
					&node->early_key);
	}
	if (ret)
		goto err_free;
	ret = tf_context_query_caps(ctx, &caps);
	if (ret)
		goto err_free;
	node->fence = !(caps.flags & TF_CAP_REMOTE_ACK);
	node->use_mw = (fm & TF_NODE_PARAM_USE_MW) ? params->use_mw != 0
						   : cfg->session_mw;
	/* y: except through rdma_cm, where both sides connect in one
	 * exchange of the CM's, which the server starts. */
	ret = auto_yn("EARLY_ADDR", cfg->session_early_addr,
		      caps.flags & TF_CAP_CONNECT_CMD,
		      !(caps.flags & TF_CAP_RDMA_CM), &node->early_addr);
	if (ret)
		goto err_free;
	if (node->use_mw && !(caps.flags & TF_CAP_MW_TYPE2)) {
		tf_log_info(S,
			    "provider %s has no type-2 memory windows: "
			    "each exposure gets its own registration",
			    caps.provider);
		node->use_mw = false;
	}
	/* The soft provider checks that a SEND_WITH_INV's key is a window
	 * bound to the QP it arrived on; rdma_rxe (Linux 6.1) does not, so
	 * there a client that guessed another session's key could revoke
	 * that window early: the server agrees where it is asked to. */
	can = node->use_mw && (caps.flags & TF_CAP_SEND_WITH_INV);
	ret = auto_yn("REMOTE_INV", cfg->session_remote_inv,
		      can && !strcmp(caps.provider, "soft"), can, &node->rinv);
	if (ret)
		goto err_free;

	ret = tf_pd_create(ctx, &node->pd);
	if (ret)
		goto err_free;
	ret = tf_pool_create(node->pd,
			     (fm & TF_NODE_PARAM_POOL) ? params->pool : NULL,
			     &node->pool);
	if (ret)
		goto err_pd;
	ret = tf_rcache_create(node->pd, NULL, &node->rc);
	if (ret)
		goto err_pool;
	max_slice = cfg->pool_max_slice;
	if ((fm & TF_NODE_PARAM_POOL) && params->pool &&
	    (params->pool->field_mask & TF_POOL_PARAM_MAX_SIZE))
		max_slice = params->pool->max_size;
	if (!node->crossover) {
		node->crossover = measure_crossover(node, max_slice);
		tf_log_info(S,
			    "copy/registration crossover measured: %zu bytes",
			    node->crossover);
	}
	if (node->crossover > max_slice)
		node->crossover = max_slice;
	tf_log_debug(S, "node: reg mode %d, crossover %zu, %s, auth %s",
		     node->reg_mode, node->crossover,
		     node->use_mw ? "windows" : "dedicated MRs",
		     node->psk_len ? "on" : "off");
	ret = tf__stock_init(node, (unsigned)cfg->session_stock,
			     cfg->session_stock_refill);
	if (ret)
		goto err_rc;
	atomic_store(&node->keys_lacking, true);
	tf__node_keys_ahead(node);
	tf__sess_stats_register(node);
	*node_p = node;
	return 0;

err_rc:
	tf__stock_fini(node);
	tf_rcache_destroy(node->rc);
err_pool:
	tf_pool_destroy(node->pool);
err_pd:
	tf_pd_destroy(node->pd);
err_free:
	tf__peers_fini(node);
	if (node->psk_len)
		tf__replay_fini(&node->replay);
	tf__keys_free(node->early_keys);
	tf__keys_free(node->early_open_keys);
	tf__keys_free(node->keys_spare);
	explicit_bzero(node->early_nonce, sizeof(node->early_nonce));
	if (node->sock_spare >= 0)
		close(node->sock_spare);
	tf__early_key_free(node->early_key);
	pthread_mutex_destroy(&node->lock);
	tf__free(node);
	return ret;
}

int tf_node_progress(tf_node_t *node)
{
	if (!node)
		return -EINVAL;
	return tf__stock_fill(node);
}

void tf_node_destroy(tf_node_t *node)
{
	struct tf_conn *c;

	if (!node)
		return;
	if (atomic_load(&node->n_sessions) || atomic_load(&node->n_listeners))
		tf_log_warn(S,
			    "node destroyed with %ld sessions and %ld "
			    "listeners open",
			    atomic_load(&node->n_sessions),
			    atomic_load(&node->n_listeners));
	/* Unlisted first: a concurrent publisher must not read a node that
	 * is being torn down. */
	tf__sess_stats_unregister(node);
	tf__stock_fini(node);
	while ((c = node->idle.next) != &node->idle) {
		tf__conn_unlink(c);
		tf__conn_destroy(c);
	}
	for (unsigned i = 0; i < node->n_mw_free; i++)
		tf_mw_dealloc(node->mw_free[i]);
	tf_rcache_destroy(node->rc);
	tf_pool_destroy(node->pool);
	if (tf_pd_destroy(node->pd))
		tf_log_warn(S, "node PD still in use at destroy");
	tf__peers_fini(node);
	if (node->psk_len)
		tf__replay_fini(&node->replay);
	tf__keys_free(node->early_keys);
	tf__keys_free(node->early_open_keys);
	tf__keys_free(node->keys_spare);
	explicit_bzero(node->early_nonce, sizeof(node->early_nonce));
	if (node->sock_spare >= 0)
		close(node->sock_spare);
	tf__early_key_free(node->early_key);
	pthread_mutex_destroy(&node->lock);
	explicit_bzero(node->psk, sizeof(node->psk));
	tf__free(node);
}

tf_pd_t *tf_node_pd(tf_node_t *node)
{
	return node->pd;
}

tf_pool_t *tf_node_pool(tf_node_t *node)
{
	return node->pool;
}

tf_rcache_t *tf_node_rcache(tf_node_t *node)
{
	return node->rc;
}

#define LD(_f) atomic_load_explicit(&node->_f, memory_order_relaxed)

int tf_node_query_stats(tf_node_t *node, tf_node_stats_t *st)
{
	long long live;

	if (!node || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	st->sessions_opened = LD(sessions_opened);
	st->sessions_closed = LD(sessions_closed);
	st->sessions_live = (uint64_t)atomic_load(&node->n_sessions);
	st->connect_failures = LD(connect_failures);
	st->auth_failures = LD(auth_failures);
	st->handshake_rejects = LD(handshake_rejects);
	st->qp_new = LD(qp_new);
	st->qp_reused = LD(qp_reused);
	st->qp_destroyed = LD(qp_destroyed);
	st->qp_broken = LD(qp_broken);
	pthread_mutex_lock(&node->lock);
	st->qp_idle = node->n_idle;
	pthread_mutex_unlock(&node->lock);
	st->windows_bound = LD(windows_bound);
	st->windows_revoked = LD(windows_revoked);
	live = LD(windows_live);
	st->windows_live = live > 0 ? (uint64_t)live : 0;
	st->expose_mr_fallback = LD(expose_mr_fallback);
	st->revoke_ns = LD(revoke_ns);
	st->attach_pool = LD(attach_pool);
	st->attach_cache = LD(attach_cache);
	st->attach_direct = LD(attach_direct);
	st->copy_bytes = LD(copy_bytes);
	st->slices_rented = LD(slices_rented);
	st->crossover = node->crossover;
	st->reg_mode = node->reg_mode;
	st->use_mw = node->use_mw;
	st->auth = node->psk_len != 0;
	st->pending_dropped = LD(pending_dropped);
	st->pending_refused = LD(pending_refused);
	st->stock_entries = tf__stock_count(node, &st->stock_bytes);
	st->stock_max = node->stock.cap;
	st->stock_hits = LD(stock_hits);
	st->stock_misses = LD(stock_misses);
	st->stock_recycled = LD(stock_recycled);
	st->sessions_refused = LD(sessions_refused);
	st->sessions_refused_peer = LD(sessions_refused_peer);
	st->expose_refused = LD(expose_refused);
	st->kept_refused = LD(kept_refused);
	st->exposed_bytes = LD(peers.exposed);
	st->sessions_served = tf__peers_sessions(node);
	st->grants_made = LD(grants_made);
	st->grants_taken = LD(grants_taken);
	st->grants_dropped = LD(grants_dropped);
	st->opens_deferred = LD(opens_deferred);
	st->remote_inv = LD(remote_inv);
	st->remote_inv_missed = LD(remote_inv_missed);
	st->psk_early = LD(psk_early);
	st->psk_early_refused = LD(psk_early_refused);
	st->stock_sockets = LD(stock_sockets);
	return 0;
}

/* ------------------------------------------------ keys made ahead */

/* Give @k back to the slot @slot_p, or free it if the slot is taken. */
static void keys_put(struct tf_node *node, struct tf_sess_keys **slot_p,
		     struct tf_sess_keys *k)
{
	pthread_mutex_lock(&node->lock);
	if (!*slot_p) {
		*slot_p = k;
		k = NULL;
	}
	pthread_mutex_unlock(&node->lock);
	tf__keys_free(k);
}

static struct tf_sess_keys *keys_get(struct tf_node *node,
				     struct tf_sess_keys **slot_p)
{
	struct tf_sess_keys *k;

	pthread_mutex_lock(&node->lock);
	k = *slot_p;
	*slot_p = NULL;
	pthread_mutex_unlock(&node->lock);
	return k;
}

struct tf_sess_keys *tf__node_keys_spare(struct tf_node *node)
{
	/* Taken, or missing since a make failed: the next
	 * tf__node_keys_ahead makes one. */
	atomic_store_explicit(&node->keys_lacking, true, memory_order_relaxed);
	return keys_get(node, &node->keys_spare);
}

/* *@k_p (NULL: a new one) keyed for the early OPEN of @nonce, @server's
 * direction; on failure it is freed and NULL. */
static int early_keyed(struct tf_node *node, const uint8_t nonce[TF_WIRE_NONCE],
		       bool server, struct tf_sess_keys **k_p)
{
	int ret;

	if (!*k_p)
		return tf__keys_early(node->early_key, nonce, server, k_p);
	ret = tf__keys_early_rekey(node->early_key, nonce, *k_p);
	if (ret) {
		tf__keys_free(*k_p);
		*k_p = NULL;
	}
	return ret;
}

/* The client's early key object, keyed for a fresh nonce and left
 * ready; only once a connect made the object (a node that never sends
 * an early OPEN makes none). */
static void early_ahead(struct tf_node *node)
{
	uint8_t nonce[TF_WIRE_NONCE];
	struct tf_sess_keys *k;

	pthread_mutex_lock(&node->lock);
	k = node->early_ready ? NULL : node->early_keys;
	if (k)
		node->early_keys = NULL;
	pthread_mutex_unlock(&node->lock);
	if (!k)
		return;
	if (tf__random_buffered(nonce, sizeof(nonce)) ||
	    early_keyed(node, nonce, false, &k)) {
		tf__keys_free(k);
		return;
	}
	pthread_mutex_lock(&node->lock);
	if (!node->early_keys) {
		node->early_keys = k;
		k = NULL;
		memcpy(node->early_nonce, nonce, sizeof(nonce));
		node->early_ready = true;
		node->early_gen = tf__fork_gen();
	}
	pthread_mutex_unlock(&node->lock);
	explicit_bzero(nonce, sizeof(nonce));
	tf__keys_free(k);
}

void tf__node_keys_ahead(struct tf_node *node)
{
	struct tf_sess_keys *k;
	bool want;

	/* Nothing taken since the last call (the idle accept of a
	 * busy-polling listener calls this every turn): no lock. */
	if (!node->psk_len ||
	    !atomic_exchange_explicit(&node->keys_lacking, false,
				      memory_order_relaxed))
		return;
	pthread_mutex_lock(&node->lock);
	want = !node->keys_spare;
	pthread_mutex_unlock(&node->lock);
	if (want && !tf__keys_spare_new(&k))
		keys_put(node, &node->keys_spare, k);
	if (node->replay.window_ns)
		early_ahead(node);
}

int tf__node_early_take(struct tf_node *node, uint8_t nonce_c[TF_WIRE_NONCE],
			struct tf_sess_keys **k_p)
{
	struct tf_sess_keys *k;
	bool ready;
	int ret;

	pthread_mutex_lock(&node->lock);
	k = node->early_keys;
	node->early_keys = NULL;
	/* Made before a fork: the parent may send the same nonce. */
	ready = k && node->early_ready && node->early_gen == tf__fork_gen();
	if (ready)
		memcpy(nonce_c, node->early_nonce, TF_WIRE_NONCE);
	node->early_ready = false;
	explicit_bzero(node->early_nonce, sizeof(node->early_nonce));
	pthread_mutex_unlock(&node->lock);
	if (!ready) {
		ret = tf__random_buffered(nonce_c, TF_WIRE_NONCE);
		if (!ret)
			ret = early_keyed(node, nonce_c, false, &k);
		if (ret) {
			tf__keys_free(k);
			return ret;
		}
	}
	*k_p = k;
	return 0;
}

void tf__node_early_put(struct tf_node *node, struct tf_sess_keys *k)
{
	keys_put(node, &node->early_keys, k);
	/* Back unready: the next tf__node_keys_ahead readies it. */
	atomic_store_explicit(&node->keys_lacking, true, memory_order_relaxed);
}

int tf__node_early_open_take(struct tf_node *node,
			     const uint8_t nonce_c[TF_WIRE_NONCE],
			     struct tf_sess_keys **k_p)
{
	struct tf_sess_keys *k = keys_get(node, &node->early_open_keys);
	int ret = early_keyed(node, nonce_c, true, &k);

	if (!ret)
		*k_p = k;
	return ret;
}

void tf__node_early_open_put(struct tf_node *node, struct tf_sess_keys *k)
{
	keys_put(node, &node->early_open_keys, k);
}

/* ------------------------------------------------ a client's socket */

void tf__node_sock_ahead(struct tf_node *node, int family)
{
	bool want;
	int fd;

	if (node->src_len)
		return;
	pthread_mutex_lock(&node->lock);
	want = node->sock_spare < 0 || node->sock_gen != tf__fork_gen();
	pthread_mutex_unlock(&node->lock);
	if (!want)
		return;
	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	tf__conn_sock_opts(fd);
	pthread_mutex_lock(&node->lock);
	/* One made before a fork is the parent's too: this one replaces
	 * it here (closing it closes this process's descriptor only). */
	if (node->sock_spare < 0 || node->sock_gen != tf__fork_gen()) {
		int old = node->sock_spare;

		node->sock_spare = fd;
		node->sock_family = family;
		node->sock_gen = tf__fork_gen();
		atomic_store(&node->stock_sockets, 1);
		fd = old;
	}
	pthread_mutex_unlock(&node->lock);
	if (fd >= 0)
		close(fd);
}

int tf__node_sock_take(struct tf_node *node, int family)
{
	int fd = -1;

	pthread_mutex_lock(&node->lock);
	if (node->sock_spare >= 0 && node->sock_family == family &&
	    node->sock_gen == tf__fork_gen()) {
		fd = node->sock_spare;
		node->sock_spare = -1;
		atomic_store(&node->stock_sockets, 0);
	}
	pthread_mutex_unlock(&node->lock);
	return fd;
}
