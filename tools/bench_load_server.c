/* SPDX-License-Identifier: MIT */
/*
 * bench_load_server.c - the server of tollfree-bench load: one process,
 * one pool+mw node (or, --server-nodes thread, one context and node per
 * thread: each with its own progress, stock and pool, and its own
 * per-address bounds) and S threads.  Each thread owns a tollfree listener
 * and a TCP echo listener, both bound to ports that the S threads share
 * (SO_REUSEPORT: the kernel spreads the connections), one epoll set, and
 * the sessions and TCP connections it accepted.  The process's main
 * thread answers the parent on the control socket: which mode runs, and
 * the CPU time the process has spent (getrusage), read before and after
 * each mode.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_load.h"

/* While a session is open, the listener and the sockets are looked at
 * every this often only (a system call), as crr's server does. */
#define LOOK_NS 20000ull
/* Sessions accepted a turn, at most: then the open ones are served.  A
 * client's close is one-way, so a closed-loop client connects again as
 * soon as its CLOSE left: a thread that accepted while any were waiting
 * could go on accepting forever, and the sessions it never got to close
 * would pile up (about 3,600 in just over a second here, until the
 * provider ran out of QPs).  A thread that stops short of -EAGAIN comes
 * back without sleeping: only that return re-arms the listener's fd. */
#define ACCEPT_BATCH 16
/* A spinning thread polls its hot sessions on every turn; one that had
 * nothing for this long is armed and left to the epoll set (looked at
 * every LOOK_NS) until its fd fires.  A client that holds sessions open
 * and idle (the hog) would otherwise slow every turn by their number. */
#define COLD_NS 1000000ull

#define TAG_KICK     1
#define TAG_LISTENER 2
#define TAG_GRANTING 6 /* the granting listener (pool+mw/grant) */
#define TAG_TCP_LFD  3
#define TAG_TCP_CONN 4 /* + 8 * index */
#define TAG_SESS     5 /* + 8 * slot: a cold session's fd (spin) */
#define TAG_CONN     7 /* + 8 * fd: a connection's fd (sleep) */

struct lsrv;

/* An open session in its slot; a slot keeps its index (the epoll tag of
 * the session's fd) while the session is open. */
struct lsrv_sess {
	tf_session_t *s;    /* NULL: a free slot */
	bool due;	    /* sleep: in the thread's due list */
	bool cold;	    /* spin: armed, polled only when its fd fires */
	bool watched;	    /* spin: its fd is in the thread's epoll set */
	uint64_t active_ns; /* spin: when it last had something */
};

/* Sleep: a connection's fd (tf_session_fd) stays in the thread's epoll
 * set from its first session until the library closes it, which takes it
 * out of the set: a session on a kept connection costs no epoll_ctl (the
 * fd is an epoll set itself, and adding one to another is the dearest
 * epoll_ctl there is: the kernel looks for loops).  As the TCP server
 * keeps its connections' sockets in the set. */
struct lsrv_fd {
	uint32_t slot; /* its open session's slot + 1; 0: none */
	bool watched;  /* in the thread's epoll set */
};

struct lsrv_tcp {
	int fd;
	size_t got; /* bytes of the current request */
};

struct lsrv_thr {
	struct lsrv *sv;
	pthread_t tid;
	tf_context_t *ctx;     /* --server-nodes thread: its own */
	tf_node_t *node;       /* the node its listeners are on */
	tf_listener_t *l, *lg; /* lg: grants windows ahead */
	int tcp_lfd, epfd;
	void *buf;		       /* the exposed K * SIZE bytes */
	uint8_t *echo;		       /* one TCP request */
	struct lsrv_sess *sess;	       /* slots 0..nslot-1 */
	size_t nsess, nslot, cap_sess; /* open sessions, used slots */
	uint32_t *free_slot;	       /* below nslot, NULL there */
	size_t nfree;
	uint32_t *due; /* sleep: slots to serve this turn */
	size_t ndue;
	struct lsrv_fd *fds; /* sleep: by fd number */
	size_t nfds;
	struct lsrv_tcp *tcp; /* TCP connections, fd -1: free */
	size_t ntcp;
	_Atomic uint64_t errors; /* sessions that failed here */
};

struct lsrv {
	const struct load_opts *o;
	tf_context_t *ctx;
	tf_node_t *node;
	int kick; /* eventfd: a mode change or the end wakes every thread */
	_Atomic unsigned mode;
	_Atomic bool stop;
	struct lsrv_thr *thr;
};

/* A session (or a TCP accept) that failed on this side. */
static void thr_failed(struct lsrv_thr *t)
{
	atomic_fetch_add_explicit(&t->errors, 1, memory_order_relaxed);
}

static int epoll_add(int epfd, int fd, uint64_t tag)
{
	/* The kick is edge-triggered and never read: each write wakes
	 * every thread once, and a thread then looks at the mode again. */
	struct epoll_event ev = {.events = EPOLLIN |
					   (tag == TAG_KICK ? EPOLLET : 0),
				 .data.u64 = tag};

	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev)) {
		fail("server: epoll_ctl: %m");
		return -errno;
	}
	return 0;
}

/* Room for more slots: the free list and the due list hold at most one
 * entry per slot, so they grow with the slots. */
static int thr_grow(struct lsrv_thr *t)
{
	size_t cap = t->cap_sess ? 2 * t->cap_sess : 16;
	struct lsrv_sess *n = realloc(t->sess, cap * sizeof(*n));
	uint32_t *f, *d;

	if (!n)
		return -ENOMEM;
	t->sess = n;
	f = realloc(t->free_slot, cap * sizeof(*f));
	if (!f)
		return -ENOMEM;
	t->free_slot = f;
	d = realloc(t->due, cap * sizeof(*d));
	if (!d)
		return -ENOMEM;
	t->due = d;
	t->cap_sess = cap;
	return 0;
}

/* Sleep: session @s, in slot @i, is served when its connection's fd
 * fires.  The fd joins the epoll set with the connection's first session;
 * a session on a kept connection (tf_session_reused) finds it there,
 * unless that first session's add failed.  A closed connection's number
 * may come back as another's, whose first session adds it again: the
 * close took the old one out of the set.  Edge-triggered: between
 * sessions nobody reads the connection's events (the listener does, from
 * its own set), and a level-triggered fd would fire on every turn; a
 * served session is armed (tf_session_arm), and what comes after that
 * makes a new edge. */
static int thr_watch(struct lsrv_thr *t, tf_session_t *s, uint32_t i)
{
	int fd = tf_session_fd(s);
	struct lsrv_fd *f;

	if (fd < 0)
		return fd;
	if ((size_t)fd >= t->nfds) {
		size_t cap = 2 * (size_t)fd + 64;
		struct lsrv_fd *n = realloc(t->fds, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		memset(n + t->nfds, 0, (cap - t->nfds) * sizeof(*n));
		t->fds = n;
		t->nfds = cap;
	}
	f = &t->fds[fd];
	if (!f->watched || tf_session_reused(s) != 1) {
		struct epoll_event ev = {.events = EPOLLIN | EPOLLET,
					 .data.u64 =
						 TAG_CONN + 8 * (uint64_t)fd};

		if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) &&
		    errno != EEXIST) {
			fail("server: epoll_ctl: %m");
			f->watched = false;
			return -1;
		}
		f->watched = true;
	}
	f->slot = i + 1;
	return 0;
}

/* Take the sessions waiting on the thread's listener and prepare each as
 * crr's server does: attach the buffer (a pool copy), expose K * SIZE
 * bytes for remote writes, then the deferred ACCEPT carries the key.  A
 * session that cannot be prepared is closed and counted, not fatal. */
/* Accept from @l until it has nothing (false) or ACCEPT_BATCH sessions
 * were taken (true: more may wait). */
static bool thr_accept_on(struct lsrv_thr *t, tf_listener_t *l)
{
	const struct load_opts *o = t->sv->o;
	struct crr_opts co = {.k = o->k};
	tf_session_params_t sp = sess_params(&co, TF_SESSION_DEFER_ESTABLISH);
	size_t len = (size_t)o->size * o->k;
	tf_session_t *s;
	uint32_t i;
	int b, x, ret;

	for (unsigned n = 0; n < ACCEPT_BATCH; n++) {
		ret = tf_listener_accept(l, &sp, 0, &s);
		if (ret == -EAGAIN)
			return false;
		if (ret) {
			/* A handshake that failed: its client counts it. */
			thr_failed(t);
			continue;
		}
		if (!t->nfree && t->nslot == t->cap_sess && thr_grow(t)) {
			tf_session_close(s);
			thr_failed(t);
			continue;
		}
		/* Opened on a grant: the client writes into its buffer 0
		 * already, and establish has nothing to send. */
		ret = 0;
		if (!tf_session_granted(s)) {
			ret = tf_session_attach(s, t->buf, len,
						attach_flags(OP_WRITE, true),
						&b);
			if (!ret)
				ret = tf_session_expose(s, b, 0, len,
							TF_ACCESS_REMOTE_WRITE,
							&x);
		}
		if (!ret)
			ret = tf_session_establish(s);
		if (ret) {
			tf_session_close(s);
			thr_failed(t);
			continue;
		}
		i = t->nfree ? t->free_slot[--t->nfree] : (uint32_t)t->nslot++;
		/* A sleeping thread waits for the session's messages and
		 * completions on its fd, with everything else; it serves
		 * (and arms) the session at once, in this turn. */
		if (t->sv->o->server_sleep) {
			if (thr_watch(t, s, i)) {
				tf_session_close(s);
				t->free_slot[t->nfree++] = i;
				thr_failed(t);
				continue;
			}
			t->due[t->ndue++] = i;
			t->sess[i].due = true;
		}
		t->sess[i].s = s;
		t->sess[i].watched = false;
		t->sess[i].cold = false;
		t->sess[i].active_ns = now_ns();
		t->nsess++;
	}
	return true;
}

/* Every turn, the listener of the mode that runs; the other only when
 * its fd said so (a client's end of a kept connection): polling both
 * would slow every turn of the mode measured, as in crr's server. */
static bool thr_accept(struct lsrv_thr *t, const struct epoll_event *evs, int n)
{
	bool grant = load_modes[atomic_load_explicit(&t->sv->mode,
						     memory_order_acquire)]
			     .grant;
	bool fired[2] = {!grant, grant}, more;

	for (int i = 0; i < n; i++) {
		if (evs[i].data.u64 == TAG_LISTENER)
			fired[0] = true;
		else if (evs[i].data.u64 == TAG_GRANTING)
			fired[1] = true;
	}
	more = fired[0] && thr_accept_on(t, t->l);
	if (fired[1] && thr_accept_on(t, t->lg))
		more = true;
	return more;
}

/* Reap session slot @i (this is also the progress that the soft tcp
 * transport needs for the client's writes); a session the peer closed is
 * revoked and closed.  @arm (sleep): then arm its fd, and reap again as
 * long as the arm finds something, so that the thread may sleep after.
 * Whether it found anything (or closed the session). */
static bool thr_serve_one(struct lsrv_thr *t, uint32_t i, bool arm)
{
	tf_session_t *s = t->sess[i].s;
	struct tf_wc wc[16];
	bool got = false;
	int n, st;

	for (;;) {
		do {
			n = tf_session_poll(s, 16, wc);
			got = got || n > 0;
		} while (n > 0);
		st = tf_session_state(s);
		if (n < 0 || st == TF_SESSION_PEER_CLOSED ||
		    st == TF_SESSION_BROKEN)
			break;
		if (!arm)
			return got;
		n = tf_session_arm(s);
		if (n == 0)
			return got;
		if (n < 0)
			break;
	}
	/* Spin: out of the epoll set before close (the fd is the
	 * connection's, which a kept connection keeps open).  Sleep: the fd
	 * stays for the connection's next session (thr_watch). */
	if (t->sess[i].watched)
		epoll_ctl(t->epfd, EPOLL_CTL_DEL, tf_session_fd(s), NULL);
	if (t->sv->o->server_sleep) {
		int fd = tf_session_fd(s);

		if (fd >= 0 && (size_t)fd < t->nfds)
			t->fds[fd].slot = 0;
	}
	if (n < 0 || st == TF_SESSION_BROKEN || tf_session_revoke(s))
		thr_failed(t);
	tf_session_close(s);
	t->sess[i].s = NULL;
	t->sess[i].watched = t->sess[i].cold = false;
	t->free_slot[t->nfree++] = i;
	t->nsess--;
	return true;
}

/* Spin: session slot @i had nothing for COLD_NS: arm it and leave it to
 * the epoll set, unless the arm's look found something. */
static void thr_cool(struct lsrv_thr *t, uint32_t i)
{
	struct lsrv_sess *x = &t->sess[i];
	int fd;

	if (tf_session_arm(x->s))
		return; /* something came (or an error): served next turn */
	fd = tf_session_fd(x->s);
	if (fd < 0 || epoll_add(t->epfd, fd, TAG_SESS + 8 * (uint64_t)i))
		return;
	x->watched = x->cold = true;
}

/* Spin: every hot session, on every turn. */
static void thr_serve(struct lsrv_thr *t)
{
	uint64_t now = now_ns();

	for (uint32_t i = 0; i < t->nslot && t->nsess; i++) {
		struct lsrv_sess *x = &t->sess[i];

		if (!x->s || x->cold)
			continue;
		if (thr_serve_one(t, i, false))
			x->active_ns = now;
		else if (now - x->active_ns >= COLD_NS)
			thr_cool(t, i);
	}
}

/* Sleep: the sessions whose fd woke the thread, and the new ones; each
 * leaves armed (or closed). */
static void thr_serve_due(struct lsrv_thr *t)
{
	for (size_t k = 0; k < t->ndue; k++) {
		uint32_t i = t->due[k];

		t->sess[i].due = false;
		if (t->sess[i].s)
			thr_serve_one(t, i, true);
	}
	t->ndue = 0;
}

static void tcp_close(struct lsrv_tcp *c)
{
	close(c->fd); /* also leaves the epoll set */
	c->fd = -1;
}

/* One connection an event, as tollfree's listener takes them: an accept4
 * that finds the queue empty costs as much as one that does not, and the
 * listening socket stays readable in the epoll set while more wait. */
static int thr_tcp_accept(struct lsrv_thr *t)
{
	int fd = accept4(t->tcp_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	size_t i;

	if (fd < 0)
		return 0;
	for (i = 0; i < t->ntcp && t->tcp[i].fd >= 0; i++)
		;
	if (i == t->ntcp) {
		size_t cap = t->ntcp ? 2 * t->ntcp : 16;
		struct lsrv_tcp *n = realloc(t->tcp, cap * sizeof(*n));

		if (!n) {
			close(fd);
			return 0;
		}
		for (size_t j = t->ntcp; j < cap; j++)
			n[j].fd = -1;
		t->tcp = n;
		t->ntcp = cap;
	}
	sock_nodelay(fd, CRR_TIMEOUT_MS);
	t->tcp[i].fd = fd;
	t->tcp[i].got = 0;
	if (epoll_add(t->epfd, fd, TAG_TCP_CONN + 8 * (uint64_t)i)) {
		tcp_close(&t->tcp[i]);
		return -1;
	}
	return 0;
}

/* Echo every complete request of SIZE bytes; close at end of file.
 * @spin: the answer is busy-polled out, as the spinning client does. */
static void thr_tcp_echo(struct lsrv_thr *t, struct lsrv_tcp *c, bool spin)
{
	size_t size = t->sv->o->size;

	for (;;) {
		ssize_t n = recv(c->fd, t->echo + c->got, size - c->got,
				 MSG_DONTWAIT);
		int ret;

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			tcp_close(c);
			return;
		}
		c->got += (size_t)n;
		if (c->got < size)
			continue;
		c->got = 0;
		ret = spin ? sock_full_spin(c->fd, t->echo, size, true,
					    CRR_TIMEOUT_MS)
			   : sock_full(c->fd, t->echo, size, true,
				       CRR_TIMEOUT_MS);
		if (ret) {
			tcp_close(c);
			return;
		}
	}
}

/* Act on what epoll_wait reported: TCP accepts and echoes, and (sleep)
 * the sessions whose fd is readable, which are served after. */
static void thr_events(struct lsrv_thr *t, const struct epoll_event *evs, int n,
		       bool spin_echo)
{
	for (int k = 0; k < n; k++) {
		uint64_t tag = evs[k].data.u64;
		size_t i = tag / 8;

		if (tag == TAG_TCP_LFD) {
			if (thr_tcp_accept(t))
				thr_failed(t);
		} else if (tag % 8 == TAG_TCP_CONN && i < t->ntcp &&
			   t->tcp[i].fd >= 0) {
			thr_tcp_echo(t, &t->tcp[i], spin_echo);
		} else if (tag % 8 == TAG_SESS && i < t->nslot &&
			   t->sess[i].s && t->sess[i].cold) {
			/* Spin: a cold session's fd fired: hot again, and out
			 * of the set (its fd stays readable until the next
			 * arm). */
			struct lsrv_sess *x = &t->sess[i];

			epoll_ctl(t->epfd, EPOLL_CTL_DEL, tf_session_fd(x->s),
				  NULL);
			x->watched = x->cold = false;
			x->active_ns = now_ns();
		} else if (tag % 8 == TAG_CONN && i < t->nfds &&
			   t->fds[i].slot) {
			/* (A connection without a session fires for the
			 * listener: its next OPEN, or its end.) */
			uint32_t j = t->fds[i].slot - 1;

			if (!t->sess[j].due) {
				t->sess[j].due = true;
				t->due[t->ndue++] = j;
			}
		}
	}
}

/*
 * One server thread.  It spins (epoll_wait with no timeout, every
 * LOOK_NS while sessions are open) for tollfree and the spinning TCP
 * modes, and sleeps in epoll_wait for the blocking TCP modes.  While a
 * session is open the spinning thread keeps polling it: the soft tcp
 * transport moves the client's writes only when this side polls (or
 * while its CQ is armed), and a CLOSE on a kept connection's control QP
 * is found only by polling (as in crr's server).
 */
static void thr_spin(struct lsrv_thr *t)
{
	struct lsrv *sv = t->sv;
	struct epoll_event evs[32];
	uint64_t last_look = 0, yielded = 0;

	while (!atomic_load_explicit(&sv->stop, memory_order_acquire)) {
		const struct load_mode *md = &load_modes[atomic_load_explicit(
			&sv->mode, memory_order_acquire)];
		bool spin = md->kind == LK_TF || md->spin;
		int n;

		/* A spinning server gives way now and then, as its clients'
		 * waits do: 2 server threads that never yield would hold
		 * both CPUs of this host against 12 client threads. */
		bench_spin_pause(&yielded);

		if (t->nsess) {
			uint64_t now = now_ns();

			if (now - last_look < LOOK_NS)
				goto serve;
			last_look = now;
		}
		n = epoll_wait(t->epfd, evs, ARRAY_SIZE(evs),
			       spin || t->nsess ? 0 : -1);
		if (n < 0 && errno != EINTR) {
			fail("server: epoll_wait: %m");
			thr_failed(t);
			break;
		}
		/* Every turn (the running mode's listener), not only when
		 * the fd says so: a handshake
		 * whose bytes were already read must not wait for another
		 * event. */
		thr_accept(t, evs, n);
		thr_events(t, evs, n, md->spin);
	serve:
		thr_serve(t);
	}
}

/*
 * With --server-wait sleep, for every mode: the thread never spins.  It
 * sleeps in epoll_wait with no timeout on its listener's fd (new
 * connections, OPENs on kept connections: the listener arms their
 * control QPs), its TCP sockets, the kick (a mode change, the end) and
 * every open session's fd, each armed with tf_session_arm after it was
 * served (its completions, the client's CLOSE, the connection's end).
 * While a CQ is armed the provider makes the progress that the client's
 * writes need (the soft provider's waker).  Only the sessions whose fd
 * woke it are served, so a wake-up costs the same with one session open
 * or thousands.
 */
static void thr_sleep(struct lsrv_thr *t)
{
	struct lsrv *sv = t->sv;
	struct epoll_event evs[64];
	bool more = false;

	while (!atomic_load_explicit(&sv->stop, memory_order_acquire)) {
		/* No sleep while a listener may hold more than the last
		 * turn accepted. */
		int n = epoll_wait(t->epfd, evs, ARRAY_SIZE(evs),
				   more ? 0 : -1);

		if (n < 0 && errno != EINTR) {
			fail("server: epoll_wait: %m");
			thr_failed(t);
			break;
		}
		/* Every turn, as above; new sessions join the due list. */
		more = thr_accept(t, evs, n);
		thr_events(t, evs, n, false);
		thr_serve_due(t);
	}
}

static void *thr_main(void *arg)
{
	struct lsrv_thr *t = arg;

	if (t->sv->o->server_sleep)
		thr_sleep(t);
	else
		thr_spin(t);
	return NULL;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
		       1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
		       1000ull;
}

static uint64_t errors(const struct lsrv *sv)
{
	uint64_t e = 0;

	for (unsigned i = 0; i < sv->o->sthreads; i++)
		e += atomic_load_explicit(&sv->thr[i].errors,
					  memory_order_relaxed);
	return e;
}

static void kick(struct lsrv *sv)
{
	uint64_t one = 1;

	if (write(sv->kick, &one, sizeof(one)) < 0)
		fail("server: eventfd: %m");
}

/* Thread @i's listeners, on the ports of thread 0 (SO_REUSEPORT). */
static int thr_setup(struct lsrv *sv, unsigned i, uint16_t *port,
		     uint16_t *grant, uint16_t *tcp)
{
	const struct load_opts *o = sv->o;
	struct lsrv_thr *t = &sv->thr[i];
	tf_listener_params_t lp = {
		.field_mask = TF_LISTENER_PARAM_ADDR | TF_LISTENER_PARAM_FLAGS |
			      TF_LISTENER_PARAM_PORT |
			      TF_LISTENER_PARAM_BACKLOG,
		.addr = "127.0.0.1",
		.port = *port,
		.backlog = 1024,
	};
	int ret;

	/* As in crr: a spinning server's listener polls the control QPs
	 * of kept connections; a sleeping one arms them, so that its fd
	 * reports the next OPEN. */
	lp.flags = o->server_sleep ? 0 : TF_LISTENER_BUSY_POLL;
	if (o->sthreads > 1)
		lp.flags |= TF_LISTENER_REUSEPORT;
	t->sv = sv;
	t->tcp_lfd = t->epfd = -1;
	t->node = sv->node;
	if (o->server_node_per_thread) {
		ret = bench_open_ctx(o->cm.provider, o->cm.device,
				     o->cm.transport, &t->ctx);
		if (!ret)
			ret = node_for(t->ctx, R_POOLMW, o->size, &t->node);
		if (ret) {
			fail("server: a thread's node: %s", tf_strerror(ret));
			return ret;
		}
	}
	t->buf = map_buf((size_t)o->size * o->k);
	t->echo = malloc(o->size);
	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!t->buf || !t->echo || t->epfd < 0) {
		fail("server: out of memory or epoll: %m");
		return -ENOMEM;
	}
	ret = tf_listener_create(t->node, &lp, &t->l);
	if (ret) {
		fail("server: listener on port %u: %s", *port,
		     tf_strerror(ret));
		return ret;
	}
	*port = tf_listener_port(t->l);
	/* pool+mw/grant's: the same, granting each kept connection's next
	 * windows (K * SIZE bytes, writable) ahead, up to the bound. */
	lp.port = *grant;
	if ((size_t)o->size * o->k <= TF_LISTENER_MAX_GRANT_LEN) {
		lp.field_mask |= TF_LISTENER_PARAM_GRANT;
		lp.grant_len = (size_t)o->size * o->k;
		lp.grant_rights = TF_ACCESS_REMOTE_WRITE;
		lp.grant_depth = o->grant_depth;
	}
	ret = tf_listener_create(t->node, &lp, &t->lg);
	if (ret) {
		fail("server: granting listener on port %u: %s", *grant,
		     tf_strerror(ret));
		return ret;
	}
	*grant = tf_listener_port(t->lg);
	t->tcp_lfd = sock_listen_opt("127.0.0.1", *tcp, o->sthreads > 1, tcp);
	if (t->tcp_lfd < 0)
		return -EADDRINUSE;
	ret = sock_set_nonblock(t->tcp_lfd);
	if (!ret)
		ret = epoll_add(t->epfd, sv->kick, TAG_KICK);
	if (!ret)
		ret = epoll_add(t->epfd, tf_listener_fd(t->l), TAG_LISTENER);
	if (!ret)
		ret = epoll_add(t->epfd, tf_listener_fd(t->lg), TAG_GRANTING);
	if (!ret)
		ret = epoll_add(t->epfd, t->tcp_lfd, TAG_TCP_LFD);
	return ret;
}

static void thr_teardown(struct lsrv_thr *t)
{
	for (size_t i = 0; i < t->nslot; i++)
		tf_session_close(t->sess[i].s);
	free(t->sess);
	free(t->free_slot);
	free(t->due);
	free(t->fds);
	for (size_t i = 0; i < t->ntcp; i++)
		if (t->tcp[i].fd >= 0)
			close(t->tcp[i].fd);
	free(t->tcp);
	tf_listener_destroy(t->l);
	tf_listener_destroy(t->lg);
	if (t->tcp_lfd >= 0)
		close(t->tcp_lfd);
	if (t->epfd >= 0)
		close(t->epfd);
	if (t->buf)
		munmap(t->buf, (size_t)t->sv->o->size * t->sv->o->k);
	free(t->echo);
	if (t->ctx) {
		tf_node_destroy(t->node);
		tf_context_close(t->ctx);
	}
}

/*
 * Every client connects from 127.0.0.1, so the library's bounds per
 * client address are the run's: up to N * T sessions open at once, and
 * more closed by their client whose CLOSE this side has not read yet (a
 * busy host delays a server thread by many of a client's sessions), up
 * to N * T handshakes at once and as many idle kept connections.  Unless
 * the user set them, the bounds are raised, before the context is opened,
 * to a few times what the largest run (LOAD_MAX_CLIENTS *
 * LOAD_MAX_THREADS) holds at once: the same for every run, never below
 * the library's defaults, so that no session is refused for its address.
 * With --hog, the sessions' bound per address stays the library's default
 * (or the user's): the hog is there to meet it.
 */
static void set_bounds(const struct load_opts *o)
{
	static const char *const sessions[] = {
		"TOLLFREE_SESSION_MAX_SESSIONS_PEER",
		"TOLLFREE_SESSION_MAX_SESSIONS",
		"TOLLFREE_SESSION_MAX_PENDING_PEER",
		"TOLLFREE_SESSION_MAX_PENDING",
		"TOLLFREE_SESSION_MAX_KEPT_PEER",
		"TOLLFREE_SESSION_MAX_KEPT",
	};
	char v[16];

	snprintf(v, sizeof(v), "%u",
		 (unsigned)(4 * LOAD_MAX_CLIENTS * LOAD_MAX_THREADS));
	for (size_t i = o->hog ? 1 : 0; i < ARRAY_SIZE(sessions); i++)
		if (setenv(sessions[i], v, 0))
			fail("server: setenv %s: %m", sessions[i]);
}

static int ctl_reply(int ctl, struct load_ctl_rep *rep)
{
	return sock_full(ctl, rep, sizeof(*rep), true, CRR_TIMEOUT_MS);
}

int load_server(const struct load_opts *o, int ctl)
{
	struct lsrv sv = {.o = o, .kick = -1};
	struct load_ctl_rep rep = {0};
	struct load_ctl c;
	uint16_t port = 0, grant = 0, tcp = 0;
	unsigned started = 0, i;
	int ret = 0;

	/* Pinned only in the one-to-one shape, as crr pins (the second
	 * CPU); with many threads the scheduler places them. */
	if (o->sthreads == 1 && o->clients * o->threads == 1) {
		int a, b;

		pick_cpus(&a, &b);
		pin_to(b);
	}
	set_bounds(o);
	sv.thr = calloc(o->sthreads, sizeof(*sv.thr));
	sv.kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!sv.thr || sv.kick < 0) {
		fail("server: out of memory or eventfd: %m");
		ret = -ENOMEM;
		goto out;
	}
	if (!o->server_node_per_thread) {
		ret = bench_open_ctx(o->cm.provider, o->cm.device,
				     o->cm.transport, &sv.ctx);
		if (!ret)
			ret = node_for(sv.ctx, R_POOLMW, o->size, &sv.node);
	}
	for (i = 0; i < o->sthreads && !ret; i++)
		ret = thr_setup(&sv, i, &port, &grant, &tcp);
	for (i = 0; i < o->sthreads && !ret; i++, started++) {
		ret = -pthread_create(&sv.thr[i].tid, NULL, thr_main,
				      &sv.thr[i]);
		if (ret)
			fail("server: pthread_create: %s", strerror(-ret));
	}
	rep.status = ret;
	rep.port = port;
	rep.grant = grant;
	rep.tcp = tcp;
	if (ctl_reply(ctl, &rep) || ret)
		goto out;
	for (;;) {
		/* The parent's commands come at most seconds apart; it
		 * going away ends the server as QUIT does. */
		ret = sock_full(ctl, &c, sizeof(c), false, -1);
		if (ret || c.cmd == LCTL_QUIT)
			break;
		if (c.cmd == LCTL_MODE && c.arg < LOAD_NMODES) {
			atomic_store_explicit(&sv.mode, c.arg,
					      memory_order_release);
			kick(&sv);
		}
		rep.cpu_ns = cpu_ns();
		rep.errors = errors(&sv);
		ret = ctl_reply(ctl, &rep);
		if (ret)
			break;
	}
	ret = 0;
out:
	atomic_store_explicit(&sv.stop, true, memory_order_release);
	if (sv.kick >= 0)
		kick(&sv);
	for (i = 0; i < started; i++)
		pthread_join(sv.thr[i].tid, NULL);
	for (i = 0; sv.thr && i < o->sthreads; i++)
		if (sv.thr[i].sv)
			thr_teardown(&sv.thr[i]);
	free(sv.thr);
	tf_node_destroy(sv.node);
	tf_context_close(sv.ctx);
	if (sv.kick >= 0)
		close(sv.kick);
	return ret;
}
