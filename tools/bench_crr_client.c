/* SPDX-License-Identifier: MIT */
/*
 * bench_crr_client.c - the client of tollfree-bench crr: runs the modes
 * round-robin in batches, times each session's phases, and prints the
 * table (report_emit, modes layout), the ratios and the plot.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_crr.h"

/* ============================================================ client */

struct cli {
	const struct crr_opts *o;
	char host[64];
	uint16_t ports[P_COUNT];
	int ch;
	tf_context_t *ctx;
	tf_node_t *node[R_COUNT];
	void *buf[R_COUNT];
	uint8_t *tbuf; /* TCP request/response buffer */
	/* Per mode: samples (ns) of the total and of each phase. */
	double *tot[NMODES];
	double *ph[NMODES][PH_COUNT];
	size_t n[NMODES];
	/* warm and tcp-rr: the open session / connection of the batch. */
	tf_session_t *warm;
	int warm_buf;
	int rr_fd;
	uint64_t broken; /* server records that said "broken" */
	int told;	 /* the listener last named in CH_MODE; -1: none */
};

static int cli_wait_one(tf_session_t *s, uint64_t wr_id)
{
	struct tf_wc wc;
	int n = tf_session_wait(s, 1, &wc, CRR_TIMEOUT_MS);

	if (n < 0) {
		fail("waiting for a completion: %s", tf_strerror(n));
		return n;
	}
	if (n == 0) {
		fail("no completion in %d ms (session state %d)",
		     CRR_TIMEOUT_MS, tf_session_state(s));
		return -ETIMEDOUT;
	}
	if (wc.status != TF_WC_SUCCESS || wc.wr_id != wr_id) {
		fail("completion %" PRIu64 ": %s", wc.wr_id,
		     tf_wc_status_str(wc.status));
		return -EIO;
	}
	return 0;
}

/* The K transfers, one after the other, each awaited. */
static int cli_move(struct cli *c, tf_session_t *s, int b)
{
	uint32_t len = (uint32_t)c->o->size;

	for (unsigned i = 0; i < c->o->k; i++) {
		int ret;

		switch (c->o->op) {
		case OP_WRITE:
			ret = tf_session_write(s, b, 0, 0, 0, len, i);
			break;
		case OP_READ:
			ret = tf_session_read(s, b, 0, 0, 0, len, i);
			break;
		default:
			ret = tf_session_send(s, b, 0, len, i);
			break;
		}
		if (ret) {
			fail("posting transfer %u: %s", i, tf_strerror(ret));
			return ret;
		}
		ret = cli_wait_one(s, i);
		if (ret)
			return ret;
	}
	return 0;
}

static int cli_open(struct cli *c, int reg, bool reuse, bool warm,
		    tf_session_t **s_p, int *b_p, uint64_t *t)
{
	/* On a grant the OPEN leaves with the session's first message to
	 * the server: its CLOSE, unless it sends (TF_SESSION_DEFER_OPEN). */
	tf_session_params_t sp = sess_params(
		c->o,
		(reuse ? 0 : TF_SESSION_NO_REUSE) |
			(c->o->remote_inv ? TF_SESSION_REMOTE_INV : 0) |
			(reg == R_POOLMW_GRANT ? TF_SESSION_DEFER_OPEN : 0));
	int ret;

	if (warm) {
		sp.field_mask |= TF_SESSION_PARAM_PRIV;
		sp.priv = WARM_PRIV;
		sp.priv_len = sizeof(WARM_PRIV);
	}
	t[0] = now_ns();
	ret = tf_session_connect(c->node[reg], c->host, c->ports[reg], &sp,
				 s_p);
	t[1] = now_ns();
	if (ret) {
		fail("connect (%s): %s", reg_names[reg], tf_strerror(ret));
		return ret;
	}
	ret = tf_session_attach(*s_p, c->buf[reg], c->o->size,
				attach_flags(c->o->op, false), b_p);
	if (ret) {
		fail("attach (%s): %s", reg_names[reg], tf_strerror(ret));
		return ret;
	}
	if (c->o->op != OP_SEND) {
		ret = tf_session_wait_peer(*s_p, 1, CRR_TIMEOUT_MS);
		if (ret) {
			fail("waiting for the server's exposure: %s",
			     tf_strerror(ret));
			return ret;
		}
	}
	t[2] = now_ns();
	return 0;
}

/* The server's record for the session just closed. */
static int cli_record(struct cli *c, uint64_t *revoke_ns)
{
	struct ch_msg m;
	int ret = ch_recv(c->ch, &m, CH_RECORD);

	if (ret) {
		fail("no record from the server: %s", tf_strerror(ret));
		return ret;
	}
	if (m.a)
		c->broken++;
	*revoke_ns = ((uint64_t)m.ns_hi << 32) | m.ns_lo;
	return 0;
}

static void cli_store(struct cli *c, unsigned mode, const uint64_t *t,
		      uint64_t revoke_ns, bool record)
{
	size_t i = c->n[mode];

	if (!record)
		return;
	c->tot[mode][i] = (double)(t[4] - t[0]);
	c->ph[mode][PH_CONNECT][i] = (double)(t[1] - t[0]);
	c->ph[mode][PH_PREPARE][i] = (double)(t[2] - t[1]);
	c->ph[mode][PH_MOVE][i] = (double)(t[3] - t[2]);
	c->ph[mode][PH_REVOKE][i] = (double)revoke_ns;
	c->ph[mode][PH_CLOSE][i] = (double)(t[4] - t[3]);
	c->n[mode]++;
}

static int one_session(struct cli *c, unsigned mode, bool record)
{
	const struct crr_mode *md = &crr_modes[mode];
	uint64_t t[5], rv;
	tf_session_t *s = NULL;
	int b, ret;

	ret = cli_open(c, md->reg, md->reuse, false, &s, &b, t);
	if (!ret)
		ret = cli_move(c, s, b);
	t[3] = now_ns();
	tf_session_close(s);
	t[4] = now_ns();
	if (ret)
		return ret;
	ret = cli_record(c, &rv);
	if (!ret)
		cli_store(c, mode, t, rv, record);
	return ret;
}

static int one_warm(struct cli *c, unsigned mode, bool record)
{
	uint64_t t[5];
	int ret;

	t[0] = t[1] = t[2] = now_ns();
	ret = cli_move(c, c->warm, c->warm_buf);
	t[3] = t[4] = now_ns();
	if (!ret)
		cli_store(c, mode, t, 0, record);
	return ret;
}

/* A TCP reference's connection: blocking, or non-blocking and spun to
 * completion (@spin). */
static int tcp_open(struct cli *c, bool spin)
{
	int fd = spin ? sock_connect_spin(c->host, c->ports[P_TCP_SPIN],
					  CRR_TIMEOUT_MS)
		      : sock_connect(c->host, c->ports[P_TCP], CRR_TIMEOUT_MS);

	if (fd < 0)
		fail("tcp connect: %s", tf_strerror(fd));
	return fd;
}

/* K request/response exchanges of S bytes; @spin: busy-polling, as the
 * server at the other end does. */
static int tcp_exchange(struct cli *c, int fd, bool spin)
{
	int (*full)(int, void *, size_t, bool, int) =
		spin ? sock_full_spin : sock_full;

	for (unsigned i = 0; i < c->o->k; i++) {
		int ret = full(fd, c->tbuf, c->o->size, true, CRR_TIMEOUT_MS);

		if (!ret)
			ret = full(fd, c->tbuf, c->o->size, false,
				   CRR_TIMEOUT_MS);
		if (ret) {
			fail("tcp exchange: %s", tf_strerror(ret));
			return ret;
		}
	}
	return 0;
}

static int one_tcp(struct cli *c, unsigned mode, bool record)
{
	const struct crr_mode *md = &crr_modes[mode];
	bool crr = md->kind == K_TCP_CRR;
	uint64_t t[5];
	int fd, ret;

	t[0] = now_ns();
	fd = crr ? tcp_open(c, md->spin) : c->rr_fd;
	t[1] = t[2] = now_ns();
	if (fd < 0)
		return fd;
	ret = tcp_exchange(c, fd, md->spin);
	t[3] = now_ns();
	if (crr)
		close(fd);
	t[4] = now_ns();
	if (!ret)
		cli_store(c, mode, t, 0, record);
	return ret;
}

/* --gap-us: pause before a transaction, outside its time, so that the
 * server goes idle (and, with --server-wait sleep, to sleep).  A sleep,
 * not a spin: the client gives its CPU up as a client that has nothing
 * to do would. */
static void gap(unsigned us)
{
	struct timespec ts = {.tv_sec = us / 1000000,
			      .tv_nsec = (long)(us % 1000000) * 1000};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Run @count transactions of @mode; the batch's kept session or
 * connection (warm, tcp-rr) is opened before and closed after, outside
 * the samples. */
static int run_batch(struct cli *c, unsigned mode, unsigned count, bool record)
{
	const struct crr_mode *md = &crr_modes[mode];
	int reg = md->kind == K_SESSION ? md->reg
		  : md->kind == K_WARM	? R_POOLMW
					: R_COUNT;
	uint64_t t[5], rv;
	int ret = 0;

	/* The server looks only at the listener of the mode that runs
	 * (others when their fd says so): six busy-polling listeners
	 * would slow every turn of its loop, the TCP modes' too. */
	if (reg != c->told) {
		struct ch_msg m = {.type = CH_MODE, .a = (uint32_t)reg};

		ret = ch_send(c->ch, &m);
		if (ret)
			return ret;
		c->told = reg;
	}
	if (md->kind == K_WARM) {
		ret = cli_open(c, R_POOLMW, true, true, &c->warm, &c->warm_buf,
			       t);
		if (ret)
			return ret;
	} else if (md->kind == K_TCP_RR) {
		c->rr_fd = tcp_open(c, md->spin);
		if (c->rr_fd < 0)
			return c->rr_fd;
	}
	for (unsigned i = 0; i < count && !ret; i++) {
		if (c->o->gap_us)
			gap(c->o->gap_us);
		switch (md->kind) {
		case K_SESSION:
			ret = one_session(c, mode, record);
			break;
		case K_WARM:
			ret = one_warm(c, mode, record);
			break;
		default:
			ret = one_tcp(c, mode, record);
			break;
		}
	}
	if (md->kind == K_WARM) {
		tf_session_close(c->warm);
		c->warm = NULL;
		if (!ret)
			ret = cli_record(c, &rv);
	} else if (md->kind == K_TCP_RR) {
		close(c->rr_fd);
		c->rr_fd = -1;
	}
	return ret;
}

static void print_ratios(const struct report *r, FILE *f)
{
	static const struct {
		const char *a, *b;
		bool rate;
		const char *what;
	} q[] = {
		{"direct/new", "pool+mw/reuse", false,
		 "median: direct/new over pool+mw/reuse (x faster)"},
		{"direct/reuse", "pool+mw/reuse", false,
		 "median: direct/reuse over pool+mw/reuse (x faster)"},
		{"pool+mw/reuse", "warm", false,
		 "median: pool+mw/reuse over warm (session overhead)"},
		{"pool+mw/grant", "warm", false,
		 "median: pool+mw/grant over warm (with grants)"},
		{"pool+mw/new+psk", "pool+mw/new", false,
		 "median: pool+mw/new+psk over pool+mw/new (key proof)"},
		/* tollfree's client busy-polls: the fair references are
		 * the TCP ones that busy-poll too. */
		{"pool+mw/new", "tcp-crr-spin", false,
		 "median: pool+mw/new over tcp-crr-spin"},
		{"pool+mw/reuse", "tcp-crr-spin", true,
		 "sessions/s: pool+mw/reuse over tcp-crr-spin"},
		{"pool+mw/reuse", "tcp-rr-spin", true,
		 "sessions/s: pool+mw/reuse over tcp-rr-spin"},
		/* Against blocking TCP, as most programs use it. */
		{"pool+mw/new", "tcp-crr", false,
		 "median: pool+mw/new over tcp-crr"},
		{"pool+mw/reuse", "tcp-crr", true,
		 "sessions/s: pool+mw/reuse over tcp-crr"},
		{"pool+mw/reuse", "tcp-rr", true,
		 "sessions/s: pool+mw/reuse over tcp-rr"},
	};
	bool any = false;

	for (size_t i = 0; i < ARRAY_SIZE(q); i++) {
		double v = report_ratio(r, q[i].a, q[i].b, q[i].rate);

		if (v <= 0)
			continue;
		if (!any)
			fprintf(f, "ratios (this run):\n");
		any = true;
		fprintf(f, "  %-52s %8.2f\n", q[i].what, v);
	}
	if (!strcmp(r->transport, "tcp")) {
		const char *ref = "tcp-rr-spin";
		double v = report_ratio(r, "pool+mw/reuse", ref, true);

		if (v <= 0) {
			ref = "tcp-rr";
			v = report_ratio(r, "pool+mw/reuse", ref, true);
		}
		if (v > 0)
			fprintf(f,
				"  on the tcp transport, a whole tollfree "
				"session (pool+mw/reuse) runs at %.2fx the "
				"rate of K exchanges on an open TCP "
				"connection (%s)\n",
				v, ref);
	}
}

static int cli_setup(struct cli *c)
{
	struct ch_msg m = {.type = CH_HELLO};
	int ret;

	m.a = (uint32_t)c->o->op;
	m.b = c->o->k;
	m.c = (uint32_t)c->o->size;
	m.d = c->o->server_sleep ? CH_HELLO_SLEEP : 0;
	ret = ch_send(c->ch, &m);
	if (!ret)
		ret = ch_recv(c->ch, &m, CH_PORTS);
	if (ret) {
		fail("bench channel: %s", tf_strerror(ret));
		return ret;
	}
	for (int r = 0; r < P_COUNT; r++) {
		if (!m.ports[r] || m.ports[r] > 65535) {
			fail("bad port from the server");
			return -EPROTO;
		}
		c->ports[r] = (uint16_t)m.ports[r];
	}
	ret = bench_open_ctx(c->o->cm.provider, c->o->cm.device,
			     c->o->cm.transport, &c->ctx);
	if (ret)
		return ret;
	for (int r = 0; r < R_COUNT; r++) {
		ret = node_for(c->ctx, r, c->o->size, &c->node[r]);
		if (ret)
			return ret;
		c->buf[r] = map_buf(c->o->size);
		if (!c->buf[r])
			return -ENOMEM;
	}
	c->tbuf = calloc(1, c->o->size);
	if (!c->tbuf)
		return -ENOMEM;
	for (unsigned md = 0; md < NMODES; md++) {
		if (!(c->o->modes & (1u << md)))
			continue;
		c->tot[md] = calloc(c->o->sessions, sizeof(double));
		if (!c->tot[md])
			return -ENOMEM;
		for (int p = 0; p < PH_COUNT; p++) {
			c->ph[md][p] = calloc(c->o->sessions, sizeof(double));
			if (!c->ph[md][p])
				return -ENOMEM;
		}
	}
	return 0;
}

static void cli_teardown(struct cli *c)
{
	tf_session_close(c->warm);
	for (int r = 0; r < R_COUNT; r++) {
		tf_node_destroy(c->node[r]);
		if (c->buf[r])
			munmap(c->buf[r], c->o->size);
	}
	tf_context_close(c->ctx);
	free(c->tbuf);
	for (unsigned md = 0; md < NMODES; md++) {
		free(c->tot[md]);
		for (int p = 0; p < PH_COUNT; p++)
			free(c->ph[md][p]);
	}
}

int crr_client(const struct crr_opts *o, int ch, const char *host, int cpu,
	       const char *pin_note)
{
	struct cli c = {.o = o, .ch = ch, .rr_fd = -1, .told = -1};
	struct report r = {.bench = "crr", .layout = LAYOUT_MODES};
	unsigned rounds, done = 0, total = 0, md;
	bool bar = isatty(STDERR_FILENO);
	char extra[256];
	double *sorted[NMODES];
	size_t ns[NMODES];
	int ret;

	pin_to(cpu);
	snprintf(c.host, sizeof(c.host), "%s", host);
	ret = cli_setup(&c);
	if (ret)
		goto out;
	{
		char wait[64] = "";
		int n = 0;

		/* Said only when not the default, so that the default
		 * header stays as it was. */
		if (o->server_sleep)
			n = snprintf(wait, sizeof(wait),
				     "  server-wait: sleep");
		if (o->gap_us)
			n += snprintf(wait + n, sizeof(wait) - (size_t)n,
				      "  gap: %u us", o->gap_us);
		if (o->remote_inv)
			snprintf(wait + n, sizeof(wait) - (size_t)n,
				 "  remote-inv");
		snprintf(extra, sizeof(extra),
			 "%s\n%sop: %s  K: %u  S: %" PRIu64
			 " B  sessions/mode: %u  warm-up/mode: %u  batch: %u%s",
			 pin_note, o->cm.csv ? "# " : "", op_names[o->op], o->k,
			 o->size, o->sessions, o->warmup, o->batch, wait);
	}
	report_header(&r, c.ctx, o->cm.transport, extra,
		      o->cm.csv ? OUT_CSV : OUT_TEXT);
	{
		tf_node_stats_t st;

		if (!tf_node_query_stats(c.node[R_POOLMW], &st) && !st.use_mw)
			printf("%snote: the provider has no memory windows: "
			       "pool+mw exposes through registrations\n",
			       o->cm.csv ? "# " : "");
	}
	fflush(stdout);
	r.size = o->size;
	r.transfers = o->k;
	r.sessions = o->sessions;

	rounds = (o->sessions + o->batch - 1) / o->batch;
	for (md = 0; md < NMODES; md++)
		if (o->modes & (1u << md))
			total += o->warmup + o->sessions;
	/* Warm-up: one batch per mode, not recorded (first connections,
	 * pool chunks, cache entries, windows). */
	for (md = 0; md < NMODES && o->warmup; md++) {
		if (!(o->modes & (1u << md)))
			continue;
		ret = run_batch(&c, md, o->warmup, false);
		if (ret)
			goto out;
		done += o->warmup;
		if (bar)
			progress_bar(done, total, "warm-up");
	}
	for (unsigned k = 0; k < rounds; k++) {
		for (md = 0; md < NMODES; md++) {
			unsigned left = o->sessions - (unsigned)c.n[md];
			unsigned cnt = left < o->batch ? left : o->batch;

			if (!(o->modes & (1u << md)) || !cnt)
				continue;
			ret = run_batch(&c, md, cnt, true);
			if (ret) {
				fail("mode %s failed", crr_modes[md].name);
				goto out;
			}
			done += cnt;
			if (bar)
				progress_bar(done, total, crr_modes[md].name);
		}
	}
	{
		struct ch_msg m = {.type = CH_BYE};

		ch_send(c.ch, &m);
	}

	for (md = 0; md < NMODES; md++) {
		struct bench_row row = {.op = crr_modes[md].name,
					.size = o->size};

		if (!(o->modes & (1u << md)))
			continue;
		row.iters = (unsigned)c.n[md];
		for (int p = 0; p < PH_COUNT; p++)
			row.phases[p] = median_of(c.ph[md][p], c.n[md]);
		stats_compute(c.tot[md], c.n[md], &row.st);
		row.rate = row.st.avg > 0 ? 1e9 / row.st.avg : 0;
		sorted[r.nrows] = c.tot[md];
		ns[r.nrows] = c.n[md];
		ret = report_add(&r, &row);
		if (ret)
			goto out;
	}
	report_emit(&r, o->cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	if (!o->cm.csv) {
		print_ratios(&r, stdout);
		if (c.broken)
			printf("note: %" PRIu64 " sessions ended broken on "
			       "the server\n",
			       c.broken);
		{
			tf_node_stats_t st;

			if (!tf_node_query_stats(c.node[R_POOLMW], &st))
				printf("pool+mw node: %" PRIu64
				       " connections made, %" PRIu64
				       " reused\n",
				       st.qp_new, st.qp_reused);
			if (!tf_node_query_stats(c.node[R_POOLMW_GRANT], &st) &&
			    st.qp_reused)
				printf("pool+mw+grant node: %" PRIu64
				       " of %" PRIu64
				       " sessions on kept connections took a "
				       "grant\n",
				       st.grants_taken, st.qp_reused);
		}
	}
	if (o->cm.json && report_write_json(&r, o->cm.json))
		ret = -EIO;
	if (o->plot && plot_crr_svg(o->plot, &r, sorted, ns))
		ret = -EIO;
out:
	cli_teardown(&c);
	free(r.rows);
	return ret;
}
