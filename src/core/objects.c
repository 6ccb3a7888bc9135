/* SPDX-License-Identifier: MIT */
/*
 * objects.c - the public entry points for PDs, MRs, MWs, CQs and QPs.  They
 * check arguments that do not depend on the provider, keep counters and
 * reference counts, and call the provider's ops.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "provider.h"
#include "stats_int.h"

#define OPS(_ctx) ((_ctx)->ops)

/* ------------------------------------------------- context's object lists
 *
 * The per-operation counters of a context are kept in its QPs and CQs and
 * summed at query time: the lists below hold the live ones, ctx->retired
 * what destroyed ones had counted.  A destroy folds the object's counters
 * into ctx->retired and unlinks it before the provider frees it; if the
 * provider refuses, the same amounts are taken back out and the object
 * is linked again, so that a query never counts an object twice or loses
 * it.  Counts made after the fold are lost: only work that tf_qp_destroy
 * drops anyway can still move a QP's counters then. */

#define LOAD(_obj, _f) atomic_load_explicit(&(_obj)->_f, memory_order_relaxed)

/* ctx->obj_lock must be held (link_add, link_del). */
static void link_add(struct tf__link *head, struct tf__link *l)
{
	l->prev = head;
	l->next = head->next;
	head->next->prev = l;
	head->next = l;
}

static void link_del(struct tf__link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
}

static struct tf_qp *qp_of_link(struct tf__link *l)
{
	return (struct tf_qp *)((char *)l - offsetof(struct tf_qp, ctx_link));
}

static struct tf_cq *cq_of_link(struct tf__link *l)
{
	return (struct tf_cq *)((char *)l - offsetof(struct tf_cq, ctx_link));
}

static void qp_totals(struct tf_qp *qp, struct tf__obj_totals *t)
{
	memset(t, 0, sizeof(*t));
	t->send_posted = LOAD(qp, send_posted);
	t->recv_posted = LOAD(qp, recv_posted);
	t->bytes_out = LOAD(qp, bytes_out);
}

static void cq_totals(struct tf_cq *cq, struct tf__obj_totals *t)
{
	memset(t, 0, sizeof(*t));
	t->cqe_ok = LOAD(cq, cqe_ok);
	t->cqe_err = LOAD(cq, cqe_err);
}

static void totals_add(struct tf__obj_totals *dst,
		       const struct tf__obj_totals *t)
{
	dst->send_posted += t->send_posted;
	dst->recv_posted += t->recv_posted;
	dst->bytes_out += t->bytes_out;
	dst->cqe_ok += t->cqe_ok;
	dst->cqe_err += t->cqe_err;
}

static void totals_sub(struct tf__obj_totals *dst,
		       const struct tf__obj_totals *t)
{
	dst->send_posted -= t->send_posted;
	dst->recv_posted -= t->recv_posted;
	dst->bytes_out -= t->bytes_out;
	dst->cqe_ok -= t->cqe_ok;
	dst->cqe_err -= t->cqe_err;
}

void tf__stats_objects(struct tf_context *ctx, tf_context_stats_t *s)
{
	struct tf__obj_totals sum, t;

	pthread_mutex_lock(&ctx->obj_lock);
	sum = ctx->retired;
	for (struct tf__link *l = ctx->live_qps.next; l != &ctx->live_qps;
	     l = l->next) {
		qp_totals(qp_of_link(l), &t);
		totals_add(&sum, &t);
	}
	for (struct tf__link *l = ctx->live_cqs.next; l != &ctx->live_cqs;
	     l = l->next) {
		cq_totals(cq_of_link(l), &t);
		totals_add(&sum, &t);
	}
	pthread_mutex_unlock(&ctx->obj_lock);
	s->send_posted = sum.send_posted;
	s->recv_posted = sum.recv_posted;
	s->bytes_out = sum.bytes_out;
	s->cqe_ok = sum.cqe_ok;
	s->cqe_err = sum.cqe_err;
}

static void obj_link(struct tf_context *ctx, struct tf__link *head,
		     struct tf__link *l)
{
	pthread_mutex_lock(&ctx->obj_lock);
	link_add(head, l);
	pthread_mutex_unlock(&ctx->obj_lock);
}

/* Before the provider destroys a QP: fold its counters into the retired
 * totals (returned in @t) and unlink it. */
static void qp_retire(struct tf_context *ctx, struct tf_qp *qp,
		      struct tf__obj_totals *t)
{
	pthread_mutex_lock(&ctx->obj_lock);
	qp_totals(qp, t);
	totals_add(&ctx->retired, t);
	link_del(&qp->ctx_link);
	pthread_mutex_unlock(&ctx->obj_lock);
}

/* The same for a CQ. */
static void cq_retire(struct tf_context *ctx, struct tf_cq *cq,
		      struct tf__obj_totals *t)
{
	pthread_mutex_lock(&ctx->obj_lock);
	cq_totals(cq, t);
	totals_add(&ctx->retired, t);
	link_del(&cq->ctx_link);
	pthread_mutex_unlock(&ctx->obj_lock);
}

/* The provider refused to destroy the object: undo qp_retire() or
 * cq_retire(), which returned @t. */
static void obj_unretire(struct tf_context *ctx, struct tf__link *head,
			 struct tf__link *l, const struct tf__obj_totals *t)
{
	pthread_mutex_lock(&ctx->obj_lock);
	totals_sub(&ctx->retired, t);
	link_add(head, l);
	pthread_mutex_unlock(&ctx->obj_lock);
}

/* ------------------------------------------------------------- PD */

int tf_pd_create(tf_context_t *ctx, tf_pd_t **pd_p)
{
	struct tf_pd *pd;
	int ret;

	if (!ctx || !pd_p)
		return -EINVAL;
	ret = OPS(ctx)->pd_alloc(ctx, &pd);
	if (ret)
		return ret;
	pd->ctx = ctx;
	atomic_init(&pd->refs, 0);
	atomic_fetch_add(&ctx->n_pd, 1);
	*pd_p = pd;
	return 0;
}

int tf_pd_destroy(tf_pd_t *pd)
{
	struct tf_context *ctx;
	int ret;

	if (!pd)
		return 0;
	ctx = pd->ctx;
	if (atomic_load(&pd->refs)) {
		tf_log_warn("core",
			    "pd %p destroyed while in use by %ld objects",
			    (void *)pd, (long)atomic_load(&pd->refs));
		return -EBUSY;
	}
	ret = OPS(ctx)->pd_free(pd);
	if (ret)
		return ret;
	atomic_fetch_sub(&ctx->n_pd, 1);
	return 0;
}

/* ------------------------------------------------------------- MR */

/*
 * The pinned-memory bound (TOLLFREE_MAX_PINNED).  Every registration of a
 * context goes through tf_mr_reg (pool chunks, cached regions, control
 * slots, dedicated registrations of sessions), so this is the one place
 * that counts and bounds what a context pins.  A registration is charged
 * the whole pages it spans, as the provider pins them; two registrations
 * of one page are both charged, so the count is an upper bound on what
 * the context keeps locked.  The charge is taken before the provider is
 * called (a compare-and-swap loop), so that registrations racing on other
 * threads never pass the bound together.
 */
static uint64_t pin_span(const void *addr, size_t length)
{
	long v = sysconf(_SC_PAGESIZE); /* glibc: a load, no system call */
	uint64_t a = (uintptr_t)addr, ps = v > 0 ? (uint64_t)v : 4096;

	return ((a + length + ps - 1) & ~(ps - 1)) - (a & ~(ps - 1));
}

static int pin_charge(struct tf_context *ctx, uint64_t span)
{
	uint64_t max = ctx->cfg.max_pinned;
	unsigned long long cur =
		atomic_load_explicit(&ctx->pinned_bytes, memory_order_relaxed);

	do {
		if (span > max || cur > max - span) {
			TF_STAT_ADD(ctx, pinned_refused, 1);
			tf_log_warn("core",
				    "mr_reg: %llu bytes refused: %llu of "
				    "TOLLFREE_MAX_PINNED=%llu pinned already",
				    (unsigned long long)span, cur,
				    (unsigned long long)max);
			return -ENOBUFS;
		}
	} while (!atomic_compare_exchange_weak_explicit(
		&ctx->pinned_bytes, &cur, cur + span, memory_order_relaxed,
		memory_order_relaxed));
	return 0;
}

static void pin_release(struct tf_context *ctx, uint64_t span)
{
	atomic_fetch_sub_explicit(&ctx->pinned_bytes, span,
				  memory_order_relaxed);
}

int tf_mr_reg(tf_pd_t *pd, void *addr, size_t length, unsigned access,
	      tf_mr_t **mr_p)
{
	struct tf_context *ctx;
	struct tf_mr *mr;
	uint64_t span;
	int ret;

	if (!pd || !mr_p)
		return -EINVAL;
	ctx = pd->ctx;
	if (!addr || !length || (uintptr_t)addr + length < (uintptr_t)addr ||
	    (access & ~(unsigned)TF_ACCESS_ALL)) {
		tf_log_debug("core", "mr_reg: invalid arguments");
		return -EINVAL;
	}
	/* As in verbs: a peer may only write where we may write. */
	if ((access & (TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & TF_ACCESS_LOCAL_WRITE)) {
		tf_log_debug("core", "mr_reg: remote write/atomic without "
				     "local write");
		return -EINVAL;
	}
	span = pin_span(addr, length);
	ret = pin_charge(ctx, span);
	if (ret) {
		TF_STAT_ADD(ctx, mr_reg_fail, 1);
		return ret;
	}
	ret = OPS(ctx)->mr_reg(pd, addr, length, access, &mr);
	if (ret) {
		pin_release(ctx, span);
		TF_STAT_ADD(ctx, mr_reg_fail, 1);
		return ret;
	}
	mr->pd = pd;
	mr->addr = addr;
	mr->length = length;
	mr->access = access;
	atomic_fetch_add(&pd->refs, 1);
	atomic_fetch_add(&ctx->n_mr, 1);
	TF_STAT_ADD(ctx, mr_reg, 1);
	*mr_p = mr;
	return 0;
}

int tf_mr_dereg(tf_mr_t *mr)
{
	struct tf_context *ctx;
	struct tf_pd *pd;
	void *addr;
	size_t length;
	int ret;

	if (!mr)
		return 0;
	pd = mr->pd;
	ctx = pd->ctx;
	addr = mr->addr;
	length = mr->length;
	ret = OPS(ctx)->mr_dereg(mr);
	if (ret)
		return ret;
	atomic_fetch_sub(&pd->refs, 1);
	atomic_fetch_sub(&ctx->n_mr, 1);
	TF_STAT_ADD(ctx, mr_dereg, 1);
	pin_release(ctx, pin_span(addr, length));
	return 0;
}

uint32_t tf_mr_lkey(const tf_mr_t *mr)
{
	return mr->lkey;
}

uint32_t tf_mr_rkey(const tf_mr_t *mr)
{
	return mr->rkey;
}

void *tf_mr_addr(const tf_mr_t *mr)
{
	return mr->addr;
}

size_t tf_mr_length(const tf_mr_t *mr)
{
	return mr->length;
}

unsigned tf_mr_access(const tf_mr_t *mr)
{
	return mr->access;
}

/* ------------------------------------------------------------- MW */

int tf_mw_alloc(tf_pd_t *pd, tf_mw_t **mw_p)
{
	struct tf_mw *mw;
	int ret;

	if (!pd || !mw_p)
		return -EINVAL;
	ret = OPS(pd->ctx)->mw_alloc(pd, &mw);
	if (ret)
		return ret;
	mw->pd = pd;
	atomic_fetch_add(&pd->refs, 1);
	atomic_fetch_add(&pd->ctx->n_mw, 1);
	*mw_p = mw;
	return 0;
}

int tf_mw_dealloc(tf_mw_t *mw)
{
	struct tf_pd *pd;
	int ret;

	if (!mw)
		return 0;
	pd = mw->pd;
	ret = OPS(pd->ctx)->mw_dealloc(mw);
	if (ret)
		return ret;
	atomic_fetch_sub(&pd->refs, 1);
	atomic_fetch_sub(&pd->ctx->n_mw, 1);
	return 0;
}

uint32_t tf_mw_rkey(const tf_mw_t *mw)
{
	return mw->rkey;
}

/* ------------------------------------------------------------- CQ */

int tf_cq_create(tf_context_t *ctx, const tf_cq_params_t *params,
		 tf_cq_t **cq_p)
{
	uint32_t depth = 1024;
	struct tf_cq *cq;
	int ret;

	if (!ctx || !cq_p)
		return -EINVAL;
	if (params && (params->field_mask & TF_CQ_PARAM_DEPTH))
		depth = params->depth;
	if (!depth || depth > ctx->cfg.cq_max_depth) {
		tf_log_debug("core", "cq depth %u out of range 1..%llu", depth,
			     (unsigned long long)ctx->cfg.cq_max_depth);
		return -EINVAL;
	}
	ret = OPS(ctx)->cq_create(ctx, depth, &cq);
	if (ret)
		return ret;
	cq->ctx = ctx;
	if (!cq->depth)
		cq->depth = depth;
	atomic_init(&cq->refs, 0);
	atomic_init(&cq->cqe_ok, 0);
	atomic_init(&cq->cqe_err, 0);
	obj_link(ctx, &ctx->live_cqs, &cq->ctx_link);
	atomic_fetch_add(&ctx->n_cq, 1);
	*cq_p = cq;
	return 0;
}

int tf_cq_destroy(tf_cq_t *cq)
{
	struct tf__obj_totals t;
	struct tf_context *ctx;
	int ret;

	if (!cq)
		return 0;
	ctx = cq->ctx;
	if (atomic_load(&cq->refs)) {
		tf_log_warn("core", "cq %p destroyed while used by %ld QPs",
			    (void *)cq, (long)atomic_load(&cq->refs));
		return -EBUSY;
	}
	cq_retire(ctx, cq, &t);
	ret = OPS(ctx)->cq_destroy(cq);
	if (ret) {
		obj_unretire(ctx, &ctx->live_cqs, &cq->ctx_link, &t);
		return ret;
	}
	atomic_fetch_sub(&ctx->n_cq, 1);
	return 0;
}

/* An error completion of @qp: counted per queue, off the common path. */
static void count_wc_err(struct tf_qp *qp, const struct tf_wc *wc)
{
	bool flush = wc->status == TF_WC_WR_FLUSH_ERR;

	if (wc->opcode & TF_WC_RECV) {
		if (flush)
			TF_STAT_ADD_OWNED(qp, recv_flushed, 1);
		else
			TF_STAT_ADD_OWNED(qp, recv_errors, 1);
	} else {
		if (flush)
			TF_STAT_ADD_OWNED(qp, send_flushed, 1);
		else
			TF_STAT_ADD_OWNED(qp, send_errors, 1);
	}
}

/*
 * Account for reaped completions in the CQ and QP counters.  This poller
 * owns all of them: a receive completion came from its QP's recv_cq, a
 * send one from its send_cq, and polls are serialized per CQ.
 */
static void count_wcs(struct tf_cq *cq, const struct tf_wc *wc, int n)
{
	uint64_t err = 0;

	for (int i = 0; i < n; i++) {
		struct tf_qp *qp = wc[i].qp;

		if (TF__UNLIKELY(wc[i].status != TF_WC_SUCCESS)) {
			err++;
			if (qp)
				count_wc_err(qp, &wc[i]);
		}
		if (!qp)
			continue;
		if (wc[i].opcode & TF_WC_RECV)
			TF_STAT_ADD_OWNED(qp, recv_completed, 1);
		else
			TF_STAT_ADD_OWNED(qp, send_completed, 1);
	}
	TF_STAT_ADD_OWNED(cq, cqe_ok, (uint64_t)n - err);
	if (TF__UNLIKELY(err))
		TF_STAT_ADD_OWNED(cq, cqe_err, err);
}

int tf_cq_poll(tf_cq_t *cq, int n, struct tf_wc *wc)
{
	int ret;

	if (n <= 0 || !wc)
		return n == 0 ? 0 : -EINVAL;
	ret = OPS(cq->ctx)->cq_poll(cq, n, wc);
	if (ret > 0)
		count_wcs(cq, wc, ret);
	return ret;
}

int tf_cq_fd(tf_cq_t *cq)
{
	return OPS(cq->ctx)->cq_fd(cq);
}

int tf_cq_arm(tf_cq_t *cq)
{
	return OPS(cq->ctx)->cq_arm(cq);
}

/*
 * Busy-poll first (TOLLFREE_POLL_SPIN_US): a wakeup across cores costs
 * tens of microseconds on the machines we target, more than most
 * operations take.  Then arm, look once more, and sleep on the fd for the
 * rest of the timeout: an armed CQ's fd becomes readable when a completion
 * arrives, and the providers make the progress that produces one while it
 * is armed (the soft provider's helper thread), so no timer slices the
 * sleep.  A provider without an fd is polled every millisecond.
 */
int tf_cq_wait(tf_cq_t *cq, int n, struct tf_wc *wc, int timeout_ms)
{
	uint64_t start = tf__now_ns(), now, yielded = start;
	uint64_t spin_ns = cq->ctx->cfg.poll_spin_us * 1000ull;
	uint64_t yield_ns = cq->ctx->cfg.poll_spin_yield_us * 1000ull;
	uint64_t limit_ns =
		timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull;
	int fd = -1, ret;

	for (;;) {
		ret = tf_cq_poll(cq, n, wc);
		if (ret)
			return ret;
		now = tf__now_ns();
		if (now - start >= limit_ns)
			return 0;
		if (now - start < spin_ns) {
			tf__spin_pause(now, yield_ns, &yielded);
			continue;
		}
		/* About to sleep: answer a `tollfree-info -s` reader first (a
		 * NULL test unless stats are published). */
		tf__stats_check(cq->ctx);
		if (fd < 0) {
			fd = tf_cq_fd(cq);
			if (fd < 0)
				fd = -2; /* no fd: sleep-poll */
		}
		if (fd >= 0) {
			struct pollfd pfd = {.fd = fd, .events = POLLIN};

			ret = tf_cq_arm(cq);
			if (ret < 0)
				return ret;
			ret = tf_cq_poll(cq, n, wc);
			if (ret)
				return ret;
			now = tf__now_ns();
			if (now - start >= limit_ns)
				return 0;
			poll(&pfd, 1,
			     timeout_ms < 0 ? -1
					    : (int)((limit_ns - (now - start) +
						     999999) /
						    1000000));
		} else {
			/* No fd: sleep a 1 ms slice between polls. */
			poll(NULL, 0, 1);
		}
	}
}

/* ------------------------------------------------------------- QP */

static int qp_attr_init(struct tf_pd *pd, const tf_qp_params_t *p,
			struct tf_qp *attr)
{
	const struct tf_config *cfg = &pd->ctx->cfg;

	memset(attr, 0, sizeof(*attr));
	if (!p || !p->send_cq || !p->recv_cq)
		return -EINVAL;
	if (p->send_cq->ctx != pd->ctx || p->recv_cq->ctx != pd->ctx)
		return -EINVAL;
	attr->pd = pd;
	attr->send_cq = p->send_cq;
	attr->recv_cq = p->recv_cq;
	attr->max_send_wr = (p->field_mask & TF_QP_PARAM_MAX_SEND_WR)
				    ? p->max_send_wr
				    : 256;
	attr->max_recv_wr = (p->field_mask & TF_QP_PARAM_MAX_RECV_WR)
				    ? p->max_recv_wr
				    : 256;
	attr->max_sge = (p->field_mask & TF_QP_PARAM_MAX_SGE) ? p->max_sge : 4;
	attr->max_inline_data = (p->field_mask & TF_QP_PARAM_MAX_INLINE)
					? p->max_inline_data
					: 256;
	attr->access =
		(p->field_mask & TF_QP_PARAM_ACCESS)
			? p->access
			: (TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE |
			   TF_ACCESS_REMOTE_ATOMIC);
	attr->rnr_retry =
		(p->field_mask & TF_QP_PARAM_RNR_RETRY) ? p->rnr_retry : 7;
	attr->timeout_ms = (p->field_mask & TF_QP_PARAM_TIMEOUT)
				   ? p->timeout_ms
				   : (uint32_t)cfg->qp_timeout_ms;
	if (!attr->max_send_wr || !attr->max_recv_wr || !attr->max_sge ||
	    attr->max_send_wr > cfg->qp_max_wr ||
	    attr->max_recv_wr > cfg->qp_max_wr || attr->max_sge > 64 ||
	    attr->max_inline_data > 65536 || attr->rnr_retry > 7 ||
	    !attr->timeout_ms ||
	    (attr->access &
	     ~(unsigned)(TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE |
			 TF_ACCESS_REMOTE_ATOMIC)))
		return -EINVAL;
	return 0;
}

int tf_qp_create(tf_pd_t *pd, const tf_qp_params_t *params, tf_qp_t **qp_p)
{
	struct tf_qp attr, *qp;
	int ret;

	if (!pd || !qp_p)
		return -EINVAL;
	ret = qp_attr_init(pd, params, &attr);
	if (ret) {
		tf_log_debug("core", "qp_create: invalid parameters");
		return ret;
	}
	ret = OPS(pd->ctx)->qp_create(pd, &attr, &qp);
	if (ret)
		return ret;
	qp->pd = pd;
	qp->send_cq = attr.send_cq;
	qp->recv_cq = attr.recv_cq;
	atomic_fetch_add(&pd->refs, 1);
	atomic_fetch_add(&attr.send_cq->refs, 1);
	atomic_fetch_add(&attr.recv_cq->refs, 1);
	obj_link(pd->ctx, &pd->ctx->live_qps, &qp->ctx_link);
	atomic_fetch_add(&pd->ctx->n_qp, 1);
	TF_STAT_ADD(pd->ctx, qp_created, 1);
	*qp_p = qp;
	return 0;
}

int tf_qp_destroy(tf_qp_t *qp)
{
	struct tf__obj_totals t;
	struct tf_cq *scq, *rcq;
	struct tf_pd *pd;
	int ret;

	if (!qp)
		return 0;
	pd = qp->pd;
	scq = qp->send_cq;
	rcq = qp->recv_cq;
	qp_retire(pd->ctx, qp, &t);
	ret = OPS(pd->ctx)->qp_destroy(qp);
	if (ret) {
		obj_unretire(pd->ctx, &pd->ctx->live_qps, &qp->ctx_link, &t);
		return ret;
	}
	atomic_fetch_sub(&pd->refs, 1);
	atomic_fetch_sub(&scq->refs, 1);
	atomic_fetch_sub(&rcq->refs, 1);
	atomic_fetch_sub(&pd->ctx->n_qp, 1);
	return 0;
}

int tf_qp_get_addr(tf_qp_t *qp, void *buf, size_t *len_p)
{
	if (!qp || !buf || !len_p)
		return -EINVAL;
	return OPS(qp->pd->ctx)->qp_get_addr(qp, buf, len_p);
}

int tf_qp_connect(tf_qp_t *qp, const void *addr, size_t len)
{
	if (!qp || !addr)
		return -EINVAL;
	if (!len || len > TF_QP_ADDR_MAX)
		return -TF_EWIRE;
	return OPS(qp->pd->ctx)->qp_connect(qp, addr, len);
}

enum tf_qp_state tf_qp_state(tf_qp_t *qp)
{
	/* A provider progress thread may move the QP to error meanwhile. */
	return __atomic_load_n(&qp->state, __ATOMIC_RELAXED);
}

int tf_qp_set_error(tf_qp_t *qp)
{
	return OPS(qp->pd->ctx)->qp_set_error(qp);
}

int tf_qp_reset(tf_qp_t *qp)
{
	if (!qp)
		return -EINVAL;
	return OPS(qp->pd->ctx)->qp_reset(qp);
}

uint32_t tf_qp_num(const tf_qp_t *qp)
{
	return qp->qpn;
}

int tf_post_send(tf_qp_t *qp, struct tf_send_wr *wr,
		 struct tf_send_wr **bad_wr_p)
{
	struct tf_send_wr *bad = NULL;
	uint64_t n;
	int ret;

	ret = OPS(qp->pd->ctx)->post_send(qp, wr, &bad);
	if (TF__LIKELY(ret >= 0)) {
		n = (uint64_t)ret;
		ret = 0;
		bad = NULL;
	} else {
		/* Error path: the WRs before the bad one were posted. */
		n = 0;
		for (struct tf_send_wr *w = wr; w && w != bad; w = w->next)
			n++;
	}
	TF_STAT_ADD_OWNED(qp, send_posted, n);
	if (bad_wr_p)
		*bad_wr_p = bad;
	return ret;
}

int tf_post_recv(tf_qp_t *qp, struct tf_recv_wr *wr,
		 struct tf_recv_wr **bad_wr_p)
{
	struct tf_recv_wr *bad = NULL;
	uint64_t n;
	int ret;

	ret = OPS(qp->pd->ctx)->post_recv(qp, wr, &bad);
	if (TF__LIKELY(ret >= 0)) {
		n = (uint64_t)ret;
		ret = 0;
		bad = NULL;
	} else {
		n = 0;
		for (struct tf_recv_wr *w = wr; w && w != bad; w = w->next)
			n++;
	}
	TF_STAT_ADD_OWNED(qp, recv_posted, n);
	if (bad_wr_p)
		*bad_wr_p = bad;
	return ret;
}

#define QLOAD(_f) atomic_load_explicit(&qp->_f, memory_order_relaxed)

int tf_qp_query_stats(tf_qp_t *qp, tf_qp_stats_t *s)
{
	if (!qp || !s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->send_posted = QLOAD(send_posted);
	s->recv_posted = QLOAD(recv_posted);
	s->send_completed = QLOAD(send_completed);
	s->recv_completed = QLOAD(recv_completed);
	s->errors = QLOAD(send_errors) + QLOAD(recv_errors);
	s->flushed = QLOAD(send_flushed) + QLOAD(recv_flushed);
	s->rnr_retries = QLOAD(rnr_retries);
	s->bytes_out = QLOAD(bytes_out);
	s->bytes_in = QLOAD(bytes_in);
	return 0;
}
