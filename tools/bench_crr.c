/* SPDX-License-Identifier: MIT */
/*
 * bench_crr.c - tollfree-bench crr: short sessions, RDMA_CRR style.
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
 *   reuse    the node's cache of kept connections.
 *
 * Each step from direct to pool+mw changes one thing.  References: "warm"
 * (the K transfers on a session already open, memory already exposed: the
 * floor), "tcp-crr" (TCP connect, K request/response exchanges of S bytes,
 * close) and "tcp-rr" (the exchanges on one kept TCP connection).  All
 * modes run in one process run, round-robin in batches, so that drift on
 * a shared machine hits them alike.
 *
 * The server is one thread serving everything with a busy loop: one
 * listener (and node) per registration strategy, a TCP echo listener and a
 * control connection to the client (the "bench channel": parameters,
 * ports, and after each session the server's own revocation time).
 * Timings are measured on the client; "revoke" is the server's, the side
 * that gave out keys.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* ------------------------------------------------------------ modes */

enum crr_reg {
	R_DIRECT,
	R_CACHE,
	R_POOL,
	R_POOLMW,
	R_COUNT,
};

static const char *const reg_names[R_COUNT] = {"direct", "cache", "pool",
					       "pool+mw"};

enum crr_kind {
	K_SESSION, /* a registration strategy and a connection strategy */
	K_WARM,
	K_TCP_CRR,
	K_TCP_RR,
};

struct crr_mode {
	const char *name;
	enum crr_kind kind;
	int reg;    /* enum crr_reg (K_SESSION; warm uses pool+mw) */
	bool reuse; /* K_SESSION: take kept connections */
};

static const struct crr_mode crr_modes[] = {
	{"direct/new", K_SESSION, R_DIRECT, false},
	{"direct/reuse", K_SESSION, R_DIRECT, true},
	{"cache/new", K_SESSION, R_CACHE, false},
	{"cache/reuse", K_SESSION, R_CACHE, true},
	{"pool/new", K_SESSION, R_POOL, false},
	{"pool/reuse", K_SESSION, R_POOL, true},
	{"pool+mw/new", K_SESSION, R_POOLMW, false},
	{"pool+mw/reuse", K_SESSION, R_POOLMW, true},
	{"warm", K_WARM, R_POOLMW, true},
	{"tcp-crr", K_TCP_CRR, 0, false},
	{"tcp-rr", K_TCP_RR, 0, true},
};

#define NMODES ARRAY_SIZE(crr_modes)

enum crr_op {
	OP_WRITE,
	OP_READ,
	OP_SEND,
};

static const char *const op_names[] = {"write", "read", "send"};

/* The kernel picks no port below this for us, and none of ours is. */
#define CRR_MAX_K      1024
#define CRR_MAX_SIZE   (16u << 20)
#define CRR_TIMEOUT_MS 10000
/* Connect private data of the warm session. */
#define WARM_PRIV "warm"

struct crr_opts {
	struct bench_common cm;
	const char *server, *connect; /* HOST:PORT */
	const char *plot;
	unsigned k, sessions, warmup, batch;
	bool warmup_set;
	uint64_t size;
	int op;
	unsigned modes; /* bit per crr_modes[] entry */
};

/* ------------------------------------------------------------ channel */

/* The bench channel: fixed little-endian-free binary records (both ends
 * convert with htonl/ntohl), checked on receipt. */
#define CH_MAGIC   0x74666372u /* "tfcr" */
#define CH_VERSION 1

enum ch_type {
	CH_HELLO = 1, /* client: op, k, size */
	CH_PORTS,     /* server: status, the listeners' ports */
	CH_RECORD,    /* server, after each session: revoke ns, status */
	CH_BYE,	      /* client: done */
};

struct ch_msg {
	uint32_t magic;
	uint32_t type;
	uint32_t a, b, c;	     /* hello: op, k, size; record: status */
	uint32_t ports[R_COUNT + 1]; /* R_COUNT: the TCP echo port */
	uint32_t ns_hi, ns_lo;	     /* record: revoke ns */
};

static void ch_hton(struct ch_msg *m)
{
	uint32_t *w = (uint32_t *)m;

	for (size_t i = 0; i < sizeof(*m) / 4; i++)
		w[i] = htonl(w[i]);
}

static int ch_send(int fd, struct ch_msg *m)
{
	struct ch_msg w = *m;

	w.magic = CH_MAGIC;
	ch_hton(&w);
	return sock_full(fd, &w, sizeof(w), true, CRR_TIMEOUT_MS);
}

static int ch_recv(int fd, struct ch_msg *m, uint32_t type)
{
	int ret = sock_full(fd, m, sizeof(*m), false, CRR_TIMEOUT_MS);

	if (ret)
		return ret;
	ch_hton(m); /* ntohl is the same permutation */
	if (m->magic != CH_MAGIC || m->type != type)
		return -EPROTO;
	return 0;
}

/* ------------------------------------------------------------ nodes */

static unsigned attach_flags(int op, bool server)
{
	/* What a real program would copy: the side whose bytes travel
	 * copies them in, the side that receives copies them out. */
	bool src = server ? op == OP_READ : op != OP_READ;

	return src ? TF_ATTACH_IN : TF_ATTACH_OUT;
}

static int node_for(tf_context_t *ctx, int reg, uint64_t size, tf_node_t **n)
{
	tf_node_params_t np = {
		.field_mask = TF_NODE_PARAM_REG_MODE | TF_NODE_PARAM_USE_MW |
			      TF_NODE_PARAM_CROSSOVER | TF_NODE_PARAM_TIMEOUT,
		.reg_mode = reg == R_DIRECT  ? TF_REG_DIRECT
			    : reg == R_CACHE ? TF_REG_CACHE
					     : TF_REG_POOL,
		.use_mw = reg == R_POOLMW,
		/* Irrelevant with an explicit mode; set so that the node
		 * does not spend time measuring it. */
		.crossover = size,
		/* A loaded host can stall a handshake for seconds; that is
		 * a slow sample, not a failure. */
		.timeout_ms = CRR_TIMEOUT_MS,
	};
	int ret = tf_node_create(ctx, &np, n);

	if (ret)
		fail("creating the %s node: %s", reg_names[reg],
		     tf_strerror(ret));
	return ret;
}

static void *map_buf(size_t len)
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

static tf_session_params_t sess_params(const struct crr_opts *o, unsigned flags)
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

/* ============================================================ server */

#define SRV_MAX_ACTIVE 8
#define SRV_MAX_TCP    8

struct srv_sess {
	tf_session_t *s;
	int buf;
	bool repost; /* warm SEND session: replace each receive consumed */
};

struct srv_tcp {
	int fd;
	size_t got; /* bytes of the current request */
};

struct srv {
	const struct crr_opts *o;
	int op;
	unsigned k;
	uint64_t size;
	tf_context_t *ctx;
	tf_node_t *node[R_COUNT];
	tf_listener_t *l[R_COUNT];
	void *buf[R_COUNT]; /* the server's user buffer per strategy */
	int lfd, ch, epfd;
	uint8_t *echo; /* TCP echo buffer, size bytes */
	struct srv_sess act[SRV_MAX_ACTIVE];
	struct srv_tcp tcp[SRV_MAX_TCP];
};

/* How long the server keeps spinning after its last activity. */
#define SRV_SPIN_NS 2000000ull
/* How often it looks at listeners and sockets while a session is open. */
#define SRV_LOOK_NS 20000ull

/* Epoll tags: listeners 0..R_COUNT-1, then these. */
#define TAG_TCP_LISTEN 100
#define TAG_CHANNEL    101
#define TAG_TCP_CONN   200 /* + index */

static int srv_epoll_add(struct srv *sv, int fd, uint64_t tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};

	if (epoll_ctl(sv->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		fail("epoll_ctl: %m");
		return -errno;
	}
	return 0;
}

/* Prepare a just accepted session: the buffer and, for one-sided
 * transfers, the exposure (sent in an EXPOSE message; the session was
 * accepted without deferral so that the client's "prepare" phase, not its
 * "connect", carries this work).  For SEND the K receives are posted
 * before the deferred ACCEPT goes out, so that no SEND finds an empty
 * receive queue. */
static int srv_start(struct srv *sv, int reg, struct srv_sess *a)
{
	tf_session_t *s = a->s;
	size_t plen;
	const void *priv = tf_session_peer_priv(s, &plen);
	unsigned rights = sv->op == OP_WRITE ? TF_ACCESS_REMOTE_WRITE
					     : TF_ACCESS_REMOTE_READ;
	int b, x, ret;

	if (reg == R_DIRECT && sv->op != OP_SEND)
		ret = tf_session_rent(s, sv->size, &b, NULL);
	else
		ret = tf_session_attach(s, sv->buf[reg], sv->size,
					attach_flags(sv->op, true), &b);
	if (ret) {
		fail("server: preparing the buffer: %s", tf_strerror(ret));
		return ret;
	}
	a->buf = b;
	/* The warm session takes many rounds of K SENDs: the client says
	 * so in its private data, and each receive is replaced once
	 * consumed.  (Its connection is then not kept: receives remain.) */
	a->repost = priv && plen == sizeof(WARM_PRIV) &&
		    !memcmp(priv, WARM_PRIV, plen);
	if (sv->op == OP_SEND) {
		for (unsigned i = 0; i < sv->k; i++) {
			ret = tf_session_recv(s, b, 0, (uint32_t)sv->size, i);
			if (ret) {
				fail("server: posting a receive: %s",
				     tf_strerror(ret));
				return ret;
			}
		}
	} else {
		ret = tf_session_expose(s, b, 0, sv->size, rights, &x);
		if (ret) {
			fail("server: expose: %s", tf_strerror(ret));
			return ret;
		}
	}
	/* The exposure (or the receives) made before the ACCEPT: the key
	 * travels in it, as a server that exposes per session would do. */
	ret = tf_session_establish(s);
	if (ret)
		fail("server: establish: %s", tf_strerror(ret));
	return ret;
}

static int srv_accept(struct srv *sv, int reg)
{
	tf_session_params_t sp = sess_params(sv->o, TF_SESSION_DEFER_ESTABLISH);
	tf_session_t *s;
	int ret, i;

	for (;;) {
		ret = tf_listener_accept(sv->l[reg], &sp, 0, &s);
		if (ret == -EAGAIN)
			return 0;
		if (ret) {
			fail("server: accept: %s", tf_strerror(ret));
			return ret;
		}
		for (i = 0; i < SRV_MAX_ACTIVE && sv->act[i].s; i++)
			;
		if (i == SRV_MAX_ACTIVE) {
			fail("server: too many sessions at once");
			tf_session_close(s);
			return -ENOSPC;
		}
		sv->act[i].s = s;
		ret = srv_start(sv, reg, &sv->act[i]);
		if (ret)
			return ret;
	}
}

/* Serve an open session: reap (this also makes progress, which the tcp
 * transport needs for the client's one-sided operations) and, once the
 * peer closed, revoke, close and report the revocation time. */
static int srv_serve(struct srv *sv, struct srv_sess *a)
{
	struct tf_wc wc[16];
	struct ch_msg m = {.type = CH_RECORD};
	uint64_t t0, ns;
	int n, st, ret;

	do {
		n = tf_session_poll(a->s, 16, wc);
		if (n < 0) {
			fail("server: poll: %s", tf_strerror(n));
			return n;
		}
		for (int i = 0; i < n; i++) {
			if (wc[i].status != TF_WC_SUCCESS) {
				fail("server: completion %s",
				     tf_wc_status_str(wc[i].status));
				return -EIO;
			}
			if (a->repost && wc[i].opcode == TF_WC_RECV) {
				ret = tf_session_recv(a->s, a->buf, 0,
						      (uint32_t)sv->size,
						      wc[i].wr_id);
				if (ret) {
					fail("server: reposting a receive: "
					     "%s",
					     tf_strerror(ret));
					return ret;
				}
			}
		}
	} while (n > 0);
	st = tf_session_state(a->s);
	if (st != TF_SESSION_PEER_CLOSED && st != TF_SESSION_BROKEN)
		return 0;
	t0 = now_ns();
	ret = tf_session_revoke(a->s);
	ns = now_ns() - t0;
	tf_session_close(a->s);
	a->s = NULL;
	m.a = (uint32_t)(st == TF_SESSION_BROKEN ? 1 : ret ? 2 : 0);
	m.ns_hi = (uint32_t)(ns >> 32);
	m.ns_lo = (uint32_t)ns;
	return ch_send(sv->ch, &m);
}

static int srv_tcp_accept(struct srv *sv)
{
	int fd, i;

	while ((fd = accept4(sv->lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		for (i = 0; i < SRV_MAX_TCP && sv->tcp[i].fd >= 0; i++)
			;
		if (i == SRV_MAX_TCP) {
			close(fd);
			continue;
		}
		sock_nodelay(fd, CRR_TIMEOUT_MS);
		sv->tcp[i].fd = fd;
		sv->tcp[i].got = 0;
		if (srv_epoll_add(sv, fd, TAG_TCP_CONN + (uint64_t)i))
			return -1;
	}
	return 0;
}

/* Echo every complete request of S bytes; close at end of file. */
static int srv_tcp_echo(struct srv *sv, struct srv_tcp *t)
{
	for (;;) {
		ssize_t n =
			recv(t->fd, sv->echo + t->got, sv->size - t->got, 0);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(t->fd); /* also leaves the epoll set */
			t->fd = -1;
			return 0;
		}
		t->got += (size_t)n;
		if (t->got < sv->size)
			continue;
		t->got = 0;
		if (sock_full(t->fd, sv->echo, sv->size, true,
			      CRR_TIMEOUT_MS)) {
			close(t->fd);
			t->fd = -1;
			return 0;
		}
	}
}

static void srv_teardown(struct srv *sv)
{
	for (int i = 0; i < SRV_MAX_ACTIVE; i++)
		tf_session_close(sv->act[i].s);
	for (int i = 0; i < SRV_MAX_TCP; i++)
		if (sv->tcp[i].fd >= 0)
			close(sv->tcp[i].fd);
	for (int r = 0; r < R_COUNT; r++) {
		tf_listener_destroy(sv->l[r]);
		tf_node_destroy(sv->node[r]);
		if (sv->buf[r])
			munmap(sv->buf[r], sv->size);
	}
	if (sv->epfd >= 0)
		close(sv->epfd);
	if (sv->lfd >= 0)
		close(sv->lfd);
	free(sv->echo);
	tf_context_close(sv->ctx);
}

/*
 * The server: @chlfd listens for the bench channel (one client per run).
 * It runs on cpu @cpu and spins while a session is open, like perftest's
 * servers; between sessions it naps 1 ms at a time in epoll_wait (a
 * loaded host needs the CPU more than an idle server does).
 */
static int crr_server(const struct crr_opts *o, int chlfd, const char *host,
		      int cpu)
{
	struct srv sv = {.o = o, .lfd = -1, .ch = -1, .epfd = -1};
	/* The server busy-polls (below), so its listeners poll the control
	 * QPs of kept connections rather than arming them. */
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR |
						 TF_LISTENER_PARAM_FLAGS,
				   .addr = host,
				   .flags = TF_LISTENER_BUSY_POLL};
	struct ch_msg m;
	struct epoll_event evs[16];
	uint16_t tport;
	int ret, r;

	pin_to(cpu);
	for (int i = 0; i < SRV_MAX_TCP; i++)
		sv.tcp[i].fd = -1;
	sv.ch = accept4(chlfd, NULL, NULL, SOCK_CLOEXEC);
	if (sv.ch < 0) {
		fail("server: accepting the bench channel: %m");
		return -1;
	}
	sock_nodelay(sv.ch, CRR_TIMEOUT_MS);
	ret = ch_recv(sv.ch, &m, CH_HELLO);
	if (ret || m.a > OP_SEND || !m.b || m.b > CRR_MAX_K || !m.c ||
	    m.c > CRR_MAX_SIZE) {
		fail("server: bad hello from the client (%s)",
		     ret ? tf_strerror(ret) : "out of range");
		close(sv.ch);
		return -1;
	}
	sv.op = (int)m.a;
	sv.k = m.b;
	sv.size = m.c;
	ret = bench_open_ctx(o->cm.provider, o->cm.device, o->cm.transport,
			     &sv.ctx);
	if (ret)
		goto out;
	sv.echo = malloc(sv.size);
	sv.epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!sv.echo || sv.epfd < 0) {
		fail("server: out of memory or epoll: %m");
		ret = -ENOMEM;
		goto out;
	}
	memset(&m, 0, sizeof(m));
	m.type = CH_PORTS;
	for (r = 0; r < R_COUNT; r++) {
		ret = node_for(sv.ctx, r, sv.size, &sv.node[r]);
		if (ret)
			goto out;
		sv.buf[r] = map_buf(sv.size);
		if (!sv.buf[r]) {
			ret = -ENOMEM;
			goto out;
		}
		ret = tf_listener_create(sv.node[r], &lp, &sv.l[r]);
		if (ret) {
			fail("server: listener on %s: %s", host,
			     tf_strerror(ret));
			goto out;
		}
		m.ports[r] = tf_listener_port(sv.l[r]);
		ret = srv_epoll_add(&sv, tf_listener_fd(sv.l[r]), (uint64_t)r);
		if (ret)
			goto out;
	}
	sv.lfd = sock_listen(host, 0, &tport);
	if (sv.lfd < 0 || fcntl(sv.lfd, F_SETFL, O_NONBLOCK)) {
		ret = -1;
		goto out;
	}
	m.ports[R_COUNT] = tport;
	ret = srv_epoll_add(&sv, sv.lfd, TAG_TCP_LISTEN);
	if (!ret)
		ret = srv_epoll_add(&sv, sv.ch, TAG_CHANNEL);
	if (!ret)
		ret = ch_send(sv.ch, &m);
	if (ret)
		goto out;

	for (uint64_t last_busy = 0, last_look = 0;;) {
		bool busy = false, active = false;
		uint64_t now;
		int n;

		/* Spin while a session is open (the tcp transport needs
		 * this side's progress for the client's one-sided
		 * operations) and for SRV_SPIN_NS after, so that the
		 * client's next session or request, which follows at once,
		 * does not pay a wake-up (tens of microseconds across
		 * cores, more than a whole session); when idle longer,
		 * sleep in short naps.  The listeners are served on every
		 * turn, not only when their fd is readable: a handshake
		 * whose bytes were already read must not wait for another
		 * event (nor miss its deadline). */
		for (int i = 0; i < SRV_MAX_ACTIVE; i++)
			active = active || sv.act[i].s;
		now = now_ns();
		busy = active;
		if (busy)
			last_busy = now;
		else
			busy = now - last_busy < SRV_SPIN_NS;
		/* While a session is open, its messages come first: the
		 * listeners and sockets (a system call) are looked at every
		 * SRV_LOOK_NS only.  The single client runs one session at a
		 * time, and no TCP mode has a session open. */
		if (active && now - last_look < SRV_LOOK_NS)
			goto serve;
		last_look = now;
		n = epoll_wait(sv.epfd, evs, ARRAY_SIZE(evs), busy ? 0 : 1);
		if (n > 0)
			last_busy = now_ns();
		if (n < 0 && errno != EINTR) {
			fail("server: epoll_wait: %m");
			ret = -1;
			goto out;
		}
		for (r = 0; r < R_COUNT; r++) {
			ret = srv_accept(&sv, r);
			if (ret)
				goto out;
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag < R_COUNT) {
				continue; /* served above */
			} else if (tag == TAG_TCP_LISTEN) {
				ret = srv_tcp_accept(&sv);
			} else if (tag == TAG_CHANNEL) {
				/* Only BYE (or the client's end) comes. */
				ret = ch_recv(sv.ch, &m, CH_BYE);
				if (ret && ret != -EPIPE)
					fail("server: bad message on the "
					     "bench channel");
				goto out;
			} else if (tag >= TAG_TCP_CONN &&
				   tag < TAG_TCP_CONN + SRV_MAX_TCP &&
				   sv.tcp[tag - TAG_TCP_CONN].fd >= 0) {
				ret = srv_tcp_echo(&sv,
						   &sv.tcp[tag - TAG_TCP_CONN]);
			}
			if (ret)
				goto out;
		}
	serve:
		for (int i = 0; i < SRV_MAX_ACTIVE; i++) {
			if (!sv.act[i].s)
				continue;
			ret = srv_serve(&sv, &sv.act[i]);
			if (ret)
				goto out;
		}
	}
out:
	srv_teardown(&sv);
	close(sv.ch);
	return ret;
}

/* ============================================================ client */

struct cli {
	const struct crr_opts *o;
	char host[64];
	uint16_t ports[R_COUNT + 1];
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
	tf_session_params_t sp =
		sess_params(c->o, reuse ? 0 : TF_SESSION_NO_REUSE);
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

static int tcp_exchange(struct cli *c, int fd)
{
	for (unsigned i = 0; i < c->o->k; i++) {
		int ret = sock_full(fd, c->tbuf, c->o->size, true,
				    CRR_TIMEOUT_MS);

		if (!ret)
			ret = sock_full(fd, c->tbuf, c->o->size, false,
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
	bool crr = crr_modes[mode].kind == K_TCP_CRR;
	uint64_t t[5];
	int fd, ret;

	t[0] = now_ns();
	fd = crr ? sock_connect(c->host, c->ports[R_COUNT], CRR_TIMEOUT_MS)
		 : c->rr_fd;
	t[1] = t[2] = now_ns();
	if (fd < 0) {
		fail("tcp connect: %s", tf_strerror(fd));
		return fd;
	}
	ret = tcp_exchange(c, fd);
	t[3] = now_ns();
	if (crr)
		close(fd);
	t[4] = now_ns();
	if (!ret)
		cli_store(c, mode, t, 0, record);
	return ret;
}

/* Run @count transactions of @mode; the batch's kept session or
 * connection (warm, tcp-rr) is opened before and closed after, outside
 * the samples. */
static int run_batch(struct cli *c, unsigned mode, unsigned count, bool record)
{
	const struct crr_mode *md = &crr_modes[mode];
	uint64_t t[5], rv;
	int ret = 0;

	if (md->kind == K_WARM) {
		ret = cli_open(c, R_POOLMW, true, true, &c->warm, &c->warm_buf,
			       t);
		if (ret)
			return ret;
	} else if (md->kind == K_TCP_RR) {
		c->rr_fd = sock_connect(c->host, c->ports[R_COUNT],
					CRR_TIMEOUT_MS);
		if (c->rr_fd < 0) {
			fail("tcp connect: %s", tf_strerror(c->rr_fd));
			return c->rr_fd;
		}
	}
	for (unsigned i = 0; i < count && !ret; i++) {
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

static void progress_bar(unsigned done, unsigned total, const char *what)
{
	int w = 40, fill = total ? (int)((uint64_t)done * w / total) : w;

	fprintf(stderr, "\r[%.*s%*s] %3u%% %-14s", fill,
		"########################################", w - fill, "",
		total ? done * 100 / total : 100, what);
	if (done == total)
		fputc('\n', stderr);
	fflush(stderr);
}

static double ratio(const struct report *r, const char *a, const char *b,
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
		{"pool+mw/new", "tcp-crr", false,
		 "median: pool+mw/new over tcp-crr"},
		{"pool+mw/reuse", "tcp-crr", true,
		 "sessions/s: pool+mw/reuse over tcp-crr"},
		{"pool+mw/reuse", "tcp-rr", true,
		 "sessions/s: pool+mw/reuse over tcp-rr"},
	};
	bool any = false;

	for (size_t i = 0; i < ARRAY_SIZE(q); i++) {
		double v = ratio(r, q[i].a, q[i].b, q[i].rate);

		if (v <= 0)
			continue;
		if (!any)
			fprintf(f, "ratios (this run):\n");
		any = true;
		fprintf(f, "  %-52s %8.2f\n", q[i].what, v);
	}
	if (!strcmp(r->transport, "tcp")) {
		double v = ratio(r, "pool+mw/reuse", "tcp-rr", true);

		if (v > 0)
			fprintf(f,
				"  on the tcp transport, a whole tollfree "
				"session (pool+mw/reuse) runs at %.2fx the "
				"rate of K exchanges on an open TCP "
				"connection (tcp-rr)\n",
				v);
	}
}

static int cli_setup(struct cli *c)
{
	struct ch_msg m = {.type = CH_HELLO};
	int ret;

	m.a = (uint32_t)c->o->op;
	m.b = c->o->k;
	m.c = (uint32_t)c->o->size;
	ret = ch_send(c->ch, &m);
	if (!ret)
		ret = ch_recv(c->ch, &m, CH_PORTS);
	if (ret) {
		fail("bench channel: %s", tf_strerror(ret));
		return ret;
	}
	for (int r = 0; r <= R_COUNT; r++) {
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

static int crr_client(const struct crr_opts *o, int ch, const char *host,
		      int cpu, const char *pin_note)
{
	struct cli c = {.o = o, .ch = ch, .rr_fd = -1};
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
	snprintf(extra, sizeof(extra),
		 "%s\n%sop: %s  K: %u  S: %" PRIu64 " B  sessions/mode: %u  "
		 "warm-up/mode: %u  batch: %u",
		 pin_note, o->cm.csv ? "# " : "", op_names[o->op], o->k,
		 o->size, o->sessions, o->warmup, o->batch);
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

/* ============================================================ options */

static void usage_crr(FILE *f)
{
	fprintf(f,
		"usage: %s crr [-k K] [-s SIZE] [-n SESSIONS] [-w WARMUP] "
		"[-b BATCH] [-t write|read|send]\n"
		"          [--modes LIST] [--provider P] [--device D] "
		"[--transport shm|tcp|auto]\n"
		"          [--server HOST:PORT | --connect HOST:PORT] "
		"[--csv] [--json FILE] [--plot FILE.svg]\n"
		"  defaults: K 4, SIZE 1K, 150 sessions per mode, warm-up "
		"min(n/10, 20), batch 25, write, every mode:\n"
		"  ",
		prog);
	for (size_t i = 0; i < NMODES; i++)
		fprintf(f, "%s%s", crr_modes[i].name,
			i + 1 < NMODES ? "," : "\n");
}

static int parse_modes(const char *arg, unsigned *modes)
{
	char buf[256], *tok, *save = NULL;
	size_t i;

	if (strlen(arg) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", arg);
	*modes = 0;
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "all")) {
			*modes |= (1u << NMODES) - 1;
			continue;
		}
		for (i = 0; i < NMODES; i++)
			if (!strcmp(tok, crr_modes[i].name))
				break;
		if (i == NMODES)
			goto bad;
		*modes |= 1u << i;
	}
	if (*modes)
		return 0;
bad:
	fail("bad mode list '%s'", arg);
	usage_crr(stderr);
	return -1;
}

enum {
	OPT_MODES = OPT_OWN,
	OPT_SERVER,
	OPT_CONNECT,
	OPT_PLOT,
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
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int crr_parse(int argc, char **argv, struct crr_opts *o)
{
	int c, r;

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
			if (parse_modes(optarg, &o->modes))
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
		case 'h':
			usage_crr(stdout);
			exit(0);
		default:
			r = bench_common_opt(c, optarg, &o->cm);
			if (r < 0)
				return -1;
			if (!r) {
				usage_crr(stderr);
				return -1;
			}
		}
	}
	if (optind < argc) {
		fail("unexpected argument '%s'", argv[optind]);
		return -1;
	}
	if (o->server && o->connect) {
		fail("--server and --connect exclude each other");
		return -1;
	}
	if (!o->warmup_set)
		o->warmup = o->sessions / 10 < 20 ? o->sessions / 10 : 20;
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
