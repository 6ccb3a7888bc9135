/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - the control channel of a kept connection: a second RC
 * QP, made and connected with the connection's first session, that
 * carries the control messages (OPEN, ACCEPT/REJECT, EXPOSE, CLOSE) of
 * every later session on that connection as SEND/RECV.
 *
 * Why a QP of its own: the session's data QP belongs to the application,
 * whose receives must never be consumed by the library's messages, and
 * whose completions must never be mixed with ours.  The control QP
 * accepts no remote access (its access flags are 0), so no window key or
 * registration is reachable through it; windows stay bound to the data QP.
 *
 * Messages are the bootstrap wire format byte for byte (wire_int.h), one
 * per SEND, so every check of the TCP path applies: the header is decoded
 * and validated, and the completion's length must equal hdr_size + size.
 *
 * Flow control: TF_CTL_RECV receives stay posted.  A well-behaved peer
 * never has more than 1 (OPEN/ACCEPT) + TF_SESSION_MAX_EXPOSURES (EXPOSE)
 * + 1 (CLOSE) + 1 (the next OPEN) messages unread, fewer than TF_CTL_RECV;
 * a peer that sends more waits on receiver-not-ready retries.  Receives
 * that complete while this side waits for a send slot are queued in
 * arrival order (the backlog) and handed out before the CQ is polled
 * again, so that two sides sending at once never wait on each other.
 *
 * Sends and receives complete on CQs of their own.  The receive CQ's fd
 * is what a sleeper arms: the listener for an idle connection's next OPEN
 * (tf_listener_fd), a session for its peer's EXPOSE and CLOSE
 * (tf_session_fd); this side's own sends never wake them.  The waits here
 * (for a send slot, for the ACCEPT) poll and look at the TCP socket every
 * TF_CTL_SOCKET_CHECK_NS: the socket still reports the peer's death (EOF)
 * where the QP may not.  After TOLLFREE_POLL_SPIN_US they yield, and the
 * wait for the ACCEPT sleeps on the receive CQ's fd and the socket after
 * TF_CTL_YIELD_NS more: a thousand clients waiting on a loaded server
 * must not take its CPU by yielding in turn.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS

static int post_recv_slot(struct tf_ctl *k, unsigned slot)
{
	struct tf_sge sge = {.addr = (uintptr_t)tf__ctl_slot(k, slot),
			     .length = TF_CTL_SLOT,
			     .lkey = k->lkey};
	struct tf_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1};

	return tf_post_recv(k->qp, &wr, NULL);
}

int tf__ctl_create(struct tf_node *node, struct tf_conn *c)
{
	struct tf_ctl *k = &c->ctl;
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH,
			      .depth = TF_CTL_RECV + 4};
	tf_cq_params_t scqp = {.field_mask = TF_CQ_PARAM_DEPTH,
			       .depth = TF_CTL_SEND + 4};
	tf_qp_params_t qpp = {.field_mask = TF_QP_PARAM_MAX_SEND_WR |
					    TF_QP_PARAM_MAX_RECV_WR |
					    TF_QP_PARAM_ACCESS,
			      .max_send_wr = TF_CTL_SEND,
			      .max_recv_wr = TF_CTL_RECV,
			      .access = 0};
	size_t len = TF_CTL_BYTES;
	int ret;

	/* Taken from the stock with the connection's QP. */
	if (k->qp)
		return 0;
	/* A registration of its own, released with the connection: pool
	 * memory would stay registered after the connection is gone.  It
	 * has local access only, and this QP accepts no remote access.
	 * Pages of its own (not the heap's): what is pinned is the slots and
	 * nothing that shares their pages, and the pages go back to the
	 * system with the connection. */
	k->buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (k->buf == MAP_FAILED) {
		k->buf = NULL;
		ret = -ENOMEM;
		goto err;
	}
	ret = tf_mr_reg(node->pd, k->buf, len, TF_ACCESS_LOCAL_WRITE, &k->mr);
	if (ret)
		goto err;
	k->lkey = tf_mr_lkey(k->mr);
	/* Receives and sends complete on CQs of their own: the receive CQ
	 * is the one armed for a sleeper (a session's fd, the listener's),
	 * which this side's own sends must not wake. */
	ret = tf_cq_create(node->ctx, &cqp, &k->cq);
	if (!ret)
		ret = tf_cq_create(node->ctx, &scqp, &k->scq);
	if (ret)
		goto err;
	qpp.recv_cq = k->cq;
	qpp.send_cq = k->scq;
	ret = tf_qp_create(node->pd, &qpp, &k->qp);
	if (ret)
		goto err;
	return 0;
err:
	/* Over the pinned-memory bound (logged by the core) the caller
	 * decides: a server refuses the connection, a client goes on
	 * without. */
	if (ret != -ENOBUFS)
		tf_log_warn(S, "no control QP (%s): kept connections use TCP",
			    tf_strerror(ret));
	tf__ctl_destroy(c);
	return ret;
}

void tf__ctl_destroy(struct tf_conn *c)
{
	struct tf_ctl *k = &c->ctl;

	/* The QP goes first: the CQ and the slice are in use by it until
	 * then (destroying it drops its outstanding work). */
	tf_qp_destroy(k->qp);
	tf_cq_destroy(k->cq);
	tf_cq_destroy(k->scq);
	if (k->mr)
		tf_mr_dereg(k->mr);
	if (k->buf)
		munmap(k->buf, TF_CTL_BYTES);
	memset(k, 0, sizeof(*k));
}

int tf__ctl_connect(struct tf_conn *c, const void *blob, size_t len)
{
	struct tf_ctl *k = &c->ctl;
	int ret;

	ret = tf_qp_connect(k->qp, blob, len);
	if (ret) {
		tf_log_warn(S, "peer control QP address refused: %s",
			    tf_strerror(ret));
		return ret;
	}
	for (unsigned i = 0; i < TF_CTL_RECV; i++) {
		ret = post_recv_slot(k, i);
		if (ret) {
			tf_log_error(S, "cannot post control receives: %s",
				     tf_strerror(ret));
			return ret;
		}
	}
	k->ready = true;
	return 0;
}

/*
 * Reap the send CQ: completions free their slots; a failed send means
 * the QP is in error.  Only when a slot is needed or before the QP goes:
 * the receive path never pays for it (a failed send also fails the
 * receives that follow).
 */
static int reap_send(struct tf_ctl *k)
{
	struct tf_wc wc[TF_CTL_SEND];
	int r;

	if (k->sent == k->send_done)
		return 0;
	r = tf_cq_poll(k->scq, TF_CTL_SEND, wc);
	if (r < 0)
		return r;
	for (int i = 0; i < r; i++) {
		if (wc[i].status != TF_WC_SUCCESS) {
			tf_log_debug(S, "control send failed: %s",
				     tf_wc_status_str(wc[i].status));
			return -TF_EQPERR;
		}
		k->send_done++;
	}
	return 0;
}

/*
 * Reap the receive CQ: receives go to the backlog in arrival order.  The
 * backlog cannot overflow: at most TF_CTL_RECV receives are posted.
 */
static int reap(struct tf_ctl *k)
{
	struct tf_wc wc[16];
	int r;

	r = tf_cq_poll(k->cq, 16, wc);
	if (r < 0)
		return r;
	for (int i = 0; i < r; i++) {
		if (wc[i].wr_id >= TF_CTL_RECV) {
			/* Cannot happen: sends complete on scq. */
			return -TF_EWIRE;
		}
		if (k->n_backlog == TF_CTL_RECV)
			return -TF_EWIRE; /* cannot happen, see above */
		k->backlog[(k->bl_head + k->n_backlog) % TF_CTL_RECV] = wc[i];
		k->n_backlog++;
	}
	return 0;
}

/* The socket of a connection whose sessions use the control QP carries
 * one more message only: the CLOSE of its first session, when this side
 * closed that session before it came (one-way close). */
static int tcp_late_close(struct tf_conn *c)
{
	int ret = tf__wire_rx_step(c->fd, &c->sock_rx);

	if (ret <= 0)
		return ret;
	ret = tf__conn_open_rx(c, TF_WIRE_CH_SOCK, &c->sock_rx);
	if (!ret && tf__conn_aside(c, TF_WIRE_CH_SOCK, &c->sock_rx) != 1) {
		tf_log_warn(S,
			    "unexpected %s on the socket of a kept "
			    "connection",
			    tf__wire_op_name(c->sock_rx.h.op));
		ret = -TF_EWIRE;
	}
	tf__wire_rx_reset(&c->sock_rx);
	return ret;
}

int tf__ctl_tcp_check(struct tf_conn *c)
{
	uint8_t b;
	ssize_t n;

	if (c->close_due[TF_WIRE_CH_SOCK])
		return tcp_late_close(c);
	n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n > 0) {
		/* Once the control QP carries a connection's messages, the
		 * peer has nothing to say on the socket. */
		tf_log_warn(S, "unexpected bytes on the socket of a kept "
			       "connection");
		return -TF_EWIRE;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return -errno;
}

/*
 * Sleep until a control message arrives, the socket says something (the
 * peer's end) or the wait's deadline: arm the receive CQ, look once more,
 * then poll its descriptor and the socket.  0 (woken, timed out, or the
 * arm found a message) or -errno.  Without a descriptor, a yield.
 */
static int ctl_sleep(struct tf_conn *c, const struct tf_backoff *bo)
{
	struct pollfd pfd[2] = {{.fd = tf_cq_fd(c->ctl.cq), .events = POLLIN},
				{.fd = c->fd, .events = POLLIN}};
	int ret;

	if (pfd[0].fd < 0) {
		sched_yield();
		return 0;
	}
	ret = tf__ctl_arm(c);
	if (ret || c->ctl.n_backlog)
		return ret;
	if (poll(pfd, 2, tf__backoff_ms_left(bo)) < 0 && errno != EINTR)
		return -errno;
	return pfd[1].revents ? tf__ctl_tcp_check(c) : 0;
}

/*
 * One turn of a wait on the control QP, after a poll that found nothing:
 * the socket now and then (a system call; the peer's end shows there, not
 * always on the QP), then a pause.  0, -ETIMEDOUT or the socket's error.
 * The socket is not looked at before an answer had time to come on the
 * QP: *@checked starts at the wait's start.  After the spin it yields; a
 * wait for a message (@may_sleep) sleeps after TF_CTL_YIELD_NS of that,
 * one for send completions, which its CQ's descriptor does not report,
 * yields to the end.
 */
static int ctl_turn(struct tf_conn *c, struct tf_backoff *bo, uint64_t *checked,
		    bool may_sleep)
{
	uint64_t now = tf__now_ns();
	int ret;

	if (now - *checked >= TF_CTL_SOCKET_CHECK_NS) {
		*checked = now;
		ret = tf__ctl_tcp_check(c);
		if (ret)
			return ret;
	}
	/* A server that sleeps answers within one wake-up, a little more
	 * than the spin: yielding then costs the answer nothing.  Past
	 * TF_CTL_YIELD_NS more the server is loaded, or gone, and the
	 * waiter gets out of its way. */
	if (!may_sleep || now - bo->start < bo->spin_ns + TF_CTL_YIELD_NS)
		return tf__backoff(bo);
	if (now >= bo->deadline)
		return -ETIMEDOUT;
	return ctl_sleep(c, bo);
}

int tf__ctl_send(struct tf_conn *c, const struct tf_wire_msg *m, int timeout_ms)
{
	struct tf_ctl *k = &c->ctl;
	struct tf_backoff bo;
	uint64_t checked;
	struct tf_send_wr wr = {.opcode = TF_WR_SEND,
				.send_flags = TF_SEND_SIGNALED,
				.num_sge = 1};
	struct tf_sge sge;
	unsigned slot;
	int ret;

	if (m->len > TF_CTL_SLOT) {
		/* Cannot happen: the bounds of every message fit a slot. */
		tf_log_error(S, "control message of %zu bytes exceeds %d",
			     m->len, TF_CTL_SLOT);
		return -EMSGSIZE;
	}
	tf__sess_backoff_init(&bo, c->node, timeout_ms);
	checked = bo.start;
	for (;;) {
		/* This also takes in what the peer sent meanwhile, so that
		 * a peer waiting for us to read does not wait on us. */
		ret = reap(k);
		if (!ret && k->sent - k->send_done >= TF_CTL_SEND)
			ret = reap_send(k);
		if (ret)
			return ret;
		if (k->sent - k->send_done < TF_CTL_SEND)
			break;
		ret = ctl_turn(c, &bo, &checked, false);
		if (ret == -ETIMEDOUT)
			tf_log_warn(S,
				    "control send did not complete within "
				    "%d ms",
				    timeout_ms);
		if (ret)
			return ret;
	}
	slot = TF_CTL_RECV + (unsigned)(k->sent % TF_CTL_SEND);
	memcpy(tf__ctl_slot(k, slot), m->buf, m->len);
	sge.addr = (uintptr_t)tf__ctl_slot(k, slot);
	sge.length = (uint32_t)m->len;
	sge.lkey = k->lkey;
	wr.wr_id = slot;
	wr.sg_list = &sge;
	ret = tf_post_send(k->qp, &wr, NULL);
	if (ret)
		return ret;
	k->sent++;
	return 0;
}

unsigned tf__ctl_send_room(struct tf_conn *c)
{
	struct tf_ctl *k = &c->ctl;

	if (reap_send(k))
		return 0;
	return TF_CTL_SEND - (unsigned)(k->sent - k->send_done);
}

/* Check a received control message and copy it into @rx. */
static int decode(const struct tf_ctl *k, const struct tf_wc *wc,
		  struct tf_wire_rx *rx)
{
	const uint8_t *p;

	if (wc->status != TF_WC_SUCCESS) {
		tf_log_debug(S, "control receive failed: %s",
			     tf_wc_status_str(wc->status));
		return -TF_EQPERR;
	}
	if (wc->opcode != TF_WC_RECV || wc->byte_len < TF_WIRE_HDR_SIZE ||
	    wc->byte_len > TF_CTL_SLOT) {
		tf_log_warn(S, "malformed control message (%u bytes)",
			    wc->byte_len);
		return -TF_EWIRE;
	}
	p = tf__ctl_slot(k, (unsigned)wc->wr_id);
	tf__wire_rx_reset(rx);
	if (tf__wire_hdr_decode(p, &rx->h))
		return -TF_EWIRE;
	/* The header's sizes were bounded by the decode; they must also
	 * account for exactly the bytes that arrived. */
	if ((uint32_t)rx->h.hdr_size + rx->h.size != wc->byte_len) {
		tf_log_warn(S, "control message of %u bytes claims %u + %u",
			    wc->byte_len, rx->h.hdr_size, rx->h.size);
		return -TF_EWIRE;
	}
	memcpy(rx->hdr, p, rx->h.hdr_size);
	memcpy(rx->body, p + rx->h.hdr_size, rx->h.size);
	rx->have_hdr = true;
	rx->got = wc->byte_len;
	return 0;
}

int tf__ctl_next(struct tf_conn *c, struct tf_wire_rx *rx)
{
	struct tf_ctl *k = &c->ctl;
	struct tf_wc wc;
	int ret;

	if (!k->n_backlog) {
		ret = reap(k);
		if (ret)
			return ret;
		if (!k->n_backlog)
			return 0;
	}
	wc = k->backlog[k->bl_head];
	k->bl_head = (k->bl_head + 1) % TF_CTL_RECV;
	k->n_backlog--;
	ret = decode(k, &wc, rx);
	if (ret)
		return ret;
	/* The bytes were copied out: the slot takes the next message. */
	ret = post_recv_slot(k, (unsigned)wc.wr_id);
	if (ret) {
		tf_log_warn(S, "cannot repost a control receive: %s",
			    tf_strerror(ret));
		return ret;
	}
	return 1;
}

void tf__ctl_flush(struct tf_conn *c, int timeout_ms)
{
	struct tf_ctl *k = &c->ctl;
	struct tf_backoff bo;

	tf__sess_backoff_init(&bo, c->node, timeout_ms);
	while (k->qp && k->send_done != k->sent) {
		if (reap_send(k) || tf__backoff(&bo))
			return;
	}
}

int tf__ctl_arm(struct tf_conn *c)
{
	int ret = tf_cq_arm(c->ctl.cq);

	if (ret)
		return ret;
	/* As after ibv_req_notify_cq: what arrived before the arm would
	 * signal nothing, so look once more. */
	return reap(&c->ctl);
}

/*
 * A wait or a poll saw the peer's end on the socket (@err): the peer may
 * have sent its last word on the control QP just before it closed, a
 * REJECT or a CLOSE.  On soft tcp that word travels on another TCP
 * connection and can be polled after the socket's end is seen; on verbs
 * a message whose send completed is already in our receive queue, and on
 * shm in our ring.  The QP is looked at until it yields the message,
 * fails (soft tcp fails it only after delivering what came before the
 * end) or @wait_ns passes: 0 is one look, for calls that must not block.
 * 1 with the message in @rx, else @err.
 */
int tf__ctl_last_look(struct tf_conn *c, struct tf_wire_rx *rx, int err,
		      uint64_t wait_ns)
{
	uint64_t t0 = wait_ns ? tf__now_ns() : 0;

	for (;;) {
		int r = tf__ctl_next(c, rx);

		if (r)
			return r > 0 ? r : err;
		if (!wait_ns || tf_qp_state(c->ctl.qp) == TF_QPS_ERR ||
		    tf__now_ns() - t0 >= wait_ns)
			return err;
	}
}

int tf__ctl_wait(struct tf_conn *c, struct tf_wire_rx *rx, int timeout_ms)
{
	struct tf_backoff bo;
	uint64_t checked;
	int ret;

	tf__sess_backoff_init(&bo, c->node, timeout_ms);
	checked = bo.start;
	for (;;) {
		ret = tf__ctl_next(c, rx);
		if (ret)
			return ret;
		ret = ctl_turn(c, &bo, &checked, true);
		/* The deadline: the turn before looked at the QP. */
		if (ret == -ETIMEDOUT)
			return ret;
		if (ret)
			return tf__ctl_last_look(c, rx, ret,
						 TF_CTL_LAST_LOOK_NS);
	}
}
