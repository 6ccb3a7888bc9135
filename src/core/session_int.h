/* SPDX-License-Identifier: MIT */
/*
 * session_int.h - internal structures of nodes, listeners, connections and
 * sessions (session.c, session_conn.c).
 */
#ifndef TOLLFREE_SESSION_INT_H
#define TOLLFREE_SESSION_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <tollfree/session.h>

#include "provider.h"
#include "wire_int.h"

#define TF_SESS_SUBSYS	    "session"
#define TF_SESS_PSK_MAX	    256
#define TF_SESS_MW_FREE_MAX 256
/* Connections in the middle of their handshake, per listener. */
#define TF_LISTENER_MAX_PENDING 256

/* Server-side handshake states of a connection. */
enum tf_conn_hs {
	TF_CONN_WAIT_HELLO = 0, /* new socket, nothing received */
	TF_CONN_WAIT_OPEN,	/* CHALLENGE sent */
	TF_CONN_IDLE,		/* kept: waiting for the next OPEN */
	TF_CONN_BUSY,		/* owned by a session */
};

/*
 * A connection: the bootstrap socket and the QP (with its CQ) it set up.
 * It belongs to one session at a time; between sessions it is idle, in the
 * node's cache (client) or the listener's set (server).
 */
struct tf_conn {
	struct tf_conn *next, *prev;
	struct tf_node *node;
	struct tf_listener *l; /* server side: the listener it came from */
	int fd;
	tf_qp_t *qp;
	tf_cq_t *cq;
	uint32_t id; /* server-assigned; "reuse QP n" names it */
	uint32_t send_depth, recv_depth;
	bool broken;  /* never reuse */
	bool no_keep; /* TF_SESSION_NO_REUSE: destroy at close */
	enum tf_conn_hs hs;
	uint64_t deadline_ns;	      /* server: end of the handshake step */
	struct sockaddr_storage peer; /* client: the listener's address */
	socklen_t peer_len;
	uint8_t nonce_c[TF_WIRE_NONCE], nonce_s[TF_WIRE_NONCE];
	struct tf_wire_rx rx;
};

struct tf_node {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_pool_t *pool;
	tf_rcache_t *rc;
	uint8_t psk[TF_SESS_PSK_MAX];
	size_t psk_len;
	int reg_mode;
	size_t crossover;
	unsigned qp_cache;
	int timeout_ms;
	bool use_mw;
	/* Protects the idle list and the free windows. */
	pthread_mutex_t lock;
	struct tf_conn idle; /* list head; most recently used first */
	unsigned n_idle;
	tf_mw_t *mw_free[TF_SESS_MW_FREE_MAX];
	unsigned n_mw_free;
	atomic_uint next_conn_id;
	atomic_long n_sessions, n_listeners;
	/* Counters (tf_node_stats_t), relaxed. */
	atomic_ullong sessions_opened, sessions_closed, connect_failures;
	atomic_ullong auth_failures, handshake_rejects, qp_new, qp_reused;
	atomic_ullong qp_destroyed, qp_broken, windows_bound, windows_revoked;
	atomic_ullong expose_mr_fallback, revoke_ns, attach_pool, attach_cache;
	atomic_ullong attach_direct, copy_bytes, slices_rented;
	atomic_llong windows_live;
	/* Statistics publication (stats_pub.c): the context's node list,
	 * under its publication lock, and this node's number in it. */
	struct tf_node *stats_next;
	unsigned stats_id;
};

struct tf_listener {
	struct tf_node *node;
	int lfd;
	int epfd;
	uint16_t port;
	struct tf_conn conns; /* list head: handshaking and idle */
	unsigned n_idle, n_pending;
	/* Sessions accepted and not yet closed hold a reference, so that
	 * their close can still hand the connection back (or drop it if the
	 * listener was destroyed meanwhile). */
	unsigned refs;
	bool dead;
};

/* A buffer attached to a session. */
struct tf_sess_buf {
	void *addr; /* where work requests point */
	size_t len;
	uint32_t lkey;
	tf_mr_t *mr; /* the region covering it (for binds) */
	int mode;    /* enum tf_reg_mode, never AUTO */
	bool rented; /* a pool slice (rent, or attach by copy) */
	tf_slice_t slice;
	tf_rcache_reg_t *reg;
	void *user;	/* pool copy: the user's buffer */
	unsigned flags; /* enum tf_attach_flags */
};

struct tf_sess_exp {
	tf_exposure_info_t info;
	tf_mw_t *mw; /* window, or */
	tf_mr_t *mr; /* dedicated registration (fallback) */
	bool live;
	int pending; /* internal WRs not completed */
	enum tf_wc_status status;
};

struct tf_session {
	struct tf_node *node;
	struct tf_conn *c;
	bool server;
	bool reused;
	bool deferred;
	bool revoked;
	bool peer_closed;
	bool broken;
	bool opened; /* counted in sessions_opened (handshake completed) */
	int n_bufs, n_exps, n_exps_sent, n_peer;
	struct tf_sess_buf bufs[TF_SESSION_MAX_BUFS];
	struct tf_sess_exp exps[TF_SESSION_MAX_EXPOSURES];
	tf_exposure_info_t peer[TF_SESSION_MAX_EXPOSURES];
	uint8_t priv[TF_WIRE_MAX_PRIV];
	size_t priv_len;
	/* Work-request tracking: every WR posted carries an internal wr_id
	 * (kind << 56 | slot); queues complete in order, so rings of the
	 * queue depth map completions back to the caller's wr_ids. */
	uint64_t *send_ids, *recv_ids;
	uint64_t send_posted, send_done, recv_posted, recv_done;
	/* User completions reaped while waiting for internal ones. */
	struct tf_wc *stash;
	int n_stash, stash_head, stash_cap;
};

/* session_conn.c */
int tf__conn_new_qp(struct tf_node *node, struct tf_conn *c,
		    uint32_t send_depth, uint32_t recv_depth);
void tf__conn_destroy(struct tf_conn *c);
void tf__conn_unlink(struct tf_conn *c);
void tf__conn_link(struct tf_conn *head, struct tf_conn *c);
int tf__session_new(struct tf_node *node, struct tf_conn *c, bool server,
		    struct tf_session **s_p);
int tf__session_send_accept(struct tf_session *s);
int tf__sess_read_exposures(struct tf_session *s, struct tf_wire_cur *cur);
void tf__listener_keep(struct tf_listener *l, struct tf_conn *c);
void tf__listener_put(struct tf_listener *l);
void tf__node_keep(struct tf_node *node, struct tf_conn *c);

#endif /* TOLLFREE_SESSION_INT_H */
