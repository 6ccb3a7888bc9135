/* SPDX-License-Identifier: MIT */
/*
 * session_data.c - a session's data path: one-sided operations and
 * SEND/RECV on its QP, checked against the peer's exposures before they
 * are posted, and the completions, translated back to the caller's
 * wr_ids (the session's own binds and invalidations never surface).
 * Data calls do only data: the control channel is looked at only for an
 * exposure not heard of yet.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS

/* The internal slot of the fence READ: past every exposure's. */
#define FENCE_SLOT ((uint64_t)TF_SESSION_MAX_EXPOSURES)

/* ------------------------------------------------------- completions */

static void stash_push(struct tf_session *s, const struct tf_wc *wc)
{
	if (s->n_stash == s->stash_cap) {
		/* Cannot happen: see tf__sess_new. */
		tf_log_error(S, "completion stash overflow; dropped wr_id %llu",
			     (unsigned long long)wc->wr_id);
		return;
	}
	s->stash[(s->stash_head + s->n_stash) % s->stash_cap] = *wc;
	s->n_stash++;
}

/*
 * A remote invalidation's completion (RINV_SLOT), once a session: out of
 * tf__sess_reap's line.  Client: its
 * SEND_WITH_INV, possibly a session or more after the one that closed
 * (nobody waits for it): only a failure is worth a word, and the QP's
 * error says the rest.  Server: the receive it took, which must carry
 * exposure 0's key and nothing or exactly the client's CLOSE; anything
 * else is the client's error, and a window it did not revoke is then
 * revoked as usual (tf_session_revoke).
 */
TF__COLD static void rinv_done(struct tf_session *s, const struct tf_wc *wc)
{
	if (wc->opcode != TF_WC_RECV) {
		if (wc->status != TF_WC_SUCCESS &&
		    wc->status != TF_WC_WR_FLUSH_ERR)
			tf_log_warn(S, "remote invalidation failed: %s",
				    tf_wc_status_str(wc->status));
		return;
	}
	if (!s->server || !s->rinv || s->rinv_done ||
	    wc->status == TF_WC_WR_FLUSH_ERR)
		return;
	if (wc->status == TF_WC_SUCCESS && (wc->flags & TF_WC_WITH_INV) &&
	    s->n_exps && wc->invalidated_rkey == s->exps[0].info.rkey &&
	    !wc->byte_len) {
		s->rinv_done = true;
		return;
	}
	tf_log_warn(S,
		    "peer's remote invalidation took the wrong form (%s, "
		    "%u bytes, %s key 0x%x)",
		    tf_wc_status_str(wc->status), wc->byte_len,
		    (wc->flags & TF_WC_WITH_INV) ? "invalidated" : "no",
		    wc->invalidated_rkey);
	s->rinv = false;
	tf__sess_set_broken(s, -TF_EWIRE);
}

/*
 * Poll the connection's CQ once: internal completions update their
 * exposure, the caller's are translated back to their wr_ids and go to
 * @out (up to @n), the rest to the stash.  Returns how many went to @out.
 */
int tf__sess_reap(struct tf_session *s, struct tf_wc *out, int n)
{
	struct tf_wc tmp[32];
	int r, cnt = 0;

	r = tf_cq_poll(s->c->cq, 32, tmp);
	if (r < 0)
		return r;
	s->n_reaped += (unsigned)r;
	for (int i = 0; i < r; i++) {
		struct tf_wc *wc = &tmp[i];
		uint64_t slot = WR_SLOT(wc->wr_id);

		switch (WR_KIND(wc->wr_id)) {
		case WR_INT:
			if (slot == RINV_SLOT) {
				rinv_done(s, wc);
				continue;
			}
			if (slot == FENCE_SLOT) {
				if (s->fence_pending > 0)
					s->fence_pending--;
				s->fence_status = wc->status;
			} else if (slot < (uint64_t)s->n_exps &&
				   s->exps[slot].pending > 0) {
				s->exps[slot].pending--;
				s->exps[slot].status = wc->status;
			}
			if (wc->status != TF_WC_SUCCESS &&
			    wc->status != TF_WC_WR_FLUSH_ERR)
				tf_log_warn(S, "%s of exposure %llu failed: %s",
					    slot == FENCE_SLOT ? "fence"
					    : wc->opcode == TF_WC_BIND_MW
						    ? "bind"
						    : "invalidation",
					    (unsigned long long)slot,
					    tf_wc_status_str(wc->status));
			continue;
		case WR_SEND:
			if (slot >= s->c->send_depth)
				goto bad;
			/* A READ or atomic answered after the last SEND or
			 * WRITE: everything sent before it is placed
			 * (tf__sess_fence). */
			if (s->fence_read &&
			    (s->fence_read - 1) % s->c->send_depth == slot &&
			    wc->status == TF_WC_SUCCESS) {
				s->fence_due = false;
				s->fence_read = 0;
			}
			wc->wr_id = s->send_ids[slot];
			s->send_done++;
			break;
		case WR_RECV:
			if (slot >= s->c->recv_depth)
				goto bad;
			wc->wr_id = s->recv_ids[slot];
			s->recv_done++;
			break;
		case 0:
			/* Work posted directly on tf_session_qp() with a
			 * wr_id below 2^56 is reported unchanged. */
			break;
		default:
			goto bad;
		}
		/* A failed work request leaves an RC QP in error: say so
		 * now, not when the provider's state catches up (the soft
		 * provider completes the request, then moves the QP, and a
		 * waiter woken by the completion can run in between).  After
		 * the peer's CLOSE the error is the end of the connection,
		 * not of the session (tf_session_state). */
		if (TF__UNLIKELY(wc->status != TF_WC_SUCCESS) &&
		    !s->peer_closed)
			tf__sess_set_broken(s, -TF_EQPERR);
		if (cnt < n)
			out[cnt++] = *wc;
		else
			stash_push(s, wc);
		continue;
	bad:
		/* Cannot happen: every WR the session posts has a kind. */
		tf_log_debug(S, "completion with foreign wr_id 0x%llx",
			     (unsigned long long)wc->wr_id);
	}
	return cnt;
}

static int pending_internal(const struct tf_session *s)
{
	int n = s->fence_pending;

	for (int i = 0; i < s->n_exps; i++)
		n += s->exps[i].pending;
	return n;
}

/* Wait until the session's binds, invalidations and fence completed. */
int tf__sess_wait_internal(struct tf_session *s)
{
	struct tf_backoff bo;

	tf__sess_backoff_init(&bo, s->node, s->node->timeout_ms);
	while (pending_internal(s)) {
		int r = tf__sess_reap(s, NULL, 0);

		if (r < 0)
			return r;
		if (!pending_internal(s))
			break;
		r = tf__backoff_spin(&bo);
		if (r == -ETIMEDOUT) {
			tf_log_warn(S,
				    "bind/invalidation did not complete "
				    "within %d ms",
				    s->node->timeout_ms);
			return -ETIMEDOUT;
		}
		if (r > 0) {
			r = tf__sess_cq_sleep(s, &bo);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int tf_session_poll(tf_session_t *s, int n, struct tf_wc *wc)
{
	int got = 0, r;

	if (!s || n <= 0 || !wc)
		return -EINVAL;
	if (s->qctl) {
		tf__sess_ctrl_step(s);
	} else {
		uint64_t now = tf__now_ns();

		if (now - s->c->tcp_check_ns >= TF_SOCK_POLL_NS) {
			s->c->tcp_check_ns = now;
			tf__sess_ctrl_step(s);
		}
	}
	while (got < n && s->n_stash) {
		wc[got++] = s->stash[s->stash_head];
		s->stash_head = (s->stash_head + 1) % s->stash_cap;
		s->n_stash--;
	}
	if (got < n) {
		r = tf__sess_reap(s, wc + got, n - got);
		if (r < 0)
			return got ? got : r;
		got += r;
	}
	return got;
}

/* ------------------------------------------------------------ waiting */

/*
 * A session waits by spinning for TOLLFREE_POLL_SPIN_US (a reply in
 * flight for less than that never puts the waiter to sleep: a wake-up
 * across cores costs tens of microseconds), then by sleeping on the
 * session's fd (tf_session_fd(3)) until something it must act on
 * arrives: a completion on its CQ, a control message on the control QP,
 * bytes or the end on the socket.  Nothing on that path is a timer.
 */

static int wait_add(int epfd, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN};

	if (fd < 0)
		return fd;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) && errno != EEXIST) {
		int ret = -errno;

		tf_log_warn(S, "session fd: epoll_ctl: %m");
		return ret;
	}
	return 0;
}

/* The connection's wait set (made at its first use, kept with the
 * connection): the data CQ's fd and the socket, and the control CQ's fd
 * once a session sends its control messages there. */
int tf__sess_wait_fd(const struct tf_session *s)
{
	struct tf_conn *c = s->c;
	int fd, ret;

	if (c->wait_fd < 0) {
		fd = epoll_create1(EPOLL_CLOEXEC);
		if (fd < 0) {
			ret = -errno;
			tf_log_warn(S, "session fd: epoll_create1: %m");
			return ret;
		}
		ret = wait_add(fd, tf_cq_fd(c->cq));
		if (!ret)
			ret = wait_add(fd, c->fd);
		if (ret) {
			close(fd);
			return ret;
		}
		c->wait_fd = fd;
	}
	if (s->qctl && !c->wait_ctl) {
		ret = wait_add(c->wait_fd, tf_cq_fd(c->ctl.cq));
		if (ret)
			return ret;
		c->wait_ctl = true;
	}
	return c->wait_fd;
}

/*
 * Arm the session's fd and look once more, as after ibv_req_notify_cq:
 * completions go to the stash, control messages are processed.  Whether
 * the look found something (1) or the caller may sleep (0): with
 * @count_stash a completion counts, else only a control message (an
 * exposure, the peer's close, the end of the connection).  After the
 * peer's CLOSE the control QP is not armed: what comes there next is the
 * next session's.
 */
static int sess_arm(struct tf_session *s, bool count_stash)
{
	struct tf_conn *c = s->c;
	int n_peer = s->n_peer, ret;
	bool closed = s->peer_closed, broken = s->broken;

	ret = tf__sess_wait_fd(s);
	if (ret < 0)
		return ret;
	ret = tf_cq_arm(c->cq);
	if (!ret && s->qctl && !s->peer_closed && !s->broken)
		ret = tf__ctl_arm(c);
	if (ret < 0) {
		if (ret == -TF_EQPERR || ret == -TF_EWIRE) {
			tf__sess_set_broken(s, ret);
			return 1;
		}
		return ret;
	}
	ret = tf__sess_reap(s, NULL, 0);
	if (ret < 0)
		return ret;
	/* The socket is looked at now, not at its next turn: it may be
	 * what woke the caller (the peer's end, a late CLOSE). */
	c->tcp_check_ns = 0;
	tf__sess_ctrl_step(s);
	return (count_stash && s->n_stash) || s->n_peer != n_peer ||
	       s->peer_closed != closed || s->broken != broken;
}

int tf_session_arm(tf_session_t *s)
{
	if (!s)
		return -EINVAL;
	/* About to sleep, maybe until the server says something: it must
	 * know of the session (a failure breaks it: the look reports). */
	tf__sess_open_flush(s, false);
	return sess_arm(s, true);
}

/*
 * Sleep on the session's CQ alone until a completion or the deadline of
 * @bo, after arming it and looking once more (what that look reaps goes
 * to the stash or updates its exposure; then no sleep).  0 or -errno.
 * For the session's own binds and invalidations, its drain at close, and
 * any wait after the peer's close.
 */
int tf__sess_cq_sleep(struct tf_session *s, const struct tf_backoff *bo)
{
	struct pollfd pfd = {.fd = tf_cq_fd(s->c->cq), .events = POLLIN};
	unsigned reaped = s->n_reaped;
	int ret;

	if (pfd.fd < 0)
		return pfd.fd;
	ret = tf_cq_arm(s->c->cq);
	if (ret)
		return ret;
	ret = tf__sess_reap(s, NULL, 0);
	if (ret < 0)
		return ret;
	if (s->n_reaped != reaped)
		return 0; /* the caller looks at what came */
	if (poll(&pfd, 1, tf__backoff_ms_left(bo)) < 0 && errno != EINTR)
		return -errno;
	return 0;
}

/*
 * Arm, then sleep until something arrives or the wait's deadline: 0
 * (woken or timed out), 1 without sleeping when the arm found something,
 * or -errno.  After the peer's close or the end of the connection only
 * the data CQ is slept on: the socket may stay readable (its end), and
 * the control QP carries the next session's messages.
 */
static int sess_sleep(struct tf_session *s, bool count_stash,
		      const struct tf_backoff *bo)
{
	struct epoll_event ev;
	int ret;

	if (s->peer_closed || s->broken) {
		int n_stash = s->n_stash;

		ret = tf__sess_cq_sleep(s, bo);
		return ret < 0 ? ret : count_stash && s->n_stash != n_stash;
	}
	ret = sess_arm(s, count_stash);
	if (ret)
		return ret;
	if (epoll_wait(s->c->wait_fd, &ev, 1, tf__backoff_ms_left(bo)) < 0 &&
	    errno != EINTR)
		return -errno;
	/* Woken (or not): the socket is worth a look at the next poll. */
	s->c->tcp_check_ns = 0;
	return 0;
}

int tf_session_wait(tf_session_t *s, int n, struct tf_wc *wc, int timeout_ms)
{
	struct tf_backoff bo;
	bool closed, broken;

	if (!s)
		return -EINVAL;
	closed = s->peer_closed;
	broken = s->broken;
	tf__sess_backoff_init(&bo, s->node, timeout_ms);
	for (;;) {
		int r = tf_session_poll(s, n, wc);

		if (r)
			return r;
		/* A change of state is an event too: the caller learns of
		 * the peer's close without waiting out its timeout.  It can
		 * be seen on the socket before the completion that the
		 * peer sent first is taken from the QP's own channel (a
		 * remote access error, then the peer's end): look once
		 * more, so that the completion is not lost to the caller. */
		if (s->peer_closed != closed || s->broken != broken)
			return tf_session_poll(s, n, wc);
		r = tf__backoff_spin(&bo);
		if (r == -ETIMEDOUT)
			return 0;
		if (r > 0) {
			r = sess_sleep(s, true, &bo);
			if (r < 0)
				return r;
		}
	}
}

int tf_session_wait_peer(tf_session_t *s, int n, int timeout_ms)
{
	struct tf_backoff bo;

	if (!s)
		return -EINVAL;
	/* More than it knows: the server exposes them once it has the
	 * session. */
	if (s->n_peer < n && tf__sess_open_flush(s, false))
		return -ENOTCONN;
	tf__sess_backoff_init(&bo, s->node, timeout_ms);
	for (;;) {
		int r;

		tf__sess_ctrl_step(s);
		if (s->n_peer >= n)
			return 0;
		if (s->broken || s->peer_closed)
			return -ECONNRESET;
		r = tf__backoff_spin(&bo);
		if (r == -ETIMEDOUT)
			return r;
		if (r > 0) {
			/* Completions that wake it are kept for the next
			 * poll; only control messages end this wait. */
			r = sess_sleep(s, false, &bo);
			if (r < 0)
				return r;
		} else {
			tf_context_progress(s->node->ctx);
		}
	}
}

/* ------------------------------------------------------------ data */

/* -ENOTCONN if the session is broken: also when its QP failed and no
 * control message said so yet (a post to a QP in error would "succeed"
 * and flush, as verbs does). */
static int check_live(struct tf_session *s)
{
	if (s->broken)
		return -ENOTCONN;
	/* The QP's state as the provider keeps it: one relaxed load, not a
	 * call, on every post. */
	if (TF__UNLIKELY(__atomic_load_n(&s->c->qp->state, __ATOMIC_RELAXED) ==
			 TF_QPS_ERR)) {
		tf__sess_set_broken(s, -TF_EQPERR);
		return -ENOTCONN;
	}
	return 0;
}

static int post_user(struct tf_session *s, struct tf_send_wr *wr,
		     uint64_t wr_id)
{
	uint64_t slot;
	int ret;

	ret = check_live(s);
	if (ret)
		return ret;
	if (s->send_posted - s->send_done >= s->c->send_depth)
		return -ENOMEM;
	slot = s->send_posted % s->c->send_depth;
	wr->wr_id = WR_ID(WR_SEND, slot);
	wr->send_flags |= TF_SEND_SIGNALED;
	ret = tf_post_send(s->c->qp, wr, NULL);
	if (ret)
		return ret;
	s->send_ids[slot] = wr_id;
	s->send_posted++;
	/* READs and atomics complete with the peer's response: only what
	 * is sent one way can be overtaken. */
	if (wr->opcode == TF_WR_RDMA_READ ||
	    wr->opcode == TF_WR_ATOMIC_FETCH_ADD ||
	    wr->opcode == TF_WR_ATOMIC_CMP_SWP) {
		if (s->fence_due)
			s->fence_read = s->send_posted;
	} else {
		s->fence_due = s->node->fence;
		s->fence_read = 0;
	}
	return 0;
}

/*
 * iWARP completes a SEND or WRITE once TCP took it, and the peer reads
 * control messages from another QP (or the TCP socket): a CLOSE or EXPOSE
 * sent after data can be read there before the data is placed.  A READ
 * is answered only after the responder processed everything sent before
 * it on the same QP, so its completion means the data is placed.  It is
 * empty (one SGE of length 0: iWARP sinks take exactly one): no key is
 * checked for an empty READ, the peer's first exposure's goes along all
 * the same.  Work posted directly on tf_session_qp() is not tracked: the
 * caller fences that itself.
 */
int tf__sess_fence(struct tf_session *s)
{
	struct tf_sess_buf *b = s->n_bufs ? &s->bufs[0] : NULL;
	struct tf_sge sge = {.addr = b ? (uintptr_t)b->addr : 0,
			     .length = 0,
			     .lkey = b ? b->lkey : 0};
	struct tf_send_wr wr = {.wr_id = WR_ID(WR_INT, FENCE_SLOT),
				.opcode = TF_WR_RDMA_READ,
				.send_flags = TF_SEND_SIGNALED,
				.sg_list = &sge,
				.num_sge = 1};
	int ret;

	if (!s->fence_due)
		return 0;
	ret = check_live(s);
	if (ret)
		return ret;
	if (s->n_peer) {
		wr.wr.rdma.remote_addr = s->peer[0].addr;
		wr.wr.rdma.rkey = s->peer[0].rkey;
	}
	s->fence_status = TF_WC_GENERAL_ERR;
	ret = tf_post_send(s->c->qp, &wr, NULL);
	if (!ret) {
		s->fence_pending = 1;
		ret = tf__sess_wait_internal(s);
	}
	if (!ret && s->fence_status != TF_WC_SUCCESS)
		ret = -TF_EQPERR;
	if (ret) {
		tf_log_debug(S, "fence failed: %s", tf_strerror(ret));
		tf__sess_set_broken(s, ret);
		return ret;
	}
	tf_log_debug(S, "fence: the peer placed what was sent");
	s->fence_due = false;
	s->fence_read = 0;
	return 0;
}

/* Check a local range and the peer's exposure before posting. */
static int check_rdma(struct tf_session *s, int buf, size_t loff, int exp,
		      uint64_t roff, uint64_t len, unsigned right,
		      struct tf_sge *sge, uint64_t *raddr, uint32_t *rkey)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);
	const tf_exposure_info_t *e;

	if (!b || exp < 0)
		return -EINVAL;
	/* Data calls do only data: the control channel is looked at only
	 * for an exposure this side has not heard of yet (its EXPOSE may be
	 * waiting), not on every post. */
	if (exp >= s->n_peer) {
		tf__sess_ctrl_step(s);
		if (exp >= s->n_peer)
			return -EINVAL;
	}
	e = &s->peer[exp];
	if (loff > b->len || len > b->len - loff || roff > e->length ||
	    len > e->length - roff)
		return -ERANGE;
	if (!(e->rights & right))
		return -EACCES;
	sge->addr = (uintptr_t)b->addr + loff;
	sge->length = (uint32_t)len;
	sge->lkey = b->lkey;
	*raddr = e->addr + roff;
	*rkey = e->rkey;
	return 0;
}

/* A READ or WRITE (@wr has its opcode and immediate).  Only a WRITE with
 * an immediate may be empty: it is then a notification alone. */
static int rdma(struct tf_session *s, struct tf_send_wr *wr, struct tf_sge *sge,
		unsigned right, int buf, size_t loff, int exp, uint64_t roff,
		uint32_t len, uint64_t wr_id)
{
	int ret;

	if (!len && wr->opcode != TF_WR_RDMA_WRITE_WITH_IMM)
		return -EINVAL;
	ret = check_rdma(s, buf, loff, exp, roff, len, right, sge,
			 &wr->wr.rdma.remote_addr, &wr->wr.rdma.rkey);
	if (ret)
		return ret;
	wr->sg_list = sge;
	wr->num_sge = len ? 1 : 0;
	return post_user(s, wr, wr_id);
}

int tf_session_write(tf_session_t *s, int buf, size_t loff, int exp,
		     uint64_t roff, uint32_t len, uint64_t wr_id)
{
	struct tf_sge sge;
	struct tf_send_wr wr = {.opcode = TF_WR_RDMA_WRITE};

	return rdma(s, &wr, &sge, TF_ACCESS_REMOTE_WRITE, buf, loff, exp, roff,
		    len, wr_id);
}

int tf_session_write_imm(tf_session_t *s, int buf, size_t loff, int exp,
			 uint64_t roff, uint32_t len, uint32_t imm,
			 uint64_t wr_id)
{
	struct tf_sge sge;
	struct tf_send_wr wr = {.opcode = TF_WR_RDMA_WRITE_WITH_IMM,
				.imm_data = imm};

	if (!s)
		return -EINVAL;
	/* It takes a receive at the peer, which holds one for the remote
	 * invalidation only. */
	if (s->rinv_asked && !s->server)
		return -EPERM;
	if (tf__sess_open_flush(s, false))
		return -ENOTCONN;
	return rdma(s, &wr, &sge, TF_ACCESS_REMOTE_WRITE, buf, loff, exp, roff,
		    len, wr_id);
}

int tf_session_read(tf_session_t *s, int buf, size_t loff, int exp,
		    uint64_t roff, uint32_t len, uint64_t wr_id)
{
	struct tf_sge sge;
	struct tf_send_wr wr = {.opcode = TF_WR_RDMA_READ};

	return rdma(s, &wr, &sge, TF_ACCESS_REMOTE_READ, buf, loff, exp, roff,
		    len, wr_id);
}

static int atomic_op(struct tf_session *s, enum tf_wr_opcode op, int buf,
		     size_t loff, int exp, uint64_t roff, uint64_t a,
		     uint64_t b, uint64_t wr_id)
{
	struct tf_send_wr wr = {.opcode = op, .num_sge = 1};
	struct tf_sge sge;
	int ret;

	ret = check_rdma(s, buf, loff, exp, roff, 8, TF_ACCESS_REMOTE_ATOMIC,
			 &sge, &wr.wr.atomic.remote_addr, &wr.wr.atomic.rkey);
	if (ret)
		return ret;
	if ((wr.wr.atomic.remote_addr | sge.addr) & 7)
		return -EINVAL;
	wr.wr.atomic.compare_add = a;
	wr.wr.atomic.swap = b;
	wr.sg_list = &sge;
	return post_user(s, &wr, wr_id);
}

int tf_session_fetch_add(tf_session_t *s, int buf, size_t loff, int exp,
			 uint64_t roff, uint64_t add, uint64_t wr_id)
{
	return atomic_op(s, TF_WR_ATOMIC_FETCH_ADD, buf, loff, exp, roff, add,
			 0, wr_id);
}

int tf_session_cmp_swap(tf_session_t *s, int buf, size_t loff, int exp,
			uint64_t roff, uint64_t compare, uint64_t swap,
			uint64_t wr_id)
{
	return atomic_op(s, TF_WR_ATOMIC_CMP_SWP, buf, loff, exp, roff, compare,
			 swap, wr_id);
}

static int send_msg(struct tf_session *s, struct tf_send_wr *wr,
		    struct tf_sge *sge, int buf, size_t off, uint32_t len,
		    uint64_t wr_id)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);

	if (!b)
		return -EINVAL;
	/* TF_SESSION_REMOTE_INV: see tf_session_write_imm. */
	if (s->rinv_asked && !s->server)
		return -EPERM;
	if (off > b->len || len > b->len - off)
		return -ERANGE;
	/* It takes a receive that the server posts once it has the
	 * session (TF_SESSION_DEFER_OPEN). */
	if (tf__sess_open_flush(s, false))
		return -ENOTCONN;
	sge->addr = (uintptr_t)b->addr + off;
	sge->length = len;
	sge->lkey = b->lkey;
	wr->sg_list = sge;
	wr->num_sge = len ? 1 : 0;
	return post_user(s, wr, wr_id);
}

int tf_session_send(tf_session_t *s, int buf, size_t off, uint32_t len,
		    uint64_t wr_id)
{
	struct tf_sge sge;
	struct tf_send_wr wr = {.opcode = TF_WR_SEND};

	return send_msg(s, &wr, &sge, buf, off, len, wr_id);
}

int tf_session_send_imm(tf_session_t *s, int buf, size_t off, uint32_t len,
			uint32_t imm, uint64_t wr_id)
{
	struct tf_sge sge;
	struct tf_send_wr wr = {.opcode = TF_WR_SEND_WITH_IMM, .imm_data = imm};

	return send_msg(s, &wr, &sge, buf, off, len, wr_id);
}

int tf_session_recv(tf_session_t *s, int buf, size_t off, uint32_t len,
		    uint64_t wr_id)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);
	struct tf_sge sge;
	struct tf_recv_wr wr = {.sg_list = &sge, .num_sge = len ? 1 : 0};
	uint64_t slot;
	int ret;

	if (!b)
		return -EINVAL;
	if (off > b->len || len > b->len - off)
		return -ERANGE;
	ret = check_live(s);
	if (ret)
		return ret;
	if (s->recv_posted - s->recv_done >= s->c->recv_depth)
		return -ENOMEM;
	/* What it receives is sent once the server has the session. */
	if (tf__sess_open_flush(s, false))
		return -ENOTCONN;
	slot = s->recv_posted % s->c->recv_depth;
	sge.addr = (uintptr_t)b->addr + off;
	sge.length = len;
	sge.lkey = b->lkey;
	wr.wr_id = WR_ID(WR_RECV, slot);
	ret = tf_post_recv(s->c->qp, &wr, NULL);
	if (ret)
		return ret;
	s->recv_ids[slot] = wr_id;
	s->recv_posted++;
	return 0;
}
