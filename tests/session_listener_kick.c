/* SPDX-License-Identifier: MIT */
/*
 * session_listener_kick: a server that sleeps on tf_listener_fd() and
 * accepts one session per wake-up is not left asleep while a kept
 * connection's next OPEN waits.
 *
 * An OPEN that reaches a kept connection before its session closed on
 * the server is read into the connection's backlog (the server's close
 * takes in what came, tf__ctl_send), where no completion fd reports it:
 * the listener's kick (an eventfd in its set) does.  Two client threads
 * each close a session on its kept connection and open the next at once,
 * so that both OPENs wait in backlogs when the server closes the two
 * sessions (the test checks that they do).  The server then polls the
 * listener's fd and accepts once, twice: the fd must be readable both
 * times, also after the first accept served one of the two (a kick read
 * by the first accept used to hide the second OPEN until some other
 * event).  A spurious readiness (accept says -EAGAIN) is allowed and
 * polled again.  Whether the OPENs land before the server's closes is
 * timing: the round is tried again, with a longer wait, until they do
 * (TRIES), and the test fails if they never do.
 */
#include <poll.h>
#include <pthread.h>

#include "session_util.h"
#include "session_int.h"

#define NCONN 2
/* Rounds tried, until both OPENs wait in backlogs. */
#define TRIES 5

static void serve_close(tf_session_t *s)
{
	CHECK(st_serve(s) == TF_SESSION_PEER_CLOSED);
	tf_session_close(s);
}

/* Accept one session after the listener's fd said so (a readiness with
 * nothing to accept is polled again). */
static tf_session_t *accept_polled(tf_listener_t *l, int i)
{
	struct pollfd pfd = {.fd = tf_listener_fd(l), .events = POLLIN};
	int64_t end = st_now_ms() + 4 * (int64_t)tf_test_timeout_ms();
	tf_session_t *s = NULL;

	while (st_now_ms() < end) {
		int ret = poll(&pfd, 1, tf_test_timeout_ms());

		CHECK(ret >= 0);
		CHECKF(ret == 1,
		       "accept %d: the listener's fd is not readable "
		       "while an OPEN waits",
		       i);
		ret = tf_listener_accept(l, NULL, 0, &s);
		if (!ret)
			return s;
		CHECKF(ret == -EAGAIN, "accept %d: %s", i, tf_strerror(ret));
	}
	tf_test_fail(__FILE__, __LINE__, "no session accepted");
}

/* Round 1, once: whether both OPENs waited in backlogs this time. */
static bool server_round(struct tf_pair *p, tf_listener_t *l, int try)
{
	struct tf_listener *li = (struct tf_listener *)l;
	tf_session_t *s[NCONN];
	unsigned waiting = 0;

	for (int i = 0; i < NCONN; i++)
		s[i] = st_accept(l, 0);
	for (int i = 0; i < NCONN; i++)
		CHECK(st_serve(s[i]) == TF_SESSION_PEER_CLOSED);
	/* The next OPENs are sent right after those CLOSEs: let them land
	 * before this side's closes take them in (longer each try, for a
	 * loaded machine). */
	usleep(50000u << try);
	for (int i = 0; i < NCONN; i++)
		tf_session_close(s[i]);
	for (struct tf_conn *c = li->conns.next; c != &li->conns; c = c->next)
		waiting += c->hs == TF_CONN_IDLE && c->ctl.n_backlog > 0;
	tf_test_info("try %d: %u of %d kept connections hold their next "
		     "OPEN in the backlog",
		     try, waiting, NCONN);
	/* Readable either way: an OPEN not in a backlog is on the control
	 * CQ, whose fd the listener watches. */
	for (int i = 0; i < NCONN; i++)
		s[i] = accept_polled(l, i);
	/* Only now do the clients close: nothing else woke this side. */
	tf_test_send_u64(p, waiting == NCONN || try + 1 == TRIES);
	for (int i = 0; i < NCONN; i++)
		serve_close(s[i]);
	tf_test_sync(p);
	return waiting == NCONN;
}

static void server(struct tf_pair *p, tf_listener_t *l)
{
	tf_session_t *s[NCONN];
	bool arranged = false;

	/* Round 0: the two connections. */
	for (int i = 0; i < NCONN; i++)
		s[i] = st_accept(l, 0);
	for (int i = 0; i < NCONN; i++)
		serve_close(s[i]);
	tf_test_sync(p);
	for (int try = 0; try < TRIES && !arranged; try++)
		arranged = server_round(p, l, try);
	CHECKF(arranged,
	       "in %d tries, the two OPENs never both waited in backlogs",
	       TRIES);
}

struct cli {
	tf_node_t *node;
	uint16_t port;
	pthread_t thr;
	tf_session_t *next; /* open until the server accepted both */
};

/* Round 1 of one connection: a session, and the next right after it. */
static void *cli_round(void *arg)
{
	struct cli *c = arg;
	tf_session_t *s;

	CHECK_OK(tf_session_connect(c->node, st_host(), c->port, NULL, &s));
	CHECK(tf_session_reused(s));
	tf_session_close(s);
	CHECK_OK(tf_session_connect(c->node, st_host(), c->port, NULL,
				    &c->next));
	CHECK(tf_session_reused(c->next));
	return NULL;
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	struct cli c[NCONN];
	tf_session_t *s[NCONN];
	bool last = false;

	for (int i = 0; i < NCONN; i++)
		CHECK_OK(
			tf_session_connect(node, st_host(), port, NULL, &s[i]));
	for (int i = 0; i < NCONN; i++)
		tf_session_close(s[i]);
	tf_test_sync(p);
	while (!last) {
		for (int i = 0; i < NCONN; i++) {
			c[i] = (struct cli){.node = node, .port = port};
			CHECK(!pthread_create(&c[i].thr, NULL, cli_round,
					      &c[i]));
		}
		for (int i = 0; i < NCONN; i++)
			CHECK(!pthread_join(c[i].thr, NULL));
		last = tf_test_recv_u64(p);
		for (int i = 0; i < NCONN; i++)
			tf_session_close(c[i].next);
		tf_test_sync(p);
	}
}

int main(void)
{
	/* The clients wait for their answers longer than the server polls,
	 * so that a listener fd that stays asleep fails the poll's check. */
	tf_node_params_t np = {.field_mask = TF_NODE_PARAM_TIMEOUT};
	struct tf_pair p;
	tf_node_t *node;

	tf_test_begin("session_listener_kick");
	tf_test_pair_open(&p);
	np.timeout_ms = 4 * tf_test_timeout_ms();
	CHECK_OK(tf_node_create(p.ctx, &np, &node));
	st_stock_settle(node);
	if (p.side == TF_SIDE_B) {
		tf_listener_t *l;

		CHECK_OK(st_listen(node, &l));
		tf_test_send_u64(&p, tf_listener_port(l));
		server(&p, l);
		tf_listener_destroy(l);
	} else {
		client(&p, node, (uint16_t)tf_test_recv_u64(&p));
	}
	tf_test_sync(&p);
	tf_node_destroy(node);
	return tf_test_pair_end(&p);
}
