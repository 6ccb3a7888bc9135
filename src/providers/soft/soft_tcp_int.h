/* SPDX-License-Identifier: MIT */
/*
 * soft_tcp_int.h - internals of the soft provider's "tcp" transport: one TCP
 * connection per QP, for peers on other hosts (or on this one).
 *
 * Set-up.  Each context has one listening socket (TOLLFREE_SOFT_TCP_ADDR /
 * TOLLFREE_SOFT_TCP_PORT), created by ctx_init; a QP's address blob carries
 * its ip/port.  Of two QPs, the one with the smaller (ctx nonce, qpn) pair
 * connects and the other accepts (soft_tcp_is_connector), so that exactly
 * one connection is made whatever the order of the two tf_qp_connect calls.
 * The connector's first frame is a HELLO naming both QPs and both context
 * nonces; the acceptor attaches the socket to the QP it names only if that
 * QP was connected to exactly that peer.  A HELLO that arrives before the
 * local tf_qp_connect waits (bounded in number and time).
 *
 * Frames.  A fixed header in network byte order (see soft_int.h, "tcp
 * wire") then the payload.  The parser is a pure function; anything it
 * rejects, and any frame that does not fit the connection's state, closes
 * that connection with one log line and moves its QP to error.
 *
 * Reliability.  TCP gives order and delivery, so each request is sent once
 * and executed once, in order: requests carry a PSN, the responder expects
 * exactly the next one, and every response (ACK/NAK, READ_RESP,
 * ATOMIC_RESP) with PSN n also acknowledges every request before n.  The
 * one exception is RNR: the responder NAKs the SEND it cannot place and
 * then drops every request until that PSN comes again (go-back-N, as IB
 * does), and the requester re-sends from there after a short delay.
 *
 * Failure.  A malformed or out-of-place frame, a reset, or EOF while work
 * is outstanding fails the QP: the oldest outstanding send WQE completes
 * with RETRY_EXC (REM_OP for a protocol violation), the rest are flushed.
 * A clean EOF with nothing outstanding leaves the QP as it is, as on RC
 * hardware, until it next sends (then RETRY_EXC).  A requester that sees
 * no progress for the QP's timeout_ms fails the same way, so a peer that
 * stops reading cannot hold the sender.  A QP in error closes its socket
 * after the last NAK has drained (the peer then sees EOF).
 *
 * Placement.  A frame is executed only once it is completely in the
 * receive buffer, so the access check and the copy into registered memory
 * happen in one step of one progress call (a revocation waits for at most
 * one memcpy, never for the peer).  READ data goes to the socket straight
 * from the region; what the socket does not take is copied into the send
 * queue.  Requests send the user's memory directly (writev of header and
 * SGEs); it stays valid until the WQE completes.
 *
 * Locking (see soft_int.h).  Context-level state (lists of connections,
 * the epoll set) changes only under ctx->progress_lock.  A connection
 * attached to a QP is protected by qp->lock: submit runs under it, and
 * progress takes it (after progress_lock) before touching the connection.
 * Sockets are closed only under progress_lock, so that a descriptor number
 * is never reused while progress may still use it.
 *
 * Files: one role each, listed at the top of soft_int.h.
 */
#ifndef TOLLFREE_SOFT_TCP_INT_H
#define TOLLFREE_SOFT_TCP_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "soft_int.h"

#define SUB "soft-tcp"

/* Receive buffer kept per connection; frames larger than this grow it up
 * to one header plus TOLLFREE_SOFT_MAX_MSG. */
#define TCP_RXBUF_MIN (64u * 1024)
/* Responses (READ data) this side has queued but not sent yet; above it,
 * the responder stops executing requests until the peer reads (the value
 * is in soft_int.h, where tests read it). */
#define TCP_TX_OWNED_MAX SOFT_TCP_TX_OWNED_MAX
/* Accepted sockets that have not been matched to a QP yet: a quarter of
 * the QPs a context may hold, so that a peer opening many connections at
 * once (1,000 sessions, conf_session_concurrent) is not refused while this
 * side's progress catches up, and a flood still stays bounded. */
#define TCP_MAX_PENDING (SOFT_MAX_QP / 4)
#define TCP_PENDING_NS	(30ull * 1000000000)
/* How long a detached connection may drain its last responses. */
#define TCP_LINGER_NS (2ull * 1000000000)
/* RNR back-off between re-sends (doubles up to the maximum). */
#define TCP_RNR_MIN_NS (100ull * 1000)
#define TCP_RNR_MAX_NS (10ull * 1000000)
/* Period of the scan for transport timeouts. */
#define TCP_SCAN_NS (1000000ull)
#define TCP_EVENTS  64
/* SGEs gathered on the stack; more are sent through a heap iovec. */
#define TCP_IOV_STACK 32

enum tcp_state {
	TCP_CONNECTING, /* connector: connect() in flight */
	TCP_WAITING,	/* acceptor QP: no socket yet */
	TCP_PENDING,	/* accepted socket, not matched to a QP yet */
	TCP_UP,
	TCP_LINGER, /* detached from its QP: drain, then close */
	TCP_LOST,   /* socket gone while the QP had nothing outstanding */
};

/* A frame (or its unsent tail) waiting in a connection's send queue. */
struct tcp_txe {
	struct tcp_txe *next;
	size_t len; /* header + payload */
	size_t off; /* bytes already sent */
	uint32_t hdr_len;
	bool req; /* payload is a WQE's memory (valid until done) */
	uint32_t niov;
	uint8_t hdr[SOFT_TCP_HDR_MAX];
	struct iovec iov[];
};

struct soft_tcp;

struct tcp_conn {
	struct soft_tcp *tc;
	struct tcp_conn *next, *prev; /* tc->conns (progress_lock) */
	enum tcp_state state;
	int fd;
	uint32_t ev;	    /* epoll interest registered, 0 if none */
	struct soft_qp *qp; /* NULL when pending or lingering */
	bool detach;	    /* the QP went to error (set under qp->lock) */
	bool dead;	    /* in the graveyard */
	bool work;	    /* service at the next pass without an event */
	bool shut;	    /* shutdown(SHUT_WR) done */
	bool broken; /* a send failed outside progress: fail at next pass */
	bool have_hello;
	struct soft_tcp_hdr hello;
	uint64_t deadline_ns; /* pending or lingering: close after */
	/* receive: valid bytes are rx[rx_off, rx_off + rx_len) */
	uint8_t *rx;
	size_t rx_cap, rx_off, rx_len;
	uint64_t rx_big_ns; /* last time a large frame needed a big buffer */
	bool throttled;
	/* send queue */
	struct tcp_txe *txq, **txq_tail;
	size_t tx_owned; /* bytes of queued frames the queue owns */
	/* requester: WQEs submitted and not completed, in PSN order;
	 * out_sent of them (from the oldest) have been handed to the send
	 * path since the last go-back */
	struct soft_swqe **out;
	uint32_t out_size, out_head, out_cnt, out_sent;
	uint32_t next_psn;
	uint64_t last_act_ns; /* last sign of life while work is due */
	uint64_t rnr_due_ns;  /* 0, or when to re-send after an RNR NAK */
	uint64_t rnr_delay_ns;
	/* responder */
	uint32_t expect_psn;
	bool resp_drop; /* after an RNR NAK: drop until expect_psn */
	bool ack_pending;
	uint32_t ack_psn;
};

struct soft_tcp {
	struct soft_ctx *ctx;
	int epfd;
	int lfd;
	int family; /* AF_INET or AF_INET6 */
	uint8_t ip[16];
	uint16_t port;
	uint64_t max_msg;
	struct tcp_conn *conns; /* every connection, progress_lock */
	struct tcp_conn *grave; /* freed at the end of a pass */
	uint32_t n_pending;
	uint32_t n_work;
	atomic_bool kick; /* a QP went to error outside progress */
	uint64_t next_scan_ns;
	char listen_tag; /* epoll cookie of the listener */
};

static inline void tcp_set_work(struct tcp_conn *c, bool on)
{
	if (c->work == on)
		return;
	c->work = on;
	if (on)
		c->tc->n_work++;
	else
		c->tc->n_work--;
}

/* The connection no longer serves its QP: it was detached, or the QP went
 * to error (the engine's qp_fini only marks it; see tcp_qp_fini). */
static inline bool tcp_gone(const struct tcp_conn *c)
{
	return !c->qp || c->detach;
}

/* ---------------------------------------------------------------- internal
 * Functions shared between the parts of the transport (the comment above
 * each definition gives its locking).  tcp_set_work and tcp_gone above stay
 * inline: the data path calls them from several files. */

/* Connections (soft_tcp_conn.c) */
const char *soft_tcp_fmt_peer(const struct soft_peer_addr *pa, char *buf,
			      size_t len);
void soft_tcp_update_ev(struct tcp_conn *c);
void soft_tcp_conn_bury(struct tcp_conn *c);
void soft_tcp_free_grave(struct soft_tcp *tc);
void soft_tcp_close_soft(struct tcp_conn *c);
void soft_tcp_detach(struct tcp_conn *c);
void soft_tcp_fail(struct tcp_conn *c, enum tf_wc_status why);
void soft_tcp_lose(struct tcp_conn *c);
int soft_tcp_connected(struct tcp_conn *c);
int soft_tcp_pending_service(struct tcp_conn *p, uint32_t events);
int soft_tcp_accept(struct soft_tcp *tc);
int soft_tcp_connect(struct soft_qp *qp);

/* Send path (soft_tcp_send.c) */
int soft_tcp_flush(struct tcp_conn *c);
int soft_tcp_send_frame(struct tcp_conn *c, const uint8_t *hdr, uint32_t hlen,
			const struct iovec *iov, uint32_t niov, size_t plen,
			bool req);
int soft_tcp_send_simple(struct tcp_conn *c, const struct soft_tcp_hdr *h);
int soft_tcp_send_ack(struct tcp_conn *c, uint32_t psn, uint8_t status);
void soft_tcp_flushed(struct tcp_conn *c);

/* Requester (soft_tcp_req.c) */
int soft_tcp_push_requests(struct tcp_conn *c);
int soft_tcp_submit(struct soft_qp *qp, struct soft_swqe *wqe);
int soft_tcp_response(struct tcp_conn *c, const struct soft_tcp_hdr *h,
		      const uint8_t *payload);

/* Responder (soft_tcp_resp.c) */
int soft_tcp_serve(struct tcp_conn *c, const struct soft_tcp_hdr *h,
		   const uint8_t *payload);

/* Progress (soft_tcp_progress.c) */
/* Set while this thread runs soft_tcp_progress for a context (see there). */
extern __thread struct soft_tcp *soft_tcp_in_progress;
ssize_t soft_tcp_rx_read(struct tcp_conn *c);
int soft_tcp_progress(struct soft_ctx *ctx);

#endif /* TOLLFREE_SOFT_TCP_INT_H */
