/* SPDX-License-Identifier: MIT */
/*
 * bench_load_client.c - a client process of tollfree-bench load: one
 * context and one pool+mw node, shared by T threads (a node is
 * thread-safe for creating sessions).  For each mode the parent names,
 * every thread runs sessions from t0 to t_end, back to back (closed
 * loop) or on a schedule of --rate sessions/s (open loop: a session's
 * time counts from when it was due, so that a server that falls behind
 * shows in the latency, not only in the rate).  The process then sends
 * the samples of all its threads to the parent.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_load.h"

struct lcli {
	const struct load_opts *o;
	tf_node_t *node;
	uint16_t port, grant, tcp;
	unsigned idx; /* this process's index, for the open-loop offsets */
	unsigned mode;
	uint64_t t0, t_end;
};

struct lthr {
	struct lcli *c;
	pthread_t tid;
	unsigned idx;
	void *buf;     /* the SIZE bytes written K times */
	uint8_t *tbuf; /* TCP request/response */
	double *v[LS_COUNT];
	size_t n, cap;
	uint64_t failed, missed, last_ns;
	char err[120];
};

/* Remember the first failure of the mode; later ones are only counted. */
static void thr_err(struct lthr *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void thr_err(struct lthr *t, const char *fmt, ...)
{
	va_list ap;

	t->failed++;
	if (t->err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(t->err, sizeof(t->err), fmt, ap);
	va_end(ap);
}

static int thr_store(struct lthr *t, const uint64_t *ts, uint64_t start)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 4096;

		for (int i = 0; i < LS_COUNT; i++) {
			double *n = realloc(t->v[i], cap * sizeof(*n));

			if (!n)
				return -ENOMEM;
			t->v[i] = n;
		}
		t->cap = cap;
	}
	t->v[LS_TOTAL][t->n] = (double)(ts[4] - start);
	t->v[LS_CONNECT][t->n] = (double)(ts[1] - ts[0]);
	t->v[LS_PREPARE][t->n] = (double)(ts[2] - ts[1]);
	t->v[LS_MOVE][t->n] = (double)(ts[3] - ts[2]);
	t->v[LS_CLOSE][t->n] = (double)(ts[4] - ts[3]);
	t->n++;
	t->last_ns = ts[4];
	return 0;
}

/* One session of crr's pool+mw modes: connect (a kept connection, or a
 * new one with TF_SESSION_NO_REUSE), attach the buffer and wait for the
 * server's exposure, K writes of SIZE bytes (to consecutive offsets of
 * the K * SIZE bytes exposed), each awaited, close. */
static int one_tf(struct lthr *t, const struct load_mode *md, uint64_t *ts)
{
	bool reuse = md->reuse;
	const struct load_opts *o = t->c->o;
	struct crr_opts co = {.k = o->k};
	/* On a grant the OPEN goes with the CLOSE: the session only
	 * writes the grant (TF_SESSION_DEFER_OPEN). */
	tf_session_params_t sp = sess_params(
		&co, (reuse ? 0 : TF_SESSION_NO_REUSE) |
			     (o->remote_inv ? TF_SESSION_REMOTE_INV : 0) |
			     (md->grant ? TF_SESSION_DEFER_OPEN : 0));
	tf_session_t *s = NULL;
	int b, ret;

	ts[0] = now_ns();
	ret = tf_session_connect(t->c->node, "127.0.0.1",
				 md->grant ? t->c->grant : t->c->port, &sp, &s);
	ts[1] = now_ns();
	if (ret) {
		thr_err(t, "connect: %s", tf_strerror(ret));
		return ret;
	}
	ret = tf_session_attach(s, t->buf, o->size,
				attach_flags(OP_WRITE, false), &b);
	if (!ret)
		ret = tf_session_wait_peer(s, 1, CRR_TIMEOUT_MS);
	ts[2] = now_ns();
	if (ret) {
		thr_err(t, "prepare: %s", tf_strerror(ret));
		goto out;
	}
	for (unsigned i = 0; i < o->k && !ret; i++) {
		struct tf_wc wc;
		int n;

		ret = tf_session_write(s, b, 0, 0, (uint64_t)i * o->size,
				       (uint32_t)o->size, i);
		if (ret) {
			thr_err(t, "write: %s", tf_strerror(ret));
			break;
		}
		n = tf_session_wait(s, 1, &wc, CRR_TIMEOUT_MS);
		if (n != 1 || wc.status != TF_WC_SUCCESS || wc.wr_id != i) {
			thr_err(t, "write completion: %s",
				n < 0	 ? tf_strerror(n)
				: n == 0 ? "timed out"
					 : tf_wc_status_str(wc.status));
			ret = -EIO;
		}
	}
out:
	ts[3] = now_ns();
	tf_session_close(s);
	ts[4] = now_ns();
	return ret;
}

static int tcp_open(struct lthr *t, bool spin)
{
	int fd =
		spin ? sock_connect_spin("127.0.0.1", t->c->tcp, CRR_TIMEOUT_MS)
		     : sock_connect("127.0.0.1", t->c->tcp, CRR_TIMEOUT_MS);

	if (fd < 0)
		thr_err(t, "tcp connect: %s", tf_strerror(fd));
	return fd;
}

/* K request/response exchanges of SIZE bytes, as crr's references. */
static int tcp_exchange(struct lthr *t, int fd, bool spin)
{
	const struct load_opts *o = t->c->o;
	int (*full)(int, void *, size_t, bool, int) =
		spin ? sock_full_spin : sock_full;

	for (unsigned i = 0; i < o->k; i++) {
		int ret = full(fd, t->tbuf, o->size, true, CRR_TIMEOUT_MS);

		if (!ret)
			ret = full(fd, t->tbuf, o->size, false, CRR_TIMEOUT_MS);
		if (ret) {
			thr_err(t, "tcp exchange: %s", tf_strerror(ret));
			return ret;
		}
	}
	return 0;
}

/* tcp-crr (connect, exchanges, close) or tcp-rr (the exchanges on the
 * thread's kept connection *@rr, opened again after a failure). */
static int one_tcp(struct lthr *t, const struct load_mode *md, int *rr,
		   uint64_t *ts)
{
	bool crr = md->kind == LK_TCP_CRR;
	int fd, ret;

	ts[0] = now_ns();
	fd = crr || *rr < 0 ? tcp_open(t, md->spin) : *rr;
	ts[1] = ts[2] = now_ns();
	if (fd < 0)
		return fd;
	ret = tcp_exchange(t, fd, md->spin);
	ts[3] = now_ns();
	if (crr || ret)
		close(fd);
	ts[4] = now_ns();
	if (!crr)
		*rr = ret ? -1 : fd;
	return ret;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
			      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

static void *thr_main(void *arg)
{
	struct lthr *t = arg;
	struct lcli *c = t->c;
	const struct load_opts *o = c->o;
	const struct load_mode *md = &load_modes[c->mode];
	uint64_t period = o->rate > 0 ? (uint64_t)(1e9 / o->rate) : 0;
	/* Open loop: the threads of all processes start their schedules
	 * spread over one period, not all at once. */
	uint64_t offset = period * (c->idx * o->threads + t->idx) /
			  ((uint64_t)o->clients * o->threads);
	uint64_t ts[5];
	int rr = -1;

	/* tcp-rr's connection, opened before t0; if this fails, the
	 * first session tries again (and counts if it fails too). */
	if (md->kind == LK_TCP_RR) {
		rr = md->spin ? sock_connect_spin("127.0.0.1", c->tcp,
						  CRR_TIMEOUT_MS)
			      : sock_connect("127.0.0.1", c->tcp,
					     CRR_TIMEOUT_MS);
		if (rr < 0)
			rr = -1;
	}
	sleep_until(c->t0);
	for (uint64_t i = 0;; i++) {
		uint64_t start;
		int ret;

		if (period) {
			uint64_t now = now_ns();

			start = c->t0 + offset + i * period;
			if (start >= c->t_end)
				break;
			/* Fallen so far behind that the window closed:
			 * what was due and not started is missed (and
			 * counted), rather than run long after. */
			if (now >= c->t_end) {
				t->missed += (c->t_end - start + period - 1) /
					     period;
				break;
			}
			if (now < start)
				sleep_until(start);
		} else {
			start = now_ns();
			if (start >= c->t_end)
				break;
		}
		if (md->kind == LK_TF)
			ret = one_tf(t, md, ts);
		else
			ret = one_tcp(t, md, &rr, ts);
		if (!ret && thr_store(t, ts, start)) {
			thr_err(t, "out of memory for samples");
			break;
		}
	}
	if (rr >= 0)
		close(rr);
	return NULL;
}

/* Run one mode on every thread, then send the merged results. */
static int run_mode(struct lcli *c, struct lthr *thr, int ch)
{
	const struct load_opts *o = c->o;
	struct load_res res = {0};
	unsigned i, started = 0;
	int ret = 0;

	for (i = 0; i < o->threads; i++, started++) {
		thr[i].n = 0;
		thr[i].failed = 0;
		thr[i].missed = 0;
		thr[i].last_ns = 0;
		thr[i].err[0] = '\0';
		ret = -pthread_create(&thr[i].tid, NULL, thr_main, &thr[i]);
		if (ret) {
			fail("client: pthread_create: %s", strerror(-ret));
			break;
		}
	}
	for (i = 0; i < started; i++)
		pthread_join(thr[i].tid, NULL);
	if (ret)
		return ret;
	for (i = 0; i < o->threads; i++) {
		res.n += thr[i].n;
		res.failed += thr[i].failed;
		res.missed += thr[i].missed;
		if (thr[i].last_ns > res.last_ns)
			res.last_ns = thr[i].last_ns;
		if (!res.err[0] && thr[i].err[0])
			memcpy(res.err, thr[i].err, sizeof(res.err));
	}
	ret = sock_full(ch, &res, sizeof(res), true, -1);
	for (int s = 0; s < LS_COUNT && !ret; s++)
		for (i = 0; i < o->threads && !ret; i++)
			if (thr[i].n)
				ret = sock_full(ch, thr[i].v[s],
						thr[i].n * sizeof(double), true,
						-1);
	return ret;
}

int load_client(const struct load_opts *o, int ch, uint16_t port,
		uint16_t grant_port, uint16_t tcp_port, unsigned idx)
{
	struct lcli c = {.o = o,
			 .port = port,
			 .grant = grant_port,
			 .tcp = tcp_port,
			 .idx = idx};
	tf_context_t *ctx = NULL;
	struct lthr *thr;
	struct load_cmd cmd;
	unsigned i;
	int ret;

	if (o->sthreads == 1 && o->clients * o->threads == 1) {
		int a, b;

		pick_cpus(&a, &b);
		if (b >= 0)
			pin_to(a);
	}
	thr = calloc(o->threads, sizeof(*thr));
	if (!thr)
		return -ENOMEM;
	ret = bench_open_ctx(o->cm.provider, o->cm.device, o->cm.transport,
			     &ctx);
	if (!ret)
		ret = node_for(ctx, R_POOLMW, o->size, &c.node);
	for (i = 0; i < o->threads && !ret; i++) {
		thr[i].c = &c;
		thr[i].idx = i;
		thr[i].buf = map_buf(o->size);
		thr[i].tbuf = calloc(1, o->size);
		if (!thr[i].buf || !thr[i].tbuf)
			ret = -ENOMEM;
	}
	/* The parent waits for a reply to each command: a setup failure
	 * answers the first one. */
	while (!sock_full(ch, &cmd, sizeof(cmd), false, -1)) {
		if (cmd.mode >= LOAD_NMODES)
			break;
		c.mode = cmd.mode;
		c.t0 = cmd.t0;
		c.t_end = cmd.t_end;
		if (ret)
			break;
		ret = run_mode(&c, thr, ch);
		if (ret)
			break;
	}
	for (i = 0; i < o->threads; i++) {
		if (thr[i].buf)
			munmap(thr[i].buf, o->size);
		free(thr[i].tbuf);
		for (int s = 0; s < LS_COUNT; s++)
			free(thr[i].v[s]);
	}
	free(thr);
	tf_node_destroy(c.node);
	tf_context_close(ctx);
	return ret;
}

/*
 * The hog: one process whose node connects from LOAD_HOG_ADDR (set by the
 * parent in this process before its first tf_ call: the library reads its
 * configuration once per process).  For each mode it opens kept sessions
 * (each attached and waited for the server's exposure of K * SIZE bytes)
 * until it holds --hog of them, as soon as the mode's command comes: the
 * other clients start at t0, LOAD_START_NS later, so that they run
 * against a server whose bound is already held (its opening is not what
 * is measured).  From t0 to t_end it keeps asking for one more, back to
 * back (not with --hog-hold): past the server's per-address bound every
 * ask is refused, and counted.  It closes them all at t_end.
 */
static int hog_mode(const struct load_opts *o, tf_node_t *node, void *buf,
		    uint16_t port, tf_session_t **held,
		    const struct load_cmd *cmd, struct load_hog_res *res)
{
	struct crr_opts co = {.k = o->k};
	tf_session_params_t sp = sess_params(&co, 0);
	size_t n = 0;

	memset(res, 0, sizeof(*res));
	while (now_ns() < cmd->t_end) {
		tf_session_t *s = NULL;
		int b, ret;

		ret = tf_session_connect(node, "127.0.0.1", port, &sp, &s);
		if (!ret)
			ret = tf_session_attach(s, buf, o->size,
						attach_flags(OP_WRITE, false),
						&b);
		if (!ret)
			ret = tf_session_wait_peer(s, 1, CRR_TIMEOUT_MS);
		if (ret == -EUSERS) {
			res->refused++;
		} else if (ret) {
			res->failed++;
			if (!res->err[0])
				snprintf(res->err, sizeof(res->err), "%s",
					 tf_strerror(ret));
		}
		if (ret) {
			tf_session_close(s);
			/* Refused before t0: held all it could. */
			if (ret == -EUSERS)
				sleep_until(cmd->t0);
			continue;
		}
		held[n++] = s;
		if (n > res->held)
			res->held = n;
		/* All it holds: asks start with the others. */
		if (n == o->hog)
			sleep_until(o->hog_hold ? cmd->t_end : cmd->t0);
		/* One more than asked for: the bound was not met; hold
		 * them to the end. */
		if (n == (size_t)o->hog + 1)
			sleep_until(cmd->t_end);
	}
	while (n)
		tf_session_close(held[--n]);
	return 0;
}

int load_hog(const struct load_opts *o, int ch, uint16_t port,
	     uint16_t grant_port)
{
	tf_session_t **held = calloc((size_t)o->hog + 1, sizeof(*held));
	tf_context_t *ctx = NULL;
	tf_node_t *node = NULL;
	void *buf = map_buf(o->size);
	struct load_hog_res res;
	struct load_cmd cmd;
	int ret = 0;

	if (!held || !buf)
		ret = -ENOMEM;
	if (!ret)
		ret = bench_open_ctx(o->cm.provider, o->cm.device,
				     o->cm.transport, &ctx);
	if (!ret)
		ret = node_for(ctx, R_POOLMW, o->size, &node);
	while (!ret && !sock_full(ch, &cmd, sizeof(cmd), false, -1)) {
		if (cmd.mode >= LOAD_NMODES)
			break;
		/* On the listener of the mode that runs (the server looks
		 * at that one). */
		hog_mode(o, node, buf,
			 load_modes[cmd.mode].grant ? grant_port : port, held,
			 &cmd, &res);
		ret = sock_full(ch, &res, sizeof(res), true, -1);
	}
	if (buf)
		munmap(buf, o->size);
	free(held);
	tf_node_destroy(node);
	tf_context_close(ctx);
	return ret;
}
