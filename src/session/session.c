/* SPDX-License-Identifier: MIT */
/*
 * session.c - the life of a session: memory, exposures, control messages,
 * revocation and close (data movement and completions: session_data.c).
 *
 * Invariants:
 *  - every live exposure is revoked (LOCAL_INV completed, or the window or
 *    dedicated registration freed) before any buffer of the session is
 *    released, so a peer's late access fails with a remote access error
 *    and never reaches memory that the pool hands to the next session;
 *  - every work request the session posts carries an internal wr_id
 *    (kind << 56 | slot), so the session's own binds and invalidations
 *    never surface as the caller's completions, and the caller's wr_ids
 *    are arbitrary;
 *  - a connection is kept for reuse only if both sides closed cleanly, no
 *    work is outstanding on its QP and the QP is in RTS.
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT_ADD(_n, _f, _v) \
	atomic_fetch_add_explicit(&(_n)->_f, (_v), memory_order_relaxed)
#define STAT(_n, _f) STAT_ADD(_n, _f, 1)

#define REMOTE_RIGHTS TF_WIRE_EXPOSURE_RIGHTS

int tf__sess_new(struct tf_node *node, struct tf_conn *c, bool server,
		 struct tf_session **s_p)
{
	struct tf_session *s = c->spare;

	if (s) {
		/* The last session's memory, on a connection of the same
		 * queue depths: only its state is cleared (see the struct). */
		c->spare = NULL;
		memset(s, 0, offsetof(struct tf_session, send_ids));
	} else {
		s = tf__calloc(1, sizeof(*s));
		if (!s)
			goto err;
		s->send_ids = tf__calloc(c->send_depth, sizeof(uint64_t));
		s->recv_ids = tf__calloc(c->recv_depth, sizeof(uint64_t));
		/* At most send_depth + recv_depth of the caller's work
		 * requests are outstanding, so the stash can never
		 * overflow. */
		s->stash_cap = (int)(c->send_depth + c->recv_depth);
		s->stash =
			tf__calloc((size_t)s->stash_cap, sizeof(struct tf_wc));
		if (!s->send_ids || !s->recv_ids || !s->stash)
			goto err_free;
	}
	s->node = node;
	s->c = c;
	s->server = server;
	atomic_fetch_add(&node->n_sessions, 1);
	*s_p = s;
	return 0;
err_free:
	tf__sess_free_mem(s);
err:
	tf_log_error(S, "out of memory for a session");
	return -ENOMEM;
}

void tf__sess_free_mem(struct tf_session *s)
{
	if (!s)
		return;
	tf__free(s->send_ids);
	tf__free(s->recv_ids);
	tf__free(s->stash);
	tf__free(s);
}

/* ------------------------------------------------------- control msgs */

static void put_exposures(struct tf_wire_msg *m, struct tf_session *s)
{
	tf__wire_put_u16(m, (uint16_t)(s->n_exps - s->n_exps_sent));
	for (int i = s->n_exps_sent; i < s->n_exps; i++) {
		const tf_exposure_info_t *e = &s->exps[i].info;

		tf__wire_put_u64(m, e->addr);
		tf__wire_put_u64(m, e->length);
		tf__wire_put_u32(m, e->rkey);
		tf__wire_put_u32(m, e->rights);
	}
}

int tf__sess_add_exposures(struct tf_session *s,
			   const struct tf_wire_exposures *x)
{
	if (x->n > (unsigned)(TF_SESSION_MAX_EXPOSURES - s->n_peer)) {
		tf_log_warn(S, "peer sent %u exposures, %d known (limit %d)",
			    x->n, s->n_peer, TF_SESSION_MAX_EXPOSURES);
		return -TF_EWIRE;
	}
	memcpy(s->peer + s->n_peer, x->e, x->n * sizeof(x->e[0]));
	s->n_peer += (int)x->n;
	return 0;
}

void tf__sess_set_broken(struct tf_session *s, int why)
{
	if (!s->broken)
		tf_log_debug(S, "session broken: %s", tf_strerror(why));
	s->broken = true;
	s->c->broken = true;
}

int tf__sess_ctl_send(struct tf_session *s, struct tf_wire_msg *m,
		      int timeout_ms)
{
	return tf__conn_send(s->c, tf__sess_channel(s), m, timeout_ms);
}

/* A session on the control QP looks at its socket at most every
 * TF_CTL_SOCKET_CHECK_NS: the peer's end shows there (as EOF), and a
 * system call on every poll would cost more than the operations polled
 * for. */
static int ctl_watch_socket(struct tf_session *s)
{
	uint64_t now = tf__now_ns();

	if (now - s->c->tcp_check_ns < TF_CTL_SOCKET_CHECK_NS)
		return 0;
	s->c->tcp_check_ns = now;
	return tf__ctl_tcp_check(s->c);
}

/* Read control messages that arrived, without blocking.  After the
 * peer's CLOSE nothing more is read: the next message on a kept
 * connection belongs to the next session. */
void tf__sess_ctrl_step(struct tf_session *s)
{
	struct tf_conn *c = s->c;

	while (!s->broken && !s->peer_closed && !s->deferred) {
		struct tf_wire_exposures x;
		int ret = s->qctl ? tf__ctl_next(c, &c->rx)
				  : tf__wire_rx_step(c->fd, &c->rx);

		/* The peer's end on the socket: its CLOSE may still be on
		 * the control QP, sent before it left (one look: a data
		 * call does not wait here). */
		if (ret == 0 && s->qctl) {
			ret = ctl_watch_socket(s);
			if (ret < 0)
				ret = tf__ctl_last_look(c, &c->rx, ret, 0);
		}
		if (ret == 0)
			return;
		if (ret > 0)
			ret = tf__conn_open(c, tf__sess_channel(s));
		if (ret < 0) {
			tf__sess_set_broken(s, ret);
			return;
		}
		ret = tf__conn_aside(c, tf__sess_channel(s), &c->rx);
		if (ret) {
			tf__wire_rx_reset(&c->rx);
			if (ret < 0) {
				tf__sess_set_broken(s, ret);
				return;
			}
			continue;
		}
		if (c->rx.h.op == TF_WIRE_EXPOSE) {
			ret = tf__wire_parse_expose(&c->rx, &x);
			if (!ret)
				ret = tf__sess_add_exposures(s, &x);
		} else if (c->rx.h.op == TF_WIRE_CLOSE) {
			s->peer_closed = true;
			ret = 0;
		} else if (c->rx.h.op == TF_WIRE_REJECT && s->granted &&
			   !s->server) {
			/* The server refused the session this side opened on
			 * a grant (its bounds, say): the session ends. */
			struct tf_wire_reject rej;

			ret = tf__wire_parse_reject(&c->rx, &rej);
			if (!ret)
				ret = rej.err;
			tf_log_warn(S, "server refused the session: %s",
				    tf_strerror(ret));
		} else {
			tf_log_warn(S, "unexpected control message op %u",
				    c->rx.h.op);
			ret = -TF_EWIRE;
		}
		tf__wire_rx_reset(&c->rx);
		if (ret)
			tf__sess_set_broken(s, ret);
	}
}

/* Finish @m with the exposures not sent yet and send it; a failure
 * breaks the session. */
static int send_with_exposures(struct tf_session *s, struct tf_wire_msg *m)
{
	int ret;

	/* The server opens the session before it reads what it exposes. */
	ret = tf__sess_open_flush(s, false);
	if (ret)
		return ret;
	put_exposures(m, s);
	ret = tf__wire_finish(m);
	if (!ret)
		ret = tf__sess_ctl_send(s, m, s->node->timeout_ms);
	if (ret) {
		tf__sess_set_broken(s, ret);
		return ret;
	}
	s->n_exps_sent = s->n_exps;
	return 0;
}

static int send_exposures(struct tf_session *s)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_EXPOSE);
	return send_with_exposures(s, &m);
}

/*
 * Server: agree to the client's remote invalidation of exposure 0 (a
 * window) if it asked and this node can, by posting the empty receive its
 * SEND_WITH_INV takes.  Posted before the ACCEPT leaves; whether it was.
 */
static bool rinv_offer(struct tf_session *s)
{
	struct tf_recv_wr wr = {.wr_id = WR_ID(WR_INT, RINV_SLOT)};

	if (!s->rinv_asked || !s->node->rinv || !s->n_exps || !s->exps[0].mw ||
	    !s->exps[0].live || s->granted)
		return false;
	if (tf_post_recv(s->c->qp, &wr, NULL))
		return false;
	s->rinv = true;
	return true;
}

int tf__sess_send_accept(struct tf_session *s)
{
	uint8_t blob[TF_QP_ADDR_MAX], ctl[TF_QP_ADDR_MAX];
	size_t blob_len = 0, ctl_len = 0;
	struct tf_wire_msg m;
	int ret;

	/* A new connection's QPs went ahead in an ADDR, or go here. */
	if (!s->reused && !s->c->addr_sent) {
		blob_len = sizeof(blob);
		ret = tf_qp_get_addr(s->c->qp, blob, &blob_len);
		if (ret)
			return ret;
		/* The control QP, if this side connected one to the
		 * client's, for the sessions after this one. */
		if (s->c->ctl.ready) {
			ctl_len = sizeof(ctl);
			ret = tf_qp_get_addr(s->c->ctl.qp, ctl, &ctl_len);
			if (ret)
				return ret;
		}
	}
	tf__wire_init(&m, TF_WIRE_ACCEPT);
	tf__wire_put_qps(&m, s->c->id, blob, blob_len, ctl, ctl_len);
	tf__wire_put_u8(&m, rinv_offer(s) ? TF_WIRE_ACCEPT_RINV : 0);
	ret = send_with_exposures(s, &m);
	if (ret)
		return ret;
	s->deferred = false;
	/* The handshake is over: later messages are numbered, not chained
	 * to a transcript. */
	tf__transcript_free(s->c->ts);
	s->c->ts = NULL;
	return 0;
}

int tf_session_establish(tf_session_t *s)
{
	/* A granted session is open already: its exposures went as EXPOSE
	 * messages (a server written for deferral works unchanged). */
	if (s && s->server && s->granted)
		return s->broken ? -ENOTCONN : 0;
	if (!s || !s->server || !s->deferred)
		return -EINVAL;
	if (s->broken)
		return -ENOTCONN;
	return tf__sess_send_accept(s);
}

/* ------------------------------------------------------------ memory */

static int new_buf(struct tf_session *s, struct tf_sess_buf **b_p)
{
	if (s->n_bufs >= TF_SESSION_MAX_BUFS)
		return -ENOSPC;
	*b_p = &s->bufs[s->n_bufs];
	memset(*b_p, 0, sizeof(**b_p));
	return 0;
}

/* @b is the rented pool slice @sl, @len bytes of it used. */
static void buf_from_slice(struct tf_sess_buf *b, const tf_slice_t *sl,
			   size_t len)
{
	b->slice = *sl;
	b->addr = sl->addr;
	b->len = len;
	b->lkey = sl->lkey;
	b->mr = sl->mr;
	b->mode = TF_REG_POOL;
	b->rented = true;
}

int tf_session_rent(tf_session_t *s, size_t len, int *buf_p, void **addr_p)
{
	struct tf_sess_buf *b;
	tf_slice_t sl;
	int ret;

	if (!s || !buf_p || !len)
		return -EINVAL;
	ret = new_buf(s, &b);
	if (ret)
		return ret;
	ret = tf_pool_rent(s->node->pool, len, &sl);
	if (ret)
		return ret;
	buf_from_slice(b, &sl, len);
	STAT(s->node, slices_rented);
	*buf_p = s->n_bufs++;
	if (addr_p)
		*addr_p = b->addr;
	return 0;
}

int tf_session_attach(tf_session_t *s, void *addr, size_t len, unsigned flags,
		      int *buf_p)
{
	struct tf_node *node;
	struct tf_sess_buf *b;
	unsigned access;
	int mode, ret;

	if (!s || !addr || !len || !buf_p ||
	    (flags & ~(unsigned)(TF_ATTACH_IN | TF_ATTACH_OUT)))
		return -EINVAL;
	node = s->node;
	if (!flags)
		flags = TF_ATTACH_IN | TF_ATTACH_OUT;
	ret = new_buf(s, &b);
	if (ret)
		return ret;
	mode = node->reg_mode;
	if (mode == TF_REG_AUTO)
		mode = len <= node->crossover ? TF_REG_POOL : TF_REG_CACHE;
	if (mode == TF_REG_POOL) {
		ret = tf_pool_rent(node->pool, len, &b->slice);
		/* Larger than the largest slice: the cache takes it. */
		if (ret == -EINVAL)
			mode = TF_REG_CACHE;
		else if (ret)
			return ret;
	}
	/* Our own registrations never carry remote rights: peers only ever
	 * get window keys (or dedicated fallback registrations). */
	access = TF_ACCESS_LOCAL_WRITE | (node->use_mw ? TF_ACCESS_MW_BIND : 0);
	switch (mode) {
	case TF_REG_POOL:
		b->addr = b->slice.addr;
		b->lkey = b->slice.lkey;
		b->mr = b->slice.mr;
		b->rented = true;
		b->user = addr;
		if (flags & TF_ATTACH_IN) {
			memcpy(b->addr, addr, len);
			STAT_ADD(node, copy_bytes, len);
		}
		STAT(node, slices_rented);
		STAT(node, attach_pool);
		break;
	case TF_REG_CACHE:
		ret = tf_rcache_get(node->rc, addr, len, access, &b->reg);
		if (ret)
			return ret;
		b->addr = addr;
		b->lkey = tf_rcache_reg_lkey(b->reg);
		b->mr = tf_rcache_reg_mr(b->reg);
		STAT(node, attach_cache);
		break;
	default:
		ret = tf_mr_reg(node->pd, addr, len, access, &b->mr);
		if (ret)
			return ret;
		b->addr = addr;
		b->lkey = tf_mr_lkey(b->mr);
		STAT(node, attach_direct);
		break;
	}
	b->len = len;
	b->mode = mode;
	b->flags = flags;
	*buf_p = s->n_bufs++;
	return 0;
}

struct tf_sess_buf *tf__sess_get_buf(struct tf_session *s, int buf)
{
	if (!s || buf < 0 || buf >= s->n_bufs)
		return NULL;
	return &s->bufs[buf];
}

void *tf_session_buf_addr(tf_session_t *s, int buf)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);

	return b ? b->addr : NULL;
}

int tf_session_buf_mode(tf_session_t *s, int buf)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);

	return b ? b->mode : -EINVAL;
}

static void release_buf(struct tf_session *s, struct tf_sess_buf *b)
{
	struct tf_node *node = s->node;

	if (b->rented) {
		if (b->user && (b->flags & TF_ATTACH_OUT)) {
			memcpy(b->user, b->addr, b->len);
			STAT_ADD(node, copy_bytes, b->len);
		}
		tf_pool_return(node->pool, &b->slice);
		atomic_fetch_sub_explicit(&node->slices_rented, 1,
					  memory_order_relaxed);
	} else if (b->reg) {
		tf_rcache_put(node->rc, b->reg);
	} else if (b->mr) {
		tf_mr_dereg(b->mr);
	}
	memset(b, 0, sizeof(*b));
}

/* ------------------------------------------------------------ exposure */

tf_mw_t *tf__mw_get(struct tf_node *node)
{
	tf_mw_t *mw = NULL;

	pthread_mutex_lock(&node->lock);
	if (node->n_mw_free)
		mw = node->mw_free[--node->n_mw_free];
	pthread_mutex_unlock(&node->lock);
	if (!mw && tf_mw_alloc(node->pd, &mw))
		return NULL;
	return mw;
}

/* Keep an invalidated window for the next bind (a bind gives it a new
 * key), or free it if enough are kept. */
void tf__mw_put(struct tf_node *node, tf_mw_t *mw)
{
	pthread_mutex_lock(&node->lock);
	if (node->n_mw_free < TF_SESS_MW_FREE_MAX) {
		node->mw_free[node->n_mw_free++] = mw;
		mw = NULL;
	}
	pthread_mutex_unlock(&node->lock);
	if (mw)
		tf_mw_dealloc(mw);
}

/* Give @len of the bytes a server session counts against its peer's
 * TOLLFREE_SESSION_MAX_EXPOSED_PEER back (all: s->exposed). */
static void unexpose(struct tf_session *s, uint64_t len)
{
	if (!s->pe || !len)
		return;
	tf__peers_unexpose(s->node, s->pe, len);
	s->exposed -= len;
}

int tf_session_expose(tf_session_t *s, int buf, size_t off, size_t len,
		      unsigned rights, int *exp_p)
{
	struct tf_sess_buf *b = tf__sess_get_buf(s, buf);
	struct tf_node *node;
	struct tf_sess_exp *e;
	int idx, ret;

	if (!b || !exp_p || !len || !rights || (rights & ~REMOTE_RIGHTS) ||
	    off > b->len || len > b->len - off)
		return -EINVAL;
	if (s->n_exps >= TF_SESSION_MAX_EXPOSURES)
		return -ENOSPC;
	if (s->broken || s->peer_closed)
		return -ENOTCONN;
	node = s->node;
	/* A server's exposures count against its peer's bound; the bytes
	 * come back when the session revokes (or closes). */
	if (s->pe) {
		ret = tf__peers_expose(node, s->pe, len);
		if (ret)
			return ret;
		s->exposed += len;
	}
	idx = s->n_exps;
	e = &s->exps[idx];
	memset(e, 0, sizeof(*e));
	e->info.addr = (uintptr_t)b->addr + off;
	e->info.length = len;
	e->info.rights = rights;
	if (node->use_mw) {
		struct tf_send_wr wr = {
			.wr_id = WR_ID(WR_INT, idx),
			.opcode = TF_WR_BIND_MW,
			.send_flags = TF_SEND_SIGNALED,
			.wr.bind_mw = {.mr = b->mr,
				       .addr = e->info.addr,
				       .length = len,
				       .access = rights},
		};

		e->mw = tf__mw_get(node);
		if (!e->mw) {
			unexpose(s, len);
			return -ENOMEM;
		}
		wr.wr.bind_mw.mw = e->mw;
		ret = tf_post_send(s->c->qp, &wr, NULL);
		if (ret) {
			tf__mw_put(node, e->mw);
			unexpose(s, len);
			return ret;
		}
		e->info.rkey = tf_mw_rkey(e->mw);
		e->pending = 1;
		s->n_exps++;
		e->live = true;
		STAT(node, windows_bound);
		STAT(node, windows_live);
		/* The key must not reach the peer before the window is
		 * bound, or its first access could race the bind. */
		ret = tf__sess_wait_internal(s);
		if (!ret && e->status != TF_WC_SUCCESS)
			ret = -EIO;
		if (ret) {
			tf__sess_set_broken(s, ret);
			return ret;
		}
	} else {
		ret = tf_mr_reg(node->pd, b->addr + off, len,
				TF_ACCESS_LOCAL_WRITE | rights, &e->mr);
		if (ret) {
			unexpose(s, len);
			return ret;
		}
		e->info.rkey = tf_mr_rkey(e->mr);
		s->n_exps++;
		e->live = true;
		STAT(node, expose_mr_fallback);
		STAT(node, windows_live);
	}
	s->revoked = false;
	if (!s->deferred) {
		/* Data sent before stays ahead of the EXPOSE (tf__sess_fence). */
		ret = tf__sess_fence(s);
		if (!ret)
			ret = send_exposures(s);
		if (ret)
			return ret;
	}
	*exp_p = idx;
	return 0;
}

int tf_session_peer_exposures(tf_session_t *s)
{
	if (!s)
		return -EINVAL;
	tf__sess_ctrl_step(s);
	return s->n_peer;
}

int tf_session_peer_exposure(tf_session_t *s, int exp, tf_exposure_info_t *info)
{
	if (!s || !info || exp < 0 || exp >= s->n_peer)
		return -EINVAL;
	*info = s->peer[exp];
	return 0;
}

int tf_session_local_exposure(tf_session_t *s, int exp,
			      tf_exposure_info_t *info)
{
	if (!s || !info || exp < 0 || exp >= s->n_exps)
		return -EINVAL;
	*info = s->exps[exp].info;
	return 0;
}

/* ------------------------------------------------------------ state */

int tf_session_state(tf_session_t *s)
{
	if (!s)
		return -EINVAL;
	/* Asked about the peer: the peer must know of the session. */
	tf__sess_open_flush(s, false);
	tf__sess_ctrl_step(s);
	/* Broken first: a session whose establish failed is broken, not
	 * still accepting (a server waiting for BROKEN would leak it).  But
	 * a peer that closed cleanly may tear its QP down right after its
	 * CLOSE (close is one-way): the error of our QP that follows is the
	 * end of the connection, not of the session. */
	if (s->broken)
		return TF_SESSION_BROKEN;
	if (s->deferred)
		return tf_qp_state(s->c->qp) == TF_QPS_ERR
			       ? TF_SESSION_BROKEN
			       : TF_SESSION_ACCEPTING;
	if (s->peer_closed)
		return TF_SESSION_PEER_CLOSED;
	if (tf_qp_state(s->c->qp) == TF_QPS_ERR)
		return TF_SESSION_BROKEN;
	return TF_SESSION_OPEN;
}

int tf_session_fd(const tf_session_t *s)
{
	return s ? tf__sess_wait_fd(s) : -EINVAL;
}

const void *tf_session_peer_priv(const tf_session_t *s, size_t *len_p)
{
	if (!s || !s->priv_len) {
		if (len_p)
			*len_p = 0;
		return NULL;
	}
	if (len_p)
		*len_p = s->priv_len;
	return s->priv;
}

int tf_session_reused(const tf_session_t *s)
{
	return s && s->reused;
}

int tf_session_granted(const tf_session_t *s)
{
	return s && s->granted;
}

void tf__sess_take_grant(struct tf_session *s, const struct tf_grant *g)
{
	struct tf_sess_buf *b = &s->bufs[0];
	struct tf_sess_exp *e = &s->exps[0];

	memset(b, 0, sizeof(*b));
	buf_from_slice(b, &g->slice, g->info.length);
	memset(e, 0, sizeof(*e));
	e->info = g->info;
	e->mw = g->mw;
	e->live = true;
	s->n_bufs = 1;
	s->n_exps = s->n_exps_sent = 1;
	s->exposed = g->info.length;
	s->granted = true;
}

tf_qp_t *tf_session_qp(tf_session_t *s)
{
	if (!s)
		return NULL;
	/* Work posted there is not ours to look at: the server must know
	 * of the session before any of it (a failure shows in its state). */
	tf__sess_open_flush(s, false);
	return s->c->qp;
}

/* ------------------------------------------------------ revoke, close */

/*
 * Server, before revoking: the client's SEND_WITH_INV went before its
 * CLOSE, on another QP (or the socket), so once the CLOSE is here that
 * SEND is here or on its way: look for a little while (the node's spin,
 * at least RINV_WAIT_US).  Without the CLOSE nothing is on its way.
 */
#define RINV_WAIT_US 10

static void rinv_wait(struct tf_session *s)
{
	const struct tf_config *cfg = &s->node->ctx->cfg;
	struct tf_backoff bo;

	if (tf__sess_reap(s, NULL, 0) < 0 || s->rinv_done || !s->peer_closed)
		return;
	tf__backoff_init(&bo,
			 cfg->poll_spin_us > RINV_WAIT_US ? cfg->poll_spin_us
							  : RINV_WAIT_US,
			 cfg->poll_spin_yield_us, -1);
	while (!s->rinv_done && tf__backoff_spin(&bo) == 0)
		if (tf__sess_reap(s, NULL, 0) < 0)
			return;
}

int tf_session_revoke(tf_session_t *s)
{
	struct tf_node *node;
	uint64_t t0 = tf__now_ns();
	bool qp_ok, missed = false;
	int ret = 0;

	if (!s)
		return -EINVAL;
	node = s->node;
	qp_ok = tf_qp_state(s->c->qp) == TF_QPS_RTS;
	/* Server: the client's SEND_WITH_INV of exposure 0 (the client's
	 * s->rinv is for its close). */
	if (s->server && s->rinv && !s->rinv_done && qp_ok)
		rinv_wait(s);
	if (s->server && s->rinv && !s->rinv_done) {
		/* Revoked here instead, by freeing the window: a LOCAL_INV
		 * would race the SEND_WITH_INV that may still be on its way,
		 * and fail when that came first.  The receive stays posted,
		 * and such a SEND_WITH_INV fails it and the QP (the sender
		 * gets its ACK): the connection ends with the session. */
		s->rinv = false;
		s->c->no_keep = true;
		missed = true;
		STAT(node, remote_inv_missed);
	}
	/* Invalidate every live window on the QP it was bound on; the
	 * invalidations are posted together and then awaited. */
	for (int i = 0; i < s->n_exps; i++) {
		struct tf_sess_exp *e = &s->exps[i];
		struct tf_send_wr wr = {.wr_id = WR_ID(WR_INT, i),
					.opcode = TF_WR_LOCAL_INV,
					.send_flags = TF_SEND_SIGNALED,
					.invalidate_rkey = e->info.rkey};

		if (!e->live || !e->mw || !qp_ok || (i == 0 && missed))
			continue;
		if (i == 0 && s->rinv_done) {
			/* The client's SEND_WITH_INV revoked it. */
			e->status = TF_WC_SUCCESS;
			STAT(node, remote_inv);
			continue;
		}
		e->status = TF_WC_GENERAL_ERR;
		if (tf_post_send(s->c->qp, &wr, NULL)) {
			qp_ok = false;
			continue;
		}
		e->pending++;
	}
	if (qp_ok)
		ret = tf__sess_wait_internal(s);
	for (int i = 0; i < s->n_exps; i++) {
		struct tf_sess_exp *e = &s->exps[i];

		if (!e->live)
			continue;
		if (e->mw) {
			/* A window whose invalidation did not succeed (QP in
			 * error, flushed, timed out) is freed instead:
			 * freeing a window revokes it too.  Such a QP is
			 * never reused. */
			if (i == 0 && missed && qp_ok) {
				/* Freed, not invalidated (above). */
				tf_mw_dealloc(e->mw);
			} else if (qp_ok && !e->pending &&
				   e->status == TF_WC_SUCCESS) {
				tf__mw_put(node, e->mw);
			} else {
				tf_mw_dealloc(e->mw);
				tf__sess_set_broken(s, -TF_EQPERR);
				if (!ret)
					ret = -TF_EQPERR;
			}
			e->mw = NULL;
			STAT(node, windows_revoked);
		} else if (e->mr) {
			tf_mr_dereg(e->mr);
			e->mr = NULL;
		}
		e->pending = 0;
		e->live = false;
		atomic_fetch_sub_explicit(&node->windows_live, 1,
					  memory_order_relaxed);
	}
	unexpose(s, s->exposed);
	s->revoked = true;
	STAT_ADD(node, revoke_ns, tf__now_ns() - t0);
	return ret;
}

/*
 * Client: the empty SEND_WITH_INV of the server's exposure 0, after all
 * this session's data on its QP, ahead of its CLOSE on the session's
 * channel (one channel, so that the server reads the CLOSE before the
 * next session's OPEN).  Nobody waits for its completion (a later
 * session's reap, or the QP's end, takes it).  0 or -errno.
 */
static int rinv_send(struct tf_session *s)
{
	struct tf_send_wr wr = {.wr_id = WR_ID(WR_INT, RINV_SLOT),
				.opcode = TF_WR_SEND_WITH_INV,
				.send_flags = TF_SEND_SIGNALED,
				.invalidate_rkey = s->peer[0].rkey};
	int ret = tf_post_send(s->c->qp, &wr, NULL);

	if (ret)
		tf_log_warn(S, "remote invalidation: %s", tf_strerror(ret));
	else
		STAT(s->node, remote_inv);
	return ret;
}

/* Wait for the caller's outstanding send work to complete. */
static void drain(struct tf_session *s)
{
	struct tf_backoff bo;

	tf__sess_backoff_init(&bo, s->node, s->node->timeout_ms);
	while (s->send_done != s->send_posted) {
		int r = tf__sess_reap(s, NULL, 0);

		if (r >= 0 && s->send_done == s->send_posted)
			break;
		if (r >= 0)
			r = tf__backoff_spin(&bo);
		if (r > 0)
			r = tf__sess_cq_sleep(s, &bo);
		if (r < 0) {
			tf__sess_set_broken(s, -ETIMEDOUT);
			return;
		}
	}
	/* Receives still posted would consume the next session's sends. */
	if (s->recv_done != s->recv_posted)
		s->c->broken = true;
}

/*
 * Whether the client that closed this session on the connection's socket
 * (its first session) has ended the connection too: its FIN is already
 * here.  A client that keeps no connections (TF_SESSION_NO_REUSE, or a
 * node without them) sends CLOSE and closes its socket at once; the
 * server then ends the connection now, without a CLOSE of its own that
 * nobody reads, and without keeping a socket only to find its end in
 * another wake-up while the client's next connection waits to be
 * accepted.  Sessions on the control QP are a kept connection's: their
 * client keeps it, and nobody looks.
 */
static bool peer_left(const struct tf_session *s)
{
	char b;

	return s->server && s->peer_closed &&
	       tf__sess_channel(s) == TF_WIRE_CH_SOCK &&
	       recv(s->c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void tf_session_close(tf_session_t *s)
{
	struct tf_node *node;
	struct tf_conn *c;
	bool keep, server;

	if (!s)
		return;
	node = s->node;
	c = s->c;
	server = s->server;
	tf_session_revoke(s);
	drain(s);
	/* What this side sent is placed at the peer before its CLOSE can
	 * arrive (a failure breaks the session: no CLOSE, no reuse). */
	if (!s->deferred && !s->broken)
		tf__sess_fence(s);
	/* Only now, with every window revoked and no work in flight, may
	 * the memory go back to the pool or the cache. */
	for (int i = 0; i < s->n_bufs; i++)
		release_buf(s, &s->bufs[i]);
	keep = node->qp_cache && !c->no_keep;
	if (!s->deferred && !s->broken && peer_left(s)) {
		keep = false;
	} else if (s->deferred) {
		/* Never established: the client gets a refusal. */
		struct tf_wire_msg m;

		tf__wire_init(&m, TF_WIRE_REJECT);
		tf__wire_put_u32(&m, ECONNREFUSED);
		/* The connection is destroyed below: a REJECT on the control
		 * QP must leave before its QP goes. */
		if (!tf__wire_finish(&m) && !tf__sess_ctl_send(s, &m, 100) &&
		    s->qctl)
			tf__ctl_flush(c, 100);
		c->broken = true;
	} else if (!s->broken) {
		struct tf_wire_msg m;
		bool rinv = !server && s->rinv && !s->peer_closed;

		/* A server that closed first revoked its exposure 0 itself
		 * (no SEND_WITH_INV then) and ends the connection. */
		if (!server && s->rinv && s->peer_closed)
			keep = false;
		/* One-way: tell the peer and go.  This side's keys are revoked
		 * already; the peer revokes its own when it closes, which is
		 * its business (tf_session_close(3)), or its device revokes
		 * exposure 0 as the SEND_WITH_INV ahead of the CLOSE arrives
		 * (TF_SESSION_REMOTE_INV). */
		tf__wire_init(&m, TF_WIRE_CLOSE);
		/* A connection that ends with the session closes its socket
		 * below: a CLOSE sent there leaves with the FIN. */
		c->fin_next = !keep;
		if (s->open_due) {
			/* The OPEN it deferred is its CLOSE too: one
			 * message for the session (no rinv on a grant). */
			if (tf__sess_open_flush(s, true))
				tf__sess_set_broken(s, -EPIPE);
		} else if ((rinv && rinv_send(s)) || tf__wire_finish(&m) ||
			   tf__sess_ctl_send(s, &m, node->timeout_ms)) {
			tf__sess_set_broken(s, -EPIPE);
		}
		c->fin_next = false;
	}
	keep = keep && !c->broken && !s->n_stash &&
	       tf_qp_state(c->qp) == TF_QPS_RTS &&
	       (!c->ctl.ready || tf_qp_state(c->ctl.qp) == TF_QPS_RTS);
	/* The peer's CLOSE of this session is still due: whoever reads the
	 * connection next consumes it. */
	if (keep && !s->peer_closed)
		c->close_due[tf__sess_channel(s)]++;
	atomic_fetch_sub(&node->n_sessions, 1);
	/* Revoked above: only the session itself is still counted. */
	if (s->pe)
		tf__peers_session_put(node, s->pe);
	if (s->opened)
		STAT(node, sessions_closed);
	/* A kept connection keeps this session's memory for its next
	 * session (and frees it with itself); @s is not touched after. */
	if (keep)
		c->spare = s;
	else
		tf__sess_free_mem(s);
	if (server) {
		struct tf_listener *l = c->l;

		c->l = NULL;
		if (keep)
			tf__listener_keep(l, c);
		else
			tf__listener_drop_conn(l, c);
		tf__listener_put(l);
	} else if (keep) {
		tf__node_keep(node, c);
	} else {
		tf__conn_destroy(c);
	}
}

/* ------------------------------------------------------------ aliases */

/* The clearer name of tf_session_peer_exposures (one letter away from
 * tf_session_peer_exposure, which describes one exposure). */
int tf_session_peer_count(tf_session_t *s)
{
	return tf_session_peer_exposures(s);
}
