/* SPDX-License-Identifier: MIT */
/*
 * context.c - provider selection, the -EOPNOTSUPP default ops, contexts,
 * capabilities and statistics.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "provider.h"
#include "stats_int.h"

/* Built-in providers in "auto" preference order: a real device first. */
static const struct tf_provider_ops *const providers[] = {
#ifdef TF_HAVE_VERBS
	&tf_verbs_provider_ops,
#endif
	&tf_soft_provider_ops,
};
#define N_PROVIDERS (sizeof(providers) / sizeof(providers[0]))

/* ------------------------------------------------------ default ops */

static int def_probe(const struct tf_config *cfg)
{
	(void)cfg;
	return 0;
}
static int def_list_devices(const struct tf_config *cfg,
			    void (*fn)(const char *, const char *, void *),
			    void *arg)
{
	(void)cfg, (void)fn, (void)arg;
	return -EOPNOTSUPP;
}
static int def_context_open(const struct tf_config *cfg,
			    struct tf_context **ctx_p)
{
	(void)cfg, (void)ctx_p;
	return -EOPNOTSUPP;
}
static void def_context_close(struct tf_context *ctx)
{
	(void)ctx;
}
static int def_query_caps(struct tf_context *ctx, tf_caps_t *caps)
{
	(void)ctx, (void)caps;
	return -EOPNOTSUPP;
}
static int def_progress(struct tf_context *ctx)
{
	(void)ctx;
	return 0;
}
static int def_progress_fd(struct tf_context *ctx)
{
	(void)ctx;
	return -EOPNOTSUPP;
}
static int def_mem_alloc(struct tf_context *ctx, size_t size, void **addr_p)
{
	(void)ctx, (void)size, (void)addr_p;
	return -EOPNOTSUPP;
}
static void def_mem_free(struct tf_context *ctx, void *addr, size_t size)
{
	(void)ctx, (void)addr, (void)size;
}
static int def_pd_alloc(struct tf_context *ctx, struct tf_pd **pd_p)
{
	(void)ctx, (void)pd_p;
	return -EOPNOTSUPP;
}
static int def_pd_free(struct tf_pd *pd)
{
	(void)pd;
	return -EOPNOTSUPP;
}
static int def_mr_reg(struct tf_pd *pd, void *addr, size_t length,
		      unsigned access, struct tf_mr **mr_p)
{
	(void)pd, (void)addr, (void)length, (void)access, (void)mr_p;
	return -EOPNOTSUPP;
}
static int def_mr_dereg(struct tf_mr *mr)
{
	(void)mr;
	return -EOPNOTSUPP;
}
static int def_mw_alloc(struct tf_pd *pd, struct tf_mw **mw_p)
{
	(void)pd, (void)mw_p;
	return -EOPNOTSUPP;
}
static int def_mw_dealloc(struct tf_mw *mw)
{
	(void)mw;
	return -EOPNOTSUPP;
}
static int def_cq_create(struct tf_context *ctx, uint32_t depth,
			 struct tf_cq **cq_p)
{
	(void)ctx, (void)depth, (void)cq_p;
	return -EOPNOTSUPP;
}
static int def_cq_destroy(struct tf_cq *cq)
{
	(void)cq;
	return -EOPNOTSUPP;
}
static int def_cq_poll(struct tf_cq *cq, int n, struct tf_wc *wc)
{
	(void)cq, (void)n, (void)wc;
	return -EOPNOTSUPP;
}
static int def_cq_fd(struct tf_cq *cq)
{
	(void)cq;
	return -EOPNOTSUPP;
}
static int def_cq_arm(struct tf_cq *cq)
{
	(void)cq;
	return -EOPNOTSUPP;
}
static int def_qp_create(struct tf_pd *pd, const struct tf_qp *attr,
			 struct tf_qp **qp_p)
{
	(void)pd, (void)attr, (void)qp_p;
	return -EOPNOTSUPP;
}
static int def_qp_destroy(struct tf_qp *qp)
{
	(void)qp;
	return -EOPNOTSUPP;
}
static int def_qp_get_addr(struct tf_qp *qp, void *buf, size_t *len_p)
{
	(void)qp, (void)buf, (void)len_p;
	return -EOPNOTSUPP;
}
static int def_qp_connect(struct tf_qp *qp, const void *addr, size_t len)
{
	(void)qp, (void)addr, (void)len;
	return -EOPNOTSUPP;
}
static int def_qp_set_error(struct tf_qp *qp)
{
	(void)qp;
	return -EOPNOTSUPP;
}
static int def_qp_reset(struct tf_qp *qp)
{
	(void)qp;
	return -EOPNOTSUPP;
}
static int def_post_send(struct tf_qp *qp, struct tf_send_wr *wr,
			 struct tf_send_wr **bad_wr_p)
{
	(void)qp;
	if (bad_wr_p)
		*bad_wr_p = wr;
	return -EOPNOTSUPP;
}
static int def_post_recv(struct tf_qp *qp, struct tf_recv_wr *wr,
			 struct tf_recv_wr **bad_wr_p)
{
	(void)qp;
	if (bad_wr_p)
		*bad_wr_p = wr;
	return -EOPNOTSUPP;
}

static const struct tf_provider_ops default_ops = {
	.size = sizeof(struct tf_provider_ops),
	.name = "none",
	.probe = def_probe,
	.list_devices = def_list_devices,
	.context_open = def_context_open,
	.context_close = def_context_close,
	.query_caps = def_query_caps,
	.progress = def_progress,
	.progress_fd = def_progress_fd,
	.mem_alloc = def_mem_alloc,
	.mem_free = def_mem_free,
	.pd_alloc = def_pd_alloc,
	.pd_free = def_pd_free,
	.mr_reg = def_mr_reg,
	.mr_dereg = def_mr_dereg,
	.mw_alloc = def_mw_alloc,
	.mw_dealloc = def_mw_dealloc,
	.cq_create = def_cq_create,
	.cq_destroy = def_cq_destroy,
	.cq_poll = def_cq_poll,
	.cq_fd = def_cq_fd,
	.cq_arm = def_cq_arm,
	.qp_create = def_qp_create,
	.qp_destroy = def_qp_destroy,
	.qp_get_addr = def_qp_get_addr,
	.qp_connect = def_qp_connect,
	.qp_set_error = def_qp_set_error,
	.qp_reset = def_qp_reset,
	.post_send = def_post_send,
	.post_recv = def_post_recv,
};

/* Merge a provider's table over the defaults, slot by slot. */
static void fill_ops(struct tf_provider_ops *dst,
		     const struct tf_provider_ops *src)
{
	*dst = default_ops;
	dst->name = src->name;
#define FILL(_f)     \
	if (src->_f) \
		dst->_f = src->_f;
	FILL(probe)
	FILL(list_devices)
	FILL(context_open)
	FILL(context_close)
	FILL(query_caps)
	FILL(progress)
	FILL(progress_fd)
	FILL(mem_alloc)
	FILL(mem_free)
	FILL(pd_alloc)
	FILL(pd_free)
	FILL(mr_reg)
	FILL(mr_dereg)
	FILL(mw_alloc)
	FILL(mw_dealloc)
	FILL(cq_create)
	FILL(cq_destroy)
	FILL(cq_poll)
	FILL(cq_fd)
	FILL(cq_arm)
	FILL(qp_create)
	FILL(qp_destroy)
	FILL(qp_get_addr)
	FILL(qp_connect)
	FILL(qp_set_error)
	FILL(qp_reset)
	FILL(post_send)
	FILL(post_recv)
#undef FILL
}

static const struct tf_provider_ops *find_provider(const char *name)
{
	for (size_t i = 0; i < N_PROVIDERS; i++)
		if (!strcmp(providers[i]->name, name))
			return providers[i];
	return NULL;
}

int tf_provider_foreach(tf_provider_fn_t fn, void *arg)
{
	struct tf_config cfg;

	tf__config_get(&cfg);
	for (size_t i = 0; i < N_PROVIDERS; i++) {
		int avail = providers[i]->probe ? providers[i]->probe(&cfg) : 0;

		if (fn)
			fn(providers[i]->name, avail, arg);
	}
	return (int)N_PROVIDERS;
}

static int open_with(const struct tf_provider_ops *prov,
		     const struct tf_config *cfg, struct tf_context **ctx_p)
{
	struct tf_provider_ops *ops;
	struct tf_context *ctx = NULL;
	int ret;

	if (prov->size != sizeof(struct tf_provider_ops)) {
		tf_log_error("core", "provider %s: ops size %zu, expected %zu",
			     prov->name, prov->size,
			     sizeof(struct tf_provider_ops));
		return -TF_ENOPROVIDER;
	}
	ops = tf__malloc(sizeof(*ops));
	if (!ops)
		return -ENOMEM;
	fill_ops(ops, prov);
	ret = ops->context_open(cfg, &ctx);
	if (ret) {
		tf__free(ops);
		return ret;
	}
	ctx->ops = ops;
	ctx->prov_name = prov->name;
	ctx->cfg = *cfg;
	pthread_mutex_init(&ctx->obj_lock, NULL);
	ctx->live_qps.prev = ctx->live_qps.next = &ctx->live_qps;
	ctx->live_cqs.prev = ctx->live_cqs.next = &ctx->live_cqs;
	memset(&ctx->retired, 0, sizeof(ctx->retired));
	tf__stats_ctx_init(ctx);
	*ctx_p = ctx;
	return 0;
}

int tf_context_open(const tf_context_params_t *params, tf_context_t **ctx_p)
{
	const struct tf_provider_ops *prov;
	struct tf_config cfg;
	int ret;

	if (!ctx_p)
		return -EINVAL;
	tf__config_get(&cfg);
	if (params) {
		struct {
			uint64_t bit;
			const char *name;
			const char *val;
		} over[] = {
			{TF_CONTEXT_PARAM_PROVIDER, "PROVIDER",
			 params->provider},
			{TF_CONTEXT_PARAM_DEVICE, "DEVICE", params->device},
			{TF_CONTEXT_PARAM_TRANSPORT, "SOFT_TRANSPORT",
			 params->transport},
			{TF_CONTEXT_PARAM_TCP_ADDR, "SOFT_TCP_ADDR",
			 params->tcp_addr},
		};
		for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++) {
			if (!(params->field_mask & over[i].bit))
				continue;
			if (tf__config_set(&cfg, over[i].name, over[i].val)) {
				tf_log_error("core", "invalid %s parameter",
					     over[i].name);
				return -EINVAL;
			}
		}
	}

	if (strcmp(cfg.provider, "auto")) {
		prov = find_provider(cfg.provider);
		if (!prov) {
			tf_log_error("core", "provider '%s' is not built in",
				     cfg.provider);
			return -TF_ENOPROVIDER;
		}
		ret = open_with(prov, &cfg, ctx_p);
		if (ret)
			tf_log_error("core", "cannot open provider %s: %s",
				     prov->name, tf_strerror(ret));
		return ret;
	}
	for (size_t i = 0; i < N_PROVIDERS; i++) {
		prov = providers[i];
		if (!prov->probe || prov->probe(&cfg) <= 0)
			continue;
		ret = open_with(prov, &cfg, ctx_p);
		if (!ret)
			return 0;
		/* An invalid value (a transport, an MTU) is the caller's
		 * mistake, not a missing device: report it rather than
		 * hide it behind the next provider or -TF_ENOPROVIDER. */
		if (ret == -EINVAL) {
			tf_log_error("core", "cannot open provider %s: %s",
				     prov->name, tf_strerror(ret));
			return ret;
		}
		tf_log_info("core", "provider %s: %s, trying the next",
			    prov->name, tf_strerror(ret));
	}
	tf_log_error("core", "no usable provider");
	return -TF_ENOPROVIDER;
}

void tf_context_close(tf_context_t *ctx)
{
	struct tf_provider_ops *ops;

	if (!ctx)
		return;
	tf__stats_ctx_fini(ctx);
	if (ctx->n_qp || ctx->n_cq || ctx->n_mw || ctx->n_mr || ctx->n_pd)
		tf_log_warn("core",
			    "context closed with live objects: %ld qp, %ld cq, "
			    "%ld mw, %ld mr, %ld pd",
			    (long)ctx->n_qp, (long)ctx->n_cq, (long)ctx->n_mw,
			    (long)ctx->n_mr, (long)ctx->n_pd);
	pthread_mutex_destroy(&ctx->obj_lock);
	ops = ctx->ops;
	ops->context_close(ctx);
	tf__free(ops);
}

const char *tf_context_provider(const tf_context_t *ctx)
{
	return ctx->prov_name;
}

const char *tf_context_device(const tf_context_t *ctx)
{
	return ctx->device;
}

int tf_context_progress(tf_context_t *ctx)
{
	tf__stats_check(ctx);
	return ctx->ops->progress(ctx);
}

int tf_context_query_caps(tf_context_t *ctx, tf_caps_t *caps)
{
	int ret;

	if (!ctx || !caps)
		return -EINVAL;
	memset(caps, 0, sizeof(*caps));
	ret = ctx->ops->query_caps(ctx, caps);
	if (ret)
		return ret;
	snprintf(caps->provider, sizeof(caps->provider), "%s", ctx->prov_name);
	if (!caps->device[0])
		snprintf(caps->device, sizeof(caps->device), "%s", ctx->device);
	return 0;
}

#define LOAD(_f) atomic_load_explicit(&ctx->_f, memory_order_relaxed)

int tf_context_query_stats(tf_context_t *ctx, tf_context_stats_t *s)
{
	if (!ctx || !s)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->mr_reg = LOAD(mr_reg);
	s->mr_dereg = LOAD(mr_dereg);
	s->mr_reg_fail = LOAD(mr_reg_fail);
	s->pinned_bytes = LOAD(pinned_bytes);
	s->max_pinned = ctx->cfg.max_pinned;
	s->pinned_refused = LOAD(pinned_refused);
	s->mw_bind = LOAD(mw_bind);
	s->mw_inval = LOAD(mw_inval);
	s->qp_created = LOAD(qp_created);
	s->qp_errors = LOAD(qp_errors);
	s->remote_access_denied = LOAD(remote_access_denied);
	s->xlate_hits = LOAD(xlate_hits);
	s->xlate_misses = LOAD(xlate_misses);
	s->xlate_evictions = LOAD(xlate_evictions);
	s->cq_wakes_direct = LOAD(cq_wakes_direct);
	s->wake_fds = LOAD(wake_fds);
	s->queue_cache_bytes = LOAD(queue_cache_bytes);
	s->wakes_owed_paid = LOAD(wakes_owed_paid);
	tf__stats_objects(ctx, s);
	return 0;
}

int tf_mem_alloc(tf_context_t *ctx, size_t size, void **addr_p)
{
	if (!ctx || !size || !addr_p)
		return -EINVAL;
	return ctx->ops->mem_alloc(ctx, size, addr_p);
}

void tf_mem_free(tf_context_t *ctx, void *addr, size_t size)
{
	if (!ctx || !addr)
		return;
	ctx->ops->mem_free(ctx, addr, size);
}
