/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connections: the bootstrap socket and the QP (with its CQ and
 * control QP) a session runs on, their lists, and the client's cache of
 * kept connections per peer address.
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

void tf__conn_list_init(struct tf_conn *head)
{
	head->next = head->prev = head;
}

/* ------------------------------------------------------------ conns */

struct tf_conn *tf__conn_alloc(struct tf_node *node, int fd)
{
	struct tf_conn *c = tf__calloc(1, sizeof(*c));

	if (!c) {
		tf_log_error(S, "out of memory for a connection");
		return NULL;
	}
	c->node = node;
	c->fd = fd;
	c->wait_fd = -1;
	return c;
}

int tf__conn_make_qp(struct tf_node *node, struct tf_conn *c,
		     uint32_t send_depth, uint32_t recv_depth)
{
	/* The send queue has room for the session's own binds and
	 * invalidations on top of the caller's depth, and for the fence
	 * READ and a remote invalidation (RINV_SLOT: the client's
	 * SEND_WITH_INV, outstanding into the next session, or the
	 * server's receive for it). */
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH,
			      .depth = send_depth + recv_depth +
				       TF_SESSION_MAX_EXPOSURES + 16};
	tf_qp_params_t qpp = {
		.field_mask = TF_QP_PARAM_MAX_SEND_WR | TF_QP_PARAM_MAX_RECV_WR,
		.max_send_wr = send_depth + TF_SESSION_MAX_EXPOSURES + 2,
		.max_recv_wr = recv_depth + 1};
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
	c->stock_shape =
		send_depth == TF_STOCK_DEPTH && recv_depth == TF_STOCK_DEPTH;
	return 0;
}

int tf__conn_new_qp(struct tf_node *node, struct tf_conn *c,
		    uint32_t send_depth, uint32_t recv_depth, bool want_ctl)
{
	int ret = 0;

	if (!tf__stock_take(node, c, send_depth, recv_depth, want_ctl))
		ret = tf__conn_make_qp(node, c, send_depth, recv_depth);
	if (!ret)
		STAT(node, qp_new);
	return ret;
}

void tf__conn_destroy(struct tf_conn *c)
{
	if (!c)
		return;
	tf__peers_unkeep(c->node, c);
	tf__keys_free(c->keys);
	tf__transcript_free(c->ts);
	tf__sess_free_mem(c->spare);
	/* Grants before the QP they are bound to. */
	tf__conn_grants_drop(c);
	/* The session fd's set first: it names the fds closed below. */
	if (c->wait_fd >= 0)
		close(c->wait_fd);
	/* A kept connection may still carry the CLOSE of its last session
	 * (close is one-way): let it leave before the QP goes, or the peer
	 * would see the connection break instead of the session end. */
	if (c->ctl.ready && !c->broken)
		tf__ctl_flush(c, 100);
	tf__ctl_destroy(c);
	if (c->qp) {
		if (c->broken)
			STAT(c->node, qp_broken);
		STAT(c->node, qp_destroyed);
		if (!tf__stock_recycle(c->node, c))
			tf_qp_destroy(c->qp);
	}
	if (c->cq)
		tf_cq_destroy(c->cq);
	if (c->fd >= 0)
		close(c->fd);
	tf__free(c);
}

int tf__conn_send(struct tf_conn *c, unsigned ch, struct tf_wire_msg *m,
		  int timeout_ms)
{
	uint8_t th[TF_WIRE_HASH];
	bool hs = c->ts && ch == TF_WIRE_CH_SOCK;
	int ret;

	if (c->keys) {
		if (hs) {
			ret = tf__transcript_hash(c->ts, th);
			if (ret)
				return ret;
		}
		ret = tf__wire_seal(c->keys, ch, m, hs ? th : NULL);
		if (ret)
			return ret;
		if (hs) {
			ret = tf__transcript_add_msg(c->ts, m);
			if (ret)
				return ret;
		}
	}
	if (ch == TF_WIRE_CH_CTL)
		return tf__ctl_send(c, m, timeout_ms);
	if (c->pre_len) {
		size_t n = c->pre_len;

		c->pre_len = 0;
		return tf__wire_send_pre(c->fd, c->pre, n, m, timeout_ms,
					 c->fin_next);
	}
	if (c->fin_next)
		return tf__wire_send_last(c->fd, m, timeout_ms);
	return tf__wire_send(c->fd, m, timeout_ms);
}

int tf__conn_open_rx(struct tf_conn *c, unsigned ch, struct tf_wire_rx *rx)
{
	uint8_t th[TF_WIRE_HASH];
	bool hs = c->ts && ch == TF_WIRE_CH_SOCK;
	int ret;

	if (!c->keys)
		return 0;
	if (hs) {
		/* The hash of what came before; then this message, as it
		 * travelled (sealed), joins the transcript. */
		ret = tf__transcript_hash(c->ts, th);
		if (!ret)
			ret = tf__transcript_add_rx(c->ts, rx);
		if (ret)
			return ret;
	}
	return tf__wire_unseal(c->keys, ch, rx, hs ? th : NULL);
}

int tf__conn_open(struct tf_conn *c, unsigned ch)
{
	return tf__conn_open_rx(c, ch, &c->rx);
}

/* A client keeps a GRANT for a later session on the connection. */
static int grant_keep(struct tf_conn *c, const struct tf_wire_rx *rx)
{
	struct tf_wire_grant g;
	int ret = tf__wire_parse_grant(rx, &g);

	if (ret)
		return ret;
	if (c->n_grants >= TF_WIRE_MAX_GRANTS) {
		tf_log_warn(S, "peer sent more than %d grants on a connection",
			    TF_WIRE_MAX_GRANTS);
		return -TF_EWIRE;
	}
	for (unsigned i = 0; i < c->n_grants; i++)
		if (c->grants[i].id == g.grant) {
			tf_log_warn(S, "peer sent grant %u twice", g.grant);
			return -TF_EWIRE;
		}
	c->grants[c->n_grants].id = g.grant;
	c->grants[c->n_grants].info = g.e;
	c->n_grants++;
	return 0;
}

int tf__conn_aside(struct tf_conn *c, unsigned ch, const struct tf_wire_rx *rx)
{
	if (rx->h.op == TF_WIRE_CLOSE && c->close_due[ch]) {
		c->close_due[ch]--;
		return 1;
	}
	/* Grants come from a listener, on the control QP, to its client. */
	if (rx->h.op == TF_WIRE_GRANT && c->client && ch == TF_WIRE_CH_CTL) {
		int ret = grant_keep(c, rx);

		return ret ? ret : 1;
	}
	return 0;
}

struct tf_grant tf__conn_grant_take(struct tf_conn *c, unsigned i)
{
	struct tf_grant g = c->grants[i];

	c->n_grants--;
	memmove(c->grants + i, c->grants + i + 1,
		(c->n_grants - i) * sizeof(c->grants[0]));
	return g;
}

void tf__conn_grants_drop(struct tf_conn *c)
{
	struct tf_node *node = c->node;

	for (unsigned i = 0; i < c->n_grants; i++) {
		struct tf_grant *g = &c->grants[i];

		if (!g->mw)
			continue;
		/* Freeing the window revokes it: only then may its slice
		 * go back to the pool. */
		tf_mw_dealloc(g->mw);
		tf_pool_return(node->pool, &g->slice);
		atomic_fetch_sub_explicit(&node->slices_rented, 1,
					  memory_order_relaxed);
		atomic_fetch_sub_explicit(&node->windows_live, 1,
					  memory_order_relaxed);
		STAT(node, windows_revoked);
		STAT(node, grants_dropped);
	}
	c->n_grants = 0;
}

void tf__conn_sock_opts(int fd)
{
	int one = 1;

	/* Handshake messages are small and answered at once: Nagle would
	 * add a delayed-ACK wait to every round trip. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
	c->kept_ns = tf__now_ns();
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
struct tf_conn *tf__node_take(struct tf_node *node,
			      const struct sockaddr_storage *sa, socklen_t len)
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

/* ------------------------------------------------------------ addresses */

/* Errors of getaddrinfo as ours: a name that does not resolve (unknown,
 * or the resolver cannot be reached) is a host we cannot reach. */
static int gai_errno(int r)
{
	switch (r) {
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_SYSTEM:
		return errno ? -errno : -EHOSTUNREACH;
	case EAI_NONAME:
	case EAI_AGAIN:
	case EAI_FAIL:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -EHOSTUNREACH;
	default:
		return -EINVAL;
	}
}

static void addrs_add(struct tf_sess_addrs *out, const struct sockaddr *sa,
		      socklen_t len)
{
	struct tf_sess_addr *a;

	if (out->n == TF_SESS_ADDRS_MAX || len > sizeof(a->sa))
		return;
	/* A name may list an address twice (hosts file and DNS). */
	for (int i = 0; i < out->n; i++)
		if (out->a[i].len == len && !memcmp(&out->a[i].sa, sa, len))
			return;
	a = &out->a[out->n++];
	memset(&a->sa, 0, sizeof(a->sa));
	memcpy(&a->sa, sa, len);
	a->len = len;
}

int tf__sess_resolve(const char *host, uint16_t port, struct tf_sess_addrs *out)
{
	/* Every address of the name, in getaddrinfo's order (RFC 6724:
	 * "localhost" usually gives ::1, then 127.0.0.1); the caller tries
	 * them in turn. */
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV};
	struct sockaddr_in sin = {.sin_family = AF_INET};
	struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6};
	struct addrinfo *res, *ai;
	char ps[8];
	int r;

	out->n = 0;
	if (!*host) {
		tf_log_error(S, "empty host name");
		return -EINVAL;
	}
	/* Plain numeric addresses without getaddrinfo (a few microseconds,
	 * on every tf_session_connect); scoped IPv6 addresses and names
	 * take it. */
	if (inet_pton(AF_INET, host, &sin.sin_addr) == 1) {
		sin.sin_port = htons(port);
		addrs_add(out, (struct sockaddr *)&sin, sizeof(sin));
		return 0;
	}
	if (inet_pton(AF_INET6, host, &sin6.sin6_addr) == 1) {
		sin6.sin6_port = htons(port);
		addrs_add(out, (struct sockaddr *)&sin6, sizeof(sin6));
		return 0;
	}
	snprintf(ps, sizeof(ps), "%u", port);
	r = getaddrinfo(host, ps, &hints, &res);
	if (r) {
		int err = gai_errno(r);

		tf_log_error(S, "cannot resolve '%s': %s", host,
			     r == EAI_SYSTEM ? tf_strerror(err)
					     : gai_strerror(r));
		return err;
	}
	for (ai = res; ai; ai = ai->ai_next)
		if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6)
			addrs_add(out, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(res);
	if (!out->n) {
		tf_log_error(S, "cannot resolve '%s': no IPv4 or IPv6 address",
			     host);
		return -EHOSTUNREACH;
	}
	return 0;
}

const char *tf__sess_addr_str(const struct tf_sess_addr *a, char *buf,
			      size_t len)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&a->sa;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&a->sa;
	const void *p = a->sa.ss_family == AF_INET6
				? (const void *)&s6->sin6_addr
				: (const void *)&s4->sin_addr;

	if (!inet_ntop(a->sa.ss_family, p, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}
