/* SPDX-License-Identifier: MIT */
/*
 * session_signal: a signal interrupts a blocking tf_listener_accept, which
 * returns -EINTR (tf_listener_accept(3)), so that a server blocking with
 * a timeout of -1 can stop cleanly.  Before, the wait went on until its
 * timeout ended (-EAGAIN after 3 s with SIGALRM at 1 s; never with -1).
 */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "session_util.h"

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

int main(void)
{
	struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
	/* Repeating: a signal that lands while the call is not asleep in
	 * epoll_wait (it also makes progress between waits) interrupts
	 * nothing, as with any blocking call; the next one does. */
	struct itimerval it = {.it_value = {.tv_usec = 200000},
			       .it_interval = {.tv_usec = 100000}};
	struct itimerval off = {0};
	tf_context_t *ctx;
	tf_node_t *node;
	tf_listener_t *l;
	tf_session_t *s = NULL;
	int ret;

	tf_test_begin("session_signal");
	CHECK_OK(tf_context_open(NULL, &ctx));
	CHECK_OK(tf_node_create(ctx, NULL, &node));
	CHECK_OK(tf_listener_create(node, NULL, &l));
	CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
	CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
	ret = tf_listener_accept(l, NULL, -1, &s);
	CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
	CHECKF(ret == -EINTR, "accept returned %s after the signal",
	       tf_strerror(ret));
	CHECK(alarms >= 1 && s == NULL);
	tf_listener_destroy(l);
	tf_node_destroy(node);
	tf_context_close(ctx);
	return tf_test_end();
}
