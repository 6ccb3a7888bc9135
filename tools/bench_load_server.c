/* SPDX-License-Identifier: MIT */
/*
 * bench_load_server.c - the server of tollfree-bench load: one process,
 * one pool+mw node and S threads.  Each thread owns a tollfree listener
 * and a TCP echo listener, both bound to ports that the S threads share
 * (SO_REUSEPORT: the kernel spreads the connections), one epoll set, and
 * the sessions and TCP connections it accepted.  The process's main
 * thread answers the parent on the control socket: which mode runs, and
 * the CPU time the process has spent (getrusage), read before and after
 * each mode.
 */
#include <errno.h>
#include <pthread.h>
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

#define TAG_KICK     1
#define TAG_LISTENER 2
#define TAG_TCP_LFD  3
#define TAG_TCP_CONN 4 /* + 8 * index */

struct lsrv;

struct lsrv_tcp {
	int fd;
	size_t got; /* bytes of the current request */
};

struct lsrv_thr {
	struct lsrv *sv;
	pthread_t tid;
	tf_listener_t *l;
	int tcp_lfd, epfd;
	void *buf;	     /* the exposed K * SIZE bytes */
	uint8_t *echo;	     /* one TCP request */
	tf_session_t **sess; /* open sessions */
	size_t nsess, cap_sess;
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

/* Take the sessions waiting on the thread's listener and prepare each as
 * crr's server does: attach the buffer (a pool copy), expose K * SIZE
 * bytes for remote writes, then the deferred ACCEPT carries the key.  A
 * session that cannot be prepared is closed and counted, not fatal. */
static void thr_accept(struct lsrv_thr *t)
{
	const struct load_opts *o = t->sv->o;
	struct crr_opts co = {.k = o->k};
	tf_session_params_t sp = sess_params(&co, TF_SESSION_DEFER_ESTABLISH);
	size_t len = (size_t)o->size * o->k;
	tf_session_t *s;
	int b, x, ret;

	for (;;) {
		ret = tf_listener_accept(t->l, &sp, 0, &s);
		if (ret == -EAGAIN)
			return;
		if (ret) {
			/* A handshake that failed: its client counts it. */
			thr_failed(t);
			continue;
		}
		if (t->nsess == t->cap_sess) {
			size_t cap = t->cap_sess ? 2 * t->cap_sess : 16;
			tf_session_t **n = realloc(t->sess, cap * sizeof(*n));

			if (!n) {
				tf_session_close(s);
				thr_failed(t);
				continue;
			}
			t->sess = n;
			t->cap_sess = cap;
		}
		ret = tf_session_attach(s, t->buf, len,
					attach_flags(OP_WRITE, true), &b);
		if (!ret)
			ret = tf_session_expose(s, b, 0, len,
						TF_ACCESS_REMOTE_WRITE, &x);
		if (!ret)
			ret = tf_session_establish(s);
		if (ret) {
			tf_session_close(s);
			thr_failed(t);
			continue;
		}
		t->sess[t->nsess++] = s;
	}
}

/* Reap the open sessions (this is also the progress that the soft tcp
 * transport needs for the client's writes); a session the peer closed is
 * revoked and closed. */
static void thr_serve(struct lsrv_thr *t)
{
	for (size_t i = 0; i < t->nsess;) {
		tf_session_t *s = t->sess[i];
		struct tf_wc wc[16];
		int n, st;

		do {
			n = tf_session_poll(s, 16, wc);
		} while (n > 0);
		st = tf_session_state(s);
		if (n == 0 && st != TF_SESSION_PEER_CLOSED &&
		    st != TF_SESSION_BROKEN) {
			i++;
			continue;
		}
		if (n < 0 || st == TF_SESSION_BROKEN || tf_session_revoke(s))
			thr_failed(t);
		tf_session_close(s);
		t->sess[i] = t->sess[--t->nsess];
	}
}

static void tcp_close(struct lsrv_tcp *c)
{
	close(c->fd); /* also leaves the epoll set */
	c->fd = -1;
}

static int thr_tcp_accept(struct lsrv_thr *t)
{
	int fd;

	while ((fd = accept4(t->tcp_lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		size_t i;

		for (i = 0; i < t->ntcp && t->tcp[i].fd >= 0; i++)
			;
		if (i == t->ntcp) {
			size_t cap = t->ntcp ? 2 * t->ntcp : 16;
			struct lsrv_tcp *n = realloc(t->tcp, cap * sizeof(*n));

			if (!n) {
				close(fd);
				continue;
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

/*
 * One server thread.  It spins (epoll_wait with no timeout, every
 * LOOK_NS while sessions are open) for tollfree and the spinning TCP
 * modes, and sleeps in epoll_wait for the blocking TCP modes; with
 * --server-wait sleep it sleeps for every mode whenever it has no
 * tollfree session open.  While one is open it keeps polling it: the
 * soft tcp transport moves the client's writes only when this side
 * polls, and a CLOSE on a kept connection's control QP is found only by
 * polling (as in crr's server).
 */
static void *thr_main(void *arg)
{
	struct lsrv_thr *t = arg;
	struct lsrv *sv = t->sv;
	struct epoll_event evs[32];
	uint64_t last_look = 0;

	while (!atomic_load_explicit(&sv->stop, memory_order_acquire)) {
		const struct load_mode *md = &load_modes[atomic_load_explicit(
			&sv->mode, memory_order_acquire)];
		bool spin_mode = md->kind == LK_TF || md->spin;
		bool spin = !sv->o->server_sleep && spin_mode;
		uint64_t now = 0;
		int n;

		if (t->nsess) {
			now = now_ns();
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
		/* Every turn, not only when the fd says so: a handshake
		 * whose bytes were already read must not wait for another
		 * event. */
		thr_accept(t);
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			size_t c = (tag - TAG_TCP_CONN) / 8;

			if (tag == TAG_TCP_LFD) {
				if (thr_tcp_accept(t))
					thr_failed(t);
			} else if (tag >= TAG_TCP_CONN && c < t->ntcp &&
				   t->tcp[c].fd >= 0) {
				thr_tcp_echo(t, &t->tcp[c], md->spin && spin);
			}
		}
	serve:
		thr_serve(t);
	}
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
static int thr_setup(struct lsrv *sv, unsigned i, uint16_t *port, uint16_t *tcp)
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
	t->buf = map_buf((size_t)o->size * o->k);
	t->echo = malloc(o->size);
	t->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!t->buf || !t->echo || t->epfd < 0) {
		fail("server: out of memory or epoll: %m");
		return -ENOMEM;
	}
	ret = tf_listener_create(sv->node, &lp, &t->l);
	if (ret) {
		fail("server: listener on port %u: %s", *port,
		     tf_strerror(ret));
		return ret;
	}
	*port = tf_listener_port(t->l);
	t->tcp_lfd = sock_listen_opt("127.0.0.1", *tcp, o->sthreads > 1, tcp);
	if (t->tcp_lfd < 0)
		return -EADDRINUSE;
	ret = sock_set_nonblock(t->tcp_lfd);
	if (!ret)
		ret = epoll_add(t->epfd, sv->kick, TAG_KICK);
	if (!ret)
		ret = epoll_add(t->epfd, tf_listener_fd(t->l), TAG_LISTENER);
	if (!ret)
		ret = epoll_add(t->epfd, t->tcp_lfd, TAG_TCP_LFD);
	return ret;
}

static void thr_teardown(struct lsrv_thr *t)
{
	for (size_t i = 0; i < t->nsess; i++)
		tf_session_close(t->sess[i]);
	free(t->sess);
	for (size_t i = 0; i < t->ntcp; i++)
		if (t->tcp[i].fd >= 0)
			close(t->tcp[i].fd);
	free(t->tcp);
	tf_listener_destroy(t->l);
	if (t->tcp_lfd >= 0)
		close(t->tcp_lfd);
	if (t->epfd >= 0)
		close(t->epfd);
	if (t->buf)
		munmap(t->buf, (size_t)t->sv->o->size * t->sv->o->k);
	free(t->echo);
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
	uint16_t port = 0, tcp = 0;
	unsigned started = 0, i;
	int ret;

	/* Pinned only in the one-to-one shape, as crr pins (the second
	 * CPU); with many threads the scheduler places them. */
	if (o->sthreads == 1 && o->clients * o->threads == 1) {
		int a, b;

		pick_cpus(&a, &b);
		pin_to(b);
	}
	sv.thr = calloc(o->sthreads, sizeof(*sv.thr));
	sv.kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!sv.thr || sv.kick < 0) {
		fail("server: out of memory or eventfd: %m");
		ret = -ENOMEM;
		goto out;
	}
	ret = bench_open_ctx(o->cm.provider, o->cm.device, o->cm.transport,
			     &sv.ctx);
	if (!ret)
		ret = node_for(sv.ctx, R_POOLMW, o->size, &sv.node);
	for (i = 0; i < o->sthreads && !ret; i++)
		ret = thr_setup(&sv, i, &port, &tcp);
	for (i = 0; i < o->sthreads && !ret; i++, started++) {
		ret = -pthread_create(&sv.thr[i].tid, NULL, thr_main,
				      &sv.thr[i]);
		if (ret)
			fail("server: pthread_create: %s", strerror(-ret));
	}
	rep.status = ret;
	rep.port = port;
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
