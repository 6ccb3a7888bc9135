/* SPDX-License-Identifier: MIT */
/*
 * grant.c - a listener's grants: windows bound ahead of a session on a
 * kept connection, whose keys the client holds before it opens one
 * (tf_listener_params_t.grant_len, tollfree(7) GRANTS).
 *
 * A grant is a type-2 window over a fresh pool slice (zeroed if the peer
 * may read it), bound to the connection's QP: only that QP's peer reaches
 * it, and nothing of the server's is in it.  It is made when a session on
 * the connection ended and the connection is kept (tf__listener_keep),
 * off the client's path as long as the client holds another one, and
 * sent in a GRANT message on the control QP.  An OPEN that names it moves
 * it into the new session (tf__sess_take_grant), which revokes it at
 * close like any exposure; grants never taken are freed with their
 * connection (tf__conn_grants_drop), which revokes them.
 */
#include <errno.h>
#include <string.h>

#include "session_int.h"

#define S TF_SESS_SUBSYS
#define STAT(_n, _f) \
	atomic_fetch_add_explicit(&(_n)->_f, 1, memory_order_relaxed)

/* The bind's wr_id: an internal one that no session slot uses. */
#define GRANT_WR_ID WR_ID(WR_INT, (1ull << 56) - 1)

/* Bind @g->mw over @g->slice on @c's QP and wait for it: the key must not
 * reach the peer before the window is bound.  The connection is idle:
 * nothing else is outstanding on its CQ. */
static int grant_bind(struct tf_conn *c, struct tf_grant *g, size_t len,
		      uint32_t rights)
{
	struct tf_send_wr wr = {
		.wr_id = GRANT_WR_ID,
		.opcode = TF_WR_BIND_MW,
		.send_flags = TF_SEND_SIGNALED,
		.wr.bind_mw = {.mw = g->mw,
			       .mr = g->slice.mr,
			       .addr = (uintptr_t)g->slice.addr,
			       .length = len,
			       .access = rights},
	};
	struct tf_backoff bo;
	struct tf_wc wc;
	int ret;

	ret = tf_post_send(c->qp, &wr, NULL);
	if (ret)
		return ret;
	tf__sess_backoff_init(&bo, c->node, c->node->timeout_ms);
	for (;;) {
		ret = tf_cq_poll(c->cq, 1, &wc);
		if (ret < 0)
			return ret;
		if (ret)
			break;
		ret = tf__backoff(&bo);
		if (ret < 0)
			return ret;
	}
	if (wc.wr_id != GRANT_WR_ID || wc.status != TF_WC_SUCCESS) {
		tf_log_warn(S, "grant: window bind failed (status %d)",
			    (int)wc.status);
		return -EIO;
	}
	return 0;
}

/* Make one grant on @c and send it.  0, or -errno: -ENOMEM (pool or
 * windows: the connection stays as it is), others break it. */
static int grant_make(struct tf_listener *l, struct tf_conn *c)
{
	struct tf_node *node = l->node;
	struct tf_grant *g = &c->grants[c->n_grants];
	struct tf_wire_msg m;
	int ret;

	memset(g, 0, sizeof(*g));
	ret = tf_pool_rent(node->pool, l->grant_len, &g->slice);
	if (ret)
		return ret;
	/* A slice held another session's data: a peer that may read it
	 * (atomics read too) sees zeros. */
	if (l->grant_rights & (TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_ATOMIC))
		memset(g->slice.addr, 0, l->grant_len);
	g->mw = tf__mw_get(node);
	if (!g->mw) {
		ret = -ENOMEM;
		goto err_slice;
	}
	ret = grant_bind(c, g, l->grant_len, l->grant_rights);
	if (ret) {
		/* Bound or not, freeing the window revokes it. */
		tf_mw_dealloc(g->mw);
		goto err_slice;
	}
	if (!++c->last_grant)
		c->last_grant = 1;
	g->id = c->last_grant;
	g->info.addr = (uintptr_t)g->slice.addr;
	g->info.length = l->grant_len;
	g->info.rkey = tf_mw_rkey(g->mw);
	g->info.rights = l->grant_rights;
	c->n_grants++;
	atomic_fetch_add_explicit(&node->slices_rented, 1,
				  memory_order_relaxed);
	STAT(node, windows_bound);
	STAT(node, windows_live);
	STAT(node, grants_made);
	tf__wire_put_grant(&m, g->id, &g->info);
	ret = tf__wire_finish(&m);
	if (!ret)
		ret = tf__conn_send(c, TF_WIRE_CH_CTL, &m, node->timeout_ms);
	/* Not sent: the grant stays with the connection, which fails and
	 * frees it. */
	return ret;

err_slice:
	tf_pool_return(node->pool, &g->slice);
	g->mw = NULL;
	return ret;
}

void tf__listener_grant(struct tf_listener *l, struct tf_conn *c)
{
	int ret = 0;

	if (!l->grant_len || !c->ctl.ready || !l->node->use_mw || c->broken)
		return;
	/* A GRANT never waits for a send slot: a client that does not
	 * take in what it is sent (a soft transport needs its progress)
	 * must not hold up the server's close, which serves the others.
	 * One slot stays free for the next session's answer; the grants
	 * not sent now are made at the next keep. */
	while (c->n_grants < l->grant_depth && tf__ctl_send_room(c) > 1) {
		ret = grant_make(l, c);
		if (ret)
			break;
	}
	if (!ret)
		return;
	if (ret == -ENOMEM) {
		/* The session goes on as before: its OPEN waits for the
		 * ACCEPT.  Grants come back when the pool has room. */
		tf_log_debug(S, "grant: no room for another (%s)",
			     tf_strerror(ret));
		return;
	}
	tf_log_warn(S, "grant: %s; the connection ends", tf_strerror(ret));
	c->broken = true;
}

_Static_assert(TF_LISTENER_MAX_GRANT_DEPTH <= TF_WIRE_MAX_GRANTS,
	       "a client must be able to hold every grant a listener sends");
