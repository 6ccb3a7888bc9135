/* SPDX-License-Identifier: MIT */
/*
 * provider.h - the interface between the tollfree core and its providers
 * (the analogue of rdma-core's libibverbs/driver.h).  Users never see it.
 *
 * Object model: a provider allocates each object as a larger struct whose
 * first member is the core's base struct below (struct tf_pd, struct tf_mr,
 * ...), fills the provider-owned fields and returns the base pointer.  The
 * core fills the remaining base fields (ctx/pd back pointers, counters) after
 * the provider op returned, and hands the base pointer to the user.
 *
 * Ops: a provider fills a const struct tf_provider_ops.  Slots left NULL are
 * replaced with defaults that return -EOPNOTSUPP when the context is opened,
 * so the core never tests for NULL on a call path.
 */
#ifndef TOLLFREE_PROVIDER_H
#define TOLLFREE_PROVIDER_H

#include <tollfree/tollfree.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "util.h"

struct tf_provider_ops;

struct tf__stats_pub;

/* A link in one of a context's lists of live objects (core only). */
struct tf__link {
	struct tf__link *prev, *next;
};

/* Per-operation counters of the context that live in its QPs and CQs
 * (core only: the totals of destroyed objects). */
struct tf__obj_totals {
	uint64_t send_posted, recv_posted, bytes_out; /* QPs */
	uint64_t cqe_ok, cqe_err;		      /* CQs */
};

struct tf_context {
	struct tf_provider_ops *ops; /* full table, defaults filled in */
	/* Live statistics segment, NULL unless TOLLFREE_STATS_PUBLISH=y;
	 * next to ops because tf_cq_poll tests it (stats_int.h). */
	struct tf__stats_pub *stats_pub;
	uint32_t stats_id;	 /* context number within the process */
	uint64_t stats_start_ns; /* CLOCK_REALTIME at open */
	const char *prov_name;
	char device[64];
	struct tf_config cfg; /* configuration in effect */
	/* Live objects, for leak reports at close. */
	atomic_long n_pd, n_mr, n_mw, n_cq, n_qp;
	/* Counters of events that are rare or not tied to one QP; relaxed
	 * atomic adds because MR ops are thread-safe. */
	atomic_ullong mr_reg, mr_dereg, mr_reg_fail;
	/* Whole pages registered now, reserved before the provider pins
	 * them, and registrations refused by cfg.max_pinned (objects.c). */
	atomic_ullong pinned_bytes, pinned_refused;
	atomic_ullong mw_bind, mw_inval, qp_created, qp_errors;
	/* Soft provider only: tf_context_stats_t's. */
	atomic_ullong cq_wakes_direct, wake_fds, queue_cache_bytes;
	atomic_ullong wakes_owed_paid;
	atomic_ullong remote_access_denied;
	atomic_ullong xlate_hits, xlate_misses, xlate_evictions;
	/* Core only.  The per-operation counters (send_posted, recv_posted,
	 * bytes_out, cqe_ok, cqe_err) are kept in the QPs and CQs, so that
	 * no data call writes a line of the context; tf_context_query_stats
	 * sums the live objects' and the totals of destroyed ones.  obj_lock
	 * protects the lists and the totals and is taken at QP and CQ create
	 * and destroy and at query time, never on a data path. */
	pthread_mutex_t obj_lock;
	struct tf__link live_qps, live_cqs;
	struct tf__obj_totals retired;
};

struct tf_pd {
	struct tf_context *ctx;
	atomic_long refs; /* MRs, MWs and QPs that use the PD */
};

struct tf_mr {
	struct tf_pd *pd;
	void *addr;
	size_t length;
	uint32_t lkey;
	uint32_t rkey;
	unsigned access;
};

struct tf_mw {
	struct tf_pd *pd;
	uint32_t rkey; /* set by the provider when a BIND_MW is posted */
};

struct tf_cq {
	struct tf_context *ctx;
	uint32_t depth;
	atomic_long refs; /* QPs that use the CQ */
	/* Completions reaped, by status: written by the poller (polls are
	 * serialized per CQ) with TF_STAT_ADD_OWNED, read by queries. */
	atomic_ullong cqe_ok, cqe_err;
	struct tf__link ctx_link; /* core: ctx->live_cqs */
};

struct tf_qp {
	struct tf_pd *pd;
	struct tf_cq *send_cq;
	struct tf_cq *recv_cq;
	uint32_t qpn;		/* set by the provider */
	enum tf_qp_state state; /* maintained by the provider */
	/* Limits after defaults were applied (the provider may raise them). */
	uint32_t max_send_wr, max_recv_wr, max_sge, max_inline_data;
	uint32_t access;
	uint8_t rnr_retry;
	uint32_t timeout_ms;
	/* Counters (tf_qp_query_stats; the context sums some of them).  Each
	 * has one writer at a time, which adds with a relaxed load and store
	 * (TF_STAT_ADD_OWNED): no locked instruction on a data path.  Readers
	 * on other threads load them relaxed.  The writers are:
	 * - the QP's caller, who serializes its posts; */
	atomic_ullong send_posted, recv_posted;
	/* - the poller of send_cq, resp. recv_cq: polls are serialized per
	 *   CQ, but the two CQs may be polled by two threads at once, hence
	 *   errors and flushes counted per side (tf_qp_query_stats adds); */
	atomic_ullong send_completed, send_errors, send_flushed;
	atomic_ullong recv_completed, recv_errors, recv_flushed;
	/* - the provider, under its own serialization (soft: the QP lock;
	 *   verbs: the poller of send_cq, resp. recv_cq). */
	atomic_ullong bytes_out, bytes_in;
	/* - the soft transports, from their progress, with TF_STAT_ADD (a
	 *   locked add; one per RNR NAK, off the common path). */
	atomic_ullong rnr_retries;
	struct tf__link ctx_link; /* core: ctx->live_qps */
};

struct tf_provider_ops {
	size_t size; /* sizeof(struct tf_provider_ops), checked at open */
	const char *name;

	/* 1 if the provider has a usable device, 0 if not, -errno on error. */
	int (*probe)(const struct tf_config *cfg);
	/* Optional: list devices (tollfree-info -d). */
	int (*list_devices)(const struct tf_config *cfg,
			    void (*fn)(const char *dev, const char *info,
				       void *arg),
			    void *arg);

	/* The provider allocates its context struct (base first) and must
	 * copy *cfg into ctx->cfg. */
	int (*context_open)(const struct tf_config *cfg,
			    struct tf_context **ctx_p);
	void (*context_close)(struct tf_context *ctx);
	int (*query_caps)(struct tf_context *ctx, tf_caps_t *caps);
	int (*progress)(struct tf_context *ctx);
	/* Optional, for a provider without TF_CAP_AUTO_PROGRESS: an fd that
	 * becomes readable when a peer waits on this context's progress
	 * (one-sided operations to serve); it stays open with the context.
	 * Without it a sleeper must wake on a timer to make progress. */
	int (*progress_fd)(struct tf_context *ctx);
	int (*mem_alloc)(struct tf_context *ctx, size_t size, void **addr_p);
	void (*mem_free)(struct tf_context *ctx, void *addr, size_t size);

	int (*pd_alloc)(struct tf_context *ctx, struct tf_pd **pd_p);
	int (*pd_free)(struct tf_pd *pd);

	/* Access flags are validated by the core before mr_reg. */
	int (*mr_reg)(struct tf_pd *pd, void *addr, size_t length,
		      unsigned access, struct tf_mr **mr_p);
	int (*mr_dereg)(struct tf_mr *mr);

	int (*mw_alloc)(struct tf_pd *pd, struct tf_mw **mw_p);
	int (*mw_dealloc)(struct tf_mw *mw);

	int (*cq_create)(struct tf_context *ctx, uint32_t depth,
			 struct tf_cq **cq_p);
	int (*cq_destroy)(struct tf_cq *cq);
	int (*cq_poll)(struct tf_cq *cq, int n, struct tf_wc *wc);
	int (*cq_fd)(struct tf_cq *cq);
	int (*cq_arm)(struct tf_cq *cq);

	/* The core applies defaults and bounds to params (see struct tf_qp
	 * limits) and passes the result; the provider fills qp->qpn and sets
	 * qp->state to TF_QPS_INIT. */
	int (*qp_create)(struct tf_pd *pd, const struct tf_qp *attr,
			 struct tf_qp **qp_p);
	int (*qp_destroy)(struct tf_qp *qp);
	int (*qp_get_addr)(struct tf_qp *qp, void *buf, size_t *len_p);
	int (*qp_connect)(struct tf_qp *qp, const void *addr, size_t len);
	int (*qp_set_error)(struct tf_qp *qp);
	/* Optional (TF_CAP_QP_RESET): back to INIT, as qp_create left it,
	 * ready for tf_qp_connect to another peer; -EBUSY while work is
	 * outstanding.  Default: -EOPNOTSUPP. */
	int (*qp_reset)(struct tf_qp *qp);

	/* Post a chain.  Return the number of WRs posted (the whole chain)
	 * or, on failure, a negative errno with *bad_wr_p set to the first
	 * WR not posted (those before it were).  The count is what the core
	 * adds to send_posted/recv_posted: it comes from the provider's own
	 * walk so that the post path walks the chain once. */
	int (*post_send)(struct tf_qp *qp, struct tf_send_wr *wr,
			 struct tf_send_wr **bad_wr_p);
	int (*post_recv)(struct tf_qp *qp, struct tf_recv_wr *wr,
			 struct tf_recv_wr **bad_wr_p);
};

/* Built-in providers, in "auto" preference order (rdma-core's
 * all_providers.c; no dlopen in v1). */
extern const struct tf_provider_ops tf_verbs_provider_ops;
extern const struct tf_provider_ops tf_soft_provider_ops;

#endif /* TOLLFREE_PROVIDER_H */
