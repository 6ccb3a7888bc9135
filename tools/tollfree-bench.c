/* SPDX-License-Identifier: MIT */
/*
 * tollfree-bench - latency and registration-cost benchmarks over the public
 * tollfree API (see tollfree-bench(1)).
 *
 *   tollfree-bench lat [-t write|read|send] [-s SIZES] [-n ITERS] ...
 *   tollfree-bench reg [-s SIZES] [-n ITERS] [--json FILE] ...
 *
 * "lat" follows perftest's methodology so that its numbers can be put next
 * to ib_write_lat, ib_read_lat and ib_send_lat: two processes, one RC QP
 * each, WRITE and SEND latency as half of a ping-pong round trip, READ
 * latency as the full round trip of one READ, warm-up iterations excluded,
 * and perftest's columns.  "reg" times the registration-side operations one
 * at a time, so that registration cost is reported apart from transfer
 * cost.  Every table, in every format, goes through report_emit().
 *
 * Timings are measured, never judged: nothing here compares a number with a
 * threshold.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tollfree/tollfree.h>

#include "bench.h"

#define MAX_SIZES 32

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

/* ------------------------------------------------------------ report */

const char *const bench_phase_names[PH_COUNT] = {
	[PH_CONNECT] = "connect", [PH_PREPARE] = "prepare", [PH_MOVE] = "move",
	[PH_REVOKE] = "revoke",	  [PH_CLOSE] = "close",
};

int report_add(struct report *r, const struct bench_row *row)
{
	if (r->nrows == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct bench_row *n = realloc(r->rows, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->rows = n;
		r->cap = cap;
	}
	r->rows[r->nrows++] = *row;
	return 0;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

#define PERF_RULE                                                         \
	"---------------------------------------------------------------" \
	"------------------------------------------------------------\n"

/* Column widths of the text tables: header and rows share them. */
#define PERF_COLS_FMT " %-8s %-12s %-12s %-12s %-16s %-12s %-14s %-21s "
#define PERF_ROW_FMT                                                    \
	" %-8" PRIu64 " %-12u %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f " \
	"%-21.2f "
#define PERF_ROW_FMT3                                                   \
	" %-8" PRIu64 " %-12u %-12.3f %-12.3f %-16.3f %-12.3f %-14.3f " \
	"%-21.3f "

/*
 * Sized layout.  Text: one perftest-style table per operation, times in
 * microseconds.  CSV: one header line and one line per row, microseconds.
 * JSON: one object with the run's environment and a "rows" array, times in
 * nanoseconds (the unit is in every key).
 */
static void emit_sized(const struct report *r, enum out_fmt fmt, FILE *f)
{
	const char *last_op = NULL;
	size_t i;

	if (fmt == OUT_CSV)
		fprintf(f, "op,bytes,iterations,t_min_usec,t_max_usec,"
			   "t_typical_usec,t_avg_usec,t_stdev_usec,p99_usec,"
			   "p99.9_usec\n");
	if (fmt == OUT_JSON) {
		fprintf(f, "{\"bench\":");
		json_str(f, r->bench);
		fprintf(f, ",\"provider\":");
		json_str(f, r->provider);
		fprintf(f, ",\"device\":");
		json_str(f, r->device);
		fprintf(f, ",\"transport\":");
		json_str(f, r->transport);
		fprintf(f, ",\"cpu\":");
		json_str(f, r->cpu);
		fprintf(f, ",\"nproc\":%ld,\"rows\":[", r->nproc);
	}
	for (i = 0; i < r->nrows; i++) {
		const struct bench_row *w = &r->rows[i];
		const struct bench_stats *s = &w->st;

		switch (fmt) {
		case OUT_TEXT:
			if (!last_op || strcmp(last_op, w->op)) {
				fprintf(f, "%s%s\n%s", last_op ? "\n" : "",
					w->title, PERF_RULE);
				fprintf(f, PERF_COLS_FMT "%s\n", "#bytes",
					"#iterations", "t_min[usec]",
					"t_max[usec]", "t_typical[usec]",
					"t_avg[usec]", "t_stdev[usec]",
					"99% percentile[usec]",
					"99.9% percentile[usec]");
				last_op = w->op;
			}
			/* Sub-microsecond rows (batched reg rows) get
			 * nanosecond resolution. */
			fprintf(f,
				s->median < 1000 ? PERF_ROW_FMT3 "%.3f\n"
						 : PERF_ROW_FMT "%.2f\n",
				w->size, w->iters, s->min / 1e3, s->max / 1e3,
				s->median / 1e3, s->avg / 1e3, s->stdev / 1e3,
				s->p99 / 1e3, s->p999 / 1e3);
			break;
		case OUT_CSV:
			fprintf(f,
				"%s,%" PRIu64
				",%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
				w->op, w->size, w->iters, s->min / 1e3,
				s->max / 1e3, s->median / 1e3, s->avg / 1e3,
				s->stdev / 1e3, s->p99 / 1e3, s->p999 / 1e3);
			break;
		case OUT_JSON:
			fprintf(f, "%s{\"op\":", i ? "," : "");
			json_str(f, w->op);
			fprintf(f,
				",\"size\":%" PRIu64
				",\"iterations\":%u,\"t_min_ns\":%.1f,"
				"\"t_max_ns\":%.1f,\"t_typical_ns\":%.1f,"
				"\"t_avg_ns\":%.1f,\"t_stdev_ns\":%.1f,"
				"\"p99_ns\":%.1f,\"p999_ns\":%.1f}",
				w->size, w->iters, s->min, s->max, s->median,
				s->avg, s->stdev, s->p99, s->p999);
			break;
		}
	}
	if (fmt == OUT_TEXT && r->nrows)
		fprintf(f, "%s", PERF_RULE);
	if (fmt == OUT_JSON)
		fprintf(f, "]}\n");
}

/* Columns of the modes table: header and rows share them. */
#define MODE_COLS_FMT                                                     \
	"%-14s %9s %11s %11s %11s %11s %11s %11s %11s | %8s %8s %8s %8s " \
	"%8s\n"
#define MODE_ROW_FMT                                                    \
	"%-14s %9u %11.2f %11.2f %11.2f %11.2f %11.2f %11.2f %11.0f | " \
	"%8.2f %8.2f %8.2f %8.2f %8.2f\n"

/*
 * Modes layout (crr).  Text: one table, one row per mode: perftest's
 * columns per session in microseconds (no t_max: one descheduled session
 * on a loaded host says nothing), sessions per second, then the median of
 * each phase.  CSV: the same columns.  JSON: the schema documented in
 * tollfree-bench(1), times in microseconds.
 */
static void emit_modes(const struct report *r, enum out_fmt fmt, FILE *f)
{
	size_t i;
	int p;

	switch (fmt) {
	case OUT_TEXT:
		fprintf(f, "%s", PERF_RULE);
		fprintf(f, MODE_COLS_FMT, "mode", "#sessions", "t_min[us]",
			"t_typical", "t_avg", "t_stdev", "99%", "99.9%",
			"sessions/s", bench_phase_names[0],
			bench_phase_names[1], bench_phase_names[2],
			bench_phase_names[3], bench_phase_names[4]);
		break;
	case OUT_CSV:
		fprintf(f, "mode,sessions,t_min_usec,t_typical_usec,"
			   "t_avg_usec,t_stdev_usec,p99_usec,p99.9_usec,"
			   "sessions_per_s");
		for (p = 0; p < PH_COUNT; p++)
			fprintf(f, ",%s_usec", bench_phase_names[p]);
		fputc('\n', f);
		break;
	case OUT_JSON:
		fprintf(f, "{\"bench\":");
		json_str(f, r->bench);
		fprintf(f, ",\"provider\":");
		json_str(f, r->provider);
		fprintf(f, ",\"transport\":");
		json_str(f, r->transport);
		fprintf(f,
			",\"size\":%" PRIu64 ",\"transfers\":%u,"
			"\"sessions\":%u,\"modes\":[",
			r->size, r->transfers, r->sessions);
		break;
	}
	for (i = 0; i < r->nrows; i++) {
		const struct bench_row *w = &r->rows[i];
		const struct bench_stats *s = &w->st;
		const double *ph = w->phases;

		switch (fmt) {
		case OUT_TEXT:
			fprintf(f, MODE_ROW_FMT, w->op, w->iters, s->min / 1e3,
				s->median / 1e3, s->avg / 1e3, s->stdev / 1e3,
				s->p99 / 1e3, s->p999 / 1e3, w->rate,
				ph[0] / 1e3, ph[1] / 1e3, ph[2] / 1e3,
				ph[3] / 1e3, ph[4] / 1e3);
			break;
		case OUT_CSV:
			fprintf(f, "%s,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f",
				w->op, w->iters, s->min / 1e3, s->median / 1e3,
				s->avg / 1e3, s->stdev / 1e3, s->p99 / 1e3,
				s->p999 / 1e3, w->rate);
			for (p = 0; p < PH_COUNT; p++)
				fprintf(f, ",%.3f", ph[p] / 1e3);
			fputc('\n', f);
			break;
		case OUT_JSON:
			fprintf(f, "%s{\"mode\":", i ? "," : "");
			json_str(f, w->op);
			fprintf(f,
				",\"t_min_us\":%.3f,\"t_typical_us\":%.3f,"
				"\"t_avg_us\":%.3f,\"t_stdev_us\":%.3f,"
				"\"p99_us\":%.3f,\"p999_us\":%.3f,"
				"\"sessions_per_s\":%.1f,\"phases_us\":{",
				s->min / 1e3, s->median / 1e3, s->avg / 1e3,
				s->stdev / 1e3, s->p99 / 1e3, s->p999 / 1e3,
				w->rate);
			for (p = 0; p < PH_COUNT; p++)
				fprintf(f, "%s\"%s\":%.3f", p ? "," : "",
					bench_phase_names[p], ph[p] / 1e3);
			fprintf(f, "}}");
			break;
		}
	}
	if (fmt == OUT_TEXT)
		fprintf(f, "%s", PERF_RULE);
	if (fmt == OUT_JSON)
		fprintf(f, "]}\n");
}

/*
 * report_emit - the one place that prints results: every subcommand's
 * tables, CSV and JSON come from here.
 */
void report_emit(const struct report *r, enum out_fmt fmt, FILE *f)
{
	if (r->layout == LAYOUT_MODES)
		emit_modes(r, fmt, f);
	else
		emit_sized(r, fmt, f);
}

int report_write_json(const struct report *r, const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fail("cannot write %s: %m", path);
		return -1;
	}
	report_emit(r, OUT_JSON, f);
	if (fclose(f)) {
		fail("cannot write %s: %m", path);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ environment */

static void cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(buf, len, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (strncmp(line, "model name", 10) || !colon)
			continue;
		colon++;
		while (*colon == ' ' || *colon == '\t')
			colon++;
		colon[strcspn(colon, "\n")] = '\0';
		snprintf(buf, len, "%s", colon);
		break;
	}
	fclose(f);
}

/* Fill the report's environment from an open context and print it. */
void report_header(struct report *r, tf_context_t *ctx, const char *transport,
		   const char *extra, enum out_fmt fmt)
{
	tf_caps_t caps;
	const char *pfx = fmt == OUT_CSV ? "# " : "";

	memset(&caps, 0, sizeof(caps));
	tf_context_query_caps(ctx, &caps);
	snprintf(r->provider, sizeof(r->provider), "%s",
		 tf_context_provider(ctx));
	snprintf(r->device, sizeof(r->device), "%s", tf_context_device(ctx));
	/* The requested transport says what was measured; the context's
	 * caps only know "auto" until a QP is connected. */
	snprintf(r->transport, sizeof(r->transport), "%s",
		 transport ? transport : caps.transport);
	cpu_model(r->cpu, sizeof(r->cpu));
	r->nproc = sysconf(_SC_NPROCESSORS_ONLN);

	printf("%stollfree-bench %s (library %s)\n", pfx, r->bench,
	       tf_version_string());
	printf("%sprovider: %s  transport: %s  device: %s\n", pfx, r->provider,
	       r->transport, r->device);
	printf("%scpu: %s  nproc: %ld%s%s\n", pfx, r->cpu, r->nproc,
	       extra ? "  " : "", extra ? extra : "");
	/* rxe under emulation runs the "NIC" on the same, emulated CPUs. */
	if (!strcmp(r->provider, "verbs") && !strncmp(r->device, "rxe", 3))
		printf("%snote: %s is Soft-RoCE (possibly under qemu/TCG): "
		       "timings only compare operations with each other\n",
		       pfx, r->device);
}

/* ------------------------------------------------------------ options */

struct opts {
	struct bench_common cm;
	unsigned iters;
	unsigned warmup; /* with warmup_set; else a default per bench */
	bool warmup_set;
	uint64_t sizes[MAX_SIZES];
	unsigned nsizes;
	unsigned tests; /* lat: bit per lat_op */
};

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
static int parse_sizes(const char *arg, struct opts *o)
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

/* Parse one size ("1K", "64", "2M") between 1 and @max bytes. */
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

/* Open a context with the options' provider, device and transport. */
static int open_ctx(const struct opts *o, tf_context_t **ctx_p)
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

/* ==================================================================== lat */

enum lat_op {
	LAT_WRITE,
	LAT_READ,
	LAT_SEND,
	LAT_NOPS,
};

static const struct {
	const char *name;
	const char *title;
} lat_ops[LAT_NOPS] = {
	[LAT_WRITE] = {"write", "RDMA_Write latency (RTT/2)"},
	[LAT_READ] = {"read", "RDMA_Read latency (full RTT)"},
	[LAT_SEND] = {"send", "Send latency (RTT/2)"},
};

#define LAT_MAGIC      0x74666c61u /* "tfla" */
#define LAT_RECV_DEPTH 64
#define LAT_WRID_SEND  1
#define LAT_WRID_RECV  2

/* What each side tells the other over the socketpair.  Both processes run
 * the same binary, but the fields are checked anyway. */
struct lat_hello {
	uint32_t magic;
	uint32_t addr_len;
	uint64_t buf_addr; /* start of the peer's buffer */
	uint64_t buf_len;
	uint64_t max_size;
	uint32_t rkey;
	uint32_t pad;
	uint8_t addr[TF_QP_ADDR_MAX];
};

struct lat_side {
	const struct opts *o;
	int sock;
	bool client;
	tf_context_t *ctx;
	tf_pd_t *pd;
	tf_cq_t *cq;
	tf_qp_t *qp;
	tf_mr_t *mr;
	/* One buffer: [0, half) is the send side (source of WRITE and SEND,
	 * what the peer READs), [half, 2*half) the receive side (target of
	 * the peer's WRITE, of SENDs and of our READs). */
	uint8_t *buf;
	size_t buf_len, half;
	bool buf_tf; /* from tf_mem_alloc (else mmap) */
	uint64_t max_size;
	uint32_t max_inline;
	struct lat_hello peer;
	unsigned send_outstanding; /* signalled sends not yet completed */
	unsigned recv_posted;
	unsigned recv_done; /* receive completions not yet consumed */
	bool spin_yield;    /* one CPU: let the peer run */
};

static int sock_full(int fd, void *buf, size_t len, bool wr)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = wr ? write(fd, p, len) : read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fail("socketpair %s: %m", wr ? "write" : "read");
			return -EIO;
		}
		if (n == 0) {
			fail("peer process went away");
			return -EPIPE;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Both sides call this; it returns when both have reached it. */
static int lat_barrier(struct lat_side *s)
{
	uint8_t b = 'B';
	int ret;

	ret = sock_full(s->sock, &b, 1, true);
	if (!ret)
		ret = sock_full(s->sock, &b, 1, false);
	if (!ret && b != 'B') {
		fail("peer process is out of step");
		ret = -EPROTO;
	}
	return ret;
}

/* Reap completions, which also makes progress on the context (the tcp
 * transport executes a peer's WRITEs and READs into our memory there). */
static int lat_reap(struct lat_side *s)
{
	struct tf_wc wc[16];
	int n, i;

	n = tf_cq_poll(s->cq, 16, wc);
	if (n < 0) {
		fail("polling the CQ: %s", tf_strerror(n));
		return n;
	}
	for (i = 0; i < n; i++) {
		if (wc[i].status != TF_WC_SUCCESS) {
			fail("completion of wr_id %" PRIu64 " failed: %s "
			     "(vendor_err %u)",
			     wc[i].wr_id, tf_wc_status_str(wc[i].status),
			     wc[i].vendor_err);
			return -EIO;
		}
		if (wc[i].wr_id == LAT_WRID_RECV) {
			s->recv_posted--;
			s->recv_done++;
		} else {
			s->send_outstanding--;
		}
	}
	return n;
}

static int lat_post_recvs(struct lat_side *s)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)(s->buf + s->half),
		.length = (uint32_t)s->max_size,
		.lkey = tf_mr_lkey(s->mr),
	};
	struct tf_recv_wr wr = {
		.wr_id = LAT_WRID_RECV,
		.sg_list = &sge,
		.num_sge = 1,
	};
	int ret;

	while (s->recv_posted < LAT_RECV_DEPTH) {
		ret = tf_post_recv(s->qp, &wr, NULL);
		if (ret) {
			fail("posting a receive: %s", tf_strerror(ret));
			return ret;
		}
		s->recv_posted++;
	}
	return 0;
}

/* Post one signalled WRITE, READ or SEND of @size bytes. */
static int lat_post(struct lat_side *s, enum tf_wr_opcode op, uint64_t size)
{
	struct tf_sge sge = {
		.addr = (uintptr_t)(op == TF_WR_RDMA_READ ? s->buf + s->half
							  : s->buf),
		.length = (uint32_t)size,
		.lkey = tf_mr_lkey(s->mr),
	};
	struct tf_send_wr wr = {
		.wr_id = LAT_WRID_SEND,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = TF_SEND_SIGNALED,
	};
	int ret;

	/* Small payloads go inline, as perftest does by default. */
	if (op != TF_WR_RDMA_READ && size <= s->max_inline)
		wr.send_flags |= TF_SEND_INLINE;
	if (op == TF_WR_RDMA_WRITE)
		wr.wr.rdma.remote_addr = s->peer.buf_addr + s->peer.buf_len / 2;
	else if (op == TF_WR_RDMA_READ)
		wr.wr.rdma.remote_addr = s->peer.buf_addr;
	wr.wr.rdma.rkey = s->peer.rkey;
	ret = tf_post_send(s->qp, &wr, NULL);
	if (ret) {
		fail("posting a %s: %s", op == TF_WR_SEND ? "SEND" : "RDMA op",
		     tf_strerror(ret));
		return ret;
	}
	s->send_outstanding++;
	return 0;
}

/* True when the peer process closed its end of the socketpair.  Nothing
 * but a barrier byte can be pending while a test runs, so a peek that
 * returns 0 bytes can only mean end of file. */
static bool peer_gone(struct lat_side *s)
{
	uint8_t b;

	if (recv(s->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
		return false;
	fail("peer process went away");
	return true;
}

/*
 * Wait until @done says so, reaping completions meanwhile.  @done sees the
 * side and @arg.  Busy-polls, except on a single CPU, where spinning would
 * only keep the peer from running.
 */
static int lat_wait(struct lat_side *s, bool (*done)(struct lat_side *, void *),
		    void *arg)
{
	uint64_t deadline = 0;
	unsigned spins = 0;
	int ret;

	while (!done(s, arg)) {
		ret = lat_reap(s);
		if (ret < 0)
			return ret;
		if (s->spin_yield)
			sched_yield();
		if (++spins % WAIT_CHECK_EVERY)
			continue;
		if (peer_gone(s))
			return -EPIPE;
		if (!deadline) {
			deadline = now_ns() + WAIT_TIMEOUT_NS;
		} else if (now_ns() > deadline) {
			fail("no progress from the peer for %llu s",
			     WAIT_TIMEOUT_NS / 1000000000ull);
			return -ETIMEDOUT;
		}
	}
	return 0;
}

struct byte_wait {
	const volatile uint8_t *p;
	uint8_t v;
};

static bool done_byte(struct lat_side *s, void *arg)
{
	struct byte_wait *w = arg;

	(void)s;
	/* The peer's WRITE is stored by another process (shm) or by our own
	 * progress (tcp); an acquire load orders the check before whatever
	 * follows. */
	return __atomic_load_n(w->p, __ATOMIC_ACQUIRE) == w->v;
}

static bool done_sends(struct lat_side *s, void *arg)
{
	(void)arg;
	return s->send_outstanding == 0;
}

static bool done_recv(struct lat_side *s, void *arg)
{
	(void)arg;
	return s->recv_done > 0;
}

/* Marker for iteration @i: never 0, so that a zeroed buffer never matches,
 * and different from the previous iteration's. */
static uint8_t lat_marker(unsigned i)
{
	return (uint8_t)(i % 255 + 1);
}

/* Keep at most this many signalled sends in flight: bounds the send queue
 * (256 by default) without waiting for every completion. */
#define LAT_MAX_OUTSTANDING 64

static int lat_throttle(struct lat_side *s)
{
	int ret;

	while (s->send_outstanding >= LAT_MAX_OUTSTANDING) {
		ret = lat_reap(s);
		if (ret < 0)
			return ret;
	}
	return 0;
}

/*
 * WRITE ping-pong.  The client stamps the last byte of its payload, WRITEs
 * it into the server's receive half and spins on the last byte of its own
 * receive half until the server's answering WRITE carries the same marker.
 * One round trip is two one-way latencies.
 */
static int lat_write(struct lat_side *s, uint64_t size, unsigned total,
		     unsigned warm, double *samples)
{
	struct byte_wait w = {.p = s->buf + s->half + size - 1};
	unsigned i;
	int ret;

	for (i = 0; i < total; i++) {
		uint64_t t0 = 0;

		w.v = lat_marker(i);
		ret = lat_throttle(s);
		if (ret)
			return ret;
		if (s->client) {
			s->buf[size - 1] = w.v;
			t0 = now_ns();
			ret = lat_post(s, TF_WR_RDMA_WRITE, size);
			if (!ret)
				ret = lat_wait(s, done_byte, &w);
			if (ret)
				return ret;
			if (i >= warm)
				samples[i - warm] = (double)(now_ns() - t0) / 2;
		} else {
			ret = lat_wait(s, done_byte, &w);
			if (ret)
				return ret;
			s->buf[size - 1] = w.v;
			ret = lat_post(s, TF_WR_RDMA_WRITE, size);
			if (ret)
				return ret;
		}
	}
	return lat_wait(s, done_sends, NULL);
}

/* SEND ping-pong: the same shape as lat_write, with receive completions
 * instead of a polled byte. */
static int lat_send(struct lat_side *s, uint64_t size, unsigned total,
		    unsigned warm, double *samples)
{
	unsigned i;
	int ret;

	for (i = 0; i < total; i++) {
		uint64_t t0 = 0;

		ret = lat_throttle(s);
		if (ret)
			return ret;
		if (s->client) {
			t0 = now_ns();
			ret = lat_post(s, TF_WR_SEND, size);
			if (ret)
				return ret;
		}
		ret = lat_wait(s, done_recv, NULL);
		if (ret)
			return ret;
		if (s->client && i >= warm)
			samples[i - warm] = (double)(now_ns() - t0) / 2;
		s->recv_done--;
		/* Replenish after taking the time: the repost is not part of
		 * the round trip, as in perftest. */
		ret = lat_post_recvs(s);
		if (ret)
			return ret;
		if (!s->client) {
			ret = lat_post(s, TF_WR_SEND, size);
			if (ret)
				return ret;
		}
	}
	return lat_wait(s, done_sends, NULL);
}

/*
 * READ: the client READs the server's send half and waits for the
 * completion; one sample is the full round trip.  The server only makes
 * progress (the tcp transport serves the READ there) until the client says
 * it is done.
 */
static int lat_read(struct lat_side *s, uint64_t size, unsigned total,
		    unsigned warm, double *samples)
{
	unsigned i, spins = 0;
	ssize_t n;
	uint8_t b;
	int ret;

	if (s->client) {
		for (i = 0; i < total; i++) {
			uint64_t t0 = now_ns();

			ret = lat_post(s, TF_WR_RDMA_READ, size);
			if (!ret)
				ret = lat_wait(s, done_sends, NULL);
			if (ret)
				return ret;
			if (i >= warm)
				samples[i - warm] = (double)(now_ns() - t0);
		}
		b = 'D';
		return sock_full(s->sock, &b, 1, true);
	}
	for (;;) {
		ret = tf_context_progress(s->ctx);
		if (ret < 0) {
			fail("progress: %s", tf_strerror(ret));
			return ret;
		}
		if (s->spin_yield)
			sched_yield();
		/* A syscall per spin would slow the served READs down;
		 * look at the socket now and then. */
		if (++spins % WAIT_CHECK_EVERY)
			continue;
		n = recv(s->sock, &b, 1, MSG_DONTWAIT);
		if (n == 1)
			return b == 'D' ? 0 : -EPROTO;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
			       errno != EINTR)) {
			fail("peer process went away");
			return -EPIPE;
		}
	}
}

static int lat_setup(struct lat_side *s)
{
	struct lat_hello me;
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 1024};
	tf_qp_params_t qpp;
	tf_caps_t caps;
	size_t len;
	int ret;

	ret = open_ctx(s->o, &s->ctx);
	if (ret)
		return ret;
	ret = tf_context_query_caps(s->ctx, &caps);
	if (ret) {
		fail("querying capabilities: %s", tf_strerror(ret));
		return ret;
	}
	if (caps.max_msg_size && s->max_size > caps.max_msg_size) {
		fail("size %" PRIu64 " exceeds the provider's largest "
		     "message (%u bytes)",
		     s->max_size, caps.max_msg_size);
		return -EINVAL;
	}
	ret = tf_pd_create(s->ctx, &s->pd);
	if (ret) {
		fail("creating a PD: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_cq_create(s->ctx, &cqp, &s->cq);
	if (ret) {
		fail("creating a CQ: %s", tf_strerror(ret));
		return ret;
	}
	memset(&qpp, 0, sizeof(qpp));
	qpp.send_cq = s->cq;
	qpp.recv_cq = s->cq;
	ret = tf_qp_create(s->pd, &qpp, &s->qp);
	if (ret) {
		fail("creating a QP: %s", tf_strerror(ret));
		return ret;
	}
	/* The QP's default inline limit; it is only a hint for perftest's
	 * inline choice, a smaller provider limit fails at post time. */
	s->max_inline = caps.max_inline_data < 256 ? caps.max_inline_data : 256;

	/* Halves are page aligned so that the two sides never share a
	 * cache line or a page. */
	s->half = (s->max_size + 4095) & ~(size_t)4095;
	s->buf_len = 2 * s->half;
	ret = tf_mem_alloc(s->ctx, s->buf_len, (void **)&s->buf);
	if (ret == 0) {
		s->buf_tf = true;
	} else if (ret == -EOPNOTSUPP) {
		void *p = mmap(NULL, s->buf_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED) {
			fail("mmap of %zu bytes: %m", s->buf_len);
			return -ENOMEM;
		}
		s->buf = p;
	} else {
		fail("tf_mem_alloc of %zu bytes: %s", s->buf_len,
		     tf_strerror(ret));
		return ret;
	}
	memset(s->buf, 0, s->buf_len);
	ret = tf_mr_reg(s->pd, s->buf, s->buf_len,
			TF_ACCESS_LOCAL_WRITE | TF_ACCESS_REMOTE_WRITE |
				TF_ACCESS_REMOTE_READ,
			&s->mr);
	if (ret) {
		fail("registering %zu bytes: %s", s->buf_len, tf_strerror(ret));
		return ret;
	}

	memset(&me, 0, sizeof(me));
	me.magic = LAT_MAGIC;
	me.buf_addr = (uintptr_t)s->buf;
	me.buf_len = s->buf_len;
	me.max_size = s->max_size;
	me.rkey = tf_mr_rkey(s->mr);
	len = sizeof(me.addr);
	ret = tf_qp_get_addr(s->qp, me.addr, &len);
	if (ret) {
		fail("getting the QP address: %s", tf_strerror(ret));
		return ret;
	}
	me.addr_len = (uint32_t)len;
	ret = sock_full(s->sock, &me, sizeof(me), true);
	if (!ret)
		ret = sock_full(s->sock, &s->peer, sizeof(s->peer), false);
	if (ret)
		return ret;
	if (s->peer.magic != LAT_MAGIC || !s->peer.addr_len ||
	    s->peer.addr_len > sizeof(s->peer.addr) ||
	    s->peer.buf_len != s->buf_len || s->peer.max_size != s->max_size) {
		fail("malformed hello from the peer process");
		return -EPROTO;
	}
	ret = tf_qp_connect(s->qp, s->peer.addr, s->peer.addr_len);
	if (ret) {
		fail("connecting the QP: %s", tf_strerror(ret));
		return ret;
	}
	/* Receives are posted before the barrier, so the peer's first SEND
	 * never finds an empty receive queue. */
	ret = lat_post_recvs(s);
	if (ret)
		return ret;
	return lat_barrier(s);
}

static void lat_teardown(struct lat_side *s)
{
	int ret;

	ret = tf_qp_destroy(s->qp);
	if (ret)
		fail("destroying the QP: %s", tf_strerror(ret));
	ret = tf_mr_dereg(s->mr);
	if (ret)
		fail("deregistering: %s", tf_strerror(ret));
	if (s->buf && s->buf_tf)
		tf_mem_free(s->ctx, s->buf, s->buf_len);
	else if (s->buf)
		munmap(s->buf, s->buf_len);
	ret = tf_cq_destroy(s->cq);
	if (ret)
		fail("destroying the CQ: %s", tf_strerror(ret));
	ret = tf_pd_destroy(s->pd);
	if (ret)
		fail("destroying the PD: %s", tf_strerror(ret));
	tf_context_close(s->ctx);
}

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

static int lat_run(const struct opts *o, int sock, bool client, int cpu,
		   bool spin_yield, const char *pin_note)
{
	static int (*const run[LAT_NOPS])(struct lat_side *, uint64_t, unsigned,
					  unsigned, double *) = {
		[LAT_WRITE] = lat_write,
		[LAT_READ] = lat_read,
		[LAT_SEND] = lat_send,
	};
	struct lat_side s;
	struct report r;
	double *samples = NULL;
	unsigned warm = o->warmup_set
				? o->warmup
				: (o->iters / 10 < 100 ? o->iters / 10 : 100);
	unsigned op, k;
	int ret;

	memset(&s, 0, sizeof(s));
	memset(&r, 0, sizeof(r));
	s.o = o;
	s.sock = sock;
	s.client = client;
	s.spin_yield = spin_yield;
	for (k = 0; k < o->nsizes; k++)
		if (o->sizes[k] > s.max_size)
			s.max_size = o->sizes[k];
	pin_to(cpu);
	r.bench = "lat";
	samples = calloc(o->iters, sizeof(*samples));
	if (!samples) {
		fail("out of memory");
		return -ENOMEM;
	}
	ret = lat_setup(&s);
	if (ret)
		goto out;
	if (client) {
		char extra[160];

		snprintf(extra, sizeof(extra), "%s  buffers: %s  warm-up: %u",
			 pin_note, s.buf_tf ? "tf_mem_alloc" : "mmap", warm);
		report_header(&r, s.ctx, o->cm.transport, extra,
			      o->cm.csv ? OUT_CSV : OUT_TEXT);
		fflush(stdout);
	}
	for (op = 0; op < LAT_NOPS; op++) {
		if (!(o->tests & (1u << op)))
			continue;
		for (k = 0; k < o->nsizes; k++) {
			struct bench_row row = {
				.op = lat_ops[op].name,
				.title = lat_ops[op].title,
				.size = o->sizes[k],
				.iters = o->iters,
			};

			/* Both sides start each test with a zeroed receive
			 * half: no marker left from an earlier test can end
			 * a wait early. */
			memset(s.buf + s.half, 0, s.half);
			ret = lat_barrier(&s);
			if (!ret)
				ret = run[op](&s, o->sizes[k], warm + o->iters,
					      warm, samples);
			if (ret)
				goto out;
			if (!client)
				continue;
			stats_compute(samples, o->iters, &row.st);
			ret = report_add(&r, &row);
			if (ret) {
				fail("out of memory");
				goto out;
			}
		}
	}
	ret = lat_barrier(&s);
	if (ret || !client)
		goto out;
	report_emit(&r, o->cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	if (o->cm.json && report_write_json(&r, o->cm.json))
		ret = -EIO;
out:
	/* A failing side closes its end first, so that the other one stops
	 * waiting for it at once. */
	if (ret)
		close(sock);
	if (s.ctx)
		lat_teardown(&s);
	free(samples);
	free(r.rows);
	return ret;
}

static void usage_lat(FILE *f)
{
	fprintf(f,
		"usage: %s lat [-t write|read|send[,...]] [-s SIZES] "
		"[-n ITERS] [-w WARMUP]\n"
		"          [--transport shm|tcp|auto] [--provider P] "
		"[--device D] [--csv] [--json FILE]\n"
		"  defaults: all three tests, sizes 8,1K,64K, 1000 "
		"iterations, warm-up min(n/10,100)\n",
		prog);
}

static int parse_tests(const char *arg, unsigned *tests)
{
	char buf[64], *tok, *save = NULL;
	unsigned op;

	if (strlen(arg) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		for (op = 0; op < LAT_NOPS; op++)
			if (!strcmp(tok, lat_ops[op].name))
				break;
		if (op == LAT_NOPS)
			goto bad;
		*tests |= 1u << op;
	}
	return 0;
bad:
	fail("bad test '%s' (want write, read or send)", arg);
	return -1;
}

static const struct option long_opts[] = {
	{"test", required_argument, NULL, 't'},
	{"sizes", required_argument, NULL, 's'},
	{"iters", required_argument, NULL, 'n'},
	{"warmup", required_argument, NULL, 'w'},
	BENCH_TRANSPORT_OPT,
	BENCH_COMMON_OPTS,
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* Options shared by both subcommands; "-t" only where @tests is set. */
static int parse_opts(int argc, char **argv, struct opts *o, bool lat,
		      void (*usage)(FILE *))
{
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, lat ? "t:s:n:w:h" : "s:n:w:h",
				long_opts, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!lat) {
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
		case 'h':
			usage(stdout);
			exit(0);
		default:
			r = bench_common_opt(c, optarg, &o->cm);
			if (r < 0)
				return -1;
			if (!r) {
				usage(stderr);
				return -1;
			}
		}
	}
	if (optind < argc) {
		fail("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return -1;
	}
	return 0;
}

static int cmd_lat(int argc, char **argv)
{
	struct opts o = {
		.iters = 1000,
		.sizes = {8, 1024, 65536},
		.nsizes = 3,
	};
	int sv[2], cpu_a, cpu_b, status, ret;
	char pin_note[64];
	bool spin_yield;
	pid_t pid;

	if (parse_opts(argc, argv, &o, true, usage_lat))
		return 2;
	if (!o.tests)
		o.tests = (1u << LAT_NOPS) - 1;
	pick_cpus(&cpu_a, &cpu_b);
	/* Two busy-polling processes on one CPU would each spin away the
	 * other's time slice; then they yield instead. */
	spin_yield = cpu_b < 0;
	if (spin_yield) {
		cpu_a = -1;
		snprintf(pin_note, sizeof(pin_note),
			 "(one CPU: not pinned, yielding)");
	} else {
		snprintf(pin_note, sizeof(pin_note),
			 "(client cpu %d, server cpu %d)", cpu_a, cpu_b);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fail("socketpair: %m");
		return 1;
	}
	/* Contexts are opened after the fork: objects do not survive one. */
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fail("fork: %m");
		return 1;
	}
	if (pid == 0) {
		prog = "tollfree-bench (server)";
		close(sv[0]);
		ret = lat_run(&o, sv[1], false, cpu_b, spin_yield, pin_note);
		fflush(NULL);
		_exit(ret ? 1 : 0);
	}
	close(sv[1]);
	ret = lat_run(&o, sv[0], true, cpu_a, spin_yield, pin_note);
	if (ret)
		kill(pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		if (!ret)
			fail("server process failed");
		ret = -1;
	}
	return ret ? 1 : 0;
}

/* ==================================================================== reg */

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

static unsigned reg_iters(const struct opts *o, size_t size)
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

static int reg_setup(struct reg_env *e, const struct opts *o)
{
	tf_cq_params_t cqp = {.field_mask = TF_CQ_PARAM_DEPTH, .depth = 256};
	tf_qp_params_t qpp;
	uint8_t addr_a[TF_QP_ADDR_MAX], addr_b[TF_QP_ADDR_MAX];
	size_t len_a = sizeof(addr_a), len_b = sizeof(addr_b);
	int ret;

	ret = open_ctx(o, &e->ctx);
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
		   const struct opts *o, struct report *r, double *samples,
		   bool *skipped)
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

static int cmd_reg(int argc, char **argv)
{
	struct opts o = {
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

	if (parse_opts(argc, argv, &o, false, usage_reg))
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

/* ==================================================================== main */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s lat|reg|crr|churn [options]   (%s SUBCOMMAND -h "
		"for its options)\n"
		"  lat    perftest-style WRITE/READ/SEND latency between two "
		"processes\n"
		"  reg    cost of registration, deregistration, memory "
		"windows, cache and pool\n"
		"  crr    short sessions: connect, prepare, move, revoke, "
		"close (RDMA_CRR)\n"
		"  churn  a victim's latency while a neighbour churns "
		"registrations (NIC model)\n",
		prog, prog);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "lat"))
		return cmd_lat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "reg"))
		return cmd_reg(argc - 1, argv + 1);
	if (!strcmp(argv[1], "crr"))
		return cmd_crr(argc - 1, argv + 1);
	if (!strcmp(argv[1], "churn"))
		return cmd_churn(argc - 1, argv + 1);
	fail("unknown subcommand '%s'", argv[1]);
	usage(stderr);
	return 2;
}
