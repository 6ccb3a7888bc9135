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
	return c;
}

int tf__conn_make_qp(struct tf_node *node, struct tf_conn *c,
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
	tf__keys_free(c->keys);
	tf__transcript_free(c->ts);
	tf__sess_free_mem(c->spare);
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

bool tf__conn_late_close(struct tf_conn *c, unsigned ch,
			 const struct tf_wire_rx *rx)
{
	if (!(c->close_due & (1u << ch)) || rx->h.op != TF_WIRE_CLOSE)
		return false;
	c->close_due &= ~(1u << ch);
	return true;
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

int tf__sess_resolve(const char *host, uint16_t port,
		     struct sockaddr_storage *sa, socklen_t *len_p)
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
