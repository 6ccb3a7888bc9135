/* SPDX-License-Identifier: MIT */
/*
 * connect.c - the client side of the bootstrap handshake: a new
 * connection, or the next session on a kept one.  The client blocks,
 * with the node timeout on every read.
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

/* A TCP connection to @a within the node timeout: 0 or -errno (not
 * logged: the caller may try the host's next address). */
static int connect_tcp(struct tf_node *node, const struct tf_sess_addr *a,
		       int *fd_p)
{
	struct pollfd pfd;
	socklen_t el = sizeof(int);
	int fd, err = 0, r;

	/* TOLLFREE_SESSION_SOURCE_ADDR: an address of the other family
	 * cannot be reached from it. */
	if (node->src_len && node->src.ss_family != a->sa.ss_family)
		return -EAFNOSUPPORT;
	/* Made ahead by the last connect, with its options (never with a
	 * source address). */
	fd = tf__node_sock_take(node, a->sa.ss_family);
	if (fd < 0) {
		fd = socket(a->sa.ss_family,
			    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		tf__conn_sock_opts(fd);
	}
	if (node->src_len &&
	    bind(fd, (const struct sockaddr *)&node->src, node->src_len)) {
		err = -errno;
		goto err_close;
	}
	if (connect(fd, (const struct sockaddr *)&a->sa, a->len) &&
	    errno != EINPROGRESS) {
		err = -errno;
		goto err_close;
	}
	pfd.fd = fd;
	pfd.events = POLLOUT;
	do {
		r = poll(&pfd, 1, node->timeout_ms);
	} while (r < 0 && errno == EINTR);
	if (r <= 0) {
		err = r ? -errno : -ETIMEDOUT;
		goto err_close;
	}
	/* A failed connect reports POLLERR (and POLLHUP once closed): only
	 * then is there an error to fetch. */
	if ((pfd.revents & (POLLERR | POLLHUP | POLLNVAL)) &&
	    !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && err) {
		err = -err;
		goto err_close;
	}
	*fd_p = fd;
	return 0;
err_close:
	close(fd);
	return err;
}

/* The server's REJECT in c->rx, as its error (logged), or 0 for any
 * other message. */
static int server_refused(struct tf_conn *c)
{
	struct tf_wire_reject rej;
	tf_caps_t caps;

	if (c->rx.h.op != TF_WIRE_REJECT)
		return 0;
	if (tf__wire_parse_reject(&c->rx, &rej))
		rej.err = -TF_EWIRE;
	/* The server could not open what this side sealed: the keys
	 * differ (an early OPEN's, before any proof), or it was changed. */
	if (rej.err == -TF_EAUTH)
		STAT(c->node, auth_failures);
	/* The server's bounds (tollfree(7)): say which. */
	if (rej.err == -EUSERS || rej.err == -EBUSY) {
		tf_log_warn(S, "server refused the session: %s (%s)",
			    tf_strerror(rej.err),
			    rej.err == -EUSERS
				    ? "this client's address has as many "
				      "sessions there as the server allows "
				      "one address, "
				      "TOLLFREE_SESSION_MAX_SESSIONS_PEER"
				    : "the server is full: as many sessions "
				      "or handshakes as it serves at once");
		return rej.err;
	}
	if (rej.err != -TF_EPEER ||
	    tf_context_query_caps(c->node->ctx, &caps)) {
		tf_log_warn(S, "server refused the session: %s",
			    tf_strerror(rej.err));
		return rej.err;
	}
	/* The server's provider refused our QP address: "does not match
	 * this provider" speaks of the server's side, and only its log
	 * says more.  Say what each side runs, where the server said. */
	if (rej.provider[0])
		tf_log_warn(S,
			    "server refused the session: it could not "
			    "connect its queue pair to this side's (server: "
			    "provider %s, transport %s; this side: provider "
			    "%s, transport %s): %s",
			    rej.provider, rej.transport, caps.provider,
			    caps.transport,
			    strcmp(rej.provider, caps.provider)
				    ? "the providers differ"
				    : "no transport in common, or this "
				      "side's address is unreachable from "
				      "the server");
	else
		tf_log_warn(S,
			    "server refused the session: it could not "
			    "connect its queue pair to this side's (this "
			    "side: provider %s, transport %s): different "
			    "providers, no transport in common, or an "
			    "address the server cannot reach (its log says "
			    "which)",
			    caps.provider, caps.transport);
	return rej.err;
}

/* Connect a new connection's QP (and control QP, or drop ours) to the
 * server's, from its ADDR or ACCEPT. */
static int connect_to_server(struct tf_conn *c,
			     const struct tf_wire_accept *acc)
{
	int ret;

	if (acc->ctl_len && !c->ctl.qp) {
		tf_log_warn(S, "handshake: malformed %s",
			    tf__wire_op_name(c->rx.h.op));
		return -TF_EWIRE;
	}
	c->id = acc->conn_id;
	ret = tf_qp_connect(c->qp, acc->blob, acc->blob_len);
	if (ret) {
		tf_log_warn(S, "server QP address refused: %s",
			    tf_strerror(ret));
		return ret;
	}
	/* The server connected a control QP to ours (and will expect the
	 * next session's OPEN there), or has none. */
	if (acc->ctl_len)
		return tf__ctl_connect(c, acc->ctl, acc->ctl_len);
	tf__ctl_destroy(c);
	return 0;
}

/*
 * Receive the server's answer to OPEN: ACCEPT (into @s) or REJECT.  On a
 * new connection an ADDR may come first: the QPs are connected while the
 * server connects its own, and its answer follows.
 */
static int client_accept(struct tf_session *s, bool reused)
{
	struct tf_conn *c = s->c;
	struct tf_wire_accept acc;
	bool addr = false;
	int addr_err = 0, ret;

next:
	/* The CLOSE of the previous session on this connection may come
	 * first, if this side closed it before the server did. */
	do {
		tf__wire_rx_reset(&c->rx);
		if (s->qctl)
			ret = tf__ctl_wait(c, &c->rx, s->node->timeout_ms);
		else
			ret = tf__wire_recv_spin(
				c->fd, &c->rx, s->node->ctx->cfg.poll_spin_us,
				s->node->ctx->cfg.poll_spin_yield_us,
				s->node->timeout_ms, 0);
		if (ret < 0)
			return addr_err ? addr_err : ret;
		ret = tf__conn_open(c, tf__sess_channel(s));
		if (ret)
			return ret;
		ret = tf__conn_aside(c, tf__sess_channel(s), &c->rx);
		if (ret < 0)
			return ret;
	} while (ret);
	ret = server_refused(c);
	if (ret)
		return ret;
	/* The server's QP that this side could not connect to: the
	 * server's answer says more if it could not either (a REJECT). */
	if (addr_err)
		return addr_err;
	if (c->rx.h.op == TF_WIRE_ADDR && !reused && !addr) {
		ret = tf__wire_parse_addr(&c->rx, &acc);
		if (ret)
			return ret;
		addr_err = connect_to_server(c, &acc);
		addr = true;
		/* The server connects its QPs and makes its answer. */
		tf__stock_refill(c->node);
		tf__node_sock_ahead(c->node, c->peer.ss_family);
		goto next;
	}
	/* The handshake ends with its answer. */
	tf__transcript_free(c->ts);
	c->ts = NULL;
	ret = tf__wire_parse_accept(&c->rx, &acc);
	if (ret)
		return ret;
	/* A kept connection's ACCEPT, and one after an ADDR, names the
	 * connection and carries no QP; a new one's carries the QP. */
	if ((reused || addr) != !acc.blob_len ||
	    ((reused || addr) && (acc.conn_id != c->id || acc.ctl_len))) {
		tf_log_warn(S, "handshake: malformed ACCEPT");
		return -TF_EWIRE;
	}
	/* Only asked for, and then of exposure 0 (the parser checked that
	 * there is one). */
	if ((acc.flags & TF_WIRE_ACCEPT_RINV) && !s->rinv_asked) {
		tf_log_warn(S, "handshake: ACCEPT agrees to a remote "
			       "invalidation nobody asked for");
		return -TF_EWIRE;
	}
	s->rinv = acc.flags & TF_WIRE_ACCEPT_RINV;
	ret = tf__sess_add_exposures(s, &acc.exps);
	if (ret)
		return ret;
	if (!reused && !addr) {
		ret = connect_to_server(c, &acc);
		if (ret)
			return ret;
		/* This side expected an ADDR and refills after it
		 * (connect_new): a server that sent none still gets the
		 * refill, or this node's stock would only drain. */
		if (c->node->early_addr) {
			tf__stock_refill(c->node);
			tf__node_sock_ahead(c->node, c->peer.ss_family);
		}
	}
	tf__wire_rx_reset(&c->rx);
	return 0;
}

/* The fields of an OPEN after its connection id: the client's QP and
 * control QP (a new connection; empty on a kept one) and the private
 * data.  They travel in the HELLO without a key, in the sealed OPEN with
 * one, and alone in the OPEN of a kept connection. */
static void put_open_fields(struct tf_wire_msg *m, const void *priv,
			    size_t priv_len, const uint8_t *blob,
			    size_t blob_len, const uint8_t *ctl, size_t ctl_len,
			    uint32_t grant, uint8_t flags)
{
	tf__wire_put_u16(m, (uint16_t)blob_len);
	tf__wire_put_bytes(m, blob, blob_len);
	tf__wire_put_u16(m, (uint16_t)priv_len);
	if (priv_len)
		tf__wire_put_bytes(m, priv, priv_len);
	tf__wire_put_u16(m, (uint16_t)ctl_len);
	tf__wire_put_bytes(m, ctl, ctl_len);
	tf__wire_put_u32(m, grant);
	tf__wire_put_u8(m, flags);
}

/* The private data of @params, if any. */
static const void *params_priv(const tf_session_params_t *params, size_t *len_p)
{
	*len_p = 0;
	if (!params || !(params->field_mask & TF_SESSION_PARAM_PRIV))
		return NULL;
	*len_p = params->priv_len;
	return params->priv;
}

/* An OPEN's flags: a grant's OPEN is not answered, so nobody could agree
 * to a remote invalidation there. */
static uint8_t open_flags(const tf_session_params_t *params, uint32_t grant)
{
	return tf__sess_flag(params, TF_SESSION_REMOTE_INV) && !grant
		       ? TF_WIRE_OPEN_RINV
		       : 0;
}

static void put_open(struct tf_wire_msg *m, const tf_session_params_t *params,
		     const uint8_t *blob, size_t blob_len, const uint8_t *ctl,
		     size_t ctl_len, uint32_t grant)
{
	size_t priv_len;
	const void *priv = params_priv(params, &priv_len);

	put_open_fields(m, priv, priv_len, blob, blob_len, ctl, ctl_len, grant,
			open_flags(params, grant));
}

/* The OPEN of a session on a kept connection. */
static int send_open(struct tf_session *s, const void *priv, size_t priv_len,
		     uint32_t grant, uint8_t flags)
{
	struct tf_wire_msg m;
	int ret;

	tf__wire_init(&m, TF_WIRE_OPEN);
	tf__wire_put_u32(&m, s->c->id);
	put_open_fields(&m, priv, priv_len, NULL, 0, NULL, 0, grant, flags);
	ret = tf__wire_finish(&m);
	if (ret)
		return ret;
	return tf__sess_ctl_send(s, &m, s->node->timeout_ms);
}

int tf__sess_open_send(struct tf_session *s, bool closed)
{
	int ret;

	s->open_due = false;
	if (s->broken)
		return -ENOTCONN;
	ret = send_open(s, s->open_priv, s->open_priv_len, s->open_grant,
			closed ? TF_WIRE_OPEN_CLOSED : 0);
	if (ret)
		tf__sess_set_broken(s, ret);
	return ret;
}

/*
 * With a key: receive the server's CHALLENGE, derive the connection's
 * keys and check the server's proof before anything else is said (the
 * HELLO already joined the transcript).
 */
static int client_challenge(struct tf_conn *c, bool early, bool *taken_p)
{
	struct tf_node *node = c->node;
	uint8_t fin[TF_WIRE_MAC], th[TF_WIRE_HASH], want[TF_WIRE_MAC];
	struct tf_wire_challenge ch;
	int ret;

	/* After an early OPEN the server's ACCEPT may follow its CHALLENGE
	 * in the same write: its fixed header comes with the CHALLENGE's
	 * body, in one recv.  No more: a message sealed under the keys has
	 * a body, so what is read ahead is never a whole message, and it is
	 * the first thing client_accept reads. */
	ret = tf__wire_recv_spin(c->fd, &c->rx, node->ctx->cfg.poll_spin_us,
				 node->ctx->cfg.poll_spin_yield_us,
				 node->timeout_ms,
				 early ? TF_WIRE_HDR_SIZE : 0);
	if (ret < 0)
		return ret;
	ret = server_refused(c);
	if (ret)
		return ret;
	ret = tf__wire_parse_challenge(&c->rx, &ch);
	if (ret)
		return ret;
	if (ch.early && !early) {
		tf_log_warn(S, "handshake: CHALLENGE takes an early OPEN "
			       "this side did not send");
		return -TF_EWIRE;
	}
	memcpy(c->nonce_s, ch.nonce, TF_WIRE_NONCE);
	ret = tf__keys_derive(node->psk, node->psk_len, c->nonce_c, c->nonce_s,
			      false, fin, tf__node_keys_spare(node), &c->keys);
	/* The CHALLENGE up to its proof: header, nonce and flags. */
	if (!ret)
		ret = tf__transcript_add(c->ts, c->rx.hdr, c->rx.h.hdr_size);
	if (!ret)
		ret = tf__transcript_add(c->ts, c->rx.body,
					 (size_t)(ch.mac - c->rx.body));
	if (!ret)
		ret = tf__transcript_hash(c->ts, th);
	if (!ret)
		ret = tf__proof_make(fin, th, want);
	memset(fin, 0, sizeof(fin));
	if (ret)
		return ret;
	if (!tf__proof_equal(ch.mac, want)) {
		/* Either side may hold the wrong key, or a relay changed
		 * the exchange: nothing more goes to this server. */
		tf_log_warn(S, "handshake: the server's key proof does not "
			       "match this node's pre-shared key (the keys "
			       "differ, or the handshake was changed on the "
			       "way)");
		STAT(node, auth_failures);
		return -TF_EAUTH;
	}
	ret = tf__transcript_add(c->ts, ch.mac, TF_WIRE_MAC);
	tf__wire_rx_reset(&c->rx);
	if (early && ch.early)
		STAT(node, psk_early);
	else if (early)
		STAT(node, psk_early_refused);
	*taken_p = ch.early;
	return ret;
}

/*
 * With a key and TOLLFREE_SESSION_PSK_EARLY_WINDOW_MS: the HELLO @m (in
 * the transcript already) and, behind it in one write, the OPEN @open
 * sealed with the early keys (in c->keys: tf__node_early_take; given back
 * to the node here), its tag covering the HELLO.
 */
static int send_early(struct tf_conn *c, const struct tf_wire_msg *m,
		      struct tf_wire_msg *open)
{
	struct tf_node *node = c->node;
	struct tf_sess_keys *ek = c->keys;
	int ret = -EMSGSIZE;

	if (m->len <= sizeof(c->pre)) {
		memcpy(c->pre, m->buf, m->len);
		c->pre_len = m->len;
		ret = tf__conn_send(c, TF_WIRE_CH_SOCK, open, node->timeout_ms);
	}
	c->keys = NULL;
	c->pre_len = 0;
	tf__node_early_put(node, ek);
	return ret;
}

/*
 * Read what came on an idle kept connection's control QP: the CLOSE of
 * its last session and the listener's GRANTs.  Anything else (an EXPOSE
 * the server made after this side closed) fails the connection, and the
 * caller makes another.  0 or -errno.
 */
static int take_aside(struct tf_conn *c)
{
	for (;;) {
		int ret = tf__ctl_next(c, &c->rx);

		if (ret <= 0)
			return ret;
		ret = tf__conn_open(c, TF_WIRE_CH_CTL);
		if (!ret)
			ret = tf__conn_aside(c, TF_WIRE_CH_CTL, &c->rx);
		if (!ret) {
			tf_log_debug(S, "kept connection: unexpected %s",
				     tf__wire_op_name(c->rx.h.op));
			ret = -TF_EWIRE;
		}
		tf__wire_rx_reset(&c->rx);
		if (ret < 0)
			return ret;
	}
}

/*
 * Open @s on the oldest grant @c holds: the OPEN names it and the
 * session is open as it leaves, with the grant as the server's exposure
 * 0.  A connection idle for a while is asked first whether the server
 * still has it (its socket), since nothing answers this OPEN.
 */
static int open_granted(struct tf_session *s, const tf_session_params_t *params)
{
	struct tf_conn *c = s->c;
	struct tf_grant g;
	size_t priv_len;
	const void *priv = params_priv(params, &priv_len);
	int ret;

	if (tf__now_ns() - c->kept_ns > TF_CTL_SOCKET_CHECK_NS) {
		ret = tf__ctl_tcp_check(c);
		if (ret)
			return ret;
	}
	g = tf__conn_grant_take(c, 0);
	if (tf__sess_flag(params, TF_SESSION_DEFER_OPEN)) {
		/* Sent when the session first needs the server (or with
		 * its close): tf__sess_open_flush. */
		if (priv_len)
			memcpy(s->open_priv, priv, priv_len);
		s->open_priv_len = priv_len;
		s->open_grant = g.id;
		s->open_due = true;
		STAT(s->node, opens_deferred);
	} else {
		ret = send_open(s, priv, priv_len, g.id, 0);
		if (ret)
			return ret;
	}
	s->peer[0] = g.info;
	s->n_peer = 1;
	s->granted = true;
	STAT(s->node, grants_taken);
	return 0;
}

/* Open a session on a kept connection; on failure the connection is
 * destroyed and the caller makes a new one, unless the server answered
 * with a REJECT (*@refused_p): the server's application refused this
 * session, and asking again on another connection would repeat it. */
static int connect_reused(struct tf_node *node, struct tf_conn *c,
			  const tf_session_params_t *params,
			  struct tf_session **s_p, bool *refused_p)
{
	struct tf_session *s;
	int ret;

	*refused_p = false;
	if (tf_qp_state(c->qp) != TF_QPS_RTS ||
	    (c->ctl.ready && tf_qp_state(c->ctl.qp) != TF_QPS_RTS)) {
		c->broken = true;
		tf__conn_destroy(c);
		return -TF_EQPERR;
	}
	ret = tf__sess_new(node, c, false, &s);
	if (ret) {
		tf__conn_destroy(c);
		return ret;
	}
	s->reused = true;
	s->qctl = c->ctl.ready;
	s->rinv_asked = tf__sess_flag(params, TF_SESSION_REMOTE_INV);
	ret = s->qctl ? take_aside(c) : 0;
	if (!ret && c->n_grants) {
		ret = open_granted(s, params);
	} else if (!ret) {
		size_t priv_len;
		const void *priv = params_priv(params, &priv_len);

		ret = send_open(s, priv, priv_len, 0, open_flags(params, 0));
		if (!ret)
			ret = client_accept(s, true);
	}
	if (ret) {
		*refused_p = c->rx.have_hdr && c->rx.h.op == TF_WIRE_REJECT;
		s->broken = true;
		c->broken = true;
		tf_session_close(s);
		return ret;
	}
	STAT(node, qp_reused);
	*s_p = s;
	return 0;
}

/*
 * Connect to the first address of @host that accepts, in the resolver's
 * order; *@i_p receives its index.  A host name may have several
 * addresses (localhost: ::1 and 127.0.0.1) and the listener may be on
 * one only, so only the last failure is worth a warning.
 */
static int connect_first(struct tf_node *node, const char *host, uint16_t port,
			 const struct tf_sess_addrs *addrs, int *i_p, int *fd_p)
{
	char as[INET6_ADDRSTRLEN];
	int ret = -EHOSTUNREACH;

	for (int i = 0; i < addrs->n; i++) {
		ret = connect_tcp(node, &addrs->a[i], fd_p);
		if (!ret) {
			*i_p = i;
			return 0;
		}
		tf__sess_addr_str(&addrs->a[i], as, sizeof(as));
		if (i + 1 < addrs->n)
			tf_log_debug(S,
				     "cannot connect to %s (%s) port %u: %s; "
				     "trying its next address",
				     host, as, port, tf_strerror(ret));
		else if (!strcmp(host, as))
			tf_log_warn(S,
				    "cannot connect to the listener at %s "
				    "port %u: %s",
				    host, port, tf_strerror(ret));
		else
			tf_log_warn(S,
				    "cannot connect to the listener at %s "
				    "(%s) port %u: %s",
				    host, as, port, tf_strerror(ret));
	}
	return ret;
}

/* The connection's data QP (from the stock, else made) and, if it may be
 * kept, its control QP; their addresses into @blob and @ctl. */
static int connect_qps(struct tf_node *node, struct tf_conn *c,
		       const tf_session_params_t *params, bool no_reuse,
		       uint8_t *blob, size_t *blob_len, uint8_t *ctl,
		       size_t *ctl_len)
{
	uint32_t sd = 256, rd = 256;
	size_t cap = *ctl_len;
	int ret;

	if (params && (params->field_mask & TF_SESSION_PARAM_QP)) {
		sd = params->max_send_wr;
		rd = params->max_recv_wr;
	}
	ret = tf__conn_new_qp(node, c, sd, rd, node->qp_cache && !no_reuse);
	if (!ret)
		ret = tf_qp_get_addr(c->qp, blob, blob_len);
	if (ret)
		return ret;
	/* A control QP for the sessions after this one, if the connection
	 * may be kept; without one they use the socket. */
	*ctl_len = 0;
	if (node->qp_cache && !no_reuse && !tf__ctl_create(node, c)) {
		*ctl_len = cap;
		if (tf_qp_get_addr(c->ctl.qp, ctl, ctl_len)) {
			tf__ctl_destroy(c);
			*ctl_len = 0;
		}
	}
	return 0;
}

static int connect_new(struct tf_node *node, const char *host, uint16_t port,
		       const struct tf_sess_addrs *addrs,
		       const tf_session_params_t *params, bool no_reuse,
		       struct tf_session **s_p)
{
	const struct tf_sess_addr *a;
	uint8_t blob[TF_QP_ADDR_MAX], ctl[TF_QP_ADDR_MAX];
	size_t blob_len = sizeof(blob), ctl_len = sizeof(ctl);
	bool auth = node->psk_len != 0;
	bool early = auth && node->replay.window_ns != 0;
	bool taken = false;
	struct tf_wire_msg m, om;
	struct tf_session *s;
	struct tf_conn *c;
	int fd = -1, i = 0, ret;

	c = tf__conn_alloc(node, -1);
	if (!c)
		return -ENOMEM;
	c->hs = TF_CONN_BUSY;
	c->client = true;
	ret = early ? tf__node_early_take(node, c->nonce_c, &c->keys)
		    : tf__random_buffered(c->nonce_c, TF_WIRE_NONCE);
	if (!ret && auth)
		ret = tf__transcript_new(&c->ts);
	/* Without a key the HELLO carries the QPs: they are made before the
	 * TCP connection, so that the HELLO follows it at once (a listener
	 * gives a connection TOLLFREE_SESSION_HELLO_TIMEOUT_MS for it, and a
	 * cold QP on a slow device can take longer).  With a key the HELLO
	 * goes first, alone, and the QPs are made while the server
	 * answers; with an early OPEN, they are in it. */
	if (!ret && (!auth || early))
		ret = connect_qps(node, c, params, no_reuse, blob, &blob_len,
				  ctl, &ctl_len);
	if (!ret)
		ret = connect_first(node, host, port, addrs, &i, &fd);
	if (ret)
		goto err_conn;
	c->fd = fd;
	a = &addrs->a[i];
	/* Kept under the address that answered: the next session to any
	 * name of that address finds it (tf__node_take). */
	memcpy(&c->peer, &a->sa, sizeof(c->peer));
	c->peer_len = a->len;
	if (auth) {
		tf__wire_init(&m, TF_WIRE_HELLO);
		tf__wire_put_bytes(&m, c->nonce_c, TF_WIRE_NONCE);
		tf__wire_put_u8(&m, TF_WIRE_HELLO_AUTH |
					    (early ? TF_WIRE_HELLO_EARLY : 0));
		if (early)
			tf__wire_put_u64(&m, tf__realtime_ns());
		ret = tf__wire_finish(&m);
		if (!ret)
			ret = tf__transcript_add_msg(c->ts, &m);
		if (!ret && early) {
			tf__wire_init(&om, TF_WIRE_OPEN);
			tf__wire_put_u32(&om, 0);
			put_open(&om, params, blob, blob_len, ctl, ctl_len, 0);
			ret = tf__wire_finish(&om);
			if (!ret)
				ret = send_early(c, &m, &om);
			/* The server checks the key and the nonce, and
			 * makes its answer: time for the next connect's
			 * stock entry and keys. */
			if (!ret && !node->early_addr)
				tf__stock_refill(node);
		} else if (!ret) {
			ret = tf__wire_send(fd, &m, node->timeout_ms);
			if (!ret)
				ret = connect_qps(node, c, params, no_reuse,
						  blob, &blob_len, ctl,
						  &ctl_len);
		}
		if (!ret)
			tf__node_keys_ahead(node);
		if (!ret && !node->early_addr)
			tf__node_sock_ahead(node, a->sa.ss_family);
		if (!ret)
			ret = client_challenge(c, early, &taken);
		if (ret)
			goto err_conn;
		if (taken)
			goto answer;
		tf__wire_init(&m, TF_WIRE_OPEN);
		tf__wire_put_u32(&m, 0);
	} else {
		tf__wire_init(&m, TF_WIRE_HELLO);
		tf__wire_put_bytes(&m, c->nonce_c, TF_WIRE_NONCE);
		tf__wire_put_u8(&m, 0);
	}
	put_open(&m, params, blob, blob_len, ctl, ctl_len, 0);
	ret = tf__wire_finish(&m);
	if (!ret)
		ret = tf__conn_send(c, TF_WIRE_CH_SOCK, &m, node->timeout_ms);
	if (ret)
		goto err_conn;
	/* The server works on its answer: time to make the stock's next
	 * entry, if it is made inline, and the next connect's socket.  Where
	 * the server sends its QPs ahead, after connecting ours to them
	 * instead (client_accept): a refill (QP and CQ creation, on a
	 * device) would delay that. */
	if (!node->early_addr && !early) {
		tf__stock_refill(node);
		tf__node_sock_ahead(node, a->sa.ss_family);
	}
answer:
	ret = tf__sess_new(node, c, false, &s);
	if (ret)
		goto err_conn;
	s->rinv_asked = tf__sess_flag(params, TF_SESSION_REMOTE_INV);
	ret = client_accept(s, false);
	if (ret) {
		s->broken = true;
		c->broken = true;
		tf_session_close(s);
		return ret;
	}
	*s_p = s;
	return 0;

err_conn:
	c->broken = true;
	tf__conn_destroy(c);
	return ret;
}

int tf_session_connect(tf_node_t *node, const char *host, uint16_t port,
		       const tf_session_params_t *params, tf_session_t **s_p)
{
	bool no_reuse = tf__sess_flag(params, TF_SESSION_NO_REUSE);
	struct tf_sess_addrs addrs;
	struct tf_session *s;
	struct tf_conn *c;
	int ret;

	if (!node || !host || !s_p)
		return -EINVAL;
	if (params && (params->field_mask & TF_SESSION_PARAM_PRIV) &&
	    (params->priv_len > TF_SESSION_MAX_PRIV ||
	     (params->priv_len && !params->priv)))
		return -EINVAL;
	if (params && (params->field_mask & TF_SESSION_PARAM_QP) &&
	    (!params->max_send_wr || !params->max_recv_wr))
		return -EINVAL;
	ret = tf__sess_resolve(host, port, &addrs);
	if (ret) {
		if (ret != -EINVAL)
			STAT(node, connect_failures);
		return ret;
	}
	/* A kept connection to any address of the host, in the order a new
	 * one would try them.  One that fails to open (the server dropped
	 * it) is destroyed and the next one, or a new one, is tried. */
	for (int i = 0; !no_reuse && i < addrs.n; i++) {
		while ((c = tf__node_take(node, &addrs.a[i].sa,
					  addrs.a[i].len)) != NULL) {
			bool refused;

			ret = connect_reused(node, c, params, &s, &refused);
			if (!ret)
				goto out;
			if (refused) {
				STAT(node, connect_failures);
				return ret;
			}
			tf_log_debug(S, "kept connection failed: %s",
				     tf_strerror(ret));
		}
	}
	ret = connect_new(node, host, port, &addrs, params, no_reuse, &s);
	if (ret) {
		STAT(node, connect_failures);
		return ret;
	}
out:
	if (no_reuse)
		s->c->no_keep = true;
	s->opened = true;
	STAT(node, sessions_opened);
	*s_p = s;
	return 0;
}
