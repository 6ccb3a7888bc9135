/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_conn.c - the tcp transport's connections: the connection object
 * (its epoll interest, the work list, burial), set-up (the connector dials
 * and sends its HELLO; the acceptor matches an accepted socket to the QP
 * its HELLO names and adopts it) and teardown (detach from a QP in error,
 * fail, close).  The protocol is described in soft_tcp_int.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soft_tcp_int.h"

/* ---------------------------------------------------------------- helpers */

const char *soft_tcp_fmt_peer(const struct soft_peer_addr *pa, char *buf,
			      size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	inet_ntop(pa->family == 6 ? AF_INET6 : AF_INET, pa->ip, ip, sizeof(ip));
	snprintf(buf, len, pa->family == 6 ? "[%s]:%u" : "%s:%u", ip,
		 (unsigned)pa->port);
	return buf;
}

static void tcp_set_ev(struct tcp_conn *c, uint32_t ev)
{
	struct epoll_event e = {.events = ev, .data.ptr = c};

	if (c->fd < 0 || ev == c->ev)
		return;
	if (epoll_ctl(c->tc->epfd, c->ev ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd,
		      &e) < 0) {
		tf_log_error(SUB, "epoll_ctl(fd %d): %m", c->fd);
		return;
	}
	c->ev = ev;
}

/* The epoll interest a connection needs in its state. */
void soft_tcp_update_ev(struct tcp_conn *c)
{
	uint32_t ev = 0;

	if (c->fd < 0)
		return;
	if (c->state == TCP_CONNECTING)
		ev = EPOLLOUT;
	else if (!c->throttled)
		ev = EPOLLIN;
	if (c->txq)
		ev |= EPOLLOUT;
	tcp_set_ev(c, ev);
}

static void tcp_txq_free(struct tcp_conn *c)
{
	struct tcp_txe *e, *n;

	for (e = c->txq; e; e = n) {
		n = e->next;
		tf__free(e);
	}
	c->txq = NULL;
	c->txq_tail = &c->txq;
	c->tx_owned = 0;
}

/* Remove from the context's list and queue for freeing.  progress_lock. */
void soft_tcp_conn_bury(struct tcp_conn *c)
{
	struct soft_tcp *tc = c->tc;

	if (c->dead)
		return;
	if (c->fd >= 0) {
		/* Removing from epoll before close: the fd could be shared
		 * by a fork, and epoll tracks the open file, not the fd. */
		if (c->ev)
			epoll_ctl(tc->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
	if (c->state == TCP_PENDING && tc->n_pending)
		tc->n_pending--;
	tcp_set_work(c, false);
	if (c->prev)
		c->prev->next = c->next;
	else if (tc->conns == c)
		tc->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->dead = true;
	c->next = tc->grave;
	c->prev = NULL;
	tc->grave = c;
}

static void tcp_conn_free(struct tcp_conn *c)
{
	tcp_txq_free(c);
	tf__free(c->rx);
	tf__free(c->out);
	tf__free(c);
}

void soft_tcp_free_grave(struct soft_tcp *tc)
{
	struct tcp_conn *c;

	while ((c = tc->grave)) {
		tc->grave = c->next;
		tcp_conn_free(c);
	}
}

static struct tcp_conn *tcp_conn_new(struct soft_tcp *tc, enum tcp_state st)
{
	struct tcp_conn *c = tf__calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->tc = tc;
	c->state = st;
	c->fd = -1;
	c->txq_tail = &c->txq;
	c->rnr_delay_ns = TCP_RNR_MIN_NS;
	return c;
}

/* Insert in the context's list.  progress_lock. */
static void tcp_conn_link(struct tcp_conn *c)
{
	struct soft_tcp *tc = c->tc;

	c->prev = NULL;
	c->next = tc->conns;
	if (tc->conns)
		tc->conns->prev = c;
	tc->conns = c;
}

static void tcp_nodelay(int fd)
{
	int one = 1;

	/* Small frames (ACKs, 1 KiB writes) must leave at once. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		tf_log_warn(SUB, "setsockopt(TCP_NODELAY): %m");
}

/* ---------------------------------------------------------------- teardown */

/*
 * Close a connection whose send queue is empty: FIN after what the kernel
 * still holds, and the socket closed now, so that a destroyed QP does not
 * keep a descriptor until the peer reacts.  What the peer sent and nobody
 * will read is drained first, since closing over unread data would reset
 * the stream instead.  progress_lock.
 */
void soft_tcp_close_soft(struct tcp_conn *c)
{
	char buf[4096];
	int i;

	if (c->fd >= 0) {
		if (!c->shut)
			shutdown(c->fd, SHUT_WR);
		c->shut = true;
		for (i = 0; i < 256; i++) {
			ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n <= 0 && !(n < 0 && errno == EINTR))
				break;
		}
	}
	soft_tcp_conn_bury(c);
}

/*
 * Detach @c from its QP (which is, or is about to be, in error): the engine's
 * WQEs are forgotten, queued requests are dropped (their memory belongs to
 * the user again once flushed), queued responses (a NAK, READ data) may
 * still drain while the connection lingers.  progress_lock and qp->lock.
 */
void soft_tcp_detach(struct tcp_conn *c)
{
	struct soft_qp *qp = c->qp;
	struct tcp_txe *e, *n, **tail;
	bool abort_now = false;

	if (qp) {
		qp->tp_priv = NULL;
		c->qp = NULL;
	}
	c->out_cnt = c->out_sent = 0;
	/* A request frame that is half on the wire cannot be completed
	 * without the user's memory: then the stream is cut at once. */
	if (c->txq && c->txq->req && c->txq->off)
		abort_now = true;
	tail = &c->txq;
	for (e = c->txq; e; e = n) {
		n = e->next;
		if (e->req) {
			tf__free(e);
			continue;
		}
		*tail = e;
		tail = &e->next;
	}
	*tail = NULL;
	c->txq_tail = tail;
	if (abort_now || c->fd < 0 || c->state == TCP_CONNECTING ||
	    c->state == TCP_WAITING) {
		soft_tcp_conn_bury(c);
		return;
	}
	if (!c->txq) {
		soft_tcp_close_soft(c);
		return;
	}
	/* Responses (a NAK, READ data) still queued: drain them first. */
	c->state = TCP_LINGER;
	c->throttled = false;
	c->deadline_ns = tf__now_ns() + TCP_LINGER_NS;
	soft_tcp_update_ev(c);
}

/*
 * The connection failed (EOF, reset, malformed frame, timeout): move the QP
 * to error; its oldest outstanding send WQE completes with @why, the rest
 * are flushed.  progress_lock and qp->lock.
 */
void soft_tcp_fail(struct tcp_conn *c, enum tf_wc_status why)
{
	struct soft_qp *qp = c->qp;

	if (qp) {
		/* The engine calls qp_fini, which only marks the connection
		 * (we are inside progress); the detach is done here. */
		soft_engine_qp_error(qp, why);
		if (c->qp)
			soft_tcp_detach(c);
	}
	soft_tcp_conn_bury(c);
}

/*
 * The peer closed the stream cleanly while this QP had no work in flight
 * and no partial frame.  As with RC hardware, where a peer's death is seen
 * only by the next request that gets no answer, the QP stays usable until
 * it sends: then that WQE fails with RETRY_EXC (tcp_scan).  Its posted
 * receives are not flushed, so a peer that merely went to error does not
 * disturb this side.  progress_lock and qp->lock.
 */
void soft_tcp_lose(struct tcp_conn *c)
{
	if (c->ev)
		epoll_ctl(c->tc->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->ev = 0;
	c->state = TCP_LOST;
	tcp_txq_free(c);
	tcp_set_work(c, false);
}

/* ---------------------------------------------------------------- set-up */

/* The connector's socket is connected: send HELLO and what was queued. */
int soft_tcp_connected(struct tcp_conn *c)
{
	struct soft_qp *qp = c->qp;
	struct soft_tcp_hdr h = {.opcode = SOFT_TCP_OP_HELLO,
				 .dst_qpn = qp->peer.qpn,
				 .src_qpn = qp->base.qpn,
				 .dst_nonce = qp->peer.ctx_nonce,
				 .src_nonce = qp->ctx->nonce};
	int ret;

	c->state = TCP_UP;
	c->last_act_ns = tf__now_ns();
	ret = soft_tcp_send_simple(c, &h);
	if (!ret)
		ret = soft_tcp_push_requests(c);
	soft_tcp_update_ev(c);
	return ret;
}

/* Give the socket (and what was read from it) of pending connection @p
 * to the QP's waiting connection @w.  progress_lock and w's qp->lock. */
static void tcp_adopt(struct tcp_conn *w, struct tcp_conn *p)
{
	uint8_t *rx = w->rx;
	size_t cap = w->rx_cap;
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = w};

	w->fd = p->fd;
	w->ev = p->ev;
	p->fd = -1;
	p->ev = 0;
	w->rx = p->rx;
	w->rx_cap = p->rx_cap;
	w->rx_off = p->rx_off;
	w->rx_len = p->rx_len;
	p->rx = rx;
	p->rx_cap = cap;
	p->rx_len = p->rx_off = 0;
	if (w->ev && epoll_ctl(w->tc->epfd, EPOLL_CTL_MOD, w->fd, &e) == 0)
		w->ev = EPOLLIN;
	w->state = TCP_UP;
	w->last_act_ns = tf__now_ns();
	soft_tcp_conn_bury(p);
	/* Frames that came behind the HELLO are already buffered. */
	if (w->rx_len)
		tcp_set_work(w, true);
}

/* Check the HELLO of pending @p against the waiting connection @w.  */
static bool tcp_hello_matches(const struct tcp_conn *p,
			      const struct tcp_conn *w)
{
	const struct soft_qp *qp = w->qp;

	return p->hello.src_qpn == qp->peer.qpn &&
	       p->hello.src_nonce == qp->peer.ctx_nonce;
}

/*
 * A pending (accepted) socket: read up to its HELLO and match it to a
 * QP.  Returns the number of events handled.  progress_lock held.
 */
int soft_tcp_pending_service(struct tcp_conn *p, uint32_t events)
{
	struct soft_tcp *tc = p->tc;
	struct soft_ctx *ctx = tc->ctx;
	struct tcp_conn *w;
	ssize_t n;
	int r;

	if (!p->have_hello) {
		n = soft_tcp_rx_read(p);
		if (n < 0) {
			soft_tcp_conn_bury(p);
			return 1;
		}
		r = soft_tcp_parse_hdr(p->rx + p->rx_off, p->rx_len,
				       tc->max_msg, &p->hello);
		if (r == 0)
			return n > 0;
		if (r < 0 || p->hello.opcode != SOFT_TCP_OP_HELLO) {
			tf_log_error(SUB,
				     "connection without a valid HELLO "
				     "(%s), closing it",
				     r < 0 ? tf_strerror(r) : "other frame");
			soft_tcp_conn_bury(p);
			return 1;
		}
		p->rx_off += r;
		p->rx_len -= r;
		if (p->hello.dst_nonce != ctx->nonce) {
			tf_log_error(SUB,
				     "HELLO for another context (nonce "
				     "%016llx), closing the connection",
				     (unsigned long long)p->hello.dst_nonce);
			soft_tcp_conn_bury(p);
			return 1;
		}
		p->have_hello = true;
	} else if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
		/* The connector gave up before our QP was connected. */
		soft_tcp_conn_bury(p);
		return 1;
	}
	for (w = tc->conns; w; w = w->next) {
		if (w == p || !w->qp || w->qp->base.qpn != p->hello.dst_qpn)
			continue;
		if (w->state != TCP_WAITING || !tcp_hello_matches(p, w)) {
			tf_log_error(SUB,
				     "HELLO for qp %u from qp %u: not "
				     "the peer it waits for, closing it",
				     p->hello.dst_qpn, p->hello.src_qpn);
			soft_tcp_conn_bury(p);
			return 1;
		}
		soft_qp_lock(w->qp);
		if (w->qp && !w->detach) {
			struct soft_qp *qp = w->qp;

			tcp_adopt(w, p);
			if (soft_tcp_push_requests(w))
				soft_tcp_fail(w, TF_WC_GENERAL_ERR);
			soft_qp_unlock(qp);
		} else {
			soft_qp_unlock(w->qp);
		}
		return 1;
	}
	/* No QP is waiting: either it does not exist, or tf_qp_connect has
	 * not been called yet on this side (then it will find us).  A QP
	 * that no longer exists is the peer's to notice (its QP fails), and
	 * a normal event: this side destroyed it while the peer still held
	 * its end (a session server that dropped a kept connection). */
	if (!soft_ctx_qp(ctx, p->hello.dst_qpn)) {
		tf_log_info(SUB,
			    "HELLO for qp %u, which does not exist, "
			    "closing the connection",
			    p->hello.dst_qpn);
		soft_tcp_conn_bury(p);
		return 1;
	}
	/* Stop reading until the QP connects (its data stays in the
	 * socket); the connect call adopts the socket. */
	tcp_set_ev(p, EPOLLRDHUP);
	return 1;
}

int soft_tcp_accept(struct soft_tcp *tc)
{
	struct tcp_conn *c;
	int fd, n = 0;

	for (;;) {
		fd = accept4(tc->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != ECONNABORTED)
				tf_log_warn(SUB, "accept: %m");
			return n;
		}
		n++;
		if (tc->n_pending >= TCP_MAX_PENDING) {
			tf_log_warn(SUB,
				    "%u connections wait for their "
				    "HELLO; refusing one more",
				    tc->n_pending);
			close(fd);
			continue;
		}
		c = tcp_conn_new(tc, TCP_PENDING);
		if (!c) {
			close(fd);
			continue;
		}
		tcp_nodelay(fd);
		c->fd = fd;
		c->deadline_ns = tf__now_ns() + TCP_PENDING_NS;
		tcp_conn_link(c);
		tc->n_pending++;
		tcp_set_ev(c, EPOLLIN);
	}
}

/* Open the connector's socket; 0 or -errno.  progress_lock, qp->lock. */
static int tcp_dial(struct tcp_conn *c)
{
	struct soft_tcp *tc = c->tc;
	struct soft_qp *qp = c->qp;
	struct sockaddr_storage ss = {0}, ls = {0};
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	int fam = qp->peer.family == 6 ? AF_INET6 : AF_INET, one = 1;
	socklen_t sl;
	char pb[64];

	if (fam == AF_INET) {
		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, qp->peer.ip, 4);
		sin->sin_port = htons(qp->peer.port);
		sl = sizeof(*sin);
	} else {
		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, qp->peer.ip, 16);
		sin6->sin6_port = htons(qp->peer.port);
		sl = sizeof(*sin6);
	}
	c->fd = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		tf_log_error(SUB, "socket: %m");
		return -errno;
	}
	tcp_nodelay(c->fd);
	if (fam == tc->family) {
		/* Leave from the configured address, so that the peer sees
		 * the one we advertise (and the right interface is used);
		 * the port is chosen at connect time. */
		if (fam == AF_INET) {
			struct sockaddr_in *l = (struct sockaddr_in *)&ls;

			l->sin_family = AF_INET;
			memcpy(&l->sin_addr, tc->ip, 4);
		} else {
			struct sockaddr_in6 *l = (struct sockaddr_in6 *)&ls;

			l->sin6_family = AF_INET6;
			memcpy(&l->sin6_addr, tc->ip, 16);
		}
		setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
			   sizeof(one));
		if (bind(c->fd, (struct sockaddr *)&ls, sl) < 0)
			tf_log_warn(SUB, "bind to the local address: %m");
	}
	if (connect(c->fd, (struct sockaddr *)&ss, sl) < 0 &&
	    errno != EINPROGRESS) {
		int err = errno;

		tf_log_error(SUB, "qp %u: connect to %s: %s", qp->base.qpn,
			     soft_tcp_fmt_peer(&qp->peer, pb, sizeof(pb)),
			     strerror(err));
		return -err;
	}
	c->state = TCP_CONNECTING;
	soft_tcp_update_ev(c);
	return 0;
}

int soft_tcp_connect(struct soft_qp *qp)
{
	struct soft_ctx *ctx = qp->ctx;
	struct soft_tcp *tc = ctx->tcp_priv;
	const struct soft_peer_addr *pa = &qp->peer;
	struct tcp_conn *c, *p;
	bool own_plock = soft_tcp_in_progress != tc;
	int ret;

	if (!tc) {
		tf_log_error(SUB, "qp %u: tcp transport not initialized",
			     qp->base.qpn);
		return -ENOTCONN;
	}
	if (!(pa->flags & SOFT_ADDR_F_TCP) ||
	    (pa->family != 4 && pa->family != 6) || !pa->port) {
		tf_log_error(SUB, "qp %u: peer address has no tcp part",
			     qp->base.qpn);
		return -TF_EPEER;
	}
	if (pa->ctx_nonce == ctx->nonce && pa->qpn == qp->base.qpn) {
		tf_log_error(SUB,
			     "qp %u: connecting a QP to itself is not "
			     "supported over tcp",
			     qp->base.qpn);
		return -TF_EPEER;
	}
	c = tcp_conn_new(tc, TCP_WAITING);
	if (!c)
		return -ENOMEM;
	c->out_size = qp->sq_size ? qp->sq_size : 1;
	c->out = tf__calloc(c->out_size, sizeof(*c->out));
	if (!c->out) {
		ret = -ENOMEM;
		goto err_free;
	}
	c->qp = qp;
	c->last_act_ns = tf__now_ns();

	/* progress_lock before qp->lock, as in progress. */
	if (own_plock)
		pthread_mutex_lock(&ctx->progress_lock);
	soft_qp_lock(qp);
	if (soft_tcp_is_connector(ctx->nonce, qp->base.qpn, pa->ctx_nonce,
				  pa->qpn)) {
		ret = tcp_dial(c);
		if (ret) {
			ret = -TF_EPEER;
			goto err_unlock;
		}
	} else {
		/* A HELLO may already be here. */
		for (p = tc->conns; p; p = p->next) {
			if (p->state != TCP_PENDING || !p->have_hello ||
			    p->hello.dst_qpn != qp->base.qpn)
				continue;
			if (!tcp_hello_matches(p, c)) {
				tf_log_error(SUB,
					     "HELLO for qp %u from qp %u: "
					     "not the peer it waits for, "
					     "closing it",
					     p->hello.dst_qpn,
					     p->hello.src_qpn);
				soft_tcp_conn_bury(p);
				continue;
			}
			tcp_adopt(c, p);
			break;
		}
	}
	tcp_conn_link(c);
	qp->tp_priv = c;
	soft_qp_unlock(qp);
	if (own_plock) {
		soft_tcp_free_grave(tc);
		pthread_mutex_unlock(&ctx->progress_lock);
	}
	return 0;

err_unlock:
	if (c->fd >= 0) {
		if (c->ev)
			epoll_ctl(tc->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	soft_qp_unlock(qp);
	if (own_plock)
		pthread_mutex_unlock(&ctx->progress_lock);
err_free:
	tcp_conn_free(c);
	return ret;
}
