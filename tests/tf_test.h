/* SPDX-License-Identifier: MIT */
/*
 * tf_test.h - the small harness every test uses.  Exit codes follow
 * liburing: 0 pass, 1 fail, 77 skip (with the reason printed).
 *
 * Data-path conformance tests (tests/conf_*.c) use only the public API and
 * run as a pair of processes: side A (the parent) and side B (a forked
 * child), each with its own context, PD and connected RC QP.  The sides
 * talk over a socketpair to exchange QP address blobs, buffer descriptors
 * and barriers; while a side waits on that socket it keeps calling
 * tf_context_progress(), so that providers which serve one-sided operations
 * only from inside library calls (the soft provider without a progress
 * thread) still serve the peer.  Environment:
 *   TOLLFREE_PROVIDER, TOLLFREE_SOFT_TRANSPORT  chosen provider (library)
 *   TOLLFREE_DEVICE             device of side A (read by the library)
 *   TOLLFREE_TEST_PEER_DEVICE   device of side B (default: the same)
 *   TOLLFREE_TEST_STRICT=1      skips fail on the soft provider
 *   TOLLFREE_TEST_TIMEOUT_MS    wait for one completion/message (15000)
 *   TOLLFREE_TEST_ALARM_S       whole-test watchdog per process (110)
 * Peer mode (two machines, e.g. tests/vm/run.sh's "two" topology): no
 * fork; this process is one side and the other runs elsewhere.
 *   TOLLFREE_TEST_PEER_SIDE     A or B: the side this process is
 *   TOLLFREE_TEST_PEER_ADDR     HOST:PORT of the test channel: side B
 *                               listens on PORT (any address), side A
 *                               connects to HOST:PORT; session tests
 *                               connect to HOST (tf_test_peer_host) and
 *                               listen on any address (st_listen)
 * Tests that kill their peer skip in peer mode.
 */
#ifndef TF_TEST_H
#define TF_TEST_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <tollfree/tollfree.h>

/* TF_TEST_SANITIZER is 1 in an ASan or TSan build: mlock is a no-op
 * there, RSS grows by design (shadow memory, quarantine), and everything
 * runs several times slower. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TF_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TF_TEST_SANITIZER 1
#endif
#endif
#ifndef TF_TEST_SANITIZER
#define TF_TEST_SANITIZER 0
#endif

#define TF_TEST_PASS 0
#define TF_TEST_FAIL 1
#define TF_TEST_SKIP 77

/* Print the reason and exit 77 (fails instead under TOLLFREE_TEST_STRICT=1
 * on the soft provider, where nothing should be skipped). */
void tf_test_skip(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
/* Print the reason and exit 1. */
void tf_test_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));
/* A part of a test was not run for lack of a capability: say so, and
 * fail instead under TOLLFREE_TEST_STRICT=1 on the soft provider.  The
 * line reads "NAME: not tried: REASON"; scripts/test.sh counts these. */
void tf_test_partial_skip(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/*
 * A part of a test was not run for a reason of the build or the host, not
 * of the provider: a sanitizer that makes mlock() a no-op, a second
 * provider that is not built in or has no device here.  Said the same way
 * ("NAME: not tried (host): REASON", counted alike), but it does not fail
 * under TOLLFREE_TEST_STRICT=1: strict mode judges what the soft provider
 * lacks, and the soft provider lacks nothing here.  Use it only for a
 * reason the test has established (a probe, the build, an errno that
 * means "absent"), never for a capability the provider reports missing.
 */
void tf_test_partial_skip_host(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* Informational line, prefixed with the test (and side) name. */
void tf_test_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(_cond)                                                           \
	do {                                                                   \
		if (!(_cond))                                                  \
			tf_test_fail(__FILE__, __LINE__, "CHECK(%s)", #_cond); \
	} while (0)
/* CHECK with a printf-style explanation. */
#define CHECKF(_cond, ...)                                             \
	do {                                                           \
		if (!(_cond))                                          \
			tf_test_fail(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)
/* Check that a tf_ call returned 0 (or >= 0), printing tf_strerror. */
#define CHECK_OK(_expr)                                                  \
	do {                                                             \
		int _r = (_expr);                                        \
		if (_r < 0)                                              \
			tf_test_fail(__FILE__, __LINE__, "%s = %d (%s)", \
				     #_expr, _r, tf_strerror(_r));       \
	} while (0)
#define CHECK_ERR(_expr, _err)                                                 \
	do {                                                                   \
		int _r = (_expr);                                              \
		if (_r != (_err))                                              \
			tf_test_fail(__FILE__, __LINE__,                       \
				     "%s = %d (%s), expected %d (%s)", #_expr, \
				     _r, tf_strerror(_r), (_err),              \
				     tf_strerror(_err));                       \
	} while (0)
/* Like CHECK_OK, but -EOPNOTSUPP skips the test (missing capability). */
#define CHECK_SUP(_expr)                                                   \
	do {                                                               \
		int _r = (_expr);                                          \
		if (_r == -EOPNOTSUPP)                                     \
			tf_test_skip("%s: not supported by this provider", \
				     #_expr);                              \
		if (_r < 0)                                                \
			tf_test_fail(__FILE__, __LINE__, "%s = %d (%s)",   \
				     #_expr, _r, tf_strerror(_r));         \
	} while (0)

/* Install a log handler that counts warnings and errors; tf_test_end()
 * fails the test if any were logged that the test did not expect. */
void tf_test_begin(const char *name);
void tf_test_expect_log(int n_warn_or_err);
/*
 * Tolerant mode: while on, warnings and errors are printed (marked
 * "tolerated") but not counted.  It is for the steps of a test that
 * provoke errors whose number is not fixed: turn it on where the fault is
 * provoked and off once its consequences are over, never for a whole
 * test, so that an error logged anywhere else still fails it.  The mode
 * may be switched while library threads log.
 */
void tf_test_tolerate_log(bool on);
bool tf_test_tolerating(void);
/* Evaluate @_expr, an int-valued call provoked to fail, in tolerant mode,
 * then restore the mode it was in. */
#define TOLERATED(_expr)                         \
	({                                       \
		bool _tw = tf_test_tolerating(); \
		int _tv;                         \
		tf_test_tolerate_log(true);      \
		_tv = (_expr);                   \
		tf_test_tolerate_log(_tw);       \
		_tv;                             \
	})
int tf_test_end(void);

/* Locked memory of this process (VmLck, bytes), -1 if unknown. */
long tf_test_vmlck(void);
/* Pinned memory of this process (VmPin, bytes: what RDMA drivers pin
 * without mlock), -1 if unknown. */
long tf_test_vmpin(void);

/* Milliseconds to wait for one completion or one peer message. */
int tf_test_timeout_ms(void);

/* ------------------------------------------------------ two-process pair */

enum tf_test_side {
	TF_SIDE_A = 0, /* parent */
	TF_SIDE_B = 1, /* forked child */
};

/* A connected QP with its send and receive CQs. */
struct tf_test_qp {
	tf_qp_t *qp;
	tf_cq_t *scq;
	tf_cq_t *rcq;
	bool own_cqs; /* created (and destroyed) by tf_test_qp_open/close */
};

struct tf_pair {
	enum tf_test_side side;
	pid_t peer_pid; /* A: the child; B: the parent */
	bool peer_dead; /* A killed B on purpose (tf_test_pair_kill_peer) */
	int sock;	/* socketpair end, -1 once closed */
	tf_context_t *ctx;
	tf_caps_t caps;
	tf_pd_t *pd;
	struct tf_test_qp q; /* the default QP (tf_test_pair_start) */
	long vmlck0, vmpin0; /* at fork, before the context was opened */
};

/*
 * tf_test_pair_open - fork; on each side open a context (side B with
 * TOLLFREE_TEST_PEER_DEVICE if set), query its caps and create a PD.
 * Skips if no provider is available.  Both sides return.
 */
void tf_test_pair_open(struct tf_pair *p);
/*
 * tf_test_pair_start - tf_test_pair_open(), then tf_test_qp_open() of p->q
 * with @params (NULL: defaults).  Both sides return.
 */
void tf_test_pair_start(struct tf_pair *p, const tf_qp_params_t *params);
/*
 * tf_test_pair_end - barrier (unless the peer was killed), destroy p->q,
 * the PD and the context, check that VmLck and VmPin are back to their
 * values at fork, then: side B exits with its result; side A waits for B
 * and returns the combined result (fail if either failed, else skip if
 * either skipped, else pass).
 */
int tf_test_pair_end(struct tf_pair *p);
/* Side A: SIGKILL side B and reap it; later pair calls do not expect it.
 * Skips in peer mode. */
void tf_test_pair_kill_peer(struct tf_pair *p);
/* Peer mode (TOLLFREE_TEST_PEER_SIDE set): the sides are two processes
 * that share nothing but the channel, on two machines. */
bool tf_test_peer_mode(void);
/* The host side A reaches side B's listeners at: TOLLFREE_TEST_PEER_ADDR's
 * host in peer mode, else 127.0.0.1. */
const char *tf_test_peer_host(void);

/*
 * tf_test_qp_open - create a QP with @params (NULL: defaults), exchange
 * address blobs with the peer, connect, and barrier.  If @params names no
 * send_cq, two CQs are created for the QP (and destroyed with it);
 * otherwise the caller's CQs are used.  Both sides must call it at the
 * same point.
 */
void tf_test_qp_open(struct tf_pair *p, const tf_qp_params_t *params,
		     struct tf_test_qp *q);
/* Its first half: create the QP (and its CQs, as above), in INIT. */
void tf_test_qp_create(struct tf_pair *p, const tf_qp_params_t *params,
		       struct tf_test_qp *q);
/* Destroy the QP and its CQs (no barrier).  Idempotent. */
void tf_test_qp_close(struct tf_test_qp *q);
/* Barrier, close @q, open it again with @params (a fresh QP pair, e.g.
 * after an error moved it to the error state). */
void tf_test_qp_reopen(struct tf_pair *p, const tf_qp_params_t *params,
		       struct tf_test_qp *q);

/* Connect two QPs of this process to each other (their address blobs
 * exchanged in memory; no pair needed). */
void tf_test_qp_connect_local(tf_qp_t *a, tf_qp_t *b);

/* Barrier between the sides (progresses the context while waiting). */
void tf_test_sync(struct tf_pair *p);
/* Send/receive exactly @len bytes to/from the peer. */
void tf_test_send_msg(struct tf_pair *p, const void *buf, size_t len);
void tf_test_recv_msg(struct tf_pair *p, void *buf, size_t len);
void tf_test_send_u64(struct tf_pair *p, uint64_t v);
uint64_t tf_test_recv_u64(struct tf_pair *p);

/* A remote buffer as the peer sees it. */
struct tf_test_rbuf {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t pad;
};
void tf_test_send_rbuf(struct tf_pair *p, uint64_t addr, uint64_t len,
		       uint32_t rkey);
struct tf_test_rbuf tf_test_recv_rbuf(struct tf_pair *p);

/* ------------------------------------------------------------ buffers */

/* Kinds of memory: every data-path test must cover all of them. */
enum tf_test_mem {
	TF_MEM_LIB = 0, /* tf_mem_alloc */
	TF_MEM_MALLOC,	/* malloc, deliberately not page aligned */
	TF_MEM_MMAP,	/* anonymous mmap */
	TF_MEM_NKINDS,
};
const char *tf_test_mem_name(enum tf_test_mem kind);

#define TF_TEST_NO_MR (~0u) /* access value: allocate, do not register */

struct tf_test_buf {
	enum tf_test_mem kind;
	uint8_t *addr;
	size_t len;
	void *base; /* what was allocated */
	size_t base_len;
	tf_context_t *ctx;
	tf_mr_t *mr; /* NULL if not registered */
};
/* Allocate @len bytes of @kind (8-byte aligned), zero them, and register
 * them on @pd with @access unless @access is TF_TEST_NO_MR. */
void tf_test_buf_alloc(struct tf_pair *p, tf_pd_t *pd, enum tf_test_mem kind,
		       size_t len, unsigned access, struct tf_test_buf *b);
void tf_test_buf_free(struct tf_test_buf *b);
static inline uint32_t tf_test_buf_lkey(const struct tf_test_buf *b)
{
	return tf_mr_lkey(b->mr);
}
static inline uint32_t tf_test_buf_rkey(const struct tf_test_buf *b)
{
	return tf_mr_rkey(b->mr);
}
/*
 * A context for a test that drives a provider itself, in one process,
 * without a pair (verbs_smoke, verbs_cm_hostile): one of @provider on @dev
 * (NULL: TOLLFREE_DEVICE or the provider's first), a PD, a CQ and @len
 * bytes of the library's memory registered with every access.  Skips
 * (77) when the context cannot be opened.  @qp is the caller's;
 * tf_test_dev_close destroys it if set, then the rest.
 */
struct tf_test_dev {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	char *buf;
	size_t len;
	tf_mr_t *mr;
	tf_qp_t *qp;
};
void tf_test_dev_open(struct tf_test_dev *s, const char *provider,
		      const char *dev, size_t len);
void tf_test_dev_close(struct tf_test_dev *s);

/* Tell the peer about [b->addr + off, + len) with the MR's rkey. */
void tf_test_send_buf(struct tf_pair *p, const struct tf_test_buf *b);

/* Deterministic pseudo-random pattern, distinct for each seed. */
void tf_test_fill(void *buf, size_t len, uint32_t seed);
/* Byte @i of the pattern of @seed. */
uint8_t tf_test_pattern(size_t i, uint32_t seed);
/* Compare; returns the first differing offset, or (size_t)-1 if equal. */
size_t tf_test_check_fill(const void *buf, size_t len, uint32_t seed);
/* Fail (with the offset) unless @buf holds the pattern of @seed. */
#define CHECK_FILL(_buf, _len, _seed)                                         \
	do {                                                                  \
		size_t _o = tf_test_check_fill((_buf), (_len), (_seed));      \
		if (_o != (size_t)-1)                                         \
			tf_test_fail(__FILE__, __LINE__,                      \
				     "data differs at offset %zu of %zu "     \
				     "(seed %u): got 0x%02x expected 0x%02x", \
				     _o, (size_t)(_len), (unsigned)(_seed),   \
				     ((const uint8_t *)(_buf))[_o],           \
				     tf_test_pattern(_o, (_seed)));           \
	} while (0)
/* Fail unless @len bytes at @buf all equal @byte. */
#define CHECK_BYTES(_buf, _len, _byte)                                     \
	do {                                                               \
		const uint8_t *_b = (const uint8_t *)(_buf);               \
		for (size_t _i = 0; _i < (size_t)(_len); _i++)             \
			if (_b[_i] != (uint8_t)(_byte))                    \
				tf_test_fail(__FILE__, __LINE__,           \
					     "byte %zu of %zu is 0x%02x, " \
					     "expected 0x%02x",            \
					     _i, (size_t)(_len), _b[_i],   \
					     (uint8_t)(_byte));            \
	} while (0)

/* --------------------------------------------------- posting and waiting */

/* Post @wr (a chain) and fail unless every WR was accepted. */
#define POST_SEND(_qp, _wr) tf_test_post_send(__FILE__, __LINE__, (_qp), (_wr))
#define POST_RECV(_qp, _wr) tf_test_post_recv(__FILE__, __LINE__, (_qp), (_wr))
void tf_test_post_send(const char *file, int line, tf_qp_t *qp,
		       struct tf_send_wr *wr);
void tf_test_post_recv(const char *file, int line, tf_qp_t *qp,
		       struct tf_recv_wr *wr);
/* Post one receive of @len bytes at @addr (num_sge 0 if @len is 0). */
void tf_test_post_recv1(tf_qp_t *qp, uint64_t wr_id, void *addr, uint32_t len,
			uint32_t lkey);

/*
 * Wait for exactly one completion on @cq, up to @timeout_ms (<= 0:
 * tf_test_timeout_ms()), and fail if none arrives: a broken provider makes
 * the test fail instead of hanging.
 */
#define WAIT_WC(_p, _cq, _wc) \
	tf_test_wait_wc(__FILE__, __LINE__, (_p), (_cq), (_wc), 0)
void tf_test_wait_wc(const char *file, int line, struct tf_pair *p, tf_cq_t *cq,
		     struct tf_wc *wc, int timeout_ms);
/* As WAIT_WC, then check wr_id, status and (unless -1) opcode. */
#define EXPECT_WC(_p, _cq, _wr_id, _status, _opcode, _wc)            \
	tf_test_expect_wc(__FILE__, __LINE__, (_p), (_cq), (_wr_id), \
			  (_status), (int)(_opcode), (_wc))
void tf_test_expect_wc(const char *file, int line, struct tf_pair *p,
		       tf_cq_t *cq, uint64_t wr_id, enum tf_wc_status status,
		       int opcode, struct tf_wc *wc);
/* Post one WR (wr->next must be NULL) on @q and wait for its completion
 * on @q's send CQ, expecting @status and @opcode (-1: any). */
#define POST_WAIT(_p, _q, _wr, _status, _opcode, _wc)                          \
	do {                                                                   \
		POST_SEND((_q)->qp, (_wr));                                    \
		EXPECT_WC((_p), (_q)->scq, (_wr)->wr_id, (_status), (_opcode), \
			  (_wc));                                              \
	} while (0)
/* Poll @cq for @ms milliseconds (progressing) and fail on any completion. */
#define EXPECT_CQ_EMPTY(_p, _cq, _ms) \
	tf_test_expect_cq_empty(__FILE__, __LINE__, (_p), (_cq), (_ms))
void tf_test_expect_cq_empty(const char *file, int line, struct tf_pair *p,
			     tf_cq_t *cq, int ms);
/* Short description of a completion, for messages. */
const char *tf_test_wc_str(const struct tf_wc *wc);

/* Sleep @ms milliseconds while progressing the context. */
void tf_test_progress_for(struct tf_pair *p, int ms);

/*
 * Move this process into a new network namespace with only loopback up
 * (call before tf_test_pair_open).  For tests that make a provider reach
 * out to peer addresses they corrupted on purpose: in the namespace such
 * traffic cannot leave the machine.  Returns false if not permitted.
 */
bool tf_test_private_netns(void);

/*
 * Known deviations of the kernel's rxe and siw drivers (Debian 12, Linux
 * 6.1) from the verbs man pages and the IBTA spec, which the verbs
 * provider cannot hide.  They are tolerated only when the context is the
 * verbs provider on a device of that driver (or TOLLFREE_TEST_QUIRKS=rxe
 * or siw; =none disables them), and every time one is used a line says
 * so.  Everything else is held to the spec on every provider; what a
 * protocol lacks (iWARP: no immediate data, no RNR, no remote errors in
 * send completions) is a capability flag instead.
 */
enum tf_test_quirk {
	/* A SEND larger than the receive: the receiver gets LOC_QP_OP_ERR
	 * and the sender REM_OP_ERR (copy_data returns -EINVAL, not
	 * -ENOSPC), instead of LOC_LEN_ERR and REM_INV_REQ_ERR. */
	TF_QUIRK_RXE_LEN_ERR,
	/* An invalid lkey (unknown, or of another PD) gives LOC_QP_OP_ERR
	 * instead of LOC_PROT_ERR (SGEs outside their region do give
	 * LOC_PROT_ERR). */
	TF_QUIRK_RXE_LKEY_ERR,
	/* Accesses through a memory window are checked against the
	 * window's region, not the window's own range (check_rkey calls
	 * mr_check_range on mw->mr). */
	TF_QUIRK_RXE_MW_RANGE,
	/* BIND_MW over a region of another PD is accepted (the check came
	 * with a 2025 kernel patch). */
	TF_QUIRK_RXE_BIND_MR_PD,
	/* siw (Linux 6.1) completes a SEND or WRITE once it is sent and a
	 * READ once its response arrives, so a READ's completion comes
	 * after those of WRs posted behind it (the verbs say: in posting
	 * order).  READs complete in order among themselves, the others
	 * too. */
	TF_QUIRK_SIW_READ_ORDER,
	/* An invalid lkey (or SGE) on the send side gives LOC_QP_OP_ERR
	 * instead of LOC_PROT_ERR (siw_qp_sq_process reports every local
	 * transmit error so). */
	TF_QUIRK_SIW_LKEY_ERR,
};
/* True if quirk @q applies to @p (and says so, with @what). */
bool tf_test_quirk(struct tf_pair *p, enum tf_test_quirk q, const char *what);

/* Skip unless the context has every flag of @caps_flags. */
void tf_test_require_caps(struct tf_pair *p, uint64_t caps_flags,
			  const char *what);

#endif /* TF_TEST_H */
