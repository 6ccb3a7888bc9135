/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_send.c - the tcp transport's send path, shared by the requester
 * and the responder: a frame goes straight to the socket when nothing is
 * queued before it, and what the socket does not take waits in the
 * connection's send queue until progress flushes it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "soft_tcp_int.h"

/* ---------------------------------------------------------------- send path */

/*
 * Flush the send queue as far as the socket takes it.  Returns 0, or
 * -errno when the socket failed (the caller tears the connection down).
 * Several frames go out in one sendmsg.  Lock: the connection's owner.
 */
int soft_tcp_flush(struct tcp_conn *c)
{
	struct iovec iov[64];
	struct msghdr msg = {.msg_iov = iov};
	struct tcp_txe *e;
	ssize_t n;

	while (c->txq) {
		size_t niov = 0;

		for (e = c->txq; e && niov < 64; e = e->next) {
			size_t skip = e->off, i;

			if (skip < e->hdr_len) {
				iov[niov].iov_base = e->hdr + skip;
				iov[niov++].iov_len = e->hdr_len - skip;
				skip = 0;
			} else {
				skip -= e->hdr_len;
			}
			for (i = 0; i < e->niov && niov < 64; i++) {
				if (skip >= e->iov[i].iov_len) {
					skip -= e->iov[i].iov_len;
					continue;
				}
				iov[niov].iov_base =
					(uint8_t *)e->iov[i].iov_base + skip;
				iov[niov++].iov_len = e->iov[i].iov_len - skip;
				skip = 0;
			}
			if (i < e->niov)
				break;
		}
		msg.msg_iovlen = niov;
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n > 0)
			c->last_act_ns = tf__now_ns();
		while (n > 0 && (e = c->txq)) {
			size_t left = e->len - e->off;

			if ((size_t)n < left) {
				e->off += n;
				break;
			}
			n -= left;
			c->txq = e->next;
			if (!e->req)
				c->tx_owned -= e->len;
			tf__free(e);
		}
		if (!c->txq)
			c->txq_tail = &c->txq;
	}
	return 0;
}

/*
 * Send one frame: header @hdr, payload @iov (@niov pieces, @plen bytes).
 * If nothing is queued before it, it goes straight to the socket; what does
 * not fit is queued.  @req: the payload is a WQE's memory, which stays valid
 * until the WQE completes, so it is referenced; otherwise (responses from
 * registered memory that may go away) it is copied.
 * Returns 0 or -ENOMEM; socket errors are left for progress to find
 * (EPOLLERR), so that submit never has to fail a QP.
 */
int soft_tcp_send_frame(struct tcp_conn *c, const uint8_t *hdr, uint32_t hlen,
			const struct iovec *iov, uint32_t niov, size_t plen,
			bool req)
{
	size_t total = hlen + plen, sent = 0, skip, i;
	struct tcp_txe *e;
	ssize_t n;

	if (!c->txq && c->state == TCP_UP && c->fd >= 0) {
		struct iovec v[1 + TCP_IOV_STACK];
		struct iovec *vp = v;
		struct msghdr msg = {0};

		if (niov > TCP_IOV_STACK) {
			vp = tf__malloc((1 + niov) * sizeof(*vp));
			if (!vp)
				return -ENOMEM;
		}
		vp[0].iov_base = (void *)hdr;
		vp[0].iov_len = hlen;
		if (niov)
			memcpy(vp + 1, iov, niov * sizeof(*iov));
		msg.msg_iov = vp;
		msg.msg_iovlen = 1 + niov;
		do {
			n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		} while (n < 0 && errno == EINTR);
		if (vp != v)
			tf__free(vp);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			/* The frame is lost, so the stream is: progress fails
			 * the connection (submit must not fail the QP). */
			c->broken = true;
			atomic_store_explicit(&c->tc->kick, true,
					      memory_order_release);
			return 0;
		}
		if (n > 0) {
			c->last_act_ns = tf__now_ns();
			sent = n;
		}
		if (sent == total)
			return 0;
	}

	/* Queue the unsent tail.  An owned payload is copied behind the
	 * iovec array, as one piece. */
	e = tf__malloc(sizeof(*e) + (req ? niov : 1) * sizeof(struct iovec) +
		       (req ? 0 : plen));
	if (!e)
		return -ENOMEM;
	e->next = NULL;
	e->len = total;
	e->off = sent;
	e->hdr_len = hlen;
	e->req = req;
	memcpy(e->hdr, hdr, hlen);
	if (req) {
		e->niov = niov;
		if (niov)
			memcpy(e->iov, iov, niov * sizeof(*iov));
	} else {
		uint8_t *dst = (uint8_t *)(e->iov + 1);

		e->niov = plen ? 1 : 0;
		e->iov[0].iov_base = dst;
		e->iov[0].iov_len = plen;
		/* Only the unsent part needs to be valid, but copying the
		 * whole payload keeps offsets simple; it is rare. */
		skip = 0;
		for (i = 0; i < niov; i++) {
			memcpy(dst + skip, iov[i].iov_base, iov[i].iov_len);
			skip += iov[i].iov_len;
		}
		c->tx_owned += total;
	}
	*c->txq_tail = e;
	c->txq_tail = &e->next;
	soft_tcp_update_ev(c);
	return 0;
}

int soft_tcp_send_simple(struct tcp_conn *c, const struct soft_tcp_hdr *h)
{
	uint8_t hdr[SOFT_TCP_HDR_MAX];
	int hl = soft_tcp_encode_hdr(h, hdr);

	return soft_tcp_send_frame(c, hdr, hl, NULL, 0, 0, false);
}

/* Send an ACK (status 0) or NAK for request @psn.  It acknowledges every
 * earlier request too, so a pending coalesced ACK is covered. */
int soft_tcp_send_ack(struct tcp_conn *c, uint32_t psn, uint8_t status)
{
	struct soft_tcp_hdr h = {
		.opcode = SOFT_TCP_OP_ACK, .psn = psn, .status = status};

	c->ack_pending = false;
	return soft_tcp_send_simple(c, &h);
}

/*
 * After a flush of the send queue: a connection that stopped serving
 * requests (throttled) resumes once half of its queue went out, and its
 * epoll interest follows the queue.  Every flush of an attached
 * connection ends here: a throttled connection reads nothing, so if a
 * flush emptied its queue without resuming it, no event would ever
 * resume it.  qp->lock held.
 */
void soft_tcp_flushed(struct tcp_conn *c)
{
	if (c->throttled && c->tx_owned <= TCP_TX_OWNED_MAX / 2) {
		c->throttled = false;
		tcp_set_work(c, true);
	}
	soft_tcp_update_ev(c);
}
