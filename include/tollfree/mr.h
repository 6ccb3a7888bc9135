/* SPDX-License-Identifier: MIT */
/*
 * tollfree/mr.h - protection domains, memory regions and memory windows.
 */
#ifndef TOLLFREE_MR_H
#define TOLLFREE_MR_H

#include <tollfree/context.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported; the library is built with
 * -fvisibility=hidden and a version script. */
#pragma GCC visibility push(default)

typedef struct tf_pd tf_pd_t;
typedef struct tf_mr tf_mr_t;
typedef struct tf_mw tf_mw_t;

/* Access flags, as in verbs (IBV_ACCESS_*). */
enum tf_access {
	TF_ACCESS_LOCAL_WRITE = 1u << 0,
	TF_ACCESS_REMOTE_WRITE = 1u << 1,
	TF_ACCESS_REMOTE_READ = 1u << 2,
	TF_ACCESS_REMOTE_ATOMIC = 1u << 3,
	TF_ACCESS_MW_BIND = 1u << 4,
};
#define TF_ACCESS_ALL                                     \
	(TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE | \
	 TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_ATOMIC | TF_ACCESS_MW_BIND)

/*
 * tf_pd_create - allocate a protection domain.  Returns 0 or -errno.
 * Thread-safe.
 */
int tf_pd_create(tf_context_t *ctx, tf_pd_t **pd_p);
/*
 * tf_pd_destroy - free a protection domain.  Returns 0, or -EBUSY while
 * regions, windows or QPs still use it (nothing is freed then).  NULL-safe.
 */
int tf_pd_destroy(tf_pd_t *pd);

/*
 * tf_mr_reg - register @length bytes at @addr with @access (enum
 * tf_access).  Remote write or atomic access requires local write, as in
 * verbs.  Registration pins the pages and installs their translations; its
 * cost grows with the number of pages.
 * Returns 0, -EINVAL (bad flags, zero length, wrapping range), -EFAULT
 * (range not mapped), -ENOMEM or -EAGAIN (pinning refused: check
 * RLIMIT_MEMLOCK), -ENOBUFS (the context's TOLLFREE_MAX_PINNED would be
 * passed), -ENOSPC (too many regions).  Thread-safe.
 */
int tf_mr_reg(tf_pd_t *pd, void *addr, size_t length, unsigned access,
	      tf_mr_t **mr_p);
/*
 * tf_mr_dereg - deregister; the pages are unpinned.  Returns 0, or -EBUSY
 * while memory windows are bound to the region (nothing changes then).
 * NULL-safe.  Thread-safe.
 */
int tf_mr_dereg(tf_mr_t *mr);

uint32_t tf_mr_lkey(const tf_mr_t *mr);
uint32_t tf_mr_rkey(const tf_mr_t *mr);
void *tf_mr_addr(const tf_mr_t *mr);
size_t tf_mr_length(const tf_mr_t *mr);
unsigned tf_mr_access(const tf_mr_t *mr);

/*
 * tf_mw_alloc - allocate a type-2 memory window (TF_CAP_MW_TYPE2).  It is
 * bound with a TF_WR_BIND_MW work request and revoked with TF_WR_LOCAL_INV
 * or by a peer's TF_WR_SEND_WITH_INV.  Returns 0, -EOPNOTSUPP or -errno.
 * Thread-safe.
 */
int tf_mw_alloc(tf_pd_t *pd, tf_mw_t **mw_p);
/* tf_mw_dealloc - free a window (bound or not).  NULL-safe. */
int tf_mw_dealloc(tf_mw_t *mw);
/*
 * tf_mw_rkey - the window's remote key as set by the last BIND_MW posted
 * on it.  Each bind gives a new, unpredictable key.  Serialize per window.
 */
uint32_t tf_mw_rkey(const tf_mw_t *mw);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* TOLLFREE_MR_H */
