/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp.c - the soft provider's "tcp" transport: one TCP connection per
 * QP, for peers on other hosts (or on this one).  How it works is described
 * at the top of soft_tcp_int.h, with what its parts share.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "soft_tcp_int.h"

/* Set while this thread runs soft_tcp_progress for a context, so that a
 * qp_fini reached from inside progress (through the engine) knows. */
__thread struct soft_tcp *soft_tcp_in_progress;

/* ---------------------------------------------------------------- receive */

/* Make room for @need contiguous bytes of frame in the receive buffer. */
static int tcp_rx_reserve(struct tcp_conn *c, size_t need)
{
	size_t cap;
	uint8_t *nb;

	if (c->rx_off && (c->rx_off + c->rx_len == c->rx_cap ||
			  c->rx_off + need > c->rx_cap)) {
		memmove(c->rx, c->rx + c->rx_off, c->rx_len);
		c->rx_off = 0;
	}
	if (need > 4 * TCP_RXBUF_MIN)
		c->rx_big_ns = tf__now_ns();
	if (need <= c->rx_cap)
		return 0;
	cap = c->rx_cap ? c->rx_cap : TCP_RXBUF_MIN;
	while (cap < need)
		cap *= 2;
	nb = tf__realloc(c->rx, cap);
	if (!nb)
		return -ENOMEM;
	c->rx = nb;
	c->rx_cap = cap;
	return 0;
}

/* Read what the socket has.  Returns bytes read, 0 if none now, or
 * -errno (-ECONNRESET for EOF). */
ssize_t soft_tcp_rx_read(struct tcp_conn *c)
{
	ssize_t n;

	if (c->rx_off + c->rx_len == c->rx_cap) {
		int r = tcp_rx_reserve(c, c->rx_len + (c->rx_len < TCP_RXBUF_MIN
							       ? TCP_RXBUF_MIN
							       : 4096));

		if (r)
			return r;
	}
	do {
		n = recv(c->fd, c->rx + c->rx_off + c->rx_len,
			 c->rx_cap - c->rx_off - c->rx_len, MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	if (n > 0) {
		c->rx_len += n;
		c->last_act_ns = tf__now_ns();
		return n;
	}
	if (n == 0)
		return -ECONNRESET;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	return -errno;
}

/*
 * Decode and handle the complete frames in the receive buffer of an UP
 * connection.  Returns 0, or 1 when the connection was detached or
 * buried, -1 on a protocol error (already logged).  progress_lock and
 * qp->lock held.
 */
static int tcp_rx_frames(struct tcp_conn *c, int *events)
{
	struct soft_tcp_hdr h;
	int r;

	while (c->rx_len && !tcp_gone(c)) {
		r = soft_tcp_parse_hdr(c->rx + c->rx_off, c->rx_len,
				       c->tc->max_msg, &h);
		if (r < 0) {
			tf_log_error(SUB,
				     "qp %u: malformed frame (%s), "
				     "closing the connection",
				     c->qp->base.qpn, tf_strerror(r));
			return -1;
		}
		if (r == 0 || c->rx_len < (size_t)r + h.size) {
			if (r && tcp_rx_reserve(c, (size_t)r + h.size))
				return -1;
			break;
		}
		if (h.opcode == SOFT_TCP_OP_HELLO) {
			tf_log_error(SUB,
				     "qp %u: HELLO on an established "
				     "connection",
				     c->qp->base.qpn);
			return -1;
		}
		if (h.opcode == SOFT_TCP_OP_ACK ||
		    h.opcode == SOFT_TCP_OP_READ_RESP ||
		    h.opcode == SOFT_TCP_OP_ATOMIC_RESP) {
			r = soft_tcp_response(c, &h, c->rx + c->rx_off + r);
		} else {
			if (c->tx_owned > TCP_TX_OWNED_MAX) {
				/* The peer does not read our responses:
				 * stop serving until it does. */
				c->throttled = true;
				soft_tcp_update_ev(c);
				break;
			}
			r = soft_tcp_serve(c, &h, c->rx + c->rx_off + r);
		}
		if (r < 0)
			return -1;
		c->rx_off += h.hdr_size + h.size;
		c->rx_len -= h.hdr_size + h.size;
		(*events)++;
		if (r > 0)
			return 1;
	}
	if (!c->rx_len)
		c->rx_off = 0;
	return 0;
}

/* ---------------------------------------------------------------- progress */

/* A lingering connection: send the queued responses (bounded by
 * TCP_LINGER_NS), then close it. */
static int tcp_linger_service(struct tcp_conn *c)
{
	char buf[4096];

	if (c->txq && soft_tcp_flush(c)) {
		soft_tcp_conn_bury(c);
		return 1;
	}
	if (!c->txq) {
		soft_tcp_close_soft(c);
		return 1;
	}
	/* Keep reading meanwhile: a peer blocked on its own full send
	 * buffer would never read ours.  A peer that closed will not read
	 * them either. */
	for (;;) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
			soft_tcp_conn_bury(c);
			return 1;
		}
		break;
	}
	soft_tcp_update_ev(c);
	return 1;
}

/*
 * Service a connection attached to a QP (events from epoll, or 0 when it
 * is on the work list).  progress_lock held; takes qp->lock.
 */
static int tcp_qp_service(struct tcp_conn *c, uint32_t events)
{
	struct soft_qp *qp = c->qp;
	int handled = 0, r, i;
	ssize_t n;

	soft_qp_lock(qp);
	if (c->detach || c->qp != qp) {
		if (c->qp == qp)
			soft_tcp_detach(c);
		soft_qp_unlock(qp);
		return 1;
	}
	if (qp->base.state < TF_QPS_RTR) {
		/* tf_qp_connect has not finished moving the QP to RTS: the
		 * engine would refuse inbound work until it has. */
		tcp_set_work(c, true);
		soft_qp_unlock(qp);
		return 0;
	}
	tcp_set_work(c, false);

	if (c->state == TCP_CONNECTING) {
		int err = 0;
		socklen_t el = sizeof(err);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			goto out;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			err = errno;
		if (err) {
			char pb[64];

			tf_log_error(
				SUB, "qp %u: connect to %s: %s", qp->base.qpn,
				soft_tcp_fmt_peer(&qp->peer, pb, sizeof(pb)),
				strerror(err));
			soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
			goto out;
		}
		if (soft_tcp_connected(c)) {
			soft_tcp_fail(c, TF_WC_GENERAL_ERR);
			goto out;
		}
		handled++;
	}
	if (c->state != TCP_UP)
		goto out;

	if (c->txq) {
		r = soft_tcp_flush(c);
		if (r) {
			tf_log_error(SUB, "qp %u: send: %s", qp->base.qpn,
				     strerror(-r));
			soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
			goto out;
		}
		soft_tcp_flushed(c);
	}
	if (c->rnr_due_ns && tf__now_ns() >= c->rnr_due_ns) {
		c->rnr_due_ns = 0;
		if (soft_tcp_push_requests(c)) {
			soft_tcp_fail(c, TF_WC_GENERAL_ERR);
			goto out;
		}
		handled++;
	}
	if (c->rnr_due_ns)
		tcp_set_work(c, true);

	/* Frames already buffered first, then the socket; a full buffer
	 * means more may be waiting, so read again (bounded). */
	r = tcp_rx_frames(c, &handled);
	for (i = 0; r == 0 && !c->throttled && i < 4 &&
		    (events & (EPOLLIN | EPOLLHUP | EPOLLERR));
	     i++) {
		n = soft_tcp_rx_read(c);
		if (n < 0) {
			if (n == -ECONNRESET)
				tf_log_info(SUB,
					    "qp %u: peer closed the "
					    "connection",
					    qp->base.qpn);
			else
				tf_log_error(SUB, "qp %u: recv: %s",
					     qp->base.qpn, strerror((int)-n));
			/* Process what came before the end first. */
			r = tcp_rx_frames(c, &handled);
			if (r)
				break;
			if (!c->out_cnt && !c->rx_len && !c->txq &&
			    !c->rnr_due_ns)
				soft_tcp_lose(c);
			else
				soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
			break;
		}
		if (n == 0)
			break;
		r = tcp_rx_frames(c, &handled);
		if (c->rx_off + c->rx_len < c->rx_cap)
			break;
	}
	if (r < 0) {
		soft_tcp_fail(c, TF_WC_REM_OP_ERR);
		goto out;
	}
	if (!tcp_gone(c) && c->ack_pending) {
		/* One ACK for everything read in this pass. */
		soft_tcp_send_ack(c, c->ack_psn, SOFT_TCP_ST_OK);
		/* A socket error is left for the next pass (EPOLLERR). */
		if (c->txq && c->state == TCP_UP) {
			soft_tcp_flush(c);
			soft_tcp_flushed(c);
		}
	}
out:
	if (c->detach && c->qp == qp)
		soft_tcp_detach(c);
	soft_qp_unlock(qp);
	return handled;
}

/* Give back a receive buffer grown for large frames once none came for a
 * second: a new one per large frame would be faulted in every time. */
static void tcp_rx_trim(struct tcp_conn *c, uint64_t now)
{
	uint8_t *nb;

	/* Signed: @now is the time of the pass's poll, and a frame read
	 * since may have set rx_big_ns after it. */
	if (c->rx_len || c->rx_cap <= 4 * TCP_RXBUF_MIN ||
	    (int64_t)(now - c->rx_big_ns) < 1000000000LL)
		return;
	nb = tf__realloc(c->rx, TCP_RXBUF_MIN);
	if (nb) {
		c->rx = nb;
		c->rx_cap = TCP_RXBUF_MIN;
		c->rx_off = 0;
	}
}

/* Transport timeouts, expired pending/lingering sockets, QPs that went to
 * error outside progress, as of @now: the time of the pass's poll, so
 * that every answer that had arrived by then was read.  progress_lock
 * held. */
static void tcp_scan(struct soft_tcp *tc, uint64_t now)
{
	struct tcp_conn *c, *n;

	for (c = tc->conns; c; c = n) {
		struct soft_qp *qp = c->qp;

		n = c->next;
		if (!qp) {
			if (now >= c->deadline_ns && (c->state == TCP_PENDING ||
						      c->state == TCP_LINGER)) {
				if (c->state == TCP_PENDING)
					tf_log_warn(SUB, "connection did not "
							 "match a QP in time, "
							 "closing it");
				soft_tcp_conn_bury(c);
			}
			continue;
		}
		soft_qp_lock(qp);
		tcp_rx_trim(c, now);
		if (c->detach || c->qp != qp) {
			if (c->qp == qp)
				soft_tcp_detach(c);
		} else if (c->broken) {
			tf_log_error(SUB,
				     "qp %u: send failed, closing the "
				     "connection",
				     qp->base.qpn);
			soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
		} else if (c->state == TCP_LOST && c->out_cnt) {
			tf_log_info(SUB,
				    "qp %u: work posted after the peer "
				    "closed the connection",
				    qp->base.qpn);
			soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
		} else if (c->out_cnt && qp->base.timeout_ms &&
			   /* Only a requester times out: queued responses
			    * alone are bounded (throttle) and, as on RC, a
			    * responder waits for its peer. */
			   /* Signed: submit may have set last_act_ns after
			    * @now was read, while we waited for qp->lock. */
			   (int64_t)(now - c->last_act_ns) >
				   (int64_t)qp->base.timeout_ms * 1000000) {
			tf_log_error(SUB,
				     "qp %u: no progress for %u ms, "
				     "failing it (state %d, %u outstanding, "
				     "%u sent, %s queued, %zu bytes buffered, "
				     "events %#x)",
				     qp->base.qpn, qp->base.timeout_ms,
				     (int)c->state, c->out_cnt, c->out_sent,
				     c->txq ? "frames" : "nothing", c->rx_len,
				     c->ev);
			soft_tcp_fail(c, TF_WC_RETRY_EXC_ERR);
		}
		soft_qp_unlock(qp);
	}
}

int soft_tcp_progress(struct soft_ctx *ctx)
{
	struct soft_tcp *tc = ctx->tcp_priv;
	struct epoll_event ev[TCP_EVENTS];
	struct tcp_conn *c, *n;
	int nev, i, handled = 0;
	uint64_t now, t_poll;

	if (!tc)
		return 0;
	soft_tcp_in_progress = tc;
	/* Transport timeouts are judged at the time of this poll, not at the
	 * end of the pass: what arrives after the poll is read by the next
	 * pass only, and a pass can be long (this thread descheduled on a
	 * loaded machine, or waiting for a QP's lock).  Judged at its end,
	 * a requester whose answer came meanwhile was failed with the answer
	 * in its socket. */
	t_poll = tf__now_ns();
	nev = epoll_wait(tc->epfd, ev, TCP_EVENTS, 0);
	for (i = 0; i < nev; i++) {
		if (ev[i].data.ptr == &tc->listen_tag) {
			handled += soft_tcp_accept(tc);
			continue;
		}
		c = ev[i].data.ptr;
		if (c->dead)
			continue;
		if (c->qp)
			handled += tcp_qp_service(c, ev[i].events);
		else if (c->state == TCP_PENDING)
			handled += soft_tcp_pending_service(c, ev[i].events);
		else if (c->state == TCP_LINGER)
			handled += tcp_linger_service(c);
	}
	if (tc->n_work) {
		for (c = tc->conns; c; c = n) {
			n = c->next;
			if (c->work && c->qp)
				handled += tcp_qp_service(c, 0);
			else if (c->work)
				tcp_set_work(c, false);
		}
	}
	now = tf__now_ns();
	if (atomic_exchange_explicit(&tc->kick, false, memory_order_acquire) ||
	    now >= tc->next_scan_ns) {
		tcp_scan(tc, t_poll);
		tc->next_scan_ns = now + TCP_SCAN_NS;
	}
	soft_tcp_free_grave(tc);
	soft_tcp_in_progress = NULL;
	return handled;
}

/* ---------------------------------------------------------------- ops */

static int tcp_ctx_init(struct soft_ctx *ctx)
{
	const struct tf_config *cfg = &ctx->base.cfg;
	struct soft_tcp *tc;
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	socklen_t sl;
	struct epoll_event e;
	int one = 1, ret;

	if (ctx->tcp_priv)
		return 0;
	if (cfg->soft_tcp_port > 65535) {
		tf_log_error(SUB, "TOLLFREE_SOFT_TCP_PORT=%llu is not a port",
			     (unsigned long long)cfg->soft_tcp_port);
		return -EINVAL;
	}
	tc = tf__calloc(1, sizeof(*tc));
	if (!tc)
		return -ENOMEM;
	tc->ctx = ctx;
	tc->epfd = tc->lfd = -1;
	/* The frame size field is 32 bits; "inf" means that much. */
	tc->max_msg = cfg->soft_max_msg;
	if (tc->max_msg > UINT32_MAX - SOFT_TCP_HDR_MAX)
		tc->max_msg = UINT32_MAX - SOFT_TCP_HDR_MAX;

	if (inet_pton(AF_INET, cfg->soft_tcp_addr, &sin->sin_addr) == 1) {
		tc->family = AF_INET;
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)cfg->soft_tcp_port);
		sl = sizeof(*sin);
		ret = sin->sin_addr.s_addr == htonl(INADDR_ANY);
	} else if (inet_pton(AF_INET6, cfg->soft_tcp_addr, &sin6->sin6_addr) ==
		   1) {
		tc->family = AF_INET6;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)cfg->soft_tcp_port);
		sl = sizeof(*sin6);
		ret = IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr);
	} else {
		tf_log_error(SUB,
			     "TOLLFREE_SOFT_TCP_ADDR=\"%s\" is not an "
			     "IPv4 or IPv6 address",
			     cfg->soft_tcp_addr);
		ret = -EINVAL;
		goto err_free;
	}
	if (ret) {
		/* The address is advertised to peers: it must be one. */
		tf_log_error(SUB,
			     "TOLLFREE_SOFT_TCP_ADDR=%s: a wildcard "
			     "address cannot be advertised to peers",
			     cfg->soft_tcp_addr);
		ret = -EINVAL;
		goto err_free;
	}

	tc->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (tc->epfd < 0) {
		ret = -errno;
		tf_log_error(SUB, "epoll_create1: %m");
		goto err_free;
	}
	tc->lfd = socket(tc->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			 0);
	if (tc->lfd < 0) {
		ret = -errno;
		tf_log_error(SUB, "socket: %m");
		goto err_epoll;
	}
	setsockopt(tc->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(tc->lfd, (struct sockaddr *)&ss, sl) < 0 ||
	    listen(tc->lfd, SOMAXCONN) < 0) {
		ret = -errno;
		tf_log_error(SUB, "listen on %s port %llu: %m",
			     cfg->soft_tcp_addr,
			     (unsigned long long)cfg->soft_tcp_port);
		goto err_sock;
	}
	if (getsockname(tc->lfd, (struct sockaddr *)&ss, &sl) < 0) {
		ret = -errno;
		tf_log_error(SUB, "getsockname: %m");
		goto err_sock;
	}
	if (tc->family == AF_INET) {
		memcpy(tc->ip, &sin->sin_addr, 4);
		tc->port = ntohs(sin->sin_port);
	} else {
		memcpy(tc->ip, &sin6->sin6_addr, 16);
		tc->port = ntohs(sin6->sin6_port);
	}
	e.events = EPOLLIN;
	e.data.ptr = &tc->listen_tag;
	if (epoll_ctl(tc->epfd, EPOLL_CTL_ADD, tc->lfd, &e) < 0) {
		ret = -errno;
		tf_log_error(SUB, "epoll_ctl(listener): %m");
		goto err_sock;
	}
	tf_log_debug(SUB, "listening on %s port %u", cfg->soft_tcp_addr,
		     tc->port);
	ctx->tcp_priv = tc;
	return 0;

err_sock:
	close(tc->lfd);
err_epoll:
	close(tc->epfd);
err_free:
	tf__free(tc);
	return ret;
}

static void tcp_ctx_fini(struct soft_ctx *ctx)
{
	struct soft_tcp *tc = ctx->tcp_priv;
	struct tcp_conn *c;

	if (!tc)
		return;
	/* Every QP is gone: what is left are lingering and pending
	 * sockets. */
	while ((c = tc->conns)) {
		if (c->qp)
			c->qp->tp_priv = NULL;
		soft_tcp_conn_bury(c);
	}
	soft_tcp_free_grave(tc);
	close(tc->lfd);
	close(tc->epfd);
	tf__free(tc);
	ctx->tcp_priv = NULL;
}

static int tcp_qp_addr(struct soft_qp *qp, struct soft_peer_addr *me)
{
	struct soft_tcp *tc = qp->ctx->tcp_priv;

	if (!tc)
		return -ENOTCONN;
	me->family = tc->family == AF_INET6 ? 6 : 4;
	memset(me->ip, 0, sizeof(me->ip));
	memcpy(me->ip, tc->ip, tc->family == AF_INET6 ? 16 : 4);
	me->port = tc->port;
	return 0;
}

size_t soft_tcp_tx_queued(struct soft_qp *qp)
{
	struct tcp_conn *c;
	size_t n = 0;

	/* The connection and its tx_owned change only under qp->lock. */
	soft_qp_lock(qp);
	c = qp->tp_priv;
	if (c)
		n = c->tx_owned;
	soft_qp_unlock(qp);
	return n;
}

static void tcp_qp_fini(struct soft_qp *qp)
{
	struct tcp_conn *c = qp->tp_priv;
	struct soft_ctx *ctx = qp->ctx;
	struct soft_tcp *tc = ctx->tcp_priv;
	bool own_plock;

	if (!c || !tc)
		return;
	if (qp->in_list) {
		/* Went to error, qp->lock held: progress may run in another
		 * thread, so only mark; the socket is closed there (or at
		 * destroy). */
		c->detach = true;
		atomic_store_explicit(&tc->kick, true, memory_order_release);
		return;
	}
	/* Destroy: no qp->lock, and the QP is out of ctx->qps.  Progress
	 * may still hold the connection (it reaches it through epoll, not
	 * through ctx->qps): wait for it to finish its pass. */
	own_plock = soft_tcp_in_progress != tc;
	if (own_plock)
		pthread_mutex_lock(&ctx->progress_lock);
	if (c->qp)
		soft_tcp_detach(c);
	qp->tp_priv = NULL;
	if (own_plock) {
		soft_tcp_free_grave(tc);
		pthread_mutex_unlock(&ctx->progress_lock);
	}
}

int soft_tcp_event_fd(struct soft_ctx *ctx)
{
	struct soft_tcp *tc = ctx->tcp_priv;

	return tc ? tc->epfd : -1;
}

const struct soft_transport_ops soft_tcp_transport = {
	.name = "tcp",
	.ctx_init = tcp_ctx_init,
	.ctx_fini = tcp_ctx_fini,
	.qp_addr = tcp_qp_addr,
	.connect = soft_tcp_connect,
	.submit = soft_tcp_submit,
	.progress = soft_tcp_progress,
	.qp_fini = tcp_qp_fini,
	.wait_fd = soft_tcp_event_fd,
};
