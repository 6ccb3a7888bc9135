/* SPDX-License-Identifier: MIT */
/*
 * soft_int.h - internals of the soft provider: a NIC in software.
 *
 * Split of responsibilities (files):
 *   soft.c        context, PD, mem_alloc, caps, progress (and its thread),
 *                 the waker (CQ fds), probe, the address blob
 *                 (encode/decode), connect
 *   soft_mr.c     registration (mlock + /proc/self/pagemap, page pin
 *                 refcounts), the TPT, memory windows, the remote-access
 *                 check, revocation, atomics
 *   soft_xlate.c  the translation-cache model
 *   soft_cq.c     completion queues (ring + eventfd)
 *   soft_qp.c     the engine: QP state machine, WR validation, send/recv
 *                 queues, completions, flush, BIND_MW / LOCAL_INV
 *   soft_shm*.c   transport "shm" (same host; how it works is described at
 *                 the top of soft_shm_int.h), one role per file:
 *     soft_shm.c           ops table, submit, the progress loop
 *     soft_shm_seg.c       segments: QP segments, peer contexts and their
 *                          mappings, connect, teardown
 *     soft_shm_rma.c       one-sided operations: fast path, slow cases
 *     soft_shm_msg.c       messages: SEND ring, acks and NAKs, receive
 *     soft_shm_int.h       what these files share
 *   soft_tcp*.c   transport "tcp" (any host; how it works is described at
 *                 the top of soft_tcp_int.h), one role per file:
 *     soft_tcp.c           ops table, context set-up (the listener), QP
 *                          address and fini
 *     soft_tcp_frame.c     frame codec (pure; the "tcp wire" block below)
 *     soft_tcp_conn.c      connection objects, set-up (dial, accept, HELLO,
 *                          adopt) and teardown (detach, fail, close)
 *     soft_tcp_send.c      send path: send queue, frames, flush, ACKs
 *     soft_tcp_req.c       requester: submit, request frames, responses
 *     soft_tcp_resp.c      responder: executing requests, NAKs
 *     soft_tcp_progress.c  progress: receive, dispatch, linger, timeouts
 *     soft_tcp_int.h       what these files share
 *
 * The engine talks to a transport through struct soft_transport_ops; a
 * transport talks back to the engine only through the soft_engine_*,
 * soft_tpt_*, soft_sge_*, soft_wqe_* and soft_atomic_* functions declared at
 * the end of this file.
 *
 * Locking (read this before writing a transport):
 *  - ctx->progress_lock serializes progress: whoever makes progress (a user
 *    thread in tf_cq_poll / tf_context_progress, the progress thread, or
 *    the waker while a CQ is armed) takes it with trylock and skips the
 *    round when it is busy.  The list of QPs (ctx->qps) is changed only
 *    with it held, so a transport's progress may walk ctx->qps without
 *    further locking.
 *  - qp->lock (a spinlock: soft_qp_lock/trylock/unlock, not recursive)
 *    protects a QP's queues and state.  post_send/post_recv take it; a
 *    transport's progress must take it around any call into the engine
 *    for that QP.  Engine functions below expect it held unless stated.
 *  - ctx->lock protects the TPT allocation, the shared-memory table and
 *    transports' context-level set-up.  Lock order: progress_lock, then
 *    qp->lock, then ctx->lock (the engine takes ctx->lock under qp->lock
 *    for binds and invalidations): never take a qp->lock or progress_lock
 *    while holding ctx->lock.
 *  - A CQ has its own spinlock (completions may come from any thread).
 */
#ifndef TOLLFREE_SOFT_INT_H
#define TOLLFREE_SOFT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "provider.h"

_Static_assert(sizeof(void *) == 8, "the soft provider needs 64-bit");

#define SOFT_SUBSYS "soft"

/* Version of the soft provider's address blob (see soft.c for the
 * layout: little-endian, magic "TFSB"). */
#define SOFT_ADDR_VERSION 1
#define SOFT_PAGE_SIZE	  4096ul

/* Most QPs per context (QP numbers carry a generation above these bits). */
#define SOFT_MAX_QP 4096u
/* CQs whose sleepers a shm peer may wake directly (soft_tpt_ctl.cq_wake);
 * the others are woken through the context's waker thread. */
#define SOFT_CQ_WAKE_SLOTS 512u
/* Entries of the shared-memory table (tf_mem_alloc regions peers map). */
#define SOFT_MAX_SHMEM 1024u

struct soft_ctx;
struct soft_qp;
struct soft_transport_ops;

/* ---------------------------------------------------------------- TPT
 * The translation and protection table.  It lives in a memfd that same-host
 * peers map: page 0 (struct soft_tpt_ctl) read-write, the rest (struct
 * soft_tpt_hdr and the slots) read-only.  The shm transport checks remote
 * accesses at the initiator against it, so the target CPU does no work for
 * them.  A key is 32 random bits from getrandom; its slot is key &
 * tpt_mask, and a new key is drawn until its slot is free.  Entries are
 * updated under a seqlock (seq odd while writing) so that lock-free readers
 * in another process never act on a torn entry.
 */
enum soft_tpt_type {
	SOFT_TPT_FREE = 0,
	SOFT_TPT_MR = 1,
	SOFT_TPT_MW = 2,
	SOFT_TPT_RESERVED = 3, /* allocated, not yet valid */
};

/* The key table is populated at context open up to this size (the
 * default TOLLFREE_SOFT_MAX_MR of 65536 makes it 8 MiB). */
#define SOFT_TPT_POPULATE_MAX (32ul << 20)

struct soft_tpt_entry {
	_Atomic uint32_t seq; /* seqlock */
	_Atomic uint32_t key; /* 0: invalid (free or revoked) */
	uint32_t type;	      /* enum soft_tpt_type */
	uint32_t pd_id;
	uint32_t access; /* TF_ACCESS_* */
	uint32_t qpn;	 /* MW: QP the window is bound to */
	uint64_t addr;
	uint64_t length;
	/* Where the memory can be mapped by a peer: index into the shared
	 * memory table of struct soft_tpt_hdr (with its generation), or -1
	 * when the memory is private (process_vm_readv/writev then). */
	int32_t shmem_idx;
	uint32_t shmem_gen;
	uint64_t shmem_off; /* offset of addr inside that memfd */
	uint64_t pad;	    /* one entry per cache line */
};

/* Page 0 of the TPT memfd: the only part peers may write. */
struct soft_tpt_ctl {
	/* Rung (incremented) by a shm peer after it queued a message for,
	 * or flagged an error on, one of this context's QPs: progress looks
	 * at the QPs only when it moved (or when it waits for acks). */
	_Atomic uint64_t doorbell;
	/* Nonzero while some CQ of this context is armed: a peer that rang
	 * the doorbell then also writes the context's wake eventfd
	 * (soft_tpt_hdr.wake_fd), so that a process asleep on a CQ fd
	 * wakes up without a progress thread.  Same line as the doorbell,
	 * which the peer has just written. */
	_Atomic uint32_t armed;
	char pad[52];
	/* A process-shared robust mutex that serializes atomics executed
	 * on this context's memory, by initiators (shm) or by this context
	 * for a peer (tcp): RDMA atomics are atomic with respect to each
	 * other (IBV_ATOMIC_HCA). */
	pthread_mutex_t atomic_lock;
	/* One bit per QP slot (qpn % SOFT_MAX_QP): a shm peer sets its
	 * target QP's bit before it rings the doorbell, and progress visits
	 * only the QPs whose bits it takes (exchanging each word with 0),
	 * not every QP of the context.  The peer's word like all of this
	 * page: a bit names a slot, whatever QP lives there is looked at
	 * (a bogus bit costs one cheap look).  On lines of their own, away
	 * from the doorbell that every sender writes. */
	_Alignas(64) _Atomic uint64_t ready[SOFT_MAX_QP / 64];
	/* One word per CQ slot (soft_cq.wake_slot): the slot's generation
	 * (bits 31-1, renewed at each CQ creation) and whether that CQ is
	 * armed (bit 0).  A shm peer that queued a message for a QP whose
	 * receive CQ it finds armed here takes the bit (compare-and-swap,
	 * against the generation the QP's segment names) and writes that
	 * CQ's eventfd itself: the thread asleep on the CQ's fd wakes at
	 * once and makes the progress, instead of the waker waking first
	 * and then waking it.  A peer's writes here can only cost a
	 * sleeper a direct wake-up: the waker's path (armed, above) stays
	 * behind it. */
	_Alignas(64) _Atomic uint32_t cq_wake[SOFT_CQ_WAKE_SLOTS];
};

_Static_assert(sizeof(struct soft_tpt_ctl) <= SOFT_PAGE_SIZE,
	       "the TPT control page");

#define SOFT_TPT_MAGIC 0x5446545054534f46ull /* "FOSTPTFT" */
/* Layout of the TPT memfd (soft_tpt_hdr.version): 2 added ctl.ready, 3
 * ctl.cq_wake. */
#define SOFT_TPT_VERSION 3u

/* Header of the read-only part, at offset SOFT_PAGE_SIZE of the memfd. */
struct soft_tpt_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;    /* power of two */
	uint64_t ctx_nonce; /* random id of the owning context */
	int32_t pid;
	int32_t wake_fd; /* eventfd peers write when ctl.armed */
	/* Table of memory allocated by tf_mem_alloc that peers may map:
	 * memfd numbers in the owner's fd table, opened by peers through
	 * /proc/<pid>/fd/<fd>.  gen changes whenever an entry is reused, so
	 * that a peer's cached mapping of an old memfd is never used. */
	struct {
		int32_t fd; /* -1: unused */
		_Atomic uint32_t gen;
		uint64_t size;
		uint64_t addr; /* owner's address */
	} shmem[SOFT_MAX_SHMEM];
	_Alignas(64) struct soft_tpt_entry slots[];
};

/* Snapshot one entry (seqlock read; works on a peer's mapping too). */
static inline void soft_tpt_read(const struct soft_tpt_entry *e,
				 struct soft_tpt_entry *snap)
{
	uint32_t s1, s2;

	for (;;) {
		s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
		if (s1 & 1) {
			tf__cpu_relax();
			continue;
		}
		/* A relaxed store: a plain one to an _Atomic member would be
		 * a sequentially consistent exchange. */
		atomic_store_explicit(
			&snap->key,
			atomic_load_explicit(&e->key, memory_order_relaxed),
			memory_order_relaxed);
		snap->type = e->type;
		snap->pd_id = e->pd_id;
		snap->access = e->access;
		snap->qpn = e->qpn;
		snap->addr = e->addr;
		snap->length = e->length;
		snap->shmem_idx = e->shmem_idx;
		snap->shmem_gen = e->shmem_gen;
		snap->shmem_off = e->shmem_off;
		atomic_thread_fence(memory_order_acquire);
		s2 = atomic_load_explicit(&e->seq, memory_order_relaxed);
		if (s1 == s2)
			return;
	}
}

/*
 * The remote-access check of one TPT entry snapshot: key valid, same PD as
 * the target QP, for a window bound to the target QP, range inside, right
 * granted by the region/window and by the target QP's access flags.
 * Shared by the target-side check (tcp) and the initiator-side check (shm).
 */
static inline bool soft_tpt_allows(const struct soft_tpt_entry *snap,
				   uint32_t rkey, uint32_t tgt_pd_id,
				   uint32_t tgt_qpn, uint32_t tgt_qp_access,
				   uint64_t addr, uint64_t len, unsigned access)
{
	if (!rkey ||
	    atomic_load_explicit(&snap->key, memory_order_relaxed) != rkey ||
	    snap->pd_id != tgt_pd_id)
		return false;
	if (snap->type == SOFT_TPT_MW) {
		if (snap->qpn != tgt_qpn)
			return false;
	} else if (snap->type != SOFT_TPT_MR) {
		return false;
	}
	if ((snap->access & access) != access ||
	    (tgt_qp_access & access) != access)
		return false;
	if (addr < snap->addr || len > snap->length ||
	    addr - snap->addr > snap->length - len)
		return false;
	return true;
}

/* ---------------------------------------------------------------- objects */

struct soft_pd {
	struct tf_pd base;
	uint32_t pd_id; /* random, nonzero */
};

struct soft_mr {
	struct tf_mr base;
	uint32_t slot;	/* index of the MR's entry (lkey == rkey) */
	uint64_t *pfns; /* physical frame per page (0 if the kernel
				* hides them from us: no CAP_SYS_ADMIN) */
	size_t npages;
	uintptr_t pin_start; /* page-aligned pinned range */
	size_t pin_len;
	atomic_int mw_bound; /* windows currently bound over it */
	uint32_t pd_id;
	int32_t shmem_idx; /* -1 or the tf_mem_alloc region it lies in */
	uint32_t shmem_gen;
	uint64_t shmem_off;
};

struct soft_mw {
	struct tf_mw base;
	bool bound;
	uint32_t slot;	    /* TPT slot while bound */
	struct soft_mr *mr; /* region it is bound over */
	struct soft_qp *qp; /* QP it is bound to */
	/* The windows bound to one QP, so that destroying the QP unbinds
	 * them without a walk of the whole TPT.  ctx->lock. */
	struct soft_mw *qp_next, *qp_prev;
	/* TPT slots reserved for binds of it still queued (RESERVED, owned
	 * by it), so that a dealloc walks the TPT only when some are.
	 * ctx->lock. */
	uint32_t n_reserved;
};

/* A completion queue: a ring the engine writes under the CQ lock and the
 * user polls; an eventfd (tf_cq_fd) signalled when a completion arrives
 * while armed. */
struct soft_cq {
	struct tf_cq base;
	pthread_spinlock_t lock;
	struct tf_wc *ring;
	uint32_t size;	     /* power of two >= depth (the capacity) */
	uint32_t head, tail; /* head: next to poll; tail: next free */
	_Atomic uint32_t count;
	bool overflow;
	int efd; /* tf_cq_fd: written when a completion arrives while armed */
	/* Set by soft_cq_arm, consumed by the push that signals efd: both
	 * under @lock (see soft_cq_push). */
	_Atomic bool armed;
	/* Its word in soft_tpt_ctl.cq_wake (-1: none, all taken) and the
	 * generation it holds there. */
	int wake_slot;
	uint32_t wake_gen;
};

/* Send WQE states (engine). */
enum soft_swqe_state {
	SOFT_WQE_POSTED = 0, /* not yet given to the transport */
	SOFT_WQE_SUBMITTED,  /* the transport owns it until send_done */
	SOFT_WQE_DONE,	     /* completed (CQE written if needed) */
};

/* A send work queue element: a copy of the user's WR plus state. */
struct soft_swqe {
	uint64_t wr_id;
	enum tf_wr_opcode opcode;
	unsigned send_flags;
	uint32_t imm_data;
	uint32_t invalidate_rkey;
	uint64_t remote_addr;
	uint32_t rkey;
	uint64_t compare_add, swap;
	struct tf_send_wr bind; /* BIND_MW arguments (wr.bind_mw) */
	uint32_t num_sge;
	uint32_t total_len;
	struct tf_sge *sge;   /* points into the QP's SGE array */
	uint8_t *inline_data; /* TF_SEND_INLINE: payload copied at post
				 * (then num_sge is 0, total_len its size) */
	uint32_t psn;	      /* transport private: sequence number */
	uint64_t t_post_ns;   /* transport private: for timeouts */
	int state;	      /* enum soft_swqe_state (engine) */
	int tp_state;	      /* transport private */
	uint32_t retries;     /* transport private */
};

struct soft_rwqe {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t total_len;
	struct tf_sge *sge;
};

/* Peer address, decoded from the blob. */
struct soft_peer_addr {
	uint32_t version;
	uint32_t flags; /* SOFT_ADDR_F_* : which parts are present */
	uint32_t qpn;
	uint32_t pd_id;
	uint32_t access; /* the peer QP's remote access flags */
	uint64_t ctx_nonce;
	uint8_t host_id[16]; /* boot id: same host when equal */
	/* shm part */
	int32_t pid;
	int32_t tpt_fd; /* fds in the peer's table */
	int32_t qp_fd;
	/* tcp part */
	uint8_t family; /* 0: none, 4 or 6 */
	uint8_t ip[16];
	uint16_t port; /* host byte order once decoded */
};

#define SOFT_ADDR_F_SHM 1u
#define SOFT_ADDR_F_TCP 2u

struct soft_qp {
	struct tf_qp base;
	struct soft_ctx *ctx;
	struct soft_mw *bound_mws; /* windows bound to this QP; ctx->lock */
	/* Queues and state; the user's posts vs. progress.  A spinlock:
	 * uncontended it costs one atomic exchange, the release a store. */
	_Atomic int lock;
	uint32_t pd_id;
	/* Send queue: ring of sq_size WQEs, a power of two >= max_send_wr
	 * (indices grow and wrap at 2^32; soft_sq_wqe() masks them).  [sq_head, sq_next) were given to the
	 * transport or executed by the engine and wait for completion,
	 * [sq_next, sq_tail) wait to be started, in order. */
	struct soft_swqe *sq;
	uint32_t sq_size, sq_head, sq_next, sq_tail;
	/* receive queue */
	struct soft_rwqe *rq;
	uint32_t rq_size, rq_head, rq_tail;
	struct tf_sge *sq_sge, *rq_sge; /* max_sge per WQE */
	uint8_t *sq_inline;		/* max_inline_data per WQE */
	struct soft_peer_addr peer;
	bool connected;
	bool in_list;		    /* in ctx->qps */
	bool in_kick;		    /* engine: soft_engine_kick runs */
	_Atomic bool kick_pending;  /* engine: retry submit in progress */
	enum tf_wc_status recv_err; /* engine: status for senders once a
					   * receive failed its local check */
	/* engine: TF_WC_RETRY_EXC_ERR when the QP went to error for a lost
	 * peer with no send work unfinished: the next send WQE posted
	 * reports it (soft_engine_qp_error), else 0. */
	enum tf_wc_status err_owed;
	const struct soft_transport_ops *tp; /* chosen at connect */
	void *tp_priv;			     /* transport state */
	void *shm_seg;			     /* shm: own segment (shm_seg) */
	bool tx_wait_pub; /* shm: what its segment's tx_wait says */
	int shm_seg_fd;
	size_t shm_seg_size;
};

/* The translation-cache model (see soft_xlate.c).  @on is read by every
 * transfer, the rest only while the model is on. */
struct soft_xlate {
	bool on; /* TOLLFREE_SOFT_XLATE_ENTRIES or _MISS_NS nonzero */
	pthread_spinlock_t lock;
	uint32_t capacity;
	uint32_t miss_ns;
	void *impl;
};

/* soft_ctx.tp_chosen: the transports QP connects have taken ("auto"
 * chooses per peer; tf_context_query_caps reports them). */
#define SOFT_TP_SHM 1u
#define SOFT_TP_TCP 2u

/* The queue memory of a QP, or a CQ's ring, kept by its context for a
 * new one of the same sizes (soft_qmem.c). */
struct soft_qmem {
	uint32_t sq_size, rq_size, max_sge, max_inline; /* the sizes */
	struct soft_swqe *sq;
	struct soft_rwqe *rq;
	struct tf_sge *sq_sge, *rq_sge;
	uint8_t *sq_inline;
};

struct soft_cqmem {
	struct tf_wc *ring;
	uint32_t size;
};

/* The most sets of each kind a context keeps (TOLLFREE_SOFT_QUEUE_CACHE
 * is capped to it). */
#define SOFT_QMEM_MAX 64

struct soft_ctx {
	struct tf_context base;
	pthread_mutex_t lock;	       /* TPT allocation, shmem table */
	pthread_mutex_t progress_lock; /* progress; ctx->qps changes */
	uint64_t nonce;
	/* This process, and the fork generation it was read in: a forked
	 * child (another generation) asks the kernel again. */
	pid_t pid;
	unsigned fork_gen;
	uint8_t host_id[16];
	int pagemap_fd;
	/* TPT segment */
	int tpt_fd;
	size_t tpt_map_size;
	struct soft_tpt_ctl *tpt_ctl;
	struct soft_tpt_hdr *tpt;
	uint32_t tpt_mask;
	atomic_uint n_keys; /* live TPT entries (bounded) */
	void **slot_owner;  /* private: soft_mr / soft_mw per slot */
	/* Slot + 1 that a target-side access (soft_tpt_check_local) is
	 * using, 0 if none: the revoker waits for it (Dekker, as shm). */
	_Atomic uint32_t local_active;
	/* QPs by number (index qpn % SOFT_MAX_QP), and a dense list of live
	 * QPs for progress (changed under progress_lock). */
	struct soft_qp **qp_tab;
	uint32_t qp_gen;
	struct soft_qp **qps;
	uint32_t n_qps;
	atomic_uint n_kick; /* QPs with kick_pending set */
	struct soft_xlate xlate;
	/* transports: created lazily (ctx_init under ctx->lock) */
	void *shm_priv;
	void *tcp_priv;
	_Atomic bool shm_up, tcp_up; /* set once, after ctx_init */
	atomic_uint n_tcp_qps;	     /* QPs connected over tcp */
	atomic_uint tp_chosen;	     /* SOFT_TP_* a connect has chosen */
	_Atomic uint32_t tick;	     /* progress calls, for rare work */
	bool want_shm, want_tcp;     /* from TOLLFREE_SOFT_TRANSPORT */
	/* Waking a process asleep on a CQ fd: peers write wake_efd while a
	 * CQ is armed; ev_epfd, the context's one wait set, holds it, the
	 * transports' wait_fds and waker_efd.  While a CQ is armed the waker
	 * thread sleeps on ev_epfd and makes progress when it fires, which
	 * writes the eventfd of each armed CQ that gets a completion (soft.c,
	 * "waker"). */
	int wake_efd;
	int ev_epfd;
	/* The transports' wait_fds alone (tcp's sockets): readable when a
	 * peer waits on this side's progress; tf_listener_accept sleeps on
	 * it (provider op progress_fd).  Not wake_efd: shm executes
	 * one-sided operations at the initiator, and an armed CQ's wake-ups
	 * are the waker's. */
	int prog_epfd;
	int waker_efd;	     /* unparks or stops the waker */
	atomic_uint n_armed; /* armed CQs */
	/* CQ slots in tpt_ctl->cq_wake in use, and the last generation
	 * given (both ctx->lock). */
	uint64_t cq_slots[SOFT_CQ_WAKE_SLOTS / 64];
	uint32_t cq_wake_gen;
	pthread_t waker;
	pid_t waker_pid;	    /* the process that started it */
	_Atomic bool waker_running; /* set once, under ctx->lock */
	atomic_bool waker_parked;   /* parked: no CQ armed */
	atomic_bool waker_stop;
	pthread_t progress_thread;
	bool progress_running;
	atomic_bool progress_stop;
	/* Queue memory of destroyed QPs and CQs (soft_qmem.c; qmem_lock). */
	pthread_mutex_t qmem_lock;
	uint32_t qmem_cap, n_qmem, n_cqmem;
	struct soft_qmem qmem[SOFT_QMEM_MAX];
	struct soft_cqmem cqmem[SOFT_QMEM_MAX];
};

static inline struct soft_swqe *soft_sq_wqe(struct soft_qp *qp, uint32_t i)
{
	return &qp->sq[i & (qp->sq_size - 1)];
}

static inline struct soft_rwqe *soft_rq_wqe(struct soft_qp *qp, uint32_t i)
{
	return &qp->rq[i & (qp->rq_size - 1)];
}

static inline uint32_t soft_pow2(uint32_t n)
{
	uint32_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

/* shm: publish in @qp's segment whether work waits in its send queue
 * (its peer then wakes it for acknowledgements; soft_shm_seg.c). */
void soft_shm_tx_wait(struct soft_qp *qp, bool waiting);

static inline struct soft_ctx *soft_ctx_of(struct tf_context *c)
{
	return (struct soft_ctx *)c;
}

static inline struct soft_qp *soft_qp_of(struct tf_qp *q)
{
	return (struct soft_qp *)q;
}

void soft_qp_lock_slow(struct soft_qp *qp);

/* qp->lock: not recursive. */
static inline void soft_qp_lock(struct soft_qp *qp)
{
	if (__builtin_expect(atomic_exchange_explicit(&qp->lock, 1,
						      memory_order_acquire),
			     0))
		soft_qp_lock_slow(qp);
}

static inline bool soft_qp_trylock(struct soft_qp *qp)
{
	return !atomic_load_explicit(&qp->lock, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&qp->lock, 1, memory_order_acquire);
}

static inline void soft_qp_unlock(struct soft_qp *qp)
{
	atomic_store_explicit(&qp->lock, 0, memory_order_release);
}

/* Fields written under qp->lock that progress also reads without it, as
 * hints (re-checked under the lock): relaxed atomic accesses, so that the
 * race is defined (and ThreadSanitizer-clean). */
#define SOFT_READ_ONCE(_x)	__atomic_load_n(&(_x), __ATOMIC_RELAXED)
#define SOFT_WRITE_ONCE(_x, _v) __atomic_store_n(&(_x), (_v), __ATOMIC_RELAXED)

static inline void soft_qp_set_state(struct soft_qp *qp, enum tf_qp_state st)
{
	SOFT_WRITE_ONCE(qp->base.state, st);
}

/* Add to a counter that only the holder of a lock updates (a plain load
 * and store instead of a locked add; readers see a whole value). */
#define SOFT_STAT_ADD_LOCKED(_obj, _field, _n)                                \
	atomic_store_explicit(                                                \
		&(_obj)->_field,                                              \
		atomic_load_explicit(&(_obj)->_field, memory_order_relaxed) + \
			(_n),                                                 \
		memory_order_relaxed)

/* ---------------------------------------------------------------- transports */

struct soft_transport_ops {
	const char *name;
	/* Context-level setup on first use (called under ctx->lock), and
	 * teardown at close (after every QP was destroyed). */
	int (*ctx_init)(struct soft_ctx *ctx);
	void (*ctx_fini)(struct soft_ctx *ctx);
	/* Fill this transport's part of the QP's address in @me: shm:
	 * pid/tpt_fd/qp_fd; tcp: family/ip/port.  Called without qp->lock. */
	int (*qp_addr)(struct soft_qp *qp, struct soft_peer_addr *me);
	/* Connect to qp->peer (already decoded and checked).  Called with
	 * qp->lock NOT held and qp->tp already set; may complete
	 * asynchronously: the engine submits work as soon as the QP is in
	 * RTS, and the transport queues it until the connection is up.
	 * Return 0 or -errno (-TF_EPEER when the peer cannot be reached). */
	int (*connect)(struct soft_qp *qp);
	/*
	 * Start a send WQE (already validated: SGE lkeys checked, lengths
	 * within limits; BIND_MW and LOCAL_INV are handled by the engine and
	 * never reach the transport).  WQEs are submitted in order.  Called
	 * with qp->lock held.  Returns:
	 *   0        accepted; the transport later calls
	 *            soft_engine_send_done() for it, in order (it may do so
	 *            before returning);
	 *   -EAGAIN  cannot take it now (window full, ordering); the engine
	 *            calls submit again for the same WQE from progress;
	 *   other    the engine completes it with TF_WC_GENERAL_ERR.
	 */
	int (*submit)(struct soft_qp *qp, struct soft_swqe *wqe);
	/* Inbound messages, one-sided operations to serve, timeouts, peer
	 * death.  Called with ctx->progress_lock held and no qp->lock.
	 * Returns the number of events handled (>= 0). */
	int (*progress)(struct soft_ctx *ctx);
	/* The QP went to error (qp->base.state == TF_QPS_ERR, qp->lock held)
	 * or is being destroyed (state left as is, qp->lock NOT held, the QP
	 * is already out of ctx->qps).  May be called once for each; must
	 * stop touching the engine's WQEs (soft_engine_send_done is a no-op
	 * in error anyway), may tell the peer, and at destroy frees
	 * qp->tp_priv. */
	void (*qp_fini)(struct soft_qp *qp);
	/* Optional: a file descriptor that becomes readable when progress
	 * has inbound work (tcp: the epoll fd of its sockets), or -1.  It
	 * joins the context's wait set (ctx->ev_epfd), on which the waker
	 * sleeps while a CQ is armed, so that an event loop asleep on
	 * tf_cq_fd() learns of completions that remote events produce
	 * without a progress thread.  Called once, after ctx_init. */
	int (*wait_fd)(struct soft_ctx *ctx);
};

extern const struct soft_transport_ops soft_shm_transport;
/* Not weak (changed by the tcp transport's author): a weak reference does
 * not pull soft_tcp.o out of the static library, so programs linked with
 * tollfree_static that call nothing else in it saw NULL here. */
extern const struct soft_transport_ops soft_tcp_transport;

/* ---------------------------------------------------------------- engine API
 * Called by transports.  Unless stated, the caller holds qp->lock. */

/* Complete the oldest outstanding send WQE @wqe (== soft_sq_wqe(qp,
 * qp->sq_head)) with @status, generating a CQE if signalled or failed, and
 * counting bytes_out.  For READ and atomics the transport has already
 * scattered the data into the WQE's SGEs.  A failure moves the QP to error
 * and flushes the rest.  No-op once the QP is in error. */
void soft_engine_send_done(struct soft_qp *qp, struct soft_swqe *wqe,
			   enum tf_wc_status status);

/* An inbound SEND / SEND_WITH_IMM / SEND_WITH_INV / RDMA_WRITE_WITH_IMM:
 * take the next receive WQE and scatter @len bytes from @data into it.
 * For RDMA_WRITE_WITH_IMM nothing is scattered (@data is ignored, the data
 * was placed by the write) and @len is the write's length (byte_len).
 * For SEND_WITH_INV, @inv_rkey is invalidated (it must name a window bound
 * to @qp) before the completion is written.  If it does not, rxe's class J
 * is followed: the receive completes with TF_WC_REM_INV_REQ_ERR, @qp goes
 * to error, and TF_WC_SUCCESS is returned (the sender is ACKed).
 * Returns TF_WC_SUCCESS, or the status to report to the sender:
 *   TF_WC_RNR_RETRY_EXC_ERR  no receive posted; nothing consumed, the
 *                            caller decides whether to retry (and counts
 *                            rnr_retries at the sender);
 *   TF_WC_REM_INV_REQ_ERR    the message does not fit: the receive
 *                            completes with LOC_LEN_ERR and @qp goes to
 *                            error;
 *   TF_WC_REM_OP_ERR         the receive buffers fail their lkey check:
 *                            the receive completes with LOC_QP_OP_ERR
 *                            (rxe: class A) and @qp goes to error;
 *   TF_WC_WR_FLUSH_ERR       @qp is not able to receive (error state).
 * Counts bytes_in. */
enum tf_wc_status soft_engine_recv(struct soft_qp *qp, enum tf_wr_opcode op,
				   const void *data, uint32_t len, uint32_t imm,
				   uint32_t inv_rkey);

/* Two-step variant for transports that scatter themselves (e.g. straight
 * from a socket or with process_vm_readv): peek returns the receive WQE
 * that the next message would consume, its buffers checked against the
 * TPT; or NULL if none, if @qp cannot receive, or if the buffers failed
 * the check (then the receive completed with LOC_QP_OP_ERR and @qp is in
 * error).  The caller checks @len <= rwqe->total_len, scatters (see
 * soft_sge_scatter), then commits.  Commit consumes it exactly as
 * soft_engine_recv would after the copy (including the length error when
 * @len > total_len: then do not scatter) and returns the same statuses.
 * After a NULL peek, call commit anyway (discarding the data): it returns
 * the status for the sender (RNR_RETRY_EXC_ERR: no receive posted;
 * REM_OP_ERR: bad receive buffers; WR_FLUSH_ERR: @qp in error). */
struct soft_rwqe *soft_engine_recv_peek(struct soft_qp *qp);
enum tf_wc_status soft_engine_recv_commit(struct soft_qp *qp,
					  enum tf_wr_opcode op, uint32_t len,
					  uint32_t imm, uint32_t inv_rkey);

/* Move the QP to the error state and flush both queues (every WQE not yet
 * completed: FLUSH_ERR; the oldest outstanding send WQE gets @why if @why
 * is not TF_WC_WR_FLUSH_ERR and it was already submitted).  Counts
 * qp_errors once.  Idempotent. */
void soft_engine_qp_error(struct soft_qp *qp, enum tf_wc_status why);

/* Check a remote access to THIS context's memory that arrived on @qp
 * (tcp: at the target).  On success *@local_p is the address in this
 * process and the target-side translations are counted in the model; the
 * caller then performs the access and should call soft_tpt_access_done()
 * right after it (the key cannot be revoked in between: LOCAL_INV and
 * dereg in other threads wait for it; the end of the progress call closes
 * it too).  Call it only from transport progress.
 * On failure counts remote_access_denied and moves @qp to error (class C
 * at the responder, as rxe does); the caller only sends the NAK (the
 * requester then completes with TF_WC_REM_ACCESS_ERR).
 * Returns TF_WC_SUCCESS or TF_WC_REM_ACCESS_ERR.  Needs qp->lock. */
enum tf_wc_status soft_tpt_check_local(struct soft_ctx *ctx, struct soft_qp *qp,
				       uint32_t rkey, uint64_t addr,
				       uint64_t len, unsigned access,
				       void **local_p);

/* End of the access a successful soft_tpt_check_local() opened.  (If a
 * transport forgets it, the access counts as open until its progress
 * call returns: soft_progress closes it then.) */
void soft_tpt_access_done(struct soft_ctx *ctx);

/* True in the thread that is running soft_progress (transport progress). */
extern _Thread_local bool soft_in_progress;

/* Check a local SGE list against the TPT (lkeys of @qp's context, same PD
 * as @qp, range, TF_ACCESS_LOCAL_WRITE if @access asks for it) and count
 * its translations.  TF_WC_SUCCESS or TF_WC_LOC_PROT_ERR.  The engine
 * already checks every WQE before submit; transports need not. */
enum tf_wc_status soft_sge_check(struct soft_qp *qp, const struct tf_sge *sge,
				 uint32_t n, unsigned access);

/* Copy @len bytes from @src into an SGE list starting @off bytes into it
 * (the caller checked that it fits). */
void soft_sge_scatter(const struct tf_sge *sge, uint32_t n, uint64_t off,
		      const void *src, uint64_t len);
/* Gather @len bytes of a send WQE's payload (inline data or SGEs) starting
 * @off bytes into it, into @dst. */
void soft_wqe_gather(const struct soft_swqe *wqe, uint64_t off, void *dst,
		     uint64_t len);

/* Execute an atomic (TF_WR_ATOMIC_FETCH_ADD or _CMP_SWP) on 8 bytes of
 * this context's memory at @addr (checked, aligned), serialized with every
 * other atomic on this context's memory.  Returns the original value. */
uint64_t soft_atomic_exec(struct soft_ctx *ctx, uint64_t *addr,
			  enum tf_wr_opcode op, uint64_t compare_add,
			  uint64_t swap);

/* shm: is there anything for progress to do?  (No locks taken.) */
bool soft_shm_need_progress(struct soft_ctx *ctx);
/* A peer rang the doorbell after the last progress pass read it. */
bool soft_shm_doorbell_unseen(struct soft_ctx *ctx);
/* A CQ of @ctx is armed, its thread about to sleep: wake every peer still
 * owed a wake-up (soft_shm_int.h, "Wake-ups owed"). */
void soft_shm_pay_owed(struct soft_ctx *ctx);

void soft_xlate_touch_model(struct soft_ctx *ctx, uint64_t addr, uint64_t len);

/* Count translations of [addr, addr+len) in the translation-cache model.
 * The model is off unless configured (soft_xlate.c): then this is one
 * predictable branch, no lock and no shared write per transfer. */
static inline void soft_xlate_touch(struct soft_ctx *ctx, uint64_t addr,
				    uint64_t len)
{
	if (TF__UNLIKELY(ctx->xlate.on))
		soft_xlate_touch_model(ctx, addr, len);
}

/* QP by number (NULL if none).  Call with ctx->progress_lock held (as in
 * transport progress) so that the QP cannot be destroyed meanwhile. */
struct soft_qp *soft_ctx_qp(struct soft_ctx *ctx, uint32_t qpn);

/* ---------------------------------------------------------------- internal
 * (engine files only) */

int soft_cq_push(struct soft_cq *cq, const struct tf_wc *wc);
void soft_cq_clean(struct soft_cq *cq, const struct tf_qp *qp);
int soft_cq_create(struct tf_context *base, uint32_t depth,
		   struct tf_cq **cq_p);
int soft_cq_destroy(struct tf_cq *cq);
int soft_cq_poll(struct tf_cq *cq, int n, struct tf_wc *wc);
int soft_cq_fd(struct tf_cq *cq);
int soft_cq_arm(struct tf_cq *cq);
/* A CQ of @ctx was armed (@first: the first armed one, after n_armed went
 * from 0 to 1): start the waker on first use, unpark it.  0 or -errno. */
int soft_waker_armed(struct soft_ctx *ctx, bool first);

/* This process's pid without a system call (getpid in a forked child). */
static inline pid_t soft_self_pid(const struct soft_ctx *ctx)
{
	if (TF__LIKELY(ctx->fork_gen == tf__fork_gen()))
		return ctx->pid;
	return getpid();
}

int soft_tpt_init(struct soft_ctx *ctx);
void soft_tpt_fini(struct soft_ctx *ctx);
int soft_mr_reg(struct tf_pd *pd, void *addr, size_t length, unsigned access,
		struct tf_mr **mr_p);
int soft_mr_dereg(struct tf_mr *mr);
int soft_mw_alloc(struct tf_pd *pd, struct tf_mw **mw_p);
int soft_mw_dealloc(struct tf_mw *mw);
/* BIND_MW / LOCAL_INV / SEND_WITH_INV at the receiver (qp->lock held). */
enum tf_wc_status soft_mw_bind(struct soft_qp *qp, struct soft_swqe *wqe);
enum tf_wc_status soft_local_inv(struct soft_qp *qp, uint32_t key);
enum tf_wc_status soft_remote_inv(struct soft_qp *qp, uint32_t key);
/* A BIND_MW WQE flushed before it executed: free the key it reserved at
 * post time (soft_mw_reserve_key, 0 when none is free). */
void soft_mw_bind_cancel(struct soft_qp *qp, struct soft_swqe *wqe);
uint32_t soft_mw_reserve_key(struct soft_qp *qp, struct soft_mw *mw);
/* Revoke every window bound to @qp (QP destroy). */
void soft_mw_unbind_qp(struct soft_qp *qp);
int soft_shmem_register(struct soft_ctx *ctx, int fd, void *addr,
			uint64_t size);
void soft_shmem_unregister(struct soft_ctx *ctx, void *addr);

int soft_xlate_init(struct soft_ctx *ctx);
void soft_xlate_fini(struct soft_ctx *ctx);
void soft_xlate_insert(struct soft_ctx *ctx, uint64_t addr, uint64_t len);
void soft_xlate_remove(struct soft_ctx *ctx, uint64_t addr, uint64_t len);

/* Queue memory (soft_qmem.c).  soft_qmem_get fills @m's arrays for its
 * sizes (kept ones, not cleared, or new ones, zeroed, each WQE pointing
 * at its SGEs): 0 or -ENOMEM.  soft_qmem_put keeps them or frees them,
 * and clears @m.  soft_cqmem_get returns a ring of @size entries or NULL;
 * soft_cqmem_put keeps or frees one. */
void soft_qmem_init(struct soft_ctx *ctx);
void soft_qmem_fini(struct soft_ctx *ctx);
int soft_qmem_get(struct soft_ctx *ctx, struct soft_qmem *m);
void soft_qmem_put(struct soft_ctx *ctx, struct soft_qmem *m);
struct tf_wc *soft_cqmem_get(struct soft_ctx *ctx, uint32_t size);
void soft_cqmem_put(struct soft_ctx *ctx, struct tf_wc *ring, uint32_t size);

int soft_qp_create(struct tf_pd *pd, const struct tf_qp *attr,
		   struct tf_qp **qp_p);
int soft_qp_destroy(struct tf_qp *qp);
int soft_qp_set_error(struct tf_qp *qp);
int soft_post_send(struct tf_qp *qp, struct tf_send_wr *wr,
		   struct tf_send_wr **bad_wr_p);
int soft_post_recv(struct tf_qp *qp, struct tf_recv_wr *wr,
		   struct tf_recv_wr **bad_wr_p);
/* Start waiting WQEs of @qp (qp->lock held). */
void soft_engine_kick(struct soft_qp *qp);
/* Progress every QP the engine has pending work for (progress_lock). */
int soft_engine_progress(struct soft_ctx *ctx);
int soft_progress(struct tf_context *ctx);

/* shm transport hooks used by the revocation path (soft_mr.c): wait until
 * no peer is accessing TPT slot @slot through any of this context's QPs,
 * or through @qp alone when not NULL: a window bound to @qp (type 2), which
 * an access through any other QP is refused (soft_tpt_allows checks the
 * target QP) after publishing the slot, so only @qp's word can name it
 * while an access lands.  O(1) then, where a region's revoke looks at
 * every QP of the context. */
void soft_shm_quiesce(struct soft_ctx *ctx, uint32_t slot, struct soft_qp *qp);
/* shm: create/destroy a QP's segment (at QP create/destroy). */
int soft_shm_qp_init(struct soft_qp *qp);
void soft_shm_qp_destroy(struct soft_qp *qp);
/* shm: whether the process of peer address @p can be reached (same
 * host checked by the caller): a context already attached, or a pidfd
 * that can be opened (kept for the connect that follows). */
bool soft_shm_reachable(struct soft_ctx *ctx, const struct soft_peer_addr *p);

/* ---------------------------------------------------------------- tcp wire
 * requested by tcp transport: the frame codec of soft_tcp_frame.c, exposed so
 * that tests/soft_tcp_frames.c and a fuzzer can call the pure parser directly.
 *
 * Every frame starts with a 16-byte common header in network byte order:
 *   u8 version, u8 opcode, u16 flags, u16 hdr_size, u8 status, u8 reserved,
 *   u32 size (payload bytes after the header), u32 psn
 * followed by the opcode's fixed fields (hdr_size covers both) and then
 * @size bytes of payload.
 */
#define SOFT_TCP_VERSION    1
#define SOFT_TCP_HDR_COMMON 16
#define SOFT_TCP_HDR_MAX    48

enum soft_tcp_op {
	SOFT_TCP_OP_HELLO = 1, /* connector -> acceptor, first frame */
	SOFT_TCP_OP_SEND = 2,
	SOFT_TCP_OP_SEND_IMM = 3,
	SOFT_TCP_OP_SEND_INV = 4,
	SOFT_TCP_OP_WRITE = 5,
	SOFT_TCP_OP_WRITE_IMM = 6,
	SOFT_TCP_OP_READ_REQ = 7,
	SOFT_TCP_OP_FETCH_ADD = 8,
	SOFT_TCP_OP_CMP_SWAP = 9,
	SOFT_TCP_OP_ACK = 10, /* status 0: ACK, else NAK */
	SOFT_TCP_OP_READ_RESP = 11,
	SOFT_TCP_OP_ATOMIC_RESP = 12,
};

/* Wire status of an ACK frame (a NAK when nonzero). */
enum soft_tcp_status {
	SOFT_TCP_ST_OK = 0,
	SOFT_TCP_ST_RNR = 1,
	SOFT_TCP_ST_REM_ACCESS = 2,
	SOFT_TCP_ST_REM_INV_REQ = 3,
	SOFT_TCP_ST_REM_OP = 4,
};

/* A decoded header; fields the opcode does not carry are zero. */
struct soft_tcp_hdr {
	uint8_t version, opcode, status;
	uint16_t flags, hdr_size;
	uint32_t size, psn;
	uint32_t dst_qpn, src_qpn;     /* HELLO */
	uint64_t dst_nonce, src_nonce; /* HELLO */
	uint32_t imm, inv_rkey;	       /* SEND*, WRITE_IMM */
	uint64_t raddr;		       /* WRITE*, READ_REQ, atomics */
	uint32_t rkey;
	uint32_t length;	    /* READ_REQ */
	uint64_t compare_add, swap; /* atomics */
	uint64_t orig;		    /* ATOMIC_RESP */
};

/* Decode the header at the start of @buf (@len bytes available).  Pure: no
 * state, no allocation, no logging.  Returns the header size (> 0) when a
 * complete, valid header was decoded into *@h, 0 when more bytes are needed
 * (nothing in the bytes seen so far is invalid), -TF_EVERSION for an
 * unknown version, or -TF_EWIRE for anything else malformed: unknown
 * opcode or flags, hdr_size other than the opcode's, nonzero reserved
 * fields, size or length above @max_msg, a payload where the opcode has
 * none, a status on a request.  On error *@h is unspecified. */
int soft_tcp_parse_hdr(const void *buf, size_t len, uint64_t max_msg,
		       struct soft_tcp_hdr *h);
/* Encode *@h (version and hdr_size are filled in from the opcode) into
 * @buf of at least SOFT_TCP_HDR_MAX bytes; returns the header size, or
 * -EINVAL for an unknown opcode. */
int soft_tcp_encode_hdr(const struct soft_tcp_hdr *h, void *buf);
/* The connection rule: true when the QP (@my_nonce, @my_qpn) opens the TCP
 * connection to the peer (@peer_nonce, @peer_qpn), false when it accepts.
 * The smaller (nonce, qpn) pair connects. */
bool soft_tcp_is_connector(uint64_t my_nonce, uint32_t my_qpn,
			   uint64_t peer_nonce, uint32_t peer_qpn);
/* An fd that is readable while tcp progress has something to do (the
 * transport's epoll set: inbound data, connections, writable sockets with
 * queued frames), or -1 before the transport is up.  Offered so that the
 * engine can add it to the context's wait set, where the waker sees
 * inbound tcp traffic for a sleeping event loop without a progress thread
 * (tests/conf_cq_event). */
int soft_tcp_event_fd(struct soft_ctx *ctx);
/* Responses (READ data, NAKs) a tcp connection may hold copied in its send
 * queue, unsent, before its responder stops executing requests until the
 * peer reads; the check comes before each request, so one response more
 * may be queued past it. */
#define SOFT_TCP_TX_OWNED_MAX (16u << 20)
/* Bytes of responses queued, unsent, on @qp's tcp connection (what the
 * bound above limits), 0 if it has no connection.  Takes qp->lock.  For
 * tests (tests/soft_tcp_frames.c): the transport's own memory bound,
 * measured where it is kept. */
size_t soft_tcp_tx_queued(struct soft_qp *qp);
/* end of the block requested by tcp transport */

#endif /* TOLLFREE_SOFT_INT_H */
