/* SPDX-License-Identifier: MIT */
/*
 * tollfree/context.h - provider contexts, capabilities and statistics.
 */
#ifndef TOLLFREE_CONTEXT_H
#define TOLLFREE_CONTEXT_H

#include <tollfree/base.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_context tf_context_t;

enum tf_context_params_field {
	TF_CONTEXT_PARAM_PROVIDER = 1u << 0,
	TF_CONTEXT_PARAM_DEVICE = 1u << 1,
	TF_CONTEXT_PARAM_TRANSPORT = 1u << 2,
	TF_CONTEXT_PARAM_TCP_ADDR = 1u << 3,
};

/*
 * Parameters of tf_context_open().  Set a bit in field_mask for each field
 * you fill; unset fields take the TOLLFREE_* configuration.
 */
typedef struct tf_context_params {
	uint64_t field_mask;
	/* "auto", "soft" or "verbs" (TOLLFREE_PROVIDER). */
	const char *provider;
	/* Device name for the verbs provider, e.g. "rxe0" (TOLLFREE_DEVICE). */
	const char *device;
	/* Soft provider transport: "auto", "shm" or "tcp". */
	const char *transport;
	/* Soft provider tcp transport: the local address to listen on and to
	 * advertise in address blobs (TOLLFREE_SOFT_TCP_ADDR). */
	const char *tcp_addr;
} tf_context_params_t;

/*
 * tf_context_open - open a context on a provider.
 * @params: may be NULL (everything from the configuration).
 * With provider "auto", the verbs provider is used when an RDMA device is
 * present, otherwise the soft provider.
 * Returns 0, -EINVAL for an invalid parameter or configuration (also with
 * "auto"), -TF_ENOPROVIDER when the requested provider is not built in or
 * has no device, -ENOMEM, or a provider error.  Thread-safe.
 */
int tf_context_open(const tf_context_params_t *params, tf_context_t **ctx_p);

/*
 * tf_context_close - close a context.  All objects created on it must have
 * been destroyed; survivors are reported in the log and leaked.
 * NULL-safe; not thread-safe with respect to other uses of @ctx.
 */
void tf_context_close(tf_context_t *ctx);

/* tf_context_provider - "soft" or "verbs".  Thread-safe. */
const char *tf_context_provider(const tf_context_t *ctx);
/* tf_context_device - the device name ("soft" for the soft provider). */
const char *tf_context_device(const tf_context_t *ctx);

/*
 * tf_context_progress - make progress on every transport of @ctx (inbound
 * messages, one-sided operations a peer asked this side to execute,
 * retransmissions).  Polling any completion queue also makes progress.
 * Returns the number of events handled, or a negative errno.
 * Thread-safe: one caller progresses at a time, and a caller that finds
 * another progressing returns at once (the session layer calls it from
 * every thread that waits, listeners included).
 */
int tf_context_progress(tf_context_t *ctx);

/* Capability flags (tf_caps_t.flags). */
enum tf_cap_flags {
	TF_CAP_MW_TYPE2 = 1u << 0, /* type-2 memory windows bind by WR */
	TF_CAP_ATOMIC = 1u << 1,   /* 64-bit fetch-add / compare-swap */
	TF_CAP_SEND_WITH_INV = 1u << 2,
	TF_CAP_ODP = 1u << 3,	    /* on-demand paging */
	TF_CAP_REREG = 1u << 4,	    /* re-registration in place */
	TF_CAP_MEM_ALLOC = 1u << 5, /* tf_mem_alloc gives faster memory */
	TF_CAP_CQ_FD = 1u << 6,	    /* completion fd for blocking waits */
	TF_CAP_INLINE = 1u << 7,    /* inline sends */
	TF_CAP_IMM_DATA = 1u << 8,  /* SEND/RDMA_WRITE_WITH_IMM */
	TF_CAP_RDMA_CM = 1u << 9,   /* QPs connect through rdma_cm */
	/* SEND and WRITE complete once the responder acknowledged them, so
	 * their completions carry its errors (remote access, length, RNR)
	 * and RNR retries exist: IB and RoCE.  iWARP completes them once
	 * sent; a responder's error ends the connection instead. */
	TF_CAP_REMOTE_ACK = 1u << 10,
	/* One-sided operations a peer aims at this context's memory (READ,
	 * WRITE, atomics) complete without this side calling
	 * tf_context_progress: a NIC executes them (verbs), or the soft
	 * provider's progress thread runs.  libfabric calls this
	 * FI_PROGRESS_AUTO. */
	TF_CAP_AUTO_PROGRESS = 1u << 11,
	/* tf_qp_reset: a QP goes back to INIT and connects to another peer
	 * (the verbs provider without rdma_cm). */
	TF_CAP_QP_RESET = 1u << 12,
	/* tf_qp_connect is a device command (verbs without rdma_cm: two
	 * QP transitions, tens of microseconds or more), which a peer's own
	 * connect can overlap (TOLLFREE_SESSION_EARLY_ADDR=auto). */
	TF_CAP_CONNECT_CMD = 1u << 13,
};

/* What a context can do.  Filled by tf_context_query_caps(). */
typedef struct tf_caps {
	uint64_t flags; /* enum tf_cap_flags */
	uint64_t max_mr_size;
	uint32_t max_mr;
	uint32_t max_mw;
	uint32_t max_qp;
	uint32_t max_qp_wr;
	uint32_t max_cqe;
	uint32_t max_sge;
	uint32_t max_inline_data;
	uint32_t max_msg_size;
	char provider[16];
	char device[64];
	/* soft: "shm", "tcp", or "auto" and what it has chosen at connects
	 * so far ("auto:shm", "auto:tcp", "auto:shm+tcp"); verbs: RoCE, IB
	 * or iWARP */
	char transport[16];
	uint32_t max_sge_rd; /* SGEs of an RDMA_READ (<= max_sge) */
	uint32_t reserved32;
	uint64_t reserved[7];
} tf_caps_t;

/* tf_context_query_caps - fill @caps.  Thread-safe. */
int tf_context_query_caps(tf_context_t *ctx, tf_caps_t *caps);

/* Counters of a context, summed over its objects (also destroyed ones). */
typedef struct tf_context_stats {
	uint64_t mr_reg; /* successful registrations */
	uint64_t mr_dereg;
	uint64_t mr_reg_fail;
	/* Whole pages registered now, every registration counted (pool
	 * chunks, cached regions, control slots, dedicated ones). */
	uint64_t pinned_bytes;
	uint64_t mw_bind;  /* completed BIND_MW work requests */
	uint64_t mw_inval; /* LOCAL_INV and SEND_WITH_INV received */
	uint64_t qp_created;
	uint64_t qp_errors; /* QPs that went to the error state */
	uint64_t send_posted;
	uint64_t recv_posted;
	uint64_t cqe_ok;
	uint64_t cqe_err;
	uint64_t bytes_out; /* payload of successful send-queue WRs */
	uint64_t remote_access_denied; /* peer accesses this side rejected */
	/* Translation-cache model (soft provider; 0 elsewhere). */
	uint64_t xlate_hits;
	uint64_t xlate_misses;
	uint64_t xlate_evictions;
	/* The bound on pinned_bytes (TOLLFREE_MAX_PINNED; UINT64_MAX: none)
	 * and the registrations it refused (-ENOBUFS). */
	uint64_t max_pinned;
	uint64_t pinned_refused;
	/* Soft provider, shm: peers' threads asleep on an armed CQ that
	 * this context woke itself, without the peer's waker thread (0
	 * elsewhere). */
	uint64_t cq_wakes_direct;
	/* Soft provider, shm: peers' eventfds this context holds now to wake
	 * them (one per peer process it woke, closed with its last queue
	 * pair to it; one per peer CQ it woke directly, closed with the
	 * queue pair; 0 elsewhere). */
	uint64_t wake_fds;
	/* Soft provider: bytes of queue memory of destroyed queue pairs and
	 * CQs kept for new ones (TOLLFREE_SOFT_QUEUE_CACHE; 0 elsewhere). */
	uint64_t queue_cache_bytes;
	/* Soft provider, shm: wake-ups of a peer's waker thread this context
	 * owed and paid because it waited for the peer's acknowledgement (a
	 * message whose doorbell woke nobody; tollfree-soft(7); 0
	 * elsewhere). */
	uint64_t wakes_owed_paid;
	uint64_t reserved[10];
} tf_context_stats_t;

/*
 * tf_context_query_stats - copy the counters.  The per-operation ones
 * (send_posted, recv_posted, cqe_ok, cqe_err, bytes_out) are summed over
 * the context's QPs and CQs under a lock that only QP/CQ create and destroy
 * also take; the data path takes none.  Values may be slightly out of
 * date.  Thread-safe.
 */
int tf_context_query_stats(tf_context_t *ctx, tf_context_stats_t *stats);

/*
 * tf_mem_alloc - allocate @size bytes of memory suited for registration on
 * @ctx, page aligned.  On the soft provider it lives in a mapping that
 * same-host peers can map too, so that their one-sided operations are plain
 * loads and stores (TF_CAP_MEM_ALLOC); elsewhere it is anonymous memory.
 * Returns 0 or -ENOMEM.  Release with tf_mem_free().  Thread-safe.
 */
int tf_mem_alloc(tf_context_t *ctx, size_t size, void **addr_p);
/* tf_mem_free - release memory from tf_mem_alloc().  NULL-safe. */
void tf_mem_free(tf_context_t *ctx, void *addr, size_t size);

/*
 * tf_provider_foreach - call @fn for every provider built in, with whether
 * it found a device (1), none (0) or failed to probe (negative errno).
 * Returns the number of providers.  Thread-safe.
 */
typedef void (*tf_provider_fn_t)(const char *name, int available, void *arg);
int tf_provider_foreach(tf_provider_fn_t fn, void *arg);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_CONTEXT_H */
