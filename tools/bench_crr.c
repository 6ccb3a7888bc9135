/* SPDX-License-Identifier: MIT */
/*
 * bench_crr.c - tollfree-bench crr: short sessions, RDMA_CRR style.  This
 * file has the modes, the options, the bench channel and the run (a forked
 * loopback server, or either side alone); the server is in
 * bench_crr_server.c, the client in bench_crr_client.c.
 *
 * One transaction is one session: connect (or take a kept connection),
 * prepare (make the buffers usable and exchange keys), move (K transfers
 * of S bytes), revoke (the server invalidates the keys it gave out) and
 * close.  Registration strategies and connection strategies are two axes:
 *
 *   direct   every buffer costs one registration per session (the tax): the
 *            client registers its buffer (TF_REG_DIRECT), the server
 *            registers the exposed range (a dedicated registration per
 *            exposure; its bytes sit in a rented slice so that no second
 *            registration is counted);
 *   cache    the registration cache, exposures by dedicated registration;
 *   pool     copies into pool slices, exposures by dedicated registration;
 *   pool+mw  copies into pool slices, exposures through a type-2 window
 *            bound per session (the full tollfree path);
 *   new      a new connection (TCP + QP) per session;
 *   reuse    the node's cache of kept connections;
 *   new+psk  new, with a pre-shared key on both nodes: every handshake
 *            proves the key in both directions (HMAC-SHA256);
 *   grant    reuse, with a listener that grants each kept connection's
 *            next windows ahead (tf_listener_params_t.grant_len): the
 *            session writes into the granted window without waiting for
 *            the server (write only: a fetch must ask first), and with
 *            TF_SESSION_DEFER_OPEN sends its OPEN with its CLOSE.
 *
 * Each step from direct to pool+mw changes one thing.  References: "warm"
 * (the K transfers on a session already open, memory already exposed: the
 * floor), "tcp-crr" (TCP connect, K request/response exchanges of S bytes,
 * close) and "tcp-rr" (the exchanges on one kept TCP connection), each
 * with blocking sockets and, as "-spin", with both sides busy-polling
 * non-blocking ones: tollfree's waits spin, so the fair comparison is with
 * TCP that spins too.  All modes run in one process run, round-robin in
 * batches, so that drift on a shared machine hits them alike.
 *
 * The server is one thread serving everything: one listener (and node)
 * per registration strategy, two TCP echo listeners (one waited for in
 * epoll, one busy-polled) and a control connection to the client (the
 * "bench channel": parameters, ports, and after each session the server's
 * own revocation time).  It busy-polls, or with --server-wait sleep
 * blocks in epoll_wait whenever no session is open; --gap-us makes the
 * client pause before each session, so that the server goes idle.
 * Timings are measured on the client; "revoke" is the server's, the side
 * that gave out keys.
 */
#include <errno.h>
#include <getopt.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_crr.h"

/* ------------------------------------------------------------ modes */

const char *const reg_names[R_COUNT] = {
	"direct", "cache", "pool", "pool+mw", "pool+mw+psk", "pool+mw+grant"};

/* Sized by the initializer: a count that differs from NMODES (bench_crr.h)
 * conflicts with its declaration there and does not compile. */
const struct crr_mode crr_modes[] = {
	{"direct/new", K_SESSION, R_DIRECT, false},
	{"direct/reuse", K_SESSION, R_DIRECT, true},
	{"cache/new", K_SESSION, R_CACHE, false},
	{"cache/reuse", K_SESSION, R_CACHE, true},
	{"pool/new", K_SESSION, R_POOL, false},
	{"pool/reuse", K_SESSION, R_POOL, true},
	{"pool+mw/new", K_SESSION, R_POOLMW, false},
	{"pool+mw/new+psk", K_SESSION, R_POOLMW_PSK, false},
	{"pool+mw/reuse", K_SESSION, R_POOLMW, true},
	{"pool+mw/grant", K_SESSION, R_POOLMW_GRANT, true},
	{"warm", K_WARM, R_POOLMW, true},
	{"tcp-crr", K_TCP_CRR, 0, false, false},
	{"tcp-crr-spin", K_TCP_CRR, 0, false, true},
	{"tcp-rr", K_TCP_RR, 0, true, false},
	{"tcp-rr-spin", K_TCP_RR, 0, true, true},
};

const char *const op_names[3] = {"write", "read", "send"};

/* ------------------------------------------------------------ channel */

static void ch_hton(struct ch_msg *m)
{
	uint32_t *w = (uint32_t *)m;

	for (size_t i = 0; i < sizeof(*m) / 4; i++)
		w[i] = htonl(w[i]);
}

int ch_send(int fd, struct ch_msg *m)
{
	struct ch_msg w = *m;

	w.magic = CH_MAGIC;
	w.version = CH_VERSION;
	ch_hton(&w);
	return sock_full(fd, &w, sizeof(w), true, CRR_TIMEOUT_MS);
}

int ch_recv(int fd, struct ch_msg *m, uint32_t type)
{
	int ret = sock_full(fd, m, sizeof(*m), false, CRR_TIMEOUT_MS);

	if (ret)
		return ret;
	ch_hton(m); /* ntohl is the same permutation */
	if (m->magic != CH_MAGIC || m->version != CH_VERSION ||
	    (type && m->type != type))
		return -EPROTO;
	return 0;
}

/* ------------------------------------------------------------ nodes */

unsigned attach_flags(int op, bool server)
{
	/* What a real program would copy: the side whose bytes travel
	 * copies them in, the side that receives copies them out. */
	bool src = server ? op == OP_READ : op != OP_READ;

	return src ? TF_ATTACH_IN : TF_ATTACH_OUT;
}

int node_for(tf_context_t *ctx, int reg, uint64_t size, tf_node_t **n)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_REG_MODE | TF_NODE_PARAM_USE_MW |
			      TF_NODE_PARAM_CROSSOVER | TF_NODE_PARAM_TIMEOUT,
		.reg_mode = reg == R_DIRECT  ? TF_REG_DIRECT
			    : reg == R_CACHE ? TF_REG_CACHE
					     : TF_REG_POOL,
		.use_mw = reg == R_POOLMW || reg == R_POOLMW_PSK ||
			  reg == R_POOLMW_GRANT,
		/* Irrelevant with an explicit mode; set so that the node
		 * does not spend time measuring it. */
		.crossover = size,
		/* A loaded host can stall a handshake for seconds; that is
		 * a slow sample, not a failure. */
		.timeout_ms = CRR_TIMEOUT_MS,
	};
	int ret;

	if (reg == R_POOLMW_PSK) {
		np.field_mask |= TF_NODE_PARAM_PSK;
		np.psk = CRR_PSK;
		np.psk_len = sizeof(CRR_PSK) - 1;
	}
	ret = tf_node_create(ctx, &np, n);
	if (ret)
		fail("creating the %s node: %s", reg_names[reg],
		     tf_strerror(ret));
	return ret;
}

void *map_buf(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fail("mmap of %zu bytes: %m", len);
		return NULL;
	}
	memset(p, 0x5a, len);
	return p;
}

tf_session_params_t sess_params(const struct crr_opts *o, unsigned flags)
{
	tf_session_params_t sp = {
		.field_mask = TF_SESSION_PARAM_FLAGS | TF_SESSION_PARAM_QP,
		.flags = flags,
		/* Room for K receives (send) and the session's own work. */
		.max_send_wr = o->k + 64,
		.max_recv_wr = o->k + 64,
	};

	return sp;
}

/* ============================================================ options */

static void usage_crr(FILE *f)
{
	fprintf(f,
		"usage: %s crr [-k K] [-s SIZE] [-n SESSIONS] [-w WARMUP] "
		"[-b BATCH] [-t write|read|send]\n"
		"          [--modes LIST] [--provider P] [--device D] "
		"[--transport shm|tcp|auto]\n"
		"          [--gap-us N] [--server-wait spin|sleep] "
		"[--server HOST:PORT | --connect HOST:PORT]\n"
		"          [--remote-inv] [--csv] [--json FILE] "
		"[--plot FILE.svg]\n"
		"  defaults: K 4, SIZE 1K, 150 sessions per mode, warm-up "
		"min(n/10, 20), batch 25, no gap, server-wait spin, write,\n"
		"  --remote-inv: sessions connect with TF_SESSION_REMOTE_INV "
		"(write and read only)\n"
		"  every mode: ",
		prog);
	bench_print_names(f, &crr_modes[0].name, sizeof(crr_modes[0]), NMODES);
}

enum {
	OPT_MODES = OPT_OWN,
	OPT_SERVER,
	OPT_CONNECT,
	OPT_PLOT,
	OPT_GAP,
	OPT_SERVER_WAIT,
	OPT_REMOTE_INV,
};

static const struct option crr_long[] = {
	{"transfers", required_argument, NULL, 'k'},
	{"size", required_argument, NULL, 's'},
	{"sessions", required_argument, NULL, 'n'},
	{"warmup", required_argument, NULL, 'w'},
	{"batch", required_argument, NULL, 'b'},
	{"test", required_argument, NULL, 't'},
	{"modes", required_argument, NULL, OPT_MODES},
	BENCH_COMMON_OPTS,
	BENCH_TRANSPORT_OPT,
	{"server", required_argument, NULL, OPT_SERVER},
	{"connect", required_argument, NULL, OPT_CONNECT},
	{"plot", required_argument, NULL, OPT_PLOT},
	{"gap-us", required_argument, NULL, OPT_GAP},
	{"server-wait", required_argument, NULL, OPT_SERVER_WAIT},
	{"remote-inv", no_argument, NULL, OPT_REMOTE_INV},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int crr_parse(int argc, char **argv, struct crr_opts *o)
{
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "k:s:n:w:b:t:h", crr_long, NULL)) !=
	       -1) {
		switch (c) {
		case 'k':
			if (parse_uint(optarg, "transfer count", 1, &o->k))
				return -1;
			if (o->k > CRR_MAX_K) {
				fail("at most %u transfers", CRR_MAX_K);
				return -1;
			}
			break;
		case 's':
			if (parse_size(optarg, CRR_MAX_SIZE, &o->size))
				return -1;
			break;
		case 'n':
			if (parse_uint(optarg, "session count", 1,
				       &o->sessions))
				return -1;
			break;
		case 'w':
			if (parse_uint(optarg, "warm-up count", 0, &o->warmup))
				return -1;
			o->warmup_set = true;
			break;
		case 'b':
			if (parse_uint(optarg, "batch", 1, &o->batch))
				return -1;
			break;
		case 't':
			for (o->op = 0; o->op <= OP_SEND; o->op++)
				if (!strcmp(optarg, op_names[o->op]))
					break;
			if (o->op > OP_SEND) {
				fail("bad transfer '%s' (write, read, send)",
				     optarg);
				return -1;
			}
			break;
		case OPT_MODES:
			if (bench_parse_modes(optarg, &crr_modes[0].name,
					      sizeof(crr_modes[0]), NMODES,
					      usage_crr, &o->modes))
				return -1;
			break;
		case OPT_SERVER:
			o->server = optarg;
			break;
		case OPT_CONNECT:
			o->connect = optarg;
			break;
		case OPT_PLOT:
			o->plot = optarg;
			break;
		case OPT_GAP:
			if (parse_uint(optarg, "gap (us)", 0, &o->gap_us))
				return -1;
			break;
		case OPT_SERVER_WAIT:
			if (parse_server_wait(optarg, &o->server_sleep))
				return -1;
			break;
		case OPT_REMOTE_INV:
			o->remote_inv = true;
			break;
		default:
			if (bench_opt_rest(c, optarg, &o->cm, usage_crr))
				return -1;
		}
	}
	if (bench_no_operands(argc, argv))
		return -1;
	if (o->server && o->connect) {
		fail("--server and --connect exclude each other");
		return -1;
	}
	/* Its sessions send nothing that takes a receive at the server. */
	if (o->remote_inv && o->op == OP_SEND) {
		fail("--remote-inv: not with -t send");
		return -1;
	}
	if (!o->warmup_set)
		o->warmup = o->sessions / 10 < 20 ? o->sessions / 10 : 20;
	/* A grant is a window the client writes into at once: a fetch or
	 * a SEND has nothing to do with it. */
	for (unsigned i = 0; i < NMODES; i++)
		if (crr_modes[i].reg == R_POOLMW_GRANT &&
		    (o->op != OP_WRITE || o->size > TF_LISTENER_MAX_GRANT_LEN))
			o->modes &= ~(1u << i);
	return 0;
}

int cmd_crr(int argc, char **argv)
{
	struct crr_opts o = {
		.k = 4,
		.size = 1024,
		.sessions = 150,
		.batch = 25,
		.op = OP_WRITE,
		.modes = (1u << NMODES) - 1,
	};
	char host[64], note[96];
	int cpu_c, cpu_s, lfd, ch, status, ret;
	uint16_t port = 0;
	pid_t pid;

	if (crr_parse(argc, argv, &o))
		return 2;
	pick_cpus(&cpu_c, &cpu_s);
	if (o.server) {
		if (sock_split_hostport(o.server, host, sizeof(host), &port))
			return 2;
		lfd = sock_listen(host, port, &port);
		if (lfd < 0)
			return 1;
		fprintf(stderr, "%s: serving on %s:%u\n", prog, host, port);
		ret = crr_server(&o, lfd, host, -1);
		close(lfd);
		return ret ? 1 : 0;
	}
	if (o.connect) {
		if (sock_split_hostport(o.connect, host, sizeof(host), &port))
			return 2;
		ch = sock_connect(host, port, CRR_TIMEOUT_MS);
		if (ch < 0) {
			fail("connecting to %s: %s", o.connect,
			     tf_strerror(ch));
			return 1;
		}
		ret = crr_client(&o, ch, host, -1, "(remote server)");
		close(ch);
		return ret ? 1 : 0;
	}

	/* Loopback: the server is a child, pinned to the second CPU, the
	 * client to the first; contexts are opened after the fork. */
	snprintf(host, sizeof(host), "127.0.0.1");
	lfd = sock_listen(host, 0, &port);
	if (lfd < 0)
		return 1;
	if (cpu_s < 0)
		snprintf(note, sizeof(note), "(one CPU: not pinned)");
	else
		snprintf(note, sizeof(note), "(client cpu %d, server cpu %d)",
			 cpu_c, cpu_s);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fail("fork: %m");
		return 1;
	}
	if (pid == 0) {
		prog = "tollfree-bench (server)";
		ret = crr_server(&o, lfd, host, cpu_s);
		fflush(NULL);
		_exit(ret ? 1 : 0);
	}
	close(lfd);
	ch = sock_connect(host, port, CRR_TIMEOUT_MS);
	if (ch < 0) {
		fail("connecting to the server: %s", tf_strerror(ch));
		kill(pid, SIGTERM);
		waitpid(pid, &status, 0);
		return 1;
	}
	ret = crr_client(&o, ch, host, cpu_s < 0 ? -1 : cpu_c, note);
	close(ch);
	if (ret)
		kill(pid, SIGTERM);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!ret && (!WIFEXITED(status) || WEXITSTATUS(status))) {
		fail("server process failed");
		ret = -1;
	}
	return ret ? 1 : 0;
}
