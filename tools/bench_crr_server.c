/* SPDX-License-Identifier: MIT */
/*
 * bench_crr_server.c - the server of tollfree-bench crr: one thread that
 * serves every mode, with one node and listener per registration
 * strategy, a TCP echo listener for the references and the bench channel
 * to the client, over which it reports its revocation time after each
 * session.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_crr.h"

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
	bool spin;  /* busy-polled on every turn (spin server, slfd) */
};

struct srv {
	const struct crr_opts *o;
	int op;
	unsigned k;
	uint64_t size;
	tf_context_t *ctx;
	tf_node_t *node[R_COUNT];
	tf_listener_t *l[R_COUNT];
	void *buf[R_COUNT];	 /* the server's user buffer per strategy */
	int lfd, slfd, ch, epfd; /* TCP echo listeners: waiting, spinning */
	unsigned n_spin;	 /* open busy-polled connections */
	bool sleep;		 /* --server-wait sleep (from the hello) */
	int mode; /* the listener of the client's mode (CH_MODE); -1: all */
	uint8_t *echo; /* TCP echo buffer, size bytes */
	struct srv_sess act[SRV_MAX_ACTIVE];
	struct srv_tcp tcp[SRV_MAX_TCP];
};

/* How long the server keeps spinning after its last activity. */
#define SRV_SPIN_NS 2000000ull
/* How often it looks at listeners and sockets while a session is open. */
#define SRV_LOOK_NS 20000ull

/* Epoll tags: listeners 0..R_COUNT-1, then these. */
#define TAG_TCP_LISTEN	    100
#define TAG_CHANNEL	    101
#define TAG_TCP_SPIN_LISTEN 102
#define TAG_TCP_CONN	    200 /* + index */
#define TAG_SESS	    300 /* + index: a session's fd (sleep) */

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

	/* Opened on a grant: the client writes into buffer 0 already. */
	if (tf_session_granted(s)) {
		a->buf = 0;
		a->repost = false;
		return 0;
	}
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
		/* A sleeping server waits for the session's messages and
		 * completions on its fd, with everything else.  Added after
		 * the answer, which the client waits for (an epoll_ctl is
		 * 4-8% of a fetch from a sleeping server): nothing is lost,
		 * since the fd is armed, and looked at, before the sleep. */
		if (sv->sleep) {
			int fd = tf_session_fd(s);

			if (fd < 0) {
				fail("server: session fd: %s", tf_strerror(fd));
				return fd;
			}
			ret = srv_epoll_add(sv, fd, TAG_SESS + (uint64_t)i);
			if (ret)
				return ret;
		}
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
	/* Out of the epoll set before close: the fd is the connection's,
	 * which a kept connection keeps open. */
	if (sv->sleep)
		epoll_ctl(sv->epfd, EPOLL_CTL_DEL, tf_session_fd(a->s), NULL);
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

static void srv_tcp_close(struct srv *sv, struct srv_tcp *t)
{
	close(t->fd); /* also leaves the epoll set */
	t->fd = -1;
	if (t->spin)
		sv->n_spin--;
}

/* Take a connection waiting on @lfd; @spin: the busy-polling echo
 * listener, whose connections are polled on every turn instead of
 * waited for in epoll (unless the server sleeps: then they are waited
 * for as the others are, and only their client spins).  One an event,
 * as tollfree's listener does: an accept4 that finds the queue empty
 * costs as much as one that does not, and the listening socket stays
 * readable in the epoll set while more wait. */
static int srv_tcp_accept(struct srv *sv, int lfd, bool spin)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	int i;

	if (fd < 0)
		return 0;
	spin = spin && !sv->sleep;
	for (i = 0; i < SRV_MAX_TCP && sv->tcp[i].fd >= 0; i++)
		;
	if (i == SRV_MAX_TCP) {
		close(fd);
		return 0;
	}
	sock_nodelay(fd, CRR_TIMEOUT_MS);
	sv->tcp[i].fd = fd;
	sv->tcp[i].got = 0;
	sv->tcp[i].spin = spin;
	if (spin)
		sv->n_spin++;
	else if (srv_epoll_add(sv, fd, TAG_TCP_CONN + (uint64_t)i))
		return -1;
	return 0;
}

/* Echo every complete request of S bytes; close at end of file.  A
 * spinning connection also answers without ever sleeping. */
static int srv_tcp_echo(struct srv *sv, struct srv_tcp *t)
{
	for (;;) {
		ssize_t n = recv(t->fd, sv->echo + t->got, sv->size - t->got,
				 MSG_DONTWAIT);
		int ret;

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			srv_tcp_close(sv, t);
			return 0;
		}
		t->got += (size_t)n;
		if (t->got < sv->size)
			continue;
		t->got = 0;
		ret = t->spin ? sock_full_spin(t->fd, sv->echo, sv->size, true,
					       CRR_TIMEOUT_MS)
			      : sock_full(t->fd, sv->echo, sv->size, true,
					  CRR_TIMEOUT_MS);
		if (ret) {
			srv_tcp_close(sv, t);
			return 0;
		}
	}
}

/* One turn of the busy-polling echo server: look at each of its
 * connections (a recv with MSG_DONTWAIT each). */
static int srv_tcp_spin(struct srv *sv)
{
	int ret;

	if (sv->sleep)
		return 0; /* slfd and its connections are in epoll */
	/* New connections: from the epoll_wait of this turn (slfd is in the
	 * set), not from an accept4 per turn, which costs a socket's inode
	 * and file even when nothing is pending (Linux allocates them before
	 * it looks): a quarter of an idle server's time, and of its
	 * reaction to the next OPEN. */
	ret = 0;
	for (int i = 0; i < SRV_MAX_TCP && !ret && sv->n_spin; i++)
		if (sv->tcp[i].fd >= 0 && sv->tcp[i].spin)
			ret = srv_tcp_echo(sv, &sv->tcp[i]);
	return ret;
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
	if (sv->slfd >= 0)
		close(sv->slfd);
	free(sv->echo);
	tf_context_close(sv->ctx);
}

/*
 * The server: @chlfd listens for the bench channel (one client per run).
 * It runs on cpu @cpu.  As the client's hello says, it spins (like
 * perftest's servers) while a session is open and for SRV_SPIN_NS after
 * the last activity, then naps 1 ms at a time in epoll_wait (a loaded
 * host needs the CPU more than an idle server does); or it sleeps, never
 * spinning: a blocking epoll_wait on every listener's fd (new sessions,
 * OPENs on kept connections), the open sessions' fds (armed with
 * tf_session_arm: their completions and control messages, the client's
 * CLOSE), the TCP echo sockets and the channel, so that every session
 * and every TCP request pays the server's wake-up alike.
 */
int crr_server(const struct crr_opts *o, int chlfd, const char *host, int cpu)
{
	struct srv sv = {.o = o,
			 .lfd = -1,
			 .slfd = -1,
			 .ch = -1,
			 .epfd = -1,
			 .mode = -1};
	tf_listener_params_t lp = {.field_mask = TF_LISTENER_PARAM_ADDR |
						 TF_LISTENER_PARAM_FLAGS,
				   .addr = host};
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
	    m.c > CRR_MAX_SIZE || (m.d & ~CH_HELLO_SLEEP)) {
		fail("server: bad hello from the client (%s)",
		     ret ? tf_strerror(ret) : "out of range");
		close(sv.ch);
		return -1;
	}
	sv.op = (int)m.a;
	sv.k = m.b;
	sv.size = m.c;
	sv.sleep = m.d & CH_HELLO_SLEEP;
	/* A spinning server busy-polls (below), so its listeners poll the
	 * control QPs of kept connections rather than arming them; a
	 * sleeping one needs tf_listener_fd() to report the next OPEN on a
	 * kept connection, so its listeners arm them. */
	lp.flags = sv.sleep ? 0 : TF_LISTENER_BUSY_POLL;
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
		lp.field_mask &= ~(uint64_t)TF_LISTENER_PARAM_GRANT;
		if (r == R_POOLMW_GRANT && sv.op == OP_WRITE &&
		    sv.size <= TF_LISTENER_MAX_GRANT_LEN) {
			lp.field_mask |= TF_LISTENER_PARAM_GRANT;
			lp.grant_len = sv.size;
			lp.grant_rights = TF_ACCESS_REMOTE_WRITE;
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
	m.ports[P_TCP] = tport;
	sv.slfd = sock_listen(host, 0, &tport);
	if (sv.slfd < 0 || fcntl(sv.slfd, F_SETFL, O_NONBLOCK)) {
		ret = -1;
		goto out;
	}
	m.ports[P_TCP_SPIN] = tport;
	ret = srv_epoll_add(&sv, sv.lfd, TAG_TCP_LISTEN);
	/* The spinning listener is accepted on every busy turn; in epoll
	 * too, so that a connection ends a nap. */
	if (!ret)
		ret = srv_epoll_add(&sv, sv.slfd, TAG_TCP_SPIN_LISTEN);
	if (!ret)
		ret = srv_epoll_add(&sv, sv.ch, TAG_CHANNEL);
	if (!ret)
		ret = ch_send(sv.ch, &m);
	if (ret)
		goto out;

	for (uint64_t last_busy = 0, last_look = 0, yielded = 0;;) {
		bool busy = false, active = false, armed = true;
		bool fired[R_COUNT] = {false};
		uint64_t now;
		int n;

		/* A spinning server spins while a session is open, and for
		 * SRV_SPIN_NS after, so that the client's next session or
		 * request, which follows at once, does not pay a wake-up
		 * (tens of microseconds across cores, more than a whole
		 * session); when idle longer, it sleeps in short naps.  A
		 * sleeping server blocks whenever nothing is there, open
		 * session or not: its armed session fds report the
		 * client's completions and control messages (the CLOSE
		 * too, on a kept connection's control QP), and while a CQ
		 * is armed the provider makes the progress that the
		 * client's one-sided operations need (the soft provider's
		 * waker).  The listeners are served on every turn, not only when
		 * their fd is readable: a handshake whose bytes were
		 * already read must not wait for another event (nor miss
		 * its deadline). */
		for (int i = 0; i < SRV_MAX_ACTIVE; i++)
			active = active || sv.act[i].s;
		now = now_ns();
		/* A busy-polling echo connection keeps the server spinning
		 * as long as it is open, as its client does. */
		busy = active || sv.n_spin;
		if (busy)
			last_busy = now;
		else if (!sv.sleep)
			busy = now - last_busy < SRV_SPIN_NS;
		/* Spinning, it gives way now and then as the library's waits
		 * do (on its own CPU here, a yield returns at once). */
		if (busy && !sv.sleep)
			bench_spin_pause(&yielded);
		/* While a session is open, its messages come first: the
		 * listeners and sockets (a system call) are looked at every
		 * SRV_LOOK_NS only.  The single client runs one session at a
		 * time, and no TCP mode has a session open. */
		if (active && !sv.sleep && now - last_look < SRV_LOOK_NS)
			goto serve;
		last_look = now;
		/* A sleeping server arms its open sessions' fds before it
		 * sleeps; a session whose arm found something is served at
		 * once. */
		for (int i = 0; sv.sleep && i < SRV_MAX_ACTIVE; i++) {
			if (!sv.act[i].s)
				continue;
			ret = tf_session_arm(sv.act[i].s);
			if (ret < 0) {
				fail("server: arm: %s", tf_strerror(ret));
				goto out;
			}
			armed = armed && !ret;
		}
		n = epoll_wait(sv.epfd, evs, ARRAY_SIZE(evs),
			       sv.sleep ? (armed ? -1 : 0)
			       : busy	? 0
					: 1);
		if (n > 0)
			last_busy = now_ns();
		if (n < 0 && errno != EINTR) {
			fail("server: epoll_wait: %m");
			ret = -1;
			goto out;
		}
		/* The listener of the client's mode, and any other whose fd
		 * says it has something (until the first CH_MODE, all). */
		for (int i = 0; i < n; i++)
			if (evs[i].data.u64 < R_COUNT)
				fired[evs[i].data.u64] = true;
		for (r = 0; r < R_COUNT; r++) {
			if (sv.mode >= 0 && r != sv.mode && !fired[r])
				continue;
			ret = srv_accept(&sv, r);
			if (ret)
				goto out;
		}
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag < R_COUNT ||
			    (tag >= TAG_SESS &&
			     tag < TAG_SESS + SRV_MAX_ACTIVE)) {
				continue; /* served above and below */
			} else if (tag == TAG_TCP_LISTEN) {
				ret = srv_tcp_accept(&sv, sv.lfd, false);
			} else if (tag == TAG_TCP_SPIN_LISTEN) {
				ret = srv_tcp_accept(&sv, sv.slfd, true);
			} else if (tag == TAG_CHANNEL) {
				/* CH_MODE, or BYE (or the client's end). */
				ret = ch_recv(sv.ch, &m, 0);
				if (!ret && m.type == CH_MODE &&
				    m.a <= R_COUNT) {
					sv.mode = (int)m.a;
					continue;
				}
				if (ret && ret != -EPIPE)
					fail("server: bad message on the "
					     "bench channel");
				else if (!ret && m.type != CH_BYE)
					fail("server: unexpected message %u "
					     "on the bench channel",
					     m.type);
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
		ret = srv_tcp_spin(&sv);
		if (ret)
			goto out;
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
