/* SPDX-License-Identifier: MIT */
/*
 * session_listener_handover: a listener hands a kept connection to the
 * session that opened on it with the connection's descriptors still in
 * its epoll set, and takes them out at its next call (listener.c,
 * listener_hand_over).  What must hold:
 *
 *   round 0  a new connection: at the accept its socket is in the set
 *            if the listener waited for its HELLO there; kept at its
 *            close, its socket and control CQ are in the set.
 *   round 1  the next session on it wakes a server that sleeps in
 *            poll(2) on tf_listener_fd; after the accept the
 *            descriptors are still in the set, and the session ends
 *            before the listener's next call: the kept connection keeps
 *            them there, nothing added twice, nothing missing.
 *   round 2  the listener's next call after the accept (nothing to
 *            accept) takes them out of the set; the close puts them
 *            back.
 *   round 3  the session breaks (the client sends a malformed control
 *            message) while the descriptors are still in the set: the
 *            connection is destroyed, and first leaves the set.  The
 *            test holds a duplicate of its socket, so that a
 *            registration left behind would survive the close and name
 *            freed memory when the client's end makes it readable
 *            (AddressSanitizer's build reports that).
 *   round 4  a new connection again, kept.
 *   round 5  the listener is destroyed while a session it handed over
 *            is still open: its close then destroys the connection.
 */
#include <poll.h>
#include <sys/socket.h>
#include <sys/epoll.h>

#include "session_unit_util.h"

#define LEN 4096

/* Whether @fd is in the epoll set @epfd: EPOLL_CTL_MOD fails with ENOENT
 * otherwise (and changes nothing that matters here when it succeeds:
 * the listener's events are EPOLLIN, level-triggered). */
static bool in_set(int epfd, int fd, uint64_t data)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};

	if (!epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev))
		return true;
	CHECKF(errno == ENOENT, "epoll_ctl MOD: %s", strerror(errno));
	return false;
}

/* The listener's tag for a connection's control CQ (listener.c). */
#define EV_CQ 1ull

static void check_kept(struct tf_listener *li, struct tf_conn *c)
{
	CHECKF(li->n_idle == 1 && li->conns.next == c, "%u kept connections",
	       li->n_idle);
	CHECK(!c->unwatch_due && !li->unwatch);
	CHECK(c->sock_watched && c->ctl.ready && c->ctl_watched);
	CHECK(in_set(li->epfd, c->fd, (uint64_t)(uintptr_t)c));
	CHECK(in_set(li->epfd, tf_cq_fd(c->ctl.cq),
		     (uint64_t)(uintptr_t)c | EV_CQ));
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
	 * its socket became readable, the socket is, and stays there until
	 * the listener's next call. */
	if (c->unwatch_due) {
		CHECK(li->unwatch == c && c->sock_watched);
		CHECK(in_set(li->epfd, c->fd, (uint64_t)(uintptr_t)c));
	} else {
		CHECK(!li->unwatch && !c->sock_watched);
		CHECK(!in_set(li->epfd, c->fd, 0));
	}
	serve_kept(p, li, s, c);

	/* Round 1: asleep on the listener's descriptor. */
	pfd.fd = tf_listener_fd(l);
	pfd.events = POLLIN;
	CHECKF(poll(&pfd, 1, 4 * tf_test_timeout_ms()) == 1,
	       "the next OPEN did not wake the listener's fd");
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c);
	CHECK(c->unwatch_due && li->unwatch == c && !c->unwatch_next);
	CHECK(c->sock_watched && c->ctl_watched);
	CHECK(in_set(li->epfd, c->fd, (uint64_t)(uintptr_t)c));
	serve_kept(p, li, s, c);

	/* Round 2: the listener's next call comes first. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c);
	CHECK(c->unwatch_due && li->unwatch == c);
	CHECK(tf_listener_accept(l, NULL, 0, &s2) == -EAGAIN && !s2);
	CHECK(!c->unwatch_due && !li->unwatch);
	CHECK(!c->sock_watched && !c->ctl_watched);
	CHECK(!in_set(li->epfd, c->fd, 0));
	CHECK(!in_set(li->epfd, tf_cq_fd(c->ctl.cq), 0));
	serve_kept(p, li, s, c);

	/* Round 3: broken while handed over. */
	s = st_accept(l, 0);
	CHECK(tf_session_reused(s) && s->c == c && c->unwatch_due);
	dupfd = dup(c->fd);
	CHECK(dupfd >= 0);
	expose(s);
	CHECK(TOLERATED(st_serve(s)) == TF_SESSION_BROKEN);
	tf_session_close(s);
	CHECK(!li->unwatch && li->n_idle == 0);
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
	CHECK(tf_session_reused(s) && s->c == c && c->unwatch_due);
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
