/* SPDX-License-Identifier: MIT */
/*
 * verbs_cm.c - connecting QPs through rdma_cm (librdmacm).
 *
 * iWARP devices connect only this way: an iWARP QP runs over a TCP
 * connection that the kernel's iw_cm sets up, and siw refuses a user's
 * modify_qp to RTS ("no socket").  Other devices use it when
 * TOLLFREE_VERBS_CM=rdmacm says so.
 *
 * The provider interface stays what it is for every device: tf_qp_get_addr
 * gives a blob, the caller carries it to the peer, and tf_qp_connect takes
 * the peer's.  With rdma_cm the blob (version 2, verbs_blob.h) names the
 * IP address and port of the context's rdma_cm listener, the QP's number
 * and a random token.  Of the two sides, the one with the larger
 * (address, port, QPN) starts the connection (tf_verbs_addr_cm_active):
 * its tf_qp_connect resolves the peer's address, and the context's event
 * thread goes on with the route and a connect request whose private data
 * names the peer's QP and token and its own.  The other side accepts the
 * request for its QP once its own tf_qp_connect has said which peer QP
 * that must be; a request that comes earlier waits (held, neither
 * accepted nor rejected) until then, and one from any other QP is
 * rejected.  Neither tf_qp_connect waits for the connection: the session
 * layer connects the server's QP before it sends the client the server's
 * blob, so a server that waited for the client's side would wait for a
 * client that cannot start yet.  The first send on either side waits, up
 * to three transport timeouts, for the connection to be established
 * (tf_verbs_cm_wait), and fails with -ENOTCONN if it was not.
 *
 * Every cm id of a context lives on its one event channel, served by one
 * thread; a QP's state changes under the context's rdma_cm lock and waiters
 * sleep on its condition variable.  A cm id whose QP goes away is
 * destroyed outside the lock: rdma_destroy_id waits until the thread has
 * acknowledged every event it took for the id, except the connect request
 * that made it (librdmacm counts that one against the listener's id), so
 * a QP's close also waits while the thread accepts a request for it
 * (cm_accepting).
 *
 * iWARP's responder must not send first: verbs_iw.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "verbs_int.h"

#ifndef TF_HAVE_RDMACM

static int no_rdmacm(struct tf_verbs_ctx *c)
{
	tf_log_error(VERBS_SUBSYS,
		     "%s: QPs of this device connect through rdma_cm, and "
		     "tollfree was built without librdmacm",
		     c->base.device);
	return -EOPNOTSUPP;
}

int tf_verbs_cm_addr(struct tf_verbs_qp *qp, struct tf_verbs_addr *a)
{
	(void)a;
	return no_rdmacm(qp->ctx);
}

int tf_verbs_cm_connect(struct tf_verbs_qp *qp,
			const struct tf_verbs_addr *peer)
{
	(void)peer;
	return no_rdmacm(qp->ctx);
}

int tf_verbs_cm_wait(struct tf_verbs_qp *qp)
{
	(void)qp;
	return -ENOTCONN;
}

void tf_verbs_cm_qp_close(struct tf_verbs_qp *qp)
{
	(void)qp;
}

void tf_verbs_cm_stop(struct tf_verbs_ctx *c)
{
	(void)c;
}

#else /* TF_HAVE_RDMACM */

#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* Address and route resolution, each (ms). */
#define CM_RESOLVE_MS 2000
#define CM_BACKLOG    128
/* Ports tried for the listener (listen_on), and by an active iWARP id
 * whose local port the host's TCP stack holds (restart_active). */
#define CM_PORT_TRIES 8

/* The private data of a connect request, big-endian. */
#define CM_PD_MAGIC   0x5446434du /* "TFCM" */
/* 2: on iWARP, the initiator sends a token first (verbs_iw.c), which a
 * version-1 responder would take as the application's. */
#define CM_PD_VERSION 2
#define CM_PD_LEN     24

struct tf_verbs_cm {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen;
	struct sockaddr_storage addr; /* the listener's address and port */
	uint8_t family;		      /* 4 or 6 */
	pthread_t thread;
	int stop_fd; /* eventfd: the thread ends when it is readable */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a QP's cm_state changed */
	/* Connect requests held until their QP's tf_qp_connect (guarded by
	 * lock). */
	struct cm_held *held;
	unsigned n_held;
};

/* A connect request for one of our QPs that came before its
 * tf_qp_connect. */
struct cm_held {
	struct cm_held *next;
	struct rdma_cm_id *id;
	uint32_t qpn, peer_qpn, peer_token;
};

/* Requests held at most, over a context's QPs. */
#define CM_MAX_HELD   256

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static const char *ev_str(enum rdma_cm_event_type t)
{
	return rdma_event_str(t);
}

/* Three steps (address, route, connection), a transport timeout each. */
static uint64_t cm_timeout_ms(const struct tf_verbs_qp *qp)
{
	return 3ull * (qp->base.timeout_ms ? qp->base.timeout_ms : 4000);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Wait on the context's condition until @deadline_ms (CLOCK_MONOTONIC
 * milliseconds).  Returns false once the deadline has passed.
 * Lock must be held (cm->lock). */
static bool cm_wait_until(struct tf_verbs_cm *cm, uint64_t deadline_ms)
{
	struct timespec ts;

	if (now_ms() >= deadline_ms)
		return false;
	ts.tv_sec = (time_t)(deadline_ms / 1000);
	ts.tv_nsec = (long)(deadline_ms % 1000) * 1000000;
	pthread_cond_timedwait(&cm->cond, &cm->lock, &ts);
	return true;
}

/* Lock must be held (cm->lock). */
static void set_state(struct tf_verbs_cm *cm, struct tf_verbs_qp *qp,
		      uint8_t state, int err)
{
	qp->cm_state = state;
	if (state == VERBS_CM_FAILED)
		qp->cm_err = err;
	pthread_cond_broadcast(&cm->cond);
}

/* ---------------------------------------------------------------- QP state */

/*
 * Move @qp to RTR and RTS with the attributes rdma_cm negotiated (IB and
 * RoCE: the device does not do it itself, as iWARP's does), keeping our
 * own transport timeout and retry counts.
 */
static int move_rts(struct tf_verbs_qp *qp, struct rdma_cm_id *id)
{
	struct ibv_qp_attr a;
	int mask, ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	ret = rdma_init_qp_attr(id, &a, &mask);
	if (!ret)
		ret = ibv_modify_qp(qp->ibqp, &a, mask);
	if (ret) {
		ret = ret < 0 ? errno : ret;
		tf_log_error(VERBS_SUBSYS, "qp %u: rdma_cm modify to RTR: %s",
			     qp->base.qpn, strerror(ret));
		return -ret;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	ret = rdma_init_qp_attr(id, &a, &mask);
	if (!ret) {
		a.timeout = tf_verbs_ack_timeout(qp->base.timeout_ms);
		a.retry_cnt = VERBS_RETRY_CNT;
		a.rnr_retry = qp->base.rnr_retry;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
		ret = ibv_modify_qp(qp->ibqp, &a, mask);
	}
	if (ret) {
		ret = ret < 0 ? errno : ret;
		tf_log_error(VERBS_SUBSYS, "qp %u: rdma_cm modify to RTS: %s",
			     qp->base.qpn, strerror(ret));
		return -ret;
	}
	return 0;
}

static void conn_param(struct tf_verbs_qp *qp, struct rdma_conn_param *p,
		       const void *pd, uint8_t pd_len)
{
	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = pd_len;
	/* librdmacm takes the device's limits for these two. */
	p->responder_resources = RDMA_MAX_RESP_RES;
	p->initiator_depth = RDMA_MAX_INIT_DEPTH;
	p->retry_count = VERBS_RETRY_CNT;
	p->rnr_retry_count = qp->base.rnr_retry;
	p->qp_num = qp->base.qpn;
}

/* ---------------------------------------------------------------- events */

/*
 * Accept @id for @qp, which the caller has made the QP's (cm_id,
 * CONNECTING).  IB and RoCE QPs are moved to RTS first; iWARP's kernel
 * connection manager does that itself.  On failure the QP is FAILED and
 * the request rejected.  The QP must stay alive (its owner's call, or the
 * QP-map lock).
 */
static void accept_request(struct tf_verbs_ctx *c, struct tf_verbs_qp *qp,
			   struct rdma_cm_id *id)
{
	struct tf_verbs_cm *cm = c->cm;
	struct rdma_conn_param p;
	int ret;

	id->context = qp;
	ret = c->iwarp ? 0 : move_rts(qp, id);
	if (!ret) {
		conn_param(qp, &p, NULL, 0);
		ret = rdma_accept(id, &p) ? tf_verbs_errno(EIO) : 0;
		if (ret)
			tf_log_info(VERBS_SUBSYS, "qp %u: rdma_accept: %s",
				    qp->base.qpn, strerror(-ret));
	}
	if (!ret)
		return;
	rdma_reject(id, NULL, 0);
	pthread_mutex_lock(&cm->lock);
	/* The id stays the QP's until the QP is closed. */
	set_state(cm, qp, VERBS_CM_FAILED, -TF_EPEER);
	pthread_mutex_unlock(&cm->lock);
}

/* Whether @qp may take a connection now.  Lock must be held. */
static bool can_connect(const struct tf_verbs_qp *qp)
{
	return (qp->cm_state == VERBS_CM_IDLE ||
		qp->cm_state == VERBS_CM_FAILED) &&
	       !qp->cm_id;
}

/*
 * A connect request on the listener for the QP it names.  Accepted at once
 * if the QP's tf_qp_connect named the requesting QP, held if it has not
 * run yet, rejected otherwise.  Returns false if the request was rejected
 * and its id must be destroyed once the event is acknowledged.
 */
static bool on_request(struct tf_verbs_ctx *c, struct rdma_cm_event *ev)
{
	struct tf_verbs_cm *cm = c->cm;
	const uint8_t *pd = ev->param.conn.private_data;
	struct tf_verbs_qp *qp;
	struct cm_held *h = NULL;
	uint32_t qpn, token, peer_qpn, peer_token;
	const char *why = NULL;
	bool accept = false;

	ev->id->context = NULL;
	if (!pd || ev->param.conn.private_data_len < CM_PD_LEN ||
	    get32(pd) != CM_PD_MAGIC || pd[4] != CM_PD_VERSION) {
		tf_log_info(VERBS_SUBSYS,
			    "%s: connect request without tollfree's private "
			    "data: rejected",
			    c->base.device);
		rdma_reject(ev->id, NULL, 0);
		return false;
	}
	qpn = get32(pd + 8);
	token = get32(pd + 12);
	peer_qpn = get32(pd + 16);
	peer_token = get32(pd + 20);

	/* The QP-map lock keeps the QP alive while it is accepted. */
	pthread_rwlock_rdlock(&c->qp_lock);
	qp = tf_verbs_qp_find(c, qpn);
	pthread_mutex_lock(&cm->lock);
	if (!qp || !qp->cm_token || qp->cm_token != token)
		why = "no such QP";
	else if (!can_connect(qp) || qp->cm_active)
		why = "the QP is connected or connecting";
	else if (!qp->cm_expect && cm->n_held >= CM_MAX_HELD)
		why = "too many requests waiting";
	else if (qp->cm_expect && (qp->cm_peer_qpn != peer_qpn ||
				   qp->cm_peer_token != peer_token))
		why = "not from the QP it was connected to";
	if (!why && qp->cm_expect) {
		qp->cm_id = ev->id;
		qp->cm_accepting = true;
		set_state(cm, qp, VERBS_CM_CONNECTING, 0);
		accept = true;
	} else if (!why) {
		h = tf__calloc(1, sizeof(*h));
		if (h) {
			h->id = ev->id;
			h->qpn = qpn;
			h->peer_qpn = peer_qpn;
			h->peer_token = peer_token;
			h->next = cm->held;
			cm->held = h;
			cm->n_held++;
		} else {
			why = "out of memory";
		}
	}
	pthread_mutex_unlock(&cm->lock);
	if (accept) {
		accept_request(c, qp, ev->id);
		pthread_mutex_lock(&cm->lock);
		qp->cm_accepting = false;
		pthread_cond_broadcast(&cm->cond);
		pthread_mutex_unlock(&cm->lock);
	}
	pthread_rwlock_unlock(&c->qp_lock);
	if (why) {
		tf_log_info(VERBS_SUBSYS,
			    "%s: connect request for qp %u from qp %u: %s: "
			    "rejected",
			    c->base.device, qpn, peer_qpn, why);
		rdma_reject(ev->id, NULL, 0);
		return false;
	}
	return true;
}

/*
 * Take the held requests for @qp off the list: the one from the peer the
 * QP expects (cm_peer_*) into *@match_p if @match_p, every other into
 * *@other_p.  Lock must be held.
 */
static void take_held(struct tf_verbs_cm *cm, struct tf_verbs_qp *qp,
		      struct cm_held **match_p, struct cm_held **other_p)
{
	struct cm_held **pp = &cm->held;

	while (*pp) {
		struct cm_held *h = *pp;

		if (h->qpn != qp->base.qpn) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		cm->n_held--;
		if (match_p && !*match_p && h->peer_qpn == qp->cm_peer_qpn &&
		    h->peer_token == qp->cm_peer_token) {
			h->next = NULL;
			*match_p = h;
		} else {
			h->next = *other_p;
			*other_p = h;
		}
	}
}

/* Reject and destroy held requests (no lock held: destroying an id
 * waits for the event thread). */
static void reject_held(struct cm_held *h)
{
	while (h) {
		struct cm_held *next = h->next;

		rdma_reject(h->id, NULL, 0);
		rdma_destroy_id(h->id);
		tf__free(h);
		h = next;
	}
}

static void local_sockaddr(const struct tf_verbs_cm *cm,
			   struct sockaddr_storage *ss);

/*
 * iWARP: rdma_connect of @old failed with EADDRINUSE.  rdma_cm picked the
 * local port in its own port space, and the connection then needs that
 * port in the host's TCP stack too, where another socket may hold it (a
 * listening one, say): a new id gets another port, and starts over.  Its
 * events come to this thread, after this one.  Returns the id to destroy
 * once the event is acknowledged (@old, or the new one if the QP was
 * closed meanwhile), or NULL with the connection failed.  Once the new id
 * is the QP's, a close may free the QP: it is not touched after.
 */
static struct rdma_cm_id *restart_active(struct tf_verbs_ctx *c,
					 struct tf_verbs_qp *qp,
					 struct rdma_cm_id *old)
{
	struct tf_verbs_cm *cm = c->cm;
	struct sockaddr_storage src, dst;
	struct rdma_cm_id *id;
	uint32_t qpn = qp->base.qpn, peer = qp->cm_peer_qpn;
	bool mine;

	memcpy(&dst, rdma_get_peer_addr(old), sizeof(dst));
	local_sockaddr(cm, &src);
	if (rdma_create_id(cm->ch, &id, qp, RDMA_PS_TCP))
		return NULL;
	if (rdma_resolve_addr(id, (struct sockaddr *)&src,
			      (struct sockaddr *)&dst, CM_RESOLVE_MS)) {
		rdma_destroy_id(id);
		return NULL;
	}
	pthread_mutex_lock(&cm->lock);
	mine = qp->cm_id == old && qp->cm_state == VERBS_CM_CONNECTING;
	if (mine) {
		qp->cm_id = id;
		qp->cm_tries++;
	}
	pthread_mutex_unlock(&cm->lock);
	tf_log_info(VERBS_SUBSYS,
		    "qp %u: connecting to qp %u: local port in use, another",
		    qpn, peer);
	return mine ? old : id;
}

/* The active side's next step after an event on its own cm id; returns
 * an id to destroy once the event is acknowledged, or NULL. */
static struct rdma_cm_id *on_active(struct tf_verbs_ctx *c,
				    struct rdma_cm_event *ev)
{
	struct tf_verbs_cm *cm = c->cm;
	struct tf_verbs_qp *qp = ev->id->context;
	struct rdma_conn_param p;
	uint8_t pd[CM_PD_LEN];
	const char *step = NULL; /* our call that failed */
	int ret = 0;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(ev->id, CM_RESOLVE_MS)) {
			ret = tf_verbs_errno(EIO);
			step = "rdma_resolve_route";
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		pthread_mutex_lock(&cm->lock);
		memset(pd, 0, sizeof(pd));
		put32(pd, CM_PD_MAGIC);
		pd[4] = CM_PD_VERSION;
		put32(pd + 8, qp->cm_peer_qpn);
		put32(pd + 12, qp->cm_peer_token);
		put32(pd + 16, qp->base.qpn);
		put32(pd + 20, qp->cm_token);
		pthread_mutex_unlock(&cm->lock);
		conn_param(qp, &p, pd, sizeof(pd));
		if (rdma_connect(ev->id, &p)) {
			ret = tf_verbs_errno(EIO);
			step = "rdma_connect";
			if (ret == -EADDRINUSE && c->iwarp &&
			    qp->cm_tries + 1 < CM_PORT_TRIES) {
				struct rdma_cm_id *dead =
					restart_active(c, qp, ev->id);

				if (dead)
					return dead;
			}
		}
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		/* IB and RoCE: our QP, not rdma_cm's, so we move it (it
		 * logs its own failure). */
		ret = move_rts(qp, ev->id);
		if (!ret && rdma_establish(ev->id)) {
			ret = tf_verbs_errno(EIO);
			step = "rdma_establish";
		}
		if (!ret) {
			pthread_mutex_lock(&cm->lock);
			set_state(cm, qp, VERBS_CM_ESTABLISHED, 0);
			pthread_mutex_unlock(&cm->lock);
		}
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		/* No route, or the peer refused (no such QP, not the QP it
		 * expects) or went away: the peer cannot be reached. */
		ret = -TF_EPEER;
		break;
	default:
		return NULL;
	}
	if (ret) {
		if (step)
			tf_log_info(VERBS_SUBSYS,
				    "qp %u: connecting to qp %u: %s after %s: "
				    "%s",
				    qp->base.qpn, qp->cm_peer_qpn, step,
				    ev_str(ev->event), strerror(-ret));
		else
			tf_log_info(VERBS_SUBSYS,
				    "qp %u: connecting to qp %u: %s (status "
				    "%d)",
				    qp->base.qpn, qp->cm_peer_qpn,
				    ev_str(ev->event), ev->status);
		pthread_mutex_lock(&cm->lock);
		if (qp->cm_state == VERBS_CM_CONNECTING)
			set_state(cm, qp, VERBS_CM_FAILED, ret);
		pthread_mutex_unlock(&cm->lock);
	}
	return NULL;
}

/* Returns the cm id to destroy once @ev is acknowledged, or NULL. */
static struct rdma_cm_id *on_event(struct tf_verbs_ctx *c,
				   struct rdma_cm_event *ev)
{
	struct tf_verbs_cm *cm = c->cm;
	struct tf_verbs_qp *qp;

	tf_log_debug(VERBS_SUBSYS, "%s: rdma_cm event %s (status %d)",
		     c->base.device, ev_str(ev->event), ev->status);
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_request(c, ev) ? NULL : ev->id;
	if (ev->id == cm->listen) {
		tf_log_info(VERBS_SUBSYS, "%s: rdma_cm listener: %s",
			    c->base.device, ev_str(ev->event));
		return NULL;
	}
	qp = ev->id->context;
	if (!qp)
		return NULL;
	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED: {
		/* iWARP: the initiator's token goes first (verbs_iw.c); the
		 * application's sends wait for the state set here. */
		int ret = c->iwarp && qp->cm_active ? tf_verbs_iw_send_token(qp)
						    : 0;

		pthread_mutex_lock(&cm->lock);
		if (qp->cm_state == VERBS_CM_CONNECTING) {
			if (ret)
				set_state(cm, qp, VERBS_CM_FAILED, ret);
			else
				set_state(cm, qp, VERBS_CM_ESTABLISHED, 0);
		}
		pthread_mutex_unlock(&cm->lock);
		break;
	}
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		/* iWARP's kernel moved the QP to the error state.  On IB and
		 * RoCE the QP is ours, not rdma_cm's, and stays as it is: a
		 * dead peer shows as retries exceeded, as without rdma_cm. */
		if (c->iwarp)
			atomic_store(&qp->cm_broken, true);
		pthread_mutex_lock(&cm->lock);
		if (qp->cm_state == VERBS_CM_CONNECTING)
			set_state(cm, qp, VERBS_CM_FAILED, -ECONNRESET);
		else if (qp->cm_state == VERBS_CM_ESTABLISHED)
			set_state(cm, qp, VERBS_CM_CLOSED, 0);
		pthread_mutex_unlock(&cm->lock);
		break;
	default:
		if (qp->cm_active)
			return on_active(c, ev);
		/* A passive id: the active side gave up. */
		if (ev->event == RDMA_CM_EVENT_REJECTED ||
		    ev->event == RDMA_CM_EVENT_CONNECT_ERROR ||
		    ev->event == RDMA_CM_EVENT_UNREACHABLE) {
			pthread_mutex_lock(&cm->lock);
			if (qp->cm_state == VERBS_CM_CONNECTING)
				set_state(cm, qp, VERBS_CM_FAILED,
					  -ECONNABORTED);
			pthread_mutex_unlock(&cm->lock);
		}
		break;
	}
	return NULL;
}

static void *cm_thread(void *arg)
{
	struct tf_verbs_ctx *c = arg;
	struct tf_verbs_cm *cm = c->cm;
	struct pollfd fds[2] = {{.fd = cm->ch->fd, .events = POLLIN},
				{.fd = cm->stop_fd, .events = POLLIN}};

	for (;;) {
		struct rdma_cm_event *ev;
		struct rdma_cm_id *dead;

		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			tf_log_error(VERBS_SUBSYS, "rdma_cm thread: poll: %m");
			break;
		}
		if (fds[1].revents)
			break;
		/* The channel is non-blocking: drain it. */
		while (!rdma_get_cm_event(cm->ch, &ev)) {
			dead = on_event(c, ev);
			rdma_ack_cm_event(ev);
			if (dead)
				rdma_destroy_id(dead);
		}
	}
	return NULL;
}

/* ---------------------------------------------------------------- listener */

static bool same_device(struct tf_verbs_ctx *c, struct rdma_cm_id *id)
{
	return id->verbs &&
	       !strcmp(ibv_get_device_name(id->verbs->device),
		       c->base.device) &&
	       id->port_num == c->port;
}

/*
 * A listening id on @i's address: 0 (*@id_p set), 1 when the address is
 * not this device's, or the error.  rdma_cm picks the port in its own port
 * space; on iWARP the listen then takes that port in the host's TCP stack
 * too, where a socket may hold it (one in TIME_WAIT, after a burst of TCP
 * connections): another port is the answer, a few times over.
 */
static int listen_on(struct tf_verbs_ctx *c, struct tf_verbs_cm *cm,
		     const struct ifaddrs *i, struct rdma_cm_id **id_p)
{
	struct rdma_cm_id *id;
	int ret;

	for (int tries = 0;; tries++) {
		if (rdma_create_id(cm->ch, &id, NULL, RDMA_PS_TCP))
			return tf_verbs_errno(EIO);
		if (rdma_bind_addr(id, i->ifa_addr) || !same_device(c, id)) {
			rdma_destroy_id(id);
			return 1;
		}
		if (!rdma_listen(id, CM_BACKLOG)) {
			*id_p = id;
			return 0;
		}
		ret = tf_verbs_errno(EIO);
		rdma_destroy_id(id);
		if (ret != -EADDRINUSE || tries + 1 >= CM_PORT_TRIES) {
			tf_log_error(VERBS_SUBSYS, "%s: rdma_listen on %s: %s",
				     c->base.device, i->ifa_name,
				     strerror(-ret));
			return ret;
		}
		tf_log_debug(VERBS_SUBSYS,
			     "%s: rdma_listen on %s: port in use, another",
			     c->base.device, i->ifa_name);
	}
}

/*
 * Listen on the first IP address that rdma_cm maps to our device and port:
 * binding a cm id to an address tells which device owns it, for iWARP as
 * for RoCE.  Loopback and link-local addresses are left out (rdma_cm binds
 * loopback to whichever device comes first).
 */
static int cm_listen(struct tf_verbs_ctx *c, struct tf_verbs_cm *cm)
{
	struct ifaddrs *ifs, *i;
	int ret = -EADDRNOTAVAIL;

	if (getifaddrs(&ifs))
		return tf_verbs_errno(EIO);
	for (int fam = AF_INET; ret && fam; fam = fam == AF_INET ? AF_INET6 : 0)
		for (i = ifs; ret && i; i = i->ifa_next) {
			struct rdma_cm_id *id = NULL;
			int r;

			if (!i->ifa_addr || i->ifa_addr->sa_family != fam ||
			    (i->ifa_flags & IFF_LOOPBACK) ||
			    !(i->ifa_flags & IFF_UP))
				continue;
			if (fam == AF_INET6 &&
			    IN6_IS_ADDR_LINKLOCAL(
				    &((struct sockaddr_in6 *)i->ifa_addr)
					     ->sin6_addr))
				continue;
			r = listen_on(c, cm, i, &id);
			if (r > 0)
				continue;
			if (r < 0) {
				ret = r;
				break;
			}
			cm->listen = id;
			memcpy(&cm->addr, rdma_get_local_addr(id),
			       fam == AF_INET ? sizeof(struct sockaddr_in)
					      : sizeof(struct sockaddr_in6));
			cm->family = fam == AF_INET ? 4 : 6;
			tf_log_info(VERBS_SUBSYS,
				    "%s: rdma_cm listens on %s, port %u",
				    c->base.device, i->ifa_name,
				    (unsigned)ntohs(rdma_get_src_port(id)));
			ret = 0;
		}
	freeifaddrs(ifs);
	if (ret == -EADDRNOTAVAIL)
		tf_log_error(VERBS_SUBSYS,
			     "%s port %u: no IP address of an up interface "
			     "belongs to it: rdma_cm cannot connect its QPs",
			     c->base.device, c->port);
	return ret;
}

/* Start rdma_cm for @c: channel, listener, thread.  Once per context. */
static int cm_start(struct tf_verbs_ctx *c)
{
	struct tf_verbs_cm *cm;
	int fl, ret;

	pthread_mutex_lock(&c->cm_start_lock);
	if (c->cm) {
		pthread_mutex_unlock(&c->cm_start_lock);
		return 0;
	}
	cm = tf__calloc(1, sizeof(*cm));
	if (!cm) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	cm->stop_fd = -1;
	cm->ch = rdma_create_event_channel();
	if (!cm->ch) {
		ret = tf_verbs_errno(ENODEV);
		tf_log_error(VERBS_SUBSYS,
			     "rdma_create_event_channel: %m (is rdma_ucm "
			     "loaded?)");
		goto err_free;
	}
	fl = fcntl(cm->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(cm->ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		ret = tf_verbs_errno(EIO);
		tf_log_error(VERBS_SUBSYS, "fcntl(O_NONBLOCK): %m");
		goto err_chan;
	}
	ret = cm_listen(c, cm);
	if (ret)
		goto err_chan;
	cm->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (cm->stop_fd < 0) {
		ret = tf_verbs_errno(EMFILE);
		tf_log_error(VERBS_SUBSYS, "eventfd: %m");
		goto err_listen;
	}
	pthread_mutex_init(&cm->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&cm->cond, &ca);
		pthread_condattr_destroy(&ca);
	}
	/* The thread reads c->cm: publish it first. */
	c->cm = cm;
	ret = pthread_create(&cm->thread, NULL, cm_thread, c);
	if (ret) {
		c->cm = NULL;
		tf_log_error(VERBS_SUBSYS, "pthread_create: %s", strerror(ret));
		ret = -ret;
		pthread_cond_destroy(&cm->cond);
		pthread_mutex_destroy(&cm->lock);
		close(cm->stop_fd);
		goto err_listen;
	}
	pthread_mutex_unlock(&c->cm_start_lock);
	return 0;

err_listen:
	rdma_destroy_id(cm->listen);
err_chan:
	rdma_destroy_event_channel(cm->ch);
err_free:
	tf__free(cm);
out_unlock:
	pthread_mutex_unlock(&c->cm_start_lock);
	return ret;
}

void tf_verbs_cm_stop(struct tf_verbs_ctx *c)
{
	struct tf_verbs_cm *cm = c->cm;
	uint64_t one = 1;

	if (!cm)
		return;
	if (write(cm->stop_fd, &one, sizeof(one)) != sizeof(one))
		tf_log_warn(VERBS_SUBSYS, "rdma_cm thread: eventfd: %m");
	pthread_join(cm->thread, NULL);
	close(cm->stop_fd);
	/* Requests for QPs that never connected (their QPs are gone). */
	reject_held(cm->held);
	cm->held = NULL;
	rdma_destroy_id(cm->listen);
	rdma_destroy_event_channel(cm->ch);
	pthread_cond_destroy(&cm->cond);
	pthread_mutex_destroy(&cm->lock);
	tf__free(cm);
	c->cm = NULL;
}

/* ---------------------------------------------------------------- QPs */

int tf_verbs_cm_addr(struct tf_verbs_qp *qp, struct tf_verbs_addr *a)
{
	struct tf_verbs_ctx *c = qp->ctx;
	struct tf_verbs_cm *cm;
	int ret;

	ret = cm_start(c);
	if (ret)
		return ret;
	cm = c->cm;
	pthread_mutex_lock(&cm->lock);
	while (!qp->cm_token) {
		ret = tf__random(&qp->cm_token, sizeof(qp->cm_token));
		if (ret)
			break;
	}
	a->cm_token = qp->cm_token;
	pthread_mutex_unlock(&cm->lock);
	if (ret)
		return ret;
	a->cm = 1;
	a->cm_family = cm->family;
	memset(a->cm_ip, 0, sizeof(a->cm_ip));
	if (cm->family == 4) {
		const struct sockaddr_in *s = (const void *)&cm->addr;

		memcpy(a->cm_ip, &s->sin_addr, 4);
		a->cm_port = ntohs(s->sin_port);
	} else {
		const struct sockaddr_in6 *s = (const void *)&cm->addr;

		memcpy(a->cm_ip, &s->sin6_addr, 16);
		a->cm_port = ntohs(s->sin6_port);
	}
	return 0;
}

static socklen_t peer_sockaddr(const struct tf_verbs_addr *peer,
			       struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (peer->cm_family == 4) {
		struct sockaddr_in *s = (void *)ss;

		s->sin_family = AF_INET;
		s->sin_port = htons(peer->cm_port);
		memcpy(&s->sin_addr, peer->cm_ip, 4);
		return sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (void *)ss;

		s->sin6_family = AF_INET6;
		s->sin6_port = htons(peer->cm_port);
		memcpy(&s->sin6_addr, peer->cm_ip, 16);
		return sizeof(*s);
	}
}

/* Our listener's address with port 0: where an active id binds. */
static void local_sockaddr(const struct tf_verbs_cm *cm,
			   struct sockaddr_storage *ss)
{
	*ss = cm->addr;
	if (cm->family == 4)
		((struct sockaddr_in *)ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)ss)->sin6_port = 0;
}

/* Start the connection to @peer: resolve its address; the event thread
 * does the rest (on_active). */
static int connect_active(struct tf_verbs_qp *qp,
			  const struct tf_verbs_addr *peer)
{
	struct tf_verbs_ctx *c = qp->ctx;
	struct tf_verbs_cm *cm = c->cm;
	struct sockaddr_storage src, dst;
	struct rdma_cm_id *id = NULL;
	int ret;

	pthread_mutex_lock(&cm->lock);
	if (!can_connect(qp) || qp->cm_expect) {
		pthread_mutex_unlock(&cm->lock);
		return -EISCONN;
	}
	qp->cm_peer_qpn = peer->qpn;
	qp->cm_peer_token = peer->cm_token;
	qp->cm_active = true;
	qp->cm_tries = 0;
	qp->cm_expect = true;
	set_state(cm, qp, VERBS_CM_CONNECTING, 0);
	pthread_mutex_unlock(&cm->lock);

	if (rdma_create_id(cm->ch, &id, qp, RDMA_PS_TCP)) {
		ret = tf_verbs_errno(ENOMEM);
		tf_log_error(VERBS_SUBSYS, "rdma_create_id: %m");
		goto err;
	}
	local_sockaddr(cm, &src);
	peer_sockaddr(peer, &dst);
	/* The id is the QP's before its first event can come. */
	pthread_mutex_lock(&cm->lock);
	qp->cm_id = id;
	pthread_mutex_unlock(&cm->lock);
	if (rdma_resolve_addr(id, (struct sockaddr *)&src,
			      (struct sockaddr *)&dst, CM_RESOLVE_MS)) {
		ret = tf_verbs_errno(EHOSTUNREACH);
		tf_log_info(VERBS_SUBSYS, "qp %u: rdma_resolve_addr: %s",
			    qp->base.qpn, strerror(-ret));
		ret = ret == -ENOMEM ? ret : -TF_EPEER;
		goto err;
	}
	atomic_store(&qp->cm_wait, true);
	return 0;

err:
	pthread_mutex_lock(&cm->lock);
	id = qp->cm_id;
	qp->cm_id = NULL;
	qp->cm_active = false;
	qp->cm_expect = false;
	set_state(cm, qp, VERBS_CM_IDLE, 0);
	pthread_mutex_unlock(&cm->lock);
	if (id)
		rdma_destroy_id(id);
	return ret;
}

/* The peer starts the connection: note which QP it must be, and accept
 * its request if it came already (held by on_request). */
static int connect_passive(struct tf_verbs_qp *qp,
			   const struct tf_verbs_addr *peer)
{
	struct tf_verbs_ctx *c = qp->ctx;
	struct tf_verbs_cm *cm = c->cm;
	struct cm_held *match = NULL, *other = NULL;

	pthread_mutex_lock(&cm->lock);
	if (!can_connect(qp) || qp->cm_expect) {
		pthread_mutex_unlock(&cm->lock);
		return -EISCONN;
	}
	qp->cm_expect = true;
	qp->cm_peer_qpn = peer->qpn;
	qp->cm_peer_token = peer->cm_token;
	take_held(cm, qp, &match, &other);
	if (match) {
		qp->cm_id = match->id;
		set_state(cm, qp, VERBS_CM_CONNECTING, 0);
	}
	atomic_store(&qp->cm_wait, true);
	pthread_mutex_unlock(&cm->lock);
	if (other)
		tf_log_info(VERBS_SUBSYS,
			    "qp %u: connect requests from other QPs than qp "
			    "%u: rejected",
			    qp->base.qpn, peer->qpn);
	reject_held(other);
	if (match) {
		accept_request(c, qp, match->id);
		tf__free(match);
	}
	return 0;
}

int tf_verbs_cm_connect(struct tf_verbs_qp *qp,
			const struct tf_verbs_addr *peer)
{
	struct tf_verbs_addr self;
	int ret;

	/* Our own (address, port, QPN), as in our blob. */
	memset(&self, 0, sizeof(self));
	ret = tf_verbs_cm_addr(qp, &self);
	if (ret)
		return ret;
	self.qpn = qp->base.qpn;
	if (self.cm_family == peer->cm_family &&
	    !memcmp(self.cm_ip, peer->cm_ip, 16) &&
	    self.cm_port == peer->cm_port && self.qpn == peer->qpn)
		return -EINVAL; /* a QP cannot connect to itself */
	return tf_verbs_addr_cm_active(&self, peer) ? connect_active(qp, peer)
						    : connect_passive(qp, peer);
}

/* The connection of @qp failed or ended (the responder's wait for the
 * initiator's token, verbs_iw.c). */
static bool cm_gone(struct tf_verbs_qp *qp)
{
	struct tf_verbs_cm *cm = qp->ctx->cm;
	bool gone;

	pthread_mutex_lock(&cm->lock);
	gone = qp->cm_state != VERBS_CM_ESTABLISHED;
	pthread_mutex_unlock(&cm->lock);
	return gone || atomic_load(&qp->cm_broken);
}

int tf_verbs_cm_wait(struct tf_verbs_qp *qp)
{
	struct tf_verbs_cm *cm = qp->ctx->cm;
	uint64_t deadline = now_ms() + cm_timeout_ms(qp);
	int ret;

	pthread_mutex_lock(&cm->lock);
	while ((qp->cm_state == VERBS_CM_IDLE ||
		qp->cm_state == VERBS_CM_CONNECTING) &&
	       cm_wait_until(cm, deadline))
		;
	switch (qp->cm_state) {
	case VERBS_CM_ESTABLISHED:
		if (qp->ctx->iwarp && !qp->cm_active) {
			/* The responder: not before the initiator's first
			 * message (verbs_iw.c).  The QP's one poster is
			 * here, and here only until cm_wait is cleared; the
			 * event thread must not wait for it. */
			pthread_mutex_unlock(&cm->lock);
			ret = tf_verbs_iw_wait_token(qp, deadline, cm_gone);
			pthread_mutex_lock(&cm->lock);
			if (ret)
				break;
		}
		atomic_store(&qp->cm_wait, false);
		ret = 0;
		break;
	case VERBS_CM_CLOSED:
		/* Closed after it was established: the QP is in the error
		 * state, and what is posted now is flushed, as on any
		 * device. */
		atomic_store(&qp->cm_wait, false);
		ret = 0;
		break;
	case VERBS_CM_FAILED:
		tf_log_info(VERBS_SUBSYS, "qp %u: no connection to qp %u: %s",
			    qp->base.qpn, qp->cm_peer_qpn,
			    tf_strerror(qp->cm_err));
		ret = -ENOTCONN;
		break;
	default:
		tf_log_info(VERBS_SUBSYS, "qp %u: no connection within %llu ms",
			    qp->base.qpn,
			    (unsigned long long)cm_timeout_ms(qp));
		ret = -ENOTCONN;
		break;
	}
	pthread_mutex_unlock(&cm->lock);
	return ret;
}

void tf_verbs_cm_qp_close(struct tf_verbs_qp *qp)
{
	struct tf_verbs_cm *cm = qp->ctx->cm;
	struct cm_held *held = NULL;
	struct rdma_cm_id *id;

	if (!cm)
		return;
	pthread_mutex_lock(&cm->lock);
	/* Not while the event thread accepts a request for the QP: the id
	 * of a connect request is destroyed without waiting for that event
	 * (librdmacm counts it against the listener's id), and would be
	 * freed under rdma_accept. */
	while (qp->cm_accepting)
		pthread_cond_wait(&cm->cond, &cm->lock);
	id = qp->cm_id;
	qp->cm_id = NULL;
	set_state(cm, qp, VERBS_CM_CLOSED, 0);
	take_held(cm, qp, NULL, &held);
	pthread_mutex_unlock(&cm->lock);
	reject_held(held);
	if (!id)
		return;
	/* Events for the id may be in the thread's hands: destroy waits
	 * for their acknowledgement, so no lock is held here.  The thread
	 * finds the QP through the id until then, and the QP is freed only
	 * after this returns. */
	rdma_disconnect(id);
	rdma_destroy_id(id);
}

#endif /* TF_HAVE_RDMACM */
