/* SPDX-License-Identifier: MIT */
/*
 * bench_load.c - tollfree-bench load: crr's sessions under load, many at
 * once.  One server process with S threads serves N client processes of
 * T threads each, for D seconds per mode:
 *
 *   pool+mw/reuse   crr's session on kept connections: connect, attach
 *                   and wait for the server's exposure of K * SIZE
 *                   bytes, K writes of SIZE bytes each awaited, close;
 *   pool+mw/new     the same on a new connection each (TF_SESSION_NO_REUSE);
 *   tcp-rr          K request/response exchanges of SIZE bytes on a kept
 *                   TCP connection, blocking sockets, an epoll server;
 *   tcp-crr         connect, the K exchanges, close;
 *   tcp-*-spin      the same with non-blocking sockets busy-polled on
 *                   both sides (the server spins on epoll_wait(.., 0)).
 *
 * The server has one pool+mw node; each of its S threads has its own
 * tollfree listener and TCP listener on ports they share (SO_REUSEPORT),
 * and serves what it accepted.  Each client process has one node that its
 * threads share.  Sessions run back to back (closed loop) or at --rate
 * per thread (open loop).  Per mode: sessions/s over the run, latency
 * percentiles over every session of every thread (each client process
 * sends its samples back over its socket), failed sessions, and the
 * server's CPU time per session (its getrusage at the start and the end
 * of the mode's window).  --server-wait sleep makes the server sleep in
 * epoll when idle, for tollfree and TCP alike.
 *
 * This file is the run: options, the forks, the commands to the server
 * and the clients, merging, the report; bench_load_server.c and
 * bench_load_client.c are the two sides.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_load.h"

/* Sized by the initializer: a count that differs from LOAD_NMODES
 * conflicts with its declaration and does not compile. */
const struct load_mode load_modes[] = {
	{"pool+mw/reuse", LK_TF, true, false},
	{"pool+mw/new", LK_TF, false, false},
	{"pool+mw/grant", LK_TF, true, false, true},
	{"tcp-rr", LK_TCP_RR, false, false},
	{"tcp-crr", LK_TCP_CRR, false, false},
	{"tcp-rr-spin", LK_TCP_RR, false, true},
	{"tcp-crr-spin", LK_TCP_CRR, false, true},
};

/* The rows of the tollfree modes' runs with --hog. */
static const char *const hog_names[LOAD_NMODES] = {
	"pool+mw/reuse+hog",
	"pool+mw/new+hog",
	"pool+mw/grant+hog",
};

/* The clients start a mode this long after the command, so that every
 * thread is created (and tcp-rr connected) when the window opens. */
#define LOAD_START_NS (200ull * 1000 * 1000)
/* Longest run: a mode's window, in seconds. */
#define LOAD_MAX_DURATION 3600

/* ============================================================ options */

static void usage_load(FILE *f)
{
	fprintf(f,
		"usage: %s load [--clients N] [--threads T] "
		"[--server-threads S] [--server-wait spin|sleep]\n"
		"          [--rate R] [-d SECONDS] [-k K] [-s SIZE] "
		"[--modes LIST] [--provider P] [--device D]\n"
		"          [--transport shm|tcp|auto] [--csv] [--json FILE] "
		"[--plot FILE.svg]\n"
		"          [--hog[=N]] [--hog-hold] [--hog-nice N] "
		"[--client-spin-us N|auto]\n"
		"          [--server-nodes shared|thread] [--server-nice N] "
		"[--grant-depth N] [--remote-inv]\n"
		"  defaults: 2 client processes x 2 threads, 1 server "
		"thread, server-wait spin, closed loop\n"
		"  (--rate: sessions/s per client thread, open loop), 3 s "
		"per mode, K 4 writes of SIZE 1K,\n"
		"  --hog: a client from " LOAD_HOG_ADDR " holds N sessions "
		"(default: the per-address bound), opened before\n"
		"  the others start, and asks for more, back to back "
		"(--hog-hold: it does not ask); each tollfree mode\n"
		"  runs without it, then with it; --hog-nice N: the hog "
		"runs at nice N (0 to 19; default 0)\n"
		"  --client-spin-us: the clients' TOLLFREE_POLL_SPIN_US "
		"(auto: 0 where client threads outnumber CPUs)\n"
		"  --server-nodes thread: each server thread has a context "
		"and node of its own (default: one shared)\n"
		"  --server-nice N: the server process runs at nice N (-20 "
		"to 19; default 0), for tollfree and TCP alike\n"
		"  --grant-depth N: grants a kept connection holds ahead in "
		"pool+mw/grant (1 to 8; default: the library's, 2)\n"
		"  --remote-inv: the clients' sessions connect with "
		"TF_SESSION_REMOTE_INV\n"
		"  every mode: ",
		prog);
	bench_print_names(f, &load_modes[0].name, sizeof(load_modes[0]),
			  LOAD_NMODES);
}

static int parse_count(const char *arg, const char *what, unsigned max,
		       unsigned *out)
{
	if (parse_uint(arg, what, 1, out))
		return -1;
	if (*out > max) {
		fail("at most %u %s", max, what);
		return -1;
	}
	return 0;
}

/* Most sessions --hog=N holds. */
#define LOAD_MAX_HOG 65536

/* --hog: the server keeps the library's bound of sessions per client
 * address, or the user's TOLLFREE_SESSION_MAX_SESSIONS_PEER; the normal
 * clients (N * T sessions open at most, all from 127.0.0.1) must stay
 * under it, or the run would measure their own refusals. */
static int hog_bound(struct load_opts *o)
{
	const char *v = getenv("TOLLFREE_SESSION_MAX_SESSIONS_PEER");

	o->bound = LOAD_DEFAULT_PEER_BOUND;
	if (v && *v &&
	    parse_count(v, "TOLLFREE_SESSION_MAX_SESSIONS_PEER", UINT_MAX - 1,
			&o->bound))
		return -1;
	if (o->hog == UINT_MAX)
		o->hog = o->bound < LOAD_MAX_HOG ? o->bound : LOAD_MAX_HOG;
	if (o->clients * o->threads > o->bound) {
		fail("--hog: %u clients x %u threads is more than the "
		     "per-address bound of %u sessions (set "
		     "TOLLFREE_SESSION_MAX_SESSIONS_PEER higher, or run fewer)",
		     o->clients, o->threads, o->bound);
		return -1;
	}
	return 0;
}

enum {
	OPT_MODES = OPT_OWN,
	OPT_PLOT,
	OPT_CLIENTS,
	OPT_THREADS,
	OPT_SERVER_THREADS,
	OPT_SERVER_WAIT,
	OPT_RATE,
	OPT_HOG,
	OPT_HOG_HOLD,
	OPT_HOG_NICE,
	OPT_SERVER_NICE,
	OPT_CLIENT_SPIN,
	OPT_SERVER_NODES,
	OPT_GRANT_DEPTH,
	OPT_REMOTE_INV,
};

static const struct option load_long[] = {
	{"transfers", required_argument, NULL, 'k'},
	{"size", required_argument, NULL, 's'},
	{"duration", required_argument, NULL, 'd'},
	{"modes", required_argument, NULL, OPT_MODES},
	{"clients", required_argument, NULL, OPT_CLIENTS},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"server-threads", required_argument, NULL, OPT_SERVER_THREADS},
	{"server-wait", required_argument, NULL, OPT_SERVER_WAIT},
	{"rate", required_argument, NULL, OPT_RATE},
	{"hog", optional_argument, NULL, OPT_HOG},
	{"hog-hold", no_argument, NULL, OPT_HOG_HOLD},
	{"hog-nice", required_argument, NULL, OPT_HOG_NICE},
	{"server-nice", required_argument, NULL, OPT_SERVER_NICE},
	{"client-spin-us", required_argument, NULL, OPT_CLIENT_SPIN},
	{"server-nodes", required_argument, NULL, OPT_SERVER_NODES},
	{"grant-depth", required_argument, NULL, OPT_GRANT_DEPTH},
	{"remote-inv", no_argument, NULL, OPT_REMOTE_INV},
	BENCH_COMMON_OPTS,
	BENCH_TRANSPORT_OPT,
	{"plot", required_argument, NULL, OPT_PLOT},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/*
 * --client-spin-us auto (the default): where the client threads alone
 * outnumber the online CPUs, a wait that busy-polls holds a CPU that
 * another client thread (or the server) needs, so the clients sleep at
 * once (TOLLFREE_POLL_SPIN_US 0), as Open MPI stops busy-waiting when
 * oversubscribed, and as the blocking TCP references' clients do.
 * Otherwise, or where the user set TOLLFREE_POLL_SPIN_US, they keep it.
 */
static void client_spin_auto(struct load_opts *o)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (o->client_spin && strcmp(o->client_spin, "auto"))
		return;
	o->client_spin = NULL;
	if (getenv("TOLLFREE_POLL_SPIN_US"))
		return;
	if (cpus > 0 && (uint64_t)o->clients * o->threads > (uint64_t)cpus)
		o->client_spin = "0";
}

/* Whether option argument @arg (never NULL for a required argument, but
 * the analyzer cannot know) is @v. */
static bool opt_is(const char *arg, const char *v)
{
	return arg && !strcmp(arg, v);
}

static int load_parse(int argc, char **argv, struct load_opts *o)
{
	char *end;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "k:s:d:h", load_long, NULL)) !=
	       -1) {
		switch (c) {
		case 'k':
			if (parse_count(optarg, "transfers", CRR_MAX_K, &o->k))
				return -1;
			break;
		case 's':
			if (parse_size(optarg, CRR_MAX_SIZE, &o->size))
				return -1;
			break;
		case 'd':
			if (parse_count(optarg, "seconds", LOAD_MAX_DURATION,
					&o->duration_s))
				return -1;
			break;
		case OPT_MODES:
			if (bench_parse_modes(optarg, &load_modes[0].name,
					      sizeof(load_modes[0]),
					      LOAD_NMODES, usage_load,
					      &o->modes))
				return -1;
			break;
		case OPT_CLIENTS:
			if (parse_count(optarg, "client processes",
					LOAD_MAX_CLIENTS, &o->clients))
				return -1;
			break;
		case OPT_THREADS:
			if (parse_count(optarg, "threads per client",
					LOAD_MAX_THREADS, &o->threads))
				return -1;
			break;
		case OPT_SERVER_THREADS:
			if (parse_count(optarg, "server threads",
					LOAD_MAX_SERVER, &o->sthreads))
				return -1;
			break;
		case OPT_SERVER_WAIT:
			if (parse_server_wait(optarg, &o->server_sleep))
				return -1;
			break;
		case OPT_RATE:
			errno = 0;
			o->rate = strtod(optarg, &end);
			/* At least one session a minute, at most one a
			 * microsecond. */
			if (errno || *end || end == optarg ||
			    !(o->rate >= 1.0 / 60 && o->rate <= 1e6)) {
				fail("bad rate '%s' (sessions/s per thread, "
				     "1/60 to 1e6)",
				     optarg);
				return -1;
			}
			break;
		case OPT_HOG:
			/* UINT_MAX: the bound, known once parsing is done. */
			o->hog = UINT_MAX;
			if (optarg && parse_count(optarg, "hog sessions",
						  LOAD_MAX_HOG, &o->hog))
				return -1;
			break;
		case OPT_HOG_HOLD:
			o->hog_hold = true;
			break;
		case OPT_HOG_NICE: {
			unsigned v;

			if (parse_uint(optarg, "--hog-nice", 0, &v))
				return -1;
			if (v > 19) {
				fail("--hog-nice: 0 to 19");
				return -1;
			}
			o->hog_nice = (int)v;
			break;
		}
		case OPT_SERVER_NICE:
			if (parse_int(optarg, "--server-nice", -20, 19,
				      &o->server_nice))
				return -1;
			break;
		case OPT_CLIENT_SPIN:
			if (opt_is(optarg, "auto")) {
				o->client_spin = "auto";
			} else {
				unsigned v;

				if (parse_uint(optarg, "--client-spin-us", 0,
					       &v))
					return -1;
				snprintf(o->client_spin_buf,
					 sizeof(o->client_spin_buf), "%u", v);
				o->client_spin = o->client_spin_buf;
			}
			break;
		case OPT_GRANT_DEPTH:
			if (parse_count(optarg, "--grant-depth",
					TF_LISTENER_MAX_GRANT_DEPTH,
					&o->grant_depth))
				return -1;
			break;
		case OPT_REMOTE_INV:
			o->remote_inv = true;
			break;
		case OPT_SERVER_NODES:
			if (opt_is(optarg, "thread")) {
				o->server_node_per_thread = true;
			} else if (!opt_is(optarg, "shared")) {
				fail("--server-nodes: shared or thread");
				return -1;
			}
			break;
		case OPT_PLOT:
			o->plot = optarg;
			break;
		default:
			if (bench_opt_rest(c, optarg, &o->cm, usage_load))
				return -1;
		}
	}
	if (bench_no_operands(argc, argv))
		return -1;
	if ((uint64_t)o->size * o->k > CRR_MAX_SIZE) {
		fail("K x SIZE is at most %u bytes (the server's exposure)",
		     CRR_MAX_SIZE);
		return -1;
	}
	client_spin_auto(o);
	return o->hog ? hog_bound(o) : 0;
}

/* ============================================================ the run */

struct run {
	const struct load_opts *o;
	pid_t server;
	int ctl;
	pid_t cli[LOAD_MAX_CLIENTS];
	int ch[LOAD_MAX_CLIENTS];
	unsigned ncli;
	pid_t hog;
	int hog_ch;
	uint16_t port, grant, tcp;
	/* Per mode, without [0] and with [1] the hog, merged: samples (ns)
	 * of the total and each phase. */
	double *v[2][LOAD_NMODES][LS_COUNT];
	size_t n[2][LOAD_NMODES];
	struct load_hog_res hres[LOAD_NMODES];
};

static int ctl_cmd(struct run *rn, uint32_t cmd, uint32_t arg,
		   struct load_ctl_rep *rep)
{
	struct load_ctl c = {.cmd = cmd, .arg = arg};
	int ret = sock_full(rn->ctl, &c, sizeof(c), true, CRR_TIMEOUT_MS);

	if (!ret)
		ret = sock_full(rn->ctl, rep, sizeof(*rep), false,
				CRR_TIMEOUT_MS);
	if (ret)
		fail("the server does not answer: %s", tf_strerror(ret));
	return ret;
}

/* Fork the server; its first reply says its ports. */
static int start_server(struct run *rn)
{
	struct load_ctl_rep rep;
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fail("socketpair: %m");
		return -1;
	}
	fflush(NULL);
	rn->server = fork();
	if (rn->server < 0) {
		fail("fork: %m");
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (rn->server == 0) {
		close(sv[0]);
		prog = "tollfree-bench (server)";
		/* Before its threads start: they inherit it. */
		if (rn->o->server_nice &&
		    setpriority(PRIO_PROCESS, 0, rn->o->server_nice)) {
			fail("server: setpriority(%d): %m (below 0 needs "
			     "CAP_SYS_NICE)",
			     rn->o->server_nice);
			_exit(1);
		}
		ret = load_server(rn->o, sv[1]);
		fflush(NULL);
		_exit(ret ? 1 : 0);
	}
	close(sv[1]);
	rn->ctl = sv[0];
	/* Opening a context and S listeners can take a while on a loaded
	 * host: three times a peer's timeout. */
	ret = sock_full(rn->ctl, &rep, sizeof(rep), false, 3 * CRR_TIMEOUT_MS);
	if (ret || rep.status || !rep.port || rep.port > 65535 || !rep.tcp ||
	    rep.tcp > 65535 || !rep.grant || rep.grant > 65535) {
		fail("the server did not start (%s)",
		     ret ? tf_strerror(ret) : tf_strerror(rep.status));
		return -1;
	}
	rn->port = (uint16_t)rep.port;
	rn->grant = (uint16_t)rep.grant;
	rn->tcp = (uint16_t)rep.tcp;
	return 0;
}

/* The hog's process.  The parent has made no tf_ call yet (its context
 * is opened after the forks), so the child's library reads its
 * configuration, with the source address set here, when it opens its
 * context. */
static int start_hog(struct run *rn)
{
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		fail("socketpair: %m");
		return -1;
	}
	fflush(NULL);
	rn->hog = fork();
	if (rn->hog < 0) {
		fail("fork: %m");
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	if (rn->hog == 0) {
		close(sv[0]);
		close(rn->ctl);
		for (unsigned j = 0; j < rn->ncli; j++)
			close(rn->ch[j]);
		prog = "tollfree-bench (hog)";
		if (setenv("TOLLFREE_SESSION_SOURCE_ADDR", LOAD_HOG_ADDR, 1)) {
			fail("hog: setenv: %m");
			_exit(1);
		}
		/* A client like the others: it waits as they do. */
		if (rn->o->client_spin &&
		    setenv("TOLLFREE_POLL_SPIN_US", rn->o->client_spin, 1)) {
			fail("hog: setenv: %m");
			_exit(1);
		}
		if (rn->o->hog_nice &&
		    setpriority(PRIO_PROCESS, 0, rn->o->hog_nice)) {
			fail("hog: setpriority: %m");
			_exit(1);
		}
		ret = load_hog(rn->o, sv[1], rn->port, rn->grant);
		fflush(NULL);
		_exit(ret ? 1 : 0);
	}
	close(sv[1]);
	rn->hog_ch = sv[0];
	return 0;
}

static int start_clients(struct run *rn)
{
	for (unsigned i = 0; i < rn->o->clients; i++) {
		int sv[2], ret;
		pid_t pid;

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
			fail("socketpair: %m");
			return -1;
		}
		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			fail("fork: %m");
			close(sv[0]);
			close(sv[1]);
			return -1;
		}
		if (pid == 0) {
			/* Only its own channel: a client that holds the
			 * others would keep them open past their owner's
			 * end. */
			close(sv[0]);
			close(rn->ctl);
			for (unsigned j = 0; j < rn->ncli; j++)
				close(rn->ch[j]);
			prog = "tollfree-bench (client)";
			if (rn->o->client_spin &&
			    setenv("TOLLFREE_POLL_SPIN_US", rn->o->client_spin,
				   1)) {
				fail("client: setenv: %m");
				_exit(1);
			}
			ret = load_client(rn->o, sv[1], rn->port, rn->grant,
					  rn->tcp, i);
			fflush(NULL);
			_exit(ret ? 1 : 0);
		}
		close(sv[1]);
		rn->cli[rn->ncli] = pid;
		rn->ch[rn->ncli++] = sv[0];
	}
	return rn->o->hog ? start_hog(rn) : 0;
}

/* Read one client's results for @md and append them to the mode's. */
static int take_results(struct run *rn, unsigned md, unsigned h, int ch,
			struct load_res *res)
{
	/* A client's window ends at t_end plus its last session, which a
	 * stalled peer may stretch to a timeout per transfer. */
	int tmo = (int)(rn->o->duration_s * 1000) + 4 * CRR_TIMEOUT_MS;
	size_t base = rn->n[h][md];
	int ret;

	ret = sock_full(ch, res, sizeof(*res), false, tmo);
	if (ret)
		return ret;
	res->err[sizeof(res->err) - 1] = '\0';
	/* A count that cannot be sent in time is a broken client, not a
	 * size to allocate. */
	if (res->n > (uint64_t)1 << 32)
		return -EPROTO;
	for (int s = 0; s < LS_COUNT; s++) {
		double *v = realloc(rn->v[h][md][s],
				    (base + res->n + 1) * sizeof(double));

		if (!v)
			return -ENOMEM;
		rn->v[h][md][s] = v;
		ret = sock_full(ch, v + base, res->n * sizeof(double), false,
				CRR_TIMEOUT_MS);
		if (ret)
			return ret;
	}
	rn->n[h][md] = base + res->n;
	return 0;
}

/* Run mode @md on every client, and the hog's when @h; fill @row. */
static int run_mode(struct run *rn, unsigned md, unsigned h, unsigned done_s,
		    unsigned total_s, bool bar, struct bench_row *row)
{
	const struct load_opts *o = rn->o;
	struct load_ctl_rep rep0, rep1;
	struct load_cmd cmd = {.mode = md};
	uint64_t failed = 0, missed = 0, last = 0, t;
	char err[sizeof(((struct load_res *)0)->err)] = "";
	double secs;
	int ret;

	ret = ctl_cmd(rn, LCTL_MODE, md, &rep0);
	if (ret)
		return ret;
	cmd.t0 = now_ns() + LOAD_START_NS;
	cmd.t_end = cmd.t0 + (uint64_t)o->duration_s * 1000000000ull;
	for (unsigned i = 0; i < rn->ncli; i++) {
		ret = sock_full(rn->ch[i], &cmd, sizeof(cmd), true,
				CRR_TIMEOUT_MS);
		if (ret) {
			fail("client %u is gone: %s", i, tf_strerror(ret));
			return ret;
		}
	}
	if (h) {
		ret = sock_full(rn->hog_ch, &cmd, sizeof(cmd), true,
				CRR_TIMEOUT_MS);
		if (ret) {
			fail("the hog is gone: %s", tf_strerror(ret));
			return ret;
		}
	}
	while ((t = now_ns()) < cmd.t0) {
		struct timespec ts = {0, (long)(cmd.t0 - t)};

		nanosleep(&ts, NULL);
	}
	ret = ctl_cmd(rn, LCTL_CPU, 0, &rep0);
	if (ret)
		return ret;
	/* The bar moves every 100 ms while the mode runs. */
	while ((t = now_ns()) < cmd.t_end) {
		uint64_t left = cmd.t_end - t;
		struct timespec ts = {0, left < 100000000ull ? (long)left
							     : 100000000L};

		if (bar)
			progress_bar(done_s * 10 + (unsigned)((t - cmd.t0) /
							      100000000),
				     total_s * 10, load_modes[md].name);
		nanosleep(&ts, NULL);
	}
	ret = ctl_cmd(rn, LCTL_CPU, 0, &rep1);
	if (ret)
		return ret;
	for (unsigned i = 0; i < rn->ncli; i++) {
		struct load_res res;

		ret = take_results(rn, md, h, rn->ch[i], &res);
		if (ret) {
			fail("no results from client %u: %s", i,
			     tf_strerror(ret));
			return ret;
		}
		failed += res.failed;
		missed += res.missed;
		if (res.last_ns > last)
			last = res.last_ns;
		if (!err[0] && res.err[0])
			memcpy(err, res.err, sizeof(err));
	}
	if (h) {
		struct load_hog_res *hr = &rn->hres[md];

		/* Its last connect may take up to a peer's timeout, its
		 * closes as long again. */
		ret = sock_full(rn->hog_ch, hr, sizeof(*hr), false,
				4 * CRR_TIMEOUT_MS);
		if (ret) {
			fail("no results from the hog: %s", tf_strerror(ret));
			return ret;
		}
		hr->err[sizeof(hr->err) - 1] = '\0';
		if (hr->failed)
			fail("%s: the hog had %" PRIu64 " failures that were "
			     "not refusals (first: %s)",
			     load_modes[md].name, hr->failed, hr->err);
	}
	if (bar)
		progress_bar((done_s + o->duration_s) * 10, total_s * 10,
			     load_modes[md].name);
	/* The window closes at t_end, or when the last session that
	 * started in it ended. */
	secs = (double)((last > cmd.t_end ? last : cmd.t_end) - cmd.t0) / 1e9;
	row->op = h ? hog_names[md] : load_modes[md].name;
	row->size = o->size;
	row->iters = (unsigned)rn->n[h][md];
	/* Sessions an open loop never started count as failed: the load
	 * asked for them. */
	row->failed = failed + missed;
	row->rate = (double)rn->n[h][md] / secs;
	row->server_cpu = rn->n[h][md] ? (double)(rep1.cpu_ns - rep0.cpu_ns) /
						 (double)rn->n[h][md]
				       : 0;
	row->phases[PH_CONNECT] =
		median_of(rn->v[h][md][LS_CONNECT], rn->n[h][md]);
	row->phases[PH_PREPARE] =
		median_of(rn->v[h][md][LS_PREPARE], rn->n[h][md]);
	row->phases[PH_MOVE] = median_of(rn->v[h][md][LS_MOVE], rn->n[h][md]);
	row->phases[PH_CLOSE] = median_of(rn->v[h][md][LS_CLOSE], rn->n[h][md]);
	stats_compute(rn->v[h][md][LS_TOTAL], rn->n[h][md], &row->st);
	/* Failures are part of the result: said here, on stderr, and in
	 * the table's column. */
	if (failed)
		fail("%s: %" PRIu64 " sessions failed (first: %s)",
		     load_modes[md].name, failed, err);
	if (missed)
		fail("%s: %" PRIu64 " sessions due were never started "
		     "(the open loop fell behind; counted as failed)",
		     load_modes[md].name, missed);
	if (rep1.errors > rep0.errors)
		fail("%s: %" PRIu64 " sessions failed on the server",
		     load_modes[md].name, rep1.errors - rep0.errors);
	return 0;
}

static void stop_all(struct run *rn, bool kill_them)
{
	struct load_cmd quit = {.mode = LOAD_NMODES};
	int status;

	for (unsigned i = 0; i < rn->ncli; i++) {
		if (kill_them)
			kill(rn->cli[i], SIGTERM);
		else
			sock_full(rn->ch[i], &quit, sizeof(quit), true,
				  CRR_TIMEOUT_MS);
		close(rn->ch[i]);
	}
	if (rn->hog > 0) {
		if (kill_them)
			kill(rn->hog, SIGTERM);
		else
			sock_full(rn->hog_ch, &quit, sizeof(quit), true,
				  CRR_TIMEOUT_MS);
		close(rn->hog_ch);
	}
	if (rn->server > 0) {
		if (kill_them) {
			kill(rn->server, SIGTERM);
		} else {
			struct load_ctl c = {.cmd = LCTL_QUIT};

			sock_full(rn->ctl, &c, sizeof(c), true, CRR_TIMEOUT_MS);
		}
		close(rn->ctl);
	}
	for (unsigned i = 0; i < rn->ncli; i++)
		while (waitpid(rn->cli[i], &status, 0) < 0 && errno == EINTR)
			;
	if (rn->hog > 0)
		while (waitpid(rn->hog, &status, 0) < 0 && errno == EINTR)
			;
	if (rn->server > 0)
		while (waitpid(rn->server, &status, 0) < 0 && errno == EINTR)
			;
}

static void print_ratios(const struct report *r, bool spin, FILE *f)
{
	static const struct {
		const char *a, *b;
		bool spin_only;
	} q[] = {
		{"pool+mw/reuse", "tcp-rr", false},
		{"pool+mw/reuse", "tcp-rr-spin", true},
		{"pool+mw/grant", "tcp-rr", false},
		{"pool+mw/grant", "tcp-rr-spin", true},
		{"pool+mw/new", "tcp-crr", false},
		{"pool+mw/new", "tcp-crr-spin", true},
	};
	bool any = false;

	for (size_t i = 0; i < ARRAY_SIZE(q); i++) {
		double v = report_ratio(r, q[i].a, q[i].b, true);
		char what[96];

		if (v <= 0 || (q[i].spin_only && !spin))
			continue;
		if (!any)
			fprintf(f, "ratios (this run):\n");
		any = true;
		snprintf(what, sizeof(what), "sessions/s: %s over %s", q[i].a,
			 q[i].b);
		fprintf(f, "  %-52s %8.2f\n", what, v);
	}
	for (size_t i = 0; i < r->nrows; i++) {
		const struct bench_row *w = &r->rows[i];
		char what[96];

		if (w->st.median <= 0)
			continue;
		if (!any)
			fprintf(f, "ratios (this run):\n");
		any = true;
		snprintf(what, sizeof(what), "p99 over p50: %s", w->op);
		fprintf(f, "  %-52s %8.2f\n", what, w->st.p99 / w->st.median);
	}
}

/* --hog: the with-over-without ratios, the hog's counts, and the same in
 * the JSON (appended to @json, which the header's fields start). */
static void print_hog(struct run *rn, const struct report *r, char *json,
		      size_t jsz)
{
	const struct load_opts *o = rn->o;
	uint64_t refused = 0, held = 0;
	size_t jl = strlen(json);

	printf("hog: %u sessions asked for from %s, per-address bound %u "
	       "(%s), %s, nice %d\n",
	       o->hog, LOAD_HOG_ADDR, o->bound,
	       getenv("TOLLFREE_SESSION_MAX_SESSIONS_PEER")
		       ? "TOLLFREE_SESSION_MAX_SESSIONS_PEER"
		       : "the library's default",
	       o->hog_hold ? "held, no more asked" : "more asked back to back",
	       o->hog_nice);
	for (unsigned md = 0; md < LOAD_NMODES; md++) {
		const struct bench_row *a = NULL, *b = NULL;

		if (!(o->modes & (1u << md)) || load_modes[md].kind != LK_TF)
			continue;
		for (size_t i = 0; i < r->nrows; i++) {
			if (!strcmp(r->rows[i].op, load_modes[md].name))
				a = &r->rows[i];
			if (hog_names[md] &&
			    !strcmp(r->rows[i].op, hog_names[md]))
				b = &r->rows[i];
		}
		if (!a || !b)
			continue;
		refused += rn->hres[md].refused;
		if (rn->hres[md].held > held)
			held = rn->hres[md].held;
		if (a->st.p99 > 0)
			printf("  p99 with hog over without: %s %.2f\n",
			       load_modes[md].name, b->st.p99 / a->st.p99);
		printf("  hog in %s: held %" PRIu64 " sessions, %" PRIu64
		       " refused\n",
		       load_modes[md].name, rn->hres[md].held,
		       rn->hres[md].refused);
		if (jl < jsz)
			jl += (size_t)snprintf(
				json + jl, jsz - jl, "%s\"%s\":%.3f",
				strstr(json, "\"p99_us_hog\":{")
					? ","
					: ",\"p99_us_hog\":{",
				load_modes[md].name, b->st.p99 / 1e3);
	}
	if (strstr(json, "\"p99_us_hog\":{") && jl < jsz)
		jl += (size_t)snprintf(json + jl, jsz - jl, "}");
	if (jl < jsz)
		snprintf(json + jl, jsz - jl,
			 ",\"hog\":%u,\"hog_refused\":%" PRIu64
			 ",\"hog_held\":%" PRIu64 ",\"hog_bound\":%u",
			 o->hog, refused, held, o->bound);
	printf("  hog: %" PRIu64 " refused in all, at most %" PRIu64
	       " held (TCP modes run without the hog: no such bound)\n",
	       refused, held);
}

static int load_report(struct run *rn, struct report *r, bool bar, char *json,
		       size_t jsz)
{
	const struct load_opts *o = rn->o;
	unsigned total_s = 0, done_s = 0;
	double *sorted[2 * LOAD_NMODES];
	size_t ns[2 * LOAD_NMODES];
	uint64_t failed = 0;
	int ret = 0;

	for (unsigned md = 0; md < LOAD_NMODES; md++)
		if (o->modes & (1u << md))
			total_s += o->duration_s *
				   (o->hog && load_modes[md].kind == LK_TF ? 2
									   : 1);
	for (unsigned md = 0; md < LOAD_NMODES; md++) {
		unsigned runs = o->hog && load_modes[md].kind == LK_TF ? 2 : 1;

		if (!(o->modes & (1u << md)))
			continue;
		for (unsigned h = 0; h < runs; h++) {
			struct bench_row row = {0};

			ret = run_mode(rn, md, h, done_s, total_s, bar, &row);
			if (ret)
				return ret;
			done_s += o->duration_s;
			failed += row.failed;
			sorted[r->nrows] = rn->v[h][md][LS_TOTAL];
			ns[r->nrows] = rn->n[h][md];
			ret = report_add(r, &row);
			if (ret)
				return ret;
		}
	}
	report_emit(r, o->cm.csv ? OUT_CSV : OUT_TEXT, stdout);
	if (o->hog)
		print_hog(rn, r, json, jsz);
	if (!o->cm.csv) {
		print_ratios(r, !o->server_sleep, stdout);
		if (failed)
			printf("note: %" PRIu64 " sessions failed in all "
			       "(column \"failed\"; not in the times)\n",
			       failed);
	}
	if (o->cm.json && report_write_json(r, o->cm.json))
		ret = -EIO;
	if (o->plot && plot_crr_svg(o->plot, r, sorted, ns))
		ret = -EIO;
	return ret;
}

int cmd_load(int argc, char **argv)
{
	struct load_opts o = {
		.clients = 2,
		.threads = 2,
		.sthreads = 1,
		.k = 4,
		.duration_s = 3,
		.size = 1024,
		.modes = (1u << LOAD_NMODES) - 1,
	};
	struct run rn = {
		.o = &o, .server = -1, .ctl = -1, .hog = -1, .hog_ch = -1};
	struct report r = {
		.bench = "load", .layout = LAYOUT_MODES, .load = true};
	char extra[512], json_extra[512], loop[48], hogl[96] = "", spinl[64];
	char gdl[32] = "", nicel[24] = "";
	tf_context_t *ctx = NULL;
	int ret;

	if (load_parse(argc, argv, &o))
		return 2;
	/* SIGPIPE: a process that died is an error on its socket. */
	signal(SIGPIPE, SIG_IGN);
	if (start_server(&rn) || start_clients(&rn)) {
		stop_all(&rn, true);
		return 1;
	}
	/* The parent's own context only names the provider and device in
	 * the header; it is opened after the forks. */
	ret = bench_open_ctx(o.cm.provider, o.cm.device, o.cm.transport, &ctx);
	if (ret) {
		stop_all(&rn, true);
		return 1;
	}
	if (o.hog)
		snprintf(hogl, sizeof(hogl),
			 "\n%shog: %u sessions from %s  per-address bound: %u",
			 o.cm.csv ? "# " : "", o.hog, LOAD_HOG_ADDR, o.bound);
	if (o.rate > 0)
		snprintf(loop, sizeof(loop), "open loop, %g sessions/s/thread",
			 o.rate);
	else
		snprintf(loop, sizeof(loop), "closed loop");
	if (o.server_nice)
		snprintf(nicel, sizeof(nicel), " (nice %d)", o.server_nice);
	if (o.grant_depth || o.remote_inv)
		snprintf(gdl, sizeof(gdl), "%s%.0u%s",
			 o.grant_depth ? "  grant depth: " : "", o.grant_depth,
			 o.remote_inv ? "  remote-inv" : "");
	if (o.client_spin) {
		snprintf(spinl, sizeof(spinl), "%s us%s", o.client_spin,
			 o.client_spin == o.client_spin_buf
				 ? ""
				 : " (client threads outnumber CPUs)");
	} else {
		char v[16] = "?";

		/* This process's value is the clients' (same environment). */
		tf_config_get("POLL_SPIN_US", v, sizeof(v));
		snprintf(spinl, sizeof(spinl), "%s us (%s)", v,
			 getenv("TOLLFREE_POLL_SPIN_US")
				 ? "TOLLFREE_POLL_SPIN_US"
				 : "the library's default");
	}
	snprintf(extra, sizeof(extra),
		 "\n%sclients: %u x %u threads  server threads: %u%s  "
		 "server-wait: %s  %s%s\n%sK: %u  S: %" PRIu64
		 " B  duration/mode: %u s  clients' wait spin: %s%s%s%s",
		 o.cm.csv ? "# " : "", o.clients, o.threads, o.sthreads, nicel,
		 o.server_sleep ? "sleep" : "spin", loop,
		 o.sthreads == 1 && o.clients * o.threads == 1
			 ? "  (pinned: first two CPUs)"
			 : "",
		 o.cm.csv ? "# " : "", o.k, o.size, o.duration_s, spinl,
		 o.server_node_per_thread ? "  server nodes: one per thread"
					  : "",
		 gdl, hogl);
	snprintf(json_extra, sizeof(json_extra),
		 ",\"clients\":%u,\"threads\":%u,\"server_threads\":%u,"
		 "\"server_wait\":\"%s\",\"rate_per_thread\":%g,"
		 "\"duration_s\":%u,\"client_spin_us\":\"%s\","
		 "\"server_nodes\":\"%s\",\"grant_depth\":%u,"
		 "\"server_nice\":%d,\"remote_inv\":%s",
		 o.clients, o.threads, o.sthreads,
		 o.server_sleep ? "sleep" : "spin", o.rate, o.duration_s, spinl,
		 o.server_node_per_thread ? "thread" : "shared", o.grant_depth,
		 o.server_nice, o.remote_inv ? "true" : "false");
	r.json_extra = json_extra;
	r.size = o.size;
	r.transfers = o.k;
	report_header(&r, ctx, o.cm.transport, extra,
		      o.cm.csv ? OUT_CSV : OUT_TEXT);
	tf_context_close(ctx);
	fflush(stdout);
	ret = load_report(&rn, &r, isatty(STDERR_FILENO), json_extra,
			  sizeof(json_extra));
	stop_all(&rn, ret != 0);
	for (unsigned h = 0; h < 2; h++)
		for (unsigned md = 0; md < LOAD_NMODES; md++)
			for (int s = 0; s < LS_COUNT; s++)
				free(rn.v[h][md][s]);
	free(r.rows);
	return ret ? 1 : 0;
}
