/* SPDX-License-Identifier: MIT */
/*
 * tollfree/qp.h - completion queues, reliable-connected queue pairs, work
 * requests and completions.  The semantics are those of RC verbs: work on a
 * send queue completes in order; a failed work request moves the QP to the
 * error state and flushes what remains on both of its queues.
 */
#ifndef TOLLFREE_QP_H
#define TOLLFREE_QP_H

#include <tollfree/mr.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_cq tf_cq_t;
typedef struct tf_qp tf_qp_t;

/* ---------------------------------------------------------------- CQ */

enum tf_cq_params_field {
	TF_CQ_PARAM_DEPTH = 1u << 0,
};

typedef struct tf_cq_params {
	uint64_t field_mask;
	uint32_t depth; /* entries; default 1024 */
} tf_cq_params_t;

/* tf_cq_create - create a completion queue.  Thread-safe. */
int tf_cq_create(tf_context_t *ctx, const tf_cq_params_t *params,
		 tf_cq_t **cq_p);
/* tf_cq_destroy - returns -EBUSY while QPs use the CQ.  NULL-safe. */
int tf_cq_destroy(tf_cq_t *cq);

enum tf_wc_status {
	TF_WC_SUCCESS = 0,
	TF_WC_LOC_LEN_ERR,   /* local length error (e.g. recv too small) */
	TF_WC_LOC_QP_OP_ERR, /* local QP operation error */
	TF_WC_LOC_PROT_ERR,  /* bad lkey or local access */
	TF_WC_WR_FLUSH_ERR,  /* flushed: the QP is in the error state */
	TF_WC_MW_BIND_ERR,
	TF_WC_REM_INV_REQ_ERR, /* remote invalid request */
	TF_WC_REM_ACCESS_ERR, /* remote key, range, access or QP check failed */
	TF_WC_REM_OP_ERR,     /* remote operation error */
	TF_WC_RETRY_EXC_ERR,  /* transport retries exceeded / peer gone */
	TF_WC_RNR_RETRY_EXC_ERR, /* receiver not ready, retries exceeded */
	TF_WC_FATAL_ERR,
	TF_WC_GENERAL_ERR,
};

/* tf_wc_status_str - name of a completion status ("success", ...). */
const char *tf_wc_status_str(enum tf_wc_status status);

enum tf_wc_opcode {
	TF_WC_SEND,
	TF_WC_RDMA_WRITE,
	TF_WC_RDMA_READ,
	TF_WC_FETCH_ADD,
	TF_WC_COMP_SWAP,
	TF_WC_BIND_MW,
	TF_WC_LOCAL_INV,
	TF_WC_RECV = 128,	  /* a SEND, SEND_WITH_IMM or SEND_WITH_INV */
	TF_WC_RECV_RDMA_WITH_IMM, /* an RDMA_WRITE_WITH_IMM consumed a recv */
};

enum tf_wc_flags {
	TF_WC_WITH_IMM = 1u << 0,
	TF_WC_WITH_INV = 1u << 1,
};

/* A work completion.  Fields other than wr_id, status, opcode and qp are
 * valid only for successful completions. */
struct tf_wc {
	uint64_t wr_id;
	enum tf_wc_status status;
	enum tf_wc_opcode opcode;
	uint32_t byte_len;	   /* receive completions */
	uint32_t imm_data;	   /* host byte order; TF_WC_WITH_IMM */
	uint32_t invalidated_rkey; /* TF_WC_WITH_INV */
	uint32_t flags;		   /* enum tf_wc_flags */
	uint32_t vendor_err;	   /* provider detail for errors */
	tf_qp_t *qp;
};

/*
 * tf_cq_poll - reap up to @n completions into @wc, making progress first.
 * Returns the number reaped (0 if none), or -errno.  Never blocks.
 * Serialize per CQ.
 */
int tf_cq_poll(tf_cq_t *cq, int n, struct tf_wc *wc);

/*
 * tf_cq_wait - like tf_cq_poll, but wait up to @timeout_ms (-1: forever)
 * for at least one completion: busy-poll for TOLLFREE_POLL_SPIN_US, then
 * block on the completion fd.  Returns the number reaped, 0 on timeout, or
 * -errno.  Serialize per CQ.
 */
int tf_cq_wait(tf_cq_t *cq, int n, struct tf_wc *wc, int timeout_ms);

/*
 * tf_cq_fd - a file descriptor that becomes readable after tf_cq_arm()
 * when a completion arrives; for event loops (hiredis-style: the library
 * never owns the loop).  Owned by the CQ.  Returns the fd, or -EOPNOTSUPP.
 */
int tf_cq_fd(tf_cq_t *cq);
/*
 * tf_cq_arm - request one event on the fd for the next completion, and
 * consume events already delivered.  Poll the CQ once more after arming,
 * as with ibv_req_notify_cq().  Serialize per CQ.
 */
int tf_cq_arm(tf_cq_t *cq);

/* ---------------------------------------------------------------- QP */

enum tf_qp_state {
	TF_QPS_RESET = 0,
	TF_QPS_INIT,
	TF_QPS_RTR,
	TF_QPS_RTS,
	TF_QPS_ERR,
};

enum tf_qp_params_field {
	TF_QP_PARAM_MAX_SEND_WR = 1u << 0,
	TF_QP_PARAM_MAX_RECV_WR = 1u << 1,
	TF_QP_PARAM_MAX_SGE = 1u << 2,
	TF_QP_PARAM_MAX_INLINE = 1u << 3,
	TF_QP_PARAM_ACCESS = 1u << 4,
	TF_QP_PARAM_RNR_RETRY = 1u << 5,
	TF_QP_PARAM_TIMEOUT = 1u << 6,
};

typedef struct tf_qp_params {
	uint64_t field_mask;
	tf_cq_t *send_cq;	  /* required */
	tf_cq_t *recv_cq;	  /* required (may equal send_cq) */
	uint32_t max_send_wr;	  /* default 256 */
	uint32_t max_recv_wr;	  /* default 256 */
	uint32_t max_sge;	  /* per WR, both queues; default 4 */
	uint32_t max_inline_data; /* default 256 */
	/* Remote operations the QP accepts (TF_ACCESS_REMOTE_*); default all. */
	uint32_t access;
	/* RNR retries; 7 means retry forever (verbs); default 7. */
	uint8_t rnr_retry;
	/* Transport timeout in ms before a WR fails with RETRY_EXC; default
	 * TOLLFREE_QP_TIMEOUT_MS. */
	uint32_t timeout_ms;
} tf_qp_params_t;

/* tf_qp_create - create an RC QP in INIT.  Thread-safe. */
int tf_qp_create(tf_pd_t *pd, const tf_qp_params_t *params, tf_qp_t **qp_p);
/*
 * tf_qp_destroy - destroy; outstanding work is dropped without
 * completions, windows bound to the QP are invalidated.  NULL-safe.
 */
int tf_qp_destroy(tf_qp_t *qp);

/* The largest address blob a provider produces. */
#define TF_QP_ADDR_MAX 256

/*
 * tf_qp_get_addr - write the QP's address blob (opaque, versioned, in
 * explicit byte order) into @buf of *@len_p bytes; on success *@len_p is
 * the blob's length.  The peer passes it to tf_qp_connect().
 * Returns 0 or -ENOSPC.  Serialize per QP.
 */
int tf_qp_get_addr(tf_qp_t *qp, void *buf, size_t *len_p);
/*
 * tf_qp_connect - connect to the peer QP whose blob is @addr, moving the QP
 * through RTR to RTS.  Through rdma_cm (TF_CAP_RDMA_CM) the connection
 * completes in the background and the first send waits for it (-ENOTCONN
 * if it failed).  The blob is checked: -TF_EWIRE if malformed,
 * -TF_EVERSION for an unknown version, -TF_EPEER if it belongs to another
 * provider or cannot be reached.  Serialize per QP.
 */
int tf_qp_connect(tf_qp_t *qp, const void *addr, size_t len);
/* tf_qp_state - current state.  Serialize per QP. */
enum tf_qp_state tf_qp_state(tf_qp_t *qp);
/*
 * tf_qp_set_error - move the QP to the error state; outstanding and later
 * work completes with TF_WC_WR_FLUSH_ERR.  Serialize per QP.
 */
int tf_qp_set_error(tf_qp_t *qp);
/*
 * tf_qp_reset - move the QP back to INIT, as tf_qp_create() left it, so
 * that tf_qp_connect() can connect it to another peer: its connection
 * state is gone and a new initial PSN goes in its next address blob;
 * completions of its earlier work still queued are dropped by the poll.
 * The QP must be quiet: no work outstanding (every send and receive
 * completed and polled, -EBUSY otherwise) and no memory window bound
 * through it; nobody may post to it or poll its CQs during the call.
 * -EOPNOTSUPP without TF_CAP_QP_RESET (the soft provider: its peer may
 * still map the QP's rings; rdma_cm: the connection is the cm id).  On
 * any other error the QP is in an undefined state: destroy it.
 */
int tf_qp_reset(tf_qp_t *qp);
/* tf_qp_num - the QP number (unique within its context). */
uint32_t tf_qp_num(const tf_qp_t *qp);

enum tf_wr_opcode {
	TF_WR_SEND = 0,
	TF_WR_SEND_WITH_IMM,
	TF_WR_SEND_WITH_INV,
	TF_WR_RDMA_WRITE,
	TF_WR_RDMA_WRITE_WITH_IMM,
	TF_WR_RDMA_READ,
	TF_WR_ATOMIC_FETCH_ADD,
	TF_WR_ATOMIC_CMP_SWP,
	TF_WR_BIND_MW,
	TF_WR_LOCAL_INV,
};

enum tf_send_flags {
	TF_SEND_SIGNALED = 1u << 0, /* generate a completion on success */
	TF_SEND_INLINE = 1u << 1,   /* copy the payload at post time */
	TF_SEND_FENCE = 1u << 2,    /* wait for prior READ/atomics */
};

struct tf_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct tf_send_wr {
	uint64_t wr_id;
	struct tf_send_wr *next;
	struct tf_sge *sg_list;
	int num_sge;
	enum tf_wr_opcode opcode;
	unsigned send_flags; /* enum tf_send_flags */
	uint32_t imm_data;   /* host byte order; *_WITH_IMM */
	uint32_t
		invalidate_rkey; /* SEND_WITH_INV (remote), LOCAL_INV (local) */
	union {
		struct {
			uint64_t remote_addr;
			uint32_t rkey;
		} rdma;
		struct {
			uint64_t remote_addr; /* 8-byte aligned */
			uint32_t rkey;
			uint64_t compare_add;
			uint64_t swap;
		} atomic;
		struct {
			tf_mw_t *mw;
			tf_mr_t *mr;
			uint64_t addr;
			uint64_t length;
			unsigned access; /* TF_ACCESS_REMOTE_* */
		} bind_mw;
	} wr;
};

struct tf_recv_wr {
	uint64_t wr_id;
	struct tf_recv_wr *next;
	struct tf_sge *sg_list;
	int num_sge;
};

/*
 * tf_post_send - post a chain of work requests on the send queue.
 * Requests are checked at post time: -EINVAL for a malformed request (bad
 * opcode, too many SGEs, inline data too long, unaligned atomic), -ENOMEM
 * when the send queue is full, -ENOTCONN before tf_qp_connect().  In the
 * error state work is accepted and completes with TF_WC_WR_FLUSH_ERR, as
 * in verbs.  On failure *@bad_wr_p (if not NULL)
 * points at the first request not posted.  BIND_MW assigns the window a
 * new key at post time (tf_mw_rkey).  Serialize per QP.
 */
int tf_post_send(tf_qp_t *qp, struct tf_send_wr *wr,
		 struct tf_send_wr **bad_wr_p);
/*
 * tf_post_recv - post receive buffers.  -ENOMEM when the receive queue is
 * full, -EINVAL for too many SGEs.  Serialize per QP.
 */
int tf_post_recv(tf_qp_t *qp, struct tf_recv_wr *wr,
		 struct tf_recv_wr **bad_wr_p);

/* Per-QP counters. */
typedef struct tf_qp_stats {
	uint64_t send_posted;
	uint64_t recv_posted;
	uint64_t send_completed; /* completions of any status */
	uint64_t recv_completed;
	uint64_t errors; /* error completions other than flush */
	uint64_t flushed;
	uint64_t rnr_retries;
	uint64_t bytes_out;
	uint64_t bytes_in;
	uint64_t reserved[8];
} tf_qp_stats_t;

/* tf_qp_query_stats - copy the QP's counters.  Serialize per QP. */
int tf_qp_query_stats(tf_qp_t *qp, tf_qp_stats_t *stats);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_QP_H */
