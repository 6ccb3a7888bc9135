/* SPDX-License-Identifier: MIT */
/*
 * session_listener_handover: a listener registers a connection's
 * descriptors in its epoll set one-shot, and leaves them there while a
 * session owns the connection (listener.c, watch_fd): an event disarms
 * its descriptor, the listener ignores one that names a session's
 * connection, and the session's close arms them again.  What must hold
 * (the registrations read from /proc/self/fdinfo, which shows whether
 * each is armed, without touching them):
 *
 *   round 0  a new connection: at the accept its socket is in the set,
 *            disarmed, if the listener waited for its HELLO there, and
 *            out of it otherwise; kept at its close, its socket and
 *            control CQ are in the set, once each, armed.
 *   round 1  the next session on it wakes a server that sleeps in
 *            poll(2) on tf_listener_fd: after the accept the control
 *            CQ is still in the set, disarmed by that event, and the
 *            socket armed; the close arms the CQ again, nothing added
 *            twice, nothing missing.
 *   round 2  the listener's next call after the accept (nothing to
 *            accept) leaves both where they are.
 *   round 3  the client ends the connection while its session is open:
 *            the socket's registration wakes the listener, whose call
 *            ignores the session's connection (the session still sees
 *            its end); the session breaks (a malformed control message
 *            came first) and the connection is destroyed, leaving the
 *            set first.  The test holds a duplicate of its socket, so
 *            that a registration left behind would survive the close
 *            and name freed memory (AddressSanitizer's build reports
 *            that).
 *   round 4  a new connection again, kept.
 *   round 5  the listener is destroyed while a session it handed over
 *            is still open: its close then destroys the connection.
 */
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/epoll.h>

#include "session_unit_util.h"

#define LEN 4096

/* The listener's tag for a connection's control CQ (listener.c). */
#define EV_CQ 1ull

/* How @fd is registered in the epoll set @epfd, from /proc/self/fdinfo:
 * -1 when it is not, 0 when it is once, with @data, disarmed (a one-shot
 * registration that reported its event), 1 when armed; a second
 * registration of the number (a stale one) fails the test. */
static int reg_state(int epfd, int fd, uint64_t data)
{
	char path[64], line[256];
	int found = -1, n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = fopen(path, "r");
	CHECKF(f, "%s: %s", path, strerror(errno));
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		/* "tfd: %8d events: %8x data: %16llx  pos:..." */
		const char *e = strstr(line, "events:");
		const char *dp = strstr(line, "data:");
		unsigned long long d;
		unsigned long ev;

		if (strncmp(line, "tfd:", 4) || !e || !dp ||
		    strtol(line + 4, NULL, 10) != fd)
			continue;
		ev = strtoul(e + 7, NULL, 16);
		d = strtoull(dp + 5, NULL, 16);
		n++;
		CHECKF(d == data, "fd %d registered with data %llx", fd, d);
		CHECKF(ev & EPOLLONESHOT, "fd %d not one-shot (%lx)", fd, ev);
		found = (ev & EPOLLIN) != 0;
	}
	fclose(f);
	CHECKF(n <= 1, "fd %d registered %d times", fd, n);
	return found;
}

static int sock_state(struct tf_listener *li, struct tf_conn *c)
{
	return reg_state(li->epfd, c->fd, (uint64_t)(uintptr_t)c);
}

static int ctl_state(struct tf_listener *li, struct tf_conn *c)
{
	return reg_state(li->epfd, tf_cq_fd(c->ctl.cq),
			 (uint64_t)(uintptr_t)c | EV_CQ);
}

static void check_kept(struct tf_listener *li, struct tf_conn *c)
{
	CHECKF(li->n_idle == 1 && li->conns.next == c, "%u kept connections",
	       li->n_idle);
	CHECK(c->sock_watched && c->sock_ev && c->ctl.ready && c->ctl_watched &&
	      c->ctl_ev);
	CHECK(sock_state(li, c) == 1);
	CHECK(ctl_state(li, c) == 1);
}

static void expose(tf_session_t *s)
{
	int b, x;

	CHECK_OK(tf_session_rent(s, LEN, &b, NULL));
	CHECK_OK(tf_session_expose(s, b, 0, LEN, TF_ACCESS_REMOTE_WRITE, &x));
}

/* Serve @s to the client's close; its connection @c is then kept. */
static void serve_kept(struct tf_pair *p, struct tf_listener *li,
		       tf_session_t *s, struct tf_conn *c)
{
	expose(s);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	check_kept(li, c);
	tf_test_sync(p);
}

static void server(struct tf_pair *p, tf_node_t *node)
{
	struct pollfd pfd;
	struct tf_listener *li;
	struct tf_conn *c;
	tf_listener_t *l;
	tf_session_t *s, *s2 = NULL;
	int dupfd;

	CHECK_OK(st_listen(node, &l));
	li = l;
	tf_test_send_u64(p, tf_listener_port(l));

	/* Round 0. */
	s = st_accept(l, 0);
	c = s->c;
	/* Its HELLO read at once, nothing of it is in the set; read when
	 * its socket reported, the socket is, disarmed. */
	if (c->sock_watched) {
		CHECK(!c->sock_ev && sock_state(li, c) == 0);
	} else {
		CHECK(sock_state(li, c) == -1);
	}
	serve_kept(p, li, s, c);

	/* Round 1: asleep on the listener's descriptor. */
	pfd.fd = tf_listener_fd(l);
	pfd.events = POLLIN;
	CHECKF(poll(&pfd, 1, 4 * tf_test_timeout_ms()) == 1,
	       "the next OPEN did not wake the listener's fd");
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c && c->hs == TF_CONN_BUSY);
	CHECK(c->sock_watched && c->sock_ev && sock_state(li, c) == 1);
	CHECK(c->ctl_watched && !c->ctl_ev && ctl_state(li, c) == 0);
	serve_kept(p, li, s, c);

	/* Round 2: the listener's next call comes first. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c);
	CHECK(tf_listener_accept(l, NULL, 0, &s2) == -EAGAIN && !s2);
	CHECK(c->sock_watched && c->ctl_watched);
	CHECK(sock_state(li, c) == 1 && ctl_state(li, c) >= 0);
	serve_kept(p, li, s, c);

	/* Round 3: the client's end while handed over. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c && sock_state(li, c) == 1);
	dupfd = dup(c->fd);
	CHECK(dupfd >= 0);
	expose(s);
	tf_test_sync(p); /* the client ends it */
	CHECKF(poll(&pfd, 1, 4 * tf_test_timeout_ms()) == 1,
	       "the client's end did not wake the listener's fd");
	CHECK(tf_listener_accept(l, NULL, 0, &s2) == -EAGAIN && !s2);
	CHECK(c->hs == TF_CONN_BUSY && s->c == c && li->n_idle == 0);
	CHECK(!c->sock_ev && sock_state(li, c) == 0);
	CHECK(TOLERATED(st_serve(s)) == TF_SESSION_BROKEN);
	tf_session_close(s);
	CHECK(li->n_idle == 0 && reg_state(li->epfd, dupfd, 0) == -1);
	tf_test_sync(p);
	/* The client's end makes the duplicate readable; a registration
	 * left behind would report it. */
	pfd.fd = dupfd;
	CHECKF(poll(&pfd, 1, 4 * tf_test_timeout_ms()) == 1,
	       "the client's end never came");
	CHECK(tf_listener_accept(l, NULL, 50, &s2) == -EAGAIN && !s2);
	close(dupfd);
	tf_test_sync(p); /* the client's next connect only now */

	/* Round 4: a new connection, kept. */
	s = st_accept(l, 0);
	c = s->c;
	serve_kept(p, li, s, c);

	/* Round 5: the listener goes first. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c);
	tf_listener_destroy(l);
	expose(s);
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
	tf_test_sync(p);
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	for (int r = 0; r < 6; r++) {
		tf_session_t *s;

		CHECK_OK(tf_session_connect(node, st_host(), port, NULL, &s));
		CHECKF(tf_session_reused(s) == (r != 0 && r != 4),
		       "round %d: reused %d", r, tf_session_reused(s));
		CHECK_OK(tf_session_wait_peer(s, 1, 4 * tf_test_timeout_ms()));
		if (r == 3) {
			/* The server holds a duplicate of the socket: its
			 * close sends no FIN, so this end goes first. */
			tf_test_sync(p);
			su_forge_expose(s, SU_FORGE_SHORT);
			CHECK_OK(shutdown(s->c->fd, SHUT_RDWR));
		}
		tf_session_close(s);
		tf_test_sync(p);
		if (r == 3)
			tf_test_sync(p);
	}
}

int main(void)
{
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("session_listener_handover");
	tf_test_pair_open(&p);
	node = st_node(&p, -1, NULL, 0);
	if (p.side == TF_SIDE_B)
		server(&p, node);
	else
		client(&p, node, (uint16_t)tf_test_recv_u64(&p));
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
