/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp.c - the soft provider's "tcp" transport, its entry points: the
 * ops table, context set-up and teardown (the listening socket, the epoll
 * set), a QP's address and its teardown.  How the transport works is
 * described in soft_tcp_int.h; the other soft_tcp_*.c files hold its parts.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "soft_tcp_int.h"

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
