/* SPDX-License-Identifier: MIT */
/*
 * tollfree/session.h - short-lived sessions with per-session revocable keys.
 *
 * A node (tf_node_t) holds one process's session machinery on a context: a
 * PD, a pool of registered slices, a registration cache for user buffers, a
 * bounded cache of connected QPs per peer, the optional pre-shared key and
 * the counters.  A session (tf_session_t) is one short conversation with a
 * peer over an RC QP: the client calls tf_session_connect(), the server
 * tf_listener_accept().  Each side attaches local memory to the session
 * (rented slices or user buffers), exposes parts of it to the peer with
 * chosen rights, and moves data with one-sided READ/WRITE/atomics against
 * what the peer exposed, addressed by exposure index and offset, or with
 * SEND/RECV.  tf_session_close() revokes every key the session gave out and
 * waits for the revocation to complete before memory goes back to the pool.
 *
 * Bootstrap: a TCP connection (IPv4 or IPv6) carries a versioned binary
 * handshake that exchanges QP address blobs; with a pre-shared key, both
 * sides prove the key and the handshake and every later control message
 * are authenticated and encrypted (tollfree(7), SECURITY).
 * The connection stays open for the life of the session and carries the
 * small control messages of the first session: exposures (EXPOSE) and the
 * end of the session (CLOSE).  Control messages never use the session's
 * QP, so that they never consume receive buffers the application posted.
 * The wire format is described in src/session/wire_int.h.
 *
 * Control QP: with the first session, unless TF_SESSION_NO_REUSE or a QP
 * cache of 0, each side also makes a second RC QP (no remote access, its
 * own receive buffers) and the handshake connects it.  The later sessions
 * on the kept connection send their control messages (OPEN, ACCEPT,
 * EXPOSE, CLOSE) as SEND/RECV on that QP, so a session on a kept
 * connection costs a few QP messages instead of TCP round trips between
 * processes.  Every message is checked as on the socket.  The socket stays
 * open: its end is how the peer's death shows (checked every 100 us
 * while a session polls, and whenever tf_session_fd() woke its caller).
 * Waits spin for TOLLFREE_POLL_SPIN_US, then sleep on tf_session_fd().
 *
 * Keys: an exposure binds a fresh type-2 memory window over exactly the
 * exposed bytes, on this session's QP only; a peer cannot reach it through
 * another QP, and after revocation not at all.  Without windows (a
 * provider without type-2 windows, TOLLFREE_SESSION_MW=n, or use_mw 0)
 * each exposure is a dedicated registration (counted in
 * tf_node_stats_t.expose_mr_fallback): still exactly the exposed bytes
 * and rights, revoked at close, but, as for any registration, its key is
 * valid from every QP of the node's PD, so any peer connected to the node
 * that learns or guesses it reaches the exposure until then.  The threat
 * model is in tollfree(7), SECURITY.
 *
 * Reuse: when a side closed cleanly (sent CLOSE after revoking), nothing
 * is outstanding and the QP is in RTS, the connection (socket and QP) is
 * kept, bounded by TOLLFREE_SESSION_QP_CACHE: by the client's node per
 * peer address, by the server's listener.  Close is one-way: it does not
 * wait for the peer's CLOSE, which the connection's next user consumes.
 * The next session to that peer sends its OPEN, naming the connection,
 * over the control QP (or the kept socket if there is none); it still
 * gets its own windows and keys.  A listener may grant the next session's
 * window ahead (tf_listener_params_t.grant_len): that OPEN then names the
 * grant and is not answered.  A connection whose QP or control QP failed
 * is destroyed.
 *
 * Phases can be timed from outside: tf_session_connect (connect),
 * tf_session_rent/attach + tf_session_expose (prepare), data calls +
 * tf_session_wait (move), tf_session_revoke (revoke), tf_session_close.
 *
 * Thread safety (tollfree(7), THREAD SAFETY):
 *  - a node: any thread.  tf_session_connect, tf_listener_create,
 *    tf_node_progress and tf_node_query_stats may run at the same time on
 *    any threads; what they share (kept client connections and free
 *    windows under the node's lock, the stock under its own, the pool,
 *    the registration cache, the pinned-memory account, atomic counters)
 *    is synchronized.
 *  - a listener and the sessions it returned: tf_listener_accept,
 *    tf_listener_destroy and tf_session_close of those sessions must not
 *    overlap (close hands a kept connection back to its listener).  The
 *    usual shape is one thread per listener that accepts and serves its
 *    sessions; listeners of one node, each on its own thread, run at the
 *    same time, and may share a port (TF_LISTENER_REUSEPORT).
 *  - a session: one thread at a time.  Sessions run at the same time on
 *    different threads, whichever listener or client they came from (a
 *    server session's calls other than close may run on another thread
 *    than its listener's accept).
 */
#ifndef TOLLFREE_SESSION_H
#define TOLLFREE_SESSION_H

#include <tollfree/qp.h>
#include <tollfree/pool.h>
#include <tollfree/rcache.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_node tf_node_t;
typedef struct tf_listener tf_listener_t;
typedef struct tf_session tf_session_t;

/* Bounds of one session (checked; -ENOSPC past them). */
#define TF_SESSION_MAX_BUFS	 64
#define TF_SESSION_MAX_EXPOSURES 64   /* per side */
#define TF_SESSION_MAX_PRIV	 1024 /* connect private data */

/* Registration strategies (TOLLFREE_REG_MODE). */
enum tf_reg_mode {
	TF_REG_AUTO = 0,   /* pool copy up to the crossover (fixed, 64 KiB
			    * by default), cache above */
	TF_REG_POOL = 1,   /* always copy into pool slices (cache if larger
			    * than the largest slice) */
	TF_REG_CACHE = 2,  /* registration cache */
	TF_REG_DIRECT = 3, /* a registration per attach, released at close */
};

/* tf_node_params_t.crossover: measure it when the node is created. */
#define TF_REG_CROSSOVER_MEASURE ((size_t)-1)

enum tf_node_params_field {
	TF_NODE_PARAM_PSK = 1u << 0,
	TF_NODE_PARAM_REG_MODE = 1u << 1,
	TF_NODE_PARAM_CROSSOVER = 1u << 2,
	TF_NODE_PARAM_QP_CACHE = 1u << 3,
	TF_NODE_PARAM_TIMEOUT = 1u << 4,
	TF_NODE_PARAM_USE_MW = 1u << 5,
	TF_NODE_PARAM_POOL = 1u << 6,
};

/* Parameters of tf_node_create(); unset fields take the configuration
 * (TOLLFREE_SESSION_*, TOLLFREE_REG_*). */
typedef struct tf_node_params {
	uint64_t field_mask;
	/* Pre-shared key (1..256 bytes); psk_len 0 disables authentication
	 * even if TOLLFREE_SESSION_PSK is set. */
	const void *psk;
	size_t psk_len;
	int reg_mode; /* enum tf_reg_mode */
	/* Bytes up to which TF_REG_AUTO copies; 0: the configuration
	 * (TOLLFREE_REG_CROSSOVER, 64 KiB by default);
	 * TF_REG_CROSSOVER_MEASURE: measured at create (varies by run). */
	size_t crossover;
	unsigned qp_cache; /* idle connections kept; 0: no reuse */
	int timeout_ms;	   /* each bootstrap read, revocation, close */
	int use_mw;	   /* 0: dedicated registrations, never windows */
	const tf_pool_params_t *pool; /* parameters of the node's pool */
} tf_node_params_t;

/*
 * tf_node_create - create a node on @ctx: a PD, a pool and a registration
 * cache; measures the copy/registration crossover only if asked to.
 * Returns 0, -EINVAL (bad params, unreadable key file), -ENOMEM or a
 * provider error.  Thread-safe.
 */
int tf_node_create(tf_context_t *ctx, const tf_node_params_t *params,
		   tf_node_t **node_p);
/*
 * tf_node_destroy - destroy the node and its idle connections.  Sessions
 * and listeners must be closed first (survivors are logged and leaked).
 * NULL-safe; not thread-safe with respect to other uses of @node.
 */
void tf_node_destroy(tf_node_t *node);
/*
 * tf_node_progress - do the node's deferred work now: with
 * TOLLFREE_SESSION_STOCK_REFILL=inline, make the entries its connection
 * stock lacks (the node's connects and listeners make one each where they
 * would wait; call this before sleeping on your own).  Returns the entries
 * made (0: none lacking, or a refill thread makes them), or the negative
 * error of the first that failed.  Thread-safe.
 */
int tf_node_progress(tf_node_t *node);
/* The node's PD, pool and cache, for direct use.  Thread-safe. */
tf_pd_t *tf_node_pd(tf_node_t *node);
tf_pool_t *tf_node_pool(tf_node_t *node);
tf_rcache_t *tf_node_rcache(tf_node_t *node);

typedef struct tf_node_stats {
	uint64_t sessions_opened; /* connects + accepts that succeeded */
	uint64_t sessions_closed;
	uint64_t sessions_live;
	uint64_t connect_failures;
	uint64_t auth_failures;	    /* peers that failed to prove the key */
	uint64_t handshake_rejects; /* malformed, wrong version, timed out */
	uint64_t qp_new;	    /* connections made (QP + TCP) */
	uint64_t qp_reused;	    /* sessions that took a kept connection */
	uint64_t qp_destroyed;	    /* connections torn down */
	uint64_t qp_broken;	    /* of which because of an error */
	uint64_t qp_idle;	    /* kept connections now */
	uint64_t windows_bound;	    /* exposures through memory windows */
	uint64_t windows_revoked;
	uint64_t windows_live;	     /* bound and not yet revoked */
	uint64_t expose_mr_fallback; /* exposures through dedicated MRs */
	uint64_t revoke_ns;	     /* total time spent revoking */
	uint64_t attach_pool;	     /* attaches copied into pool slices */
	uint64_t attach_cache;	     /* attaches through the rcache */
	uint64_t attach_direct;	     /* attaches with their own MR */
	uint64_t copy_bytes;	     /* bytes copied in and out of slices */
	uint64_t slices_rented;	     /* slices held by live sessions */
	uint64_t crossover;	     /* bytes: auto copies up to this
				      * (configured or measured) */
	int reg_mode;		     /* enum tf_reg_mode in effect */
	int use_mw;		     /* 1 if exposures use memory windows */
	int auth;		     /* 1 if a pre-shared key is configured */
	/* Listeners: connections that had not said HELLO, dropped to make
	 * room for newcomers (TOLLFREE_SESSION_MAX_PENDING{,_PEER}), and
	 * newcomers refused because every pending one was talking. */
	uint64_t pending_dropped;
	uint64_t pending_refused;
	/* The stock of ready connection resources (TOLLFREE_SESSION_STOCK):
	 * entries now and the bytes their control slots pin; new
	 * connections that took one, and that found none (cold path). */
	uint64_t stock_entries;
	uint64_t stock_max;
	uint64_t stock_bytes;
	uint64_t stock_hits;
	uint64_t stock_misses;
	/* Entries that connections gave back when they ended cleanly, their
	 * queue pair reset instead of destroyed (TF_CAP_QP_RESET). */
	uint64_t stock_recycled;
	/* Server-side bounds (TOLLFREE_SESSION_MAX_*, tollfree(7)):
	 * sessions refused because the node served MAX_SESSIONS (the client
	 * got -EBUSY) or the client's address had MAX_SESSIONS_PEER
	 * (-EUSERS); exposes that failed with -ENOBUFS because the peer had
	 * MAX_EXPOSED_PEER bytes exposed; connections closed at the end of
	 * their session instead of kept, because of MAX_KEPT{,_PEER}. */
	uint64_t sessions_refused;
	uint64_t sessions_refused_peer;
	uint64_t expose_refused;
	uint64_t kept_refused;
	/* Now: bytes exposed by this node's server sessions, and those
	 * sessions (accepted, not yet closed). */
	uint64_t exposed_bytes;
	uint64_t sessions_served;
	/* Grants (tf_listener_params_t.grant_len): windows a listener bound
	 * and sent ahead of a session; grants that sessions took (server:
	 * accepted on one; client: opened on one); grants revoked unused,
	 * when their connection ended. */
	uint64_t grants_made;
	uint64_t grants_taken;
	uint64_t grants_dropped;
	/* Remote invalidation (TF_SESSION_REMOTE_INV): server, windows that
	 * a client's SEND_WITH_INV revoked; client, SEND_WITH_INVs its
	 * closes sent.  remote_inv_missed (server): sessions that agreed
	 * to it but revoked before the client's SEND_WITH_INV arrived, so
	 * revoked the window themselves (freed it) and did not keep the
	 * connection. */
	uint64_t remote_inv;
	uint64_t remote_inv_missed;
	/* Early OPENs, with a pre-shared key (TOLLFREE_SESSION_PSK_EARLY_*):
	 * server, early OPENs taken (one round trip), and early OPENs that
	 * opened under the key but got the challenge round trip instead
	 * (replayed, sent outside the window, or the record full); client,
	 * connections on which the server took its early OPEN, and on which
	 * it did not. */
	uint64_t psk_early;
	uint64_t psk_early_refused;
	/* Client: TCP sockets made ahead for its next connect (0 or 1),
	 * each an open file descriptor of the process. */
	uint64_t stock_sockets;
	/* TF_SESSION_DEFER_OPEN: client, sessions on a grant that deferred
	 * their OPEN; server, sessions whose OPEN was their CLOSE too (one
	 * message for the whole session). */
	uint64_t opens_deferred;
} tf_node_stats_t;

/* tf_node_query_stats - copy the counters (read without a lock).
 * Thread-safe. */
int tf_node_query_stats(tf_node_t *node, tf_node_stats_t *stats);

/* ----------------------------------------------------------- listener */

enum tf_listener_params_field {
	TF_LISTENER_PARAM_ADDR = 1u << 0,
	TF_LISTENER_PARAM_PORT = 1u << 1,
	TF_LISTENER_PARAM_BACKLOG = 1u << 2,
	TF_LISTENER_PARAM_FLAGS = 1u << 3,
	TF_LISTENER_PARAM_GRANT = 1u << 4, /* grant_len, _rights, _depth */
};

enum tf_listener_flags {
	/*
	 * The application calls tf_listener_accept() in a busy loop and does
	 * not sleep on tf_listener_fd() waiting for the next session of a
	 * kept connection.  The listener then polls the control QPs of its
	 * kept connections instead of arming their completion fds: a
	 * client's OPEN costs no doorbell system call and no wake-up.  It
	 * looks for the end of those connections every millisecond rather
	 * than keeping their sockets in its epoll set.  tf_listener_fd()
	 * still reports new connections and handshake bytes, not OPENs on
	 * kept connections; a blocking tf_listener_accept() spins.
	 */
	TF_LISTENER_BUSY_POLL = 1u << 0,
	/*
	 * Several listeners - threads of one node, or processes - share the
	 * port through SO_REUSEPORT: each sets this flag and binds the same
	 * address and port.  The kernel spreads new connections over them
	 * (by a hash of the client's address and port); a kept connection
	 * stays with the listener that accepted it.  Without the flag a
	 * second listener on a bound port fails with -EADDRINUSE.
	 */
	TF_LISTENER_REUSEPORT = 1u << 1,
};

typedef struct tf_listener_params {
	uint64_t field_mask;
	const char *addr; /* IPv4/IPv6 address or host name; 127.0.0.1 */
	uint16_t port;	  /* default 0: ephemeral (see tf_listener_port) */
	int backlog;	  /* default 128 */
	uint32_t flags;	  /* enum tf_listener_flags; default 0 */
	/*
	 * Grants: on each kept connection (with a control QP, on a device
	 * with type-2 windows), the listener binds windows of grant_len
	 * bytes over fresh pool slices (zeroed if readable) with
	 * grant_rights, and sends their keys ahead, up to grant_depth per
	 * connection (1..TF_LISTENER_MAX_GRANT_DEPTH; 0: 2).  A client's
	 * next session on the connection takes one: tf_session_connect
	 * returns without a round trip and may write at once.  The
	 * accepted session is granted (tf_session_granted): its buffer 0 is
	 * the slice, its exposure 0 the window, counted against
	 * TOLLFREE_SESSION_MAX_EXPOSED_PEER, and revoked at close as any
	 * exposure.  Grants not taken are revoked when their connection
	 * ends.  grant_len 0 (the default): none.  tollfree(7), GRANTS.
	 */
	size_t grant_len;
	uint32_t grant_rights; /* TF_ACCESS_REMOTE_*; 0: REMOTE_WRITE */
	uint32_t grant_depth;
} tf_listener_params_t;

/* The bounds of tf_listener_params_t's grants. */
#define TF_LISTENER_MAX_GRANT_DEPTH 8
#define TF_LISTENER_MAX_GRANT_LEN   (1u << 20)

/* tf_listener_create - listen for sessions on @node, on the first address
 * of params->addr that can be bound (a name is resolved).  -EADDRINUSE
 * (also when the port is bound by a listener without
 * TF_LISTENER_REUSEPORT, or this one lacks it), -EINVAL (empty address),
 * -EHOSTUNREACH (a name that does not resolve) or -errno.  Thread-safe:
 * several threads may each create their own listener on one node. */
int tf_listener_create(tf_node_t *node, const tf_listener_params_t *params,
		       tf_listener_t **l_p);
/* tf_listener_destroy - stop listening; kept connections are closed.
 * Sessions already accepted stay usable.  NULL-safe; not thread-safe with
 * respect to the listener and the close of the sessions it returned. */
void tf_listener_destroy(tf_listener_t *l);
/* tf_listener_port - the bound TCP port (host order). */
uint16_t tf_listener_port(const tf_listener_t *l);
/*
 * tf_listener_fd - an fd (epoll) that becomes readable when
 * tf_listener_accept() has work: a new connection, handshake bytes, or a
 * kept connection opening its next session (also through its control QP,
 * whose completion fd the listener arms, unless TF_LISTENER_BUSY_POLL).
 * It stays readable while a kept connection's next OPEN, read by the
 * close of its last session, waits to be accepted (a server may accept
 * one session per wake-up).
 * It may also become readable spuriously; tf_listener_accept() then
 * re-arms.  Owned by the listener.
 */
int tf_listener_fd(const tf_listener_t *l);

enum tf_session_params_field {
	TF_SESSION_PARAM_PRIV = 1u << 0,
	TF_SESSION_PARAM_FLAGS = 1u << 1,
	TF_SESSION_PARAM_QP = 1u << 2,
};

enum tf_session_flags {
	/* Accept: return before the ACCEPT message is sent, so that
	 * exposures made before tf_session_establish() travel in it. */
	TF_SESSION_DEFER_ESTABLISH = 1u << 0,
	/* Connect: make a new connection even if one is kept for the peer,
	 * and do not keep this one after close. */
	TF_SESSION_NO_REUSE = 1u << 1,
	/*
	 * Connect: remote invalidation.  This side sends no message that
	 * takes a receive at the server (tf_session_send, _send_imm and
	 * _write_imm return -EPERM), so the server may keep a receive of
	 * its own on the session's QP; a server that does says so in its
	 * ACCEPT, and then this side's close sends a SEND_WITH_INV naming
	 * the server's exposure 0 ahead of its CLOSE: the server's NIC
	 * revokes that window as it arrives, and the server skips its own
	 * invalidation (tf_session_close(3)).  Without the server's
	 * agreement (no windows, no TF_CAP_SEND_WITH_INV, an older
	 * version, no exposure at accept, a grant) the close is as usual.
	 */
	TF_SESSION_REMOTE_INV = 1u << 2,
	/*
	 * Connect: a session that takes a listener's grant sends its OPEN
	 * only when it first needs the server: with its first control
	 * message (an exposure; its close, whose one message then opens
	 * and closes it) or first call that involves the server
	 * (tf_session_send, _send_imm, _write_imm, _recv, tf_session_wait_peer
	 * for more exposures than it has, tf_session_state, tf_session_arm,
	 * tf_session_qp).  Until then it writes, reads and runs atomics on
	 * the grant, and the server's application has not accepted it yet:
	 * a client must not wait for that application, outside this
	 * library, before one of those calls.  No effect without a grant.
	 */
	TF_SESSION_DEFER_OPEN = 1u << 3,
};

typedef struct tf_session_params {
	uint64_t field_mask;
	const void *priv; /* connect: data for the server (<= MAX_PRIV) */
	size_t priv_len;
	unsigned flags;			   /* enum tf_session_flags */
	uint32_t max_send_wr, max_recv_wr; /* QP depth for new connections */
} tf_session_params_t;

/*
 * tf_listener_accept - serve the listener for up to @timeout_ms (0: do not
 * wait; -1: forever) and return the next session whose peer completed the
 * handshake.  Handshakes are served concurrently and each peer must
 * finish its part within the node timeout: a silent, slow, malformed or
 * unauthenticated peer is dropped and counted, and never blocks others
 * (a message complete in its socket at the deadline is served: the time
 * the application spent between calls is not the peer's).
 * Sessions, exposed bytes and kept connections are bounded per client
 * address and overall (TOLLFREE_SESSION_MAX_*): a session past a bound is
 * refused (the client gets -EUSERS or -EBUSY), and counted.
 * Returns 0, -EAGAIN when no session opened in time, or -errno.
 * Serialize per listener, together with tf_session_close of the sessions
 * it returned; different listeners of one node may accept at the same
 * time on different threads.
 */
int tf_listener_accept(tf_listener_t *l, const tf_session_params_t *params,
		       int timeout_ms, tf_session_t **s_p);

/*
 * tf_session_connect - open a session with the listener at @host : @port,
 * taking a kept connection to that peer if the node has one.  @host is a
 * numeric IPv4/IPv6 address or a name, resolved with getaddrinfo() and
 * its addresses tried in order until one accepts (connections are kept
 * per address, so a name and its address share them).  Returns 0,
 * -TF_EAUTH (the server failed or refused the key proof), -TF_EPEER (the
 * server could not connect its QP to ours: providers or soft transports
 * differ; the log names both sides'),
 * -TF_EWIRE/-TF_EVERSION (bad handshake), -ETIMEDOUT, -ECONNREFUSED,
 * -ENOBUFS (the server's pinned-memory bound has no room for the
 * connection), -EUSERS (this address holds TOLLFREE_SESSION_MAX_SESSIONS_PEER
 * sessions there), -EBUSY (the server is full: TOLLFREE_SESSION_MAX_SESSIONS,
 * or its pending handshakes), -EHOSTUNREACH (@host does not resolve),
 * -EINVAL or -errno.
 * Thread-safe with respect to the node.
 */
int tf_session_connect(tf_node_t *node, const char *host, uint16_t port,
		       const tf_session_params_t *params, tf_session_t **s_p);

/* tf_session_establish - send the deferred ACCEPT (with the exposures
 * made so far).  Returns 0, -EINVAL if not deferred, or -errno.  On a
 * granted session (tf_session_granted), which has no ACCEPT, it returns 0
 * (-ENOTCONN if broken): its exposures went as EXPOSE messages. */
int tf_session_establish(tf_session_t *s);

/* --------------------------------------------------------- memory */

/*
 * tf_session_rent - rent a pool slice of @len bytes for this session.
 * *@buf_p receives its buffer index, *@addr_p (may be NULL) its address.
 * Returns 0, -ENOSPC (TF_SESSION_MAX_BUFS), or a tf_pool_rent error.
 */
int tf_session_rent(tf_session_t *s, size_t len, int *buf_p, void **addr_p);

/* Which way a pool copy copies (a buffer used in place ignores them). */
enum tf_attach_flags {
	TF_ATTACH_IN = 1u << 0,	 /* copy the buffer in at attach: data to
				  * send, write or expose for reading */
	TF_ATTACH_OUT = 1u << 1, /* copy it back at close: data received,
				  * read or written by the peer */
	TF_ATTACH_INOUT = TF_ATTACH_IN | TF_ATTACH_OUT,
};

/*
 * tf_session_attach - make the user buffer [@addr, @addr + @len) usable by
 * this session, by the node's strategy (enum tf_reg_mode): a copy into a
 * pool slice (@flags say which way data is copied; 0 means
 * TF_ATTACH_INOUT), the registration cache, or a dedicated registration.
 * TF_REG_AUTO copies up to the node's crossover (tf_node_stats_t), the
 * same size in every run unless the node measures it.  *@buf_p receives
 * the index.  Returns 0, -EINVAL, -ENOSPC, or a registration/pool error.
 */
int tf_session_attach(tf_session_t *s, void *addr, size_t len, unsigned flags,
		      int *buf_p);
/* tf_session_buf_addr - where the session's buffer @buf lives (for a
 * pool copy: the slice), or NULL for a bad index. */
void *tf_session_buf_addr(tf_session_t *s, int buf);
/* tf_session_buf_mode - the enum tf_reg_mode used for @buf (never AUTO),
 * or -EINVAL. */
int tf_session_buf_mode(tf_session_t *s, int buf);

/*
 * tf_session_expose - expose [@off, @off + @len) of buffer @buf to the peer
 * with @rights (TF_ACCESS_REMOTE_READ/WRITE/ATOMIC): binds a fresh window
 * on this session's QP, waits for the bind, and tells the peer (in the
 * ACCEPT if it is still deferred, else in an EXPOSE message).  *@exp_p
 * receives the exposure index, the same on both sides.  Returns 0,
 * -EINVAL, -ENOSPC, -ENOTCONN (session broken), -ENOBUFS (a server's
 * session: the peer's address would pass TOLLFREE_SESSION_MAX_EXPOSED_PEER
 * bytes exposed) or -errno.
 */
int tf_session_expose(tf_session_t *s, int buf, size_t off, size_t len,
		      unsigned rights, int *exp_p);

typedef struct tf_exposure_info {
	uint64_t addr; /* the address a work request names */
	uint64_t length;
	uint32_t rkey;
	uint32_t rights; /* TF_ACCESS_REMOTE_* */
} tf_exposure_info_t;

/* tf_session_peer_count - how many exposures the peer made so far
 * (processes pending control messages); tf_session_peer_exposures is
 * the same call under its older name.  Each is described by
 * tf_session_peer_exposure(). */
int tf_session_peer_count(tf_session_t *s);
int tf_session_peer_exposures(tf_session_t *s);
/* tf_session_wait_peer - wait up to @timeout_ms until the peer made at
 * least @n exposures (spinning, then sleeping on tf_session_fd() as
 * tf_session_wait does).  0, -ETIMEDOUT, -ECONNRESET (peer gone). */
int tf_session_wait_peer(tf_session_t *s, int n, int timeout_ms);
/* Describe peer exposure @exp (or our own with _local_): 0 or -EINVAL. */
int tf_session_peer_exposure(tf_session_t *s, int exp,
			     tf_exposure_info_t *info);
int tf_session_local_exposure(tf_session_t *s, int exp,
			      tf_exposure_info_t *info);

/* --------------------------------------------------------- data */

/*
 * One-sided operations on peer exposure @exp at offset @roff, with local
 * buffer @buf at @loff.  Bounds and rights are checked here, before
 * posting: -EINVAL (bad index), -ERANGE (outside the buffer or the
 * exposure), -EACCES (the peer did not grant the right), -ENOTCONN, or a
 * tf_post_send error.  Each posts one signaled work request whose
 * completion carries @wr_id.  Atomics are 8 bytes, 8-byte aligned.
 */
int tf_session_write(tf_session_t *s, int buf, size_t loff, int exp,
		     uint64_t roff, uint32_t len, uint64_t wr_id);
int tf_session_read(tf_session_t *s, int buf, size_t loff, int exp,
		    uint64_t roff, uint32_t len, uint64_t wr_id);
int tf_session_fetch_add(tf_session_t *s, int buf, size_t loff, int exp,
			 uint64_t roff, uint64_t add, uint64_t wr_id);
int tf_session_cmp_swap(tf_session_t *s, int buf, size_t loff, int exp,
			uint64_t roff, uint64_t compare, uint64_t swap,
			uint64_t wr_id);
/*
 * tf_session_write_imm - a WRITE (as tf_session_write, but @len may be 0)
 * that also delivers the 32-bit @imm to the peer: it consumes one of the
 * peer's posted receives, whose completion has opcode
 * TF_WC_RECV_RDMA_WITH_IMM, TF_WC_WITH_IMM in flags, @imm in imm_data
 * (host byte order) and @len in byte_len, once the data is in place.
 * Without a posted receive the peer's QP fails (receiver not ready).
 */
int tf_session_write_imm(tf_session_t *s, int buf, size_t loff, int exp,
			 uint64_t roff, uint32_t len, uint32_t imm,
			 uint64_t wr_id);
/* Two-sided: SEND from / post a RECV into buffer @buf. */
int tf_session_send(tf_session_t *s, int buf, size_t off, uint32_t len,
		    uint64_t wr_id);
/* tf_session_send_imm - a SEND whose receive completion also carries
 * @imm (TF_WC_RECV, TF_WC_WITH_IMM in flags, imm_data). */
int tf_session_send_imm(tf_session_t *s, int buf, size_t off, uint32_t len,
			uint32_t imm, uint64_t wr_id);
int tf_session_recv(tf_session_t *s, int buf, size_t off, uint32_t len,
		    uint64_t wr_id);

/*
 * tf_session_poll - reap up to @n completions of this session's work
 * requests (wc->wr_id is the caller's) and process control messages.
 * Returns the number reaped, or -errno.  Never blocks.
 */
int tf_session_poll(tf_session_t *s, int n, struct tf_wc *wc);
/*
 * tf_session_wait - as poll, waiting up to @timeout_ms for one; returns 0
 * early when the peer closes or the session breaks meanwhile.  0 means
 * that nothing was reaped, either way: tf_session_state() tells a timeout
 * (still TF_SESSION_OPEN) from the end of the session
 * (TF_SESSION_PEER_CLOSED, TF_SESSION_BROKEN).  It spins for
 * TOLLFREE_POLL_SPIN_US, then arms and sleeps on tf_session_fd() until
 * something arrives or the timeout: no timer wakes it.
 */
int tf_session_wait(tf_session_t *s, int n, struct tf_wc *wc, int timeout_ms);

enum tf_session_state {
	TF_SESSION_ACCEPTING = 0, /* deferred: ACCEPT not sent yet */
	TF_SESSION_OPEN,
	TF_SESSION_PEER_CLOSED, /* the peer closed (and revoked) */
	TF_SESSION_BROKEN,	/* connection lost or QP in error */
};
/* tf_session_state - the state after processing control messages. */
int tf_session_state(tf_session_t *s);
/*
 * tf_session_fd - an fd (epoll, owned by the session's connection) that
 * becomes readable when the session has something to act on: a
 * completion on its CQ, a control message (EXPOSE, CLOSE) on the control
 * QP or the socket, or the end of the connection (the peer's death).
 * The end of the connection makes it readable at any time; completions
 * and control-QP messages only after tf_session_arm().  Protocol, as
 * ibv_get_cq_event: when it is readable, call tf_session_poll() until it
 * returns 0, then tf_session_arm(); sleep again only if that returns 0.
 * The fd or -errno (-EOPNOTSUPP: the provider has no CQ fd).
 */
int tf_session_fd(const tf_session_t *s);
/*
 * tf_session_arm - arm the session's fd for the next completion or
 * control message, and look once more (what arrived before the arm does
 * not make the fd readable).  Returns 1 if that look found something
 * (completions are kept for the next tf_session_poll(), control messages
 * processed: check tf_session_state()); then poll, do not sleep.  0: sleep
 * on tf_session_fd().  Or -errno.  A system call or more: call it only
 * before sleeping, never in a polling loop.  Serialize per session.
 */
int tf_session_arm(tf_session_t *s);
/* The connect private data the client sent (server side), or NULL. */
const void *tf_session_peer_priv(const tf_session_t *s, size_t *len_p);
/* 1 if the session runs on a kept (reused) connection. */
int tf_session_reused(const tf_session_t *s);
/* 1 if the session opened on a grant (tf_listener_params_t.grant_len):
 * the server's exposure 0 is the granted window, and on the server its
 * buffer 0 the slice beneath, which holds what the client wrote. */
int tf_session_granted(const tf_session_t *s);
/* The session's QP, for inspection and tests only: work posted on it
 * directly is not tracked by the session (close may then find the QP in
 * an unexpected state and not keep it); its completions are returned by
 * tf_session_poll with their wr_id, which must be below 2^56. */
tf_qp_t *tf_session_qp(tf_session_t *s);

/*
 * tf_session_revoke - revoke every exposure of this session (LOCAL_INV on
 * its QP, or deregistration for fallback exposures) and wait until the
 * revocation completed; afterwards no peer access reaches the memory.
 * Returns 0 or a negative errno when the QP failed, in which case the
 * windows were freed instead (which revokes them as well).  Called by
 * close; separate so that its cost can be measured.
 */
int tf_session_revoke(tf_session_t *s);
/*
 * tf_session_close - revoke, wait for outstanding work, release buffers
 * (slices to the pool, cache references), tell the peer, and keep the
 * connection for the next session to the same peer if it is healthy.  It
 * does not wait for the peer.  When it returns, no key this side gave out
 * reaches its memory; the peer's keys are the peer's to revoke (at its own
 * close).  NULL-safe.  Serialize per session; the close of a server
 * session also with its listener (tf_listener_accept).
 */
void tf_session_close(tf_session_t *s);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_SESSION_H */
