/* SPDX-License-Identifier: MIT */
/*
 * bench_report.c - the one place that prints results: the environment
 * header of every run and report_emit(), which writes a report's rows as
 * text tables, CSV or JSON, in the sized layout (lat, reg, churn: one
 * perftest table per operation) or the modes layout (crr: one row per
 * mode, with a rate and a phase breakdown).  The formats are documented
 * in tollfree-bench(1); scripts parse them, so they change only on
 * purpose.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tollfree/tollfree.h>

#include "bench.h"

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

double report_ratio(const struct report *r, const char *a, const char *b,
		    bool rate)
{
	const struct bench_row *x = NULL, *y = NULL;

	for (size_t i = 0; i < r->nrows; i++) {
		if (!strcmp(r->rows[i].op, a))
			x = &r->rows[i];
		if (!strcmp(r->rows[i].op, b))
			y = &r->rows[i];
	}
	if (!x || !y)
		return 0;
	if (rate)
		return y->rate > 0 ? x->rate / y->rate : 0;
	return y->st.median > 0 ? x->st.median / y->st.median : 0;
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
#define MODE_COLS_FMT "%-*s %9s %11s %11s %11s %11s %11s %11s %11s"
#define MODE_ROW_FMT  "%-*s %9u %11.2f %11.2f %11.2f %11.2f %11.2f %11.2f %11.0f"
/* Load's: failed sessions, the server's CPU time per session. */
#define LOAD_COLS_FMT  " %8s %12s"
#define LOAD_ROW_FMT   " %8" PRIu64 " %12.2f"
#define PHASE_COLS_FMT " | %8s %8s %8s %8s %8s\n"
#define PHASE_ROW_FMT  " | %8.2f %8.2f %8.2f %8.2f %8.2f\n"

/*
 * Modes layout (crr).  Text: one table, one row per mode: perftest's
 * columns per session in microseconds (no t_max: one descheduled session
 * on a loaded host says nothing), sessions per second, then the median of
 * each phase.  CSV: the same columns.  JSON: the schema documented in
 * tollfree-bench(1), times in microseconds.
 */
static void emit_modes(const struct report *r, enum out_fmt fmt, FILE *f)
{
	/* The mode column: 14 wide, wider for a longer name, so that the
	 * columns stay aligned. */
	int w_mode = 14;
	size_t i;
	int p;

	for (i = 0; i < r->nrows; i++)
		if (strlen(r->rows[i].op) > (size_t)w_mode)
			w_mode = (int)strlen(r->rows[i].op);

	switch (fmt) {
	case OUT_TEXT:
		fprintf(f, "%s", PERF_RULE);
		fprintf(f, MODE_COLS_FMT, w_mode, "mode", "#sessions",
			"t_min[us]", "t_typical", "t_avg", "t_stdev", "99%",
			"99.9%", "sessions/s");
		if (r->load)
			fprintf(f, LOAD_COLS_FMT, "failed", "srv_cpu[us]");
		fprintf(f, PHASE_COLS_FMT, bench_phase_names[0],
			bench_phase_names[1], bench_phase_names[2],
			bench_phase_names[3], bench_phase_names[4]);
		break;
	case OUT_CSV:
		fprintf(f, "mode,sessions,t_min_usec,t_typical_usec,"
			   "t_avg_usec,t_stdev_usec,p99_usec,p99.9_usec,"
			   "sessions_per_s");
		if (r->load)
			fprintf(f, ",failed,server_cpu_usec_per_session");
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
			"\"sessions\":%u%s,\"modes\":[",
			r->size, r->transfers, r->sessions,
			r->json_extra ? r->json_extra : "");
		break;
	}
	for (i = 0; i < r->nrows; i++) {
		const struct bench_row *w = &r->rows[i];
		const struct bench_stats *s = &w->st;
		const double *ph = w->phases;

		switch (fmt) {
		case OUT_TEXT:
			fprintf(f, MODE_ROW_FMT, w_mode, w->op, w->iters,
				s->min / 1e3, s->median / 1e3, s->avg / 1e3,
				s->stdev / 1e3, s->p99 / 1e3, s->p999 / 1e3,
				w->rate);
			if (r->load)
				fprintf(f, LOAD_ROW_FMT, w->failed,
					w->server_cpu / 1e3);
			fprintf(f, PHASE_ROW_FMT, ph[0] / 1e3, ph[1] / 1e3,
				ph[2] / 1e3, ph[3] / 1e3, ph[4] / 1e3);
			break;
		case OUT_CSV:
			fprintf(f, "%s,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f",
				w->op, w->iters, s->min / 1e3, s->median / 1e3,
				s->avg / 1e3, s->stdev / 1e3, s->p99 / 1e3,
				s->p999 / 1e3, w->rate);
			if (r->load)
				fprintf(f, ",%" PRIu64 ",%.3f", w->failed,
					w->server_cpu / 1e3);
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
				"\"sessions_per_s\":%.1f",
				s->min / 1e3, s->median / 1e3, s->avg / 1e3,
				s->stdev / 1e3, s->p99 / 1e3, s->p999 / 1e3,
				w->rate);
			if (r->load)
				fprintf(f,
					",\"p50_us\":%.3f,\"failed\":%" PRIu64
					",\"server_cpu_us_per_session\":%.3f",
					s->median / 1e3, w->failed,
					w->server_cpu / 1e3);
			fprintf(f, ",\"phases_us\":{");
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
