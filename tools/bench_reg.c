/* SPDX-License-Identifier: MIT */
/*
 * bench_reg.c - tollfree-bench reg: the registration-side operations timed
 * one at a time (registration, deregistration, memory windows, the
 * registration cache and the pool), in one process with one QP pair, so
 * that registration cost is reported apart from transfer cost.  Each row
 * comes from a row source (reg_sources[]).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <tollfree/tollfree.h>

#include "bench.h"

struct reg_env {
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp_a, *qp_b; /* connected to each other */
	/* The per-size buffer, pages touched. */
	uint8_t *buf;
	size_t buf_len;
	/* Per-source state. */
	tf_mr_t *mr;
	tf_mw_t *mw;
	tf_rcache_t *rc;
	tf_pool_t *pool;
	uint8_t *miss_buf; /* cache_miss: miss_n fresh buffers */
	size_t miss_len;
	unsigned miss_n;
	/* Cost of one pair of clock reads, subtracted from batched rows. */
	double timer_ns;
};

/*
 * A row source: one operation, timed once per call of @sample, which
 * returns the nanoseconds of that one operation.  @setup and @teardown run
 * once per size around the samples.  A source whose setup returns
 * -EOPNOTSUPP is reported as skipped.  New rows (pool, cache) are new
 * entries in reg_sources[].
 */
struct reg_source {
	const char *op;
	const char *title;
	bool sized; /* one row per size; else a single row, size 0 */
	int (*setup)(struct reg_env *e, size_t size);
	int (*sample)(struct reg_env *e, size_t size, uint64_t *ns_p);
	void (*teardown)(struct reg_env *e);
};

#define REG_ACCESS \
	(TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE | TF_ACCESS_REMOTE_READ)

static int reg_check(int ret, const char *what, size_t size)
{
	if (ret)
		fail("%s of %zu bytes: %s%s", what, size, tf_strerror(ret),
		     ret == -ENOMEM || ret == -EAGAIN
			     ? " (check RLIMIT_MEMLOCK: ulimit -l)"
			     : "");
	return ret;
}

static int src_reg(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_mr_t *mr;
	uint64_t t0 = now_ns();
	int ret = tf_mr_reg(e->pd, e->buf, size, REG_ACCESS, &mr);

	*ns_p = now_ns() - t0;
	if (reg_check(ret, "tf_mr_reg", size))
		return ret;
	return reg_check(tf_mr_dereg(mr), "tf_mr_dereg", size);
}

static int src_dereg(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_mr_t *mr;
	uint64_t t0;
	int ret = tf_mr_reg(e->pd, e->buf, size, REG_ACCESS, &mr);

	if (reg_check(ret, "tf_mr_reg", size))
		return ret;
	t0 = now_ns();
	ret = tf_mr_dereg(mr);
	*ns_p = now_ns() - t0;
	return reg_check(ret, "tf_mr_dereg", size);
}

/* Registration of memory never touched: the registration itself faults
 * every page in, which is what a first-time registration of a fresh
 * allocation pays. */
static int src_reg_cold(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_mr_t *mr;
	uint64_t t0;
	void *p;
	int ret;

	p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fail("mmap of %zu bytes: %m", size);
		return -ENOMEM;
	}
	t0 = now_ns();
	ret = tf_mr_reg(e->pd, p, size, REG_ACCESS, &mr);
	*ns_p = now_ns() - t0;
	if (!reg_check(ret, "tf_mr_reg (cold)", size))
		ret = reg_check(tf_mr_dereg(mr), "tf_mr_dereg", size);
	munmap(p, size);
	return ret;
}

static int src_mw_alloc_setup(struct reg_env *e, size_t size)
{
	tf_mw_t *mw;
	int ret = tf_mw_alloc(e->pd, &mw);

	(void)size;
	if (ret == -EOPNOTSUPP)
		return ret;
	if (ret) {
		fail("tf_mw_alloc: %s", tf_strerror(ret));
		return ret;
	}
	tf_mw_dealloc(mw);
	return 0;
}

static int src_mw_alloc(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_mw_t *mw;
	uint64_t t0 = now_ns();
	int ret = tf_mw_alloc(e->pd, &mw);

	(void)size;
	*ns_p = now_ns() - t0;
	if (ret) {
		fail("tf_mw_alloc: %s", tf_strerror(ret));
		return ret;
	}
	tf_mw_dealloc(mw);
	return 0;
}

/* Windows over a region of the size under test, bound on qp_a. */
static int src_mw_setup(struct reg_env *e, size_t size)
{
	int ret = tf_mw_alloc(e->pd, &e->mw);

	if (ret == -EOPNOTSUPP)
		return ret;
	if (ret) {
		fail("tf_mw_alloc: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_mr_reg(e->pd, e->buf, size, REG_ACCESS | TF_ACCESS_MW_BIND,
			&e->mr);
	if (reg_check(ret, "tf_mr_reg (MW_BIND)", size)) {
		tf_mw_dealloc(e->mw);
		e->mw = NULL;
	}
	return ret;
}

static void src_mw_teardown(struct reg_env *e)
{
	tf_mw_dealloc(e->mw);
	e->mw = NULL;
	if (tf_mr_dereg(e->mr))
		fail("tf_mr_dereg after the MW rows failed");
	e->mr = NULL;
}

static int mw_bind(struct reg_env *e, size_t size)
{
	struct tf_send_wr wr = {
		.opcode = TF_WR_BIND_MW,
		.send_flags = TF_SEND_SIGNALED,
	};
	int ret;

	wr.wr.bind_mw.mw = e->mw;
	wr.wr.bind_mw.mr = e->mr;
	wr.wr.bind_mw.addr = (uintptr_t)e->buf;
	wr.wr.bind_mw.length = size;
	wr.wr.bind_mw.access = TF_ACCESS_REMOTE_READ | TF_ACCESS_REMOTE_WRITE;
	ret = tf_post_send(e->qp_a, &wr, NULL);
	if (ret) {
		fail("posting BIND_MW: %s", tf_strerror(ret));
		return ret;
	}
	return wait_one(e->cq, "BIND_MW");
}

static int mw_inval(struct reg_env *e)
{
	struct tf_send_wr wr = {
		.opcode = TF_WR_LOCAL_INV,
		.send_flags = TF_SEND_SIGNALED,
		.invalidate_rkey = tf_mw_rkey(e->mw),
	};
	int ret = tf_post_send(e->qp_a, &wr, NULL);

	if (ret) {
		fail("posting LOCAL_INV: %s", tf_strerror(ret));
		return ret;
	}
	return wait_one(e->cq, "LOCAL_INV");
}

static int src_mw_bind(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	uint64_t t0 = now_ns();
	int ret = mw_bind(e, size);

	*ns_p = now_ns() - t0;
	return ret ? ret : mw_inval(e);
}

static int src_mw_inval(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	uint64_t t0;
	int ret = mw_bind(e, size);

	if (ret)
		return ret;
	t0 = now_ns();
	ret = mw_inval(e);
	*ns_p = now_ns() - t0;
	return ret;
}

/*
 * Batched rows: an operation that costs tens of nanoseconds cannot be
 * timed one at a time (a clock read costs about as much), so a sample is
 * a loop of REG_BATCH operations between two clock reads; the cost of the
 * clock reads (measured at start-up) is subtracted and the rest divided by
 * the batch.
 */
#define REG_BATCH 256
/* cache_miss registers: fewer per sample, each on a buffer the cache has
 * not seen since the last sample (the cache is invalidated between); one
 * per sample from 1 MiB on, where the clock reads no longer matter. */
#define REG_MISS_BATCH 8

static double batch_ns(const struct reg_env *e, uint64_t t0, uint64_t t1,
		       unsigned n)
{
	double ns = (double)(t1 - t0) - e->timer_ns;

	return ns > 0 ? ns / n : 0;
}

static int src_rcache_setup(struct reg_env *e, size_t size)
{
	tf_rcache_params_t p = {
		.field_mask = TF_RCACHE_PARAM_MONITOR,
		/* The rows time lookups and registrations, not the
		 * monitor; the miss row invalidates explicitly. */
		.monitor = TF_RCACHE_MONITOR_NONE,
	};
	int ret = tf_rcache_create(e->pd, &p, &e->rc);

	if (ret) {
		fail("tf_rcache_create: %s", tf_strerror(ret));
		return ret;
	}
	e->miss_n = size >= (1u << 20) ? 1 : REG_MISS_BATCH;
	e->miss_len = size * e->miss_n;
	e->miss_buf = mmap(NULL, e->miss_len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (e->miss_buf == MAP_FAILED) {
		e->miss_buf = NULL;
		tf_rcache_destroy(e->rc);
		e->rc = NULL;
		fail("mmap of %zu bytes: %m", e->miss_len);
		return -ENOMEM;
	}
	memset(e->miss_buf, 1, e->miss_len);
	return 0;
}

static void src_rcache_teardown(struct reg_env *e)
{
	tf_rcache_destroy(e->rc);
	e->rc = NULL;
	munmap(e->miss_buf, e->miss_len);
	e->miss_buf = NULL;
}

/* A hit: the same buffer every time (the first get of the row, a miss,
 * happens during warm-up). */
static int src_cache_hit(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_rcache_reg_t *reg;
	uint64_t t0, t1;
	int ret = 0;

	t0 = now_ns();
	for (unsigned i = 0; i < REG_BATCH && !ret; i++) {
		ret = tf_rcache_get(e->rc, e->buf, size, REG_ACCESS, &reg);
		if (!ret)
			ret = tf_rcache_put(e->rc, reg);
	}
	t1 = now_ns();
	*ns_p = (uint64_t)(batch_ns(e, t0, t1, REG_BATCH) + 0.5);
	return reg_check(ret, "tf_rcache_get/put (hit)", size);
}

/* A miss: each get on a buffer the cache does not hold, so it registers
 * (the put keeps the region cached; the whole set is invalidated after
 * the sample, outside the timing). */
static int src_cache_miss(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_rcache_reg_t *reg;
	uint64_t t0, t1;
	int ret = 0;

	t0 = now_ns();
	for (unsigned i = 0; i < e->miss_n && !ret; i++) {
		ret = tf_rcache_get(e->rc, e->miss_buf + i * size, size,
				    REG_ACCESS, &reg);
		if (!ret)
			ret = tf_rcache_put(e->rc, reg);
	}
	t1 = now_ns();
	*ns_p = (uint64_t)(batch_ns(e, t0, t1, e->miss_n) + 0.5);
	if (reg_check(ret, "tf_rcache_get/put (miss)", size))
		return ret;
	ret = tf_rcache_invalidate(e->rc, e->miss_buf, e->miss_len);
	return ret < 0 ? reg_check(ret, "tf_rcache_invalidate", size) : 0;
}

/* Slices up to the pool's largest class; a larger size is skipped. */
static int src_pool_setup(struct reg_env *e, size_t size)
{
	tf_slice_t sl;
	int ret = tf_pool_create(e->pd, NULL, &e->pool);

	if (ret) {
		fail("tf_pool_create: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_pool_rent(e->pool, size, &sl);
	if (ret == -EINVAL) {
		tf_pool_destroy(e->pool);
		e->pool = NULL;
		return -ERANGE;
	}
	if (!ret)
		ret = tf_pool_return(e->pool, &sl);
	if (ret) {
		fail("tf_pool_rent of %zu bytes: %s", size, tf_strerror(ret));
		tf_pool_destroy(e->pool);
		e->pool = NULL;
	}
	return ret;
}

static void src_pool_teardown(struct reg_env *e)
{
	tf_pool_destroy(e->pool);
	e->pool = NULL;
}

static int src_pool(struct reg_env *e, size_t size, uint64_t *ns_p)
{
	tf_slice_t sl;
	uint64_t t0, t1;
	int ret = 0;

	t0 = now_ns();
	for (unsigned i = 0; i < REG_BATCH && !ret; i++) {
		ret = tf_pool_rent(e->pool, size, &sl);
		if (!ret)
			ret = tf_pool_return(e->pool, &sl);
	}
	t1 = now_ns();
	*ns_p = (uint64_t)(batch_ns(e, t0, t1, REG_BATCH) + 0.5);
	if (ret)
		fail("tf_pool_rent/return of %zu bytes: %s", size,
		     tf_strerror(ret));
	return ret;
}

static const struct reg_source reg_sources[] = {
	{"reg", "reg: tf_mr_reg, pages already touched", true, NULL, src_reg,
	 NULL},
	{"dereg", "dereg: tf_mr_dereg", true, NULL, src_dereg, NULL},
	{"reg_cold", "reg_cold: tf_mr_reg of a fresh, untouched mmap", true,
	 NULL, src_reg_cold, NULL},
	{"mw_alloc", "mw_alloc: tf_mw_alloc (size-independent)", false,
	 src_mw_alloc_setup, src_mw_alloc, NULL},
	{"mw_bind", "mw_bind: post BIND_MW + its completion", true,
	 src_mw_setup, src_mw_bind, src_mw_teardown},
	{"mw_inval", "mw_inval: post LOCAL_INV + its completion", true,
	 src_mw_setup, src_mw_inval, src_mw_teardown},
	{"cache_hit",
	 "cache_hit: tf_rcache_get + put, same buffer (per op, batched)", true,
	 src_rcache_setup, src_cache_hit, src_rcache_teardown},
	{"cache_miss",
	 "cache_miss: tf_rcache_get + put, buffer not cached (per op, "
	 "batched)",
	 true, src_rcache_setup, src_cache_miss, src_rcache_teardown},
	{"pool_rent_return",
	 "pool_rent_return: tf_pool_rent + tf_pool_return (per op, batched)",
	 true, src_pool_setup, src_pool, src_pool_teardown},
};

/* Iterations for a row: at most -n, and few enough that one row registers
 * at most REG_BYTE_BUDGET bytes (16 MiB rows would otherwise take long),
 * but never fewer than REG_MIN_ITERS. */
#define REG_BYTE_BUDGET (1ull << 30)
#define REG_MIN_ITERS	16u

static unsigned reg_iters(const struct bench_opts *o, size_t size)
{
	uint64_t cap = size ? REG_BYTE_BUDGET / size : o->iters;

	if (cap < REG_MIN_ITERS)
		cap = REG_MIN_ITERS;
	return o->iters < cap ? o->iters : (unsigned)cap;
}

/* The median cost of two back-to-back clock reads. */
static double timer_cost_ns(void)
{
	double v[1001];

	for (size_t i = 0; i < ARRAY_SIZE(v); i++) {
		uint64_t t0 = now_ns();

		v[i] = (double)(now_ns() - t0);
	}
	return median_of(v, ARRAY_SIZE(v));
}

static int reg_setup(struct reg_env *e, const struct bench_opts *o)
{
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 256};
	tf_qp_params_t qpp;
	uint8_t addr_a[TF_QP_ADDR_MAX], addr_b[TF_QP_ADDR_MAX];
	size_t len_a = sizeof(addr_a), len_b = sizeof(addr_b);
	int ret;

	ret = bench_opts_open_ctx(o, &e->ctx);
	if (ret)
		return ret;
	ret = tf_pd_create(e->ctx, &e->pd);
	if (ret) {
		fail("creating a PD: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_cq_create(e->ctx, &cqp, &e->cq);
	if (ret) {
		fail("creating a CQ: %s", tf_strerror(ret));
		return ret;
	}
	memset(&qpp, 0, sizeof(qpp));
	qpp.send_cq = e->cq;
	qpp.recv_cq = e->cq;
	ret = tf_qp_create(e->pd, &qpp, &e->qp_a);
	if (!ret)
		ret = tf_qp_create(e->pd, &qpp, &e->qp_b);
	if (ret) {
		fail("creating a QP: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_qp_get_addr(e->qp_a, addr_a, &len_a);
	if (!ret)
		ret = tf_qp_get_addr(e->qp_b, addr_b, &len_b);
	if (ret) {
		fail("getting a QP address: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_qp_connect(e->qp_a, addr_b, len_b);
	if (!ret)
		ret = tf_qp_connect(e->qp_b, addr_a, len_a);
	if (ret) {
		fail("connecting the QPs: %s", tf_strerror(ret));
		return ret;
	}
	return 0;
}

static void reg_teardown(struct reg_env *e)
{
	tf_qp_destroy(e->qp_a);
	tf_qp_destroy(e->qp_b);
	if (tf_cq_destroy(e->cq))
		fail("destroying the CQ failed");
	if (tf_pd_destroy(e->pd))
		fail("destroying the PD failed");
	tf_context_close(e->ctx);
}

/* Run one source at one size and append its row.  *@skipped is set when
 * the provider cannot run the source, which is then reported once. */
static int reg_row(struct reg_env *e, const struct reg_source *src, size_t size,
		   const struct bench_opts *o, struct report *r,
		   double *samples, bool *skipped)
{
	unsigned iters = reg_iters(o, size);
	unsigned warm = o->warmup_set ? o->warmup
				      : (iters / 10 < 2	    ? 2
					 : iters / 10 > 100 ? 100
							    : iters / 10);
	struct bench_row row = {
		.op = src->op,
		.title = src->title,
		.size = size,
		.iters = iters,
	};
	unsigned i;
	int ret = 0;

	if (*skipped)
		return 0;
	if (src->setup) {
		ret = src->setup(e, size);
		if (ret == -ERANGE) {
			printf("%s%s: %zu bytes skipped: larger than the "
			       "largest slice\n",
			       o->cm.csv ? "# " : "", src->op, size);
			return 0;
		}
		if (ret == -EOPNOTSUPP) {
			*skipped = true;
			printf("%s%s: skipped: %s\n", o->cm.csv ? "# " : "",
			       src->op, tf_strerror(ret));
			return 0;
		}
		if (ret)
			return ret;
	}
	for (i = 0; i < warm + iters; i++) {
		uint64_t ns;

		ret = src->sample(e, size, &ns);
		if (ret)
			break;
		if (i >= warm)
			samples[i - warm] = (double)ns;
	}
	if (src->teardown)
		src->teardown(e);
	if (ret)
		return ret;
	stats_compute(samples, iters, &row.st);
	ret = report_add(r, &row);
	if (ret)
		fail("out of memory");
	return ret;
}

static void usage_reg(FILE *f)
{
	fprintf(f,
		"usage: %s reg [-s SIZES] [-n ITERS] [-w WARMUP] "
		"[--provider P] [--device D]\n"
		"          [--csv] [--json FILE]\n"
		"  defaults: sizes 4K,64K,1M,16M, 1000 iterations (at most "
		"1 GiB registered per row, at least %u)\n",
		prog, REG_MIN_ITERS);
}

int cmd_reg(int argc, char **argv)
{
	struct bench_opts o = {
		.iters = 1000,
		.sizes = {4096, 65536, 1 << 20, 16 << 20},
		.nsizes = 4,
	};
	bool skipped[ARRAY_SIZE(reg_sources)] = {false};
	struct reg_env e;
	struct report r;
	double *samples = NULL;
	size_t k, s;
	int ret;

	if (bench_parse_sized(argc, argv, &o, NULL, usage_reg))
		return 2;
	memset(&e, 0, sizeof(e));
	memset(&r, 0, sizeof(r));
	r.bench = "reg";
	samples = calloc(o.iters, sizeof(*samples));
	if (!samples) {
		fail("out of memory");
		return 1;
	}
	ret = reg_setup(&e, &o);
	if (ret)
		goto out;
	e.timer_ns = timer_cost_ns();
	report_header(&r, e.ctx, o.cm.transport, "(one process, one QP pair)",
		      o.cm.csv ? OUT_CSV : OUT_TEXT);
	fflush(stdout);

	/* Size-independent rows first, then every size for each source,
	 * so that each source's rows form one table. */
	for (s = 0; s < ARRAY_SIZE(reg_sources); s++) {
		if (reg_sources[s].sized)
			continue;
		ret = reg_row(&e, &reg_sources[s], 0, &o, &r, samples,
			      &skipped[s]);
		if (ret)
			goto out;
	}
	for (k = 0; k < o.nsizes; k++) {
		size_t size = o.sizes[k];

		e.buf_len = size;
		e.buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (e.buf == MAP_FAILED) {
			e.buf = NULL;
			fail("mmap of %zu bytes: %m", size);
			ret = -ENOMEM;
			goto out;
		}
		/* Touched: "warm" rows measure registration, not faults. */
		memset(e.buf, 1, size);
		for (s = 0; s < ARRAY_SIZE(reg_sources); s++) {
			if (!reg_sources[s].sized)
				continue;
			ret = reg_row(&e, &reg_sources[s], size, &o, &r,
				      samples, &skipped[s]);
			if (ret)
				goto out;
		}
		munmap(e.buf, size);
		e.buf = NULL;
	}
	/* Rows were produced size by size; group them by source. */
	{
		struct bench_row *sorted = calloc(r.nrows, sizeof(*sorted));
		size_t n = 0, i;

		if (r.nrows && !sorted) {
			fail("out of memory");
			ret = -ENOMEM;
			goto out;
		}
		for (s = 0; s < ARRAY_SIZE(reg_sources); s++)
			for (i = 0; i < r.nrows; i++)
				if (!strcmp(r.rows[i].op, reg_sources[s].op))
					sorted[n++] = r.rows[i];
		free(r.rows);
		r.rows = sorted;
		r.nrows = r.cap = n;
	}
	report_emit(&r, o.cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	if (o.cm.json && report_write_json(&r, o.cm.json))
		ret = -EIO;
out:
	if (e.buf)
		munmap(e.buf, e.buf_len);
	if (e.ctx)
		reg_teardown(&e);
	free(samples);
	free(r.rows);
	return ret ? 1 : 0;
}
