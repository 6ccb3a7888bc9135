/* SPDX-License-Identifier: MIT */
/*
 * session_int.h - internal structures of nodes, listeners, connections and
 * sessions (the files of src/session/).
 */
#ifndef TOLLFREE_SESSION_INT_H
#define TOLLFREE_SESSION_INT_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <tollfree/session.h>

#include "provider.h"
#include "stats_int.h"
#include "wire_int.h"

#define TF_SESS_SUBSYS	    "session"
#define TF_SESS_PSK_MAX	    256
#define TF_SESS_MW_FREE_MAX 256
/* A busy-polling listener looks at its sockets at least this often. */
#define TF_LISTENER_EPOLL_NS 5000ull
/* ... and at the sockets of its kept connections this often. */
#define TF_LISTENER_SOCKCHECK_NS 1000000ull

/*
 * The control QP of a connection (ctl.c): TF_CTL_RECV receive
 * slots and TF_CTL_SEND send slots of TF_CTL_SLOT bytes each, in one
 * registered buffer.  The largest control message on it is an ACCEPT with
 * TF_WIRE_MAX_EXPOSE exposures (16 + 10 + 64 * 24 = 1562 bytes); an OPEN
 * on a kept connection carries at most TF_WIRE_MAX_PRIV (1024) bytes of
 * private data (1048 bytes).  tf__ctl_send checks the bound anyway.
 */
#define TF_CTL_SLOT 1600
/* How often a session on the control QP looks at its socket for the
 * peer's end (a system call). */
#define TF_CTL_SOCKET_CHECK_NS 100000ull
/* How often tf_session_poll reads the socket of a session whose control
 * messages travel there (a connection's first session): a system call
 * on every poll cost more than the operations polled for.  State and
 * exposure queries and tf_session_wait_peer read it every time, and
 * tf_session_wait (which polls) at once after it slept. */
#define TF_SOCK_POLL_NS 20000ull
/* A wait for a control message yields this long after its spin, then
 * sleeps (ctl.c). */
#define TF_CTL_YIELD_NS 1000000ull
/* How long a blocking wait that saw the peer's end still looks for its
 * last control message (tf__ctl_last_look). */
#define TF_CTL_LAST_LOOK_NS 2000000ull

#define TF_CTL_RECV (TF_SESSION_MAX_EXPOSURES + 8)
#define TF_CTL_SEND 8
/* Bytes of a control QP's registered slots. */
#define TF_CTL_BYTES ((size_t)(TF_CTL_RECV + TF_CTL_SEND) * TF_CTL_SLOT)
/* Queue depths of the stock's QPs (stock.c), the default of connect and
 * accept: a connection that asks for no deeper queues takes from it. */
#define TF_STOCK_DEPTH 256u
/* Unused control QPs a stock keeps for its next entries. */
#define TF_STOCK_SPARE 4
/* TOLLFREE_SESSION_STOCK_REFILL=auto: a refill thread from this many CPUs
 * (the process's affinity), where one can run beside a client and a
 * server that both spin; below, inline refills (stock.c). */
#define TF_STOCK_THREAD_CPUS 4

struct tf_ctl {
	tf_qp_t *qp;  /* NULL: this connection has no control QP */
	tf_cq_t *cq;  /* its receives (armed for sleepers) */
	tf_cq_t *scq; /* its sends */
	tf_mr_t *mr;  /* registers buf, local access only */
	uint8_t *buf; /* the slots */
	uint32_t lkey;
	uint64_t sent, send_done;
	/* Connected, with its receives posted, on both sides: the sessions
	 * after the first one send their control messages here. */
	bool ready;
	/* Receives completed while waiting to send, in arrival order. */
	struct tf_wc backlog[TF_CTL_RECV];
	unsigned bl_head, n_backlog;
};

/* A grant: a window over a fresh slice, bound to its connection's QP
 * before any session asked (server), or the key of one (client: only
 * id and info). */
struct tf_grant {
	uint32_t id;
	tf_exposure_info_t info;
	tf_mw_t *mw;
	tf_slice_t slice;
};

/* Server-side handshake states of a connection. */
enum tf_conn_hs {
	TF_CONN_WAIT_HELLO = 0, /* new socket, nothing received */
	TF_CONN_WAIT_OPEN,	/* CHALLENGE sent */
	TF_CONN_WAIT_EARLY,	/* HELLO with an early OPEN behind it read */
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
	bool broken;	  /* never reuse */
	bool no_keep;	  /* TF_SESSION_NO_REUSE: destroy at close */
	bool stock_shape; /* QP and CQ of the stock's depths (recyclable) */
	bool fin_next;	  /* the next socket send is the last: with the FIN */
	bool addr_sent;	  /* server: its QPs went ahead in an ADDR */
	enum tf_conn_hs hs;
	uint64_t deadline_ns; /* server: end of the handshake step */
	uint64_t born_ns;     /* server: accepted at */
	/* Client: the listener's address; server: the client's. */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	uint8_t nonce_c[TF_WIRE_NONCE], nonce_s[TF_WIRE_NONCE];
	uint64_t hello_ns; /* server: an early HELLO's time (replay.c) */
	/* A handshake message held back to leave with the next one on the
	 * socket, in one send (tf__conn_send): the client's HELLO before
	 * its early OPEN, the server's CHALLENGE before its answer. */
	uint8_t pre[TF_WIRE_HDR_SIZE + 96];
	size_t pre_len;
	/* With a pre-shared key: the connection's keys (seal.c), and the
	 * handshake's transcript until the first ACCEPT is sent (server)
	 * or opened (client). */
	struct tf_sess_keys *keys;
	struct tf_transcript *ts;
	struct tf_wire_rx rx;
	/* One-way close: this side closed a session before the peer's
	 * CLOSE came.  That CLOSE is still due on the channel whose bit is
	 * counted (the first session's on the socket and later ones' on the
	 * control QP may all be due: a client on grants runs ahead of the
	 * server's closes) and is consumed
	 * wherever the connection reads that channel next; on the socket,
	 * while the control QP carries the sessions, into sock_rx. */
	unsigned close_due[TF_WIRE_CHANNELS]; /* a count per channel */
	struct tf_wire_rx sock_rx;
	struct tf_ctl ctl;
	/* The memory of this connection's last session, for the next. */
	struct tf_session *spare;
	uint64_t tcp_check_ns; /* last look at the socket (tf_session_poll,
				* and the control QP's end check) */
	/* Listener: its socket and control CQ in the epoll set (*_watched),
	 * each registered one-shot and armed to report its next event
	 * (*_ev; an event disarms it).  They stay in the set while a
	 * session owns the connection (listener.c, watch_fd). */
	bool sock_watched, sock_ev;
	bool ctl_watched, ctl_ev;
	bool ctl_armed; /* idle: its control CQ's fd is armed */
	bool heard;	/* listener: bytes wait in its socket (make_room) */
	/* Server: counted as kept by its peer's entry (peers.c). */
	struct tf_peer *kept_pe;
	bool client; /* made by tf_session_connect */
	/* Grants (grant.c): the server's windows sent ahead, or the
	 * client's keys received, oldest first. */
	struct tf_grant grants[TF_WIRE_MAX_GRANTS];
	unsigned n_grants;
	uint32_t last_grant; /* server: the last id given (ids count up) */
	uint64_t kept_ns;    /* client: when it went back to the cache */
	/* tf_session_fd: an epoll set of the data CQ's fd, the socket and,
	 * once a session uses it, the control CQ's fd; made at first use,
	 * kept with the connection (-1: not made yet). */
	int wait_fd;
	bool wait_ctl; /* the control CQ's fd is in it */
};

/* What peers hold on a node as a server, and its bounds (peers.c). */
struct tf_peer;
struct tf_peers {
	pthread_mutex_t lock;
	struct tf_peer **bucket;
	unsigned n_buckets;	 /* a power of two */
	unsigned n_ent;		 /* peers with a session or a kept connection */
	unsigned sessions, kept; /* all peers' */
	atomic_ullong exposed;	 /* bytes, all peers' */
	uint64_t seed;		 /* of the hash */
	/* TOLLFREE_SESSION_MAX_* */
	unsigned max_sessions, max_sessions_peer, max_kept, max_kept_peer;
	uint64_t max_exposed_peer;
};

/* The nonces of the early OPENs a node took (replay.c).  cap 0: off. */
struct tf_replay_ent {
	uint8_t nonce[TF_WIRE_NONCE];
	uint64_t sent_ns; /* the client's realtime clock, in its HELLO */
	int32_t next;	  /* hash chain: ring index, or -1 */
};
struct tf_replay {
	pthread_mutex_t lock;
	struct tf_replay_ent *ring;
	int32_t *bucket;
	unsigned cap, head, n, mask;
	uint64_t window_ns, floor, salt;
};
enum tf_replay_verdict {
	TF_REPLAY_FRESH, /* recorded: take the early OPEN */
	TF_REPLAY_SEEN,	 /* that nonce was taken before */
	TF_REPLAY_STALE, /* its time is outside the window */
	TF_REPLAY_FULL,	 /* no room left */
	TF_REPLAY_OFF,	 /* the node takes none */
};
void tf__replay_init(struct tf_replay *r, unsigned cap, uint64_t window_ns);
void tf__replay_fini(struct tf_replay *r);
/* Record @nonce if its early OPEN may be taken (TF_REPLAY_FRESH), the
 * client's and this side's realtime clocks being @sent_ns and @now_ns.
 * Thread-safe. */
enum tf_replay_verdict tf__replay_admit(struct tf_replay *r,
					const uint8_t nonce[TF_WIRE_NONCE],
					uint64_t sent_ns, uint64_t now_ns);

/* The node's stock of ready connection resources (stock.c). */
struct tf_stock_ent;
struct tf_stock {
	pthread_mutex_t lock;
	pthread_cond_t cv; /* the refill thread waits here */
	struct tf_stock_ent *ent;
	unsigned n, cap;
	pthread_t thr;
	unsigned fork_gen; /* a forked child has no thread (util's fork.c) */
	bool running, stop;
	bool blocked;	    /* a make failed: wait for the next take */
	bool inline_refill; /* no thread: tf__stock_refill makes entries */
	/* Inline: an entry is missing (set by a take, cleared when the
	 * stock is full), so that a busy-polling listener's idle calls
	 * look without the lock. */
	atomic_bool lacking;
	bool making; /* an inline refill is making one */
	/* Entries on their way in (being made, or given back by a
	 * connection): each holds a place, so that n + reserved <= cap. */
	unsigned reserved;
	unsigned n_dirty; /* given back, not yet reset (of n) */
	bool fill_up;	  /* the thread fills the stock up to its cap */
	/* TF_CAP_QP_RESET: a connection that ends cleanly gives its QP and
	 * CQ back (tf__stock_recycle), and a take leaves the inline refills
	 * alone until fewer than @low entries are left, so that they do not
	 * make the entry a connection will give back. */
	bool recycle;
	unsigned low;
	struct tf_ctl spare[TF_STOCK_SPARE];
	unsigned n_spare;
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
	/* TOLLFREE_SESSION_EARLY_ADDR: a new connection's QPs go to the
	 * client in an ADDR before this side connects them (wire_int.h);
	 * as a client, it expects an ADDR (and refills its stock after). */
	bool early_addr;
	/* TOLLFREE_SESSION_SOURCE_ADDR: new client connections bind to it
	 * (src_len 0: none). */
	struct sockaddr_storage src;
	socklen_t src_len;
	/* The device completes a SEND or WRITE once sent, not once the peer
	 * placed it (no TF_CAP_REMOTE_ACK: iWARP): a control message after
	 * data waits for a fence (tf__sess_fence). */
	bool fence;
	/* The provider has TF_CAP_SEND_WITH_INV and exposures are windows:
	 * a server may agree to TF_SESSION_REMOTE_INV. */
	bool rinv;
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
	atomic_ullong pending_dropped, pending_refused;
	atomic_ullong stock_hits, stock_misses, stock_made, stock_failed;
	atomic_ullong stock_recycled;
	struct tf_stock stock;
	atomic_llong windows_live;
	/* Server-side bounds per peer and overall (peers.c). */
	struct tf_peers peers;
	atomic_ullong sessions_refused, sessions_refused_peer;
	atomic_ullong expose_refused, kept_refused;
	atomic_ullong grants_made, grants_taken, grants_dropped;
	atomic_ullong opens_deferred;
	atomic_ullong remote_inv, remote_inv_missed;
	atomic_ullong psk_early, psk_early_refused;
	atomic_ullong stock_sockets;
	/* With a pre-shared key: the key early OPENs are sealed with (seal.c);
	 * the early OPENs taken (server; its window_ns, the setting, also
	 * says whether a client sends them: replay.c). */
	struct tf_early_key *early_key;
	struct tf_replay replay;
	/* Cipher objects kept for the next handshake, each under the lock
	 * (tf__node_keys_*): the client's early key object, made ready
	 * (early_ready: keyed for early_nonce, in fork generation
	 * early_gen) where a call would wait anyway; the server's, keyed
	 * again for each early OPEN; a connection's two ciphers, made
	 * ahead (tf__keys_spare_new) and keyed by its handshake. */
	struct tf_sess_keys *early_keys, *early_open_keys, *keys_spare;
	uint8_t early_nonce[TF_WIRE_NONCE];
	bool early_ready;
	unsigned early_gen;
	/* Set when a take left tf__node_keys_ahead something to make (as
	 * the stock's lacking): read without the lock. */
	atomic_bool keys_lacking;
	/* Client: a TCP socket for the next connect, made with its options
	 * where a connect waits anyway (tf__node_sock_ahead), of the family
	 * of the last connect, in fork generation sock_gen; -1: none.
	 * Under the lock. */
	int sock_spare, sock_family;
	unsigned sock_gen;
	/* Statistics publication (node_stats.c). */
	struct tf__stats_source stats_src;
};

struct tf_listener {
	struct tf_node *node;
	int lfd;
	int epfd;
	/* Made readable when a kept connection's next OPEN is already
	 * queued (it arrived before the control CQ was armed); kicked: it
	 * is, and not read since (one write stands for any number). */
	int efd;
	bool kicked;
	uint16_t port;
	bool busy_poll;	   /* TF_LISTENER_BUSY_POLL: control CQs never armed */
	uint64_t epoll_ns; /* busy_poll: the last look at the sockets */
	uint64_t sockcheck_ns; /* busy_poll: the last look at unwatched ones */
	struct tf_conn conns;  /* list head: handshaking and idle */
	unsigned n_idle, n_pending;
	unsigned max_pending, max_pending_peer; /* TOLLFREE_SESSION_* */
	/* tf_listener_params_t's grants (grant_len 0: none). */
	size_t grant_len;
	uint32_t grant_rights;
	unsigned grant_depth;
	int hello_ms;
	/* The context serves peers' one-sided operations only when this
	 * side makes progress, and has no fd that says when (listener.c,
	 * tf_listener_accept): a blocking accept wakes every 10 ms while
	 * sessions are open. */
	bool progress_tick;
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
	bool opened;  /* counted in sessions_opened (handshake completed) */
	bool granted; /* opened on a grant: exposure 0 is the grant */
	/* Client, TF_SESSION_DEFER_OPEN: the OPEN that takes grant
	 * open_grant is not sent yet (tf__sess_open_flush), with
	 * open_priv_len bytes of open_priv. */
	bool open_due;
	uint32_t open_grant;
	size_t open_priv_len;
	/* Remote invalidation (TF_SESSION_REMOTE_INV).  Client: rinv_asked
	 * (the flag; no SEND then), rinv (the server agreed: the close
	 * sends a SEND_WITH_INV of its exposure 0).  Server: rinv_asked
	 * (the OPEN asked), rinv (its receive for it is posted, exposure 0
	 * is a window), rinv_done (that receive completed: the window is
	 * revoked). */
	bool rinv_asked;
	bool rinv;
	bool rinv_done;
	/* Control messages go over the connection's control QP (a session
	 * on a kept connection whose control QP is ready), else TCP. */
	bool qctl;
	/* Server: the peer's entry this session is counted in (peers.c),
	 * and the bytes its live exposures count there. */
	struct tf_peer *pe;
	uint64_t exposed;
	/* A SEND or WRITE was posted since the last fence (node->fence). */
	bool fence_due;
	/* 1 + the send index of the last READ posted with no SEND or WRITE
	 * after it, 0 if none: its success fences like the fence READ. */
	uint64_t fence_read;
	int fence_pending; /* the fence READ, not completed */
	enum tf_wc_status fence_status;
	int n_bufs, n_exps, n_exps_sent, n_peer;
	size_t priv_len;
	uint64_t send_posted, send_done, recv_posted, recv_done;
	int n_stash, stash_head;
	unsigned n_reaped; /* completions polled, for tf__sess_cq_sleep */

	/*
	 * From here on, nothing is cleared when the memory of a session is
	 * reused for the next session on its kept connection (see
	 * tf__sess_new): every entry below is written before it is read
	 * (bufs and exps when they come into use, peer and priv up to their
	 * counts, the rings by slot).  The arrays take ~40 KB with the
	 * default queue depths; zeroing them per session cost more than a
	 * session on a kept connection otherwise does.
	 */
	/* Work-request tracking: every WR posted carries an internal wr_id
	 * (kind << 56 | slot); queues complete in order, so rings of the
	 * queue depth map completions back to the caller's wr_ids. */
	uint64_t *send_ids, *recv_ids;
	/* User completions reaped while waiting for internal ones. */
	struct tf_wc *stash;
	int stash_cap;
	struct tf_sess_buf bufs[TF_SESSION_MAX_BUFS];
	struct tf_sess_exp exps[TF_SESSION_MAX_EXPOSURES];
	tf_exposure_info_t peer[TF_SESSION_MAX_EXPOSURES];
	uint8_t priv[TF_WIRE_MAX_PRIV];
	uint8_t open_priv[TF_WIRE_MAX_PRIV];
};

/* The session's own wr_ids: kind << 56 | slot (session.c, session_data.c).
 * Work posted directly on tf_session_qp() with a wr_id below 2^56 has kind
 * 0 and is reported unchanged. */
enum { TF_SESS_WR_SEND = 1, TF_SESS_WR_RECV = 2, TF_SESS_WR_INT = 3 };
#define WR_ID(_kind, _slot) (((uint64_t)(_kind) << 56) | (uint64_t)(_slot))
#define WR_KIND(_id)	    ((unsigned)((_id) >> 56))
#define WR_SLOT(_id)	    ((_id) & ((1ull << 56) - 1))
#define WR_SEND		    TF_SESS_WR_SEND
#define WR_RECV		    TF_SESS_WR_RECV
#define WR_INT		    TF_SESS_WR_INT
/* The internal slot of a remote invalidation: the client's SEND_WITH_INV,
 * the server's receive for it (TF_SESSION_REMOTE_INV).  Past every
 * exposure's and the fence READ's (session_data.c). */
#define RINV_SLOT ((uint64_t)TF_SESSION_MAX_EXPOSURES + 1)

/* session.c and session_data.c share these. */
void tf__sess_set_broken(struct tf_session *s, int why);
/* Client: send the OPEN a TF_SESSION_DEFER_OPEN session still owes
 * (@closed: as its CLOSE too).  0, or -errno with the session broken
 * (connect.c). */
int tf__sess_open_send(struct tf_session *s, bool closed);
/* The same if it owes one: a load and a branch on the data path. */
static inline int tf__sess_open_flush(struct tf_session *s, bool closed)
{
	return TF__UNLIKELY(s->open_due) ? tf__sess_open_send(s, closed) : 0;
}
/* Read the control messages that arrived, without blocking. */
void tf__sess_ctrl_step(struct tf_session *s);
/* Poll the CQ once: internal completions update their exposure, the
 * caller's go to @out (up to @n) or the stash.  How many went to @out. */
int tf__sess_reap(struct tf_session *s, struct tf_wc *out, int n);
/* Wait until the session's binds and invalidations completed. */
int tf__sess_wait_internal(struct tf_session *s);
/* Arm the session's CQ, look once more, and sleep on its fd until a
 * completion or the deadline of @bo (no sleep if the look found one).
 * 0 or -errno. */
int tf__sess_cq_sleep(struct tf_session *s, const struct tf_backoff *bo);
/* The session's fd (tf_session_fd): the connection's wait set, made at
 * first use.  The fd or -errno. */
int tf__sess_wait_fd(const struct tf_session *s);
/* On a device without TF_CAP_REMOTE_ACK, after a SEND or WRITE: an empty
 * READ on the session's QP, awaited, so that what was sent is placed at
 * the peer before a control message (another QP or TCP) can overtake it.
 * 0 (also when no fence is due), or the error that broke the session. */
int tf__sess_fence(struct tf_session *s);
/* Buffer @buf of @s, or NULL for a bad index. */
struct tf_sess_buf *tf__sess_get_buf(struct tf_session *s, int buf);

/* conn.c */
struct tf_conn *tf__conn_alloc(struct tf_node *node, int fd);
void tf__conn_list_init(struct tf_conn *head);
void tf__conn_sock_opts(int fd);
/* Take a kept connection to the peer at @sa (client), or NULL. */
struct tf_conn *tf__node_take(struct tf_node *node,
			      const struct sockaddr_storage *sa, socklen_t len);
/* The addresses of one host, in the order to try them. */
#define TF_SESS_ADDRS_MAX 8
struct tf_sess_addrs {
	int n;
	struct tf_sess_addr {
		struct sockaddr_storage sa; /* zeroed past len */
		socklen_t len;
	} a[TF_SESS_ADDRS_MAX];
};
/* Resolve a numeric IPv4/IPv6 address or a host name (getaddrinfo) with
 * @port into @out (at least one address).  0, -EINVAL (empty or bad
 * host), -EHOSTUNREACH (the name does not resolve), -ENOMEM; logged. */
int tf__sess_resolve(const char *host, uint16_t port,
		     struct tf_sess_addrs *out);
/* @a as text ("127.0.0.1", "::1") into @buf, for messages. */
const char *tf__sess_addr_str(const struct tf_sess_addr *a, char *buf,
			      size_t len);
/* Send the finished message @m on channel @ch of @c: sealed if the
 * connection is authenticated (with the transcript while the handshake
 * runs), then on the socket or the control QP.  0 or -errno. */
int tf__conn_send(struct tf_conn *c, unsigned ch, struct tf_wire_msg *m,
		  int timeout_ms);
/* Open the message in c->rx that came on channel @ch: a no-op without
 * keys, else tf__wire_unseal (with the transcript while it runs). */
int tf__conn_open(struct tf_conn *c, unsigned ch);
/* As tf__conn_open for a message in @rx. */
int tf__conn_open_rx(struct tf_conn *c, unsigned ch, struct tf_wire_rx *rx);
/* Whether the opened message in @rx, from channel @ch, belongs to the
 * connection rather than to the session reading: a previous session's
 * CLOSE that a one-way close left due, or (client, control QP) a GRANT,
 * which is kept for a later session.  1: consumed, the caller reads on;
 * 0: the session's; -TF_EWIRE: a malformed GRANT, or more than
 * TF_WIRE_MAX_GRANTS (the connection fails). */
int tf__conn_aside(struct tf_conn *c, unsigned ch, const struct tf_wire_rx *rx);
/* Revoke and free the grants the connection still holds (server: each
 * window freed, which revokes it, then its slice returned). */
void tf__conn_grants_drop(struct tf_conn *c);
/* Take grant @i off @c's list (the others keep their order). */
struct tf_grant tf__conn_grant_take(struct tf_conn *c, unsigned i);
/* Make a QP and its CQ for @c (no stock); tf__conn_new_qp takes them from
 * the stock when it can. */
int tf__conn_make_qp(struct tf_node *node, struct tf_conn *c,
		     uint32_t send_depth, uint32_t recv_depth);
/* ... and with the control QP, when @want_ctl and the stock has one. */
int tf__conn_new_qp(struct tf_node *node, struct tf_conn *c,
		    uint32_t send_depth, uint32_t recv_depth, bool want_ctl);
void tf__conn_destroy(struct tf_conn *c);
void tf__conn_unlink(struct tf_conn *c);
void tf__conn_link(struct tf_conn *head, struct tf_conn *c);
/* A wait of the session layer: tf__backoff with the context's spin. */
static inline void tf__sess_backoff_init(struct tf_backoff *b,
					 const struct tf_node *node,
					 int timeout_ms)
{
	tf__backoff_init(b, node->ctx->cfg.poll_spin_us,
			 node->ctx->cfg.poll_spin_yield_us, timeout_ms);
}

int tf__sess_new(struct tf_node *node, struct tf_conn *c, bool server,
		 struct tf_session **s_p);
void tf__sess_free_mem(struct tf_session *s);
int tf__sess_send_accept(struct tf_session *s);
int tf__sess_add_exposures(struct tf_session *s,
			   const struct tf_wire_exposures *x);
void tf__listener_keep(struct tf_listener *l, struct tf_conn *c);
/* A connection of @l's that its session drops: out of @l's epoll set
 * (if still in it), then destroyed. */
void tf__listener_drop_conn(struct tf_listener *l, struct tf_conn *c);
/* A window from the node's free list (or a new one), or NULL; and back
 * to it once invalidated (freed if the list is full). */
tf_mw_t *tf__mw_get(struct tf_node *node);
void tf__mw_put(struct tf_node *node, tf_mw_t *mw);
/* grant.c: a listener's kept connection @c holds grant_depth grants (it
 * makes and sends the ones lacking); a failure that breaks the
 * connection marks it broken. */
void tf__listener_grant(struct tf_listener *l, struct tf_conn *c);
/* Server: make grant @g (taken off its connection by an OPEN) the new
 * session @s's buffer 0 and exposure 0 (session.c). */
void tf__sess_take_grant(struct tf_session *s, const struct tf_grant *g);
void tf__listener_put(struct tf_listener *l);
void tf__node_keep(struct tf_node *node, struct tf_conn *c);
/* With a pre-shared key, where a call would wait anyway (a client's
 * connect after its HELLO left, a listener with nothing to do): make
 * the next connection's ciphers (tf__keys_spare_new) and, on a client
 * that sends early OPENs, its next nonce and early key.  Each at most
 * once; a failure leaves the handshake to make them. */
void tf__node_keys_ahead(struct tf_node *node);
/* Client, where a connect waits anyway (with early addresses, after its
 * QPs connected to the ADDR's): make the next connect's TCP socket, of
 * @family, unless one is there (not with TOLLFREE_SESSION_SOURCE_ADDR).  tf__node_sock_take: that socket if it
 * is of @family and made in this process, else -1; the caller owns it. */
void tf__node_sock_ahead(struct tf_node *node, int family);
int tf__node_sock_take(struct tf_node *node, int family);
/* The ciphers made ahead, or NULL: for tf__keys_derive/_from_prk. */
struct tf_sess_keys *tf__node_keys_spare(struct tf_node *node);
/* Client: a fresh nonce into @nonce_c and the early keys for it (made
 * ahead, or keyed now); given back after the early OPEN was sealed. */
int tf__node_early_take(struct tf_node *node, uint8_t nonce_c[TF_WIRE_NONCE],
			struct tf_sess_keys **k_p);
void tf__node_early_put(struct tf_node *node, struct tf_sess_keys *k);
/* Server: the keys that open the early OPEN of nonce @nonce_c; given
 * back after it was opened. */
int tf__node_early_open_take(struct tf_node *node,
			     const uint8_t nonce_c[TF_WIRE_NONCE],
			     struct tf_sess_keys **k_p);
void tf__node_early_open_put(struct tf_node *node, struct tf_sess_keys *k);
/* Send @m on the session's control channel (QP or socket), sealed on an
 * authenticated connection (@m is changed). */
int tf__sess_ctl_send(struct tf_session *s, struct tf_wire_msg *m,
		      int timeout_ms);
/* The channel a session's control messages use. */
/* Whether @params (may be NULL) sets session flag @flag. */
static inline bool tf__sess_flag(const tf_session_params_t *params,
				 unsigned flag)
{
	return params && (params->field_mask & TF_SESSION_PARAM_FLAGS) &&
	       (params->flags & flag);
}

/* Slot @slot of a control QP's registered buffer (ctl.c). */
static inline uint8_t *tf__ctl_slot(const struct tf_ctl *k, unsigned slot)
{
	return k->buf + (size_t)slot * TF_CTL_SLOT;
}

static inline unsigned tf__sess_channel(const struct tf_session *s)
{
	return s->qctl ? TF_WIRE_CH_CTL : TF_WIRE_CH_SOCK;
}

/* stock.c: start a stock of @cap entries (0: no stock) refilled as
 * TOLLFREE_SESSION_STOCK_REFILL says (@refill); take an entry into @c (its
 * QP, CQ and, if made, control QP, not connected): false when there is
 * none for these depths; entries and their control slots' bytes.
 * tf__stock_refill: an inline stock short of an entry makes one (1), or
 * nothing (0), or fails (-errno, counted; not tried again before the next
 * take); call it where the caller would wait anyway.  tf__stock_fill: as
 * many as the inline stock lacks, even after a failure: how many, or the
 * first one's error. */
int tf__stock_init(struct tf_node *node, unsigned cap, const char *refill);
int tf__stock_refill(struct tf_node *node);
int tf__stock_fill(struct tf_node *node);
void tf__stock_fini(struct tf_node *node);
bool tf__stock_take(struct tf_node *node, struct tf_conn *c, uint32_t sd,
		    uint32_t rd, bool want_ctl);
unsigned tf__stock_count(struct tf_node *node, uint64_t *bytes_p);
/* A connection that ends cleanly: give its QP and CQ back to the stock,
 * reset (true: they are the stock's now, c->qp and c->cq NULL), or leave
 * them to the caller to destroy (false). */
bool tf__stock_recycle(struct tf_node *node, struct tf_conn *c);

/* peers.c: the server-side bounds per peer and overall.  A new server
 * session from @peer: 0 (*@pe_p set), -EBUSY (the node serves
 * TOLLFREE_SESSION_MAX_SESSIONS), -EUSERS (the peer has
 * _MAX_SESSIONS_PEER), -ENOMEM; refusals are counted and logged. */
int tf__peers_init(struct tf_node *node);
void tf__peers_fini(struct tf_node *node);
int tf__peers_session_get(struct tf_node *node,
			  const struct sockaddr_storage *peer,
			  struct tf_peer **pe_p);
void tf__peers_session_put(struct tf_node *node, struct tf_peer *pe);
/* @len more bytes exposed to @pe: 0, or -ENOBUFS past
 * TOLLFREE_SESSION_MAX_EXPOSED_PEER (counted, logged). */
int tf__peers_expose(struct tf_node *node, struct tf_peer *pe, uint64_t len);
void tf__peers_unexpose(struct tf_node *node, struct tf_peer *pe, uint64_t len);
/* Count @c as kept by its peer (c->kept_pe): false past
 * TOLLFREE_SESSION_MAX_KEPT{,_PEER} (counted): do not keep it then. */
bool tf__peers_keep(struct tf_node *node, struct tf_conn *c);
/* No longer kept (idle connection taken or destroyed); no-op if not. */
void tf__peers_unkeep(struct tf_node *node, struct tf_conn *c);
/* Server sessions now. */
uint64_t tf__peers_sessions(struct tf_node *node);

/* node_stats.c: publish the node's counters with its context's. */
void tf__sess_stats_register(struct tf_node *node);
void tf__sess_stats_unregister(struct tf_node *node);

/* ctl.c */
int tf__ctl_create(struct tf_node *node, struct tf_conn *c);
void tf__ctl_destroy(struct tf_conn *c);
int tf__ctl_connect(struct tf_conn *c, const void *blob, size_t len);
int tf__ctl_send(struct tf_conn *c, const struct tf_wire_msg *m,
		 int timeout_ms);
/* Send slots free now (completed sends reaped; 0 if the QP failed):
 * what can be sent without waiting for the peer. */
unsigned tf__ctl_send_room(struct tf_conn *c);
/* Wait up to @timeout_ms until every SEND posted has completed. */
void tf__ctl_flush(struct tf_conn *c, int timeout_ms);
/* The next control message into @rx: 1, 0 if none yet, or -errno. */
int tf__ctl_next(struct tf_conn *c, struct tf_wire_rx *rx);
/* As tf__ctl_next, waiting up to @timeout_ms (> 0); -ETIMEDOUT, or
 * -ECONNRESET when the socket reports the peer's end. */
int tf__ctl_wait(struct tf_conn *c, struct tf_wire_rx *rx, int timeout_ms);
/* After a wait or a poll saw the peer's end (@err): the peer's last
 * message on the control QP, if it sent one before it left (1, in @rx),
 * else @err.  Looks for up to @wait_ns (0: once). */
int tf__ctl_last_look(struct tf_conn *c, struct tf_wire_rx *rx, int err,
		      uint64_t wait_ns);
/* Arm the receive CQ's fd for the next message (then looks once more). */
int tf__ctl_arm(struct tf_conn *c);
/* 0 if the socket is quiet, -ECONNRESET at EOF, -TF_EWIRE for bytes. */
int tf__ctl_tcp_check(struct tf_conn *c);

#endif /* TOLLFREE_SESSION_INT_H */
