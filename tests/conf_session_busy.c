/* SPDX-License-Identifier: MIT */
/*
 * conf_session_busy: a server that reads its new connections late (busy
 * serving, or descheduled) and finds more handshakes from one address
 * than TOLLFREE_SESSION_MAX_PENDING_PEER (2 here) refuses the newcomers
 * with -EBUSY, the documented error; it does not reset connections whose
 * HELLO already waits in their socket.
 *
 * Side A starts NTHR threads that connect at once, with a new connection
 * each; side B calls tf_listener_accept only once they are all under
 * way, so that every HELLO is in its socket, unread, when the listener
 * takes the connections.  Every connect must then succeed or fail with
 * -EBUSY, and at least the bound's worth succeed.  Before, the listener
 * took a connection it had not read yet for a silent one and dropped it
 * to make room for the next: its client got -ECONNRESET ("tollfree-bench
 * load" with 1,024 client threads against the default bounds saw nearly
 * every session fail so).
 */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "session_util.h"

#define NTHR	 8
#define PER_PEER 2

struct cli {
	tf_node_t *node;
	uint16_t port;
	pthread_barrier_t *go;
	pthread_t tid;
	int ret;
};

static void *cli_main(void *arg)
{
	struct cli *c = arg;
	tf_session_params_t sp = {.field_mask = TF_SESSION_PARAM_FLAGS,
				  .flags = TF_SESSION_NO_REUSE};
	tf_session_t *s = NULL;

	pthread_barrier_wait(c->go);
	c->ret = tf_session_connect(c->node, st_host(), c->port, &sp, &s);
	if (!c->ret)
		tf_session_close(s);
	return NULL;
}

static void client(struct tf_pair *p, tf_node_t *node, uint16_t port)
{
	struct cli c[NTHR];
	pthread_barrier_t go;
	int ok = 0, busy = 0;

	CHECK(pthread_barrier_init(&go, NULL, NTHR + 1) == 0);
	for (int i = 0; i < NTHR; i++) {
		c[i] = (struct cli){.node = node, .port = port, .go = &go};
		CHECK(pthread_create(&c[i].tid, NULL, cli_main, &c[i]) == 0);
	}
	pthread_barrier_wait(&go);
	/* The connects are under way: the server may start reading. */
	tf_test_send_u64(p, 1);
	for (int i = 0; i < NTHR; i++) {
		CHECK(pthread_join(c[i].tid, NULL) == 0);
		if (!c[i].ret)
			ok++;
		else if (c[i].ret == -EBUSY)
			busy++;
		else
			tf_test_fail(__FILE__, __LINE__,
				     "connect %d: %s (expected success or "
				     "-EBUSY)",
				     i, tf_strerror(c[i].ret));
	}
	tf_test_info("%d sessions opened, %d refused with -EBUSY", ok, busy);
	CHECKF(ok >= PER_PEER, "only %d of %d sessions opened", ok, NTHR);
	CHECK(pthread_barrier_destroy(&go) == 0);
	tf_test_send_u64(p, 2);
}

static void server(struct tf_pair *p, tf_listener_t *l)
{
	struct timespec late = {.tv_nsec = 300 * 1000000};
	tf_session_t *s;

	CHECK(tf_test_recv_u64(p) == 1);
	/* Busy elsewhere while the clients connect and say HELLO. */
	nanosleep(&late, NULL);
	for (;;) {
		struct pollfd pfd = {.fd = p->sock, .events = POLLIN};
		int ret = tf_listener_accept(l, NULL, 20, &s);

		if (ret == -EAGAIN) {
			if (poll(&pfd, 1, 0) == 1)
				break;
			continue;
		}
		CHECKF(ret == 0, "accept: %s", tf_strerror(ret));
		st_serve(s);
		tf_session_close(s);
	}
	CHECK(tf_test_recv_u64(p) == 2);
}

int main(void)
{
	struct tf_pair p;

	tf_test_begin("conf_session_busy");
	/* Read once, when the context opens. */
	setenv("TOLLFREE_SESSION_MAX_PENDING_PEER", "2", 1);
	tf_test_pair_open(&p);
	/* The refusals are logged by design. */
	tf_test_tolerate_log(true);
	return st_run(&p, server, client);
}
