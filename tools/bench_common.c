/* SPDX-License-Identifier: MIT */
/*
 * bench_common.c - what every tollfree-bench subcommand shares, apart from
 * printing results (bench_report.c): failure messages and the clock,
 * statistics (percentiles as perftest picks them), option parsing for the
 * sized subcommands (lat, reg), the options all of them take and the
 * pieces of parsing they share (the getopt tail, mode and test lists),
 * opening a context, waiting for one completion and CPU pinning.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <tollfree/tollfree.h>

#include "bench.h"

const char *prog = "tollfree-bench";

void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t spin_yield_ns;
static pthread_once_t spin_yield_once = PTHREAD_ONCE_INIT;

static void spin_yield_init(void)
{
	char v[32];
	unsigned long us = 5;

	if (tf_config_get("POLL_SPIN_YIELD_US", v, sizeof(v)) > 0)
		us = strtoul(v, NULL, 10);
	spin_yield_ns = (uint64_t)us * 1000;
}

void bench_spin_pause(uint64_t *yielded)
{
	uint64_t now;

	pthread_once(&spin_yield_once, spin_yield_init);
	if (!spin_yield_ns)
		return;
	now = now_ns();
	if (now - *yielded >= spin_yield_ns) {
		*yielded = now;
		sched_yield();
	}
}

/* A bar on stderr (crr, load): @done of @total, and what runs now. */
void progress_bar(unsigned done, unsigned total, const char *what)
{
	int w = 40, fill = total ? (int)((uint64_t)done * w / total) : w;

	fprintf(stderr, "\r[%.*s%*s] %3u%% %-14s", fill,
		"########################################", w - fill, "",
		total ? done * 100 / total : 100, what);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

/* ------------------------------------------------------------ statistics */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted @v: the smallest sample such that at
 * least @p of all samples are less or equal (perftest picks the same
 * element for 99% and 99.9% at its default iteration counts). */
static double percentile(const double *v, size_t n, double p)
{
	size_t rank = (size_t)ceil(p * (double)n);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

/* Sorts @v in place. */
void stats_compute(double *v, size_t n, struct bench_stats *st)
{
	double sum = 0, var = 0;
	size_t i;

	memset(st, 0, sizeof(*st));
	if (!n)
		return;
	qsort(v, n, sizeof(*v), cmp_double);
	for (i = 0; i < n; i++)
		sum += v[i];
	st->avg = sum / (double)n;
	for (i = 0; i < n; i++)
		var += (v[i] - st->avg) * (v[i] - st->avg);
	st->stdev = n > 1 ? sqrt(var / (double)(n - 1)) : 0;
	st->min = v[0];
	st->max = v[n - 1];
	/* The median is t_typical, as in perftest. */
	st->median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	st->p99 = percentile(v, n, 0.99);
	st->p999 = percentile(v, n, 0.999);
}

double median_of(double *v, size_t n)
{
	struct bench_stats st;

	stats_compute(v, n, &st);
	return st.median;
}

/* ------------------------------------------------------------ options */

/* Parse one size token ("1K", "64", "2M") of @len bytes at @arg, between 1
 * and @max bytes; the shift is checked so that "99999999999G" cannot wrap
 * into range. */
static int parse_size_n(const char *arg, size_t len, uint64_t max,
			uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	errno = 0;
	if (!len || *arg == '-')
		return -1;
	v = strtoull(arg, &end, 10);
	if (errno || end == arg)
		return -1;
	switch (*end) {
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	}
	if ((size_t)(end - arg) != len || !v || v > (max >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Parse "8,1K,64K" (binary suffixes K, M, G). */
static int parse_sizes(const char *arg, struct bench_opts *o)
{
	const char *p = arg;

	o->nsizes = 0;
	for (;;) {
		size_t len = strcspn(p, ",");

		if (o->nsizes == MAX_SIZES) {
			fail("at most %d sizes", MAX_SIZES);
			return -1;
		}
		if (parse_size_n(p, len, 1ull << 30, &o->sizes[o->nsizes])) {
			fail("bad size list '%s' (want e.g. 8,1K,64K; 1 byte "
			     "to 1G each)",
			     arg);
			return -1;
		}
		o->nsizes++;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

int bench_common_opt(int c, const char *arg, struct bench_common *b)
{
	switch (c) {
	case OPT_PROVIDER:
		b->provider = arg;
		return 1;
	case OPT_DEVICE:
		b->device = arg;
		return 1;
	case OPT_TRANSPORT:
		if (strcmp(arg, "shm") && strcmp(arg, "tcp") &&
		    strcmp(arg, "auto")) {
			fail("bad transport '%s'", arg);
			return -1;
		}
		b->transport = arg;
		return 1;
	case OPT_CSV:
		b->csv = true;
		return 1;
	case OPT_JSON:
		b->json = arg;
		return 1;
	default:
		return 0;
	}
}

/* Parse one size ("1K", "64", "2M") between 1 and @max bytes. */
int parse_size(const char *arg, uint64_t max, uint64_t *out)
{
	if (!parse_size_n(arg, strlen(arg), max, out))
		return 0;
	fail("bad size '%s' (1 byte to %" PRIu64 " bytes, K/M/G suffixes)", arg,
	     max);
	return -1;
}

int parse_uint(const char *arg, const char *what, unsigned min, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (errno || end == arg || *end || *arg == '-' || v < min ||
	    v > 100000000ul) {
		fail("bad %s '%s'", what, arg);
		return -1;
	}
	*out = (unsigned)v;
	return 0;
}

int parse_int(const char *arg, const char *what, int min, int max, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = arg ? strtol(arg, &end, 10) : 0;
	if (!arg || errno || end == arg || *end || v < min || v > max) {
		fail("%s: %d to %d", what, min, max);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int bench_opt_rest(int c, const char *arg, struct bench_common *b,
		   void (*usage)(FILE *))
{
	int r;

	if (c == 'h') {
		usage(stdout);
		exit(0);
	}
	r = bench_common_opt(c, arg, b);
	if (!r)
		usage(stderr);
	return r > 0 ? 0 : -1;
}

int bench_no_operands(int argc, char **argv)
{
	if (optind < argc) {
		fail("unexpected argument '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

int parse_server_wait(const char *arg, bool *sleep)
{
	if (strcmp(arg, "spin") && strcmp(arg, "sleep")) {
		fail("bad server wait '%s' (spin, sleep)", arg);
		return -1;
	}
	*sleep = !strcmp(arg, "sleep");
	return 0;
}

/* Name @i of a table (see bench.h): the tables are arrays of strings or
 * of structs whose first member is the name, so one stride serves both. */
static const char *name_at(const char *const *names, size_t stride, size_t i)
{
	return *(const char *const *)((const char *)names + i * stride);
}

int bench_name_mask(const char *arg, size_t max_len, const char *const *names,
		    size_t stride, unsigned n, bool all, unsigned *mask)
{
	char buf[256], *tok, *save = NULL;
	unsigned i;

	if (max_len > sizeof(buf) || strlen(arg) >= max_len)
		return -1;
	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (all && !strcmp(tok, "all")) {
			*mask |= (1u << n) - 1;
			continue;
		}
		for (i = 0; i < n; i++)
			if (!strcmp(tok, name_at(names, stride, i)))
				break;
		if (i == n)
			return -1;
		*mask |= 1u << i;
	}
	return 0;
}

int bench_parse_modes(const char *arg, const char *const *names, size_t stride,
		      unsigned n, void (*usage)(FILE *), unsigned *modes)
{
	*modes = 0;
	if (!bench_name_mask(arg, 256, names, stride, n, true, modes) && *modes)
		return 0;
	fail("bad mode list '%s'", arg);
	usage(stderr);
	return -1;
}

void bench_print_names(FILE *f, const char *const *names, size_t stride,
		       unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		fprintf(f, "%s%s", name_at(names, stride, i),
			i + 1 < n ? "," : "\n");
}

/* The sized subcommands' options ("--test" is refused but by lat). */
static const struct option sized_opts[] = {
	{"test", required_argument, NULL, 't'},
	{"sizes", required_argument, NULL, 's'},
	{"iters", required_argument, NULL, 'n'},
	{"warmup", required_argument, NULL, 'w'},
	BENCH_TRANSPORT_OPT,
	BENCH_COMMON_OPTS,
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

int bench_parse_sized(int argc, char **argv, struct bench_opts *o,
		      int (*parse_tests)(const char *arg, unsigned *tests),
		      void (*usage)(FILE *))
{
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv,
				parse_tests ? "t:s:n:w:h" : "s:n:w:h",
				sized_opts, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!parse_tests) {
				fail("--test applies to 'lat' only");
				return -1;
			}
			if (parse_tests(optarg, &o->tests))
				return -1;
			break;
		case 's':
			if (parse_sizes(optarg, o))
				return -1;
			break;
		case 'n':
			if (parse_uint(optarg, "iteration count", 1, &o->iters))
				return -1;
			break;
		case 'w':
			if (parse_uint(optarg, "warm-up count", 0, &o->warmup))
				return -1;
			o->warmup_set = true;
			break;
		default:
			if (bench_opt_rest(c, optarg, &o->cm, usage))
				return -1;
		}
	}
	if (bench_no_operands(argc, argv)) {
		usage(stderr);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ context */

int bench_open_ctx(const char *provider, const char *device,
		   const char *transport, tf_context_t **ctx_p)
{
	tf_context_params_t p;
	int ret;

	memset(&p, 0, sizeof(p));
	if (provider) {
		p.field_mask |= TF_CONTEXT_PARAM_PROVIDER;
		p.provider = provider;
	}
	if (device) {
		p.field_mask |= TF_CONTEXT_PARAM_DEVICE;
		p.device = device;
	}
	if (transport) {
		p.field_mask |= TF_CONTEXT_PARAM_TRANSPORT;
		p.transport = transport;
	}
	ret = tf_context_open(&p, ctx_p);
	if (ret)
		fail("cannot open a context (provider %s): %s",
		     provider ? provider : "from TOLLFREE_PROVIDER",
		     tf_strerror(ret));
	return ret;
}

int bench_opts_open_ctx(const struct bench_opts *o, tf_context_t **ctx_p)
{
	return bench_open_ctx(o->cm.provider, o->cm.device, o->cm.transport,
			      ctx_p);
}

/* Wait for one completion on @cq; it must be a success.  Returns 0 or
 * -errno.  Used where only one operation is outstanding. */
int wait_one(tf_cq_t *cq, const char *what)
{
	struct tf_wc wc;
	uint64_t deadline = now_ns() + WAIT_TIMEOUT_NS;
	unsigned spins = 0;
	int n;

	for (;;) {
		n = tf_cq_poll(cq, 1, &wc);
		if (n < 0) {
			fail("%s: polling the CQ: %s", what, tf_strerror(n));
			return n;
		}
		if (n)
			break;
		if (++spins % WAIT_CHECK_EVERY == 0 && now_ns() > deadline) {
			fail("%s: no completion after %llu s", what,
			     WAIT_TIMEOUT_NS / 1000000000ull);
			return -ETIMEDOUT;
		}
	}
	if (wc.status != TF_WC_SUCCESS) {
		fail("%s: completion with status %s (vendor_err %u)", what,
		     tf_wc_status_str(wc.status), wc.vendor_err);
		return -EIO;
	}
	return 0;
}

/* ------------------------------------------------------------ CPUs */

/* The first two CPUs this process may run on, or -1. */
void pick_cpus(int *a, int *b)
{
	cpu_set_t set;
	int i;

	*a = *b = -1;
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, &set))
			continue;
		if (*a < 0) {
			*a = i;
		} else {
			*b = i;
			break;
		}
	}
}

void pin_to(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fail("cannot pin to cpu %d: %m (continuing)", cpu);
}
