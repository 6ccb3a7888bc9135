/* SPDX-License-Identifier: MIT */
/*
 * bench_churn.c - tollfree-bench churn: what a neighbour's registration
 * churn does to a victim's latency on the same NIC.
 *
 * A victim does 1 KiB RDMA WRITEs (one QP pair inside one context, pages
 * spread over a 64-page working set on each side) and times each one; a
 * neighbour thread on the same context, the same "NIC", acquires and
 * releases memory at a fixed rate in one of these ways:
 *
 *   none     the neighbour is idle (baseline);
 *   direct   tf_mr_reg + tf_mr_dereg of its buffer every time;
 *   pool     tf_pool_rent + tf_pool_return (chunks registered once);
 *   cache    tf_rcache_get + tf_rcache_put (registered at the first get).
 *
 * On hardware, a registration writes translations into the NIC and evicts
 * others from its translation cache, so the victim's next transfers miss
 * and wait for a fetch over PCIe.  The soft provider MODELS that cache
 * (TOLLFREE_SOFT_XLATE_ENTRIES page translations, LRU, and a busy-wait of
 * TOLLFREE_SOFT_XLATE_MISS_NS per miss); this benchmark sets both through
 * setenv before the library reads its configuration (there is no context
 * parameter for them), and says in its output that the effect is a model.
 * Modes run round-robin in batches, so that drift hits them alike.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

enum nbr_mode {
	NBR_NONE,
	NBR_DIRECT,
	NBR_POOL,
	NBR_CACHE,
	NBR_COUNT,
	NBR_STOP = NBR_COUNT,
};

static const char *const nbr_names[NBR_COUNT] = {"none", "direct", "pool",
						 "cache"};
static const char *const nbr_titles[NBR_COUNT] = {
	"victim: 1 KiB RDMA WRITE, neighbour idle (baseline)",
	"victim: 1 KiB RDMA WRITE, neighbour registers + deregisters "
	"(direct)",
	"victim: 1 KiB RDMA WRITE, neighbour rents + returns pool slices",
	"victim: 1 KiB RDMA WRITE, neighbour gets + puts cached "
	"registrations",
};

#define VICTIM_PAGES 64
#define VICTIM_SIZE  1024
#define NBR_BUFS     4
#define PAGE	     4096

struct churn_opts {
	struct bench_common cm; /* its table has no --transport */
	unsigned samples, batch, rate, entries, miss_ns;
	uint64_t nbr_size;
	unsigned modes;
};

struct churn {
	const struct churn_opts *o;
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp_a, *qp_b;
	uint8_t *src, *dst;
	tf_mr_t *src_mr, *dst_mr;
	/* The neighbour's memory and machinery. */
	uint8_t *nbuf[NBR_BUFS];
	tf_pool_t *pool;
	tf_rcache_t *rc;
	pthread_t thr;
	bool thr_started;
	_Atomic int mode; /* enum nbr_mode */
	_Atomic uint64_t nbr_ops;
	_Atomic int nbr_err;
};

/* One acquisition and release of the neighbour's memory. */
static int nbr_op(struct churn *c, int mode, unsigned j)
{
	size_t len = c->o->nbr_size;
	tf_rcache_reg_t *reg;
	tf_slice_t sl;
	tf_mr_t *mr;
	int ret;

	switch (mode) {
	case NBR_DIRECT:
		ret = tf_mr_reg(c->pd, c->nbuf[j], len,
				TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE,
				&mr);
		if (!ret)
			ret = tf_mr_dereg(mr);
		return ret;
	case NBR_POOL:
		ret = tf_pool_rent(c->pool, len, &sl);
		if (!ret)
			ret = tf_pool_return(c->pool, &sl);
		return ret;
	case NBR_CACHE:
		ret = tf_rcache_get(
			c->rc, c->nbuf[j], len,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE, &reg);
		if (!ret)
			ret = tf_rcache_put(c->rc, reg);
		return ret;
	default:
		return 0;
	}
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
			      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* The neighbour: one operation every 1/rate seconds.  A neighbour that
 * falls behind (a slow registration, a descheduled thread) does not try
 * to catch up with a burst; it keeps its pace from now on. */
static void *neighbour(void *arg)
{
	struct churn *c = arg;
	uint64_t period = 1000000000ull / c->o->rate, next = now_ns();
	unsigned j = 0;

	for (;;) {
		int mode = atomic_load(&c->mode), ret;
		uint64_t now;

		if (mode == NBR_STOP)
			break;
		ret = nbr_op(c, mode, j++ % NBR_BUFS);
		if (ret) {
			atomic_store(&c->nbr_err, ret);
			break;
		}
		if (mode != NBR_NONE)
			atomic_fetch_add(&c->nbr_ops, 1);
		next += period;
		now = now_ns();
		if (now > next + 10 * period)
			next = now;
		else if (now < next)
			sleep_until(next);
	}
	return NULL;
}

static int churn_setup(struct churn *c)
{
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 256};
	tf_rcache_params_t rp = {.field_mask = TF_RCACHE_PARAM_MONITOR,
				 .monitor = TF_RCACHE_MONITOR_NONE};
	tf_qp_params_t qpp;
	uint8_t aa[TF_QP_ADDR_MAX], ab[TF_QP_ADDR_MAX];
	size_t la = sizeof(aa), lb = sizeof(ab);
	unsigned acc = TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE;
	int ret;

	ret = bench_open_ctx(c->o->cm.provider, c->o->cm.device, NULL, &c->ctx);
	if (ret)
		return ret;
	ret = tf_pd_create(c->ctx, &c->pd);
	if (!ret)
		ret = tf_cq_create(c->ctx, &cqp, &c->cq);
	if (ret) {
		fail("creating a PD or CQ: %s", tf_strerror(ret));
		return ret;
	}
	memset(&qpp, 0, sizeof(qpp));
	qpp.send_cq = c->cq;
	qpp.recv_cq = c->cq;
	ret = tf_qp_create(c->pd, &qpp, &c->qp_a);
	if (!ret)
		ret = tf_qp_create(c->pd, &qpp, &c->qp_b);
	if (!ret)
		ret = tf_qp_get_addr(c->qp_a, aa, &la);
	if (!ret)
		ret = tf_qp_get_addr(c->qp_b, ab, &lb);
	if (!ret)
		ret = tf_qp_connect(c->qp_a, ab, lb);
	if (!ret)
		ret = tf_qp_connect(c->qp_b, aa, la);
	if (ret) {
		fail("setting up the victim's QPs: %s", tf_strerror(ret));
		return ret;
	}
	c->src = mmap(NULL, 2 * VICTIM_PAGES * PAGE, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->src == MAP_FAILED) {
		c->src = NULL;
		fail("mmap: %m");
		return -ENOMEM;
	}
	memset(c->src, 1, 2 * VICTIM_PAGES * PAGE);
	c->dst = c->src + VICTIM_PAGES * PAGE;
	ret = tf_mr_reg(c->pd, c->src, VICTIM_PAGES * PAGE, acc, &c->src_mr);
	if (!ret)
		ret = tf_mr_reg(c->pd, c->dst, VICTIM_PAGES * PAGE, acc,
				&c->dst_mr);
	if (ret) {
		fail("registering the victim's buffers: %s", tf_strerror(ret));
		return ret;
	}
	for (int j = 0; j < NBR_BUFS; j++) {
		c->nbuf[j] = mmap(NULL, c->o->nbr_size, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (c->nbuf[j] == MAP_FAILED) {
			c->nbuf[j] = NULL;
			fail("mmap: %m");
			return -ENOMEM;
		}
		memset(c->nbuf[j], 2, c->o->nbr_size);
	}
	ret = tf_pool_create(c->pd, NULL, &c->pool);
	if (!ret)
		ret = tf_rcache_create(c->pd, &rp, &c->rc);
	if (ret) {
		fail("creating the neighbour's pool or cache: %s",
		     tf_strerror(ret));
		return ret;
	}
	/* First use outside the measurement: the pool registers its chunk,
	 * the cache its regions. */
	for (int m = NBR_DIRECT; m < NBR_COUNT; m++)
		for (unsigned j = 0; j < NBR_BUFS; j++) {
			ret = nbr_op(c, m, j);
			if (ret) {
				fail("neighbour (%s): %s", nbr_names[m],
				     tf_strerror(ret));
				return ret;
			}
		}
	return 0;
}

static void churn_teardown(struct churn *c)
{
	if (c->thr_started) {
		atomic_store(&c->mode, NBR_STOP);
		pthread_join(c->thr, NULL);
	}
	tf_rcache_destroy(c->rc);
	tf_pool_destroy(c->pool);
	for (int j = 0; j < NBR_BUFS; j++)
		if (c->nbuf[j])
			munmap(c->nbuf[j], c->o->nbr_size);
	tf_mr_dereg(c->src_mr);
	tf_mr_dereg(c->dst_mr);
	if (c->src)
		munmap(c->src, 2 * VICTIM_PAGES * PAGE);
	tf_qp_destroy(c->qp_a);
	tf_qp_destroy(c->qp_b);
	tf_cq_destroy(c->cq);
	tf_pd_destroy(c->pd);
	tf_context_close(c->ctx);
}

/* One timed victim WRITE; @i spreads the pages over the working set on
 * both sides (a different stride on each, so that pairs vary). */
static int victim_one(struct churn *c, unsigned i, double *ns)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)(c->src + (i % VICTIM_PAGES) * PAGE),
		.length = VICTIM_SIZE,
		.lkey = tf_mr_lkey(c->src_mr),
	};
	struct tf_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = TF_WR_RDMA_WRITE,
		.send_flags = TF_SEND_SIGNALED,
	};
	uint64_t t0;
	int ret;

	wr.wr.rdma.remote_addr =
		(uintptr_t)(c->dst + ((i * 7) % VICTIM_PAGES) * PAGE);
	wr.wr.rdma.rkey = tf_mr_rkey(c->dst_mr);
	t0 = now_ns();
	ret = tf_post_send(c->qp_a, &wr, NULL);
	if (ret) {
		fail("posting the victim's WRITE: %s", tf_strerror(ret));
		return ret;
	}
	ret = wait_one(c->cq, "victim WRITE");
	*ns = (double)(now_ns() - t0);
	return ret;
}

static void usage_churn(FILE *f)
{
	fprintf(f,
		"usage: %s churn [-n SAMPLES] [-b BATCH] [--rate OPS_PER_S] "
		"[--nbr-size SIZE]\n"
		"          [--entries N] [--miss-ns NS] [--modes "
		"none,direct,pool,cache]\n"
		"          [--provider P] [--device D] [--csv] [--json FILE]\n"
		"  defaults: 20000 victim WRITEs per mode in batches of 2000, "
		"neighbour 500 ops/s on 1M,\n"
		"  model: 256 translation entries, 500 ns per miss\n",
		prog);
}

enum {
	OPT_RATE = OPT_OWN,
	OPT_NBR_SIZE,
	OPT_ENTRIES,
	OPT_MISS_NS,
	OPT_MODES,
};

static const struct option churn_long[] = {
	{"samples", required_argument, NULL, 'n'},
	{"batch", required_argument, NULL, 'b'},
	{"rate", required_argument, NULL, OPT_RATE},
	{"nbr-size", required_argument, NULL, OPT_NBR_SIZE},
	{"entries", required_argument, NULL, OPT_ENTRIES},
	{"miss-ns", required_argument, NULL, OPT_MISS_NS},
	{"modes", required_argument, NULL, OPT_MODES},
	BENCH_COMMON_OPTS,
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int parse_nbr_modes(const char *arg, unsigned *modes)
{
	*modes = 0;
	if (!bench_name_mask(arg, 128, nbr_names, sizeof(nbr_names[0]),
			     NBR_COUNT, false, modes) &&
	    *modes)
		return 0;
	fail("bad mode list '%s' (none, direct, pool, cache)", arg);
	return -1;
}

static int churn_parse(int argc, char **argv, struct churn_opts *o)
{
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:b:h", churn_long, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_uint(optarg, "sample count", 1, &o->samples))
				return -1;
			break;
		case 'b':
			if (parse_uint(optarg, "batch", 1, &o->batch))
				return -1;
			break;
		case OPT_RATE:
			if (parse_uint(optarg, "rate", 1, &o->rate))
				return -1;
			break;
		case OPT_NBR_SIZE:
			if (parse_size(optarg, 1u << 30, &o->nbr_size))
				return -1;
			break;
		case OPT_ENTRIES:
			if (parse_uint(optarg, "entry count", 1, &o->entries))
				return -1;
			break;
		case OPT_MISS_NS:
			if (parse_uint(optarg, "miss penalty", 0, &o->miss_ns))
				return -1;
			break;
		case OPT_MODES:
			if (parse_nbr_modes(optarg, &o->modes))
				return -1;
			break;
		default:
			if (bench_opt_rest(c, optarg, &o->cm, usage_churn))
				return -1;
		}
	}
	return bench_no_operands(argc, argv);
}

int cmd_churn(int argc, char **argv)
{
	struct churn_opts o = {
		.samples = 20000,
		.batch = 2000,
		.rate = 500,
		.entries = 256,
		.miss_ns = 500,
		.nbr_size = 1u << 20,
		.modes = (1u << NBR_COUNT) - 1,
	};
	struct churn c;
	struct report r = {.bench = "churn", .layout = LAYOUT_SIZED};
	tf_context_stats_t s0, s1;
	uint64_t misses[NBR_COUNT] = {0}, ops[NBR_COUNT] = {0};
	double *v[NBR_COUNT] = {NULL};
	size_t n[NBR_COUNT] = {0};
	const char *pfx;
	char val[32], extra[256];
	int ret = 0, m;

	if (churn_parse(argc, argv, &o))
		return 2;
	pfx = o.cm.csv ? "# " : "";
	/* The library reads its configuration once, at the first call:
	 * these must be set before anything else touches it. */
	snprintf(val, sizeof(val), "%u", o.entries);
	setenv("TOLLFREE_SOFT_XLATE_ENTRIES", val, 1);
	snprintf(val, sizeof(val), "%u", o.miss_ns);
	setenv("TOLLFREE_SOFT_XLATE_MISS_NS", val, 1);
	memset(&c, 0, sizeof(c));
	c.o = &o;
	for (m = 0; m < NBR_COUNT; m++) {
		v[m] = calloc(o.samples, sizeof(double));
		if (!v[m]) {
			fail("out of memory");
			ret = -ENOMEM;
			goto out;
		}
	}
	ret = churn_setup(&c);
	if (ret)
		goto out;
	snprintf(extra, sizeof(extra),
		 "\n%sneighbour: %u ops/s on %" PRIu64 " bytes; victim: "
		 "%u B WRITEs over %u+%u pages, %u per mode",
		 pfx, o.rate, o.nbr_size, VICTIM_SIZE, VICTIM_PAGES,
		 VICTIM_PAGES, o.samples);
	report_header(&r, c.ctx, NULL, extra, o.cm.csv ? OUT_CSV : OUT_TEXT);
	if (!strcmp(tf_context_provider(c.ctx), "soft"))
		printf("%sMODEL: the victim's extra latency comes from the "
		       "soft provider's translation-cache model (%u page "
		       "entries, LRU, %u ns busy-wait per miss), not from "
		       "hardware\n",
		       pfx, o.entries, o.miss_ns);
	else
		printf("%snote: provider %s: the translation cache is the "
		       "device's own; the model settings do not apply\n",
		       pfx, tf_context_provider(c.ctx));
	fflush(stdout);
	atomic_store(&c.mode, NBR_NONE);
	if (pthread_create(&c.thr, NULL, neighbour, &c)) {
		fail("pthread_create failed");
		ret = -EAGAIN;
		goto out;
	}
	c.thr_started = true;

	for (unsigned done = 0; done < o.samples;) {
		unsigned cnt =
			o.samples - done < o.batch ? o.samples - done : o.batch;

		for (m = 0; m < NBR_COUNT; m++) {
			uint64_t ops0;

			if (!(o.modes & (1u << m)))
				continue;
			atomic_store(&c.mode, m);
			ops0 = atomic_load(&c.nbr_ops);
			tf_context_query_stats(c.ctx, &s0);
			for (unsigned i = 0; i < cnt && !ret; i++)
				ret = victim_one(&c, done + i, &v[m][n[m]++]);
			tf_context_query_stats(c.ctx, &s1);
			misses[m] += s1.xlate_misses - s0.xlate_misses;
			ops[m] += atomic_load(&c.nbr_ops) - ops0;
			if (!ret)
				ret = atomic_load(&c.nbr_err);
			if (ret) {
				fail("mode %s failed: %s", nbr_names[m],
				     tf_strerror(ret));
				goto out;
			}
		}
		done += cnt;
	}
	atomic_store(&c.mode, NBR_NONE);

	for (m = 0; m < NBR_COUNT; m++) {
		struct bench_row row = {.op = nbr_names[m],
					.title = nbr_titles[m],
					.size = VICTIM_SIZE};

		if (!(o.modes & (1u << m)))
			continue;
		row.iters = (unsigned)n[m];
		stats_compute(v[m], n[m], &row.st);
		ret = report_add(&r, &row);
		if (ret)
			goto out;
	}
	report_emit(&r, o.cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	printf("%s%-8s %10s %10s %10s %14s %12s\n", pfx, "nbr", "p50[us]",
	       "p99[us]", "p99.9[us]", "misses/WRITE", "nbr ops/s");
	for (size_t i = 0; i < r.nrows; i++) {
		const struct bench_row *w = &r.rows[i];

		for (m = 0; m < NBR_COUNT; m++)
			if (!strcmp(w->op, nbr_names[m]))
				break;
		printf("%s%-8s %10.2f %10.2f %10.2f %14.3f %12.0f\n", pfx,
		       w->op, w->st.median / 1e3, w->st.p99 / 1e3,
		       w->st.p999 / 1e3,
		       n[m] ? (double)misses[m] / (double)n[m] : 0,
		       w->st.avg > 0 ? (double)ops[m] /
					       (w->st.avg * (double)n[m] / 1e9)
				     : 0);
	}
	if (o.cm.json && report_write_json(&r, o.cm.json))
		ret = -EIO;
out:
	churn_teardown(&c);
	for (m = 0; m < NBR_COUNT; m++)
		free(v[m]);
	free(r.rows);
	return ret ? 1 : 0;
}
