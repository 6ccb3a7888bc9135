/* SPDX-License-Identifier: MIT */
/*
 * bench_plot.c - crr's and load's --plot: one plain SVG file, written
 * here with fprintf, no dependencies.  Left: the latency CDF of every mode on a
 * logarithmic time axis (fraction of sessions that finished within t).
 * Right: the median of each phase per mode, as stacked horizontal bars on
 * a linear axis, with the sum written at the end of each bar.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "bench.h"

#define W	  1180
#define H	  560
#define CDF_X0	  70 /* CDF plot area */
#define CDF_X1	  560
#define CDF_Y0	  60
#define CDF_Y1	  480
#define LEG_X	  580 /* mode legend */
#define BAR_X0	  800 /* bar plot area */
#define BAR_X1	  1110
#define CDF_STEPS 200

/* Modes, in row order: a qualitative palette with enough contrast. */
static const char *const colors[] = {
	"#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a",
	"#d62728", "#ff9896", "#9467bd", "#8c564b", "#7f7f7f", "#e377c2",
	"#bcbd22", "#17becf", "#c5b0d5", "#c49c94",
};
static const char *const phase_colors[PH_COUNT] = {
	"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
};

static double xlog(double us, double lo, double hi)
{
	double f = (log10(us) - log10(lo)) / (log10(hi) - log10(lo));

	if (f < 0)
		f = 0;
	if (f > 1)
		f = 1;
	return CDF_X0 + f * (CDF_X1 - CDF_X0);
}

static double ycdf(double q)
{
	return CDF_Y1 - q * (CDF_Y1 - CDF_Y0);
}

static void text(FILE *f, double x, double y, const char *anchor, int size,
		 const char *s)
{
	fprintf(f,
		"<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" "
		"font-size=\"%d\">",
		x, y, anchor, size);
	for (; *s; s++) {
		if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '&')
			fputs("&amp;", f);
		else
			fputc(*s, f);
	}
	fputs("</text>\n", f);
}

static void cdf_panel(FILE *f, const struct report *r, double *const *samples,
		      const size_t *n)
{
	double lo = INFINITY, hi = 0, dlo, dhi;
	char buf[64];

	/* The axis spans the fastest sample to the slowest 99.9th
	 * percentile, rounded out to whole decades. */
	for (size_t i = 0; i < r->nrows; i++) {
		if (!n[i])
			continue;
		if (samples[i][0] / 1e3 < lo)
			lo = samples[i][0] / 1e3;
		if (r->rows[i].st.p999 / 1e3 > hi)
			hi = r->rows[i].st.p999 / 1e3;
	}
	if (!(lo < INFINITY) || hi <= 0)
		lo = 1, hi = 10;
	if (lo <= 0)
		lo = 0.01;
	dlo = floor(log10(lo));
	dhi = ceil(log10(hi));
	if (dhi <= dlo)
		dhi = dlo + 1;
	lo = pow(10, dlo);
	hi = pow(10, dhi);

	text(f, (CDF_X0 + CDF_X1) / 2.0, 30, "middle", 16,
	     "Session latency CDF (fraction of sessions done within t)");
	fprintf(f,
		"<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
		"fill=\"none\" stroke=\"#000\"/>\n",
		CDF_X0, CDF_Y0, CDF_X1 - CDF_X0, CDF_Y1 - CDF_Y0);
	/* Decades with labels, 2 and 5 as light lines. */
	for (double d = dlo; d <= dhi; d++) {
		for (int m = 1; m < 10; m++) {
			double v = pow(10, d) * m, x;

			if (v > hi * 1.0001)
				break;
			if (m != 1 && m != 2 && m != 5)
				continue;
			x = xlog(v, lo, hi);
			fprintf(f,
				"<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" "
				"y2=\"%d\" stroke=\"%s\"/>\n",
				x, CDF_Y0, x, CDF_Y1,
				m == 1 ? "#bbb" : "#e6e6e6");
			if (m == 1) {
				snprintf(buf, sizeof(buf),
					 v < 1 ? "%g" : "%.0f", v);
				text(f, x, CDF_Y1 + 18, "middle", 12, buf);
			}
		}
	}
	for (int q = 0; q <= 10; q += 2) {
		double y = ycdf(q / 10.0);

		fprintf(f,
			"<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
			"stroke=\"#e6e6e6\"/>\n",
			CDF_X0, y, CDF_X1, y);
		snprintf(buf, sizeof(buf), "%.1f", q / 10.0);
		text(f, CDF_X0 - 6, y + 4, "end", 12, buf);
	}
	text(f, (CDF_X0 + CDF_X1) / 2.0, CDF_Y1 + 40, "middle", 13,
	     "time per session [us], log scale");
	fprintf(f,
		"<text x=\"20\" y=\"%d\" font-size=\"13\" "
		"text-anchor=\"middle\" transform=\"rotate(-90 20 %d)\">"
		"fraction of sessions</text>\n",
		(CDF_Y0 + CDF_Y1) / 2, (CDF_Y0 + CDF_Y1) / 2);

	for (size_t i = 0; i < r->nrows; i++) {
		const char *col = colors[i % ARRAY_SIZE(colors)];
		bool ref = strchr(r->rows[i].op, '/') == NULL;

		if (!n[i])
			continue;
		fprintf(f,
			"<polyline fill=\"none\" stroke=\"%s\" "
			"stroke-width=\"2\"%s points=\"",
			col, ref ? " stroke-dasharray=\"6,3\"" : "");
		/* A step per quantile; the first point sits at q = 0. */
		fprintf(f, "%.1f,%.1f ", xlog(samples[i][0] / 1e3, lo, hi),
			ycdf(0));
		for (int k = 1; k <= CDF_STEPS; k++) {
			double q = (double)k / CDF_STEPS;
			size_t idx = (size_t)ceil(q * (double)n[i]);

			if (idx < 1)
				idx = 1;
			if (idx > n[i])
				idx = n[i];
			fprintf(f, "%.1f,%.1f ",
				xlog(samples[i][idx - 1] / 1e3, lo, hi),
				ycdf(q));
		}
		fprintf(f, "\"/>\n");
		/* Legend: one line per mode, dashed for references. */
		fprintf(f,
			"<line x1=\"%d\" y1=\"%zu\" x2=\"%d\" y2=\"%zu\" "
			"stroke=\"%s\" stroke-width=\"3\"%s/>\n",
			LEG_X, CDF_Y0 + 10 + i * 22, LEG_X + 28,
			CDF_Y0 + 10 + i * 22, col,
			ref ? " stroke-dasharray=\"6,3\"" : "");
		text(f, LEG_X + 34, (double)(CDF_Y0 + 14 + i * 22), "start", 13,
		     r->rows[i].op);
	}
}

static void bar_panel(FILE *f, const struct report *r)
{
	double max = 0, bh = 22, gap = 8;
	char buf[64];

	/* Rows of 30 px while they fit above the axis, thinner after. */
	if ((double)r->nrows * (bh + gap) > CDF_Y1 - CDF_Y0 - 10) {
		double pitch = (CDF_Y1 - CDF_Y0 - 10) / (double)r->nrows;

		bh = pitch * 22 / 30;
		gap = pitch - bh;
	}

	for (size_t i = 0; i < r->nrows; i++) {
		double sum = 0;

		for (int p = 0; p < PH_COUNT; p++)
			sum += r->rows[i].phases[p];
		if (sum > max)
			max = sum;
	}
	if (max <= 0)
		max = 1;
	/* Round the axis up to 4 steps of 1, 2 or 5 times a power of ten,
	 * so that the tick labels are round numbers. */
	{
		double step = pow(10, floor(log10(max / 4))), m;

		for (m = 1; m <= 10; m = m == 1 ? 2 : m == 2 ? 5 : 10)
			if (step * m * 4 >= max)
				break;
		max = step * m * 4;
	}
	text(f, (BAR_X0 + BAR_X1) / 2.0, 30, "middle", 16,
	     "Median time per phase [us]");
	/* Phase legend under the title. */
	for (int p = 0; p < PH_COUNT; p++) {
		double x = BAR_X0 - 110 + p * 78;

		fprintf(f,
			"<rect x=\"%.1f\" y=\"40\" width=\"12\" "
			"height=\"12\" fill=\"%s\"/>\n",
			x, phase_colors[p]);
		text(f, x + 16, 51, "start", 12, bench_phase_names[p]);
	}
	for (size_t i = 0; i < r->nrows; i++) {
		double y = CDF_Y0 + 10 + (double)i * (bh + gap), x = BAR_X0;
		double sum = 0;

		text(f, BAR_X0 - 6, y + bh * 0.7, "end", 13, r->rows[i].op);
		for (int p = 0; p < PH_COUNT; p++) {
			double w =
				r->rows[i].phases[p] / max * (BAR_X1 - BAR_X0);

			sum += r->rows[i].phases[p];
			if (w <= 0)
				continue;
			fprintf(f,
				"<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" "
				"height=\"%.1f\" fill=\"%s\"/>\n",
				x, y, w, bh, phase_colors[p]);
			x += w;
		}
		snprintf(buf, sizeof(buf), "%.1f", sum / 1e3);
		text(f, x + 4, y + bh * 0.7, "start", 12, buf);
	}
	fprintf(f,
		"<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
		"stroke=\"#000\"/>\n",
		BAR_X0, CDF_Y0, BAR_X0, CDF_Y1);
	for (int t = 0; t <= 4; t++) {
		double x = BAR_X0 + t * (BAR_X1 - BAR_X0) / 4.0;

		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" "
			"stroke=\"#000\"/>\n",
			x, CDF_Y1, x, CDF_Y1 + 5);
		snprintf(buf, sizeof(buf), "%g", max / 1e3 * t / 4);
		text(f, x, CDF_Y1 + 18, "middle", 12, buf);
	}
	text(f, (BAR_X0 + BAR_X1) / 2.0, CDF_Y1 + 40, "middle", 13,
	     "us (linear; revoke is the server's, overlapping close)");
}

int plot_crr_svg(const char *path, const struct report *r,
		 double *const *samples, const size_t *n)
{
	FILE *f = fopen(path, "w");
	char buf[384], per[48] = "";

	if (!f) {
		fail("cannot write %s: %m", path);
		return -errno;
	}
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
		W, H, W, H);
	cdf_panel(f, r, samples, n);
	bar_panel(f, r);
	/* load runs for a duration: no session count per mode. */
	if (r->sessions)
		snprintf(per, sizeof(per), "%u sessions per mode, ",
			 r->sessions);
	snprintf(buf, sizeof(buf),
		 "tollfree-bench %s: provider %s, transport %s, K %u "
		 "transfers of %llu B, %scpu %s",
		 r->bench, r->provider, r->transport, r->transfers,
		 (unsigned long long)r->size, per, r->cpu);
	text(f, W / 2.0, H - 12, "middle", 12, buf);
	fprintf(f, "</svg>\n");
	if (fclose(f)) {
		fail("cannot write %s: %m", path);
		return -EIO;
	}
	return 0;
}
