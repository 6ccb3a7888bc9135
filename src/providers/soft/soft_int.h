/* SPDX-License-Identifier: MIT */
/*
 * soft_int.h - internals of the soft provider: a NIC in software.
 *
 * Split of responsibilities (files):
 *   soft.c        context, PD, mem_alloc, caps, progress entry, probe
 *   soft_mr.c     registration (mlock + /proc/self/pagemap), the TPT,
 *                 memory windows, the remote-access check
 *   soft_xlate.c  the translation-cache model
 *   soft_cq.c     completion queues (ring + eventfd)
 *   soft_qp.c     the engine: QP state machine, WR validation, send/recv
 *                 queues, completions, flush, BIND_MW / LOCAL_INV, the
 *                 execution of one-sided operations at a target
 *   soft_shm.c    transport "shm" (same host)
 *   soft_tcp.c    transport "tcp" (any host)
 *
 * The engine talks to a transport through struct soft_transport_ops; a
 * transport talks back to the engine only through the soft_engine_* and
 * soft_tpt_* functions declared at the end of this file.
 */
#ifndef TOLLFREE_SOFT_INT_H
#define TOLLFREE_SOFT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "provider.h"

/* Wire/blob format version of the soft provider's address blob. */
#define SOFT_ADDR_VERSION 1

struct soft_ctx;
struct soft_qp;
struct soft_transport_ops;

/* ---------------------------------------------------------------- TPT
 * The translation and protection table.  It lives in a memfd mapping that
 * same-host peers map read-only: the shm transport checks remote accesses
 * at the initiator against it, so the target CPU does no work for them.
 * A key is 32 random bits from getrandom; its slot is key & tpt_mask, and a
 * new key is drawn until its slot is free.  Entries are updated under a
 * seqlock (seq odd while writing) so that lock-free readers in another
 * process never see a torn entry.
 */
enum soft_tpt_type {
	SOFT_TPT_FREE = 0,
	SOFT_TPT_MR = 1,
	SOFT_TPT_MW = 2,
};

struct soft_tpt_entry {
	_Atomic uint32_t seq;  /* seqlock */
	_Atomic uint32_t key;  /* 0: invalid (free or revoked) */
	uint32_t type;         /* enum soft_tpt_type */
	uint32_t pd_id;
	uint32_t access;       /* TF_ACCESS_* */
	uint32_t qpn;          /* MW: QP the window is bound to */
	uint64_t addr;
	uint64_t length;
	/* Where the memory can be mapped by a peer: index into the
	 * context's shared-memory table (struct soft_shmem_hdr), or -1 when
	 * the memory is private (then process_vm_readv/writev is used). */
	int32_t shmem_idx;
	uint32_t pad;
	uint64_t shmem_off;    /* offset of addr inside that mapping */
};

/* Header of the TPT segment. */
struct soft_tpt_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;       /* power of two */
	uint64_t ctx_nonce;    /* random id of the owning context */
	int32_t pid;
	uint32_t pad;
	/* Table of memory allocated by tf_mem_alloc that peers may map:
	 * memfd numbers in the owner's fd table, opened by peers through
	 * /proc/<pid>/fd/<fd>. */
	struct {
		int32_t fd;    /* -1: unused */
		uint32_t pad;
		uint64_t size;
		uint64_t addr; /* owner's address */
	} shmem[256];
	/* A process-shared robust mutex that serializes atomics executed
	 * by initiators on this context's memory (RDMA atomics are atomic
	 * with respect to each other, as IBV_ATOMIC_HCA). */
	pthread_mutex_t atomic_lock;
	struct soft_tpt_entry slots[];
};

/* ---------------------------------------------------------------- objects */

struct soft_pd {
	struct tf_pd base;
	uint32_t pd_id; /* random, nonzero */
};

struct soft_mr {
	struct tf_mr base;
	struct soft_tpt_entry *slot; /* the MR's entry (lkey == rkey) */
	uint64_t *pfns;              /* physical frame per page (0 if the
				      * kernel hides them from us) */
	size_t npages;
	uintptr_t pin_start;         /* page-aligned pinned range */
	size_t pin_len;
	atomic_int mw_bound;         /* windows currently bound over it */
};

struct soft_mw {
	struct tf_mw base;
	struct soft_tpt_entry *slot; /* current slot, NULL if unbound */
	struct soft_mr *mr;          /* region it is bound over */
	struct soft_qp *qp;          /* QP it is bound to */
};

/* A completion queue: a ring the engine writes under the CQ lock and the
 * user polls; an eventfd signalled when armed. */
struct soft_cq {
	struct tf_cq base;
	pthread_mutex_t lock;
	struct tf_wc *ring;
	uint32_t size, head, tail; /* head: next to poll; tail: next free */
	bool overflow;
	int efd;
	bool armed;
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
	struct tf_sge *sge;     /* points into the QP's SGE array */
	uint8_t *inline_data;   /* TF_SEND_INLINE: copied at post */
	uint32_t psn;           /* sequence number on the wire */
	uint64_t t_post_ns;     /* for timeouts */
	int state;              /* engine/transport private */
	uint32_t retries;
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
	uint32_t qpn;
	uint32_t pd_id;
	uint32_t access;          /* the peer QP's remote access flags */
	uint64_t ctx_nonce;
	uint8_t host_id[16];      /* boot id: same host when equal */
	/* shm part */
	int32_t pid;
	int32_t tpt_fd;           /* fds in the peer's table */
	int32_t qp_fd;
	/* tcp part */
	uint8_t family;           /* 0: none, 4 or 6 */
	uint8_t ip[16];
	uint16_t port;
};

struct soft_qp {
	struct tf_qp base;
	struct soft_ctx *ctx;
	pthread_mutex_t lock;     /* queues; progress thread vs. the user */
	/* send queue: ring of max_send_wr WQEs, in order */
	struct soft_swqe *sq;
	uint32_t sq_size, sq_head, sq_tail; /* head: oldest not completed */
	/* receive queue */
	struct soft_rwqe *rq;
	uint32_t rq_size, rq_head, rq_tail;
	struct tf_sge *sq_sge, *rq_sge;  /* max_sge per WQE */
	uint8_t *sq_inline;              /* max_inline_data per WQE */
	struct soft_peer_addr peer;
	bool connected;
	const struct soft_transport_ops *tp; /* chosen at connect */
	void *tp_priv;                    /* transport state */
};

/* The translation-cache model (see soft_xlate.c). */
struct soft_xlate {
	pthread_mutex_t lock;
	uint32_t capacity;
	uint32_t miss_ns;
	void *impl;
};

struct soft_ctx {
	struct tf_context base;
	pthread_mutex_t lock;       /* TPT allocation, QP table, lists */
	uint64_t nonce;
	uint8_t host_id[16];
	/* TPT segment */
	int tpt_fd;
	size_t tpt_map_size;
	struct soft_tpt_hdr *tpt;
	uint32_t tpt_mask;
	atomic_uint n_keys;         /* live TPT entries (bounded) */
	/* QPs by number, for inbound dispatch */
	struct soft_qp **qp_tab;
	uint32_t qp_tab_size;
	struct soft_xlate xlate;
	/* transports: created lazily */
	void *shm_priv;
	void *tcp_priv;
	bool want_shm, want_tcp;    /* from TOLLFREE_SOFT_TRANSPORT */
	pthread_t progress_thread;
	bool progress_running;
	atomic_bool progress_stop;
};

/* ---------------------------------------------------------------- transports */

struct soft_transport_ops {
	const char *name;
	/* Context-level setup on first use, and teardown at close. */
	int (*ctx_init)(struct soft_ctx *ctx);
	void (*ctx_fini)(struct soft_ctx *ctx);
	/* Append this transport's part of the QP's address (fills fields of
	 * @me: shm: pid/tpt_fd/qp_fd; tcp: family/ip/port). */
	int (*qp_addr)(struct soft_qp *qp, struct soft_peer_addr *me);
	/* Connect to qp->peer; may complete asynchronously (work posted
	 * before the connection is up is queued). */
	int (*connect)(struct soft_qp *qp);
	/* Start a send WQE (already validated; BIND_MW and LOCAL_INV are
	 * handled by the engine and never reach the transport). */
	int (*submit)(struct soft_qp *qp, struct soft_swqe *wqe);
	/* Inbound messages, one-sided operations to serve, timeouts.
	 * Returns the number of events handled. */
	int (*progress)(struct soft_ctx *ctx);
	/* The QP is being destroyed or went to error: release state, tell
	 * the peer if possible. */
	void (*qp_fini)(struct soft_qp *qp);
};

extern const struct soft_transport_ops soft_shm_transport;
extern const struct soft_transport_ops soft_tcp_transport;

/* ---------------------------------------------------------------- engine API
 * Called by transports.  Unless stated, the caller holds qp->lock. */

/* Complete the oldest outstanding send WQE @wqe with @status (generating a
 * CQE if signalled or failed).  A failure moves the QP to error and
 * flushes the rest. */
void soft_engine_send_done(struct soft_qp *qp, struct soft_swqe *wqe,
			   enum tf_wc_status status);

/* An inbound SEND / SEND_WITH_IMM / SEND_WITH_INV / WRITE_WITH_IMM: take
 * the next receive WQE and scatter @len bytes from @data into it (@data may
 * be NULL with @len 0).  @inv_rkey is invalidated first for
 * SEND_WITH_INV.  Returns TF_WC_SUCCESS, or the status to report to the
 * sender: TF_WC_RNR_RETRY_EXC_ERR when no receive is posted (the caller
 * decides whether to retry), TF_WC_REM_INV_REQ_ERR when the message does
 * not fit (the receive then completes with LOC_LEN_ERR and the QP goes to
 * error), TF_WC_REM_OP_ERR when SEND_WITH_INV names a bad key. */
enum tf_wc_status soft_engine_recv(struct soft_qp *qp, enum tf_wr_opcode op,
				   const void *data, uint32_t len,
				   uint32_t imm, uint32_t inv_rkey);

/* Scatter variant used by transports that copy from elsewhere: returns the
 * receive WQE that the next message would consume (NULL if none) without
 * consuming it; soft_engine_recv_commit() consumes it. */
struct soft_rwqe *soft_engine_recv_peek(struct soft_qp *qp);

/* Move the QP to the error state and flush both queues. */
void soft_engine_qp_error(struct soft_qp *qp, enum tf_wc_status why);

/* Check a remote access to THIS context's memory that arrived on @qp
 * (tcp: at the target).  On success *@local_p is the address in this
 * process.  Returns TF_WC_SUCCESS or TF_WC_REM_ACCESS_ERR. */
enum tf_wc_status soft_tpt_check_local(struct soft_ctx *ctx,
				       struct soft_qp *qp, uint32_t rkey,
				       uint64_t addr, uint64_t len,
				       unsigned access, void **local_p);

/* Resolve a local SGE list (lkeys) of the local context. */
enum tf_wc_status soft_sge_check(struct soft_ctx *ctx, const struct tf_sge *sge,
				 uint32_t n, unsigned access);

/* Count translations of [addr, addr+len) in the model. */
void soft_xlate_touch(struct soft_ctx *ctx, uint64_t addr, uint64_t len);

/* QP by number (NULL if none). Caller holds ctx->lock or tolerates races
 * through the QP's own checks. */
struct soft_qp *soft_ctx_qp(struct soft_ctx *ctx, uint32_t qpn);

#endif /* TOLLFREE_SOFT_INT_H */
