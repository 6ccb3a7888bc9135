/* SPDX-License-Identifier: MIT */
/*
 * verbs_int.h - internals of the verbs provider (libibverbs).
 *
 * Split of responsibilities (files):
 *   verbs.c     probe, device list, context (port/GID/MTU selection),
 *               capabilities, mem_alloc, PD, MR, MW
 *   verbs_qp.c  CQs, RC QPs, WR translation, posting, completion
 *               translation
 *   verbs_blob.c the QP address blob (no libibverbs: unit tested and
 *               fuzzed on any host)
 *   verbs_cm.c  connecting QPs through rdma_cm (librdmacm): iWARP devices,
 *               or any device with TOLLFREE_VERBS_CM=rdmacm
 *
 * Work-request bookkeeping.  The core's WC carries information verbs does
 * not report for every completion: the opcode of a failed WR (undefined in
 * an ibv_wc with an error status), the payload length of a send-queue WR
 * (for bytes_out) and which BIND_MW must give back its key when it fails.
 * Each QP therefore keeps a ring of posted send WRs and a ring of posted
 * receive WRs.  The verbs wr_id is not the user's: it encodes the ring
 * sequence number, a per-QP generation and the queue (see VERBS_WRID_*), so
 * a completion finds its ring entry without a search and a stale completion
 * of a destroyed QP whose number was reused is recognised and dropped.
 */
#ifndef TOLLFREE_VERBS_INT_H
#define TOLLFREE_VERBS_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "provider.h"
#include "verbs_blob.h"

#define VERBS_SUBSYS "verbs"

/* The vendor id rdma_rxe reports (RXE_VENDOR_ID). */
#define VERBS_RXE_VENDOR_ID 0xffffffu
/* The vendor id siw reports (SIW_VENDOR_ID, "bmt"). */
#define VERBS_SIW_VENDOR_ID 0x626d74u
/* CQEs of the siw plug CQ: 32 B each, so its ring spans mmap pages 0 to
 * 256, past page 144 (siw_plug_offset in verbs.c). */
#define VERBS_SIW_PLUG_CQE 32768

/* Layout of the verbs wr_id: [63] receive queue, [62:48] generation of the
 * QP, [47:0] low bits of the ring sequence number. */
#define VERBS_WRID_RECV	     (1ull << 63)
#define VERBS_WRID_GEN_SHIFT 48
#define VERBS_WRID_GEN_MASK  0x7fffu
#define VERBS_WRID_SEQ_MASK  ((1ull << 48) - 1)
/* The generation of the provider's own WRs (verbs_iw.c), which no QP
 * has: the poller drops their completions. */
#define VERBS_WRID_GEN_PROV VERBS_WRID_GEN_MASK

/* WRs translated per ibv_post_send/ibv_post_recv call; bounds the stack
 * used by the post path, which never allocates. */
#define VERBS_POST_BATCH 16
/* Completions fetched per ibv_poll_cq call. */
#define VERBS_POLL_BATCH 32

/* The provider's objects are tf_verbs_*, never verbs_*: rdma-core's
 * provider header (infiniband/driver.h) names its own struct verbs_qp,
 * verbs_cq, verbs_mr, verbs_context, and a reader of both must not take
 * ours for theirs. */
struct tf_verbs_qp;
struct tf_verbs_cm;

struct tf_verbs_ctx {
	struct tf_context base;
	struct ibv_context *ibctx;
	struct ibv_device_attr_ex dattr;
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	int gid_index;
	uint8_t port;
	uint8_t link_layer; /* VERBS_LL_* */
	enum ibv_mtu mtu;
	uint64_t cap_flags; /* TF_CAP_* known from the device attributes */
	/* rxe writes the kernel's struct ib_uverbs_wc into the CQ that
	 * librxe copies out as is, so the kernel's IB_WC_WITH_INVALIDATE
	 * (1 << 2) reaches us as IBV_WC_IP_CSUM_OK instead of
	 * IBV_WC_WITH_INV (1 << 3); checksum offload flags mean nothing on
	 * an RC QP, so on rxe the bit is read as WITH_INV. */
	bool rxe_inv_quirk;
	/* siw's user library (libsiw) has no LOCAL_INV and refuses a
	 * receive without SGEs (push_recv_wqe); a zero-length SGE stands in
	 * for none (verbs_qp.c). */
	bool siw;
	/* siw only: a CQ held for the context's life whose ring covers
	 * mmap offset 0x90000 (siw_plug_offset in verbs.c). */
	struct ibv_cq *siw_plug;

	/* Guards the lazy capability probes below. */
	pthread_mutex_t probe_lock;
	bool probed;
	uint64_t probed_flags;	  /* TF_CAP_REREG, TF_CAP_INLINE */
	uint32_t max_inline_data; /* largest inline size a QP accepted */
	uint32_t max_sge_rd;	  /* SGEs of an RDMA READ */

	/* Guards the bound-window lists of QPs and tf_verbs_mw.bound_qp. */
	pthread_mutex_t mw_lock;

	/* qp_num -> QP, open addressing with linear probing.  Pollers hold
	 * the lock in read mode while they use a QP found here, so that
	 * qp_destroy (write mode) cannot free it under them. */
	pthread_rwlock_t qp_lock;
	struct tf_verbs_qp **qp_tab;
	uint32_t qp_tab_mask; /* size - 1, size a power of two */
	uint32_t qp_count;
	atomic_uint qp_gen;

	/* QPs connect through rdma_cm (TOLLFREE_VERBS_CM, iWARP); the
	 * listener and its event thread start with the first blob. */
	bool use_cm;
	bool iwarp;
	pthread_mutex_t cm_start_lock;
	struct tf_verbs_cm *cm;
};

struct tf_verbs_iw;

struct tf_verbs_pd {
	struct tf_pd base;
	struct ibv_pd *ibpd;
	/* iWARP: the pages of token slots of this PD's QPs (verbs_iw.c). */
	pthread_mutex_t iw_lock;
	struct tf_verbs_iw *iw;
};

struct tf_verbs_mr {
	struct tf_mr base;
	struct ibv_mr *ibmr;
};

/*
 * A window bound through a QP is on that QP's list of bound windows until
 * a LOCAL_INV or a received SEND_WITH_INV revokes it, it is deallocated,
 * or the QP is destroyed.  tf_qp_destroy promises that the windows bound
 * through the QP are invalidated; rxe (6.1) leaves them bound to the dead
 * QP, which also keeps their region from being deregistered, so the
 * provider revokes them itself (verbs_qp.c, mw_revoke_all).
 */
struct tf_verbs_mw {
	struct tf_mw base;
	struct ibv_mw *ibmw;	      /* NULL if re-allocation failed */
	struct tf_verbs_qp *bound_qp; /* guarded by tf_verbs_ctx.mw_lock */
	struct tf_verbs_mw *next_bound;
};

struct tf_verbs_cq {
	struct tf_cq base;
	struct ibv_cq *ibcq;
	struct ibv_comp_channel *chan;
	/* siw only: completions of work posted to a QP in the error state,
	 * which siw's kernel never flushes from a user QP's ring: a ring of
	 * depth entries that tf_verbs_cq_poll returns after the device's. */
	pthread_mutex_t flush_lock;
	struct tf_wc *flush_q;
	uint64_t flush_head, flush_tail; /* guarded by flush_lock */
	atomic_uint flush_n;
};

/* One posted send-queue WR. */
struct tf_verbs_swr {
	uint64_t wr_id;		/* the user's */
	uint64_t bytes;		/* payload, for bytes_out */
	struct tf_verbs_mw *mw; /* BIND_MW: the window */
	uint32_t old_rkey;	/* BIND_MW: key before the bind */
	uint32_t new_rkey;	/* BIND_MW: key the bind installs */
	uint8_t opcode;		/* enum tf_wr_opcode */
	uint8_t signaled;
	uint8_t completed; /* its CQE came; the tail has not passed it */
};

struct tf_verbs_qp {
	struct tf_qp base;
	struct ibv_qp *ibqp;
	struct tf_verbs_ctx *ctx;
	uint32_t gen; /* VERBS_WRID_GEN_MASK bits */
	uint32_t psn; /* our initial send PSN (24 bits) */

	/* Send ring: the poster advances sq_head, the poller sq_tail; one
	 * thread each (a QP and a CQ are each serialized by their callers),
	 * so acquire/release on the indices is enough. */
	struct tf_verbs_swr *sq;
	uint32_t sq_mask;
	uint32_t sq_max; /* WRs that may be outstanding */
	_Atomic uint64_t sq_head, sq_tail;
	uint64_t sq_done; /* poller's: one past the latest completed WR */
	/* Receive ring: the user's wr_id per posted receive. */
	uint64_t *rq;
	uint32_t rq_mask;
	uint32_t rq_max;
	_Atomic uint64_t rq_head, rq_tail;
	/* Windows bound through this QP (see struct tf_verbs_mw). */
	struct tf_verbs_mw *bound_mws;

	/* rdma_cm (ctx->use_cm), guarded by the context's rdma_cm lock
	 * (verbs_cm.c).  cm_wait is set while a QP whose peer starts the
	 * connection has not seen it established: the post path waits. */
	struct rdma_cm_id *cm_id;
	uint32_t cm_token; /* in our blob; a connect request names it */
	uint8_t cm_state;  /* VERBS_CM_* */
	bool cm_expect;	   /* passive: the peer's blob is known */
	bool cm_active;	   /* we started the connection */
	uint8_t cm_tries; /* active, iWARP: connects whose local port was taken */
	int cm_err;	  /* why VERBS_CM_FAILED */
	uint32_t cm_peer_qpn, cm_peer_token;
	atomic_bool cm_wait;
	atomic_bool cm_broken; /* disconnected: the QP is in the error state */
	/* The event thread is accepting the request in cm_id: the id must
	 * outlive that, and tf_verbs_cm_qp_close waits (verbs_cm.c). */
	bool cm_accepting;
	/* iWARP (verbs_iw.c): the token slot of the provider's receive.  The
	 * responder answers the initiator's token in its first post, while
	 * cm_wait is still set. */
	struct tf_verbs_iw *iw_page;
	uint32_t iw_slot;
};

/* rdma_cm state of a QP. */
enum {
	VERBS_CM_IDLE = 0,    /* no connection yet */
	VERBS_CM_CONNECTING,  /* started (active) or accepted (passive) */
	VERBS_CM_ESTABLISHED, /* the QP is in RTS */
	VERBS_CM_FAILED,      /* set-up failed: cm_err */
	VERBS_CM_CLOSED,      /* disconnected, or the QP is going away */
};

#define VERBS_CTX(_c) ((struct tf_verbs_ctx *)(_c))
#define VERBS_PD(_p)  ((struct tf_verbs_pd *)(_p))
#define VERBS_MR(_m)  ((struct tf_verbs_mr *)(_m))
#define VERBS_MW(_m)  ((struct tf_verbs_mw *)(_m))
#define VERBS_CQ(_c)  ((struct tf_verbs_cq *)(_c))
#define VERBS_QP(_q)  ((struct tf_verbs_qp *)(_q))

/* Map TF_ACCESS_* to IBV_ACCESS_* (one to one). */
int tf_verbs_access(unsigned access);
/* enum ibv_mtu of a size in bytes; 0 or -EINVAL. */
int tf_verbs_mtu_from_bytes(uint64_t bytes, enum ibv_mtu *mtu);
/* -errno of a failed libibverbs call that reports through errno; @dflt
 * when errno was left 0. */
int tf_verbs_errno(int dflt);
/* The largest inline size a QP of @c accepts (probed once). */
uint32_t tf_verbs_max_inline(struct tf_verbs_ctx *c);

/* verbs_qp.c */
int tf_verbs_cq_create(struct tf_context *ctx, uint32_t depth,
		       struct tf_cq **cq_p);
int tf_verbs_cq_destroy(struct tf_cq *cq);
int tf_verbs_cq_poll(struct tf_cq *cq, int n, struct tf_wc *wc);
int tf_verbs_cq_fd(struct tf_cq *cq);
int tf_verbs_cq_arm(struct tf_cq *cq);
int tf_verbs_qp_create(struct tf_pd *pd, const struct tf_qp *attr,
		       struct tf_qp **qp_p);
int tf_verbs_qp_destroy(struct tf_qp *qp);
int tf_verbs_qp_get_addr(struct tf_qp *qp, void *buf, size_t *len_p);
int tf_verbs_qp_connect(struct tf_qp *qp, const void *addr, size_t len);
int tf_verbs_qp_set_error(struct tf_qp *qp);
int tf_verbs_qp_reset(struct tf_qp *qp);
int tf_verbs_post_send(struct tf_qp *qp, struct tf_send_wr *wr,
		       struct tf_send_wr **bad_wr_p);
int tf_verbs_post_recv(struct tf_qp *qp, struct tf_recv_wr *wr,
		       struct tf_recv_wr **bad_wr_p);
void tf_verbs_qp_map_free(struct tf_verbs_ctx *ctx);
/* The QP of @qpn; the QP-map lock must be held (either mode). */
struct tf_verbs_qp *tf_verbs_qp_find(struct tf_verbs_ctx *ctx, uint32_t qpn);
/* Local ACK timeout exponent for @timeout_ms (see verbs_qp.c). */
uint8_t tf_verbs_ack_timeout(uint32_t timeout_ms);
#define VERBS_RETRY_CNT 6

/* verbs_cm.c.  Without librdmacm they refuse with -EOPNOTSUPP. */
/* Fill the rdma_cm part of @a (starting the listener on first use). */
int tf_verbs_cm_addr(struct tf_verbs_qp *qp, struct tf_verbs_addr *a);
/* Connect @qp to @peer (decoded, rdma_cm form) whose blob we hold. */
int tf_verbs_cm_connect(struct tf_verbs_qp *qp,
			const struct tf_verbs_addr *peer);
/* Wait until the connection the peer starts is established. */
int tf_verbs_cm_wait(struct tf_verbs_qp *qp);
/* Before ibv_destroy_qp: disconnect and destroy the QP's cm id. */
void tf_verbs_cm_qp_close(struct tf_verbs_qp *qp);
/* At context close: stop the event thread, close the listener. */
void tf_verbs_cm_stop(struct tf_verbs_ctx *ctx);
/* verbs_iw.c: iWARP's initiator speaks first.  A QP's kept receive (at
 * create, before the application's), and its slot back (after destroy). */
int tf_verbs_iw_qp_init(struct tf_verbs_pd *pd, struct tf_verbs_qp *qp);
void tf_verbs_iw_qp_fini(struct tf_verbs_pd *pd, struct tf_verbs_qp *qp);
/* Before ibv_dealloc_pd: the PD's token pages. */
void tf_verbs_iw_pd_fini(struct tf_verbs_pd *pd);
/* The initiator, once established: its token, first on the send queue. */
int tf_verbs_iw_send_token(struct tf_verbs_qp *qp);
/* The responder, before its first send: wait for the initiator's token
 * until @deadline_ms (CLOCK_MONOTONIC), or until @gone(@qp), and answer. */
int tf_verbs_iw_wait_token(struct tf_verbs_qp *qp, uint64_t deadline_ms,
			   bool (*gone)(struct tf_verbs_qp *));
/* Take @mw off the bound list of its QP, if it is on one. */
void tf_verbs_mw_unbind(struct tf_verbs_ctx *ctx, struct tf_verbs_mw *mw);

/* verbs_cq.c, used by the QP side (verbs_qp.c). */
enum tf_wc_opcode tf_verbs_send_wc_opcode(uint8_t op);
void tf_verbs_mw_revoke_all(struct tf_verbs_qp *qp);
void tf_verbs_qp_went_error(struct tf_verbs_qp *qp);
int tf_verbs_queue_flush(struct tf_verbs_cq *cq, struct tf_verbs_qp *qp,
			 uint64_t wr_id, enum tf_wc_opcode op);
bool tf_verbs_siw_flushes_here(struct tf_verbs_qp *qp);

#endif /* TOLLFREE_VERBS_INT_H */
