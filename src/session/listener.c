/* SPDX-License-Identifier: MIT */
/*
 * listener.c - the server side: a listening socket whose handshakes are
 * served from one epoll set without blocking, and the kept connections
 * waiting for their next session (wire format in wire_int.h).
 *
 * Each connection keeps its partial message in its tf_wire_rx and a
 * deadline for its current step, so a peer that sends nothing (or a byte
 * a second) is dropped when its deadline passes and never delays others.
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

/*
 * Listener epoll tags: NULL is the listening socket, EV_KICK the
 * listener's eventfd, a connection pointer its socket, and a connection
 * pointer with EV_CQ set its control CQ's fd (connections are allocated,
 * so their low bits are free), EV_PROGRESS the context's progress fd.
 */
#define EV_KICK	    ((uint64_t)2)
#define EV_CQ	    ((uint64_t)1)
#define EV_PROGRESS ((uint64_t)4)

/*
 * Sessions this listener accepted may need this side's progress to serve
 * their peers' one-sided operations (the soft provider's tcp transport)
 * while the server sleeps in tf_listener_accept or on tf_listener_fd.  A
 * context with TF_CAP_AUTO_PROGRESS needs nothing; otherwise the
 * provider's progress fd joins the listener's set, edge-triggered (it
 * stays readable while another thread progresses); without one, a
 * blocking accept falls back to a 10 ms tick while sessions are open.
 */
static int watch_progress(struct tf_listener *l)
{
	struct tf_context *ctx = l->node->ctx;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET,
				 .data.u64 = EV_PROGRESS};
	tf_caps_t caps;
	int fd;

	if (!tf_context_query_caps(ctx, &caps) &&
	    (caps.flags & TF_CAP_AUTO_PROGRESS))
		return 0;
	fd = ctx->ops->progress_fd(ctx);
	if (fd < 0) {
		l->progress_tick = true;
		return 0;
	}
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		int err = errno;

		tf_log_error(S, "watching the progress fd: %s", strerror(err));
		return -err;
	}
	return 0;
}

/* A listening socket on @a, in *@fd_p: 0 or -errno. */
static int listen_on(const struct tf_sess_addr *a, int backlog, bool reuseport,
		     int *fd_p)
{
	int fd, one = 1, ret;

	fd = socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport &&
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one))) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if (bind(fd, (const struct sockaddr *)&a->sa, a->len) ||
	    listen(fd, backlog)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	*fd_p = fd;
	return 0;
}

int tf_listener_create(tf_node_t *node, const tf_listener_params_t *params,
		       tf_listener_t **l_p)
{
	uint64_t fm = params ? params->field_mask : 0;
	const char *addr = (fm & TF_LISTENER_PARAM_ADDR) && params->addr
				   ? params->addr
				   : "127.0.0.1";
	uint16_t port = (fm & TF_LISTENER_PARAM_PORT) ? params->port : 0;
	int backlog = (fm & TF_LISTENER_PARAM_BACKLOG) ? params->backlog : 128;
	uint32_t flags = (fm & TF_LISTENER_PARAM_FLAGS) ? params->flags : 0;
	struct epoll_event ev = {.events = EPOLLIN};
	struct tf_sess_addrs addrs;
	struct sockaddr_storage sa = {.ss_family = AF_UNSPEC};
	socklen_t sl;
	size_t grant_len =
		(fm & TF_LISTENER_PARAM_GRANT) ? params->grant_len : 0;
	uint32_t grant_rights = 0, grant_depth = 0;
	struct tf_listener *l;
	int ret = -EINVAL;

	if (!node || !l_p || backlog <= 0 ||
	    (flags & ~(TF_LISTENER_BUSY_POLL | TF_LISTENER_REUSEPORT)))
		return -EINVAL;
	if (grant_len) {
		grant_rights = params->grant_rights ? params->grant_rights
						    : TF_ACCESS_REMOTE_WRITE;
		grant_depth = params->grant_depth ? params->grant_depth : 2;
		if (grant_len > TF_LISTENER_MAX_GRANT_LEN ||
		    (grant_rights & ~(uint32_t)TF_WIRE_EXPOSURE_RIGHTS) ||
		    grant_depth > TF_LISTENER_MAX_GRANT_DEPTH) {
			tf_log_error(S,
				     "listener grants: length 1..%u, rights "
				     "TF_ACCESS_REMOTE_*, depth 0..%d",
				     TF_LISTENER_MAX_GRANT_LEN,
				     TF_LISTENER_MAX_GRANT_DEPTH);
			return -EINVAL;
		}
	}
	ret = tf__sess_resolve(addr, port, &addrs);
	if (ret)
		return ret;
	l = tf__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->node = node;
	l->busy_poll = flags & TF_LISTENER_BUSY_POLL;
	l->grant_len = grant_len;
	l->grant_rights = grant_rights;
	l->grant_depth = grant_depth;
	l->max_pending = (unsigned)node->ctx->cfg.session_max_pending;
	l->max_pending_peer = (unsigned)node->ctx->cfg.session_max_pending_peer;
	l->hello_ms = (int)node->ctx->cfg.session_hello_timeout_ms;
	if (!l->max_pending || !l->max_pending_peer || l->hello_ms <= 0) {
		tf_log_error(S,
			     "TOLLFREE_SESSION_MAX_PENDING, _MAX_PENDING_PEER "
			     "and _HELLO_TIMEOUT_MS must be positive");
		tf__free(l);
		return -EINVAL;
	}
	tf__conn_list_init(&l->conns);
	/* A name may have several addresses (localhost: ::1 and 127.0.0.1,
	 * where the host may lack IPv6): listen on the first that works. */
	for (int i = 0; i < addrs.n; i++) {
		ret = listen_on(&addrs.a[i], backlog,
				flags & TF_LISTENER_REUSEPORT, &l->lfd);
		if (!ret)
			break;
		if (i + 1 < addrs.n) {
			char as[INET6_ADDRSTRLEN];

			tf_log_debug(
				S, "cannot listen on %s (%s) port %u: %s", addr,
				tf__sess_addr_str(&addrs.a[i], as, sizeof(as)),
				port, tf_strerror(ret));
		} else {
			tf_log_error(S, "cannot listen on %s port %u: %s", addr,
				     port, tf_strerror(ret));
		}
	}
	if (ret)
		goto err_free;
	sl = sizeof(sa);
	if (getsockname(l->lfd, (struct sockaddr *)&sa, &sl)) {
		ret = -errno;
		tf_log_error(S, "getsockname: %m");
		goto err_close;
	}
	l->port = ntohs(sa.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&sa)->sin6_port
				: ((struct sockaddr_in *)&sa)->sin_port);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		ret = -errno;
		tf_log_error(S, "epoll_create1: %m");
		goto err_close;
	}
	ev.data.ptr = NULL;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->lfd, &ev)) {
		ret = -errno;
		tf_log_error(S, "epoll_ctl: %m");
		goto err_ep;
	}
	l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ev.data.u64 = EV_KICK;
	if (l->efd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev)) {
		ret = -errno;
		tf_log_error(S, "listener eventfd: %m");
		goto err_efd;
	}
	ret = watch_progress(l);
	if (ret)
		goto err_efd;
	atomic_fetch_add(&node->n_listeners, 1);
	*l_p = l;
	return 0;

err_efd:
	if (l->efd >= 0)
		close(l->efd);
err_ep:
	close(l->epfd);
err_close:
	close(l->lfd);
err_free:
	tf__free(l);
	return ret;
}

/* Close the handshaking and idle connections (sessions own the others). */
static void listener_close_conns(struct tf_listener *l)
{
	struct tf_conn *c;

	while ((c = l->conns.next) != &l->conns) {
		tf__conn_unlink(c);
		tf__conn_destroy(c);
	}
	l->n_idle = l->n_pending = 0;
}

static void listener_free(struct tf_listener *l)
{
	listener_close_conns(l);
	close(l->efd);
	close(l->epfd);
	tf__free(l);
}

void tf_listener_destroy(tf_listener_t *l)
{
	if (!l)
		return;
	atomic_fetch_sub(&l->node->n_listeners, 1);
	close(l->lfd);
	l->lfd = -1;
	l->dead = true;
	/* The kept connections close now, also while sessions are still
	 * open (their connections are not in the list, and are destroyed
	 * at their close): a client must not send its next OPEN to a
	 * listener that will never read it. */
	listener_close_conns(l);
	if (!l->refs)
		listener_free(l);
}

void tf__listener_put(struct tf_listener *l)
{
	if (--l->refs == 0 && l->dead)
		listener_free(l);
}

uint16_t tf_listener_port(const tf_listener_t *l)
{
	return l->port;
}

int tf_listener_fd(const tf_listener_t *l)
{
	return l->epfd;
}

/*
 * One fd of @c in the listener's epoll set (@on) or out of it, from where
 * *@watched (in the set) and *@ev (armed) say it is: 0, or the error of
 * the add.  Registrations are one-shot (EPOLLONESHOT): an event disarms
 * its fd until it is armed again (EPOLL_CTL_MOD, cheaper than a removal
 * and an add), and so the fds of a connection handed to a session stay
 * in the set: a session's traffic reports at most one event there, which
 * the listener ignores (tf_listener_accept), and the session's close
 * arms them again with one call where the handover took none and its
 * return would take two (with two server threads sleeping between 12
 * client threads' sessions, the listener's epoll_ctl was a fifth of the
 * server threads' perf samples).  A connection leaves the
 * set before it is freed (listener_unwatch): closing its fds would not
 * remove them while a forked child holds them, and an event would then
 * name freed memory.
 */
static int watch_fd(struct tf_listener *l, int fd, uint64_t tag, bool *watched,
		    bool *ev, bool on)
{
	struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT,
				.data.u64 = tag};

	if (!on) {
		/* Cannot fail in a way that matters: the fd is there. */
		if (*watched)
			epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
		*watched = *ev = false;
		return 0;
	}
	if (*watched && *ev)
		return 0;
	if (fd < 0)
		return fd;
	if (epoll_ctl(l->epfd, *watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd,
		      &e))
		return -errno;
	*watched = *ev = true;
	return 0;
}

static int watch_sock(struct tf_listener *l, struct tf_conn *c, bool on)
{
	return watch_fd(l, c->fd, (uint64_t)(uintptr_t)c, &c->sock_watched,
			&c->sock_ev, on);
}

static int watch_ctl(struct tf_listener *l, struct tf_conn *c, bool on)
{
	int cfd = c->ctl.cq ? tf_cq_fd(c->ctl.cq) : -EBADF;

	return watch_fd(l, cfd, (uint64_t)(uintptr_t)c | EV_CQ, &c->ctl_watched,
			&c->ctl_ev, on);
}

/* Take @c's fds out of the listener's epoll set. */
static void listener_unwatch(struct tf_listener *l, struct tf_conn *c)
{
	watch_sock(l, c, false);
	watch_ctl(l, c, false);
	c->ctl_armed = false;
}

/*
 * The kick (l->efd) is readable while an OPEN waits in a kept
 * connection's backlog, where no completion fd reports it (it came before
 * the control CQ was armed): an application that sleeps on
 * tf_listener_fd() between accepts must not sleep past it.  One write
 * stands for any number of waiting OPENs, and it is read only in a turn
 * that finds none (@waiting false), so that serving one of several does
 * not hide the others.
 */
static void kick_sync(struct tf_listener *l, bool waiting)
{
	uint64_t v = 1;

	if (waiting == l->kicked)
		return;
	if (waiting ? write(l->efd, &v, sizeof(v)) < 0
		    : read(l->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
		tf_log_debug(S, "listener kick: %m");
		return;
	}
	l->kicked = waiting;
}

/* Watch @c on the listener for the next OPEN (server side, idle). */
void tf__listener_keep(struct tf_listener *l, struct tf_conn *c)
{
	/* The next OPEN comes on the control QP, whose CQ's fd joins the
	 * socket in the epoll set, armed, so that the listener fd becomes
	 * readable when it arrives.  A busy-polling listener polls the
	 * control QP instead, and does not watch the socket either: the
	 * socket's end is looked for every TF_LISTENER_SOCKCHECK_NS
	 * (tf_listener_accept).  Adding it to the epoll set and removing it
	 * again cost more than the rest of the session's accept. */
	bool ctl = c->ctl.ready && !l->busy_poll;
	bool sock = !(l->busy_poll && c->ctl.ready);
	struct tf_conn *old;
	int ret;

	/* Its fds are still in the set (watch_fd): armed again below. */
	c->ctl_armed = false;
	/* Past TOLLFREE_SESSION_MAX_KEPT{,_PEER} the connection ends with
	 * its session: its client's next session makes a new one. */
	if (l->dead || !l->node->qp_cache || c->broken ||
	    !tf__peers_keep(l->node, c) || watch_sock(l, c, sock)) {
		listener_unwatch(l, c);
		tf__conn_destroy(c);
		return;
	}
	c->hs = TF_CONN_IDLE;
	c->deadline_ns = 0;
	tf__wire_rx_reset(&c->rx);
	/* The grants its next sessions take (if the listener gives any). */
	tf__listener_grant(l, c);
	if (c->broken) {
		listener_unwatch(l, c);
		tf__conn_destroy(c);
		return;
	}
	ret = watch_ctl(l, c, ctl);
	if (ret) {
		/* The listener fd could not report its next OPEN. */
		tf_log_warn(S, "cannot watch a control QP: %s",
			    tf_strerror(ret));
		listener_unwatch(l, c);
		tf__conn_destroy(c);
		return;
	}
	/* An OPEN that came before the arm is found by the arm's second
	 * look, and announced by the kick. */
	if (ctl) {
		if (!tf__ctl_arm(c))
			c->ctl_armed = true;
		if (c->ctl.n_backlog)
			kick_sync(l, true);
	}
	tf__conn_link(&l->conns, c);
	if (++l->n_idle > l->node->qp_cache) {
		/* The oldest idle connection goes; the list also holds
		 * handshaking ones, which are skipped. */
		for (old = l->conns.prev; old != &l->conns; old = old->prev)
			if (old->hs == TF_CONN_IDLE)
				break;
		/* Out of the epoll set first: closing its fds does not
		 * remove them while a forked child still holds them, and an
		 * event would then name freed memory. */
		listener_unwatch(l, old);
		tf__conn_unlink(old);
		l->n_idle--;
		tf__conn_destroy(old);
	}
}

/* A handshaking or idle connection off the listener's counts and list. */
static void listener_unbook(struct tf_listener *l, struct tf_conn *c)
{
	tf__peers_unkeep(l->node, c);
	if (c->hs == TF_CONN_IDLE)
		l->n_idle--;
	else
		l->n_pending--;
	tf__conn_unlink(c);
}

/* Take a handshaking or idle connection off the listener's books (its
 * fds out of the epoll set, its count, its list). */
static void listener_release(struct tf_listener *l, struct tf_conn *c)
{
	listener_unwatch(l, c);
	listener_unbook(l, c);
}

void tf__listener_drop_conn(struct tf_listener *l, struct tf_conn *c)
{
	listener_unwatch(l, c);
	tf__conn_destroy(c);
}

/* Drop a handshaking or idle connection of the listener. */
static void listener_drop(struct tf_listener *l, struct tf_conn *c)
{
	listener_release(l, c);
	tf__conn_destroy(c);
}

/* Watch a pending connection's socket in the epoll set (once), for its
 * next message: false (and @c dropped) if epoll refused it. */
static bool pending_watch(struct tf_listener *l, struct tf_conn *c)
{
	int ret = watch_sock(l, c, true);

	if (ret) {
		tf_log_warn(S, "cannot watch a connection: %s",
			    tf_strerror(ret));
		listener_drop(l, c);
		return false;
	}
	return true;
}

/* Tell a peer why it was refused (best effort: it may be gone). */
static void send_reject(struct tf_conn *c, int err)
{
	bool on_ctl = c->hs == TF_CONN_IDLE && c->ctl.ready;
	struct tf_wire_msg m;
	tf_caps_t caps;

	/* Our QP could not connect to the client's: only our log says why
	 * (no common transport, say), so tell the client what we run. */
	if (err == -TF_EPEER && !tf_context_query_caps(c->node->ctx, &caps))
		tf__wire_put_reject(&m, err, caps.provider, caps.transport);
	else
		tf__wire_put_reject(&m, err, NULL, NULL);
	if (tf__wire_finish(&m))
		return;
	/* A kept connection's client waits for the answer on the control
	 * QP, where its OPEN went; sealed, on an authenticated connection,
	 * as everything after the key challenge. */
	if (on_ctl) {
		/* The connection is destroyed next: let the SEND leave
		 * first, or the client would only see the connection end. */
		if (!tf__conn_send(c, TF_WIRE_CH_CTL, &m, 100))
			tf__ctl_flush(c, 100);
	} else {
		tf__conn_send(c, TF_WIRE_CH_SOCK, &m, 100);
	}
}

/*
 * Send a new connection's QP addresses ahead of connecting them (an ADDR,
 * wire_int.h), and its control QP's if @ctl and there is one; the
 * session's ACCEPT then carries no blobs.
 */
static int send_addr(struct tf_conn *c, bool ctl)
{
	uint8_t blob[TF_QP_ADDR_MAX], cblob[TF_QP_ADDR_MAX];
	size_t blob_len = sizeof(blob), ctl_len = 0;
	struct tf_wire_msg m;
	int ret;

	ret = tf_qp_get_addr(c->qp, blob, &blob_len);
	if (!ret && ctl && c->ctl.qp) {
		ctl_len = sizeof(cblob);
		ret = tf_qp_get_addr(c->ctl.qp, cblob, &ctl_len);
	}
	if (ret)
		return ret;
	tf__wire_init(&m, TF_WIRE_ADDR);
	tf__wire_put_qps(&m, c->id, blob, blob_len, cblob, ctl_len);
	ret = tf__wire_finish(&m);
	if (!ret)
		ret = tf__conn_send(c, TF_WIRE_CH_SOCK, &m,
				    c->node->timeout_ms);
	if (!ret)
		c->addr_sent = true;
	return ret;
}

/* A new connection's first session: make the QP (and the control QP, if
 * the client offered one and connections are kept), connect them to the
 * client's and open the session, deferred (its ACCEPT goes with
 * tf_session_establish). */
static int server_open_new(struct tf_listener *l, struct tf_conn *c,
			   const struct tf_wire_open *req,
			   const tf_session_params_t *params,
			   struct tf_session **s_p)
{
	struct tf_node *node = l->node;
	uint32_t sd = 256, rd = 256;
	struct tf_session *s;
	int ret;

	if (params && (params->field_mask & TF_SESSION_PARAM_QP)) {
		sd = params->max_send_wr;
		rd = params->max_recv_wr;
	}
	ret = tf__conn_new_qp(node, c, sd, rd, req->ctl_len && node->qp_cache);
	if (ret)
		return ret;
	/* Without a control QP the connection still works: its later
	 * sessions send their control messages on the socket.  But a
	 * connection whose control slots do not fit under the context's
	 * TOLLFREE_MAX_PINNED is refused (REJECT -ENOBUFS) before anything
	 * is connected: the client learns that the server is full, where
	 * going on without a control QP would hide it (issue 14, item 8). */
	if (req->ctl_len && node->qp_cache &&
	    tf__ctl_create(node, c) == -ENOBUFS) {
		tf_log_warn(S, "handshake: new connection refused: its control "
			       "QP would pass TOLLFREE_MAX_PINNED");
		return -ENOBUFS;
	}
	c->id = atomic_fetch_add(&node->next_conn_id, 1) + 1;
	if (node->early_addr) {
		ret = send_addr(c, req->ctl_len && node->qp_cache);
		if (ret)
			return ret;
	}
	ret = tf_qp_connect(c->qp, req->blob, req->blob_len);
	if (ret) {
		tf_log_warn(S, "handshake: peer QP address refused: %s",
			    tf_strerror(ret));
		return ret;
	}
	if (req->ctl_len && node->qp_cache && c->ctl.qp) {
		ret = tf__ctl_connect(c, req->ctl, req->ctl_len);
		/* After an ADDR the client connected its control QP to
		 * this one already: the connection fails instead. */
		if (ret && c->addr_sent)
			return ret;
		if (ret)
			tf__ctl_destroy(c);
	}
	ret = tf__sess_new(node, c, true, &s);
	if (ret)
		return ret;
	memcpy(s->priv, req->priv, req->priv_len);
	s->priv_len = req->priv_len;
	s->rinv_asked = req->flags & TF_WIRE_OPEN_RINV;
	s->deferred = true;
	*s_p = s;
	return 0;
}

static int server_challenge(struct tf_conn *c, bool early);

/*
 * Serve a HELLO.  Without a key it carries the client's OPEN: the session
 * opens now (*@s_p set).  With one, the server answers with its nonce and
 * its proof of the key, derives the connection's keys and waits for the
 * sealed OPEN (*@s_p stays NULL).
 */
static int server_hello(struct tf_listener *l, struct tf_conn *c,
			const tf_session_params_t *params,
			struct tf_session **s_p)
{
	struct tf_node *node = l->node;
	struct tf_wire_hello hello;
	int ret;

	*s_p = NULL;
	ret = tf__wire_parse_hello(&c->rx, &hello);
	if (ret)
		return ret;
	if (hello.auth != (node->psk_len != 0)) {
		tf_log_warn(S, "handshake: %s",
			    node->psk_len ? "client has no pre-shared key "
					    "and this server requires one"
					  : "client has a pre-shared key and "
					    "this server has none");
		return -TF_EAUTH;
	}
	/* The HELLO was read ahead (accept_new, serve_conn): behind it in
	 * the client's write may come its early OPEN and nothing else, since
	 * a client waits for the answer.  Bytes held there for anything else
	 * would never be read before this connection sleeps. */
	if (c->rx.ahead_len && !hello.early) {
		tf_log_warn(S, "handshake: bytes behind the HELLO");
		return -TF_EWIRE;
	}
	memcpy(c->nonce_c, hello.nonce, TF_WIRE_NONCE);
	if (!node->psk_len)
		return server_open_new(l, c, &hello.open, params, s_p);
	ret = tf__transcript_new(&c->ts);
	if (!ret)
		ret = tf__transcript_add_rx(c->ts, &c->rx);
	if (ret)
		return ret;
	/* An early OPEN follows in the same write: nothing is answered
	 * before it came and opened. */
	if (hello.early) {
		c->hello_ns = hello.sent_ns;
		c->hs = TF_CONN_WAIT_EARLY;
		return 0;
	}
	return server_challenge(c, false);
}

/*
 * Answer with this side's nonce and proof of the key, and derive the
 * connection's keys; the transcript holds what came before.  @early: the
 * client's early OPEN is taken, and the CHALLENGE is held back to leave
 * with the answer to it (tf__conn_send), in one write.
 */
static int server_challenge(struct tf_conn *c, bool early)
{
	struct tf_node *node = c->node;
	uint8_t fin[TF_WIRE_MAC], th[TF_WIRE_HASH], prk[32], *mac;
	struct tf_wire_msg m;
	int ret;

	ret = tf__random_buffered(c->nonce_s, TF_WIRE_NONCE);
	/* The traffic keys only after the CHALLENGE left: the client
	 * checks the proof meanwhile. */
	if (!ret)
		ret = tf__keys_proof_key(node->psk, node->psk_len, c->nonce_c,
					 c->nonce_s, prk, fin);
	if (ret)
		goto out;
	/* The proof covers the transcript up to itself: HELLO (and an early
	 * OPEN), then this message's header (its size counts the proof),
	 * nonce and flags. */
	tf__wire_init(&m, TF_WIRE_CHALLENGE);
	tf__wire_put_bytes(&m, c->nonce_s, TF_WIRE_NONCE);
	tf__wire_put_u8(&m, early ? TF_WIRE_CHALLENGE_EARLY : 0);
	tf__wire_put_bytes(&m, fin, TF_WIRE_MAC); /* room for the proof */
	ret = tf__wire_finish(&m);
	if (ret)
		goto out;
	mac = m.buf + m.len - TF_WIRE_MAC;
	ret = tf__transcript_add(c->ts, m.buf, m.len - TF_WIRE_MAC);
	if (!ret)
		ret = tf__transcript_hash(c->ts, th);
	if (!ret)
		ret = tf__proof_make(fin, th, mac);
	if (!ret)
		ret = tf__transcript_add(c->ts, mac, TF_WIRE_MAC);
	if (!ret && early && m.len <= sizeof(c->pre)) {
		memcpy(c->pre, m.buf, m.len);
		c->pre_len = m.len;
	} else if (!ret) {
		ret = tf__wire_send(c->fd, &m, node->timeout_ms);
	}
	if (!ret)
		ret = tf__keys_from_prk(prk, true, tf__node_keys_spare(node),
					&c->keys);
	c->hs = TF_CONN_WAIT_OPEN;
	c->deadline_ns = tf__now_ns() + (uint64_t)node->timeout_ms * 1000000;
out:
	explicit_bzero(prk, sizeof(prk));
	explicit_bzero(fin, sizeof(fin));
	return ret;
}

/*
 * The early OPEN behind a HELLO, in c->rx: open it with the early keys
 * (a failure means the client lacks the key), then take it (*@taken_p)
 * if its nonce is fresh (replay.c), or answer with the classic CHALLENGE
 * so that the client sends its OPEN again.  Either way the CHALLENGE
 * proves this side's key over the HELLO and this OPEN.
 */
static int server_early(struct tf_conn *c, bool *taken_p)
{
	struct tf_node *node = c->node;
	enum tf_replay_verdict v;
	struct tf_sess_keys *ek;
	int ret;

	*taken_p = false;
	if (c->rx.h.op != TF_WIRE_OPEN) {
		tf_log_warn(S, "handshake: expected the early OPEN, got %s",
			    tf__wire_op_name(c->rx.h.op));
		return -TF_EWIRE;
	}
	ret = tf__node_early_open_take(node, c->nonce_c, &ek);
	if (ret)
		return ret;
	c->keys = ek;
	ret = tf__conn_open(c, TF_WIRE_CH_SOCK);
	c->keys = NULL;
	tf__node_early_open_put(node, ek);
	if (ret)
		return ret;
	v = tf__replay_admit(&node->replay, c->nonce_c, c->hello_ns,
			     tf__realtime_ns());
	if (v == TF_REPLAY_FRESH) {
		STAT(node, psk_early);
		*taken_p = true;
	} else {
		static const char *const why[] = {
			[TF_REPLAY_SEEN] = "its nonce was seen before "
					   "(a replay?)",
			[TF_REPLAY_STALE] = "its time is outside the window "
					    "(clocks apart, or a replay?)",
			[TF_REPLAY_FULL] = "the record of early OPENs is full",
			[TF_REPLAY_OFF] = "this node takes none",
		};

		tf_log_debug(S, "handshake: early OPEN not taken: %s", why[v]);
		STAT(node, psk_early_refused);
	}
	return server_challenge(c, *taken_p);
}

/* Serve an OPEN (already opened, if sealed) on @c: the sealed OPEN of a
 * new authenticated connection, or the next session on a kept one. */
static int server_open(struct tf_listener *l, struct tf_conn *c,
		       const tf_session_params_t *params, struct tf_peer *pe,
		       struct tf_session **s_p)
{
	struct tf_node *node = l->node;
	struct tf_wire_open req;
	struct tf_grant g;
	int gi = -1;
	struct tf_session *s;
	int ret;

	ret = tf__wire_parse_open(&c->rx, &req);
	if (ret)
		return ret;
	if (c->hs != TF_CONN_IDLE) {
		if (req.reuse_id) {
			tf_log_warn(S,
				    "handshake: a new connection's OPEN "
				    "names connection %u",
				    req.reuse_id);
			return -TF_EWIRE;
		}
		return server_open_new(l, c, &req, params, s_p);
	}
	if (req.reuse_id != c->id) {
		tf_log_warn(S, "handshake: OPEN on kept connection %u names %u",
			    c->id, req.reuse_id);
		return -TF_EWIRE;
	}
	/* A QP that failed while idle is not reused. */
	if (tf_qp_state(c->qp) != TF_QPS_RTS ||
	    (c->ctl.ready && tf_qp_state(c->ctl.qp) != TF_QPS_RTS)) {
		c->broken = true;
		return -TF_EQPERR;
	}
	if (req.grant) {
		for (gi = 0;
		     gi < (int)c->n_grants && c->grants[gi].id != req.grant;
		     gi++)
			;
		if (gi == (int)c->n_grants) {
			tf_log_warn(S,
				    "handshake: OPEN takes grant %u, which "
				    "this connection does not hold",
				    req.grant);
			return -TF_EWIRE;
		}
		/* Counted as any exposure: past the bound the session is
		 * refused (and the connection, with its grants, ends). */
		ret = tf__peers_expose(node, pe, c->grants[gi].info.length);
		if (ret)
			return ret;
	}
	ret = tf__sess_new(node, c, true, &s);
	if (ret) {
		if (gi >= 0)
			tf__peers_unexpose(node, pe, c->grants[gi].info.length);
		return ret;
	}
	s->reused = true;
	s->qctl = c->ctl.ready;
	STAT(node, qp_reused);
	memcpy(s->priv, req.priv, req.priv_len);
	s->priv_len = req.priv_len;
	s->rinv_asked = req.flags & TF_WIRE_OPEN_RINV;
	if (gi >= 0) {
		/* Open already on the client's side: no ACCEPT. */
		g = tf__conn_grant_take(c, (unsigned)gi);
		tf__sess_take_grant(s, &g);
		STAT(node, grants_taken);
		/* A deferred OPEN that is its session's CLOSE too: what the
		 * client wrote is placed, and it revoked what it exposed
		 * (nothing: exposing would have sent the OPEN). */
		if (req.flags & TF_WIRE_OPEN_CLOSED) {
			s->peer_closed = true;
			STAT(node, opens_deferred);
		}
	} else {
		s->deferred = true;
	}
	*s_p = s;
	return 0;
}

/*
 * Serve a listener connection: a readable socket, or (@from_ctl) the
 * message already read into c->rx (by tf__ctl_next(), or a new
 * connection's HELLO by accept_new), or its error @ret.  Returns 1 with
 * *@s_p set when a session opened.
 */
static int serve_conn(struct tf_listener *l, struct tf_conn *c,
		      const tf_session_params_t *params, bool from_ctl, int ret,
		      struct tf_session **s_p)
{
	struct tf_session *s = NULL;
	struct tf_peer *pe = NULL;

	if (!from_ctl) {
		/* A kept connection with a control QP has nothing to say
		 * on its socket but its end. */
		if (c->hs == TF_CONN_IDLE && c->ctl.ready)
			ret = tf__ctl_tcp_check(c);
		else if (c->hs == TF_CONN_WAIT_HELLO)
			ret = tf__wire_rx_step_ahead(c->fd, &c->rx, SIZE_MAX);
		else
			ret = tf__wire_rx_step(c->fd, &c->rx);
	}
again:
	if (ret == 0)
		return 0;
	if (ret < 0)
		goto err;
	if (c->hs == TF_CONN_WAIT_EARLY) {
		bool taken = false;

		/* Taken: the OPEN is open in c->rx, and served as a sealed
		 * one is below; not taken: the client sends it again.  It
		 * ends the client's first write (server_hello). */
		if (c->rx.ahead_len) {
			tf_log_warn(S, "handshake: bytes behind the early "
				       "OPEN");
			ret = -TF_EWIRE;
		} else {
			ret = server_early(c, &taken);
		}
		if (!ret && taken)
			ret = tf__peers_session_get(l->node, &c->peer, &pe);
		if (!ret && taken)
			ret = server_open(l, c, params, pe, &s);
	} else if (c->hs == TF_CONN_WAIT_HELLO) {
		/* Without a key the HELLO opens the session: counted against
		 * the bounds on sessions before anything is made for it. */
		ret = 0;
		if (!l->node->psk_len)
			ret = tf__peers_session_get(l->node, &c->peer, &pe);
		if (!ret)
			ret = server_hello(l, c, params, &s);
	} else {
		unsigned ch = from_ctl ? TF_WIRE_CH_CTL : TF_WIRE_CH_SOCK;

		ret = tf__conn_open(c, ch);
		/* The client's CLOSE of the session this side closed first:
		 * the connection stays idle. */
		if (!ret && c->hs == TF_CONN_IDLE)
			ret = tf__conn_aside(c, ch, &c->rx);
		if (ret == 1) {
			tf__wire_rx_reset(&c->rx);
			return 0;
		}
		if (!ret)
			ret = tf__peers_session_get(l->node, &c->peer, &pe);
		if (!ret)
			ret = server_open(l, c, params, pe, &s);
	}
	tf__wire_rx_reset(&c->rx);
	if (pe && !s) {
		tf__peers_session_put(l->node, pe);
		pe = NULL;
	}
	if (ret)
		goto err;
	/* CHALLENGE sent: the sealed OPEN comes next, on the socket.  An
	 * early OPEN left in the HELLO's write: usually here already. */
	if (!s) {
		if (c->hs == TF_CONN_WAIT_EARLY) {
			ret = tf__wire_rx_step(c->fd, &c->rx);
			if (ret)
				goto again;
		}
		pending_watch(l, c);
		return 0;
	}
	s->pe = pe;
	/* The session owns the connection from now on; its fds stay in the
	 * epoll set (watch_fd). */
	listener_unbook(l, c);
	c->hs = TF_CONN_BUSY;
	c->l = l;
	l->refs++;
	if (!tf__sess_flag(params, TF_SESSION_DEFER_ESTABLISH)) {
		ret = tf_session_establish(s);
		if (ret) {
			tf_session_close(s);
			return 0;
		}
	}
	s->opened = true;
	STAT(l->node, sessions_opened);
	*s_p = s;
	return 1;
err:
	/* An idle connection the client closed is the normal end of a
	 * kept connection, not a rejected handshake. */
	if (!(c->hs == TF_CONN_IDLE && ret == -ECONNRESET &&
	      (from_ctl || !c->rx.got)) &&
	    /* ... nor is its control QP failing when the client exited. */
	    !(c->hs == TF_CONN_IDLE && from_ctl && ret == -TF_EQPERR)) {
		/* A client that leaves right after the key challenge found
		 * that the server's proof does not match its key. */
		if (c->hs == TF_CONN_WAIT_OPEN && ret == -ECONNRESET &&
		    !c->rx.got) {
			tf_log_warn(S, "handshake: client left after the key "
				       "challenge (its pre-shared key "
				       "differs?)");
			ret = -TF_EAUTH;
		} else if (ret != -ECONNRESET) {
			send_reject(c, ret);
		}
		/* A refusal by the bounds on sessions has its own
		 * counter (peers.c). */
		if (ret == -TF_EAUTH)
			STAT(l->node, auth_failures);
		else if (ret != -EBUSY && ret != -EUSERS)
			STAT(l->node, handshake_rejects);
	}
	listener_drop(l, c);
	return 0;
}

/* A busy-polling listener's kept connections whose sockets are not in
 * the epoll set: the end of any of them (or bytes, a protocol error) is
 * served as an event.  Returns what serve_conn does (never 1 here: an
 * error drops the connection). */
static int check_sockets(struct tf_listener *l,
			 const tf_session_params_t *params,
			 struct tf_session **s_p)
{
	/* Oldest first, as in scan_ctl. */
	for (struct tf_conn *c = l->conns.prev; c != &l->conns; c = c->prev) {
		int r;

		if (c->hs != TF_CONN_IDLE || c->sock_watched)
			continue;
		r = tf__ctl_tcp_check(c);
		if (!r)
			continue;
		if (serve_conn(l, c, params, true, r, s_p) == 1)
			return 1;
		/* The list changed: the others are looked at next time. */
		break;
	}
	return 0;
}

/* Poll the control QPs of the kept connections for their next OPEN:
 * 1 with *@s_p set when a session opened.  Oldest first: a connection
 * goes back to the head of the list when its session closes, so walking
 * from the head would let busy clients starve the one at the tail. */
static int scan_ctl(struct tf_listener *l, const tf_session_params_t *params,
		    struct tf_session **s_p)
{
	for (struct tf_conn *c = l->conns.prev; c != &l->conns; c = c->prev) {
		int r;

		if (c->hs != TF_CONN_IDLE || !c->ctl.ready)
			continue;
		r = tf__ctl_next(c, &c->rx);
		if (!r)
			continue;
		if (serve_conn(l, c, params, true, r < 0 ? r : 1, s_p) == 1)
			return 1;
		/* The list may have changed: look again next turn. */
		break;
	}
	return 0;
}

/* Whether two socket addresses are of the same host (port aside). */
static bool same_host(const struct sockaddr_storage *a,
		      const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr,
			       sizeof(struct in6_addr));
	return false;
}

/* Tell a client that the listener is at its bounds on handshakes: a
 * REJECT -EBUSY, before the key challenge and so not sealed.  Best
 * effort; the socket is non-blocking. */
static void send_busy(int fd)
{
	struct tf_wire_msg m;

	tf__wire_init(&m, TF_WIRE_REJECT);
	tf__wire_put_u32(&m, EBUSY);
	if (!tf__wire_finish(&m) &&
	    send(fd, m.buf, m.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		tf_log_debug(S, "refusal not sent: %m");
}

/*
 * Whether a connection that has not said HELLO, as far as this side has
 * read, is silent.  Its HELLO may be in its socket, unread: a busy
 * listener (its thread serving sessions, or descheduled) takes a batch
 * of new connections before it reads them.  Such a client is talking.
 * A peek tells; a connection found talking stays so (its bytes wait in
 * the socket until they are read), so it is peeked at once only.
 */
static bool is_silent(struct tf_conn *c)
{
	uint8_t b;

	if (c->heard || c->rx.got)
		return false;
	/* EOF or an error: the peer is gone, nothing to keep either. */
	c->heard = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	return !c->heard;
}

/*
 * Make room for one more handshake from @peer, within the listener's
 * bounds overall and per source address.  Past a bound the oldest
 * connection that has not said HELLO goes (of that address, for its own
 * bound): a flood of silent connections then only ever displaces itself,
 * and a client that speaks at once is served.  The one dropped is told
 * -EBUSY, in case it is a client that was slow to speak.  If every
 * pending connection is talking, the newcomer is refused: false.
 * *@dropped_p is set when a connection was freed.
 */
static bool make_room(struct tf_listener *l,
		      const struct sockaddr_storage *peer, bool *dropped_p)
{
	struct tf_conn *c, *victim = NULL;
	unsigned from_peer = 0;
	bool only_peer;

	for (c = l->conns.next; c != &l->conns; c = c->next)
		if (c->hs == TF_CONN_WAIT_HELLO || c->hs == TF_CONN_WAIT_OPEN ||
		    c->hs == TF_CONN_WAIT_EARLY)
			from_peer += same_host(&c->peer, peer);
	if (from_peer >= l->max_pending_peer)
		only_peer = true;
	else if (l->n_pending >= l->max_pending)
		only_peer = false;
	else
		return true;
	/* The list is newest first: walk it from the tail.  Only here, at a
	 * bound, are sockets peeked at. */
	for (c = l->conns.prev; c != &l->conns; c = c->prev) {
		if (c->hs != TF_CONN_WAIT_HELLO ||
		    (only_peer && !same_host(&c->peer, peer)))
			continue;
		if (is_silent(c)) {
			victim = c;
			break;
		}
	}
	if (!victim)
		return false;
	tf_log_debug(S, "handshake: dropped the oldest silent connection "
			"for a new one");
	STAT(l->node, pending_dropped);
	send_busy(victim->fd);
	listener_drop(l, victim);
	*dropped_p = true;
	return true;
}

/* Refuse a connection at once: too many handshakes are in progress and
 * all of them are talking. */
static void refuse_busy(struct tf_listener *l, int fd)
{
	STAT(l->node, pending_refused);
	send_busy(fd);
	close(fd);
}

/* Put a new connection on the listener's books: its list and count, and
 * the epoll set unless @watch is false (its HELLO is already read).
 * False (and @c dropped) if epoll refused it. */
static bool pending_add(struct tf_listener *l, struct tf_conn *c, bool watch)
{
	c->sock_watched = false;
	tf__conn_link(&l->conns, c);
	l->n_pending++;
	return !watch || pending_watch(l, c);
}

/* Accept one connection of those the listening socket has: *@c_p receives
 * it (NULL: none); returns true if a pending connection was dropped to
 * make room for it (an event may name that one).  One a call, because an
 * accept4 that finds the queue empty costs as much as one that does not
 * (Linux makes the socket and its file first, about 5 us here): the
 * listening socket stays readable in the epoll set while more wait, and
 * the handshakes already running are served in between.  A client sends
 * its HELLO right after it connects: it is read at once, into the
 * connection's rx, with what its write carried behind it (an early OPEN:
 * tf__wire_rx_step_ahead), and *@r_p says how far that went.
 * Only while it is not whole (0) does the connection join the epoll set;
 * otherwise the caller serves it (a system call each way saved on the
 * server's answer, and a bad header is answered as from serve_conn). */
static bool accept_new(struct tf_listener *l, struct tf_conn **c_p, int *r_p)
{
	struct tf_node *node = l->node;
	uint64_t hello_ms =
		(uint64_t)(l->hello_ms < node->timeout_ms ? l->hello_ms
							  : node->timeout_ms);
	struct sockaddr_storage peer = {.ss_family = AF_UNSPEC};
	socklen_t pl = sizeof(peer);
	bool dropped = false;
	struct tf_conn *c;
	int fd, r;

	*c_p = NULL;
	*r_p = 0;
	fd = accept4(l->lfd, (struct sockaddr *)&peer, &pl,
		     SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return false;
	if (!make_room(l, &peer, &dropped)) {
		refuse_busy(l, fd);
		return dropped;
	}
	c = tf__conn_alloc(node, fd);
	if (!c) {
		close(fd);
		return dropped;
	}
	tf__conn_sock_opts(fd);
	memcpy(&c->peer, &peer, pl);
	c->peer_len = pl;
	c->hs = TF_CONN_WAIT_HELLO;
	c->born_ns = tf__now_ns();
	/* A client sends its HELLO right after it connects: a connection
	 * that does not gets the shortest deadline. */
	c->deadline_ns = c->born_ns + hello_ms * 1000000;
	r = tf__wire_rx_step_ahead(fd, &c->rx, SIZE_MAX);
	if (!pending_add(l, c, r == 0))
		return dropped;
	*c_p = c;
	*r_p = r;
	return dropped;
}

/* Nothing to accept: the time is the stock's, if it is made inline (one
 * entry a call, so that a server polling several listeners, or serving
 * sessions between calls, is held up by one at most). */
static int idle(struct tf_listener *l)
{
	tf__stock_refill(l->node);
	tf__node_keys_ahead(l->node);
	return -EAGAIN;
}

int tf_listener_accept(tf_listener_t *l, const tf_session_params_t *params,
		       int timeout_ms, tf_session_t **s_p)
{
	/* One clock read per turn: a busy-polling server calls this with a
	 * timeout of 0 in its loop, often for several listeners. */
	uint64_t now = tf__now_ns();
	uint64_t deadline = now + (uint64_t)timeout_ms * 1000000;
	struct epoll_event evs[16];

	if (!l || !s_p || l->dead)
		return -EINVAL;
	for (bool first = true;; first = false) {
		uint64_t next = UINT64_MAX;
		struct tf_conn *c, *nx;
		/* A listener sleeps until an event or the next handshake
		 * deadline, never on a timer, except on a context that
		 * needs a tick for progress (watch_progress). */
		int n, wait_ms = l->refs && l->progress_tick ? 10 : -1;
		bool waiting = false; /* an OPEN in a backlog */

		if (!first)
			now = tf__now_ns();

		/* Handshakes that missed their deadline are dropped. */
		for (c = l->conns.next; c != &l->conns; c = nx) {
			nx = c->next;
			if (c->deadline_ns && c->deadline_ns < next)
				next = c->deadline_ns;
			if (c->deadline_ns && now > c->deadline_ns) {
				/* ... unless their next message is complete
				 * in the socket: then the delay was this
				 * side's (the application served a session
				 * between two calls, as a thread per
				 * listener does), not the peer's.  A peer
				 * still short of a message is dropped. */
				if (tf__wire_rx_step(c->fd, &c->rx) == 1) {
					if (serve_conn(l, c, params, false, 0,
						       s_p) == 1)
						return 0;
					/* The list may have changed. */
					break;
				}
				/* A connection that never said anything is
				 * a probe or a flood, not worth a warning. */
				if (c->hs == TF_CONN_WAIT_HELLO && !c->rx.got)
					tf_log_debug(S, "handshake: no HELLO "
							"in time");
				else
					tf_log_warn(S, "handshake: peer timed "
						       "out");
				STAT(l->node, handshake_rejects);
				listener_drop(l, c);
			}
		}
		/* A busy-polling listener looks at the control QPs first:
		 * no system call when the next OPEN is there.  The sockets
		 * are still looked at every TF_LISTENER_EPOLL_NS, so that
		 * OPENs arriving back to back cannot starve handshakes and
		 * the end of idle connections. */
		if (l->busy_poll && now - l->epoll_ns < TF_LISTENER_EPOLL_NS) {
			if (scan_ctl(l, params, s_p))
				return 0;
			if (timeout_ms >= 0 && now >= deadline)
				return idle(l);
			continue;
		}
		l->epoll_ns = now;
		if (l->busy_poll &&
		    now - l->sockcheck_ns >= TF_LISTENER_SOCKCHECK_NS) {
			l->sockcheck_ns = now;
			if (check_sockets(l, params, s_p))
				return 0;
		}
		/* Kept connections whose next OPEN comes on the control QP
		 * are armed for the fd when they are not (an event consumed
		 * the arm); an OPEN found by the arm's second look means
		 * no sleeping.  A busy-polling listener never sleeps. */
		if (l->busy_poll)
			wait_ms = 0;
		for (c = l->conns.next; c != &l->conns; c = nx) {
			int err = 0;

			nx = c->next;
			/* A one-shot registration whose event was taken is
			 * armed again (watch_fd): the connection is still the
			 * listener's.  An fd that is ready reports at once. */
			if (c->sock_watched && !c->sock_ev)
				err = watch_sock(l, c, true);
			if (!err && c->ctl_watched && !c->ctl_ev)
				err = watch_ctl(l, c, true);
			if (err) {
				tf_log_warn(S, "cannot watch a connection: %s",
					    tf_strerror(err));
				listener_drop(l, c);
				continue;
			}
			if (c->hs != TF_CONN_IDLE || !c->ctl.ready)
				continue;
			if (!c->ctl_armed && c->ctl_watched)
				c->ctl_armed = !tf__ctl_arm(c);
			if (c->ctl.n_backlog) {
				wait_ms = 0;
				waiting = true;
			}
		}
		/* A busy-polling listener's fd does not report OPENs. */
		kick_sync(l, waiting && !l->busy_poll);
		if (timeout_ms >= 0 && deadline < next)
			next = deadline;
		if (wait_ms && next != UINT64_MAX) {
			uint64_t ms = next <= now
					      ? 0
					      : (next - now + 999999) / 1000000;

			if (wait_ms < 0 || ms < (uint64_t)wait_ms)
				wait_ms = ms > INT32_MAX ? INT32_MAX : (int)ms;
		}
		/* Sessions already accepted may need this side to serve
		 * their peers' one-sided operations while we wait. */
		tf_context_progress(l->node->ctx);
		/* About to sleep: first the stock's next entry, if made
		 * inline. */
		if (wait_ms) {
			tf__stock_refill(l->node);
			tf__node_keys_ahead(l->node);
		}
		n = epoll_wait(l->epfd, evs, 16, wait_ms);
		/* A signal ends the wait, as tf_listener_accept(3) says:
		 * a server blocking with -1 can then stop. */
		if (n < 0)
			return -errno;
		/* First, while every connection named is alive: each event
		 * disarmed its one-shot registration, armed again next turn
		 * (the loop above), also for those that the loop below
		 * leaves for then. */
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag == EV_PROGRESS || tag == EV_KICK || !tag)
				continue;
			c = (struct tf_conn *)(uintptr_t)(tag & ~EV_CQ);
			if (tag & EV_CQ) {
				c->ctl_ev = false;
				/* The CQ's arm was consumed too: re-armed
				 * next turn, which polls the CQ. */
				c->ctl_armed = false;
			} else {
				c->sock_ev = false;
			}
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag == EV_PROGRESS)
				continue; /* progress runs each turn */
			/* The kick is read by kick_sync, once no OPEN
			 * waits. */
			if (tag == EV_KICK)
				continue;
			if (tag & EV_CQ)
				continue;
			c = evs[i].data.ptr;
			/* A session's traffic on its connection's socket:
			 * not the listener's to read. */
			if (c && c->hs == TF_CONN_BUSY)
				continue;
			if (!c) {
				struct tf_conn *nc;
				bool dropped;
				int r;

				dropped = accept_new(l, &nc, &r);
				/* A client sends its HELLO as soon as it is
				 * connected: when it was there already, @nc
				 * is served now, not after the next
				 * epoll_wait.  No event names it. */
				if (nc && r &&
				    serve_conn(l, nc, params, true, r, s_p) ==
					    1)
					return 0;
				/* Dropping a pending connection to make room
				 * may have freed one that a later event
				 * names. */
				if (dropped)
					break;
				continue;
			}
			if (serve_conn(l, c, params, false, 0, s_p) == 1)
				return 0;
			/* serve_conn may have freed a connection that a
			 * later event names: stop and poll again. */
			break;
		}
		/* Then the control QPs of kept connections (after the
		 * sockets, so that the end of a connection its client gave
		 * up is seen even while OPENs keep arriving on others). */
		if (scan_ctl(l, params, s_p))
			return 0;
		if (timeout_ms >= 0 && tf__now_ns() >= deadline)
			return idle(l);
	}
}
