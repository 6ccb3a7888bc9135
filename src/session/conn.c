/* SPDX-License-Identifier: MIT */
/*
 * conn.c - nodes, listeners, connections and the bootstrap
 * handshake of sessions (wire format in wire_int.h).
 *
 * The server serves every handshake from one epoll set without blocking:
 * each connection keeps its partial message in its tf_wire_rx and a
 * deadline for its current step, so a peer that sends nothing (or a byte a
 * second) is dropped when its deadline passes and never delays others.
 * The client side blocks, with the node timeout on every read.
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
#include <unistd.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT(_n, _f) \
	atomic_fetch_add_explicit(&(_n)->_f, 1, memory_order_relaxed)

/*
 * Listener epoll tags: NULL is the listening socket, EV_KICK the
 * listener's eventfd, a connection pointer its socket, and a connection
 * pointer with EV_CQ set its control CQ's fd (connections are allocated,
 * so their low bits are free).
 */
#define EV_KICK ((uint64_t)2)
#define EV_CQ	((uint64_t)1)

/* ------------------------------------------------------------ lists */

void tf__conn_link(struct tf_conn *head, struct tf_conn *c)
{
	c->next = head->next;
	c->prev = head;
	head->next->prev = c;
	head->next = c;
}

void tf__conn_unlink(struct tf_conn *c)
{
	if (!c->next)
		return;
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

static void list_init(struct tf_conn *head)
{
	head->next = head->prev = head;
}

/* ------------------------------------------------------------ conns */

static struct tf_conn *conn_alloc(struct tf_node *node, int fd)
{
	struct tf_conn *c = tf__calloc(1, sizeof(*c));

	if (!c) {
		tf_log_error(S, "out of memory for a connection");
		return NULL;
	}
	c->node = node;
	c->fd = fd;
	return c;
}

int tf__conn_new_qp(struct tf_node *node, struct tf_conn *c,
		    uint32_t send_depth, uint32_t recv_depth)
{
	/* The send queue has room for the session's own binds and
	 * invalidations on top of the caller's depth. */
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH,
			      .depth = send_depth + recv_depth +
				       TF_SESSION_MAX_EXPOSURES + 16};
	tf_qp_params_t qpp = {
		.field_mask = TF_QP_PARAM_MAX_SEND_WR | TF_QP_PARAM_MAX_RECV_WR,
		.max_send_wr = send_depth + TF_SESSION_MAX_EXPOSURES,
		.max_recv_wr = recv_depth};
	int ret;

	ret = tf_cq_create(node->ctx, &cqp, &c->cq);
	if (ret)
		return ret;
	qpp.send_cq = qpp.recv_cq = c->cq;
	ret = tf_qp_create(node->pd, &qpp, &c->qp);
	if (ret) {
		tf_cq_destroy(c->cq);
		c->cq = NULL;
		return ret;
	}
	c->send_depth = send_depth;
	c->recv_depth = recv_depth;
	STAT(node, qp_new);
	return 0;
}

void tf__conn_destroy(struct tf_conn *c)
{
	if (!c)
		return;
	tf__sess_free_mem(c->spare);
	tf__ctl_destroy(c);
	if (c->qp) {
		if (c->broken)
			STAT(c->node, qp_broken);
		STAT(c->node, qp_destroyed);
		tf_qp_destroy(c->qp);
	}
	if (c->cq)
		tf_cq_destroy(c->cq);
	if (c->fd >= 0)
		close(c->fd);
	tf__free(c);
}

static void set_sock_opts(int fd)
{
	int one = 1;

	/* Handshake messages are small and answered at once: Nagle would
	 * add a delayed-ACK wait to every round trip. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ------------------------------------------------------------ node */

static void psk_from_config(struct tf_node *node, const struct tf_config *cfg,
			    int *err)
{
	*err = 0;
	if (cfg->session_psk_file[0]) {
		int fd = open(cfg->session_psk_file, O_RDONLY | O_CLOEXEC);
		ssize_t n;
		uint8_t extra;

		if (fd < 0) {
			tf_log_error(S, "cannot open key file %s: %m",
				     cfg->session_psk_file);
			*err = -EINVAL;
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
		node->psk_len = strlen(cfg->session_psk);
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
 * from other processes.
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

int tf_node_create(tf_context_t *ctx, const tf_node_params_t *params,
		   tf_node_t **node_p)
{
	const struct tf_config *cfg;
	struct tf_node *node;
	tf_caps_t caps;
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
	list_init(&node->idle);
	pthread_mutex_init(&node->lock, NULL);
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
	ret = tf_context_query_caps(ctx, &caps);
	if (ret)
		goto err_free;
	node->use_mw = (fm & TF_NODE_PARAM_USE_MW) ? params->use_mw != 0
						   : cfg->session_mw;
	if (node->use_mw && !(caps.flags & TF_CAP_MW_TYPE2)) {
		tf_log_info(S,
			    "provider %s has no type-2 memory windows: "
			    "each exposure gets its own registration",
			    caps.provider);
		node->use_mw = false;
	}

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
	if ((fm & TF_NODE_PARAM_CROSSOVER) && params->crossover)
		node->crossover = params->crossover;
	else if (cfg->reg_crossover)
		node->crossover = cfg->reg_crossover;
	else
		node->crossover = measure_crossover(node, max_slice);
	if (node->crossover > max_slice)
		node->crossover = max_slice;
	tf_log_debug(S, "node: reg mode %d, crossover %zu, %s, auth %s",
		     node->reg_mode, node->crossover,
		     node->use_mw ? "windows" : "dedicated MRs",
		     node->psk_len ? "on" : "off");
	tf__sess_stats_register(node);
	*node_p = node;
	return 0;

err_pool:
	tf_pool_destroy(node->pool);
err_pd:
	tf_pd_destroy(node->pd);
err_free:
	pthread_mutex_destroy(&node->lock);
	tf__free(node);
	return ret;
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
	pthread_mutex_destroy(&node->lock);
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
	return 0;
}

/* Keep a healthy client connection for the next session to its peer;
 * the least recently used one goes when the cache is full. */
void tf__node_keep(struct tf_node *node, struct tf_conn *c)
{
	struct tf_conn *old = NULL;

	if (!node->qp_cache || c->broken) {
		tf__conn_destroy(c);
		return;
	}
	pthread_mutex_lock(&node->lock);
	tf__conn_link(&node->idle, c);
	if (++node->n_idle > node->qp_cache) {
		old = node->idle.prev;
		tf__conn_unlink(old);
		node->n_idle--;
	}
	pthread_mutex_unlock(&node->lock);
	tf__conn_destroy(old);
}

/* Take a kept connection to the peer at @sa, if any. */
static struct tf_conn *node_take(struct tf_node *node,
				 const struct sockaddr_storage *sa,
				 socklen_t len)
{
	struct tf_conn *c, *found = NULL;

	pthread_mutex_lock(&node->lock);
	for (c = node->idle.next; c != &node->idle; c = c->next) {
		if (c->peer_len == len && !memcmp(&c->peer, sa, len)) {
			tf__conn_unlink(c);
			node->n_idle--;
			found = c;
			break;
		}
	}
	pthread_mutex_unlock(&node->lock);
	return found;
}

/* ------------------------------------------------------------ listener */

static int resolve(const char *host, uint16_t port, struct sockaddr_storage *sa,
		   socklen_t *len_p)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)sa;
	struct addrinfo *res;
	char ps[8];
	int r;

	/* Plain numeric addresses without getaddrinfo (a few microseconds,
	 * on every tf_session_connect); scoped IPv6 addresses take it. */
	memset(sa, 0, sizeof(*sa));
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		*len_p = sizeof(*sin);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		*len_p = sizeof(*sin6);
		return 0;
	}
	snprintf(ps, sizeof(ps), "%u", port);
	r = getaddrinfo(host, ps, &hints, &res);
	if (r) {
		tf_log_error(S, "bad address %s: %s", host, gai_strerror(r));
		return -EINVAL;
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*len_p = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int tf_listener_create(tf_node_t *node, const tf_listener_params_t *params,
		       tf_listener_t **l_p)
{
	uint64_t fm = params ? params->field_mask : 0;
	const char *addr = (fm & TF_LISTENER_PARAM_ADDR) && params->addr
				   ? params->addr
				   : "127.0.0.1";
	uint16_t port = (fm & TF_LISTENER_PARAM_PORT) ? params->port : 0;
	int backlog = (fm & TF_LISTENER_PARAM_BACKLOG) ? params->backlog : 128;
	uint32_t flags = (fm & TF_LISTENER_PARAM_FLAGS) ? params->flags : 0;
	struct epoll_event ev = {.events = EPOLLIN};
	struct sockaddr_storage sa;
	socklen_t sl;
	struct tf_listener *l;
	int one = 1, ret;

	if (!node || !l_p || backlog <= 0 || (flags & ~TF_LISTENER_BUSY_POLL))
		return -EINVAL;
	ret = resolve(addr, port, &sa, &sl);
	if (ret)
		return ret;
	l = tf__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->node = node;
	l->busy_poll = flags & TF_LISTENER_BUSY_POLL;
	list_init(&l->conns);
	l->lfd = socket(sa.ss_family,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->lfd < 0) {
		ret = -errno;
		tf_log_error(S, "socket: %m");
		goto err_free;
	}
	setsockopt(l->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l->lfd, (struct sockaddr *)&sa, sl) ||
	    listen(l->lfd, backlog)) {
		ret = -errno;
		tf_log_error(S, "cannot listen on %s port %u: %m", addr, port);
		goto err_close;
	}
	sl = sizeof(sa);
	getsockname(l->lfd, (struct sockaddr *)&sa, &sl);
	l->port = ntohs(sa.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&sa)->sin6_port
				: ((struct sockaddr_in *)&sa)->sin_port);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		ret = -errno;
		tf_log_error(S, "epoll_create1: %m");
		goto err_close;
	}
	ev.data.ptr = NULL;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev)) {
		ret = -errno;
		tf_log_error(S, "epoll_ctl: %m");
		goto err_ep;
	}
	l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ev.data.u64 = EV_KICK;
	if (l->efd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev)) {
		ret = -errno;
		tf_log_error(S, "listener eventfd: %m");
		goto err_efd;
	}
	atomic_fetch_add(&node->n_listeners, 1);
	*l_p = l;
	return 0;

err_efd:
	if (l->efd >= 0)
		close(l->efd);
err_ep:
	close(l->epfd);
err_close:
	close(l->lfd);
err_free:
	tf__free(l);
	return ret;
}

/* Close the handshaking and idle connections (sessions own the others). */
static void listener_close_conns(struct tf_listener *l)
{
	struct tf_conn *c;

	while ((c = l->conns.next) != &l->conns) {
		tf__conn_unlink(c);
		tf__conn_destroy(c);
	}
	l->n_idle = l->n_pending = 0;
}

static void listener_free(struct tf_listener *l)
{
	listener_close_conns(l);
	close(l->efd);
	close(l->epfd);
	tf__free(l);
}

void tf_listener_destroy(tf_listener_t *l)
{
	if (!l)
		return;
	atomic_fetch_sub(&l->node->n_listeners, 1);
	close(l->lfd);
	l->lfd = -1;
	l->dead = true;
	/* The kept connections close now, also while sessions are still
	 * open (their connections are not in the list, and are destroyed
	 * at their close): a client must not send its next OPEN to a
	 * listener that will never read it. */
	listener_close_conns(l);
	if (!l->refs)
		listener_free(l);
}

void tf__listener_put(struct tf_listener *l)
{
	if (--l->refs == 0 && l->dead)
		listener_free(l);
}

uint16_t tf_listener_port(const tf_listener_t *l)
{
	return l->port;
}

int tf_listener_fd(const tf_listener_t *l)
{
	return l->epfd;
}

/* Watch @c on the listener for the next OPEN (server side, idle). */
static void listener_unwatch(struct tf_listener *l, struct tf_conn *c);

void tf__listener_keep(struct tf_listener *l, struct tf_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
	struct tf_conn *old;

	/* A busy-polling listener does not watch the socket of a kept
	 * connection with a control QP: the next OPEN comes on the QP, and
	 * the socket's end is looked for every TF_LISTENER_SOCKCHECK_NS
	 * (tf_listener_accept).  Adding it to the epoll set and removing it
	 * again cost more than the rest of the session's accept. */
	c->sock_watched = !(l->busy_poll && c->ctl.ready);
	if (l->dead || !l->node->qp_cache || c->broken ||
	    (c->sock_watched &&
	     epoll_ctl(l->epfd, EPOLL_CTL_ADD, c->fd, &ev))) {
		tf__conn_destroy(c);
		return;
	}
	c->hs = TF_CONN_IDLE;
	c->deadline_ns = 0;
	tf__wire_rx_reset(&c->rx);
	/* The next OPEN comes on the control QP: its CQ's fd joins the
	 * socket in the epoll set, armed, so that the listener fd becomes
	 * readable when it arrives.  An OPEN that came before the arm is
	 * found by the arm's second look, and announced by the kick.  A
	 * busy-polling listener polls the control QP instead. */
	c->ctl_watched = c->ctl_armed = false;
	if (c->ctl.ready && !l->busy_poll) {
		int cfd = tf_cq_fd(c->ctl.cq);

		ev.data.u64 = (uint64_t)(uintptr_t)c | EV_CQ;
		if (cfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, cfd, &ev)) {
			/* The listener fd could not report its next OPEN. */
			tf_log_warn(S, "cannot watch a control QP: %m");
			if (c->sock_watched)
				epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
			tf__conn_destroy(c);
			return;
		}
		c->ctl_watched = true;
		if (cfd >= 0 && !tf__ctl_arm(c))
			c->ctl_armed = true;
		if (c->ctl.n_backlog) {
			uint64_t one = 1;

			if (write(l->efd, &one, sizeof(one)) < 0)
				tf_log_debug(S, "listener kick: %m");
		}
	}
	tf__conn_link(&l->conns, c);
	if (++l->n_idle > l->node->qp_cache) {
		/* The oldest idle connection goes; the list also holds
		 * handshaking ones, which are skipped. */
		for (old = l->conns.prev; old != &l->conns; old = old->prev)
			if (old->hs == TF_CONN_IDLE)
				break;
		/* Out of the epoll set first: closing its fds does not
		 * remove them while a forked child still holds them, and an
		 * event would then name freed memory. */
		listener_unwatch(l, old);
		tf__conn_unlink(old);
		l->n_idle--;
		tf__conn_destroy(old);
	}
}

/* Take @c's fds out of the listener's epoll set. */
static void listener_unwatch(struct tf_listener *l, struct tf_conn *c)
{
	if (c->sock_watched)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->sock_watched = false;
	if (c->ctl_watched)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, tf_cq_fd(c->ctl.cq), NULL);
	c->ctl_watched = c->ctl_armed = false;
}

/* Drop a handshaking or idle connection of the listener. */
static void listener_drop(struct tf_listener *l, struct tf_conn *c)
{
	listener_unwatch(l, c);
	if (c->hs == TF_CONN_IDLE)
		l->n_idle--;
	else
		l->n_pending--;
	tf__conn_unlink(c);
	tf__conn_destroy(c);
}

/* Tell a peer why it was refused (best effort: it may be gone). */
static void send_reject(struct tf_conn *c, int err)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_REJECT);
	tf__wire_put_u32(&m, (uint32_t)(err < 0 ? -err : err));
	if (tf__wire_finish(&m))
		return;
	/* A kept connection's client waits for the answer on the control
	 * QP, where its OPEN went. */
	if (c->hs == TF_CONN_IDLE && c->ctl.ready) {
		/* The connection is destroyed next: let the SEND leave
		 * first, or the client would only see the connection end. */
		if (!tf__ctl_send(c, &m, 100))
			tf__ctl_flush(c, 100);
	} else {
		tf__wire_send(c->fd, &m, 100);
	}
}

static int server_hello(struct tf_listener *l, struct tf_conn *c)
{
	struct tf_node *node = l->node;
	struct tf_wire_hello hello;
	struct tf_wire_msg m;
	uint8_t mac[TF_WIRE_MAC];
	int ret;

	ret = tf__wire_parse_hello(&c->rx, &hello);
	if (ret)
		return ret;
	memcpy(c->nonce_c, hello.nonce, TF_WIRE_NONCE);
	ret = tf__random(c->nonce_s, TF_WIRE_NONCE);
	if (ret)
		return ret;
	tf__wire_init(&m, TF_WIRE_CHALLENGE);
	tf__wire_put_bytes(&m, c->nonce_s, TF_WIRE_NONCE);
	tf__wire_put_u8(&m, node->psk_len ? 1 : 0);
	if (node->psk_len) {
		ret = tf__wire_mac(node->psk, node->psk_len, "tollfree-s",
				   c->nonce_c, c->nonce_s, mac);
		if (ret)
			return ret;
		tf__wire_put_bytes(&m, mac, TF_WIRE_MAC);
	}
	ret = tf__wire_finish(&m);
	if (!ret)
		ret = tf__wire_send(c->fd, &m, node->timeout_ms);
	c->hs = TF_CONN_WAIT_OPEN;
	c->deadline_ns = tf__now_ns() + (uint64_t)node->timeout_ms * 1000000;
	return ret;
}

/* Serve an OPEN on @c; on success *@s_p is the new session. */
static int server_open(struct tf_listener *l, struct tf_conn *c,
		       const tf_session_params_t *params,
		       struct tf_session **s_p)
{
	struct tf_node *node = l->node;
	struct tf_wire_open req;
	uint8_t want[TF_WIRE_MAC];
	struct tf_session *s;
	bool idle = c->hs == TF_CONN_IDLE;
	int ret;

	/* A kept connection proved the key when it was made. */
	ret = tf__wire_parse_open(&c->rx, node->psk_len && !idle, &req);
	if (ret)
		return ret;
	/* A kept connection's control QP was set up with its first
	 * session. */
	if (idle && req.ctl_len) {
		tf_log_warn(S, "handshake: OPEN on a kept connection names a "
			       "control QP");
		return -TF_EWIRE;
	}
	if (req.mac) {
		ret = tf__wire_mac(node->psk, node->psk_len, "tollfree-c",
				   c->nonce_s, c->nonce_c, want);
		if (ret)
			return ret;
		if (!tf__wire_mac_equal(req.mac, want)) {
			tf_log_warn(S, "handshake: peer failed to prove the "
				       "pre-shared key");
			STAT(node, auth_failures);
			return -TF_EAUTH;
		}
	}
	if (idle) {
		if (req.reuse_id != c->id || req.blob_len) {
			tf_log_warn(S,
				    "handshake: OPEN on kept connection %u "
				    "names %u with a %u-byte blob",
				    c->id, req.reuse_id, req.blob_len);
			return -TF_EWIRE;
		}
		/* A QP that failed while idle is not reused. */
		if (tf_qp_state(c->qp) != TF_QPS_RTS ||
		    (c->ctl.ready && tf_qp_state(c->ctl.qp) != TF_QPS_RTS)) {
			c->broken = true;
			return -TF_EQPERR;
		}
	} else {
		uint32_t sd = 256, rd = 256;

		if (req.reuse_id || !req.blob_len) {
			tf_log_warn(S,
				    "handshake: first OPEN names "
				    "connection %u with a %u-byte blob",
				    req.reuse_id, req.blob_len);
			return -TF_EWIRE;
		}
		if (params && (params->field_mask & TF_SESSION_PARAM_QP)) {
			sd = params->max_send_wr;
			rd = params->max_recv_wr;
		}
		ret = tf__conn_new_qp(node, c, sd, rd);
		if (ret)
			return ret;
		ret = tf_qp_connect(c->qp, req.blob, req.blob_len);
		if (ret) {
			tf_log_warn(S, "handshake: peer QP address refused: %s",
				    tf_strerror(ret));
			return ret;
		}
		/* Without a control QP the connection still works: its later
		 * sessions send their control messages on the socket. */
		if (req.ctl_len && node->qp_cache && !tf__ctl_create(node, c) &&
		    tf__ctl_connect(c, req.ctl, req.ctl_len))
			tf__ctl_destroy(c);
		c->id = atomic_fetch_add(&node->next_conn_id, 1) + 1;
	}
	ret = tf__sess_new(node, c, true, &s);
	if (ret)
		return ret;
	s->reused = idle;
	s->qctl = idle && c->ctl.ready;
	if (idle)
		STAT(node, qp_reused);
	memcpy(s->priv, req.priv, req.priv_len);
	s->priv_len = req.priv_len;
	s->deferred = true;
	*s_p = s;
	return 0;
}

/*
 * Serve a listener connection: a readable socket, or (@from_ctl) the
 * message tf__ctl_next() put into c->rx, or its error @ret.  Returns 1
 * with *@s_p set when a session opened.
 */
static int serve_conn(struct tf_listener *l, struct tf_conn *c,
		      const tf_session_params_t *params, bool from_ctl, int ret,
		      struct tf_session **s_p)
{
	struct tf_session *s;

	if (!from_ctl) {
		/* A kept connection with a control QP has nothing to say
		 * on its socket but its end. */
		if (c->hs == TF_CONN_IDLE && c->ctl.ready)
			ret = tf__ctl_tcp_check(c);
		else
			ret = tf__wire_rx_step(c->fd, &c->rx);
	}
	if (ret == 0)
		return 0;
	if (ret < 0)
		goto err;
	if (c->hs == TF_CONN_WAIT_HELLO) {
		ret = server_hello(l, c);
		tf__wire_rx_reset(&c->rx);
		if (ret)
			goto err;
		return 0;
	}
	ret = server_open(l, c, params, &s);
	tf__wire_rx_reset(&c->rx);
	if (ret)
		goto err;
	/* The session owns the connection from now on. */
	listener_unwatch(l, c);
	if (c->hs == TF_CONN_IDLE)
		l->n_idle--;
	else
		l->n_pending--;
	tf__conn_unlink(c);
	c->hs = TF_CONN_BUSY;
	c->l = l;
	l->refs++;
	if (!(params && (params->field_mask & TF_SESSION_PARAM_FLAGS) &&
	      (params->flags & TF_SESSION_DEFER_ESTABLISH))) {
		ret = tf_session_establish(s);
		if (ret) {
			tf_session_close(s);
			return 0;
		}
	}
	s->opened = true;
	STAT(l->node, sessions_opened);
	*s_p = s;
	return 1;
err:
	/* An idle connection the client closed is the normal end of a
	 * kept connection, not a rejected handshake. */
	if (!(c->hs == TF_CONN_IDLE && ret == -ECONNRESET &&
	      (from_ctl || !c->rx.got)) &&
	    /* ... nor is its control QP failing when the client exited. */
	    !(c->hs == TF_CONN_IDLE && from_ctl && ret == -TF_EQPERR)) {
		if (ret != -TF_EAUTH)
			STAT(l->node, handshake_rejects);
		if (ret != -ECONNRESET)
			send_reject(c, ret);
	}
	listener_drop(l, c);
	return 0;
}

/* A busy-polling listener's kept connections whose sockets are not in
 * the epoll set: the end of any of them (or bytes, a protocol error) is
 * served as an event.  Returns what serve_conn does (never 1 here: an
 * error drops the connection). */
static int check_sockets(struct tf_listener *l,
			 const tf_session_params_t *params,
			 struct tf_session **s_p)
{
	/* Oldest first, as in scan_ctl. */
	for (struct tf_conn *c = l->conns.prev; c != &l->conns; c = c->prev) {
		int r;

		if (c->hs != TF_CONN_IDLE || c->sock_watched)
			continue;
		r = tf__ctl_tcp_check(c);
		if (!r)
			continue;
		if (serve_conn(l, c, params, true, r, s_p) == 1)
			return 1;
		/* The list changed: the others are looked at next time. */
		break;
	}
	return 0;
}

/* Poll the control QPs of the kept connections for their next OPEN:
 * 1 with *@s_p set when a session opened.  Oldest first: a connection
 * goes back to the head of the list when its session closes, so walking
 * from the head would let busy clients starve the one at the tail. */
static int scan_ctl(struct tf_listener *l, const tf_session_params_t *params,
		    struct tf_session **s_p)
{
	for (struct tf_conn *c = l->conns.prev; c != &l->conns; c = c->prev) {
		int r;

		if (c->hs != TF_CONN_IDLE || !c->ctl.ready)
			continue;
		r = tf__ctl_next(c, &c->rx);
		if (!r)
			continue;
		if (serve_conn(l, c, params, true, r < 0 ? r : 1, s_p) == 1)
			return 1;
		/* The list may have changed: look again next turn. */
		break;
	}
	return 0;
}

int tf_listener_accept(tf_listener_t *l, const tf_session_params_t *params,
		       int timeout_ms, tf_session_t **s_p)
{
	uint64_t deadline = tf__now_ns() + (uint64_t)timeout_ms * 1000000;
	struct epoll_event evs[16];

	if (!l || !s_p || l->dead)
		return -EINVAL;
	for (;;) {
		uint64_t now = tf__now_ns();
		struct tf_conn *c, *nx;
		int n, wait_ms = 10;

		/* Handshakes that missed their deadline are dropped. */
		for (c = l->conns.next; c != &l->conns; c = nx) {
			nx = c->next;
			if (c->deadline_ns && now > c->deadline_ns) {
				tf_log_warn(S, "handshake: peer timed out");
				STAT(l->node, handshake_rejects);
				listener_drop(l, c);
			}
		}
		/* A busy-polling listener looks at the control QPs first:
		 * no system call when the next OPEN is there.  The sockets
		 * are still looked at every TF_LISTENER_EPOLL_NS, so that
		 * OPENs arriving back to back cannot starve handshakes and
		 * the end of idle connections. */
		if (l->busy_poll && now - l->epoll_ns < TF_LISTENER_EPOLL_NS) {
			if (scan_ctl(l, params, s_p))
				return 0;
			if (timeout_ms >= 0 && now >= deadline)
				return -EAGAIN;
			continue;
		}
		l->epoll_ns = now;
		if (l->busy_poll &&
		    now - l->sockcheck_ns >= TF_LISTENER_SOCKCHECK_NS) {
			l->sockcheck_ns = now;
			if (check_sockets(l, params, s_p))
				return 0;
		}
		/* Kept connections whose next OPEN comes on the control QP
		 * are armed for the fd when they are not (an event consumed
		 * the arm); an OPEN found by the arm's second look means
		 * no sleeping.  A busy-polling listener never sleeps. */
		if (l->busy_poll)
			wait_ms = 0;
		for (c = l->conns.next; c != &l->conns; c = c->next) {
			if (c->hs != TF_CONN_IDLE || !c->ctl.ready)
				continue;
			if (!c->ctl_armed && c->ctl_watched)
				c->ctl_armed = !tf__ctl_arm(c);
			if (c->ctl.n_backlog)
				wait_ms = 0;
		}
		if (timeout_ms >= 0 && now >= deadline)
			wait_ms = 0;
		else if (wait_ms && timeout_ms >= 0 &&
			 (deadline - now) / 1000000 < (uint64_t)wait_ms)
			wait_ms = (int)((deadline - now) / 1000000);
		/* Sessions already accepted may need this side to serve
		 * their peers' one-sided operations while we wait. */
		tf_context_progress(l->node->ctx);
		n = epoll_wait(l->epfd, evs, 16, wait_ms);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag == EV_KICK) {
				uint64_t v;

				if (read(l->efd, &v, sizeof(v)) < 0 &&
				    errno != EAGAIN)
					tf_log_debug(S, "listener kick: %m");
				continue;
			}
			if (tag & EV_CQ) {
				/* The arm was consumed: re-arm next turn,
				 * which polls the CQ too. */
				c = (struct tf_conn *)(uintptr_t)(tag & ~EV_CQ);
				c->ctl_armed = false;
				continue;
			}
			c = evs[i].data.ptr;
			if (!c) {
				int fd;

				while ((fd = accept4(l->lfd, NULL, NULL,
						     SOCK_NONBLOCK |
							     SOCK_CLOEXEC)) >=
				       0) {
					struct epoll_event ev = {
						.events = EPOLLIN};

					/* Bounded: a flood of connections
					 * that never finish their handshake
					 * cannot exhaust memory. */
					if (l->n_pending >=
					    TF_LISTENER_MAX_PENDING) {
						STAT(l->node,
						     handshake_rejects);
						close(fd);
						continue;
					}
					c = conn_alloc(l->node, fd);
					if (!c) {
						close(fd);
						continue;
					}
					set_sock_opts(fd);
					c->hs = TF_CONN_WAIT_HELLO;
					c->deadline_ns =
						tf__now_ns() +
						(uint64_t)l->node->timeout_ms *
							1000000;
					ev.data.ptr = c;
					if (epoll_ctl(l->epfd, EPOLL_CTL_ADD,
						      fd, &ev)) {
						tf__conn_destroy(c);
						continue;
					}
					c->sock_watched = true;
					tf__conn_link(&l->conns, c);
					l->n_pending++;
				}
				continue;
			}
			if (serve_conn(l, c, params, false, 0, s_p) == 1)
				return 0;
			/* serve_conn may have freed a connection that a
			 * later event names: stop and poll again. */
			break;
		}
		/* Then the control QPs of kept connections (after the
		 * sockets, so that the end of a connection its client gave
		 * up is seen even while OPENs keep arriving on others). */
		if (scan_ctl(l, params, s_p))
			return 0;
		if (timeout_ms >= 0 && tf__now_ns() >= deadline)
			return -EAGAIN;
	}
}

/* ------------------------------------------------------------ client */

static int connect_tcp(struct tf_node *node, const struct sockaddr_storage *sa,
		       socklen_t sl, int *fd_p)
{
	struct pollfd pfd;
	socklen_t el = sizeof(int);
	int fd, err = 0, r;

	fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0) {
		err = -errno;
		tf_log_error(S, "socket: %m");
		return err;
	}
	set_sock_opts(fd);
	if (connect(fd, (const struct sockaddr *)sa, sl) &&
	    errno != EINPROGRESS) {
		err = -errno;
		goto err_close;
	}
	pfd.fd = fd;
	pfd.events = POLLOUT;
	do {
		r = poll(&pfd, 1, node->timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r <= 0) {
		err = r ? -errno : -ETIMEDOUT;
		goto err_close;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
	if (err) {
		err = -err;
		goto err_close;
	}
	*fd_p = fd;
	return 0;
err_close:
	close(fd);
	return err;
}

/* The server's REJECT in c->rx, as its error (logged), or 0 for any
 * other message. */
static int server_refused(struct tf_conn *c)
{
	int err;

	if (c->rx.h.op != TF_WIRE_REJECT)
		return 0;
	if (tf__wire_parse_reject(&c->rx, &err))
		err = -TF_EWIRE;
	tf_log_warn(S, "server refused the session: %s", tf_strerror(err));
	return err;
}

/* Receive the server's answer to OPEN: ACCEPT (into @s) or REJECT. */
static int client_accept(struct tf_session *s, bool reused)
{
	struct tf_conn *c = s->c;
	struct tf_wire_accept acc;
	int ret;

	tf__wire_rx_reset(&c->rx);
	if (s->qctl)
		ret = tf__ctl_wait(c, &c->rx, s->node->timeout_ms);
	else
		ret = tf__wire_recv(c->fd, &c->rx, s->node->timeout_ms);
	if (ret < 0)
		return ret;
	ret = server_refused(c);
	if (ret)
		return ret;
	ret = tf__wire_parse_accept(&c->rx, &acc);
	if (ret)
		return ret;
	if ((reused != !acc.blob_len) || (reused && acc.conn_id != c->id) ||
	    (acc.ctl_len && (reused || !c->ctl.qp))) {
		tf_log_warn(S, "handshake: malformed ACCEPT");
		return -TF_EWIRE;
	}
	ret = tf__sess_add_exposures(s, &acc.exps);
	if (ret)
		return ret;
	if (!reused) {
		c->id = acc.conn_id;
		ret = tf_qp_connect(c->qp, acc.blob, acc.blob_len);
		if (ret) {
			tf_log_warn(S, "server QP address refused: %s",
				    tf_strerror(ret));
			return ret;
		}
		/* The server connected a control QP to ours (and will expect
		 * the next session's OPEN there), or has none. */
		if (acc.ctl_len) {
			ret = tf__ctl_connect(c, acc.ctl, acc.ctl_len);
			if (ret)
				return ret;
		} else {
			tf__ctl_destroy(c);
		}
	}
	tf__wire_rx_reset(&c->rx);
	return 0;
}

static int send_open(struct tf_session *s, const tf_session_params_t *params,
		     const uint8_t *mac, const uint8_t *blob, size_t blob_len,
		     const uint8_t *ctl, size_t ctl_len)
{
	struct tf_wire_msg m;
	size_t priv_len = 0;
	int ret;

	if (params && (params->field_mask & TF_SESSION_PARAM_PRIV))
		priv_len = params->priv_len;
	tf__wire_init(&m, TF_WIRE_OPEN);
	if (mac)
		tf__wire_put_bytes(&m, mac, TF_WIRE_MAC);
	tf__wire_put_u32(&m, blob_len ? 0 : s->c->id);
	tf__wire_put_u16(&m, (uint16_t)blob_len);
	tf__wire_put_bytes(&m, blob, blob_len);
	tf__wire_put_u16(&m, (uint16_t)priv_len);
	if (priv_len)
		tf__wire_put_bytes(&m, params->priv, priv_len);
	if (ctl_len) {
		tf__wire_put_u16(&m, (uint16_t)ctl_len);
		tf__wire_put_bytes(&m, ctl, ctl_len);
	}
	ret = tf__wire_finish(&m);
	if (ret)
		return ret;
	return tf__sess_ctl_send(s, &m, s->node->timeout_ms);
}

/* Open a session on a kept connection; on failure the connection is
 * destroyed and the caller makes a new one, unless the server answered
 * with a REJECT (*@refused_p): the server's application refused this
 * session, and asking again on another connection would repeat it. */
static int connect_reused(struct tf_node *node, struct tf_conn *c,
			  const tf_session_params_t *params,
			  struct tf_session **s_p, bool *refused_p)
{
	struct tf_session *s;
	int ret;

	*refused_p = false;
	if (tf_qp_state(c->qp) != TF_QPS_RTS ||
	    (c->ctl.ready && tf_qp_state(c->ctl.qp) != TF_QPS_RTS)) {
		c->broken = true;
		tf__conn_destroy(c);
		return -TF_EQPERR;
	}
	ret = tf__sess_new(node, c, false, &s);
	if (ret) {
		tf__conn_destroy(c);
		return ret;
	}
	s->reused = true;
	s->qctl = c->ctl.ready;
	ret = send_open(s, params, NULL, NULL, 0, NULL, 0);
	if (!ret)
		ret = client_accept(s, true);
	if (ret) {
		*refused_p = c->rx.have_hdr && c->rx.h.op == TF_WIRE_REJECT;
		s->broken = true;
		c->broken = true;
		tf_session_close(s);
		return ret;
	}
	STAT(node, qp_reused);
	*s_p = s;
	return 0;
}

static int connect_new(struct tf_node *node, const struct sockaddr_storage *sa,
		       socklen_t sl, const tf_session_params_t *params,
		       bool no_reuse, struct tf_session **s_p)
{
	uint8_t blob[TF_QP_ADDR_MAX], mac[TF_WIRE_MAC], want[TF_WIRE_MAC];
	uint8_t ctl[TF_QP_ADDR_MAX];
	size_t blob_len = sizeof(blob), ctl_len = 0;
	uint32_t sd = 256, rd = 256;
	struct tf_wire_msg m;
	struct tf_wire_challenge ch;
	struct tf_session *s;
	struct tf_conn *c;
	const uint8_t *smac;
	uint8_t auth;
	int fd = -1, ret;

	ret = connect_tcp(node, sa, sl, &fd);
	if (ret) {
		tf_log_warn(S, "cannot connect to the listener: %s",
			    tf_strerror(ret));
		return ret;
	}
	c = conn_alloc(node, fd);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	memcpy(&c->peer, sa, sl);
	c->peer_len = sl;
	c->hs = TF_CONN_BUSY;
	ret = tf__random(c->nonce_c, TF_WIRE_NONCE);
	if (ret)
		goto err_conn;
	tf__wire_init(&m, TF_WIRE_HELLO);
	tf__wire_put_bytes(&m, c->nonce_c, TF_WIRE_NONCE);
	ret = tf__wire_finish(&m);
	if (!ret)
		ret = tf__wire_send(fd, &m, node->timeout_ms);
	if (!ret)
		ret = tf__wire_recv(fd, &c->rx, node->timeout_ms);
	if (ret < 0)
		goto err_conn;
	ret = server_refused(c);
	if (ret)
		goto err_conn;
	ret = tf__wire_parse_challenge(&c->rx, &ch);
	if (ret)
		goto err_conn;
	smac = ch.mac;
	auth = smac != NULL;
	memcpy(c->nonce_s, ch.nonce, TF_WIRE_NONCE);
	/* The server must prove the key before it learns our QP address;
	 * a server without a key cannot be trusted by a client with one. */
	if (!!auth != !!node->psk_len) {
		tf_log_warn(S, "handshake: %s",
			    node->psk_len
				    ? "server did not prove the pre-shared key"
				    : "server requires a pre-shared key");
		STAT(node, auth_failures);
		ret = -TF_EAUTH;
		goto err_conn;
	}
	if (auth) {
		ret = tf__wire_mac(node->psk, node->psk_len, "tollfree-s",
				   c->nonce_c, c->nonce_s, want);
		if (ret)
			goto err_conn;
		if (!tf__wire_mac_equal(smac, want)) {
			tf_log_warn(S, "handshake: server failed to prove the "
				       "pre-shared key");
			STAT(node, auth_failures);
			ret = -TF_EAUTH;
			goto err_conn;
		}
		ret = tf__wire_mac(node->psk, node->psk_len, "tollfree-c",
				   c->nonce_s, c->nonce_c, mac);
		if (ret)
			goto err_conn;
	}
	if (params && (params->field_mask & TF_SESSION_PARAM_QP)) {
		sd = params->max_send_wr;
		rd = params->max_recv_wr;
	}
	ret = tf__conn_new_qp(node, c, sd, rd);
	if (ret)
		goto err_conn;
	ret = tf_qp_get_addr(c->qp, blob, &blob_len);
	if (ret)
		goto err_conn;
	/* A control QP for the sessions after this one, if the connection
	 * may be kept; without one they use the socket. */
	if (node->qp_cache && !no_reuse && !tf__ctl_create(node, c)) {
		ctl_len = sizeof(ctl);
		if (tf_qp_get_addr(c->ctl.qp, ctl, &ctl_len)) {
			tf__ctl_destroy(c);
			ctl_len = 0;
		}
	}
	ret = tf__sess_new(node, c, false, &s);
	if (ret)
		goto err_conn;
	ret = send_open(s, params, auth ? mac : NULL, blob, blob_len, ctl,
			ctl_len);
	if (!ret)
		ret = client_accept(s, false);
	if (ret) {
		s->broken = true;
		c->broken = true;
		tf_session_close(s);
		return ret;
	}
	*s_p = s;
	return 0;

err_conn:
	c->broken = true;
	tf__conn_destroy(c);
	return ret;
}

int tf_session_connect(tf_node_t *node, const char *host, uint16_t port,
		       const tf_session_params_t *params, tf_session_t **s_p)
{
	bool no_reuse = params &&
			(params->field_mask & TF_SESSION_PARAM_FLAGS) &&
			(params->flags & TF_SESSION_NO_REUSE);
	struct sockaddr_storage sa;
	struct tf_session *s;
	struct tf_conn *c;
	socklen_t sl;
	int ret;

	if (!node || !host || !s_p)
		return -EINVAL;
	if (params && (params->field_mask & TF_SESSION_PARAM_PRIV) &&
	    (params->priv_len > TF_SESSION_MAX_PRIV ||
	     (params->priv_len && !params->priv)))
		return -EINVAL;
	if (params && (params->field_mask & TF_SESSION_PARAM_QP) &&
	    (!params->max_send_wr || !params->max_recv_wr))
		return -EINVAL;
	ret = resolve(host, port, &sa, &sl);
	if (ret)
		return ret;
	memset((char *)&sa + sl, 0, sizeof(sa) - sl);
	/* A kept connection that fails to open (the server dropped it) is
	 * destroyed and the next one, or a new one, is tried. */
	while (!no_reuse && (c = node_take(node, &sa, sl)) != NULL) {
		bool refused;

		ret = connect_reused(node, c, params, &s, &refused);
		if (!ret)
			goto out;
		if (refused) {
			STAT(node, connect_failures);
			return ret;
		}
		tf_log_debug(S, "kept connection failed: %s", tf_strerror(ret));
	}
	ret = connect_new(node, &sa, sl, params, no_reuse, &s);
	if (ret) {
		STAT(node, connect_failures);
		return ret;
	}
out:
	if (no_reuse)
		s->c->no_keep = true;
	s->opened = true;
	STAT(node, sessions_opened);
	*s_p = s;
	return 0;
}
