/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_progress.c - the tcp transport's progress: one pass polls the
 * epoll set, services each connection (connect completion, send queue,
 * receive: frames are decoded and dispatched to the requester or the
 * responder), then the work list, lingering and pending sockets, and the
 * periodic scan for timeouts and QPs that went to error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

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
