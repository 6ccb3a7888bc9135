/* SPDX-License-Identifier: MIT */
/*
 * soft_shm_int.h - internals of transport "shm" (RC between processes of
 * one host), shared by its files:
 *   soft_shm.c      the ops table, submit (messages vs one-sided) and the
 *                   progress loop over the context's QPs
 *   soft_shm_seg.c  segments: the context's transport state, each QP's
 *                   segment, peer contexts (their TPT and tf_mem_alloc
 *                   memory mapped here), connect and teardown, waking a
 *                   peer asleep on a CQ fd
 *   soft_shm_rma.c  one-sided operations (WRITE, READ, atomics)
 *   soft_shm_msg.c  messages: the SEND ring, acknowledgements and NAKs,
 *                   the receiver's side, per-QP progress
 *
 * Each QP owns a segment (a memfd, struct shm_seg) that its peer maps
 * read-write (the fd duplicated with pidfd_getfd, or opened through
 * /proc/<pid>/fd/<fd> where that is refused).  It holds:
 *  - an inbound ring: the peer (sender) appends messages (SEND,
 *    SEND_WITH_IMM, SEND_WITH_INV, the immediate of RDMA_WRITE_WITH_IMM);
 *    the owner (receiver) consumes them in progress and matches receive
 *    WQEs.  Payloads up to TOLLFREE_SOFT_SHM_EAGER are copied into the
 *    ring; larger ones carry the sender's buffer list instead and the
 *    receiver pulls the data with process_vm_readv straight into its
 *    receive buffers (one copy, no fragmentation);
 *  - acknowledgements written by the owner: ack_seq (messages accepted)
 *    and a NAK (sequence, status, generation) for RNR and errors.  The
 *    sender completes a SEND when it is acknowledged, so completion means
 *    "placed in a receive buffer", as in RC;
 *  - the Dekker word (active) of the peer's one-sided accesses, and
 *    peer_err, by which an initiator that failed the TPT check moves the
 *    responder QP to error (class C, as rxe's responder does).
 *
 * One peer: a QP connects to exactly one peer QP, in one peer context.
 * The owner records in its segment the peer it connected to (conn_*), the
 * first initiator to connect claims the segment (claim_*), and a connect
 * finding another QP in either place fails with -EISCONN.  The claim is a
 * Dekker pair with the owner's record (each writes its word, then reads
 * the other's), so two racing connects cannot both miss each other.
 * Every one-sided access also checks conn_* (shm_peer_is_us): a window
 * serves only the target QP's connected peer, whatever the key.  These
 * are checks by honest peers: a segment is writable by whoever can open
 * the owner's fds, which is the same permission as process_vm_writev.
 *
 * One-sided operations (WRITE, READ, atomics) are executed by the
 * initiator: it checks the target context's TPT, mapped read-only, and
 * copies with plain loads and stores when the target memory comes from
 * tf_mem_alloc (a memfd the initiator maps once and caches), or with
 * process_vm_readv/writev otherwise.  The target CPU does nothing.  To
 * keep RC ordering, a one-sided operation starts only when every earlier
 * message of the QP has been acknowledged.
 *
 * Peer contexts are attached once (pidfd, TPT, tf_mem_alloc memory) and
 * shared by every QP to them; after the last QP goes a few are kept
 * attached (TOLLFREE_SOFT_SHM_PEER_CACHE, _BYTES), so that a new
 * connection to a known peer maps only the peer QP's segment.  A kept
 * peer is found by its context nonce, which a new process (or context)
 * never has: a dead peer or a reused pid is never attached to a new QP.
 * Dead and closed kept peers are let go from progress.
 *
 * Peer death: a pidfd per peer context is polled every few milliseconds
 * from progress; a dead peer's QPs go to error (outstanding work completes
 * with TF_WC_RETRY_EXC_ERR, the rest is flushed).  The QP's transport
 * timeout is not used: a live peer acknowledges when it next makes
 * progress (or its progress thread does), so only death fails work.
 *
 * Progress visits only the QPs with something to see: a peer sets its
 * target QP's bit in the context's ready map (soft_tpt_ctl.ready) before
 * it rings the doorbell, and a QP with messages in flight is kept in a
 * private map (shm_ctx.pend); every QP is looked at only for the liveness
 * check.  Idle connections cost nothing (shm_progress has the argument
 * that no ring is lost).
 *
 * A process asleep on a CQ fd (no progress thread) is woken by its peers:
 * while one of its CQs is armed, a peer that rings its doorbell or
 * acknowledges its messages also writes its wake eventfd, duplicated with
 * pidfd_getfd (the same permission as process_vm_*: same user, or
 * CAP_SYS_PTRACE, and a Yama ptrace_scope that allows it).
 *
 * Counters: the target of a one-sided operation does no work, so its
 * bytes_in does not see WRITEs; remote_access_denied is counted by the
 * target when it learns of the failed check (peer_err).
 */
#ifndef TOLLFREE_SOFT_SHM_INT_H
#define TOLLFREE_SOFT_SHM_INT_H

#include <stdalign.h>

#include "soft_int.h"

#define SHM_SEG_MAGIC	 0x5345474d48535446ull /* "FTSHMGES" */
#define SHM_SEG_VERSION	 3
#define SHM_HDR_SIZE	 512u
#define SHM_REC_ALIGN	 64u
#define SHM_OP_PAD	 0xffu
#define SHM_MAX_PULL_SGE 64u
/* How long a sender waits before it lets an RNR'd message be retried. */
#define SHM_RNR_DELAY_NS 10000ull
/* How often progress checks that peers are alive. */
#define SHM_LIVENESS_NS 5000000ull
/* How long a sender that polls waits for the acknowledgement of a message
 * whose doorbell woke nobody before it wakes the peer's waker (see
 * "Wake-ups owed" below). */
#define SHM_OWED_NS 20000ull

enum { SEG_LIVE = 0, SEG_ERR = 1, SEG_DEAD = 2 };
/* shm_seg.claim_state: free, being written (by the claimer, for three
 * stores), set. */
enum { SHM_CLAIM_FREE = 0, SHM_CLAIM_BUSY = 1, SHM_CLAIM_SET = 2 };

#define READ_ONCE SOFT_READ_ONCE

struct shm_seg {
	/* Constant after creation. */
	uint64_t magic;
	uint32_t version;
	uint32_t qpn;
	uint64_t ctx_nonce;
	uint32_t ring_size; /* power of two */
	uint32_t hdr_size;
	int32_t owner_pid;
	/* Written by the owner. */
	alignas(64) _Atomic uint32_t state;
	/* The owner QP's receive CQ, for a direct wake-up (soft_tpt_ctl
	 * .cq_wake): its slot there (UINT32_MAX: none), the generation the
	 * slot holds for it, and the number of its eventfd in the owner's
	 * process.  Published with the QP's address. */
	_Atomic uint32_t rcq_slot;
	_Atomic uint32_t rcq_gen;
	_Atomic int32_t rcq_efd;
	/* The same for its send CQ, where the completions that the peer's
	 * acknowledgements produce land; and whether work waits in its
	 * send queue for them (soft_engine_kick). */
	_Atomic uint32_t scq_slot;
	_Atomic uint32_t scq_gen;
	_Atomic int32_t scq_efd;
	_Atomic uint32_t tx_wait;
	/* Written by the owner at connect: the one peer QP it connected to
	 * (conn_set 1 once conn_nonce and conn_qpn are valid).  Initiators
	 * read it on every one-sided access: only that peer may access. */
	_Atomic uint32_t conn_set;
	_Atomic uint32_t conn_qpn;
	_Atomic uint64_t conn_nonce;
	/* Written by the owner (receiver side): acknowledgements. */
	alignas(64) _Atomic uint64_t ack_seq;
	_Atomic uint64_t nak_seq;
	_Atomic uint32_t nak_status;
	_Atomic uint32_t nak_gen;
	/* Written by the peer (initiator side). */
	alignas(64) _Atomic uint32_t active; /* TPT slot + 1 being accessed */
	_Atomic int32_t peer_pid;
	_Atomic uint32_t peer_err; /* responder must go to error */
	_Atomic uint32_t rnr_go;   /* NAK generation the sender lets retry */
	/* The initiator QP attached to this segment, claimed by the first to
	 * connect (SHM_CLAIM_*) and released when it is destroyed: a second
	 * one is refused. */
	_Atomic uint32_t claim_state;
	_Atomic uint32_t claim_qpn;
	_Atomic uint64_t claim_nonce;
	/* Written by the peer: ring producer position (bytes). */
	alignas(64) _Atomic uint64_t tail;
	/* Written by the owner: ring consumer position (bytes). */
	alignas(64) _Atomic uint64_t head;
};

_Static_assert(sizeof(struct shm_seg) <= SHM_HDR_SIZE, "segment header");

/* A ring record; the payload (eager) or the sender's buffer list (pull:
 * nsge x {u64 addr, u64 len}) follows. */
struct shm_msg {
	uint32_t size; /* whole record, multiple of SHM_REC_ALIGN */
	uint8_t op;    /* enum tf_wr_opcode or SHM_OP_PAD */
	uint8_t pull;
	uint16_t nsge;
	uint32_t len;
	uint32_t imm;
	uint32_t inv_rkey;
	uint32_t pad;
	uint64_t seq;
};

struct shm_iov {
	uint64_t addr, len;
};

/* A peer context: its TPT and the tf_mem_alloc regions we mapped. */
/* map[].gen while a mapping is being replaced (never a region's gen in
 * practice: generations count up from 1 per tf_mem_alloc slot reuse). */
#define SHM_MAP_UPDATING UINT32_MAX

struct shm_peer {
	struct shm_peer *next;
	struct shm_ctx *sc;
	uint64_t nonce;
	pid_t pid;
	int pidfd;
	/* Kept attached with no QP (refs 0): when it was last used, and the
	 * bytes it has mapped (both ctx->lock). */
	uint64_t last_use;
	size_t bytes;
	_Atomic int wake_fd; /* the peer's wake eventfd: -1 not opened yet,
			      * -2 cannot be opened */
	/* Wake-ups owed (soft_shm_owe): how often we woke the peer (its
	 * waker, or a thread asleep on one of its CQs), and that count + 1
	 * when a doorbell of ours last woke nobody (0: never).  Owed while
	 * debt == wakes + 1: no wake-up since. */
	_Atomic uint64_t wakes, debt;
	int refs;
	_Atomic bool dead;
	uint64_t checked_pass;	  /* soft_shm_peer_dead_pass; progress_lock */
	struct soft_tpt_ctl *ctl; /* read-write page */
	const struct soft_tpt_hdr *tpt; /* read-only */
	size_t tpt_size;
	uint32_t mask;
	struct {
		_Atomic uint32_t gen; /* 0: not mapped; see peer_map */
		uint8_t *base;
		size_t size;
	} map[SOFT_MAX_SHMEM];
	/* Guards creating mappings.  Not ctx->lock: a revoker holds that
	 * while it waits for accesses, and an access may be mapping. */
	pthread_mutex_t map_lock;
	/* The peer's QP segments kept mapped for its next QPs (it reuses
	 * them, see shm_ctx.spare), found by the peer's fd number and
	 * checked against the header's QP number at each connect; busy
	 * while a QP of ours uses one.  ctx->lock. */
	struct shm_seg_map {
		struct shm_seg *seg;
		size_t size;
		uint64_t last_use;
		int32_t fd;
		bool busy;
	} * seg_maps;
	uint32_t n_seg_maps;
	struct shm_old_map {
		struct shm_old_map *next;
		void *base;
		size_t size;
	} * old_maps;
};

struct shm_ctx {
	struct soft_ctx *ctx;	  /* its context */
	pthread_mutex_t seg_lock; /* segs[], spare[] (leaf lock) */
	struct soft_qp **segs;
	uint32_t n_segs;
	/* Segments of destroyed QPs kept for new ones, oldest first (at
	 * most seg_cache, TOLLFREE_SOFT_SHM_SEG_CACHE): their fd stays
	 * open and mapped, so a peer that keeps it mapped (shm_peer.seg_maps)
	 * needs no system call to attach the next QP that takes it.  One
	 * is taken only once its last initiator has given up its claim.
	 * Kept only while the peer context it served is attached (or kept):
	 * when that one goes, so do its segments. */
	struct shm_spare {
		struct shm_seg *seg;
		size_t size;
		uint64_t peer_nonce; /* the peer context it served */
		int fd;
	} * spare;
	uint32_t n_spare, seg_cache;
	/* Peer contexts attached, with QPs (refs > 0) or kept for the next
	 * connection to them (refs 0, at most TOLLFREE_SOFT_SHM_PEER_CACHE
	 * and _BYTES of them, least recently used evicted).  ctx->lock. */
	struct shm_peer *peers;
	_Atomic uint32_t n_idle; /* also read by progress without the lock */
	size_t idle_bytes;
	uint64_t use_clock;
	/* A pidfd soft_shm_reachable opened for the connect that follows
	 * (ctx->lock). */
	pid_t stash_pid;
	int stash_fd;
	/* pidfd_getfd refused (old kernel, Yama): open /proc/<pid>/fd/<n>. */
	_Atomic bool no_getfd;
	_Atomic uint64_t next_check_ns;
	uint64_t check_pass;	  /* liveness passes so far; progress_lock */
	_Atomic uint64_t db_seen; /* doorbell value progress acted on */
	/* Which QPs (bit qpn % SOFT_MAX_QP) have work of their own to watch
	 * for (messages in flight, a stalled RNR, a trylock that failed):
	 * progress visits them, and the QPs of tpt_ctl->ready, and no
	 * other (but for the liveness check).  Set by a post (under the
	 * QP's lock) and by progress; taken by progress (exchange).
	 * any_pending has bit w set when pend[w] may have bits: nonzero,
	 * some QP waits for acks or an RNR timer, so keep polling. */
	_Atomic uint64_t any_pending;
	_Atomic uint64_t pend[SOFT_MAX_QP / 64];
	/* Some peer may be owed a wake-up (set by soft_shm_owe, taken by
	 * soft_shm_pay_owed). */
	_Atomic bool owed;
};

/* Per connected QP. */
struct shm_qp {
	struct shm_peer *peer;
	struct shm_seg *rseg; /* the peer QP's segment */
	size_t rseg_size;
	struct shm_seg_map *rmap; /* its entry in peer->seg_maps, or NULL */
	uint32_t rqpn;		  /* the peer QP's number */
	uint8_t *rring;
	uint32_t rring_mask;
	/* sender side */
	uint64_t tx_tail, tx_seq, acked;
	uint64_t peer_down_ns; /* when the responder was first seen down */
	uint32_t n_inflight;
	uint32_t nak_gen_seen;
	uint32_t rnr_go_pending; /* NAK generation to release, 0 none */
	uint64_t rnr_deadline;
	/* Our message whose doorbell woke nobody, and when (0: none): if it
	 * is still unacknowledged SHM_OWED_NS later and the peer was not
	 * woken since, progress wakes the peer's waker. */
	uint64_t owed_seq, owed_ns;
	/* receiver side */
	uint64_t rx_head, rx_seq;
	uint32_t my_nak_gen;
	bool rnr_stalled;
	/* The peer QP's receive and send CQs (its segment's rcq_* and
	 * scq_*, read at connect): their cq_wake slot and generation, and
	 * their eventfd (-1: not duplicated yet; -2: none, or cannot be). */
	struct shm_peer_cq {
		uint32_t slot, gen;
		int32_t efd_num;
		int fd;
	} rcq, scq;
};

/* What soft_shm_wake_cq found. */
enum shm_cq_wake {
	SHM_CQ_WOKEN,	  /* its sleeper woken, by us or by another */
	SHM_CQ_NOT_ARMED, /* nobody asleep on it */
	SHM_CQ_UNKNOWN,	  /* no direct wake-up for it: use the waker */
};

static inline struct shm_seg *own_seg(struct soft_qp *qp)
{
	return qp->shm_seg;
}

/*
 * Whether the target QP of @rs has this initiator QP @qp as its one peer
 * (RC: a responder serves only the requester it is connected to).  A
 * window is bound to a connected QP, so for one (@window) the target must
 * have connected, and to us.  A region is usable before the target has
 * connected (the peer may post as soon as its own connect returns); only
 * the claimer of the segment (soft_shm_connect) gets that far then.
 */
static inline bool shm_peer_is_us(const struct shm_seg *rs,
				  const struct soft_qp *qp, bool window)
{
	if (!atomic_load_explicit(&rs->conn_set, memory_order_acquire))
		return !window;
	return atomic_load_explicit(&rs->conn_qpn, memory_order_relaxed) ==
		       qp->base.qpn &&
	       atomic_load_explicit(&rs->conn_nonce, memory_order_relaxed) ==
		       qp->ctx->nonce;
}

/* ---------------------------------------------------------------- seg.c */

int soft_shm_ctx_init(struct soft_ctx *ctx);
void soft_shm_ctx_fini(struct soft_ctx *ctx);
int soft_shm_qp_addr(struct soft_qp *qp, struct soft_peer_addr *me);
int soft_shm_connect(struct soft_qp *qp);
void soft_shm_qp_fini(struct soft_qp *qp);
bool soft_shm_peer_dead(struct shm_peer *p);
/* The same, once per liveness pass @pass (progress_lock held): a peer's
 * pidfd is polled once per pass however many of its QPs the pass visits,
 * so a peer holding hundreds of QPs costs one system call per pass, not
 * one per QP. */
bool soft_shm_peer_dead_pass(struct shm_peer *p, uint64_t pass);
/* Let go of kept peer contexts that died or closed (progress, every few
 * ms while some are kept; a no-op if ctx->lock is busy). */
void soft_shm_sweep_idle(struct soft_ctx *ctx);

/*
 * The address in this process of tf_mem_alloc region @idx of the peer, at
 * generation @gen, mapping it on first use (the slow path of
 * shm_map_cached: it takes map_lock).
 * NULL if it cannot be mapped (then process_vm_* is used).  Replaced
 * mappings are kept until the peer is released, because another thread
 * may still be copying through them.
 */
uint8_t *soft_shm_peer_map(struct shm_peer *p, int32_t idx, uint32_t gen,
			   uint64_t *size_p);
/*
 * The address in this process of [@addr, +@len) of the peer's memory that
 * TPT snapshot @snap describes, if it lies in a tf_mem_alloc region the
 * peer context already has mapped here at the snapshot's generation; else
 * NULL (then soft_shm_peer_map maps it, or process_vm_* copies).  Lock-free:
 * a replacement first invalidates the slot's gen (SHM_MAP_UPDATING), so
 * base and size are a matching pair when gen reads the same before and
 * after.  The snapshot is the peer's word: the range must also lie inside
 * what we really mapped, or we would touch our own memory.
 */
static inline uint8_t *shm_map_cached(struct shm_peer *p,
				      const struct soft_tpt_entry *snap,
				      uint64_t addr, uint64_t len)
{
	uint32_t idx = (uint32_t)snap->shmem_idx, gen = snap->shmem_gen;
	uint64_t size, off = addr - snap->addr, soff = snap->shmem_off;
	uint8_t *base;

	if (idx >= SOFT_MAX_SHMEM ||
	    atomic_load_explicit(&p->map[idx].gen, memory_order_acquire) != gen)
		return NULL;
	base = p->map[idx].base;
	size = p->map[idx].size;
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&p->map[idx].gen, memory_order_relaxed) !=
		    gen ||
	    !base || soff > size || off > size - soff ||
	    len > size - soff - off)
		return NULL;
	return base + soff + off;
}

/* The peer sleeps on a CQ fd: write its wake eventfd (opened on first
 * use).  A system call, but only while the peer has armed a CQ.  Whether
 * it was written (false: the peer's eventfd cannot be had). */
bool soft_shm_wake_peer(struct shm_peer *p);

/*
 * Wake-ups owed.  A doorbell for a QP whose receive CQ is not armed, in a
 * peer context where some other CQ is, wakes nobody: the peer's thread is
 * busy (it polls, or arms that CQ, and either looks at the doorbell), or
 * asleep on another CQ.  Waking the peer's waker for it, as the NIC that
 * acknowledges without the CPU, cost a sleeping server a second thread's
 * wake-up for most messages.  Only a sender that waits for the
 * acknowledgement needs it, so it is owed (soft_shm_owe) and paid where
 * the sender waits: when it arms a CQ to sleep (soft_shm_pay_owed), or
 * when it polls and the message is still unacknowledged SHM_OWED_NS later
 * (soft_shm_owed_check).  Any later wake-up of that peer by us pays it
 * too: the woken thread's poll, or its next arm, makes progress over the
 * whole context, our message included.
 */
/* @s's doorbell (under its QP's lock) woke nobody. */
void soft_shm_owe(struct shm_qp *s);
/* Progress of @s's sender side: settle or pay what @s owes.  qp->lock. */
void soft_shm_owed_check(struct shm_qp *s);
/* soft_shm_pay_owed: soft_int.h. */
/* Wake the thread asleep on @cq, a CQ of @s's peer QP, directly if that
 * CQ is armed.  @qp's lock. */
enum shm_cq_wake soft_shm_wake_cq(struct soft_qp *qp, struct shm_qp *s,
				  struct shm_peer_cq *cq);

_Static_assert(SOFT_MAX_QP % 64 == 0 && SOFT_MAX_QP / 64 <= 64,
	       "QP bitmaps and their summary word");

/* Bit of QP number @qpn in a map of SOFT_MAX_QP bits. */
static inline uint32_t shm_bit_word(uint32_t qpn)
{
	return (qpn % SOFT_MAX_QP) / 64;
}

static inline uint64_t shm_bit_mask(uint32_t qpn)
{
	return 1ull << (qpn % 64);
}

/* Tell the peer context that its QP (our QP's peer) has something to see:
 * its ready bit first, then the doorbell (the order the owner's progress
 * relies on, see shm_progress).  The doorbell update is a full barrier,
 * so the armed flag read after it pairs with the peer's "arm, then poll
 * once more".  A ring that wakes nobody is owed (above). */
static inline void soft_shm_ring_doorbell(struct soft_qp *qp, struct shm_qp *s)
{
	atomic_fetch_or_explicit(&s->peer->ctl->ready[shm_bit_word(s->rqpn)],
				 shm_bit_mask(s->rqpn), memory_order_seq_cst);
	atomic_fetch_add_explicit(&s->peer->ctl->doorbell, 1,
				  memory_order_seq_cst);
	if (atomic_load_explicit(&s->peer->ctl->armed, memory_order_relaxed)) {
		enum shm_cq_wake w = soft_shm_wake_cq(qp, s, &s->rcq);

		if (w == SHM_CQ_UNKNOWN)
			soft_shm_wake_peer(s->peer);
		else if (w == SHM_CQ_NOT_ARMED)
			soft_shm_owe(s);
	}
}

/* Our QP @qpn has work to watch for (a message in flight): progress is
 * to visit it until it has none.  The bit before the flag (release):
 * progress takes the bits after it read the flag (see shm_progress). */
static inline void shm_mark_pending(struct shm_ctx *sc, uint32_t qpn)
{
	uint32_t w = shm_bit_word(qpn);

	atomic_fetch_or_explicit(&sc->pend[w], shm_bit_mask(qpn),
				 memory_order_relaxed);
	atomic_fetch_or_explicit(&sc->any_pending, 1ull << w,
				 memory_order_release);
}

/* ---------------------------------------------------------------- rma.c */

/* Execute one-sided @wqe (WRITE, WRITE_WITH_IMM's write, READ, atomics)
 * against the peer's memory.  qp->lock held. */
enum tf_wc_status soft_shm_one_sided(struct soft_qp *qp, struct shm_qp *s,
				     struct soft_swqe *wqe);

/* ---------------------------------------------------------------- msg.c */

/* Append a message for @wqe to the peer's ring; -EAGAIN when full.
 * qp->lock held. */
int soft_shm_ring_send(struct soft_qp *qp, struct shm_qp *s,
		       struct soft_swqe *wqe);
/* Inbound work of one connected QP in RTS: the peer's failed access
 * check, its death (when @check_pass, the liveness pass's number, is not
 * 0), our acks and NAKs, our inbound ring.  Returns the number of events.
 * qp->lock held. */
int soft_shm_qp_progress(struct soft_qp *qp, struct shm_qp *s,
			 uint64_t check_pass);

#endif /* TOLLFREE_SOFT_SHM_INT_H */
